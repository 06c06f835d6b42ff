"""RLScheduler's environment for many sequences at once: the fast training path.

The reference environment (``episode.SchedulingEpisode``) steps the simulator engine
through a generator and builds a ``ChoiceView`` and its features for one sequence per
step. Here ``slots`` sequences live in one ``batchstate.Sim`` (numpy arrays indexed
``[slot, job]`` and ``[slot]``) and compiled functions (numba, ``fastsim.py``) run the
engine's event loop and decision rule on them: FCFS queue, the scorer's pick from the
window, no backfilling or EASY in FCFS order. No generator, no view, no Python object
per job or per step:

- ``step_many(slots, positions)`` answers every asking slot and runs each to its next
  question in one compiled call;
- ``observe()`` writes the window rows of every asking slot (a ragged block: one
  sequence's rows contiguous, in window order) in one compiled call.

Jobs are renumbered in FCFS order (submit time, then position: the engine's tie rule),
so a slot's queue is its waiting jobs in index order. The same decisions give the same start
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
from . import batchstate, fastsim
from .episode import METRICS, metric_value
from .features import RL_FEATURES, Normalisation

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
        self.sim = batchstate.new_sim(slots, jobs, cluster.nodes)
        self.asking = self.sim.asking  # (slots,) bool, a view of the state

    def load(self, slot: int, jobs: Sequence) -> bool:
        if len(jobs) > self.width:
            raise InvalidInput(f"a sequence of {len(jobs)} jobs in a {self.width}-job batch")
        if not jobs:
            raise InvalidInput("an episode needs at least one job")
        cols = batchstate.job_columns(jobs, self.cluster.procs)
        order = np.argsort(cols[0], kind="stable")  # FCFS: submit time, then position
        batchstate.put_sequence(self.sim, slot, cols, order, self.ppn, self.total)
        return bool(fastsim.rl_run(self.sim, slot, self.easy))

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
        return bool(fastsim.rl_step(sim, slot, position, self.easy))

    def step_many(self, slots, positions) -> np.ndarray:
        """Answer several slots (distinct, asking) at once; per slot, whether it asks
        again (False once its sequence is done)."""
        slots = np.asarray(slots, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        self._check(slots, positions)
        out = np.empty(len(slots), dtype=np.bool_)
        fastsim.rl_step_many(self.sim, slots, positions, self.easy, out)
        return out

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        """Start and end times in the sequence's own job order."""
        return batchstate.schedule(self.sim, slot)

    def metrics(self, slot: int) -> Metrics:
        return batchstate.metrics(self.sim, slot, self.max_procs)

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
        fastsim.rl_observe(sim, active, starts, self.window, float(self.total), float(norm.wait_s),
                 float(norm.estimate_s), self.mask_rule == "padding", rows, allowed)
        seq = np.repeat(np.arange(len(active)), counts)
        return BatchObservation(active, rows, seq, counts, starts, allowed)
