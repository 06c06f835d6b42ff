"""One scheduling decision: which waiting jobs start now.

The engine owns time and events; this module owns the rule applied at each decision
point (issue 3, point 3):

1. The waiting queue is ordered by the policy, smallest key first (ties: submit time,
   then position in the trace).
2. The top job starts if it fits; repeat while the top fits.
3. A top job that does not fit becomes the *head*: it keeps its place (later arrivals,
   whatever their key, do not overtake it) until it starts. Only backfilling
   (``backfill.py``) may start other jobs before it.

``decide`` is the seam a co-scheduling step will extend later (guest jobs placed on a
host job's nodes): it reads and updates one ``QueueState`` and returns the jobs started.

Resources beside nodes (``sim/resources.py``): with ``pool_take`` set (a
``PoolQueueState``), a job fits only when its nodes *and* its take from every global pool
(burst buffer, power) are free, and reservations and backfilling count every pool
(``decide_pools``, or ``decide_selected`` with a selector; a selector's view then carries
the pools in ``ChoiceView.extra``). Without pools, ``decide`` runs exactly the CPU-only
path: the pool checks live in separate functions so that it pays nothing for them.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import numpy as np

from ..policies.selection import ChoiceView
from .backfill import conservative_backfill, easy_backfill, shadow_time, shadow_time_pools

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
            insort(self.entries, (self.key(now, s, self.procs[job], self.estimate[job]), s, job))

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


def _reorder(state: QueueState, now: float) -> None:
    """Recompute time-dependent keys and sort (only for policies that use ``now``)."""
    key, submit, procs, estimate = state.key, state.submit, state.procs, state.estimate
    state.entries = sorted(
        [(key(now, submit[j], procs[j], estimate[j]), submit[j], j) for _, _, j in state.entries]
    )


def decide_selected(state: QueueState, now: float, backfill: str
                    ) -> Generator[ChoiceView, Any, list[int]]:
    """``decide`` with a selector choosing each new head (a generator: it yields the
    selector's view and takes the answer back; see ``engine.replay_steps``).

    - A scorer picks the head from the window (FCFS order); a pick that fits starts and
      the scorer is asked again; one that does not fit becomes the head, as in ``decide``.
    - An inspector sees the base policy's top job before it becomes the head. On a
      rejection nothing more starts now (no backfilling either: the reference's skip),
      and the engine adds a decision point ``retry_after`` seconds later.

    Backfilling then runs as in ``decide`` (EASY in queue order: FCFS for a scorer).
    """
    started: list[int] = []
    state.wake = float("inf")
    if state.free == 0 and state.head is not None:
        return started
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    selector = state.selector
    pools = state.pool_take is not None
    while True:
        if head is None:
            if not entries:
                break
            if state.scoring:
                pos = yield state.view(now, "pick")
                if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) \
                        or not 0 <= pos < min(len(entries), state.window):
                    raise ValueError(f"selector {selector.name!r} picked {pos!r}; the window "
                                     f"has {min(len(entries), state.window)} jobs")
                head = entries.pop(int(pos))[2]
            else:
                job = entries[0][2]
                times = state.rejected.get(job, 0)
                if times < selector.max_rejections:
                    if not (yield state.view(now, "inspect")):
                        state.rejected[job] = times + 1
                        state.rejections_total += 1
                        state.wake = now + selector.retry_after
                        break
                head = entries.pop(0)[2]
        if need[head] > state.free or (pools and not state.pools_fit(head)):
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        state.reservation[head] = (
            shadow_time_pools(state, head)[0] if pools
            else shadow_time(state.free, need[head], state.running_est, need)[0]
        )
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        if getattr(selector, "backfill_choice", False) and state.scoring:
            yield from easy_selected(state, now, started)
        else:
            easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started


def easy_selected(state: QueueState, now: float, started: list[int]
                  ) -> Generator[ChoiceView, Any, None]:
    """EASY backfilling whose order a selector chooses (``selector.backfill_choice``).

    EASY's rule is unchanged: the head keeps its reservation (shadow time and the extra of
    every resource, computed once per decision as in ``easy_backfill``); a job may start
    now if it fits now and either ends by its estimate before the shadow time or fits in
    the extra of every resource. Instead of trying the candidates in queue order, the
    selector is shown the first ``window`` candidates in queue order (a ``"backfill"``
    view, ``extra["reserve"]`` holding the reservation) and picks one; it starts, the
    candidates are recomputed, and so on until none is left (DRAS's backfilling on CQSim,
    the code MRSch extends, works this way).
    """
    pools = state.pool_take is not None
    need, estimate, take = state.need, state.estimate, state.pool_take
    if pools:
        shadow, extra, pool_extra = shadow_time_pools(state, state.head)
    else:
        shadow, extra = shadow_time(state.free, need[state.head], state.running_est, need)
        pool_extra = []
    selector = state.selector
    window = state.window
    entries = state.entries
    while entries and state.free > 0:
        cands: list[int] = []
        positions: list[int] = []
        for pos, entry in enumerate(entries):
            job = entry[2]
            if need[job] > state.free or (pools and not state.pools_fit(job)):
                continue
            if now + estimate[job] > shadow and (
                    need[job] > extra
                    or (pools and any(t > e for t, e in zip(take[job], pool_extra)))):
                continue
            cands.append(job)
            positions.append(pos)
            if len(cands) == window:
                break
        if not cands:
            return
        view = state.view(now, "backfill", cands)
        ends = now + state._estimate[view.jobs]
        view.extra["reserve"] = {
            "shadow": shadow, "nodes": extra,
            "pools": np.asarray(pool_extra, dtype=np.int64),
            "past_shadow": ends > shadow,
        }
        pick = yield view
        if isinstance(pick, bool) or not isinstance(pick, (int, np.integer)) \
                or not 0 <= pick < len(cands):
            raise ValueError(f"selector {selector.name!r} picked {pick!r} among "
                             f"{len(cands)} backfill candidates")
        job = cands[int(pick)]
        if now + estimate[job] > shadow:  # runs past the shadow time: uses the extra
            extra -= need[job]
            if pools:
                pool_extra = [e - t for e, t in zip(pool_extra, take[job])]
        del entries[positions[int(pick)]]
        state.start(job, now, started)


def decide(state: QueueState, now: float, backfill: str) -> list[int]:
    """Start what the rules allow at ``now``; return the started jobs in start order."""
    started: list[int] = []
    if state.free == 0 and state.head is not None:
        return started  # nothing fits, not even a one-node job
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    while True:
        if head is None:
            if not entries:
                break
            head = entries.pop(0)[2]
        if need[head] > state.free:
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        # A new head: note the reservation it gets now (the property tests check it).
        state.reservation[head] = shadow_time(state.free, need[head], state.running_est, need)[0]
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started


def decide_pools(state: QueueState, now: float, backfill: str) -> list[int]:
    """``decide`` with pools beside nodes: a job starts when nodes and every pool fit.

    ``decide``'s loop again on purpose: the CPU-only path stays free of the pool tests,
    which cost ~4 % on a 1,024-job window (measured side by side).
    """
    started: list[int] = []
    if state.free == 0 and state.head is not None:
        return started
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    while True:
        if head is None:
            if not entries:
                break
            head = entries.pop(0)[2]
        if need[head] > state.free or not state.pools_fit(head):
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        state.reservation[head] = shadow_time_pools(state, head)[0]
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started
