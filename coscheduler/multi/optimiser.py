"""The MultiSched/ROME window optimiser, as pure functions over plain arrays.

At a scheduling event the first ``w`` jobs of the queue in base order form the window
(MultiSched's knob ``k`` sets how many enter; here it is the window size). Among the
window's jobs that fit now on their own (MultiSched's first shrinking step), choose the
subset to start that is Pareto-optimal over the resources' utilisations:

    maximise    sum_i need[i, r] x_i                for every objective resource r
    subject to  sum_i need[i, r] x_i <= free[r]     for every resource r
                x_i in {0, 1}

(ROME's Eqs. 1-5, with more resources as in the MultiSched poster). Fewer than
``EXHAUSTIVE_BELOW`` = 10 candidates: every subset is checked (the poster's second
improvement: exact and as fast there); otherwise pymoo's NSGA-II over bit strings, with a
repair step that makes every individual feasible and maximal (drop random jobs until it
fits, then add the jobs that still fit), started from a random population plus the greedy
base-order fill, so the GA never returns less than the greedy pick.

ROME's decision maker then picks one solution: the one with the highest node utilisation
(ties: the higher summed utilisation of the other resources, then the earlier jobs); it is
replaced by a solution that loses under 10 % of that node utilisation and gains over 40 % on
another resource, the one with the largest summed gain on the other resources. Utilisations
here are the machine's after the start (running jobs included), and the percentages are
relative: ``u_node(s) > 0.9 u_node(best)`` and ``u_r(s) > 1.4 u_r(best)`` for some other r.

Every function takes plain numbers and returns plain numbers; nothing here knows the
simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
# Imported here, not on first use: the first GA decision would otherwise pay ~0.5 s.
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.problem import Problem
from pymoo.core.repair import Repair
from pymoo.operators.crossover.pntx import TwoPointCrossover
from pymoo.operators.mutation.bitflip import BitflipMutation
from pymoo.optimize import minimize

EXHAUSTIVE_BELOW = 10
NODE_LOSS = 0.10
OTHER_GAIN = 0.40
MATING_TRIES = 3


@dataclass(frozen=True)
class ParetoSet:
    """Non-dominated subsets (rows of ``chosen``, bool per candidate) and their totals."""

    chosen: np.ndarray  # [s, k] bool
    totals: np.ndarray  # [s, R] summed needs per resource
    exhaustive: bool


def _nondominated(totals: np.ndarray, objectives: np.ndarray) -> np.ndarray:
    """Mask of rows of ``totals[:, objectives]`` no other row dominates (maximising)."""
    f = totals[:, objectives]
    ge = (f[:, None, :] >= f[None, :, :]).all(axis=2)  # ge[a, b]: a >= b everywhere
    gt = (f[:, None, :] > f[None, :, :]).any(axis=2)
    dominated = (ge & gt).any(axis=0)
    return ~dominated


def _unique_rows(chosen: np.ndarray) -> np.ndarray:
    _, idx = np.unique(np.packbits(chosen, axis=1), axis=0, return_index=True)
    return np.sort(idx)


def exhaustive(need: np.ndarray, free: np.ndarray, objectives: np.ndarray | None = None
               ) -> ParetoSet:
    """Every subset of the ``k`` candidates (``need`` is [k, R]); the feasible Pareto set."""
    need = np.asarray(need, dtype=np.int64)
    k, r = need.shape
    if objectives is None:
        objectives = np.arange(r)
    masks = ((np.arange(1 << k)[:, None] >> np.arange(k)[None, :]) & 1).astype(bool)
    totals = masks.astype(np.int64) @ need
    feasible = (totals <= np.asarray(free)[None, :]).all(axis=1)
    masks, totals = masks[feasible], totals[feasible]
    keep = _nondominated(totals, np.asarray(objectives))
    return ParetoSet(masks[keep], totals[keep], True)


def greedy(need: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Base-order fill: take each candidate in turn while it fits."""
    left = np.array(free, dtype=np.int64)
    out = np.zeros(len(need), dtype=bool)
    for i, row in enumerate(need):
        if (row <= left).all():
            out[i] = True
            left -= row
    return out


def _repair(x: np.ndarray, need: np.ndarray, free: np.ndarray, rng: np.random.Generator
            ) -> np.ndarray:
    """Make each row feasible (drop random jobs) and maximal (add jobs that still fit)."""
    # Plain Python ints: the rows are short, and numpy's per-call cost would dominate.
    x = x.astype(bool)
    rows = x.tolist()
    need_l = need.tolist()
    free_l = [int(v) for v in free]
    r = len(free_l)
    k = len(need_l)
    orders = rng.permuted(np.tile(np.arange(k), (len(rows), 1)), axis=1).tolist()
    for row, order in zip(rows, orders):
        used = [0] * r
        for i in range(k):
            if row[i]:
                ni = need_l[i]
                for j in range(r):
                    used[j] += ni[j]
        if any(used[j] > free_l[j] for j in range(r)):
            for i in order:  # drop in random order until it fits
                if row[i]:
                    row[i] = False
                    ni = need_l[i]
                    for j in range(r):
                        used[j] -= ni[j]
                    if all(used[j] <= free_l[j] for j in range(r)):
                        break
        for i in order:  # then add, in the same random order, whatever still fits
            if not row[i]:
                ni = need_l[i]
                if all(used[j] + ni[j] <= free_l[j] for j in range(r)):
                    row[i] = True
                    for j in range(r):
                        used[j] += ni[j]
    return np.array(rows, dtype=bool).reshape(x.shape)


def genetic(need: np.ndarray, free: np.ndarray, objectives: np.ndarray | None = None, *,
            seed: int = 0, pop_size: int = 40, generations: int = 30) -> ParetoSet:
    """NSGA-II (pymoo) over bit strings; returns the non-dominated feasible subsets found."""
    need = np.asarray(need, dtype=np.int64)
    free = np.asarray(free, dtype=np.int64)
    k, r = need.shape
    obj = np.arange(r) if objectives is None else np.asarray(objectives)
    rng = np.random.default_rng(seed)
    scale = np.maximum(free, 1).astype(float)

    class _Window(Problem):
        def __init__(self) -> None:
            super().__init__(n_var=k, n_obj=len(obj), n_ieq_constr=r, xl=0, xu=1,
                             vtype=bool)

        def _evaluate(self, x, out, *args, **kwargs):
            totals = x.astype(np.int64) @ need
            out["F"] = -(totals[:, obj] / scale[obj])
            out["G"] = (totals - free) / scale

    class _Fit(Repair):
        def _do(self, problem, x, **kwargs):
            return _repair(x, need, free, rng)

    start = rng.random((pop_size, k)) < 0.5
    start[0] = greedy(need, free)
    start[1:] = _repair(start[1:], need, free, rng)
    algorithm = NSGA2(pop_size=pop_size, sampling=start, crossover=TwoPointCrossover(),
                      mutation=BitflipMutation(), repair=_Fit(), eliminate_duplicates=True)
    # A window has few distinct maximal subsets: pymoo would retry mating up to 100 times
    # per generation to fill the offspring with new ones, which is where the time went.
    algorithm.mating.n_max_iterations = MATING_TRIES
    res = minimize(_Window(), algorithm, ("n_gen", generations), seed=seed, verbose=False)
    x = np.atleast_2d(np.asarray(res.pop.get("X"), dtype=bool))
    totals = x.astype(np.int64) @ need
    feasible = (totals <= free[None, :]).all(axis=1)
    x, totals = x[feasible], totals[feasible]
    idx = _unique_rows(x)
    x, totals = x[idx], totals[idx]
    keep = _nondominated(totals, obj)
    return ParetoSet(x[keep], totals[keep], False)


def pareto(need: np.ndarray, free: np.ndarray, objectives: np.ndarray | None = None, *,
           seed: int = 0) -> ParetoSet:
    """Exhaustive below ``EXHAUSTIVE_BELOW`` candidates, NSGA-II from there on."""
    need = np.asarray(need, dtype=np.int64).reshape(len(need), -1)
    if len(need) < EXHAUSTIVE_BELOW:
        return exhaustive(need, free, objectives)
    return genetic(need, free, objectives, seed=seed)


def decide(ps: ParetoSet, used: np.ndarray, capacity: np.ndarray,
           objectives: np.ndarray | None = None) -> int:
    """ROME's decision maker: the row of ``ps`` to start (resource 0 is the nodes).

    ``used`` is what running jobs hold now, ``capacity`` the machine's; utilisations are
    ``(used + totals) / capacity``. Only resources in ``objectives`` count as gains.
    """
    capacity = np.maximum(np.asarray(capacity, dtype=float), 1.0)
    util = (np.asarray(used)[None, :] + ps.totals) / capacity[None, :]
    r = util.shape[1]
    obj = np.arange(r) if objectives is None else np.asarray(objectives)
    others = [j for j in obj if j != 0]
    other_sum = util[:, others].sum(axis=1) if others else np.zeros(len(util))
    # earlier jobs first on full ties: compare the chosen bit strings, first job most
    order_key = [tuple(~row) for row in ps.chosen]
    best = min(range(len(util)), key=lambda s: (-util[s, 0], -other_sum[s], order_key[s]))
    if not others:
        return best
    ok_node = util[:, 0] > (1 - NODE_LOSS) * util[best, 0]
    gains = util[:, others] > (1 + OTHER_GAIN) * util[best, others][None, :]
    eligible = np.flatnonzero(ok_node & gains.any(axis=1))
    if len(eligible) == 0:
        return best
    improvement = (util[eligible][:, others] - util[best, others][None, :]).sum(axis=1)
    return int(eligible[int(np.argmax(improvement))])


def choose(need: np.ndarray, free: np.ndarray, used: np.ndarray, capacity: np.ndarray,
           objectives: np.ndarray | None = None, *, seed: int = 0,
           reserve: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Which candidates to start now: Pareto set, then ROME's decision maker (bool mask).

    ``reserve`` = (``past``, ``extra``) adds EASY's reservation as constraints while a
    head waits: ``past`` [k] is True for candidates still running at the head's shadow
    time, and their summed needs must fit in ``extra`` [R] (what the head leaves free
    then); candidates that end before it only count against ``free``. Objectives and the
    decision maker still see the utilisations now.
    """
    need = np.asarray(need, dtype=np.int64)
    if len(need) == 0:
        return np.zeros(0, dtype=bool)
    r = need.shape[1]
    obj = np.arange(r) if objectives is None else np.asarray(objectives)
    if reserve is None:
        ps = pareto(need, free, obj, seed=seed)
    else:
        past, extra = reserve
        cons = np.hstack([need, need * np.asarray(past, dtype=np.int64)[:, None]])
        bound = np.concatenate([np.asarray(free, dtype=np.int64),
                                np.asarray(extra, dtype=np.int64)])
        full = pareto(cons, bound, obj, seed=seed)
        ps = ParetoSet(full.chosen, full.totals[:, :r], full.exhaustive)
    return ps.chosen[decide(ps, used, capacity, obj)]
