"""The queue a scheduling decision reads and updates (``QueueState``), as plain lists.

Kept apart from ``decision.py`` (the rule applied at each decision point) and ``backfill.py``
(the backfilling rules) so that both depend on it and neither on the other.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..policies.selection import ChoiceView

# A queue entry sorts by (policy key, submit time, position): the tie-break rule.
Entry = tuple[object, float, int]


@dataclass
class QueueState:
    """What a decision reads and updates, as plain lists indexed by job position.

    ``entries`` holds the waiting jobs other than ``head``, as ``(key, submit, job)``
    tuples. For a policy whose key does not depend on the time (``uses_now`` False) the
    list is kept sorted as jobs arrive; otherwise keys are recomputed at each decision.
    ``running_est`` holds ``(estimated end, job)`` of running jobs, sorted: estimated end =
    start + estimate, even when that lies in the past (the job outlived its estimate).
    """

    key: Callable[[float, float, int, float], object]
    uses_now: bool
    total_nodes: int
    submit: list[float]
    procs: list[int]
    estimate: list[float]
    need: list[int]  # whole nodes per job
    est_end: list[float] = field(default_factory=list)  # per job, set when it starts
    free: int = field(init=False)  # free nodes now
    head: int | None = None
    entries: list[Entry] = field(default_factory=list)
    running_est: list[tuple[float, int]] = field(default_factory=list)
    # First reservation (shadow time) each head received under EASY: checked by tests.
    reservation: dict[int, float] = field(default_factory=dict)
    # A selector's state (``attach``); untouched by key-function replays.
    selector: Any = None
    wake: float = float("inf")  # an inspector's retry time after a rejection
    rejections_total: int = 0
    # Global pools beside nodes (burst buffer, power): names, capacity and per-job take;
    # ``pool_take`` is None on the CPU-only path.
    pool_names: tuple[str, ...] = ()
    pool_cap: tuple[int, ...] = ()
    pool_take: list[tuple[int, ...]] | None = None
    pool_free: list[int] = field(init=False)
    # EASY's last full scan (``backfill.easy_backfill``): the head it served, the shadow
    # time and extra nodes it left, and the entries queued since (None: scan again).
    bf_head: int | None = field(default=None, init=False)
    bf_shadow: float = field(default=0.0, init=False)
    bf_extra: int = field(default=0, init=False)
    bf_fresh: list[Entry] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.free = self.total_nodes
        if not self.est_end:
            self.est_end = [0.0] * len(self.need)
        self.pool_free = list(self.pool_cap)

    def pools_fit(self, job: int) -> bool:
        """True when ``job``'s take from every pool is free now (True without pools)."""
        take = self.pool_take
        if take is None:
            return True
        for t, f in zip(take[job], self.pool_free):
            if t > f:
                return False
        return True

    def fits(self, job: int) -> bool:
        """Nodes and every pool: can ``job`` start now?"""
        return self.need[job] <= self.free and self.pools_fit(job)

    def attach(self, selector, cluster) -> None:
        """Prepare for a selector: numpy copies of the job columns for its views."""
        self.selector = selector
        self.scoring = selector.kind == "scorer"
        if selector.kind not in ("scorer", "inspector"):
            raise ValueError(f"selector {selector.name!r} has unknown kind {selector.kind!r}")
        self.ppn = cluster.procs_per_node
        self.window = int(selector.window)
        self._submit = np.asarray(self.submit, dtype=float)
        self._procs = np.asarray(self.procs, dtype=np.int64)
        self._estimate = np.asarray(self.estimate, dtype=float)
        self._need = np.asarray(self.need, dtype=np.int64)
        self.rejected: dict[int, int] = {}
        if self.pool_take is not None:
            self._take = np.asarray(self.pool_take, dtype=np.int64).reshape(
                len(self.need), len(self.pool_cap))

    def view(self, now: float, kind: str, jobs: list[int] | None = None) -> ChoiceView:
        """The selector's view: the first ``window`` waiting jobs in queue order (or
        ``jobs``, already in queue order: the backfill candidates)."""
        entries = self.entries
        if jobs is None:
            count = min(len(entries), self.window)
            idx = np.fromiter((entries[k][2] for k in range(count)), dtype=np.int64,
                              count=count)
        else:
            count = len(jobs)
            idx = np.asarray(jobs, dtype=np.int64)
        running = self.running_est
        r_end = np.fromiter((e for e, _ in running), dtype=float, count=len(running))
        r_job = np.fromiter((j for _, j in running), dtype=np.int64, count=len(running))
        view = ChoiceView(
            kind=kind, now=now, free_nodes=self.free, total_nodes=self.total_nodes,
            procs_per_node=self.ppn, jobs=idx, submit=self._submit[idx],
            procs=self._procs[idx], estimate=self._estimate[idx], need=self._need[idx],
            running_end=r_end, running_need=self._need[r_job], queue_length=len(entries),
            rejections=self.rejected.get(int(idx[0]), 0) if kind == "inspect" and count else 0,
        )
        if self.pool_take is not None:
            view.extra = self.pool_view(idx, r_job)
        return view

    def pool_view(self, idx: np.ndarray, r_job: np.ndarray) -> dict:
        """``ChoiceView.extra`` with pools: capacities, free amounts, the window jobs' and
        the running jobs' takes, and every waiting job's demand (for contention measures)."""
        entries = self.entries
        queued = np.fromiter((e[2] for e in entries), dtype=np.int64, count=len(entries))
        return {
            "pool_names": self.pool_names,
            "pool_cap": np.asarray(self.pool_cap, dtype=np.int64),
            "pool_free": np.asarray(self.pool_free, dtype=np.int64),
            "pool_take": self._take[idx],
            "running_take": self._take[r_job],
            "queue_need": self._need[queued],
            "queue_take": self._take[queued],
            "queue_estimate": self._estimate[queued],
        }


    def enqueue(self, job: int, now: float) -> None:
        """Queue an arriving job."""
        s = self.submit[job]
        if self.uses_now:
            self.entries.append((None, s, job))  # keyed at the next decision
        else:
            entry = (self.key(now, s, self.procs[job], self.estimate[job]), s, job)
            insort(self.entries, entry)
            if self.bf_fresh is not None:
                self.bf_fresh.append(entry)

    def waiting(self) -> int:
        return len(self.entries) + (self.head is not None)

    def start(self, job: int, now: float, started: list[int]) -> None:
        """Start a job now (the caller checked that it fits); record it in ``started``."""
        if self.need[job] > self.free:  # a broken rule must not over-allocate silently
            raise RuntimeError(f"job {job} needs {self.need[job]} nodes, {self.free} free")
        self.free -= self.need[job]
        est_end = self.est_end[job] = now + self.estimate[job]
        insort(self.running_est, (est_end, job))
        started.append(job)

    def release(self, job: int) -> None:
        """A running job finished: give its nodes back."""
        self.free += self.need[job]
        running = self.running_est
        del running[bisect_left(running, (self.est_end[job], job))]
        self.bf_fresh = None   # the shadow time moves: EASY scans the whole queue again


class PoolQueueState(QueueState):
    """A ``QueueState`` whose jobs also take from global pools (``pool_take`` set).

    Kept apart so that the CPU-only ``start``/``release`` stay exactly as fast as before.
    """

    def start(self, job: int, now: float, started: list[int]) -> None:
        if not self.pools_fit(job):  # a broken rule must not over-allocate silently
            raise RuntimeError(
                f"job {job} takes {self.pool_take[job]} from the pools, {self.pool_free} free"
            )
        super().start(job, now, started)
        pool_free = self.pool_free
        for k, t in enumerate(self.pool_take[job]):
            pool_free[k] -= t

    def release(self, job: int) -> None:
        super().release(job)
        pool_free = self.pool_free
        for k, t in enumerate(self.pool_take[job]):
            pool_free[k] += t
