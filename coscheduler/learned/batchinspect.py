"""SchedInspector's environment for many sequences at once (numpy): ``batchenv.py``'s
approach for the inspector's question, "accept the base policy's pick?".

Per sequence the engine's event loop and ``decision.decide_selected`` for an inspector
run on plain lists: the base policy's queue, a pick rejected at most ``max_rejections``
times (nothing more starts at that decision, and a retry ``retry_after`` seconds later
unless another event comes first), no backfilling or EASY in the base policy's order.
Jobs are renumbered in the base policy's order (its key, then submit time, then position:
the engine's tie rule), which needs a key that does not change with time (SJF, F1, SAF,
FCFS...; not WFP3 or UNICEP), so the waiting jobs in index order are the queue and
``observe`` computes every asking sequence's features at once.

Same decisions, same start times and metrics as ``episode.InspectorEpisode`` (tested);
the summed queue delay is a segment sum here, equal to the reference's to rounding.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from heapq import heappop, heappush
from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.queue import QueuePolicy
from ..sim.backfill import shadow_time
from ..sim.cluster import Cluster
from ..sim.engine import simulate
from ..sim.metrics import compute_metrics
from .features import CAP, INSPECTOR_FEATURES, LOW, Normalisation

INF = float("inf")


class _Sequence:
    __slots__ = ("jobs", "order", "n", "submit", "run", "estimate", "need", "arrivals",
                 "free", "head", "entries", "running_est", "ends", "next_arrival", "start",
                 "end", "now", "wake", "rejected", "rejections", "wait_row", "base_bsld")

    def __init__(self, jobs: Sequence, base: QueuePolicy, ppn: int, nodes: int):
        self.jobs = list(jobs)
        self.n = n = len(self.jobs)
        key = base.key
        self.order = sorted(range(n), key=lambda i: (
            key(0.0, jobs[i].submit, jobs[i].procs, jobs[i].estimate), jobs[i].submit, i))
        self.submit = [self.jobs[i].submit for i in self.order]
        self.run = [self.jobs[i].run for i in self.order]
        self.estimate = [self.jobs[i].estimate for i in self.order]
        self.need = [-(-self.jobs[i].procs // ppn) for i in self.order]
        rank = [0] * n
        for k, i in enumerate(self.order):
            rank[i] = k
        # arrival order: submit time, then position in the replayed list
        self.arrivals = [rank[i] for i in sorted(range(n), key=lambda i: self.jobs[i].submit)]
        self.free = nodes
        self.head: int | None = None
        self.entries: list[int] = []
        self.running_est: list[tuple[float, int]] = []
        self.ends: list[tuple[float, int]] = []
        self.next_arrival = 0
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.now = 0.0
        self.wake = INF
        self.rejected = [0] * n
        self.rejections = 0


class BatchInspectorEnv:
    """``slots`` SchedInspector sequences stepped together (see ``BatchSchedulingEnv``):
    ``load``, ``observe`` (one row of ``INSPECTOR_FEATURES`` per asking slot),
    ``step(slot, accept)``, then ``metrics``/``reward``."""

    def __init__(self, cluster: Cluster, slots: int, jobs: int, base: QueuePolicy,
                 backfill: str = "none", *, max_procs: int | None = None,
                 norm: Normalisation | None = None):
        if backfill not in ("none", "easy"):
            raise InvalidInput(f"the batched environment supports backfill none or easy, "
                               f"got {backfill!r}")
        if base.uses_now:
            raise InvalidInput(f"the batched inspector needs a base policy whose key does not "
                               f"change with time; {base.name} does")
        self.cluster = cluster
        self.total = cluster.nodes
        self.ppn = cluster.procs_per_node
        self.max_procs = max_procs or cluster.procs
        self.base = base
        self.backfill = backfill
        self.norm = norm or Normalisation()
        self.window = int(self.norm.window)
        self.slots = slots
        self.width = jobs
        shape = (slots, jobs)
        self.submit = np.zeros(shape)
        self.need = np.zeros(shape, dtype=np.int64)
        self.f_estimate = np.zeros(shape)
        self.delay = np.zeros(shape)   # retry_after / max(estimate, 10) per job
        self.waiting = np.zeros(shape, dtype=bool)
        self.seqs: list[_Sequence | None] = [None] * slots
        self.asking = np.zeros(slots, dtype=bool)

    def load(self, slot: int, jobs: Sequence) -> bool:
        if not jobs or len(jobs) > self.width:
            raise InvalidInput(f"a sequence of 1..{self.width} jobs is needed, got {len(jobs)}")
        s = _Sequence(jobs, self.base, self.ppn, self.total)
        sched = simulate(s.jobs, self.cluster, self.base, self.backfill)
        s.base_bsld = compute_metrics(s.jobs, sched.start, sched.end, self.max_procs).avg_bsld
        self.seqs[slot] = s
        n = s.n
        est = np.ones(self.width)
        est[:n] = s.estimate
        self.submit[slot] = 0.0
        self.submit[slot, :n] = s.submit
        self.need[slot] = 0
        self.need[slot, :n] = s.need
        self.f_estimate[slot] = np.minimum(est / self.norm.estimate_s, CAP)
        self.delay[slot] = self.norm.retry_after_s / np.maximum(est, 10.0)
        self.waiting[slot] = False
        s.wait_row = self.waiting[slot]
        return self._run(slot, s)

    def _start(self, s: _Sequence, job: int, now: float) -> None:
        s.free -= s.need[job]
        insort(s.running_est, (now + s.estimate[job], job))
        finish = s.end[job] = now + s.run[job]
        heappush(s.ends, (finish, job))
        s.start[job] = now
        s.wait_row[job] = False

    def _blocked(self, s: _Sequence, now: float) -> None:
        """The head does not fit: EASY in the base policy's order."""
        if self.backfill != "easy" or not s.entries or s.free == 0:
            return
        need, estimate, entries = s.need, s.estimate, s.entries
        free = s.free
        cands = [job for job in entries if need[job] <= free]
        if not cands:
            return
        shadow, extra = shadow_time(free, need[s.head], s.running_est, need)
        for job in cands:
            nodes = need[job]
            if nodes > free:
                continue
            if now + estimate[job] <= shadow:
                pass
            elif nodes <= extra:
                extra -= nodes
            else:
                continue
            del entries[bisect_left(entries, job)]
            self._start(s, job, now)
            free -= nodes
            if free == 0:
                break

    def _decide(self, s: _Sequence, t: float) -> bool:
        """``decide_selected`` from its top; True when it asks about ``entries[0]``."""
        need = s.need
        while True:
            if s.head is None:
                if not s.entries:
                    return False
                if s.rejected[s.entries[0]] < self.norm.max_rejections:
                    s.now = t
                    return True
                s.head = s.entries.pop(0)
            if need[s.head] > s.free:
                self._blocked(s, t)
                return False
            self._start(s, s.head, t)
            s.head = None

    def _run(self, slot: int, s: _Sequence) -> bool:
        need, n, arrivals = s.need, s.n, s.arrivals
        while s.next_arrival < n or s.ends or s.wake < INF:
            t = s.submit[arrivals[s.next_arrival]] if s.next_arrival < n else INF
            ends = s.ends
            if s.wake < t and (not ends or s.wake < ends[0][0]):
                t = s.wake
            if ends and ends[0][0] <= t:
                t = ends[0][0]
                while ends and ends[0][0] <= t:
                    job = heappop(ends)[1]
                    s.free += need[job]
                    running = s.running_est
                    del running[bisect_left(running, (s.start[job] + s.estimate[job],
                                                      job))]
            while s.next_arrival < n and s.submit[arrivals[s.next_arrival]] <= t:
                job = arrivals[s.next_arrival]
                insort(s.entries, job)
                s.wait_row[job] = True
                s.next_arrival += 1
            if s.head is None and not s.entries:
                continue
            s.wake = INF
            if s.free == 0 and s.head is not None:
                continue
            if self._decide(s, t):
                self.asking[slot] = True
                return True
        self.asking[slot] = False
        return False

    def step(self, slot: int, accept: bool) -> bool:
        s = self.seqs[slot]
        if s is None or not self.asking[slot]:
            raise InvalidInput(f"slot {slot} is not waiting for an answer")
        t = s.now
        if not accept:
            job = s.entries[0]
            s.rejected[job] += 1
            s.rejections += 1
            s.wake = t + self.norm.retry_after_s
            return self._run(slot, s)  # nothing more starts at this decision
        s.head = s.entries.pop(0)
        if self._decide(s, t):
            return True
        return self._run(slot, s)

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(asking slots, one feature row each)."""
        active = np.flatnonzero(self.asking)
        norm = self.norm
        seqs = [self.seqs[k] for k in active.tolist()]
        lo = min(s.entries[0] for s in seqs)
        hi = max(s.entries[-1] for s in seqs) + 1
        waiting = self.waiting[active, lo:hi]
        rank = np.cumsum(waiting, axis=1)
        seq, job = np.nonzero(waiting & (rank <= self.window))
        starts = np.searchsorted(seq, np.arange(len(active)))
        flat = active[seq] * self.width + (job + lo)
        pick = flat[starts]
        free = np.array([s.free for s in seqs])
        now = np.array([s.now for s in seqs])
        total = float(self.total)
        need = self.need.take(flat)
        runnable = need <= free[seq]
        others = np.where(runnable, need, 0)
        others[starts] = 0
        delay = np.add.reduceat(self.delay.take(flat), starts)
        rows = np.empty((len(active), len(INSPECTOR_FEATURES)))
        rows[:, 0] = np.minimum((now - self.submit.take(pick)) / norm.wait_s, CAP)
        rows[:, 1] = self.f_estimate.take(pick)
        rows[:, 2] = np.minimum(self.need.take(pick) / total, CAP)
        rows[:, 3] = np.minimum(np.array([s.rejected[s.entries[0]] for s in seqs])
                                / max(norm.max_rejections, 1), 1.0)
        rows[:, 4] = np.minimum(delay / (norm.retry_after_s / 10.0 * norm.window), CAP)
        rows[:, 5] = np.where(runnable[starts], CAP, LOW)
        rows[:, 6] = np.minimum(free / total, CAP)
        rows[:, 7] = np.minimum(np.minimum(np.add.reduceat(others, starts), free) / total, CAP)
        rows[:, 8] = np.minimum(np.array([len(s.entries) for s in seqs]) / norm.window, 1.0)
        return active, rows

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        s = self.seqs[slot]
        start, end = [0.0] * s.n, [0.0] * s.n
        for k, i in enumerate(s.order):
            start[i] = s.start[k]
            end[i] = s.end[k]
        return start, end

    def metrics(self, slot: int):
        start, end = self.schedule(slot)
        return compute_metrics(self.seqs[slot].jobs, start, end, self.max_procs)

    def reward(self, slot: int) -> tuple[float, float, float, int]:
        """(reward, inspected bsld, base bsld, rejections), as ``InspectorEpisode``."""
        s = self.seqs[slot]
        bsld = self.metrics(slot).avg_bsld
        return (s.base_bsld - bsld) / s.base_bsld, bsld, s.base_bsld, s.rejections
