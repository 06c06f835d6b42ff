"""The slurmrestd contract: which data_parser each release is asked in, which endpoint
serves what, and how a ``scontrol update`` field becomes a request body. Pure: plain data
in, plain data out (the HTTP is in ``rest.py``).

slurmrestd serves each data_parser version under its own path (``/slurm/v0.0.42/jobs``);
a release ships a few and drops old ones. One is pinned per release, the same shape the
command-line contract reads (``contract.py``), and its answers are recorded in
tests/fixtures/slurm/<release>/rest_*.json:

- 22.05: ``v0.0.38`` (the newest it has; squeue --json there is the same shape).
- 24.11 and 26.05: ``v0.0.42`` (24.11 ships v0.0.40-42, 26.05 v0.0.42-45).

The job and node records are those of ``squeue --json`` / ``scontrol show node --json``,
so ``parse.py`` reads them; what differs is how updates are written:

- v0.0.38 (22.05) takes sbatch's option names (``"nodelist": "n1"``, ``"priority": "5"``,
  ``"time_limit": 3``) and has no key for AdminComment ("Unknown key \"admin_comment\"") nor
  a way to say OverSubscribe=no (``"oversubscribe": false`` leaves it as it was; recorded
  live): ``UNWRITABLE_V38`` names them and ``RestSource`` keeps the backend's AdminComment
  mark itself on that release;
- v0.0.40+ takes a ``job_desc_msg``: numbers as ``{"set": true, "number": N}``, host lists
  as lists, ``"shared": ["none"]``.

Both take ``{"hold": true}`` / ``{"hold": false}`` for ``scontrol hold`` / ``release``.

An answer without what is needed raises ``ParseError`` naming the release, the endpoint
and the field.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from .contract import Release, parse_release
from .parse import ParseError, SlurmJob, SlurmNode, _num, parse_jobs_json, parse_nodes_json
from .parse import digits, expand_hostlist

# The data_parser pinned per release (major, minor).
REST_PARSER: dict[tuple[int, int], str] = {
    (22, 5): "v0.0.38",
    (24, 11): "v0.0.42",
    (26, 5): "v0.0.42",
}
# Tried in this order to learn the release from a ping (newest pinned first).
PROBE_ORDER: tuple[str, ...] = ("v0.0.42", "v0.0.38", "v0.0.43", "v0.0.41", "v0.0.40",
                                "v0.0.39", "v0.0.44", "v0.0.45")

# ``scontrol update`` fields the backend writes, and nothing else.
UPDATE_FIELDS = frozenset({"AdminComment", "NodeList", "Dependency", "Priority", "TimeLimit",
                           "OverSubscribe"})
# ... and those v0.0.38 cannot write (the caller decides what to do instead).
UNWRITABLE_V38 = frozenset({"AdminComment", "OverSubscribe"})


def path(parser: str, endpoint: str, arg: str | int | None = None) -> str:
    """``/slurm/v0.0.42/jobs``, ``/slurm/v0.0.42/job/17``, ``/slurm/v0.0.42/partition/cosched``."""
    if not re.fullmatch(r"v0\.0\.[0-9]+", parser):
        raise ValueError(f"not a data_parser version: {parser!r}")
    base = f"/slurm/{parser}/{endpoint}"
    return base if arg is None else f"{base}/{arg}"


def release_of_ping(data: Mapping[str, Any], what: str) -> Release:
    """The release in a ping's ``meta`` (v0.0.38: ``meta.Slurm``; v0.0.40+: ``meta.slurm``)."""
    meta = data.get("meta") if isinstance(data, Mapping) else None
    slurm = (meta.get("slurm") or meta.get("Slurm")) if isinstance(meta, Mapping) else None
    rel = slurm.get("release") if isinstance(slurm, Mapping) else None
    if not isinstance(rel, str):
        raise ParseError(f"{what}: no field 'meta.slurm.release' in the answer "
                         f"(fields: {sorted(data) if isinstance(data, Mapping) else type(data).__name__})")
    return parse_release(rel)


def restd_plugins(rel: Release) -> tuple[str, ...]:
    """slurmrestd's ``-s`` for a cluster without slurmdbd: 22.05's default set includes the
    slurmdbd plugins, which stop it ("slurm not configured with slurmdbd")."""
    return ("openapi/v0.0.38",) if not rel.at_least(23, 2) else ("openapi/slurmctld",)


def pinned(rel: Release, probed: str) -> str:
    """The parser to use with ``rel``: the pinned one, else the one that answered the ping."""
    return REST_PARSER.get((rel.major, rel.minor), probed)


def answer_of(rel: Release, method: str, p: str) -> str:
    """How an error names an answer of slurmrestd."""
    return f"Slurm {rel.text} slurmrestd: `{method} {p}`"


def parse_rest_jobs(rel: Release, parser: str, text: str, endpoint: str = "jobs") -> list[SlurmJob]:
    return parse_jobs_json(text, answer_of(rel, "GET", path(parser, endpoint)))


def parse_rest_nodes(rel: Release, parser: str, text: str) -> list[SlurmNode]:
    return parse_nodes_json(text, answer_of(rel, "GET", path(parser, "nodes")))


def parse_partition_max_time(rel: Release, parser: str, data: Mapping[str, Any],
                             partition: str) -> float | None:
    """MaxTime in seconds (None: UNLIMITED): v0.0.40+ ``maximums.time``, v0.0.38
    ``max_time_limit`` (minutes)."""
    what = answer_of(rel, "GET", path(parser, "partition", partition))
    parts = data.get("partitions")
    if not isinstance(parts, list) or not parts or not isinstance(parts[0], Mapping):
        raise ParseError(f"{what}: no field 'partitions' with a record (fields: {sorted(data)})")
    p = next((x for x in parts if isinstance(x, Mapping) and x.get("name") == partition), None)
    if p is None:   # (another partition's limit would cap this one's walltime credit)
        names = [str(x.get("name"))[:40] for x in parts[:5] if isinstance(x, Mapping)]
        raise ParseError(f"{what}: no partition named {partition!r} in the answer (got {names})")
    if isinstance(p.get("maximums"), Mapping) and "time" in p["maximums"]:
        v = p["maximums"]["time"]
    elif "max_time_limit" in p:
        v = p["max_time_limit"]
    else:
        raise ParseError(f"{what}: partition {partition} without the field 'maximums.time' "
                         f"(fields: {', '.join(sorted(p))[:200]})")
    try:
        n = _num(v)
    except ParseError as exc:
        raise ParseError(f"{what}: partition {partition}'s MaxTime: {exc}") from None
    # v0.0.38 writes UNLIMITED as -1 (a 32-bit INFINITE read as signed)
    return None if n is None or n == math.inf or n < 0 else float(n) * 60.0


def _number(parser: str, n: int) -> Any:
    return n if parser == "v0.0.38" else {"set": True, "number": int(n), "infinite": False}


def update_body(parser: str, fields: Mapping[str, str], job: SlurmJob | None = None) -> dict:
    """The body of ``POST /slurm/V/job/ID`` doing what ``scontrol update JobId=ID
    K=V...`` does. ``TimeLimit=+M`` is relative on the command line; the REST API takes
    the new limit, so ``job`` (its current record) is needed then. On v0.0.38 the fields
    of ``UNWRITABLE_V38`` raise ValueError: the caller handles them first."""
    old = parser == "v0.0.38"
    body: dict[str, Any] = {}
    for key, value in fields.items():
        value = str(value)
        if key not in UPDATE_FIELDS:
            raise ValueError(f"slurmrestd update: field {key!r} is not one the backend writes "
                             f"({', '.join(sorted(UPDATE_FIELDS))})")
        if old and key in UNWRITABLE_V38:
            raise ValueError(f"slurmrestd update: data_parser v0.0.38 (Slurm 22.05) cannot "
                             f"write {key}")
        if key == "AdminComment":
            body["admin_comment"] = value
        elif key == "NodeList":
            hosts = list(expand_hostlist(value))
            if old:
                body["nodelist"] = ",".join(hosts)
            else:
                body["required_nodes"] = hosts
        elif key == "Dependency":
            body["dependency"] = value
        elif key == "Priority":
            if not digits(value):
                raise ValueError(f"slurmrestd update: Priority={value!r} is not a whole number")
            body["priority"] = value if old else _number(parser, int(value))
        elif key == "TimeLimit":
            m = re.fullmatch(r"(\+)?([0-9]+)", value)
            if not m:
                raise ValueError(f"slurmrestd update: TimeLimit={value!r} is not minutes or +minutes")
            minutes = int(m.group(2))
            if m.group(1):
                if job is None or not job.time_limit_s:
                    raise ValueError("slurmrestd update: TimeLimit=+M needs the job's current "
                                     "time limit")
                minutes += int(round(job.time_limit_s / 60.0))
            body["time_limit"] = _number(parser, minutes)
        elif key == "OverSubscribe":
            v = value.lower()
            if v not in ("no", "yes"):
                raise ValueError(f"slurmrestd update: OverSubscribe={value!r} is not yes or no")
            body["shared"] = ["none" if v == "no" else "oversubscribe"]
    return body


def hold_body(hold: bool) -> dict:
    """``scontrol hold`` / ``scontrol release`` as a body (the same in both shapes)."""
    return {"hold": bool(hold)}



__all__ = ["PROBE_ORDER", "REST_PARSER", "UPDATE_FIELDS", "answer_of", "hold_body", "parse_partition_max_time",
           "parse_rest_jobs", "parse_rest_nodes", "path", "pinned", "release_of_ping",
           "restd_plugins", "UNWRITABLE_V38", "update_body"]
