"""The priority hook: order a real Slurm queue with the project's queue policies.

``cosched slurm priority --policy SJF [--once | --interval S]`` ranks the pending jobs
with the same key functions the simulator and the controller use
(``coscheduler.policies.queue``: FCFS, SJF, F1, WFP3, UNICEP, ...) and writes the ranks
into Slurm as job priorities (``scontrol update JobId=X Priority=N``); Slurm then starts
jobs in that order. The policy is any object with ``key(now, submit, procs, estimate)``,
so a learned scorer plugs in the same way as a hand-written formula.

Held jobs (priority 0, e.g. co-scheduled jobs waiting for the controller) are never
touched: giving them a priority would release them. Priorities already in place are not
written again, so running it every few seconds costs one ``squeue`` per pass.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterable

from coscheduler.model import InvalidInput

from .commands import SlurmCommandError
from .parse import SlurmJob
from .source import SlurmSource

# An unlimited job's estimate for the key functions (they need a positive number).
UNLIMITED_ESTIMATE_S = 365 * 86400.0


@dataclass(frozen=True)
class Ranked:
    job_id: int
    rank: int
    priority: int
    key: Any


def eligible(jobs: Iterable[SlurmJob], partition: str | None = None) -> list[SlurmJob]:
    """Pending jobs a priority may be given to: not held, in ``partition`` if given."""
    out = []
    for j in jobs:
        if j.state != "PENDING" or j.held or j.priority is None:
            continue
        if partition is not None and partition not in j.partition.split(","):
            continue
        out.append(j)
    return out


def rank_jobs(jobs: Iterable[SlurmJob], policy: Any, now: float, base: int = 1_000_000) -> list[Ranked]:
    """Pure: ``jobs`` in policy order (smallest key first; ties by submit time, then job
    id), with priorities ``base + n - rank`` (the first job gets the highest)."""
    if isinstance(base, bool) or not isinstance(base, int) or base < 1 or base > 2**31:
        raise InvalidInput(f"priority base must be an integer in 1..2^31, got {base!r}")
    key = policy.key
    rows = []
    for j in jobs:
        submit = j.submit_time if j.submit_time is not None else now
        procs = max(1, j.cpus or 1)
        estimate = j.time_limit_s if j.time_limit_s and math.isfinite(j.time_limit_s) else UNLIMITED_ESTIMATE_S
        rows.append((key(now, submit, procs, estimate), submit, j.job_id))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    n = len(rows)
    return [Ranked(jid, i, base + n - i, k) for i, (k, _, jid) in enumerate(rows)]


@dataclass
class PriorityReport:
    time: float
    ranked: list[Ranked]
    changed: list[int]
    errors: list[str]

    def as_dict(self) -> dict:
        return {"time": self.time, "changed": self.changed, "errors": self.errors,
                "order": [{"job_id": r.job_id, "rank": r.rank, "priority": r.priority}
                          for r in self.ranked]}


def apply_priorities(source: SlurmSource, policy: Any, *, partition: str | None = None,
                     base: int = 1_000_000, now: float | None = None) -> PriorityReport:
    """One pass: read the queue, rank it, write the priorities that differ."""
    now = time.time() if now is None else now
    jobs = eligible(source.jobs(), partition)
    ranked = rank_jobs(jobs, policy, now, base)
    current = {j.job_id: j.priority for j in jobs}
    changed, errors = [], []
    for r in ranked:
        if current.get(r.job_id) == r.priority:
            continue
        try:
            source.update(r.job_id, Priority=str(r.priority))
            changed.append(r.job_id)
        except SlurmCommandError as exc:
            # The job may have started or ended since the read: not an error worth stopping.
            errors.append(str(exc))
    return PriorityReport(now, ranked, changed, errors)


__all__ = ["PriorityReport", "Ranked", "apply_priorities", "eligible", "rank_jobs"]
