"""The Mesos framework's job queue on disk: a spool folder that any program can submit to.

Mesos has no queue of its own (it offers resources; the framework decides what to run), so
jobs for ``cosched run --backend mesos`` wait in a folder:

    QUEUE/new/<seq>-<job id>.json      submitted, not yet read by the framework
    QUEUE/active/<seq>-<job id>.json   read: queued or running in the framework
    QUEUE/done/<job id>.json           ended: the job and its final outcome
    QUEUE/rejected/<name>              unusable, with <name>.error saying why

Each file holds one job object (the fields of ``docs/mesos.md``: ``job_id``, ``cores``,
``walltime_s``, ``job_class``, ``command`` as a list of strings, optionally ``nodes``,
``mem_mb``, ``depends_on``, ...). Writers create a file under a dot name and rename it
into ``new/`` (``submit``), so a reader never sees half a file. ``<seq>`` (nanoseconds)
keeps the submission order: a stage is read after the stages it depends on.

A restarted framework takes back what is in ``active/`` (``JobQueue.recover``): jobs that
still ran are adopted through the framework's failover state, the others run again. A job
whose outcome is ``requeued`` stays active (it will run again); every other outcome moves it
to ``done/``. Records in ``done/`` and ``rejected/`` are removed a week after they were
written (``JobQueue.prune``, about hourly), except the records of jobs that a job still in
``active/`` depends on: a restarted framework reads those.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from coscheduler import boundedjson
from coscheduler.oldfiles import Retention, prune_old_files
from coscheduler.model import InvalidInput, Job, Outcome, validate_job_id

log = logging.getLogger("mesos_framework.queue")

JOB_FIELDS = frozenset({"job_id", "cores", "walltime_s", "job_class", "submit_time", "stage_type",
                        "tasks", "nodes", "workflow", "depends_on", "mem_mb", "user", "command"})
QUEUE_ENV = "COSCHED_MESOS_QUEUE"
# Files in the queue folder are written by anyone who may submit: each is read bounded
# (coscheduler/boundedjson.py), a bad one is set aside in rejected/ and the rest go on.
MAX_FILE_BYTES = 1 << 20          # one job; its command line included
MAX_JOB_DEPTH = 8                 # a job object is 2 deep (its command list), a list of them 3
# --queue-file: a whole workload at start, ~340 bytes a job: 64 MB is ~200k jobs
QUEUE_FILE_MB_ENV = "COSCHED_QUEUE_FILE_MAX_MB"
DEFAULT_QUEUE_FILE_MB = 64
# What the prune may remove: done/'s records and a killed writer's temporary files; in
# rejected/ every file (the set-aside job and its .error).
_DONE_FILES = re.compile(r"[^/]+\.json|\.[^/]+\.tmp-\d+")
_REJECTED_FILES = re.compile(r"[^/]+")


def job_to_dict(job: Job) -> dict[str, Any]:
    return {"job_id": job.job_id, "cores": job.cores, "nodes": job.nodes,
            "walltime_s": job.walltime_s, "job_class": job.job_class,
            "submit_time": job.submit_time, "stage_type": job.stage_type.value,
            "tasks": job.tasks, "workflow": job.workflow, "depends_on": list(job.depends_on),
            "mem_mb": job.mem_mb, "user": job.user, "command": list(job.command)}


# The fields a Job cannot be made without (no default in model.Job).
_REQUIRED_FIELDS = tuple(f.name for f in dataclasses.fields(Job)
                         if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def job_from_dict(item: Any, where: str) -> Job:
    """A Job from its JSON object; InvalidInput naming ``where`` and the field otherwise."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where} is not a JSON object")
    unknown = sorted(set(item) - JOB_FIELDS)
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {unknown}; known: {sorted(JOB_FIELDS)}")
    cmd = item.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
        raise InvalidInput(f"{where}: command must be a non-empty list of strings")
    missing = sorted(k for k in _REQUIRED_FIELDS if item.get(k) is None)
    if missing:
        raise InvalidInput(f"{where}: missing field(s) {missing}")
    deps = item.get("depends_on") or []
    if not isinstance(deps, list):
        raise InvalidInput(f"{where}: depends_on must be a list of job ids")
    fields = {k: v for k, v in item.items() if v is not None or k in ("job_id", "cores")}
    try:
        return Job(**{**fields, "command": tuple(cmd), "depends_on": tuple(deps)})
    except TypeError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def queue_file_cap() -> int:
    """--queue-file's size cap in bytes: $COSCHED_QUEUE_FILE_MAX_MB, else 64 MB."""
    raw = os.environ.get(QUEUE_FILE_MB_ENV, "").strip()
    if not raw:
        return DEFAULT_QUEUE_FILE_MB << 20
    try:
        mb = float(raw)
    except ValueError:
        mb = float("nan")
    if not 0 < mb < 1 << 20:
        raise InvalidInput(f"${QUEUE_FILE_MB_ENV}={raw[:40]!r}: expected a size in MB, above 0")
    return int(mb * (1 << 20))


def read_queue_file(path: str | os.PathLike, max_bytes: int | None = None) -> list[Job]:
    """Jobs from a JSON file: a list of job objects, or one object per line (JSON lines);
    at most ``max_bytes`` (``queue_file_cap()``), read in pieces, never more."""
    cap = queue_file_cap() if max_bytes is None else max_bytes
    where = f"queue file {path}"
    try:
        raw = boundedjson.read_file(path, cap, where)
    except FileNotFoundError:
        raise InvalidInput(f"{where}: no such file") from None
    except boundedjson.JSONUnusable as exc:
        hint = f" (a larger file: set ${QUEUE_FILE_MB_ENV})" if "bytes" in str(exc) else ""
        raise InvalidInput(f"{exc}{hint}") from None
    try:
        if raw.lstrip().startswith(b"["):
            items = boundedjson.loads(raw, max_bytes=cap, max_depth=MAX_JOB_DEPTH, what=where)
        else:
            items = [boundedjson.loads(line, max_bytes=cap, max_depth=MAX_JOB_DEPTH,
                                       what=f"{where}: line {i + 1}")
                     for i, line in enumerate(raw.splitlines()) if line.strip()]
    except boundedjson.JSONUnusable as exc:
        raise InvalidInput(str(exc)) from None
    if not isinstance(items, list):
        raise InvalidInput(f"{where}: not a list of job objects")
    return [job_from_dict(item, f"{where}: job {i + 1}") for i, item in enumerate(items)]


def default_queue_dir(db: Path | None = None) -> Path:
    """$COSCHED_MESOS_QUEUE, else beside the state database (``state.db`` ->
    ``state.mesos-queue``)."""
    env = os.environ.get(QUEUE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    if db is None:
        from coscheduler.store import default_db_path
        db = default_db_path()
    return Path(db).expanduser().with_suffix(".mesos-queue")


@dataclass(frozen=True)
class Taken:
    job: Job
    name: str      # file name under active/


class JobQueue:
    """See the module docstring. One reader (the framework); any number of writers."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.new, self.active = self.root / "new", self.root / "active"
        self.done, self.rejected = self.root / "done", self.root / "rejected"
        self._names: dict[str, str] = {}     # job id -> its file name under active/
        self._needs: dict[str, tuple[str, ...]] = {}   # job id in active/ -> its depends_on
        self.refused = 0                     # files set aside in rejected/ by this reader
        self.retention = Retention()         # of done/ and rejected/ (``prune``)

    def ensure(self) -> "JobQueue":
        for d in (self.new, self.active, self.done, self.rejected):
            d.mkdir(parents=True, exist_ok=True)
        return self

    # -- writers ------------------------------------------------------------------------------
    def submit(self, jobs: Iterable[Job]) -> list[Path]:
        """Put jobs in ``new/`` in order (each file appears whole, by rename)."""
        self.ensure()
        out = []
        for job in jobs:
            name = f"{time.time_ns():020d}-{job.job_id}.json"
            tmp = self.new / f".{name}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(job_to_dict(job)))
            os.replace(tmp, self.new / name)
            out.append(self.new / name)
        return out

    # -- the reader -----------------------------------------------------------------------------
    def take(self) -> list[Job]:
        """Jobs that arrived in ``new/`` since the last call, oldest first, moved to
        ``active/``. Unusable files go to ``rejected/`` with the reason (logged)."""
        try:
            names = sorted(n for n in os.listdir(self.new) if n.endswith(".json") and not n.startswith("."))
        except FileNotFoundError:
            return []
        return [t.job for t in (self._take_one(n) for n in names) if t is not None]

    def recover(self) -> list[Job]:
        """After a restart: the jobs left in ``active/`` (oldest first)."""
        try:
            names = sorted(n for n in os.listdir(self.active) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            try:
                job = self._read(self.active / n)
            except FileNotFoundError:
                continue
            except InvalidInput as exc:
                self._reject(self.active / n, str(exc))
                continue
            self._names[job.job_id] = n
            self._needs[job.job_id] = tuple(job.depends_on)
            out.append(job)
        return out

    def finish(self, outcome: Outcome) -> None:
        """A job ended for good: ``active/`` -> ``done/<job id>.json`` with its outcome."""
        if outcome.state == "requeued":
            return
        name = self._names.pop(outcome.job_id, None)
        self._needs.pop(outcome.job_id, None)
        if name is None:
            return
        src = self.active / name
        try:
            data = boundedjson.load_file(src, max_bytes=MAX_FILE_BYTES, max_depth=MAX_JOB_DEPTH)
        except (OSError, ValueError):
            data = {"job_id": outcome.job_id}
        record = {"job": data, "outcome": {"state": outcome.state, "reason": outcome.reason,
                                           "start": outcome.start_time, "end": outcome.end_time,
                                           "finished_at": time.time()}}
        try:
            self.done.mkdir(parents=True, exist_ok=True)
            tmp = self.done / f".{outcome.job_id}.tmp-{os.getpid()}"
            tmp.write_text(json.dumps(record))
            os.replace(tmp, self.done / f"{outcome.job_id}.json")
            src.unlink(missing_ok=True)
        except OSError as exc:
            log.error("job queue %s: recording the end of %s failed: %s", self.root, outcome.job_id, exc)

    def forget(self, job_id: str, reason: str) -> None:
        """A job the framework refused (say, a duplicate id): out of ``active/``, rejected."""
        name = self._names.pop(job_id, None)
        self._needs.pop(job_id, None)
        if name is not None:
            self._reject(self.active / name, reason)

    def prune(self, now: float | None = None) -> int | None:
        """If due (``retention``: hourly), remove the ``done/`` and ``rejected/`` files
        older than a week, but the ``done/`` records of jobs that jobs in ``active/``
        depend on. Returns how many went (None: not due)."""
        def prune(before: float) -> int:
            needed = {f"{d}.json" for deps in self._needs.values() for d in deps}
            n = prune_old_files(self.done, before, _DONE_FILES, keep=needed, what="done record")
            n += prune_old_files(self.rejected, before, _REJECTED_FILES, what="rejected file")
            if n:
                log.info("job queue %s: removed %d records older than %g days", self.root, n,
                         self.retention.kept_s / 86400)
            return n
        return self.retention.run(prune, now)

    def _take_one(self, name: str) -> Taken | None:
        src = self.new / name
        try:
            job = self._read(src)
        except FileNotFoundError:
            return None
        except InvalidInput as exc:
            self._reject(src, str(exc))
            return None
        if job.job_id in self._names:
            self._reject(src, f"job id {job.job_id} is already queued or running")
            return None
        try:
            self.active.mkdir(parents=True, exist_ok=True)
            os.replace(src, self.active / name)
        except OSError as exc:
            log.error("job queue %s: cannot take %s: %s", self.root, name, exc)
            return None
        self._names[job.job_id] = name
        self._needs[job.job_id] = tuple(job.depends_on)
        return Taken(job, name)

    def _read(self, path: Path) -> Job:
        """The job in one queue file; InvalidInput (the file is set aside) when it is not a
        regular file, is over MAX_FILE_BYTES, nested deeper than MAX_JOB_DEPTH or not a job.
        FileNotFoundError passes through: another reader took it."""
        try:
            item = boundedjson.load_file(path, max_bytes=MAX_FILE_BYTES, max_depth=MAX_JOB_DEPTH)
        except boundedjson.JSONUnusable as exc:
            raise InvalidInput(str(exc)) from None
        return job_from_dict(item, str(path))

    def _reject(self, src: Path, reason: str) -> None:
        self.refused += 1
        log.error("job queue: %s", reason)
        try:
            self.rejected.mkdir(parents=True, exist_ok=True)
            os.replace(src, self.rejected / src.name)
            (self.rejected / (src.name + ".error")).write_text(reason + "\n")
        except OSError as exc:
            log.error("job queue %s: cannot set %s aside: %s", self.root, src.name, exc)


def check_queue_dir(path: str | os.PathLike) -> Path:
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise InvalidInput(f"job queue {p} is not a folder")
    return p


__all__ = ["JOB_FIELDS", "JobQueue", "QUEUE_ENV", "QUEUE_FILE_MB_ENV", "check_queue_dir",
           "default_queue_dir", "job_from_dict", "job_to_dict", "queue_file_cap", "read_queue_file",
           "validate_job_id"]
