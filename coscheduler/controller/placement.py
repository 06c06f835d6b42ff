"""Stage 4, place, on free cores: first-fit gang allocation with EASY backfilling.

Pure logic over plain data (no backend, no learner), so each piece can be tested alone:

- ``free_cores``: the cores no running job holds, per node.
- ``FreeCores``: those cores with a running total, handing out first-fit allocations.
- ``easy_reservation``: when the first job that does not fit can start (the shadow time),
  from the ends (start + walltime) of running jobs and of the jobs this pass plans to start.
- ``EasyBackfill``: free cores under that reservation: later jobs start only if they do not
  delay the reserved job.
- ``own_start_estimate``: when a waiting job would get cores of its own behind the jobs
  waiting ahead of it (the "sooner" lending rule's estimate).
- ``Start`` / ``CoStart`` / ``SpanStart``: the plan items stage 4 hands to stage 5 (act).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from ..model import Allocation, Job, RunningJob
from ..policies.coalloc import Choice
from ..policies.gang import first_fit


# -- plan items (stage 4 -> stage 5) ---------------------------------------------------------

@dataclass(frozen=True)
class Start:
    """Start ``job`` alone (space sharing) on ``allocation``, with full quota."""

    job: Job
    allocation: Allocation


@dataclass(frozen=True)
class CoStart:
    """Start ``job`` as a guest inside a running host, as the co-allocation policy chose.
    ``host_quota_before`` is what the host gets back if the start fails."""

    job: Job
    choice: Choice
    host_quota_before: float


@dataclass(frozen=True)
class SpanStart:
    """Split queued ``job`` into the jobs of ``parts`` (policies.span) and start each as a
    guest of its own host."""

    job: Job
    parts: tuple[CoStart, ...]


# -- free cores ------------------------------------------------------------------------------

def free_cores(capacity: Mapping[str, int], running: Iterable[RunningJob],
               running_by_id: Mapping[str, RunningJob]) -> dict[str, int]:
    """Cores per node that no running job holds (never below 0). A guest runs on its
    host's cores, so it takes none of its own unless its host is no longer running."""
    free = dict(capacity)
    for rj in running:
        if rj.host_job is not None and rj.host_job in running_by_id:
            continue
        for node, c in rj.allocation.cores_by_node:
            if node in free:
                free[node] -= c
    return {n: max(0, c) for n, c in free.items()}


class FreeCores:
    """Free cores per node with a running total and a lazily refreshed maximum, so a job
    that cannot fit is rejected without walking the nodes."""

    __slots__ = ("cores", "total", "_max")

    def __init__(self, cores: dict[str, int]):
        self.cores = cores
        self.total = sum(cores.values())
        self._max: int | None = None

    @property
    def max(self) -> int:
        if self._max is None:
            self._max = max(self.cores.values(), default=0)
        return self._max

    def fit(self, job: Job) -> Allocation | None:
        if job.cores > self.total or -(-job.cores // job.nodes) > self.max:
            return None
        return first_fit(job, self.cores)

    def take(self, allocation: Allocation) -> None:
        for node, c in allocation.cores_by_node:
            self.cores[node] -= c
            self.total -= c
        self._max = None

    def cap_at(self, other: "FreeCores", allocation: Allocation) -> None:
        """On the allocation's nodes, lower these counts to ``other``'s where they exceed it."""
        for node, _ in allocation.cores_by_node:
            if self.cores[node] > other.cores[node]:
                self.total -= self.cores[node] - other.cores[node]
                self.cores[node] = other.cores[node]
                self._max = None


# -- EASY backfilling ------------------------------------------------------------------------

class EasyBackfill:
    """The free cores of one pass under EASY backfilling.

    Until a reservation is made, a job starts wherever it fits. After ``reserve``, a job
    that ends by the shadow time may use any free core (it is gone before the reserved job
    starts); a longer one only the window, the cores the reserved job leaves over at the
    shadow time. Either way no start delays the reserved job.
    """

    __slots__ = ("free", "shadow", "_window")

    def __init__(self, free: dict[str, int]):
        self.free = FreeCores(free)
        self.shadow: float | None = None
        self._window: FreeCores | None = None   # cores a job may use past the shadow time

    def start(self, job: Job, now: float) -> Allocation | None:
        """Take cores for ``job`` starting at ``now``, or None if it cannot start now."""
        free, window = self.free, self._window
        if self.shadow is None or now + job.walltime_s <= self.shadow:
            alloc = free.fit(job)
            if alloc is not None:
                free.take(alloc)
                if window is not None:  # the window never exceeds what is free
                    window.cap_at(free, alloc)
            return alloc
        alloc = window.fit(job)
        if alloc is not None:
            free.take(alloc)
            window.take(alloc)
        return alloc

    def reserve(self, shadow: float, left_over: Mapping[str, int]) -> None:
        """Hold cores for a job from ``shadow`` on; ``left_over`` is what it does not need
        then (from ``easy_reservation``)."""
        self.shadow = shadow
        free = self.free.cores
        self._window = FreeCores({n: min(free[n], left_over.get(n, 0)) for n in free})


def easy_reservation(job: Job, free: Mapping[str, int], running: Iterable[RunningJob],
                     plan: Iterable[Start | CoStart | SpanStart], now: float,
                     running_by_id: Mapping[str, RunningJob]
                     ) -> tuple[float, dict[str, int]] | None:
    """EASY: the earliest time (by start + walltime of running jobs and of the jobs
    this pass plans to start) the job fits, and the cores left over at that time
    beyond its reserved allocation; None if it never fits. A guest that outlives its
    host keeps its cores until its own end."""
    guests: dict[str, list[tuple[Allocation, float]]] = {}
    holders: list[tuple[Allocation, float]] = []
    for rj in running:
        if rj.host_job is not None and rj.host_job in running_by_id:
            guests.setdefault(rj.host_job, []).append(
                (rj.allocation, max(now, rj.start_time + rj.job.walltime_s)))
    for rj in running:
        if rj.host_job is None or rj.host_job not in running_by_id:
            holders.append((rj.allocation, max(now, rj.start_time + rj.job.walltime_s)))
    for item in plan:
        if isinstance(item, Start):
            holders.append((item.allocation, now + item.job.walltime_s))
            continue
        for co in (item,) if isinstance(item, CoStart) else item.parts:   # (SpanStart: its parts)
            guests.setdefault(co.choice.host_job, []).append(
                (co.choice.placement, now + co.job.walltime_s))
    # Each holder frees its cores at its end, except those its longer-lived guests keep.
    events: list[tuple[float, list[tuple[str, int]]]] = []
    for alloc, end in holders:
        cores = alloc.as_dict()
        for g_alloc, g_end in guests.get(alloc.job_id, ()):
            if g_end > end:
                for node, c in g_alloc.cores_by_node:
                    cores[node] = cores.get(node, 0) - c
                events.append((g_end, list(g_alloc.cores_by_node)))
        events.append((end, list(cores.items())))
    events.sort(key=lambda e: e[0])
    proj = dict(free)
    total = sum(proj.values())
    part = -(-job.cores // job.nodes)
    for end, cores in events:
        grew = False
        for node, c in cores:
            if node in proj:
                proj[node] += c
                total += c
                grew = grew or proj[node] >= part
        # Only try first-fit when enough cores are free and some node can hold a part.
        if total < job.cores or not grew:
            continue
        alloc = first_fit(job, proj)
        if alloc is not None:
            for node, c in alloc.cores_by_node:
                proj[node] -= c
            return end, proj
    return None


def core_releases(running: Iterable[RunningJob], plan: Iterable[Start | CoStart], now: float,
                  running_by_id: Mapping[str, RunningJob]) -> list[tuple[float, int]]:
    """(time, cores) at which held cores come free, by walltime: the running jobs that hold
    cores of their own (not guests inside a running host) and the jobs this pass starts."""
    out = [(max(now, rj.start_time + rj.job.walltime_s), rj.allocation.cores) for rj in running
           if rj.host_job is None or rj.host_job not in running_by_id]
    out += [(now + item.job.walltime_s, item.allocation.cores) for item in plan
            if isinstance(item, Start)]
    return out


def own_start_estimate(cores: int, free_total: int, releases: Iterable[tuple[float, int]],
                       ahead: Iterable[Job], now: float) -> float:
    """When a job of ``cores`` cores would start on cores of its own (inf: never), if the
    jobs waiting ahead of it started first, in order, each as soon as enough cores are free
    (no backfilling) and held them for its walltime. Cores are counted over the whole
    cluster, not per node: an estimate for lending, not a reservation."""
    heap = list(releases)
    heapq.heapify(heap)
    free, t = free_total, now
    for need, walltime in [(j.cores, j.walltime_s) for j in ahead] + [(cores, 0.0)]:
        while free < need:
            if not heap:
                return math.inf
            at, c = heapq.heappop(heap)
            t, free = max(t, at), free + c
        free -= need
        heapq.heappush(heap, (t + walltime, need))
    return t
