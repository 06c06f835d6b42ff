"""Slurm's jobcomp/filetxt log (what finished jobs leave behind without slurmdbd): one
line of ``Key=value`` pairs per job that ended, appended for as long as the cluster runs.
The backend reads it for jobs that vanished from Slurm's memory, from the log's end
(``find_in_jobcomp`` over ``lines_from_end``), never the whole of it.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator

from .parse import (ParseError, SlurmJob, _fields, digits, lines_of, _local_time, _none, _repeated, _states,
                    _uid, duration_s, expand_hostlist)

log = logging.getLogger("slurm_plugin.parse")


def parse_jobcomp_line(line: str) -> SlurmJob | None:
    """One line of jobcomp/filetxt (what finished jobs leave without slurmdbd). Its
    ``Name=`` and ``WorkDir=`` are printed as typed, and every line has each key once, so a
    line repeating a key was forged by its job's user (``Name=x JobState=COMPLETED``):
    ParseError naming the job."""
    if not line.strip():
        return None
    pairs = _fields(line)
    f = dict(pairs)
    if not digits(f.get("JobId", "")):
        return None
    k = _repeated(pairs)
    if k is not None:
        raise ParseError(f"jobcomp: job {f['JobId']}'s line has {k}= twice (a name or "
                         f"working directory holding ' {k}=' text?): refused")
    state, flags = _states(f.get("JobState", ""))
    ec = f.get("ExitCode", "")
    rc, _, sig = ec.partition(":")
    return SlurmJob(
        job_id=int(f["JobId"]), name=_none(f.get("Name", "")),
        user=_none(f.get("UserId", "")).split("(")[0] or None, uid=_uid(f.get("UserId", "")),
        partition=_none(f.get("Partition", "")), state=state, state_flags=flags,
        nodes=expand_hostlist(_none(f.get("NodeList", ""))),
        cpus=int(f["ProcCnt"]) if digits(f.get("ProcCnt", "")) else None,
        time_limit_s=duration_s(f.get("TimeLimit", "")),
        submit_time=_local_time(f.get("SubmitTime", "")),
        start_time=_local_time(f.get("StartTime", "")), end_time=_local_time(f.get("EndTime", "")),
        exit_code=int(rc) if digits(rc) else None,
        exit_signal=int(sig) if digits(sig) and int(sig) else None)


def parse_jobcomp(text: str) -> dict[int, SlurmJob]:
    """The jobs of a jobcomp/filetxt log; a forged line is left out, logged (its job then
    counts as vanished), so that one user's name cannot hide every other job's end."""
    out = {}
    for line in lines_of(text):
        j = _genuine(line)
        if j is not None:
            out[j.job_id] = j
    return out


def _genuine(line: str) -> SlurmJob | None:
    """``parse_jobcomp_line``, with a forged line logged and left out (None)."""
    try:
        return parse_jobcomp_line(line)
    except ParseError as exc:
        log.warning("%s", exc)
        return None


def find_in_jobcomp(lines_newest_first: Iterable[str], wanted: Iterable[int]) -> dict[int, SlurmJob]:
    """The newest genuine line of each ``wanted`` job, the log read from its end: only the
    lines of those jobs are parsed, and the reading stops once each is found. (Parsing the
    whole log, which grows by a line per job for as long as the cluster runs, cost 15 s per
    100,000 lines, in the controller's pass.) A forged line is left out, logged, as in
    ``parse_jobcomp``; an older line of the same job may then answer."""
    left = set(wanted)
    out: dict[int, SlurmJob] = {}
    if not left:
        return out
    for line in lines_newest_first:
        if not line.startswith("JobId="):
            continue
        end = line.find(" ")
        head = line[6:end if end > 0 else len(line)]
        if not digits(head) or int(head) not in left:
            continue
        j = _genuine(line)
        if j is not None:
            out[j.job_id] = j
            left.discard(j.job_id)
            if not left:
                break
    return out


# A jobcomp line is a few hundred bytes; a longer "line" (a crash's NUL-filled tail) is
# skipped, and read past without holding it.
MAX_LINE_BYTES = 1 << 20


def lines_from_end(path, block: int = 1 << 20) -> Iterator[str]:
    """A text file's lines, last first, read backwards a block at a time (bytes that are
    not UTF-8 shown as replacement characters; lines over ``MAX_LINE_BYTES`` left out).
    The pieces of a line that spans blocks are joined once, when its start is found:
    prepending each block to the rest made a long line cost quadratic time."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        pos = f.tell()
        pieces: list[bytes] = []    # the current line's pieces read so far, last first
        held = 0                    # their length; -1: the line is too long, skipped
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            parts = f.read(step).split(b"\n")
            for k in range(len(parts) - 1, 0, -1):
                line = _joined(parts[k], pieces, held)
                pieces, held = [], 0
                if line is not None:
                    yield line
            if held >= 0:
                pieces.append(parts[0])
                held += len(parts[0])
                if held > MAX_LINE_BYTES:
                    pieces, held = [], -1
        line = _joined(b"", pieces, held)
        if line is not None:
            yield line


def _joined(first: bytes, pieces: list[bytes], held: int) -> str | None:
    """The line made of ``first`` and the ``pieces`` after it (last first), or None when
    blank or too long."""
    if held < 0 or held + len(first) > MAX_LINE_BYTES:
        return None
    raw = first + b"".join(reversed(pieces)) if pieces else first
    if not raw.strip():
        return None
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")


__all__ = ["find_in_jobcomp", "lines_from_end", "parse_jobcomp", "parse_jobcomp_line"]
