"""RLScheduler's environment for many sequences at once (numpy): the fast training path.

The reference environment (``episode.SchedulingEpisode``) steps the simulator engine
through a generator and builds a ``ChoiceView`` and its features for one sequence per
step. Here ``slots`` sequences are stepped together:

- per sequence, the event loop and the decision rule of ``sim/engine.py`` and
  ``sim/decision.py`` (FCFS queue, a scorer's pick, no backfilling or EASY in FCFS order)
  run on plain lists: no generator, no view objects;
- the state every feature needs lives in numpy arrays: ``(slots, jobs)`` waiting flags and
  job columns, and per slot the running jobs' estimated ends and nodes, unordered
  (``(slots, nodes)``: one write per start, a swap per end; sorted per observation over
  the most running jobs of any slot only), so
  ``observe`` computes the window rows of every waiting sequence with one set of array
  operations (a ragged block: the rows of one sequence are contiguous, in window order).

Jobs are renumbered in FCFS order (submit time, then position: the engine's tie rule),
so a sequence's waiting jobs in index order are its queue. The same decisions give the
same start times and metrics as the reference (tested step by step, both backfill modes).
Only the RLScheduler case (kind ``scorer``, mask rules of ``MASK_RULES``) is covered;
SchedInspector keeps the reference environment.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.selection import MASK_RULES
from ..sim.backfill import shadow_time
from ..sim.cluster import Cluster
from ..sim.metrics import Metrics, compute_metrics
from .episode import METRICS, metric_value
from .features import CAP, LOW, RL_FEATURES, Normalisation

INF = float("inf")
BACKFILLS = ("none", "easy")
PREFILTER = 96  # EASY: longer queues are filtered with numpy first


class _Sequence:
    """One sequence's event loop state (plain lists, indices in FCFS order)."""

    __slots__ = ("jobs", "order", "n", "submit", "run", "estimate", "need", "free", "head",
                 "entries", "running_est", "ends", "next_arrival", "start", "end", "now",
                 "steps", "decisions", "est_end", "where", "col_job", "wait_row", "end_row",
                 "need_row")

    def __init__(self, jobs: Sequence, ppn: int, nodes: int):
        self.jobs = list(jobs)
        self.n = n = len(self.jobs)
        self.order = sorted(range(n), key=lambda i: self.jobs[i].submit)  # stable
        self.submit = [self.jobs[i].submit for i in self.order]
        self.run = [self.jobs[i].run for i in self.order]
        self.estimate = [self.jobs[i].estimate for i in self.order]
        self.need = [-(-self.jobs[i].procs // ppn) for i in self.order]
        self.free = nodes
        self.head: int | None = None
        self.entries: list[int] = []
        self.running_est: list[tuple[float, int]] = []
        self.ends: list[tuple[float, int]] = []
        self.next_arrival = 0
        self.start = [0.0] * n
        self.end = [0.0] * n
        self.est_end = [0.0] * n
        self.where = [0] * n   # a running job's column in the slot's running arrays
        self.col_job = [0] * min(n, nodes)  # and the job in each column
        self.now = 0.0
        self.steps = 0
        self.decisions = 0


@dataclass
class BatchObservation:
    """The window rows of the sequences that wait for an answer, as one ragged block.

    ``rows`` (M x features) float64 in sequence order then window order; ``seq`` the
    position in ``active`` of each row; ``counts`` the window rows per sequence;
    ``allowed`` the action mask per row.
    """

    active: np.ndarray          # slots asked, ascending
    rows: np.ndarray
    seq: np.ndarray
    counts: np.ndarray
    starts: np.ndarray          # first row of each sequence
    allowed: np.ndarray


class BatchSchedulingEnv:
    """``slots`` RLScheduler sequences on one machine, stepped together.

    ``load(slot, jobs)`` puts a sequence in a slot and runs it to its first question
    (False if it never asks); ``observe()`` gives the rows of every slot that waits for a
    pick; ``step(slot, position)`` answers one slot (a window position, as
    ``SchedulingEpisode.step``) and runs it to its next question (False once done; then
    ``schedule(slot)`` and ``metrics(slot)`` give its outcome).
    """

    def __init__(self, cluster: Cluster, slots: int, jobs: int, backfill: str = "none", *,
                 max_procs: int | None = None, metric: str = "bsld", window: int = 128,
                 mask: str = "runnable", norm: Normalisation | None = None):
        if backfill not in BACKFILLS:
            raise InvalidInput(f"the batched environment supports backfill "
                               f"{' or '.join(BACKFILLS)}, got {backfill!r}")
        if metric not in METRICS:
            raise InvalidInput(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if mask not in MASK_RULES:
            raise InvalidInput(f"unknown mask rule {mask!r}; valid: {', '.join(MASK_RULES)}")
        self.cluster = cluster
        self.total = cluster.nodes
        self.ppn = cluster.procs_per_node
        self.max_procs = max_procs or cluster.procs
        self.backfill = backfill
        self.metric = metric
        self.window = window
        self.mask_rule = mask
        self.norm = norm or Normalisation(window=window)
        self.slots = slots
        self.width = jobs
        shape = (slots, jobs)
        self.submit = np.zeros(shape)
        self.estimate = np.ones(shape)
        self.need = np.zeros(shape, dtype=np.int64)
        # the per-job features, normalised once per sequence
        self.f_estimate = np.zeros(shape)
        self.f_need = np.zeros(shape)
        self.waiting = np.zeros(shape, dtype=bool)
        # running jobs per slot, ascending (estimated end, job): at most one per node
        cap = min(jobs, cluster.nodes)
        self.run_end = np.full((slots, cap), INF)
        self.run_need = np.zeros((slots, cap), dtype=np.int64)
        self.seqs: list[_Sequence | None] = [None] * slots
        self.asking = np.zeros(slots, dtype=bool)

    # -- one sequence, plain Python ---------------------------------------------------

    def load(self, slot: int, jobs: Sequence) -> bool:
        if len(jobs) > self.width:
            raise InvalidInput(f"a sequence of {len(jobs)} jobs in a {self.width}-job batch")
        if not jobs:
            raise InvalidInput("an episode needs at least one job")
        for i, job in enumerate(jobs):
            if not (job.run > 0 and job.estimate > 0 and 1 <= job.procs <= self.cluster.procs):
                raise InvalidInput(f"job at position {i}: run time and estimate must be > 0 and "
                                   f"1 <= processors <= {self.cluster.procs}")
        s = _Sequence(jobs, self.ppn, self.total)
        self.seqs[slot] = s
        n = s.n
        self.submit[slot] = 0.0
        self.estimate[slot] = 1.0
        self.need[slot] = 0
        self.submit[slot, :n] = s.submit
        self.estimate[slot, :n] = s.estimate
        self.need[slot, :n] = s.need
        self.f_estimate[slot] = np.minimum(self.estimate[slot] / self.norm.estimate_s, CAP)
        self.f_need[slot] = np.minimum(self.need[slot] / float(self.total), CAP)
        self.waiting[slot] = False
        self.run_end[slot] = INF
        self.run_need[slot] = 0
        s.wait_row, s.end_row, s.need_row = (self.waiting[slot], self.run_end[slot],
                                             self.run_need[slot])
        return self._run(slot, s)

    def _start(self, slot: int, s: _Sequence, job: int, now: float) -> None:
        s.free -= s.need[job]
        est = s.est_end[job] = now + s.estimate[job]
        if self.backfill == "easy":  # EASY's shadow time walks them in order
            running = s.running_est
            running.insert(bisect_left(running, (est, job)), (est, job))
        r = s.where[job] = len(s.ends)
        s.col_job[r] = job
        s.end_row[r] = est
        s.need_row[r] = s.need[job]
        finish = s.end[job] = now + s.run[job]
        heappush(s.ends, (finish, job))
        s.start[job] = now
        s.wait_row[job] = False

    def _release(self, s: _Sequence, job: int) -> None:
        """A job ended (already off ``s.ends``): its nodes back, its column swapped out."""
        s.free += s.need[job]
        if self.backfill == "easy":
            running = s.running_est
            del running[bisect_left(running, (s.est_end[job], job))]
        k, last = s.where[job], len(s.ends)
        end_row, need_row = s.end_row, s.need_row
        moved = s.col_job[last]
        s.col_job[k] = moved
        s.where[moved] = k
        end_row[k] = end_row[last]
        need_row[k] = need_row[last]
        end_row[last] = INF
        need_row[last] = 0

    def _blocked(self, slot: int, s: _Sequence, now: float) -> None:
        """The head does not fit: EASY backfilling in FCFS order (decision.decide_selected)."""
        if self.backfill != "easy" or not s.entries or s.free == 0:
            return
        need, estimate = s.need, s.estimate
        entries = s.entries
        free = s.free
        # free only shrinks during the pass: a job wider than it is now never starts, so
        # only these are candidates (the head is wider than free: not among them)
        if len(entries) > PREFILTER:  # numpy picks them from a long queue
            n = s.next_arrival
            cands = np.flatnonzero(s.wait_row[:n] & (self.need[slot, :n] <= free)).tolist()
        else:
            cands = [job for job in entries if need[job] <= free]
        if not cands:
            return  # nothing fits now: the reservation would change nothing
        shadow, extra = shadow_time(s.free, need[s.head], s.running_est, need)
        for job in cands:
            nodes = need[job]
            if nodes > free:
                continue
            if now + estimate[job] <= shadow:
                pass  # gone by the shadow time: the head's nodes are back by then
            elif nodes <= extra:
                extra -= nodes  # still running at the shadow time, on nodes the head leaves
            else:
                continue
            del entries[bisect_left(entries, job)]
            self._start(slot, s, job, now)
            free -= nodes
            if free == 0:
                break

    def _run(self, slot: int, s: _Sequence) -> bool:
        """Advance to the next question (True) or to the end of the sequence (False)."""
        need, submit, n = s.need, s.submit, s.n
        while s.next_arrival < n or s.ends:
            t = submit[s.next_arrival] if s.next_arrival < n else INF
            ends = s.ends
            if ends and ends[0][0] <= t:
                t = ends[0][0]
                while ends and ends[0][0] <= t:
                    self._release(s, heappop(ends)[1])
            while s.next_arrival < n and submit[s.next_arrival] <= t:
                s.entries.append(s.next_arrival)  # FCFS order: arrivals come sorted
                self.waiting[slot, s.next_arrival] = True
                s.next_arrival += 1
            if s.head is None and not s.entries:
                continue
            s.decisions += 1
            if s.free == 0 and s.head is not None:
                continue
            if s.head is not None:
                if need[s.head] > s.free:
                    self._blocked(slot, s, t)
                    continue
                self._start(slot, s, s.head, t)
                s.head = None
                if not s.entries:
                    continue
            s.now = t
            self.asking[slot] = True
            return True
        self.asking[slot] = False
        return False

    def step(self, slot: int, position: int) -> bool:
        """Answer ``slot``'s question with a window position; False once it is done."""
        s = self.seqs[slot]
        if s is None or not self.asking[slot]:
            raise InvalidInput(f"slot {slot} is not waiting for an answer")
        if not 0 <= position < min(len(s.entries), self.window):
            raise InvalidInput(f"slot {slot}: position {position} is outside the window")
        s.steps += 1
        job = s.entries.pop(position)
        now = s.now
        if s.need[job] > s.free:
            s.head = job
            self._blocked(slot, s, now)
        else:
            self._start(slot, s, job, now)
            if s.entries:
                return True
        return self._run(slot, s)

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        """Start and end times in the sequence's own job order."""
        s = self.seqs[slot]
        start, end = [0.0] * s.n, [0.0] * s.n
        for k, i in enumerate(s.order):
            start[i] = s.start[k]
            end[i] = s.end[k]
        return start, end

    def metrics(self, slot: int) -> Metrics:
        start, end = self.schedule(slot)
        return compute_metrics(self.seqs[slot].jobs, start, end, self.max_procs)

    def reward(self, slot: int) -> tuple[float, float]:
        """(reward, metric value) of a finished sequence, as ``SchedulingEpisode``."""
        value = metric_value(self.metrics(slot), self.metric)
        return (value if self.metric == "util" else -value), value

    # -- every asking slot at once, numpy ---------------------------------------------

    def observe(self) -> BatchObservation:
        active = np.flatnonzero(self.asking)
        norm = self.norm
        # only the columns between the oldest waiting job and the last arrival can wait
        seqs = [self.seqs[k] for k in active.tolist()]
        lo = min(s.entries[0] for s in seqs)
        hi = max(s.next_arrival for s in seqs)
        waiting = self.waiting[active, lo:hi]
        rank = np.cumsum(waiting, axis=1)
        seq, job = np.nonzero(waiting & (rank <= self.window))
        counts = np.bincount(seq, minlength=len(active))
        starts = np.zeros(len(active), dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        flat = active[seq] * self.width + (job + lo)
        now = np.array([s.now for s in seqs])
        free = np.array([s.free for s in seqs])
        need = self.need.take(flat)
        free_r = free[seq]
        runnable = need <= free_r
        cols = np.empty((len(RL_FEATURES), len(seq)))
        np.minimum((now[seq] - self.submit.take(flat)) / norm.wait_s, CAP, out=cols[0])
        self.f_estimate.take(flat, out=cols[1])
        self.f_need.take(flat, out=cols[2])
        cols[3] = LOW
        cols[3][runnable] = CAP
        np.minimum(free_r / float(self.total), CAP, out=cols[4])
        cols[5] = 0.0
        late = np.flatnonzero(~runnable)
        if len(late):
            cols[5][late] = np.minimum(
                self._earliest(active, max(len(s.ends) for s in seqs), now, free, seq[late],
                               need[late]) / norm.wait_s, CAP)
        if self.mask_rule == "padding":
            allowed = np.ones(len(seq), dtype=bool)
        else:
            any_runnable = np.logical_or.reduceat(runnable, starts)
            allowed = runnable | ~any_runnable[seq]
        return BatchObservation(active, cols.T, seq, counts, starts, allowed)

    def _earliest(self, active, running, now, free, seq, need) -> np.ndarray:
        """``ChoiceView.earliest_start`` for rows that cannot start now: the first running
        job's estimated end (ascending) after which enough nodes are free; one
        searchsorted for the whole batch (sequences shifted apart by ``total + 1``)."""
        width = max(running, 1)
        est = self.run_end[active, :width]
        order = np.argsort(est, axis=1)  # ties: same end, same answer
        est_sorted = np.take_along_axis(est, order, axis=1)
        free_after = free[:, None] + np.cumsum(
            np.take_along_axis(self.run_need[active, :width], order, axis=1), axis=1)
        shift = self.total + 1
        base = np.arange(len(active), dtype=np.int64)[:, None] * shift
        k = np.searchsorted((free_after + base).ravel(), need + seq * shift, side="left")
        k = np.minimum(k - seq * width, width)
        ends = np.concatenate([np.maximum(est_sorted - now[:, None], 0.0),
                               np.full((len(active), 1), INF)], axis=1)
        return ends[seq, k]
