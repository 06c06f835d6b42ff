"""Reader for the Standard Workload Format (Parallel Workloads Archive), plain or gzip.

Conventions (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html): one job per
line, 18 whitespace-separated numeric fields, -1 for unknown; header lines start with ';'.
The fields used here (1-based): 1 job number, 2 submit time, 4 run time, 5 allocated
processors, 8 requested processors, 9 requested time, 12 user id.

Rules:

- MaxNodes and MaxProcs come from the header, read as the leading integer after the
  colon, because real headers carry comments (``; MaxNodes: 338 (batch partition; 512
  total)``). MaxProcs defaults to MaxNodes (and MaxNodes to MaxProcs).
- processors = max(allocated, requested); estimate = requested time, or the run time when
  the requested time is unknown (-1; any value <= 0 is treated the same way, since a zero
  estimate has no meaning and would divide by zero in WFP3/UNICEP).
- Jobs whose run time is <= 0 are dropped, and so are jobs with no processor count or
  with more processors than the machine has (they could never start); each is counted
  per reason in ``SwfTrace.dropped``.
- Jobs are sorted by job number and indexed 0.. in that order. A job number must not repeat
  (a second line with a number already seen is malformed: the trace was concatenated or
  edited, and results would silently count a job twice).
- A malformed line raises ``SwfFormatError`` naming the file and line number, or, with
  ``skip_bad_lines``, is counted in ``SwfTrace.skipped_lines``.
- ``extra_fields=(name, ...)`` reads files that carry that many more numeric columns after
  the 18 standard ones (the multi-resource workloads, ``coscheduler/multi/workload.py``);
  errors call them by those names; they land in ``SwfTrace.extras``, one tuple per kept
  job, in job order.

How: a well-formed trace is read in one pass (pandas' C reader for the job lines, the
rules as numpy array operations); anything unusual (a blank line inside, a field that is
not a number, a repeated job number) goes to the line-by-line reader, which applies the
same rules and names the line that breaks them. Both give the same trace (tests).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .. import boundedfile
from ..model import InvalidInput
from .gcpause import gc_paused

SWF_FIELDS = 18
# The largest archive traces are a few million lines, about 1 GB unpacked.
DEFAULT_MAX_TRACE_BYTES = 2 << 30
MAX_BYTES_ENV = "COSCHED_MAX_TRACE_BYTES"
# A job line is 18 numbers, about 100 characters: a longer line is refused before it is
# split (pandas' reader takes 1.5 GB for one line of 1,000,000 fields).
MAX_LINE = 4096
# Bounds on what a trace may say, far past any real machine or log: times (submit, run,
# requested) under 1e11 s (3,000 years) keep an end time exact to the millisecond
# (a submit time of 1e17 made every makespan 0); machines of up to 2**24 processors.
MAX_SECONDS = 1e11
MAX_MACHINE = 1 << 24
_CHUNK = 4 << 20
_HEADER_RE = re.compile(r"^;\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s*(.*)$")
_LEADING_INT_RE = re.compile(r"^\s*(\d+)", re.ASCII)   # (not "１")
_FIELD_NAMES = (
    "job number", "submit time", "wait time", "run time", "allocated processors",
    "average CPU time", "used memory", "requested processors", "requested time",
    "requested memory", "status", "user id", "group id", "executable", "queue",
    "partition", "preceding job", "think time",
)
# Keep this many malformed-line examples for the report when skipping.
_MAX_EXAMPLES = 5

DROP_NO_RUNTIME = "run time <= 0"
DROP_NO_PROCS = "no processor count"
DROP_TOO_WIDE = "more processors than MaxProcs"


class SwfFormatError(InvalidInput):
    """A trace line or header that cannot be read; the message is ``file:line: reason``."""

    def __init__(self, path: str, line_no: int | None, reason: str):
        where = f"{path}:{line_no}" if line_no is not None else path
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.line_no = line_no
        self.reason = reason

    def __reduce__(self):
        # (a worker process's error must cross back to its pool: coscheduler/sweep.py)
        return type(self), (self.path, self.line_no, self.reason)


class TraceJob(NamedTuple):
    """One job of a trace, as the simulator needs it (a tuple: cheap for 200,000 jobs).

    ``index`` is the position in the loaded (job-number sorted) trace; times are seconds.
    """

    index: int
    job_id: int
    submit: float
    run: float
    procs: int
    estimate: float
    user: int


@dataclass
class SwfTrace:
    """A loaded trace: the machine from the header and the usable jobs."""

    path: str
    max_nodes: int
    max_procs: int
    jobs: list[TraceJob]
    skipped_lines: int = 0
    bad_line_examples: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)
    header: dict[str, str] = field(default_factory=dict)
    extras: list[tuple[float, ...]] = field(default_factory=list)  # with ``extra_fields``


def _leading_int(path: str, line_no: int, key: str, value: str) -> int:
    m = _LEADING_INT_RE.match(value)
    if m is None or int(m.group(1)) < 1:
        raise SwfFormatError(
            path, line_no, f"header {key} must start with a positive integer, got {value.strip()!r}"
        )
    if len(m.group(1)) > 9 or int(m.group(1)) > MAX_MACHINE:
        raise SwfFormatError(
            path, line_no, f"header {key} {m.group(1)[:20]} is more than the {MAX_MACHINE} "
            "processors this simulator models"
        )
    return int(m.group(1))


def _check_fields(fields: list[str], extra: tuple[str, ...] = ()) -> list[float] | str:
    """The 18 (+ extra) numbers of a job line, or the reason the line is malformed."""
    if len(fields) != SWF_FIELDS + len(extra):
        return f"expected {SWF_FIELDS + len(extra)} fields, found {len(fields)}"
    # float() also reads '1_0' as 10 and other scripts' digits ('１'): not SWF numbers
    if any(not f.isascii() or "_" in f for f in fields):
        names = _FIELD_NAMES + extra
        name, text = next((n, f) for n, f in zip(names, fields) if not f.isascii() or "_" in f)
        return f"field {name!r} is not a number: {text[:40]!r}"
    try:
        values = list(map(float, fields))
    except ValueError:
        names = _FIELD_NAMES + extra
        for name, text in zip(names, fields):
            try:
                float(text)
            except ValueError:
                return f"field {name!r} is not a number: {text!r}"
        raise  # unreachable: some field failed above
    # One sum catches NaN and infinities in any field (float() accepts 'nan' and 'inf').
    if not math.isfinite(sum(values)):
        names = _FIELD_NAMES + extra
        bad = next((n for n, v in zip(names, values) if not math.isfinite(v)), None)
        return f"field {bad!r} is not finite" if bad else "values too large"
    if values[0] != int(values[0]) or values[0] < 0:
        return f"job number must be a non-negative integer, got {fields[0]!r}"
    if values[1] < 0:
        return f"submit time must be >= 0, got {fields[1]!r}"
    for pos in (1, 3, 8):   # submit, run and requested time
        if values[pos] >= MAX_SECONDS:
            return f"field {_FIELD_NAMES[pos]!r} is {fields[pos][:40]} s, past the {MAX_SECONDS:g} s allowed"
    for pos in (4, 7, 11):   # (the user id is a number the policies group jobs by)
        if values[pos] != int(values[pos]):
            return f"field {_FIELD_NAMES[pos]!r} must be an integer, got {fields[pos]!r}"
    return values


def max_trace_bytes() -> int:
    """The cap on a trace's size, packed and unpacked: ``COSCHED_MAX_TRACE_BYTES`` or
    ``DEFAULT_MAX_TRACE_BYTES``."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_TRACE_BYTES
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise InvalidInput(f"{MAX_BYTES_ENV}={text[:40]!r}: must be a positive number of bytes")
    return int(text)


def _longest_line(raw: bytes) -> int:
    """The length in bytes of the longest line ("\n" ends a line), a chunk at a time."""
    longest, start = 0, 0    # start: where the line being measured begins
    for at in range(0, len(raw), _CHUNK):
        a = np.frombuffer(raw, dtype=np.uint8, count=min(_CHUNK, len(raw) - at), offset=at)
        ends = np.flatnonzero(a == 0x0A)
        if ends.size:
            ends += at
            longest = max(longest, int(ends[0]) - start)
            if ends.size > 1:
                longest = max(longest, int(np.diff(ends).max()) - 1)
            start = int(ends[-1]) + 1
    return max(longest, len(raw) - start)


def _read_bytes(path: Path) -> bytes:
    """The trace's bytes: a regular file (a FIFO or a device is refused, not waited on or
    read forever), gzip unpacked, at most ``max_trace_bytes()`` before and after."""
    cap = max_trace_bytes()
    hint = f" (set {MAX_BYTES_ENV} to read a larger trace)"
    name = str(path)
    try:
        raw = boundedfile.read_regular(path, cap, name, hint=hint)
        if raw[:2] == b"\x1f\x8b":  # gzip magic, whatever the file is called
            raw = boundedfile.gunzip(raw, cap, name, hint=hint)
    except boundedfile.FileUnusable as exc:   # "NAME: why", said as SwfFormatError's
        raise SwfFormatError(name, None, str(exc).removeprefix(f"{name}: ")) from None
    return raw


def _read_text(path: Path) -> str:
    return _read_bytes(path).decode("utf-8", errors="replace")


def _job_table(text: str, width: int) -> np.ndarray | None:
    """Every job line as one float64 row, by pandas' C reader (four times numpy's
    ``loadtxt`` on HPC2N's 202,871 lines); None if a line is not all numbers or the lines
    differ in length. Header lines (';') and blank lines are skipped: the caller counts
    the rows against the lines."""
    import pandas as pd   # (here: a quarter of a second to import, paid only by readers)

    try:
        table = pd.read_csv(io.BytesIO(text.encode("utf-8")), sep=r"\s+", comment=";",
                            header=None, dtype=np.float64, engine="c",
                            quoting=csv.QUOTE_NONE,   # '"5"' is not a number here
                            na_filter=False)          # nor are NA, nan or an empty field
    except pd.errors.EmptyDataError:   # headers only (the caller counts the lines)
        return np.empty((0, width))
    except (ValueError, TypeError):     # (pandas' ParserError is a ValueError)
        return None
    return table.to_numpy(dtype=np.float64, copy=False)


def _read_fast(name: str, text: str, extra_fields: tuple[str, ...]) -> SwfTrace | None:
    """The whole trace in one vectorised read: headers by one regular expression,
    every job line by ``_job_table``, the rules as numpy array operations. None as soon as
    anything is unusual (a malformed line, a repeated job number, a header to refuse):
    the line-by-line reader then finds it and names its line."""
    header: dict[str, str] = {}
    max_nodes = max_procs = None
    comments = []
    at = text.find(";")
    while at >= 0:   # a trace has a few dozen ';', all starting header lines
        start = text.rfind("\n", 0, at) + 1
        if text[start:at].strip():
            return None   # a ';' inside a job line: malformed, the slow reader says where
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        comments.append(text[at:end])
        at = text.find(";", end)
    for line in comments:
        h = _HEADER_RE.match(line.strip())
        if h:
            key, value = h.group(1), h.group(2)
            header.setdefault(key, value.strip())
            if key in ("MaxNodes", "MaxProcs"):
                lead = _LEADING_INT_RE.match(value)
                if lead is None or not 1 <= int(lead.group(1)[:12]) <= MAX_MACHINE:
                    return None
                if key == "MaxNodes":
                    max_nodes = int(lead.group(1))
                else:
                    max_procs = int(lead.group(1))
    if max_nodes is None and max_procs is None:
        return None
    max_nodes = max_nodes if max_nodes is not None else max_procs
    max_procs = max_procs if max_procs is not None else max_nodes
    if max_procs % max_nodes != 0:
        return None
    width = SWF_FIELDS + len(extra_fields)
    a = _job_table(text, width)
    # One row per line that is not a header: a blank line, or pandas skipping or merging
    # lines it reads differently (a header indented by blanks ends its read early), sends
    # the trace to the line reader.
    end = len(text)
    while end and text[end - 1] in " \t\r\n\f\v":   # (not rstrip: a 17 MB copy)
        end -= 1
    if a is None or len(a) != (text.count("\n", 0, end) + 1 if end else 0) - len(comments):
        return None
    if a.shape[1] != width or not np.isfinite(a).all():
        return None
    num = a[:, 0]
    if ((num != np.floor(num)) | (num < 0)).any() or (a[:, 1] < 0).any() \
            or (a[:, [4, 7, 11]] != np.floor(a[:, [4, 7, 11]])).any() \
            or np.unique(num).size != num.size or (np.abs(a[:, [0, 4, 7, 11]]) >= 2 ** 53).any() \
            or (a[:, [1, 3, 8]] >= MAX_SECONDS).any():
        return None
    run = a[:, 3]
    procs = np.maximum(a[:, 4], a[:, 7])
    no_run = run <= 0
    no_procs = ~no_run & (procs <= 0)
    ok = ~no_run & ~no_procs
    too_wide = ok & (procs > max_procs)
    keep = ok & ~too_wide
    dropped = {DROP_NO_RUNTIME: int(no_run.sum()), DROP_NO_PROCS: int(no_procs.sum()),
               DROP_TOO_WIDE: int(too_wide.sum())}
    k = a[keep]
    order = np.argsort(k[:, 0], kind="stable")
    k = k[order]
    kprocs = procs[keep][order]
    estimate = np.where(k[:, 8] > 0, k[:, 8], k[:, 3])
    n = len(k)
    # tuple.__new__ straight from C: a third of the time of TraceJob(...) per job
    jobs = list(map(tuple.__new__, repeat(TraceJob, n),
                    zip(range(n), k[:, 0].astype(np.int64).tolist(), k[:, 1].tolist(),
                        k[:, 3].tolist(), kprocs.astype(np.int64).tolist(), estimate.tolist(),
                        k[:, 11].astype(np.int64).tolist())))
    extras = list(map(tuple, k[:, SWF_FIELDS:].tolist())) if extra_fields else []
    return SwfTrace(path=name, max_nodes=max_nodes, max_procs=max_procs, jobs=jobs,
                    dropped={key: v for key, v in dropped.items() if v}, header=header,
                    extras=extras)


def read_swf(path: str | Path, *, skip_bad_lines: bool = False,
             extra_fields: tuple[str, ...] = (), vectorised: bool = True) -> SwfTrace:
    """Load an SWF trace (plain or gzip) into a ``SwfTrace``; see the module doc for rules.

    A well-formed trace is read in one vectorised pass (``_read_fast``); anything else goes
    through the line-by-line reader, whose errors name the file and the line."""
    with gc_paused():   # a job tuple per line, no cycles among them (gcpause.py)
        return _read_swf(path, skip_bad_lines, extra_fields, vectorised)


def _read_swf(path: str | Path, skip_bad_lines: bool, extra_fields: tuple[str, ...],
              vectorised: bool) -> SwfTrace:
    path = Path(path)
    name = str(path)
    try:
        raw = _read_bytes(path)
    except OSError as exc:
        raise SwfFormatError(name, None, f"cannot read trace ({exc.strerror or exc})") from None
    longest = _longest_line(raw)
    text = raw.decode("utf-8", errors="replace")
    del raw
    # (a line too long for a job line: the line reader names it, or a long header line)
    fast = _read_fast(name, text, extra_fields) if vectorised and longest <= MAX_LINE else None
    if fast is not None:
        return fast
    lines = text.splitlines()

    header: dict[str, str] = {}
    max_nodes: int | None = None
    max_procs: int | None = None
    rows: list[tuple[int, float, float, int, float, int]] = []
    skipped = 0
    examples: list[str] = []
    dropped = {DROP_NO_RUNTIME: 0, DROP_NO_PROCS: 0, DROP_TOO_WIDE: 0}
    seen: dict[int, int] = {}  # job number -> line of its first appearance

    for line_no, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        if text[0] == ";":
            m = _HEADER_RE.match(text)
            if m:
                key, value = m.group(1), m.group(2)
                header.setdefault(key, value.strip())
                if key == "MaxNodes":
                    max_nodes = _leading_int(name, line_no, key, value)
                elif key == "MaxProcs":
                    max_procs = _leading_int(name, line_no, key, value)
            continue
        if len(text) > MAX_LINE:   # (before the split: a 20 MB line would be 10 M strings)
            values: list[float] | str = (f"line of {len(text)} characters, longer than the "
                                         f"{MAX_LINE} a job line may have")
        else:
            values = _check_fields(text.split(), extra_fields)
        if not isinstance(values, str):
            first = seen.setdefault(int(values[0]), line_no)
            if first != line_no:
                values = f"job number {int(values[0])} already appears on line {first}"
        if isinstance(values, str):
            if not skip_bad_lines:
                raise SwfFormatError(
                    name, line_no, f"{values} (use --skip-bad-lines to skip such lines)"
                )
            skipped += 1
            if len(examples) < _MAX_EXAMPLES:
                examples.append(f"{name}:{line_no}: {values}")
            continue
        run = values[3]
        if run <= 0:
            dropped[DROP_NO_RUNTIME] += 1
            continue
        procs = int(max(values[4], values[7]))
        if procs <= 0:
            dropped[DROP_NO_PROCS] += 1
            continue
        requested = values[8]
        estimate = requested if requested > 0 else run
        row = (int(values[0]), values[1], run, procs, estimate, int(values[11]))
        rows.append(row + (tuple(values[SWF_FIELDS:]),) if extra_fields else row)

    if max_nodes is None and max_procs is None:
        raise SwfFormatError(
            name, None, "header has neither MaxNodes nor MaxProcs: the machine size is unknown"
        )
    max_nodes = max_nodes if max_nodes is not None else max_procs
    max_procs = max_procs if max_procs is not None else max_nodes
    if max_procs % max_nodes != 0:
        raise SwfFormatError(
            name, None,
            f"MaxProcs ({max_procs}) is not a multiple of MaxNodes ({max_nodes}): "
            "nodes must have equal processor counts",
        )

    usable = [r for r in rows if r[3] <= max_procs]
    dropped[DROP_TOO_WIDE] = len(rows) - len(usable)
    usable.sort(key=lambda r: r[0])  # stable: equal job numbers keep file order
    if extra_fields:
        jobs = [TraceJob(i, *r[:6]) for i, r in enumerate(usable)]
        extras = [r[6] for r in usable]
    else:
        jobs = [TraceJob(i, *r) for i, r in enumerate(usable)]
        extras = []
    return SwfTrace(
        path=name,
        max_nodes=max_nodes,
        max_procs=max_procs,
        jobs=jobs,
        skipped_lines=skipped,
        bad_line_examples=examples,
        dropped={k: v for k, v in dropped.items() if v},
        header=header,
        extras=extras,
    )
