"""MRSch's training environment, batched: many job sets in flight, stepped together.

The reference is ``sim.engine.simulate(jobs, cluster, agent, "easy", pools=...)`` with an
``MRSchAgent``: multi-resource pools, the agent picking heads from the window (MRSch's
reservation: its first pick that does not fit keeps a reservation until it starts) and
choosing among EASY's candidates (``backfill_choice``). Here the same rules run as numba
kernels (``fastkernels.py``) over numpy arrays indexed ``[slot, job]``: a slot holds one
job set, ``observe`` gives the observations of every asking slot at once (state features,
measurement, goal vector, the action mask), so that the network runs once per batch of
picks, and ``step_many`` answers them. Schedules equal the reference's for the same
decisions; observations equal it to rounding (sums in another order: 1e-15 relative).

``MultiBatchEnv(cluster, pool_names, pool_cap, slots, jobs)``; ``load(slot, jobs,
take)`` (take: ``PoolModel.take`` of the set) returns whether the slot asks; while
``env.asking.any()``: ``obs = env.observe()`` and ``env.step_many(obs.active, picks)``.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.queue import QueuePolicy, POLICIES
from ..sim.cluster import Cluster
from . import fastkernels as fk
from . import mrsch

# per job (slots, jobs), in queue order: submit, estimate, run, nodes, pool takes (slots,
# jobs, pools), position in the set, start, end, waiting flag, arrival order (queue
# indices); running jobs (rs_*, sorted by estimated end), backfill candidates; per slot:
# jobs, free nodes and pool amounts, head (-1: none), queue length and bounds, next
# arrival, running count, steps (picks), decision points, time of the question, asking,
# its kind (PICK/BACKFILL), candidates, EASY's shadow time and extra of every resource;
# pool capacities (int) and every resource's capacity as the features divide by it
MSim = namedtuple("MSim", (
    "sub", "est", "run", "need", "take", "orig", "start", "end", "waiting", "arrivals",
    "rs_end", "rs_job", "cand",
    "n", "free", "pfree", "head", "qlen", "lo", "hi", "nxt", "nrun", "steps", "decisions",
    "now", "asking", "kind", "ncand", "shadow", "extra", "pextra", "cap", "capf"))


def new_msim(slots: int, jobs: int, nodes: int, pool_cap: Sequence[int], window: int) -> MSim:
    shape = (slots, jobs)
    pools = len(pool_cap)
    run_cap = max(1, min(jobs, nodes))  # a running job holds at least one node
    i64, f64 = np.int64, np.float64
    return MSim(
        sub=np.zeros(shape, f64), est=np.ones(shape, f64), run=np.ones(shape, f64),
        need=np.zeros(shape, i64), take=np.zeros((slots, jobs, pools), i64),
        orig=np.zeros(shape, i64), start=np.zeros(shape, f64), end=np.zeros(shape, f64),
        waiting=np.zeros(shape, np.bool_), arrivals=np.zeros(shape, i64),
        rs_end=np.zeros((slots, run_cap), f64), rs_job=np.zeros((slots, run_cap), i64),
        cand=np.zeros((slots, window), i64),
        n=np.zeros(slots, i64), free=np.zeros(slots, i64), pfree=np.zeros((slots, pools), i64),
        head=np.full(slots, -1, i64), qlen=np.zeros(slots, i64), lo=np.zeros(slots, i64),
        hi=np.zeros(slots, i64), nxt=np.zeros(slots, i64), nrun=np.zeros(slots, i64),
        steps=np.zeros(slots, i64), decisions=np.zeros(slots, i64), now=np.zeros(slots, f64),
        asking=np.zeros(slots, np.bool_), kind=np.zeros(slots, i64),
        ncand=np.zeros(slots, i64), shadow=np.zeros(slots, f64), extra=np.zeros(slots, i64),
        pextra=np.zeros((slots, pools), i64), cap=np.asarray(pool_cap, dtype=i64),
        capf=np.maximum(np.array([nodes, *pool_cap], dtype=f64), 1.0))


@dataclass
class MultiObservation:
    """Every asking slot's observation, row ``i`` for slot ``active[i]``."""

    active: np.ndarray    # (A,) slots
    kind: np.ndarray      # (A,) PICK (0) or BACKFILL (1)
    state: np.ndarray     # (A, state_size) ``mrsch.state_features``
    meas: np.ndarray      # (A, R) ``mrsch.measurement``
    goal: np.ndarray      # (A, R) ``mrsch.goal_vector`` (or equal weights: goal "fixed")
    size: np.ndarray      # (A,) window jobs (or backfill candidates) shown
    allowed: np.ndarray   # (A, window) the agent's action mask (False beyond size)


class MultiBatchEnv:
    """``slots`` job sets of at most ``jobs`` jobs each on ``cluster`` with pools
    ``pool_names`` of ``pool_cap``; EASY with the agent choosing among its candidates
    (``backfill_choice``) or in queue order; the window cut in ``window_order``
    (a key that does not change with time); ``mask`` and ``goal`` as ``MRSchAgent``'s."""

    def __init__(self, cluster: Cluster, pool_names: Sequence[str], pool_cap: Sequence[int],
                 slots: int, jobs: int, *, window: int = mrsch.WINDOW, mask: str = "padding",
                 goal: str = "dynamic", backfill_choice: bool = True,
                 window_order: str | QueuePolicy = "FCFS"):
        if not pool_names or len(pool_names) != len(pool_cap):
            raise InvalidInput("MRSch's batched environment needs a multi-resource workload "
                               "(burst buffer or power pools, one capacity each)")
        if any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1
               for c in pool_cap):
            raise InvalidInput(f"pool capacities must be integers >= 1, got {list(pool_cap)}")
        if mask not in ("padding", "runnable"):
            raise InvalidInput(f"unknown mask rule {mask!r}; valid: padding, runnable")
        if goal not in ("dynamic", "fixed"):
            raise InvalidInput(f"unknown goal mode {goal!r}; use dynamic or fixed")
        for name, value in (("slots", slots), ("jobs", jobs), ("window", window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{name} must be an integer >= 1, got {value!r}")
        order = window_order if isinstance(window_order, QueuePolicy) \
            else mrsch.window_order(window_order)
        if order.uses_now:
            raise InvalidInput(f"the batched environment needs a window order whose key "
                               f"does not change with time, not {order.name}; valid: "
                               f"{', '.join(k for k, p in POLICIES.items() if not p.uses_now)}")
        self.cluster = cluster
        self.pool_names = tuple(pool_names)
        self.pool_cap = tuple(int(c) for c in pool_cap)
        self.slots, self.width, self.window = slots, jobs, window
        self.order = order
        self.padding = mask == "padding"
        self.dynamic = goal == "dynamic"
        self.choice = bool(backfill_choice)
        self.node_units = min(cluster.nodes, mrsch.MAX_NODE_UNITS)
        self.state_len = mrsch.state_size(cluster.nodes, len(self.pool_cap), window)
        self.measures = 1 + len(self.pool_cap)
        self.scale = float(np.log1p(mrsch.TIME_SCALE_MIN))
        self.sim = new_msim(slots, jobs, cluster.nodes, self.pool_cap, window)
        self.asking = self.sim.asking  # (slots,) bool, a view of the state
        self._demand = np.zeros(self.measures)

    def load(self, slot: int, jobs: Sequence, take: Sequence[Sequence[int]]) -> bool:
        """Put a job set (and its pool takes, ``PoolModel.take``) into ``slot`` and run to
        its first question; False when it never asks. Bad input gets the engine's error."""
        n = len(jobs)
        if not 0 <= slot < self.slots:
            raise InvalidInput(f"slot {slot} outside 0..{self.slots - 1}")
        if n == 0:
            raise InvalidInput("a job set needs at least one job")
        if n > self.width:
            raise InvalidInput(f"a set of {n} jobs in a {self.width}-job batch")
        pools = len(self.pool_cap)
        try:
            tk = np.asarray(take, dtype=np.int64)
        except (TypeError, ValueError):
            tk = None
        if tk is None or tk.shape != (n, pools):
            raise InvalidInput(f"{len(take)} pool requests for {n} jobs, {pools} amounts "
                               "each, are needed")
        cols = np.array([(j.submit, j.run, j.procs, j.estimate) for j in jobs],
                        dtype=np.float64).reshape(n, 4).T
        sub, run, procs_f, est = cols
        bad = ~((run > 0) & (est > 0) & (sub >= 0) & (procs_f >= 1)
                & (procs_f <= self.cluster.procs))
        bad |= ((tk < 0) | (tk > np.asarray(self.pool_cap))).any(axis=1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInput(
                f"job at position {i}: run time and estimate must be > 0, submit time >= 0, "
                f"1 <= processors <= {self.cluster.procs} and pool takes within "
                f"{list(self.pool_cap)}")
        procs = procs_f.astype(np.int64)
        key = self.order.key
        # queue order: the policy's key, then submit time, then position (the engine's)
        order = np.array(sorted(range(n), key=lambda i: (key(0.0, sub[i], int(procs[i]),
                                                             est[i]), sub[i], i)),
                         dtype=np.int64)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        sim = self.sim
        sim.sub[slot, :n] = sub[order]
        sim.run[slot, :n] = run[order]
        sim.est[slot, :n] = est[order]
        sim.need[slot, :n] = -(-procs[order] // self.cluster.procs_per_node)
        sim.take[slot, :n] = tk[order]
        sim.orig[slot, :n] = order
        sim.arrivals[slot, :n] = rank[np.argsort(sub, kind="stable")]
        sim.n[slot] = n
        fk.reset_slot(sim, slot, self.cluster.nodes)
        return bool(fk.mr_run(sim, slot, self.window, self.choice))

    def _check(self, slots: np.ndarray, positions: np.ndarray) -> None:
        sim = self.sim
        if ((slots < 0) | (slots >= self.slots)).any() or len(np.unique(slots)) != len(slots):
            raise InvalidInput("slots must be distinct and within the batch")
        if len(slots) and not sim.asking[slots].all():
            bad = slots[~sim.asking[slots]][0]
            raise InvalidInput(f"slot {bad} is not waiting for an answer")
        limit = np.where(sim.kind[slots] == fk.BACKFILL, sim.ncand[slots],
                         np.minimum(sim.qlen[slots], self.window))
        wrong = (positions < 0) | (positions >= limit)
        if wrong.any():
            k = int(np.flatnonzero(wrong)[0])
            raise InvalidInput(f"slot {slots[k]}: position {positions[k]} is outside the "
                               f"window of {limit[k]} jobs")

    def step_many(self, slots, positions) -> np.ndarray:
        """Answer several slots (distinct, asking) at once; per slot, whether it asks
        again (False once its set is done)."""
        slots = np.asarray(slots, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        if slots.shape != positions.shape or slots.ndim != 1:
            raise InvalidInput("one position per slot")
        self._check(slots, positions)
        out = np.empty(len(slots), dtype=np.bool_)
        fk.mr_step_many(self.sim, slots, positions, self.window, self.choice, out)
        return out

    def observe(self, active: np.ndarray | None = None) -> MultiObservation:
        """The observations of every asking slot (or of ``active``, asking ones)."""
        sim = self.sim
        active = np.flatnonzero(sim.asking) if active is None \
            else np.asarray(active, dtype=np.int64)
        a = len(active)
        states = np.empty((a, self.state_len))
        meas = np.empty((a, self.measures))
        goals = np.empty((a, self.measures))
        sizes = np.empty(a, dtype=np.int64)
        allowed = np.empty((a, self.window), dtype=np.bool_)
        fk.mr_observe(sim, active, self.window, self.node_units, mrsch.POOL_UNITS,
                      self.dynamic, self.padding, self.scale, states, meas, goals, sizes,
                      allowed, self._demand)
        return MultiObservation(active, sim.kind[active].copy(), states, meas, goals, sizes,
                                allowed)

    def schedule(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Start and end times in the set's own job order."""
        n = int(self.sim.n[slot])
        rank = np.empty(n, dtype=np.int64)
        rank[self.sim.orig[slot, :n]] = np.arange(n)
        return self.sim.start[slot, rank].copy(), self.sim.end[slot, rank].copy()

    def steps(self, slot: int) -> int:
        """Picks answered in the slot's set so far (environment steps)."""
        return int(self.sim.steps[slot])


def greedy_picks(params: dict, obs: MultiObservation, window: int, measures: int
                 ) -> np.ndarray:
    """``MRSchAgent``'s greedy pick of every observation: one forward pass over the batch,
    the best allowed goal-weighted prediction (the first on ties)."""
    pred = mrsch.forward(params, obs.state, obs.meas, obs.goal, window=window,
                         measures=measures)
    scores = mrsch.objective(pred, obs.goal)
    return np.argmax(np.where(obs.allowed, scores, -np.inf), axis=1)


def explore(picks: np.ndarray, obs: MultiObservation, epsilon: float,
            rng: np.random.Generator) -> np.ndarray:
    """Epsilon-greedy: each pick, with probability ``epsilon``, replaced by an allowed
    position drawn uniformly (the agent's ``rng.choice(flatnonzero(allowed))``)."""
    if epsilon <= 0 or len(picks) == 0:
        return picks
    u = rng.random((2, len(picks)))
    counts = obs.allowed.sum(axis=1)
    nth = np.minimum((u[1] * counts).astype(np.int64), counts - 1)
    # the nth allowed position of each row
    cum = np.cumsum(obs.allowed, axis=1)
    random = np.argmax(cum > nth[:, None], axis=1)
    return np.where(u[0] < epsilon, random, picks)


@dataclass
class SetRecord:
    """One job set's picks in order, as ``MRSchAgent(record=True)`` keeps them: state
    (float32, as the replay memory stores it), measurement, goal, the position taken."""

    state: np.ndarray
    meas: np.ndarray
    goal: np.ndarray
    action: np.ndarray


def collect(env: MultiBatchEnv, sets: Sequence[tuple[Sequence, Sequence]], params: dict,
            epsilon: float, rng: np.random.Generator) -> list[SetRecord]:
    """Play every ``(jobs, take)`` set through ``env`` with the agent acting
    epsilon-greedily on ``params`` (one forward pass per batch of picks), at most
    ``env.slots`` sets in flight (a slot is refilled as its set ends); their records in
    the order of ``sets``."""
    slots, width = env.slots, env.width
    s_rec = np.zeros((slots, width, env.state_len), np.float32)
    m_rec = np.zeros((slots, width, env.measures))
    g_rec = np.zeros((slots, width, env.measures))
    a_rec = np.zeros((slots, width), np.int64)
    count = np.zeros(slots, np.int64)
    owner = np.full(slots, -1)
    out: list[SetRecord | None] = [None] * len(sets)
    nxt = 0

    def finish(slot: int) -> None:
        k, c = owner[slot], count[slot]
        out[k] = SetRecord(s_rec[slot, :c].copy(), m_rec[slot, :c].copy(),
                           g_rec[slot, :c].copy(), a_rec[slot, :c].copy())

    def fill(slot: int) -> None:
        nonlocal nxt
        while nxt < len(sets):
            owner[slot], count[slot] = nxt, 0
            nxt += 1
            if env.load(slot, *sets[owner[slot]]):
                return
            finish(slot)   # a set that never asks: no picks

    for slot in range(slots):
        fill(slot)
    while env.asking.any():
        o = env.observe()
        picks = explore(greedy_picks(params, o, env.window, env.measures), o, epsilon, rng)
        a, c = o.active, count[o.active]
        s_rec[a, c], m_rec[a, c], g_rec[a, c], a_rec[a, c] = o.state, o.meas, o.goal, picks
        count[a] += 1
        more = env.step_many(a, picks)
        for slot in a[~more]:
            finish(int(slot))
            fill(int(slot))
    return out
