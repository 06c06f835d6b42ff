"""Slurm's jobcomp/filetxt log (what finished jobs leave behind without slurmdbd): one
line of ``Key=value`` pairs per job that ended, appended for as long as the cluster runs.
The backend reads it for jobs that vanished from Slurm's memory, from the log's end
(``find_in_jobcomp`` over ``lines_from_end``), never the whole of it.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, Mapping

from .parse import (ParseError, SlurmJob, _fields, digits, lines_of, _local_time, _none, _repeated, _states,
                    _uid, duration_s, expand_hostlist)

log = logging.getLogger("slurm_plugin.parse")

# The keys jobcomp/filetxt prints, in its order (the same in the recorded 22.05, 24.11 and
# 26.05 logs, tests/fixtures/slurm/*/jobcomp.txt).
JOBCOMP_KEYS = ("JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit",
                "StartTime", "EndTime", "NodeList", "NodeCnt", "ProcCnt", "WorkDir",
                "ReservationName", "Tres", "Account", "QOS", "WcKey", "Cluster", "SubmitTime",
                "EligibleTime", "DerivedExitCode", "ExitCode")
_KNOWN = frozenset(JOBCOMP_KEYS)


def parse_jobcomp_line(line: str) -> SlurmJob | None:
    """One line of jobcomp/filetxt (what finished jobs leave without slurmdbd). Its
    ``Name=`` and ``WorkDir=`` are printed as typed, so a user can write key=value text
    into their job's line, and a newline there starts a line of their own. A genuine line
    has each of Slurm's keys once, in Slurm's order (``JOBCOMP_KEYS``); a line that repeats
    a key (``Name=x JobState=COMPLETED``) or lacks one or has them out of order (the part
    after a newline) is a ParseError naming the job."""
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
    keys = tuple(key for key, _ in pairs if key in _KNOWN)
    if keys != JOBCOMP_KEYS:
        missing = [key for key in JOBCOMP_KEYS if key not in f]
        why = f"lacks {', '.join(missing[:4])}" if missing else "has Slurm's keys out of order"
        raise ParseError(f"jobcomp: job {f['JobId']}'s line {why} (the rest of a line cut by "
                         "a newline in a name or working directory?): refused")
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


def find_in_jobcomp(lines_newest_first: Iterable[str], wanted: Iterable[int],
                    seen: Mapping[int, tuple[str | None, float | None]] | None = None
                    ) -> dict[int, SlurmJob]:
    """The newest genuine line of each ``wanted`` job, the log read from its end: only the
    lines of those jobs are parsed, and the reading stops once each is found. (Parsing the
    whole log, which grows by a line per job for as long as the cluster runs, cost 15 s per
    100,000 lines, in the controller's pass.) A forged line is left out, logged, as in
    ``parse_jobcomp``; an older line of the same job may then answer.

    ``seen``: job id -> (user, submit time) as Slurm showed the job while it was queued or
    running. A line naming another user or another submit time is left out, logged: a user
    who types a whole line, Slurm's keys in order, into a working directory after a newline
    still gets their own job's submit time at its end (the keys after WorkDir= are Slurm's)."""
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
        if j is not None and seen is not None and not _as_seen(j, seen.get(j.job_id)):
            continue
        if j is not None:
            out[j.job_id] = j
            left.discard(j.job_id)
            if not left:
                break
    return out


def _as_seen(j: SlurmJob, seen: tuple[str | None, float | None] | None) -> bool:
    """Whether a jobcomp line agrees with what Slurm showed of the job (logged if not)."""
    if seen is None:
        return True
    user, submit = seen
    if user is not None and j.user is not None and user != j.user:
        why = f"names user {j.user!r}, but Slurm showed the job as {user!r}'s"
    elif submit is not None and j.submit_time is not None and abs(submit - j.submit_time) >= 1.0:
        why = f"says it was submitted at {j.submit_time:.0f}, but Slurm showed {submit:.0f}"
    else:
        return True
    log.warning("jobcomp: job %s's line %s (a line forged by a newline in a name or working "
                "directory?): refused", j.job_id, why)
    return False


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
