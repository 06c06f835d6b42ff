"""SchedInspector's environment for many sequences at once: ``batchenv.py``'s approach
(``batchstate.Sim`` state, compiled loops in ``fastsim.py``) for the inspector's
question, "accept the base policy's pick?".

Per sequence the engine's event loop and ``decision.decide_selected`` for an inspector
run compiled: the base policy's queue, a pick rejected at most ``max_rejections`` times
(nothing more starts at that decision, and a retry ``retry_after`` seconds later unless
another event comes first), no backfilling or EASY in the base policy's order. Jobs are
renumbered in the base policy's order (its key, then submit time, then position: the
engine's tie rule), which needs a key that does not change with time (SJF, F1, SAF,
FCFS...; not WFP3 or UNICEP), so a slot's queue is its waiting jobs in index order.

The reward needs the base policy's own replay of each sequence: the same compiled loop
accepting every pick (``decide`` and ``decide_selected`` with an always-accepting
inspector start the same jobs), run at ``load``.

Same decisions, same start times and metrics as ``episode.InspectorEpisode`` (tested);
the summed queue delay adds in window order, equal to the reference's to rounding.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.queue import QueuePolicy
from ..sim.cluster import Cluster
from . import batchstate, fastsim
from .features import INSPECTOR_FEATURES, Normalisation



class BatchInspectorEnv:
    """``slots`` SchedInspector sequences stepped together (see ``BatchSchedulingEnv``):
    ``load``, ``observe`` (one row of ``INSPECTOR_FEATURES`` per asking slot),
    ``step(slot, accept)`` or ``step_many(slots, accepts)``, then ``metrics``/``reward``."""

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
        self.easy = backfill == "easy"
        self.norm = norm or Normalisation()
        self.window = int(self.norm.window)
        self.max_rejections = int(self.norm.max_rejections)
        self.slots = slots
        self.width = jobs
        self.sim = batchstate.new_sim(slots, jobs, cluster.nodes)
        self.asking = self.sim.asking
        self.base_bsld = np.zeros(slots)

    def load(self, slot: int, jobs: Sequence) -> bool:
        if not jobs or len(jobs) > self.width:
            raise InvalidInput(f"a sequence of 1..{self.width} jobs is needed, got {len(jobs)}")
        cols = batchstate.job_columns(jobs, self.cluster.procs)
        key = self.base.key
        n = len(jobs)
        sub, _, procs, est, _ = cols.tolist()
        order = np.array(sorted(range(n), key=lambda i: (
            key(0.0, sub[i], int(procs[i]), est[i]), sub[i], i)), dtype=np.int64)
        sim = self.sim
        batchstate.put_sequence(sim, slot, cols, order, self.ppn, self.total)
        # arrival order: submit time, then position in the replayed list
        sim.arrivals[slot, :n] = sim.rank[slot, np.argsort(cols[0], kind="stable")]
        out = np.empty(7)
        asking = fastsim.insp_base_replay(sim, slot, self.easy, self.max_rejections, self.total,
                              self.max_procs, out)
        self.base_bsld[slot] = out[0]
        return bool(asking)

    def step(self, slot: int, accept: bool) -> bool:
        if not (0 <= slot < self.slots and self.sim.asking[slot]):
            raise InvalidInput(f"slot {slot} is not waiting for an answer")
        return bool(fastsim.insp_step(self.sim, slot, bool(accept), self.easy, self.max_rejections,
                          float(self.norm.retry_after_s)))

    def step_many(self, slots, accepts) -> np.ndarray:
        """Answer several asking slots at once; per slot, whether it asks again."""
        slots = np.asarray(slots, dtype=np.int64)
        accepts = np.asarray(accepts, dtype=np.bool_)
        if len(slots) and not self.sim.asking[slots].all():
            bad = slots[~self.sim.asking[slots]][0]
            raise InvalidInput(f"slot {bad} is not waiting for an answer")
        out = np.empty(len(slots), dtype=np.bool_)
        fastsim.insp_step_many(self.sim, slots, accepts, self.easy, self.max_rejections,
                   float(self.norm.retry_after_s), out)
        return out

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(asking slots, one feature row each)."""
        active = np.flatnonzero(self.sim.asking)
        rows = np.empty((len(active), len(INSPECTOR_FEATURES)))
        norm = self.norm
        fastsim.insp_observe(self.sim, active, self.window, float(self.total),
                 np.array([norm.wait_s, norm.estimate_s, norm.retry_after_s], dtype=float),
                 self.max_rejections, rows)
        return active, rows

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        return batchstate.schedule(self.sim, slot)

    def metrics(self, slot: int):
        return batchstate.metrics(self.sim, slot, self.max_procs)

    def reward(self, slot: int) -> tuple[float, float, float, int]:
        """(reward, inspected bsld, base bsld, rejections), as ``InspectorEpisode``."""
        bsld = self.metrics(slot).avg_bsld
        base = float(self.base_bsld[slot])
        return (base - bsld) / base, bsld, base, int(self.sim.rejections[slot])
