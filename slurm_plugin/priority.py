"""The priority hook: order a real Slurm queue with the project's queue policies.

``cosched slurm priority --policy SJF [--once | --interval S]`` ranks the pending jobs
with the same key functions the simulator and the controller use
(``coscheduler.policies.queue``: FCFS, SJF, F1, WFP3, UNICEP, ...) and writes the ranks
into Slurm as job priorities (``scontrol update JobId=X Priority=N``); Slurm then starts
jobs in that order. The policy is any object with ``key(now, submit, procs, estimate)``,
or a scorer (a learned RLScheduler model, ``--policy rl:NAME``), whose scores over the
pending jobs and the machine (``squeue``/``sinfo``: free CPUs, running jobs' ends by their
time limits) become the priorities.

Held jobs (priority 0, e.g. co-scheduled jobs waiting for the controller) are never
touched: giving them a priority would release them. Only the order matters to Slurm, so a
pass keeps every priority it can and writes only the jobs that must move
(``stable_priorities``): running it every few seconds costs one ``squeue`` per pass, plus
one ``scontrol update`` per job that changed places. (Written as ``base + n - rank``, every
arrival behind the queue's head renumbered every job ahead of it: with FCFS, one submission
rewrote all 200 pending jobs' priorities of a real Slurm queue, 201 updates in 0.66 s, each
an RPC that takes slurmctld's job write lock.)
"""

from __future__ import annotations

import dataclasses
import math
import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from coscheduler.model import InvalidInput

from .commands import SlurmCommandError
from .parse import SlurmJob
from .source import SlurmSource

# An unlimited job's estimate for the key functions (they need a positive number).
UNLIMITED_ESTIMATE_S = 365 * 86400.0
# Priorities written are spaced this far apart, so that later arrivals fit between them.
STRIDE = 1000
# Slurm keeps 0xFFFFFFFE and 0xFFFFFFFF for "not set" and "top": a priority it assigned
# itself (priority/basic starts near 0xFFFF0000) is kept up to just below them; the hook
# writes at most WRITE_MAX.
KEEP_MAX = 0xFFFFFFFD
WRITE_MAX = 0xFFFF0000


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


def _estimate(j: SlurmJob) -> float:
    return j.time_limit_s if j.time_limit_s and math.isfinite(j.time_limit_s) else UNLIMITED_ESTIMATE_S


def machine(jobs: Iterable[SlurmJob], nodes: Iterable[Any], now: float
            ) -> tuple[int, int, list[tuple[float, int]]]:
    """(free CPUs, total CPUs, [(estimated end, CPUs)] of running jobs) for a selector:
    usable nodes' CPUs; a running job ends by its estimate at start + time limit."""
    usable = [n for n in nodes if getattr(n, "usable", True)]
    total = sum(n.cpus for n in usable)
    running = [(((j.start_time or now) + _estimate(j)), max(1, j.cpus or 1))
               for j in jobs if j.state == "RUNNING"]
    free = max(0, total - sum(c for _, c in running))
    return free, max(total, 1), running


def rank_jobs(jobs: Iterable[SlurmJob], policy: Any, now: float, base: int = 1_000_000,
              machine_state: tuple | None = None) -> list[Ranked]:
    """Pure: ``jobs`` in policy order (smallest key first; ties by submit time, then job
    id), with priorities ``base + n - rank`` (the first job gets the highest).

    A scorer (``coscheduler.policies.selection.Scorer``, e.g. ``rl:NAME``) ranks by its
    scores instead (highest first, ``order_by_scores``), seeing ``machine_state`` (CPUs as
    the unit; see ``machine``); ``Ranked.key`` is then minus the score."""
    if isinstance(base, bool) or not isinstance(base, int) or base < 1 or base > 2**31:
        raise InvalidInput(f"priority base must be an integer in 1..2^31, got {base!r}")
    jobs = list(jobs)
    if getattr(policy, "kind", None) == "inspected":  # InspectedRanking (--inspector)
        free, total, running = machine_state if machine_state is not None else (0, 1, [])
        rows = [(j.submit_time if j.submit_time is not None else now, max(1, j.cpus or 1),
                 _estimate(j)) for j in jobs]
        order = policy.rank(now, rows, [j.job_id for j in jobs], free, total, 1, running)
        n = len(order)
        return [Ranked(jobs[p].job_id, i, base + n - i, None) for i, p in enumerate(order)]
    if getattr(policy, "kind", None) == "scorer":
        from coscheduler.policies.selection import order_by_scores

        free, total, running = machine_state if machine_state is not None else (0, 1, [])
        rows = [(j.submit_time if j.submit_time is not None else now, max(1, j.cpus or 1),
                 _estimate(j)) for j in jobs]
        order, scores = order_by_scores(policy, now, rows, free, total, 1, running)
        n = len(order)
        keys = list(-scores) + [None] * (n - len(scores))
        return [Ranked(jobs[p].job_id, i, base + n - i, keys[i]) for i, p in enumerate(order)]
    key = policy.key
    rows = []
    for j in jobs:
        submit = j.submit_time if j.submit_time is not None else now
        procs = max(1, j.cpus or 1)
        rows.append((key(now, submit, procs, _estimate(j)), submit, j.job_id))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    n = len(rows)
    return [Ranked(jid, i, base + n - i, k) for i, (k, _, jid) in enumerate(rows)]


def stable_priorities(order: Sequence[int], current: Mapping[int, int | None], base: int,
                      stride: int = STRIDE) -> dict[int, int]:
    """Pure: a priority for every job of ``order`` (first = highest), strictly decreasing
    along it, keeping as many of the jobs' ``current`` priorities as possible.

    The jobs kept are a longest run (not necessarily contiguous) of the order whose current
    priorities already decrease strictly (O(n log n)); each stretch of other jobs gets
    priorities between its kept neighbours, ``stride`` apart where there is room and evenly
    spread where there is less; where it does not fit, the kept jobs below it move too, one
    at a time, until it does. With nothing kept, or no room down to priority 1, every job
    is numbered afresh: ``base + stride * (n - 1 - rank)`` (the last job gets ``base``)."""
    n = len(order)
    cur = [current.get(j) for j in order]
    ok = [isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= KEEP_MAX for v in cur]
    # Longest strictly decreasing subsequence of the keepable values (patience sorting on -v).
    tails: list[int] = []
    tail_at: list[int] = []
    before = [-1] * n
    for i, v in enumerate(cur):
        if not ok[i]:
            continue
        k = bisect_left(tails, -v)
        if k == len(tails):
            tails.append(-v)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = -v, i
        before[i] = tail_at[k - 1] if k else -1
    kept = [False] * n
    i = tail_at[-1] if tail_at else -1
    while i != -1:
        kept[i] = True
        i = before[i]
    out = [0] * n
    upper: int | None = None     # the kept priority above the current stretch
    i = 0
    while i < n:
        if kept[i]:
            out[i] = upper = cur[i]
            i += 1
            continue
        j = i
        while j < n and not kept[j]:
            j += 1
        while (values := _fill(j - i, upper, cur[j] if j < n else None, base, stride)) is None:
            if j >= n:
                return _afresh(order, base, stride)
            # No room above the next kept job (priority/basic numbers jobs one apart): it
            # moves too, and the stretch reaches down to the kept job after it.
            kept[j] = False
            j += 1
            while j < n and not kept[j]:
                j += 1
        out[i:j] = values
        i = j
    return dict(zip(order, out))


def _fill(k: int, upper: int | None, lower: int | None, base: int, stride: int
          ) -> list[int] | None:
    """k priorities, decreasing, strictly between ``upper`` and ``lower`` (None: no bound
    there); None when they do not fit."""
    if upper is None and lower is None:
        return None                       # nothing kept: numbered afresh
    if upper is None:                     # above the first kept job
        if lower + stride * k <= WRITE_MAX:
            return [lower + stride * (k - m) for m in range(k)]
        upper = WRITE_MAX + 1
    upper = min(upper, WRITE_MAX + 1)     # (a kept priority may lie above what is written)
    if lower is None:                     # below the last kept job
        if upper - stride * k >= 1:
            return [upper - stride * (m + 1) for m in range(k)]
        lower = 0
    room = upper - lower
    if room < k + 1:
        return None
    return [lower + room * (k - m) // (k + 1) for m in range(k)]


def _afresh(order: Sequence[int], base: int, stride: int) -> dict[int, int]:
    n = len(order)
    if n and base + stride * (n - 1) > WRITE_MAX:
        stride = max(1, (WRITE_MAX - base) // max(1, n - 1))
        if base + stride * (n - 1) > WRITE_MAX:
            raise InvalidInput(f"{n} jobs do not fit between priority base {base} and {WRITE_MAX}")
    return {jid: base + stride * (n - 1 - r) for r, jid in enumerate(order)}


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
    everything = source.jobs()
    jobs = eligible(everything, partition)
    state = machine(everything, source.nodes(), now) \
        if getattr(policy, "kind", None) in ("scorer", "inspected") else None
    current = {j.job_id: j.priority for j in jobs}
    ranked = rank_jobs(jobs, policy, now, base, state)
    wanted = stable_priorities([r.job_id for r in ranked], current, base)
    ranked = [dataclasses.replace(r, priority=wanted[r.job_id]) for r in ranked]
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


__all__ = ["PriorityReport", "Ranked", "STRIDE", "apply_priorities", "eligible", "machine", "rank_jobs",
           "stable_priorities"]
