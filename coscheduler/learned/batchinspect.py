"""SchedInspector's environment for many sequences at once: ``batchenv.py``'s approach
(``fastsim.Sim`` state, compiled loops) for the inspector's question, "accept the base
policy's pick?".

Per sequence the engine's event loop and ``decision.decide_selected`` for an inspector
run compiled: the base policy's queue, a pick rejected at most ``max_rejections`` times
(nothing more starts at that decision, and a retry ``retry_after`` seconds later unless
another event comes first), no backfilling or EASY in the base policy's order. Jobs are
renumbered in the base policy's order (its key, then submit time, then position: the
engine's tie rule), which needs a key that does not change with time (SJF, F1, SAF,
FCFS...; not WFP3 or UNICEP), so a slot's queue is a sorted prefix of ``q``.

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
from . import fastsim
from .fastsim import (easy_pass, enqueue, first_waiting, kernel, next_end, pop_queue,
                      release_until, start_job)
from .features import CAP, INSPECTOR_FEATURES, LOW, Normalisation

INF = np.inf


@kernel
def _decide(sim, s, t, easy, max_rejections):
    """``decide_selected`` from its top; True when it asks about the queue's first job."""
    need = sim.need
    while True:
        if sim.head[s] < 0:
            if sim.qlen[s] == 0:
                return False
            if sim.rejected[s, first_waiting(sim, s)] < max_rejections:
                sim.now[s] = t
                return True
            sim.head[s] = pop_queue(sim, s, 0)
        head = sim.head[s]
        if need[s, head] > sim.free[s]:
            if easy:
                easy_pass(sim, s, t)
            return False
        start_job(sim, s, head, t)
        sim.head[s] = -1


@kernel
def _run(sim, s, easy, max_rejections):
    n = sim.n[s]
    while sim.nxt[s] < n or sim.nrun[s] > 0 or sim.wake[s] < INF:
        t = sim.sub[s, sim.arrivals[s, sim.nxt[s]]] if sim.nxt[s] < n else INF
        e = next_end(sim, s)
        if sim.wake[s] < t and sim.wake[s] < e:
            t = sim.wake[s]  # a retry after a rejection, before any other event
        if e <= t:
            t = e
            release_until(sim, s, t)
        while sim.nxt[s] < n and sim.sub[s, sim.arrivals[s, sim.nxt[s]]] <= t:
            enqueue(sim, s, sim.arrivals[s, sim.nxt[s]])
            sim.nxt[s] += 1
        if sim.head[s] < 0 and sim.qlen[s] == 0:
            continue
        sim.wake[s] = INF
        sim.decisions[s] += 1
        if sim.free[s] == 0 and sim.head[s] >= 0:
            continue
        if _decide(sim, s, t, easy, max_rejections):
            sim.asking[s] = True
            return True
    sim.asking[s] = False
    return False


@kernel
def _step(sim, s, accept, easy, max_rejections, retry_after):
    sim.steps[s] += 1
    t = sim.now[s]
    if not accept:
        sim.rejected[s, first_waiting(sim, s)] += 1
        sim.rejections[s] += 1
        sim.wake[s] = t + retry_after
        return _run(sim, s, easy, max_rejections)  # nothing more starts at this decision
    sim.head[s] = pop_queue(sim, s, 0)
    if _decide(sim, s, t, easy, max_rejections):
        return True
    return _run(sim, s, easy, max_rejections)


@kernel
def _step_many(sim, slots, accept, easy, max_rejections, retry_after, out):
    for i in range(len(slots)):
        out[i] = _step(sim, slots[i], accept[i], easy, max_rejections, retry_after)


@kernel
def _base_replay(sim, s, easy, max_rejections, nodes, max_procs, out):
    """The base policy alone (every pick accepted): its metrics into ``out``, then the
    slot back at its start, run to its first question; that answer is returned."""
    asking = _run(sim, s, easy, max_rejections)
    while asking:
        asking = _step(sim, s, True, easy, max_rejections, 0.0)
    fastsim.slot_metrics(sim, s, max_procs, out)
    fastsim.reset_slot(sim, s, nodes)
    return _run(sim, s, easy, max_rejections)


@kernel
def _observe(sim, active, window, total, norm, max_rejections, rows):
    """``features.inspector_observation`` of every asking slot's pick (queue position 0);
    ``norm``: wait_s, estimate_s, retry_after_s."""
    wait_s, estimate_s, retry = norm[0], norm[1], norm[2]
    delay_scale = retry / 10.0 * window
    for i in range(len(active)):
        s = active[i]
        free = sim.free[s]
        qlen = sim.qlen[s]
        count = min(qlen, window)
        pick = first_waiting(sim, s)
        delay = 0.0
        others = 0
        job = pick
        for k in range(count):
            while not sim.waiting[s, job]:
                job += 1
            est = sim.est[s, job]
            delay += retry / (est if est > 10.0 else 10.0)
            if k > 0 and sim.need[s, job] <= free:
                others += sim.need[s, job]  # what the others could use if the pick waits
            job += 1
        need = sim.need[s, pick]
        rows[i, 0] = min((sim.now[s] - sim.sub[s, pick]) / wait_s, CAP)
        rows[i, 1] = min(sim.est[s, pick] / estimate_s, CAP)
        rows[i, 2] = min(need / total, CAP)
        rows[i, 3] = min(sim.rejected[s, pick] / max(max_rejections, 1), 1.0)
        rows[i, 4] = min(delay / delay_scale, CAP)
        rows[i, 5] = CAP if need <= free else LOW
        rows[i, 6] = min(free / total, CAP)
        rows[i, 7] = min(min(float(others), float(free)) / total, CAP)
        rows[i, 8] = min(qlen / window, 1.0)


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
        self.sim = fastsim.new_sim(slots, jobs, cluster.nodes)
        self.asking = self.sim.asking
        self.base_bsld = np.zeros(slots)

    def load(self, slot: int, jobs: Sequence) -> bool:
        if not jobs or len(jobs) > self.width:
            raise InvalidInput(f"a sequence of 1..{self.width} jobs is needed, got {len(jobs)}")
        cols = fastsim.job_columns(jobs, self.cluster.procs)
        key = self.base.key
        n = len(jobs)
        sub, _, procs, est, _ = cols.tolist()
        order = np.array(sorted(range(n), key=lambda i: (
            key(0.0, sub[i], int(procs[i]), est[i]), sub[i], i)), dtype=np.int64)
        sim = self.sim
        fastsim.put_sequence(sim, slot, cols, order, self.ppn, self.total)
        # arrival order: submit time, then position in the replayed list
        sim.arrivals[slot, :n] = sim.rank[slot, np.argsort(cols[0], kind="stable")]
        out = np.empty(7)
        asking = _base_replay(sim, slot, self.easy, self.max_rejections, self.total,
                              self.max_procs, out)
        self.base_bsld[slot] = out[0]
        return bool(asking)

    def step(self, slot: int, accept: bool) -> bool:
        if not (0 <= slot < self.slots and self.sim.asking[slot]):
            raise InvalidInput(f"slot {slot} is not waiting for an answer")
        return bool(_step(self.sim, slot, bool(accept), self.easy, self.max_rejections,
                          float(self.norm.retry_after_s)))

    def step_many(self, slots, accepts) -> np.ndarray:
        """Answer several asking slots at once; per slot, whether it asks again."""
        slots = np.asarray(slots, dtype=np.int64)
        accepts = np.asarray(accepts, dtype=np.bool_)
        if len(slots) and not self.sim.asking[slots].all():
            bad = slots[~self.sim.asking[slots]][0]
            raise InvalidInput(f"slot {bad} is not waiting for an answer")
        out = np.empty(len(slots), dtype=np.bool_)
        _step_many(self.sim, slots, accepts, self.easy, self.max_rejections,
                   float(self.norm.retry_after_s), out)
        return out

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(asking slots, one feature row each)."""
        active = np.flatnonzero(self.sim.asking)
        rows = np.empty((len(active), len(INSPECTOR_FEATURES)))
        norm = self.norm
        _observe(self.sim, active, self.window, float(self.total),
                 np.array([norm.wait_s, norm.estimate_s, norm.retry_after_s], dtype=float),
                 self.max_rejections, rows)
        return active, rows

    def schedule(self, slot: int) -> tuple[list[float], list[float]]:
        return fastsim.schedule(self.sim, slot)

    def metrics(self, slot: int):
        return fastsim.metrics(self.sim, slot, self.max_procs)

    def reward(self, slot: int) -> tuple[float, float, float, int]:
        """(reward, inspected bsld, base bsld, rejections), as ``InspectorEpisode``."""
        bsld = self.metrics(slot).avg_bsld
        base = float(self.base_bsld[slot])
        return (base - bsld) / base, bsld, base, int(self.sim.rejections[slot])
