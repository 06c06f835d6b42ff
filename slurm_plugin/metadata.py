"""The opt-in metadata a user puts on a Slurm job, and what the backend keeps on it.

A user opts a job in by submitting it to the co-scheduling partition (``cosched`` unless
the site names it otherwise). The job may describe itself in ``--comment``::

    sbatch -p cosched -t 10 -c 4 \\
        --comment "cosched:class=montage/mProject,type=parallel,tasks=198,workflow=m1,stage=mProject" job.sh

Why a partition and ``--comment`` (docs/slurm.md says more): the partition is what an
admin already controls (who may use it with AllowAccounts/AllowGroups, its limits, and the
``OverSubscribe`` setting co-allocation needs lives there, so no job outside it is ever
shared); ``--comment`` is the one free-form job field every Slurm release has (``--extra``
arrived in 23.02, QOS needs slurmdbd) and users can set it without admin help.

Keys (all optional; unknown or repeated keys are refused):

==========  ==========================================================================
class       job class for the learner, e.g. ``montage/mProject`` (default: user/job name)
type        ``sequential`` or ``parallel`` (default: parallel when the job asks > 1 CPU)
tasks       number of tasks the job reports progress against (integer >= 1)
workflow    workflow id (letters, digits, ``_.:+-``)
stage       stage name (same characters)
walltime    seconds, a finer walltime than Slurm's minutes (<= the job's time limit);
            ASA_X measures a host's loss against it
==========  ==========================================================================

``job_submit.lua`` enforces the same grammar at submit time (the user sees its message on
``sbatch``'s stderr); ``parse_comment`` here reads it back and is tested against the same
cases, so the two cannot drift apart unnoticed.

The backend keeps its own bookkeeping in the job's ``AdminComment`` (only Slurm admins can
write it): ``cosched:v=1;quota=0.6`` on a host, ``cosched:v=1;host=123;quota=0.4`` on a
guest. It survives a controller restart and shows in ``squeue -O AdminComment``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coscheduler.model import InvalidInput, StageType, check_finite

PREFIX = "cosched:"
MAX_COMMENT = 1024
KEYS = ("class", "type", "tasks", "workflow", "stage", "walltime")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}\Z")
_CLASS_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,127}\Z")
_INT_RE = re.compile(r"^[0-9]{1,9}\Z")


class MetadataError(InvalidInput):
    """Malformed co-scheduling metadata; the message names the key and the problem."""


@dataclass(frozen=True)
class JobMetadata:
    """What a job says about itself (None: not given, the backend picks the default)."""

    job_class: str | None = None
    stage_type: StageType | None = None
    tasks: int | None = None
    workflow: str | None = None
    stage: str | None = None
    walltime_s: float | None = None


def has_metadata(comment: str | None) -> bool:
    return bool(comment) and comment.startswith(PREFIX)


def parse_comment(comment: str | None, time_limit_s: float | None = None) -> JobMetadata:
    """Parse ``cosched:key=value,...`` (the whole comment). A comment without the prefix
    carries no metadata. Raises MetadataError naming the bad key."""
    if not has_metadata(comment):
        return JobMetadata()
    assert comment is not None
    if len(comment) > MAX_COMMENT:
        raise MetadataError(f"cosched metadata is longer than {MAX_COMMENT} characters")
    body = comment[len(PREFIX):]
    if not body:
        raise MetadataError("cosched metadata is empty: write cosched:key=value,... "
                            f"with keys {', '.join(KEYS)}")
    seen: dict[str, str] = {}
    for item in body.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise MetadataError(f"cosched metadata item {item!r} is not key=value")
        if key not in KEYS:
            raise MetadataError(f"cosched metadata key {key!r} is unknown; valid keys: {', '.join(KEYS)}")
        if key in seen:
            raise MetadataError(f"cosched metadata key {key!r} is given twice")
        seen[key] = value
    out: dict = {}
    if "class" in seen:
        v = seen["class"]
        if not _CLASS_RE.match(v) or ".." in v.split("/"):
            raise MetadataError(f"cosched metadata class {v!r} is not valid: use 1-128 letters, "
                                "digits or '_.:/+-', starting with a letter or digit")
        out["job_class"] = v
    if "type" in seen:
        v = seen["type"]
        if v not in ("sequential", "parallel"):
            raise MetadataError(f"cosched metadata type must be sequential or parallel, got {v!r}")
        out["stage_type"] = StageType(v)
    if "tasks" in seen:
        v = seen["tasks"]
        if not _INT_RE.match(v) or int(v) < 1:
            raise MetadataError(f"cosched metadata tasks must be an integer >= 1, got {v!r}")
        out["tasks"] = int(v)
    for key in ("workflow", "stage"):
        if key in seen:
            v = seen[key]
            if not _NAME_RE.match(v):
                raise MetadataError(f"cosched metadata {key} {v!r} is not valid: use 1-64 "
                                    "letters, digits or '_.:+-', starting with a letter or digit")
            out[key] = v
    if "walltime" in seen:
        v = seen["walltime"]
        if not _INT_RE.match(v) or int(v) < 1:
            raise MetadataError(f"cosched metadata walltime must be whole seconds >= 1, got {v!r}")
        if time_limit_s is not None and int(v) > time_limit_s:
            raise MetadataError(f"cosched metadata walltime {v} s is longer than the job's "
                                f"time limit ({time_limit_s:g} s)")
        out["walltime_s"] = float(v)
    return JobMetadata(**out)


def format_comment(meta: JobMetadata) -> str:
    """The ``--comment`` value for ``meta`` (what ``cosched workload submit`` passes)."""
    items = []
    if meta.job_class is not None:
        items.append(f"class={meta.job_class}")
    if meta.stage_type is not None:
        items.append(f"type={StageType.parse(meta.stage_type, 'metadata').value}")
    if meta.tasks is not None:
        items.append(f"tasks={int(meta.tasks)}")
    if meta.workflow is not None:
        items.append(f"workflow={meta.workflow}")
    if meta.stage is not None:
        items.append(f"stage={meta.stage}")
    if meta.walltime_s is not None:
        items.append(f"walltime={int(round(meta.walltime_s))}")
    text = PREFIX + ",".join(items) if items else ""
    if text:
        parse_comment(text)  # never hand Slurm what the hook would refuse
    return text


_CLASS_BAD = re.compile(r"[^A-Za-z0-9_.:/+-]")


_DIGITS = re.compile(r"[0-9]+")


def default_class(user: str | None, job_name: str | None) -> str:
    """``user/jobname`` with characters a class cannot hold replaced by ``_``, and each run
    of digits in the job name by ``N``: ``run_12345`` and ``run_12346`` are one class
    (``alice/run_N``). Names that carry a run number or a date would otherwise make a class
    per job, which never learns and which the learner must hold (LearnerConfig.max_classes)."""
    name = _DIGITS.sub("N", job_name) if job_name else "job"
    raw = f"{user or 'user'}/{name}"
    text = _CLASS_BAD.sub("_", raw).strip("/")
    text = "/".join(p if p not in ("", ".", "..") else "_" for p in text.split("/"))
    if not text[:1].isalnum():
        text = "j" + text
    return text[:128]


# -- the backend's bookkeeping in AdminComment ------------------------------------------------

ADMIN_VERSION = "1"


@dataclass(frozen=True)
class AdminMark:
    """What the backend wrote on a job: its quota fraction and, for a guest, its host."""

    quota: float = 1.0
    host: str | None = None


def parse_admin_comment(text: str | None) -> AdminMark | None:
    """Read ``cosched:v=1;quota=Q[;host=ID]``; None when the job carries no mark (or a
    mark this version cannot read, which is treated as none: full quota, no host)."""
    if not text or not text.startswith(PREFIX):
        return None
    fields = {}
    for item in text[len(PREFIX):].split(";"):
        k, sep, v = item.partition("=")
        if sep:
            fields[k] = v
    if fields.get("v") != ADMIN_VERSION:
        return None
    try:
        quota = check_finite(float(fields.get("quota", "1")), "quota")
    except (ValueError, InvalidInput):
        return None
    if quota is None or not 0.0 < quota <= 1.0:
        return None
    host = fields.get("host") or None
    if host is not None and not (host.isascii() and host.isdigit()):
        return None
    return AdminMark(quota, host)


def format_admin_comment(mark: AdminMark) -> str:
    text = f"{PREFIX}v={ADMIN_VERSION};quota={mark.quota:.4f}"
    if mark.host is not None:
        text += f";host={mark.host}"
    return text


__all__ = ["AdminMark", "JobMetadata", "KEYS", "MetadataError", "PREFIX", "default_class",
           "format_admin_comment", "format_comment", "has_metadata", "parse_admin_comment",
           "parse_comment"]
