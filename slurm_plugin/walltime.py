"""Walltime credit: a host that lends CPU to a guest runs slower, and its time limit was
chosen for a machine of its own. When its measured progress says it would pass its limit,
the backend gives the time back (``scontrol update JobId=N TimeLimit=+M``), never beyond
the partition's MaxTime, and records the credit (``cosched decisions`` shows it).

Pure arithmetic here; the backend (``backend.py``) reads the numbers and makes the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WalltimeCredit:
    """``minutes`` added to host ``job_id``'s time limit at ``time``: the limit was
    ``limit_s``; its progress projected an end at ``projected_end`` (epoch seconds)."""

    job_id: str
    minutes: int
    time: float
    limit_s: float
    projected_end: float
    capped: bool = False      # the partition's MaxTime allowed less than was needed

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def projected_end(start: float, now: float, done: int, total: int | None,
                  rate: float | None) -> float | None:
    """When the job's tasks will be done at the rate measured (tasks/s; else the average
    since start). None when progress says nothing (no total, nothing done yet) or nothing
    finite (the counts come from the job's own progress file)."""
    if not total or total <= 0 or done >= total:
        return None
    if rate is None or not rate > 0:
        if done <= 0 or now <= start:
            return None
        rate = done / (now - start)
    try:
        end = now + (total - done) / rate
    except (OverflowError, ZeroDivisionError):
        return None
    return end if math.isfinite(end) else None


def credit_minutes(start: float, limit_s: float, end: float, max_time_s: float | None,
                   margin_s: float = 30.0, most_s: float | None = None) -> tuple[int, bool]:
    """Minutes to add so a job projected to end at ``end`` (plus ``margin_s``) fits its
    time limit, within MaxTime (None: unlimited) and within ``most_s`` seconds (what the
    lending can explain; None: no bound): (minutes, capped). 0 when it fits, or when a
    figure is not finite."""
    if not (math.isfinite(end) and math.isfinite(limit_s)) or (
            max_time_s is not None and math.isnan(max_time_s)):
        return 0, False
    need = end + margin_s - (start + limit_s)
    if need <= 0:
        return 0, False
    capped = False
    if most_s is not None and need > most_s:
        need, capped = max(0.0, most_s), True
    minutes = math.ceil(need / 60.0)
    if max_time_s is not None and math.isfinite(max_time_s):
        room = math.floor((max_time_s - limit_s) / 60.0)
        if room < minutes:
            return max(0, room), True
    return minutes, capped


__all__ = ["WalltimeCredit", "credit_minutes", "projected_end"]
