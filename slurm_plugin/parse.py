"""Reading Slurm's answers: squeue/sinfo/scontrol JSON of any release, and scontrol text.

Pure functions from text to plain records (``SlurmJob``, ``SlurmNode``), with no version
checks: each field is read from wherever the answer has it. Two JSON shapes are known
from recorded real output (tests/fixtures/slurm/):

- Slurm 22.05 (openapi v0.0.38): ``job_state`` is a string, numbers are plain integers,
  ``exit_code`` is a raw wait status, ``shared`` is ``"shared"`` or null, the per-node
  layout as a map of allocated cores (no CPU counts: scaled to the job's CPUs);
  ``sinfo --json`` lists nodes with ``state`` a lower-case string.
- Slurm 24.11 (data_parser v0.0.42): ``job_state`` is a list of flags, numbers are
  ``{"set", "infinite", "number"}``, ``exit_code`` is ``{"status", "return_code", "signal"}``,
  ``shared`` a list (``["oversubscribe"]``), ``job_resources`` holds the per-node CPUs;
  ``sinfo --json`` aggregates nodes (use ``scontrol show node --json``, whose ``state`` is a
  list).

When a release has no JSON (before 21.08), ``scontrol show job -o -d`` and
``scontrol show node -o`` are parsed instead (``parse_scontrol_jobs``/``parse_scontrol_nodes``).
A malformed answer raises ``ParseError`` naming what was wrong. The jobcomp log's lines
are read in jobcomp.py with this module's helpers.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from coscheduler import boundedjson, hostlist
from coscheduler.model import InvalidInput

# Slurm's "no value" / "infinite" markers in 32-bit fields.
_NO_VAL32 = 0xFFFFFFFE
_INFINITE32 = 0xFFFFFFFF

TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
    "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED",
})
ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING",
                           "REQUEUED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})
# Node states (base or flag) under which nothing new should be placed on a node.
UNUSABLE_NODE = frozenset({"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING",
                           "NOT_RESPONDING", "MAINTENANCE", "MAINT", "POWERED_DOWN", "POWER_DOWN",
                           "POWERING_DOWN", "REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED",
                           "FUTURE", "UNKNOWN", "INVALID", "INVALID_REG", "CLOUD"})


class ParseError(InvalidInput):
    """An answer from Slurm could not be understood; the message says what and where."""


class ReportedErrors(ParseError):
    """Slurm's JSON answer carried only its ``errors`` (22.05's squeue and sinfo answer so,
    exit status 0, 'Unspecified error', when slurmctld does not answer)."""


@dataclass(frozen=True)
class SlurmJob:
    """A Slurm job as the backend needs it (every field optional where Slurm may omit it)."""

    job_id: int
    name: str = ""
    user: str | None = None
    uid: int | None = None
    partition: str = ""
    state: str = "UNKNOWN"              # base state, upper case
    state_flags: tuple[str, ...] = ()
    reason: str = ""
    priority: int | None = None
    nodes: tuple[str, ...] = ()
    node_count: int | None = None
    max_nodes: int | None = None        # what a pending job asked for (22.05's node_count
                                        # of a pending job is not reliable)
    cpus: int | None = None
    time_limit_s: float | None = None   # None: unlimited or unknown
    submit_time: float | None = None
    eligible_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    comment: str = ""
    admin_comment: str = ""
    dependency: str = ""
    shared: bool | None = None          # may share cores (--oversubscribe)
    required_nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0
    cpus_by_node: tuple[tuple[str, int], ...] | None = None
    batch_host: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def held(self) -> bool:
        """Pending with priority 0: held (by a user, an admin or the submit hook)."""
        return self.state == "PENDING" and self.priority == 0


@dataclass(frozen=True)
class SlurmNode:
    name: str
    cpus: int
    state: str                          # base state, upper case
    flags: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    alloc_cpus: int | None = None
    reason: str = ""

    @property
    def usable(self) -> bool:
        """Up and accepting work (not down, drained, failing or not responding)."""
        return self.state not in UNUSABLE_NODE and not (set(self.flags) & UNUSABLE_NODE)


# -- small readers -----------------------------------------------------------------------------

def digits(s: str) -> bool:
    """``s`` is ASCII digits only, at most 20 of them (Slurm's widest numbers are 64-bit).
    ``str.isdigit`` also takes '²' (which ``int`` refuses) and '٣' (which it reads as 3);
    Slurm prints neither, but a user's job name or comment may. A longer run of digits is
    no Slurm number (and ``int`` refuses more than 4,300 of them with a ValueError)."""
    return len(s) <= 20 and s.isascii() and s.isdigit()


# Slurm's widest fields are 64-bit: a larger number is no Slurm value.
_MAX_MAGNITUDE = 2 ** 64
_NUMBER = re.compile(r"-?[0-9]{1,20}(?:\.[0-9]{1,20})?")


def _num(v: Any) -> float | int | None:
    """A number from either shape: plain, or {"set", "infinite", "number"}. None when
    unset; math.inf when infinite (or one of Slurm's 32-bit no-value markers). NaN,
    infinities and numbers beyond 64 bits are a ParseError (JSON readers accept them)."""
    if isinstance(v, dict):
        for flag in ("infinite", "set"):
            if flag in v and not isinstance(v[flag], bool):   # ("false" is truthy)
                raise ParseError(f"number {str(v)[:80]}: {flag!r} must be true or false")
        if v.get("infinite"):
            return math.inf
        if not v.get("set", True):
            return None
        v = v.get("number")
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, str) and _NUMBER.fullmatch(v):
        v = float(v) if "." in v else int(v)
    if isinstance(v, (int, float)):
        if v in (_NO_VAL32, _INFINITE32):
            return math.inf
        if not math.isfinite(v) or abs(v) > _MAX_MAGNITUDE:
            raise ParseError(f"expected a finite number within 64 bits, got {v!r}")
        return v
    raise ParseError(f"expected a number, got {str(v)[:40]!r}")


def _int(v: Any) -> int | None:
    n = _num(v)
    if n is None or n == math.inf:
        return None
    if isinstance(n, float) and not n.is_integer():
        raise ParseError(f"expected a whole number, got {n!r}")
    return int(n)


def _epoch(v: Any) -> float | None:
    n = _num(v)
    return None if n is None or n == math.inf or n <= 0 else float(n)


def _str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, list) and all(isinstance(x, (str, int)) for x in v):
        return ",".join(map(str, v))
    if isinstance(v, (dict, list)):
        raise ParseError(f"expected text, got {str(v)[:40]!r}")
    return str(v)


def _names(v: Any) -> tuple[str, ...]:
    """A list of names (partitions, node flags); one string is one name or a comma list."""
    if v is None:
        return ()
    if isinstance(v, str):
        return tuple(x for x in re.split(r"[+ ,]", v) if x)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise ParseError(f"expected a list of names, got {str(v)[:40]!r}")


def _states(v: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(v, list):
        items = [str(x).upper() for x in v if x]
    elif isinstance(v, str):
        items = [x for x in re.split(r"[+ ,]", v.upper()) if x]
    else:
        items = []
    if not items:
        return "UNKNOWN", ()
    return items[0].rstrip("*~#!%$@^-"), tuple(items[1:])


def expand_hostlist(text: str | None) -> tuple[str, ...]:
    """``rn[1-3,5],gpu01`` -> (rn1, rn2, rn3, rn5, gpu01); zero padding is kept
    (``coscheduler.hostlist``; ParseError when malformed or longer than any cluster)."""
    if not text or text in ("(null)", "None"):
        return ()
    try:
        return tuple(hostlist.expand(text))
    except hostlist.HostListError as exc:
        raise ParseError(str(exc)) from None


def _exit(v: Any) -> tuple[int | None, int | None]:
    """(return code, signal) from a raw wait status (22.05) or the 24.11 object."""
    if isinstance(v, dict):
        rc = _int(v.get("return_code"))
        sig = v.get("signal") or {}
        signal = _int(sig.get("id")) if isinstance(sig, dict) else None
        return rc, signal or None
    n = _int(v)
    if n is None:
        return None, None
    return (n >> 8) & 0xFF, (n & 0x7F) or None


def _cpus_by_node(resources: Any, cpus: int | None = None
                  ) -> tuple[tuple[str, int], ...] | None:
    """The job's CPUs per node from ``job_resources``; ``cpus``: the job's CPU count, which
    22.05's per-node map of allocated cores is scaled to (it has no CPU counts)."""
    if not isinstance(resources, dict):
        return None
    nodes = resources.get("nodes")
    alloc = nodes.get("allocation") if isinstance(nodes, dict) else resources.get("allocated_nodes")
    out = []
    if isinstance(alloc, list) and alloc and all(
            isinstance(a, dict) and "nodename" in a and "name" not in a for a in alloc):
        return _cpus_from_cores(alloc, cpus)
    if isinstance(alloc, list):
        for a in alloc:
            if not isinstance(a, dict) or "name" not in a:
                continue
            cpus = a.get("cpus")
            count = _int(cpus.get("count")) if isinstance(cpus, dict) else _int(cpus)
            if count is not None:
                out.append((str(a["name"]), count))
    elif isinstance(alloc, dict):   # older openapi: {"0": {"nodename": ..., "cpus": ...}}
        for a in alloc.values():
            if isinstance(a, dict) and ("nodename" in a or "name" in a):
                count = _int(a.get("cpus"))
                if count is not None:
                    out.append((str(a.get("nodename") or a.get("name")), count))
    return tuple(out) or None


def _cpus_from_cores(alloc: list, cpus: int | None) -> tuple[tuple[str, int], ...] | None:
    """22.05 (openapi v0.0.38): ``[{"nodename", "sockets": {S: {"cores": {C: state}}}}]``,
    the job's cores per node; each node's CPUs are its share of the job's ``cpus`` (the
    same number of CPUs per core everywhere, else None: not known)."""
    cores = []
    for a in alloc:
        sockets = a.get("sockets")
        if not isinstance(sockets, dict):
            return None
        n = sum(1 for sk in sockets.values() if isinstance(sk, dict)
                and isinstance(sk.get("cores") or {}, dict)
                for state in (sk.get("cores") or {}).values()
                if isinstance(state, str) and state.startswith("allocated"))
        if any(isinstance(sk, dict) and not isinstance(sk.get("cores") or {}, dict)
               for sk in sockets.values()):
            return None   # not 22.05's map of cores: the layout is not known
        cores.append((str(a["nodename"]), n))
    total = sum(n for _, n in cores)
    if not total or cpus is None or cpus % total or any(n == 0 for _, n in cores):
        return None
    per_core = cpus // total
    return tuple((name, n * per_core) for name, n in cores)


def _shared(v: Any) -> bool | None:
    if v is None:
        return None
    if isinstance(v, list):
        return any(str(x).lower() in ("oversubscribe", "shared", "yes") for x in v)
    s = str(v).lower()
    if s in ("shared", "oversubscribe", "yes", "1", "force"):
        return True
    if s in ("ok", ""):       # scontrol's "OK": not asked for (22.05 JSON: null)
        return None
    return False              # no, exclusive, user, mcs, topo


# -- JSON ------------------------------------------------------------------------------------

# Slurm's JSON is 9 to 12 levels deep (22.05 to 26.05, tests/fixtures/slurm); its size is
# capped where it is read, as it streams in (commands.py, rest.py).
MAX_JSON_DEPTH = 64


def _load(text: str | bytes, what: str) -> dict:
    try:
        data = boundedjson.loads(text, max_bytes=len(text) * 4 + 1, max_depth=MAX_JSON_DEPTH, what=what)
    except boundedjson.JSONUnusable as exc:
        why = str(exc).removeprefix(f"{what}: ")
        raise ParseError(f"{what} did not answer JSON ({why}); it began: {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise ParseError(f"{what} answered JSON that is not an object: {text[:120]!r}")
    _check_reported_errors(data, what)
    return data


def _check_reported_errors(data: dict, what: str) -> None:
    errors = data.get("errors")
    if errors:
        if not isinstance(errors, list):
            errors = [errors]
        msgs = [e.get("error") or e.get("description") or str(e) if isinstance(e, dict) else str(e)
                for e in errors]
        raise ReportedErrors(f"{what} reported errors: {printable('; '.join(map(str, msgs)))}")


_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def printable(text: str, limit: int = 500) -> str:
    """Slurm's (or a user's) text for a log line or an error: control characters (an
    escape sequence, a carriage return, a line separator) shown as escapes, at most
    ``limit`` characters."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


# A time limit beyond this is no limit (Slurm's own maximum is INFINITE).
_MAX_LIMIT_MIN = 100 * 365 * 24 * 60


def _limit_s(minutes: float | int | None) -> float | None:
    """A time limit in seconds; None when unlimited: INFINITE, 0 (``--time=0`` asks for
    no limit), negative (22.05's openapi writes UNLIMITED as -1) or beyond a century."""
    if minutes is None or not 0 < minutes <= _MAX_LIMIT_MIN:
        return None
    return float(minutes) * 60.0


def job_from_json(j: dict, what: str = "squeue --json") -> SlurmJob:
    if not isinstance(j, dict) or "job_id" not in j:
        raise ParseError(f"{what}: a job record without the field 'job_id': {str(j)[:120]}")
    try:
        jid = _int(j["job_id"])
    except ParseError as exc:
        raise ParseError(f"{what}: a job record with job_id {str(j['job_id'])[:40]!r}: {exc}") from None
    if jid is None or jid < 1:
        raise ParseError(f"{what}: a job record with job_id {j['job_id']!r}")
    if "job_state" not in j:
        raise ParseError(f"{what}: job {jid} without the field 'job_state'")
    key = "job_state"

    def field(name: str, reader):
        nonlocal key
        key = name
        return reader(j.get(name))

    try:
        state, flags = _states(j.get("job_state"))
        rc, sig = field("exit_code", _exit)
        cpus = field("cpus", _int)
        return SlurmJob(
            job_id=jid, name=field("name", _str), user=field("user_name", _str) or None,
            uid=field("user_id", _int),
            partition=field("partition", _str), state=state, state_flags=flags,
            reason=field("state_reason", _str), priority=field("priority", _int),
            nodes=expand_hostlist(field("nodes", _str)), node_count=field("node_count", _int),
            max_nodes=field("max_nodes", _int) or None, cpus=cpus,
            time_limit_s=_limit_s(field("time_limit", _num)),   # (Slurm's unit: minutes)
            submit_time=field("submit_time", _epoch),
            eligible_time=field("eligible_time", _epoch),
            start_time=field("start_time", _epoch), end_time=field("end_time", _epoch),
            comment=field("comment", _str), admin_comment=field("admin_comment", _str),
            dependency=field("dependency", _str), shared=field("shared", _shared),
            required_nodes=expand_hostlist(field("required_nodes", _str)),
            exit_code=rc, exit_signal=sig, restarts=field("restart_cnt", _int) or 0,
            cpus_by_node=_cpus_by_node(field("job_resources", lambda v: v), cpus),
            batch_host=field("batch_host", _str),
        )
    except ParseError as exc:
        raise ParseError(f"{what}: job {jid}, field {key!r}: {exc}") from None


def parse_jobs_json(text: str | bytes, what: str = "squeue --json") -> list[SlurmJob]:
    """Jobs from ``squeue --json`` (or ``scontrol show job --json``) of any release.

    Read a job at a time (``_RecordsReader``): each record becomes a SlurmJob and is dropped,
    so a 100k-job answer (near a GB of JSON on 24.11) is never a whole tree of dicts in
    memory at once (``cosched bench json`` measures both). Anything it does not expect goes
    to the whole-tree reader, whose errors name what is wrong."""
    return _parse_records(JOBS, text, what)


@dataclass(frozen=True)
class RecordList:
    """The list of records an answer is read for: its field, how one record is read, and
    what an answer without it is told (Slurm's jobs, or its nodes)."""

    field: str
    record_of: Callable[[Any, str], Any]
    missing: Callable[[str, dict], str]


def _parse_records(kind: RecordList, text: str | bytes, what: str) -> list:
    try:
        checked = boundedjson.checked_text(text, max_bytes=len(text) * 4 + 1,
                                           max_depth=MAX_JSON_DEPTH, what=what)
    except boundedjson.JSONUnusable:
        checked = None
    if checked is not None:
        try:
            top, records, bad = _RecordsReader(checked, what, kind).read()
        except (ValueError, RecursionError):
            pass                # not the shape read here: the whole-tree reader says why
        else:
            return records_of_answer(kind, top, records, bad, what)
    data = _load(text, what)
    records = data.get(kind.field)
    if not isinstance(records, list):
        raise ParseError(kind.missing(what, data))
    return [kind.record_of(r, what) for r in records]


def records_of_answer(kind: RecordList, top: dict, records: list | None,
                      bad: ParseError | None, what: str) -> list:
    """The records of an answer read a record at a time (``_RecordsReader``,
    ``answerstream``): Slurm's own errors are raised first, then the first record that
    could not be read, then a missing list."""
    _check_reported_errors(top, what)
    if bad is not None:
        raise bad
    if records is None:
        raise ParseError(kind.missing(what, top))
    return records


JSON_SPACE = re.compile(r"[ \t\n\r]*")


class _RecordsReader:
    """The top-level object of an answer, its ``kind.field`` array read a record at a time
    (``json.JSONDecoder.raw_decode``); the other fields whole. ValueError when the text is
    not a JSON object (the caller falls back to the whole-tree reader)."""

    def __init__(self, text: str, what: str, kind: RecordList):
        self.text, self.what, self.kind = text, what, kind
        self.decode = json.JSONDecoder().raw_decode

    def _space(self, i: int) -> int:
        return JSON_SPACE.match(self.text, i).end()

    def _expect(self, i: int, ch: str) -> int:
        if not self.text.startswith(ch, i):
            raise ValueError(f"{ch!r} expected at character {i}")
        return i + 1

    def read(self) -> tuple[dict, list | None, ParseError | None]:
        """(the other top-level fields, the records or None without the array, the first
        record that could not be read, if any: raised after Slurm's own errors)."""
        text, top, field = self.text, {}, self.kind.field
        records: list | None = None
        bad: ParseError | None = None
        i = self._space(self._expect(self._space(0), "{"))
        if text.startswith("}", i):
            i += 1
        else:
            while True:
                key, i = self.decode(text, i)
                if not isinstance(key, str):
                    raise ValueError("an object key that is not a string")
                i = self._space(self._expect(self._space(i), ":"))
                if key == field and text.startswith("[", i):
                    records, bad, i = self._records(i + 1)
                    top.pop(key, None)
                else:
                    top[key], i = self.decode(text, i)
                    if key == field:
                        records = None       # (a later one wins, as in json.loads)
                i = self._space(i)
                if text.startswith(",", i):
                    i = self._space(i + 1)
                    continue
                i = self._expect(i, "}")
                break
        if self._space(i) != len(text):
            raise ValueError(f"extra data at character {i}")
        return top, records, bad

    def _records(self, i: int) -> tuple[list, ParseError | None, int]:
        text, records, bad, record_of = self.text, [], None, self.kind.record_of
        i = self._space(i)
        if text.startswith("]", i):
            return records, bad, i + 1
        while True:
            record, i = self.decode(text, i)
            if bad is None:
                try:
                    records.append(record_of(record, self.what))
                except ParseError as exc:
                    bad = exc   # read on: Slurm's own errors, later in the text, come first
            i = self._space(i)
            if text.startswith(",", i):
                i = self._space(i + 1)
                continue
            return records, bad, self._expect(i, "]")


def node_from_json(n: dict, what: str = "sinfo --json") -> SlurmNode:
    if not isinstance(n, dict) or not n.get("name") or not isinstance(n["name"], str):
        raise ParseError(f"{what}: a node record without the field 'name': {str(n)[:120]}")
    for key in ("state", "cpus"):
        if key not in n:
            raise ParseError(f"{what}: node {n['name']} without the field {key!r} "
                             f"(fields: {', '.join(sorted(n))[:200]})")
    key = "state"
    try:
        state, flags = _states(n.get("state"))
        key = "state_flags"
        flags = flags + tuple(f.upper() for f in _names(n.get("state_flags")))
        key = "cpus"
        cpus = _int(n.get("cpus"))
        if cpus is None:
            raise ParseError("no value")
        key = "partitions"
        partitions = _names(n.get("partitions"))
        key = "alloc_cpus"
        alloc = _int(n.get("alloc_cpus"))
        key = "reason"
        reason = _str(n.get("reason"))
    except ParseError as exc:
        raise ParseError(f"{what}: node {n['name']}, field {key!r}: {exc}") from None
    return SlurmNode(name=n["name"], cpus=cpus, state=state, flags=flags,
                     partitions=partitions, alloc_cpus=alloc, reason=reason)


JOBS = RecordList("jobs", job_from_json,
                  lambda what, top: f"{what} answered without the field 'jobs' as a list "
                                    f"(fields: {sorted(top)})")
NODES = RecordList("nodes", node_from_json,
                   lambda what, top: f"{what} answered without the field 'nodes' as a per-node "
                                     f"list (fields: {sorted(top)}); 23.02+ aggregates sinfo "
                                     "--json: nodes come from scontrol show node --json there "
                                     "(slurm_plugin/contract.py)")


def parse_nodes_json(text: str | bytes, what: str = "sinfo --json") -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` (22.05) or ``scontrol show node --json`` (23.02+), a node
    at a time as ``parse_jobs_json`` reads jobs. Newer ``sinfo --json`` aggregates nodes
    and lacks per-node records: ParseError, so the caller tries the next source."""
    return _parse_records(NODES, text, what)


# -- scontrol text ---------------------------------------------------------------------------

def lines_of(text: str) -> list[str]:
    """Lines of a command's output, split at "\\n" only: ``str.splitlines`` also splits at
    U+2028, \\x85, \\x0b and others, which Slurm prints as typed inside a job's name or
    comment; split there, a user's comment could carry a whole job record of its own."""
    return [line.removesuffix("\r") for line in text.split("\n")]


_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")


def _fields(line: str) -> list[tuple[str, str]]:
    """``Key=value`` pairs of one ``scontrol show ... -o`` line, in order (keys repeat in
    the -d detail part). A value runs to the next `` Key=``."""
    matches = list(_KEY.finditer(line))
    out = []
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.append((m.group(1), line[m.end():end].strip()))
    return out


def _uid(v: str) -> int | None:
    """The number of ``UserId=name(uid)``, or None."""
    m = re.fullmatch(r"[^()]*\(([0-9]+)\)", v.strip())
    return int(m.group(1)) if m else None


def _none(v: str) -> str:
    return "" if v in ("(null)", "N/A", "None", "Unknown") else v


def _local_time(v: str) -> float | None:
    v = _none(v)
    if not v:
        return None
    try:
        return time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        raise ParseError(f"time {v!r} is not YYYY-MM-DDTHH:MM:SS") from None


def duration_s(v: str) -> float | None:
    """Slurm durations: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``; None when
    ``UNLIMITED``/``INFINITE``/``Partition_Limit``/``N/A``."""
    v = _none(v.strip())
    if not v or v.upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT", "NONE"):
        return None
    m = re.fullmatch(r"(?:([0-9]{1,12})-)?([0-9]{1,12})(?::([0-9]{1,12}))?(?::([0-9]{1,12}))?", v)
    if not m:
        raise ParseError(f"duration {v[:40]!r} is not a Slurm time")
    days, a, b, c = m.groups()
    if days is None and b is None:
        return int(a) * 60.0                                   # minutes
    if days is None and c is None:
        return int(a) * 60.0 + int(b)                          # MM:SS
    if days is not None and b is None:
        return int(days) * 86400.0 + int(a) * 3600.0           # D-HH
    if days is not None and c is None:
        return int(days) * 86400.0 + int(a) * 3600.0 + int(b) * 60.0
    return int(days or 0) * 86400.0 + int(a) * 3600.0 + int(b) * 60.0 + int(c)


def _count_ids(v: str) -> int:
    n = 0
    for part in v.split(","):
        lo, sep, hi = part.partition("-")
        if digits(lo):
            n += (int(hi) - int(lo) + 1) if sep and digits(hi) else 1
    return n


# Keys that ``scontrol show job -o -d`` repeats: the per-node detail part.
_DETAIL_KEYS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES", "GRES_IDX"})
# Keys a release prints between JobName and UserId (26.05: the job's SLUID).
_BEFORE_USER = frozenset({"SLUID"})


def _repeated(pairs: list[tuple[str, str]], may_repeat: frozenset[str] = frozenset()
              ) -> str | None:
    """The first key of ``pairs`` that appears twice (other than ``may_repeat``), or None."""
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen and k not in may_repeat:
            return k
        seen.add(k)
    return None


def _check_unforged(pairs: list[tuple[str, str]], line: str) -> None:
    """Slurm prints the name, comment, command, working directory and output paths of a
    job as typed, so a user can make them read as more ``Key=value`` fields (seen on
    22.05: ``sbatch -J "x NumCPUs=1 Nodes=n1 CPU_IDs=0-3"``). Every release prints JobId,
    JobName, UserId first (26.05 a SLUID before UserId) and each other key once (but the
    detail part's): a line where that does not hold is refused, naming the job, rather than
    read with a forged field. A forged key that Slurm itself does not print for the job
    (AdminComment when unset) cannot be told from a real one: readers of this text check
    what they take from it (the Slurm backend reads jobs from the JSON of 21.08 and
    later; docs/slurm.md)."""
    keys = [k for k, _ in pairs]
    jid = pairs[0][1] if pairs and pairs[0][0] == "JobId" else "?"
    if [k for k in keys[:4] if k not in _BEFORE_USER][:3] != ["JobId", "JobName", "UserId"]:
        raise ParseError(f"scontrol show job: job {jid}'s line does not begin JobId, JobName, "
                         f"UserId (a name holding ' Key=' text?): refused: {line[:120]!r}")
    k = _repeated(pairs, _DETAIL_KEYS)
    if k is not None:
        raise ParseError(f"scontrol show job: job {jid}'s line has {k}= twice (a name, "
                         f"comment, command or path holding ' {k}=' text?): refused")


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """Jobs from ``scontrol show job -o [-d]`` (one job per line); a line with a forged
    field raises ParseError (``_check_unforged``)."""
    jobs = []
    for line in lines_of(text):
        if not line.strip() or line.startswith("No jobs"):
            continue
        pairs = _fields(line)
        _check_unforged(pairs, line)
        f = {}
        layout: list[tuple[str, int]] = []
        det_nodes: list[str] = []
        for k, v in pairs:
            if k == "Nodes":
                det_nodes = list(expand_hostlist(v))
            elif k == "CPU_IDs" and det_nodes:
                for node in det_nodes:
                    layout.append((node, _count_ids(v)))
                det_nodes = []
            f.setdefault(k, v)
        if "JobId" not in f or not digits(f["JobId"]):
            raise ParseError(f"scontrol show job line without a JobId: {line[:120]!r}")
        state, flags = _states(f.get("JobState", ""))
        user = _none(f.get("UserId", "")).split("(")[0] or None
        ec = f.get("ExitCode", "")
        rc, _, sig = ec.partition(":")
        shared = f.get("OverSubscribe")
        jobs.append(SlurmJob(
            job_id=int(f["JobId"]), name=_none(f.get("JobName", "")), user=user,
            uid=_uid(f.get("UserId", "")),
            partition=_none(f.get("Partition", "")), state=state, state_flags=flags,
            reason=_none(f.get("Reason", "")),
            priority=int(f["Priority"]) if digits(f.get("Priority", "")) else None,
            nodes=expand_hostlist(_none(f.get("NodeList", ""))),
            node_count=int(f["NumNodes"].split("-")[0]) if digits(f.get("NumNodes", "").split("-")[0]) else None,
            cpus=int(f["NumCPUs"].split("-")[0]) if digits(f.get("NumCPUs", "").split("-")[0]) else None,
            time_limit_s=duration_s(f.get("TimeLimit", "")),
            submit_time=_local_time(f.get("SubmitTime", "")),
            eligible_time=_local_time(f.get("EligibleTime", "")),
            start_time=_local_time(f.get("StartTime", "")) if state != "PENDING" else None,
            end_time=_local_time(f.get("EndTime", "")) if state in TERMINAL_STATES else None,
            comment=_none(f.get("Comment", "")), admin_comment=_none(f.get("AdminComment", "")),
            dependency=_none(f.get("Dependency", "")),
            shared=None if shared is None else _shared(shared),
            required_nodes=expand_hostlist(_none(f.get("ReqNodeList", ""))),
            exit_code=int(rc) if digits(rc) else None, exit_signal=int(sig) if digits(sig) and int(sig) else None,
            restarts=int(f["Restarts"]) if digits(f.get("Restarts", "")) else 0,
            cpus_by_node=tuple(layout) or None, batch_host=_none(f.get("BatchHost", "")),
        ))
    return jobs


def parse_scontrol_nodes(text: str) -> list[SlurmNode]:
    """Nodes from ``scontrol show node -o``."""
    nodes = []
    for line in lines_of(text):
        if not line.strip():
            continue
        f: dict[str, str] = {}
        for k, v in _fields(line):
            f.setdefault(k, v)
        if "NodeName" not in f:
            raise ParseError(f"scontrol show node line without a NodeName: {line[:120]!r}")
        cpus = f.get("CPUTot") or f.get("CPUEfctv") or ""
        if not digits(cpus):
            raise ParseError(f"node {f['NodeName']} has no CPUTot")
        state, flags = _states(f.get("State", ""))
        raw_state = f.get("State", "")
        if raw_state.split("+")[0].endswith("*"):
            flags = flags + ("NOT_RESPONDING",)
        nodes.append(SlurmNode(
            name=f["NodeName"], cpus=int(cpus), state=state, flags=flags,
            partitions=tuple(p for p in _none(f.get("Partitions", "")).split(",") if p),
            alloc_cpus=int(f["CPUAlloc"]) if digits(f.get("CPUAlloc", "")) else None,
            reason=_none(f.get("Reason", ""))))
    return nodes


def dependency_state(dep: str, states: Mapping[int, str] | None = None) -> str:
    """Where a pending job's dependency stands: "none", "satisfied", "waiting" or "failed".

    Slurm marks entries ``(unfulfilled)`` / ``(failed)`` and drops satisfied ones, but it
    re-evaluates the dependencies of held jobs only in its periodic scheduling pass (a
    minute by default). With ``states`` (job id -> base state, from the same snapshot)
    an ``(unfulfilled)`` entry is judged at once: ``afterok`` needs COMPLETED, ``afterany``
    any final state, ``afternotok`` a final state other than COMPLETED, ``after`` a start.
    Entries that cannot be judged (singleton, arrays, unknown jobs) leave it "waiting".
    """
    dep = dep.strip()
    if not dep or dep == "(null)":
        return "none"
    if "(failed)" in dep:
        return "failed"
    if "(unfulfilled)" not in dep:
        return "satisfied"
    if states is None:
        return "waiting"
    any_mode = "?" in dep
    results = []
    for item in re.split(r"[,?]", dep):
        m = re.fullmatch(r"(after|afterany|afterok|afternotok|aftercorr|afterburstbuffer):(.+?)"
                         r"(?:\((unfulfilled|failed)\))?", item.strip())
        if not m:
            results.append("waiting")
            continue
        kind, ids, mark = m.groups()
        if mark is None:
            results.append("satisfied")
            continue
        verdicts = []
        for jid in ids.split(":"):
            jid = jid.split("+")[0]          # after:ID+MINUTES: not judged here
            st = states.get(int(jid)) if digits(jid) and "+" not in ids else None
            if st is None:
                verdicts.append("waiting")
            elif kind == "after":
                verdicts.append("waiting" if st == "PENDING" else "satisfied")
            elif st not in TERMINAL_STATES:
                verdicts.append("waiting")
            elif kind == "afterany":
                verdicts.append("satisfied")
            elif kind == "afterok":
                verdicts.append("satisfied" if st == "COMPLETED" else "failed")
            elif kind == "afternotok":
                verdicts.append("failed" if st == "COMPLETED" else "satisfied")
            else:
                verdicts.append("waiting")
        results.append("failed" if "failed" in verdicts else
                       "waiting" if "waiting" in verdicts else "satisfied")
    if any_mode:
        return "satisfied" if "satisfied" in results else ("waiting" if "waiting" in results else "failed")
    return "failed" if "failed" in results else ("waiting" if "waiting" in results else "satisfied")


__all__ = ["ACTIVE_STATES", "ParseError", "SlurmJob", "SlurmNode", "TERMINAL_STATES",
           "JOBS", "NODES", "RecordList", "dependency_state", "duration_s", "expand_hostlist",
           "job_from_json", "node_from_json", "parse_jobs_json", "parse_nodes_json", "records_of_answer",
           "parse_scontrol_jobs", "parse_scontrol_nodes"]
