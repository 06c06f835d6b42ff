"""RLScheduler's environment for many sequences at once: the fast training path.

The reference environment (``episode.SchedulingEpisode``) steps the simulator engine
through a generator and builds a ``ChoiceView`` and its features for one sequence per
step. Here ``slots`` sequences live in one ``fastsim.Sim`` (numpy arrays indexed
``[slot, job]``) and compiled functions (numba) run the engine's event loop and decision
rule on them: FCFS queue, the scorer's pick from the window, no backfilling or EASY in
FCFS order. No generator, no view, no Python object per job or per step:

- ``step_many(slots, positions)`` answers every asking slot and runs each to its next
  question in one compiled call;
- ``observe()`` writes the window rows of every asking slot (a ragged block: one
  sequence's rows contiguous, in window order) in one compiled call.

Jobs are renumbered in FCFS order (submit time, then position: the engine's tie rule),
so a slot's queue is a sorted prefix of ``q``. The same decisions give the same start
times, metrics and observations (bit for bit) as the reference; tests replay sequences
through both, step by step, in both backfill modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.selection import MASK_RULES
from ..sim.cluster import Cluster
from ..sim.metrics import Metrics
from . import fastsim
from .episode import METRICS, metric_value
from .fastsim import (easy_pass, enqueue, first_waiting, kernel, next_end, pop_queue,
                      release_until, start_job)
from .features import CAP, LOW, RL_FEATURES, Normalisation

INF = np.inf
BACKFILLS = ("none", "easy")


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


@kernel
def _run(sim, s, easy):
    """The engine's loop from the slot's last decision to its next question (True) or to
    the end of the sequence (False)."""
    n = sim.n[s]
    while sim.nxt[s] < n or sim.nrun[s] > 0:
        t = sim.sub[s, sim.nxt[s]] if sim.nxt[s] < n else INF
        if sim.nrun[s] > 0:
            e = next_end(sim, s)
            if e <= t:
                t = e
                release_until(sim, s, t)
        while sim.nxt[s] < n and sim.sub[s, sim.nxt[s]] <= t:
            enqueue(sim, s, sim.nxt[s])
            sim.nxt[s] += 1
        head = sim.head[s]
        if head < 0 and sim.qlen[s] == 0:
            continue
        sim.decisions[s] += 1
        if sim.free[s] == 0 and head >= 0:
            continue
        if head >= 0:
            if sim.need[s, head] > sim.free[s]:
                if easy:
                    easy_pass(sim, s, t)
                continue
            start_job(sim, s, head, t)
            sim.head[s] = -1
            if sim.qlen[s] == 0:
                continue
        sim.now[s] = t
        sim.asking[s] = True
        return True
    sim.asking[s] = False
    return False


@kernel
def _step(sim, s, pos, easy):
    """Start the picked job or make it the head; True while the slot asks again."""
    sim.steps[s] += 1
    job = pop_queue(sim, s, pos)
    t = sim.now[s]
    if sim.need[s, job] > sim.free[s]:
        sim.head[s] = job
        if easy:
            easy_pass(sim, s, t)
    else:
        start_job(sim, s, job, t)
        if sim.qlen[s] > 0:
            return True
    return _run(sim, s, easy)


@kernel
def _step_many(sim, slots, positions, easy, out):
    for i in range(len(slots)):
        out[i] = _step(sim, slots[i], positions[i], easy)


@kernel
def _observe(sim, active, starts, window, total, wait_s, estimate_s, padding, rows, allowed):
    """``features.rl_observation`` and ``selection.action_mask`` for every asking slot."""
    for i in range(len(active)):
        s = active[i]
        r0 = starts[i]
        count = min(sim.qlen[s], window)
        free = sim.free[s]
        now = sim.now[s]
        share = min(free / total, CAP)
        runnable = False
        job = first_waiting(sim, s) if count else 0
        for k in range(count):
            while not sim.waiting[s, job]:
                job += 1
            r = r0 + k
            need = sim.need[s, job]
            rows[r, 0] = min((now - sim.sub[s, job]) / wait_s, CAP)
            rows[r, 1] = min(sim.est[s, job] / estimate_s, CAP)
            rows[r, 2] = min(need / total, CAP)
            rows[r, 4] = share
            if need <= free:
                rows[r, 3] = CAP
                rows[r, 5] = 0.0
                runnable = True
                allowed[r] = True
            else:
                rows[r, 3] = LOW
                # ChoiceView.earliest_start: the first running job's estimated end
                # (ascending) after which enough nodes are free; a past end counts as now
                avail = free
                wait = INF
                for j in range(sim.nrun[s]):
                    avail += sim.need[s, sim.rs_job[s, j]]
                    if avail >= need:
                        d = sim.rs_end[s, j] - now
                        wait = d if d > 0.0 else 0.0
                        break
                rows[r, 5] = min(wait / wait_s, CAP)
                allowed[r] = padding
            job += 1
        if not runnable:  # nothing can start: every job may be picked
            for k in range(count):
                allowed[r0 + k] = True


class BatchSchedulingEnv:
    """``slots`` RLScheduler sequences on one machine, stepped together.

    ``load(slot, jobs)`` puts a sequence in a slot and runs it to its first question
    (False if it never asks); ``observe()`` gives the rows of every slot that waits for a
    pick; ``step(slot, position)`` answers one slot (a window position, as
    ``SchedulingEpisode.step``) and runs it to its next question (False once done; then
    ``schedule(slot)`` and ``metrics(slot)`` give its outcome); ``step_many(slots,
    positions)`` answers several at once.
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
        self.easy = backfill == "easy"
        self.metric = metric
        self.window = window
        self.mask_rule = mask
        self.norm = norm or Normalisation(window=window)
        self.slots = slots
        self.width = jobs
        self.sim = fastsim.new_sim(slots, jobs, cluster.nodes)
        self.asking = self.sim.asking  # (slots,) bool, a view of the state

    def load(self, slot: int, jobs: Sequence) -> bool:
        if len(jobs) > self.width:
            raise InvalidInput(f"a sequence of {len(jobs)} jobs in a {self.width}-job batch")
        if not jobs:
            raise InvalidInput("an episode needs at least one job")
        cols = fastsim.job_columns(jobs, self.cluster.procs)
        order = np.argsort(cols[0], kind="stable")  # FCFS: submit time, then position
        fastsim.put_sequence(self.sim, slot, cols, order, self.ppn, self.total)
        return bool(_run(self.sim, slot, self.easy))

    def _check(self, slots: np.ndarray, positions: np.ndarray) -> None:
        sim = self.sim
        if len(slots) and not sim.asking[slots].all():
            bad = slots[~sim.asking[slots]][0]
            raise InvalidInput(f"slot {bad} is not waiting for an answer")
        limit = np.minimum(sim.qlen[slots], self.window)
        wrong = (positions < 0) | (positions >= limit)
        if wrong.any():
            k = int(np.flatnonzero(wrong)[0])
            raise InvalidInput(f"slot {slots[k]}: position {positions[k]} is outside the window")

    def step(self, slot: int, position: int) -> bool:
        """Answer ``slot``'s question with a window position; False once it is done."""
        sim = self.sim
        if not (0 <= slot < self.slots and sim.asking[slot]):
            raise InvalidInput(f"slot {slot} is not waiting for an answer")
        if not 0 <= position < min(sim.qlen[slot], self.window):
            raise InvalidInput(f"slot {slot}: position {position} is outside the window")
        return bool(_step(sim, slot, position, self.easy))

    def step_many(self, slots, positions) -> np.ndarray:
        """Answer several slots (distinct, asking) at once; per slot, whether it asks
        again (False once its sequence is done)."""
        slots = np.asarray(slots, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        self._check(slots, positions)
        out = np.empty(len(slots), dtype=np.bool_)
        _step_many(self.sim, slots, positions, self.easy, out)
        return out

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        """Start and end times in the sequence's own job order."""
        return fastsim.schedule(self.sim, slot)

    def metrics(self, slot: int) -> Metrics:
        return fastsim.metrics(self.sim, slot, self.max_procs)

    def reward(self, slot: int) -> tuple[float, float]:
        """(reward, metric value) of a finished sequence, as ``SchedulingEpisode``."""
        value = metric_value(self.metrics(slot), self.metric)
        return (value if self.metric == "util" else -value), value

    def observe(self) -> BatchObservation:
        sim = self.sim
        active = np.flatnonzero(sim.asking)
        counts = np.minimum(sim.qlen[active], self.window)
        starts = np.zeros(len(active), dtype=np.int64)
        np.cumsum(counts[:-1], out=starts[1:])
        total = int(counts.sum())
        rows = np.empty((total, len(RL_FEATURES)))
        allowed = np.empty(total, dtype=np.bool_)
        norm = self.norm
        _observe(sim, active, starts, self.window, float(self.total), float(norm.wait_s),
                 float(norm.estimate_s), self.mask_rule == "padding", rows, allowed)
        seq = np.repeat(np.arange(len(active)), counts)
        return BatchObservation(active, rows, seq, counts, starts, allowed)
