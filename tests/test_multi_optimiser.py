"""The MultiSched/ROME window optimiser (coscheduler/multi/optimiser.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler.multi import optimiser as op


def _brute(need, free):
    """Pareto set by the definition, one subset at a time (reference for the vector code)."""
    k = len(need)
    feas = []
    for m in range(1 << k):
        tot = tuple(int(sum(need[i][j] for i in range(k) if m >> i & 1)) for j in range(len(free)))
        if all(t <= f for t, f in zip(tot, free)):
            feas.append(tot)
    return {a for a in feas
            if not any(all(b[j] >= a[j] for j in range(len(a))) and b != a for b in feas)}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8).flatmap(lambda k: st.tuples(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 50)), min_size=k, max_size=k),
    st.tuples(st.integers(1, 60), st.integers(0, 120)))))
def test_exhaustive_is_the_pareto_set_by_definition(case):
    need, free = case
    ps = op.exhaustive(np.array(need), np.array(free))
    assert {tuple(t) for t in ps.totals} == _brute(need, free)
    assert ((ps.chosen.astype(int) @ np.array(need)) == ps.totals).all()
    assert (ps.totals <= np.array(free)).all()


@pytest.mark.parametrize("seed", range(6))
def test_ga_agrees_with_exhaustive_on_small_windows(seed):
    rng = np.random.default_rng(seed)
    k = 10 + seed % 3
    need = np.stack([rng.integers(1, 40, k), rng.integers(0, 20_000, k)], axis=1)
    free = np.array([100, 60_000])
    exact = {tuple(t) for t in op.exhaustive(need, free).totals}
    ga = op.genetic(need, free, seed=seed)
    assert not ga.exhaustive
    assert {tuple(t) for t in ga.totals} == exact
    assert op.pareto(need, free).exhaustive is False  # 10+ candidates go to the GA
    assert op.pareto(need[:9], free).exhaustive is True


def test_ga_solutions_are_feasible_and_maximal():
    rng = np.random.default_rng(7)
    need = np.stack([rng.integers(1, 30, 20), rng.integers(0, 9000, 20),
                     rng.integers(0, 3000, 20)], axis=1)
    free = np.array([80, 40_000, 9_000])
    ps = op.genetic(need, free, seed=3)
    assert (ps.totals <= free).all()
    for row, tot in zip(ps.chosen, ps.totals):
        left = free - tot
        # nothing left out would still fit (every job needs at least one node)
        assert not any((need[i] <= left).all() for i in np.flatnonzero(~row))


def test_decision_maker_prefers_nodes_then_trades_as_rome():
    # capacity 100 nodes, 100 BB; nothing running
    cap, used = np.array([100, 100]), np.array([0, 0])
    totals = np.array([[60, 10], [56, 30], [40, 90]])
    ps = op.ParetoSet(np.eye(3, dtype=bool), totals, True)
    # best node use is row 0; row 1 loses 6.7 % of it and triples BB (> 40 %): chosen
    assert op.decide(ps, used, cap) == 1
    # row 1 losing more than 10 % of the nodes is not eligible
    ps2 = op.ParetoSet(np.eye(3, dtype=bool), np.array([[60, 10], [50, 30], [40, 90]]), True)
    assert op.decide(ps2, used, cap) == 0
    # gains under 40 % do not replace the node-best solution
    ps3 = op.ParetoSet(np.eye(2, dtype=bool), np.array([[60, 50], [58, 60]]), True)
    assert op.decide(ps3, used, cap) == 0
    # with nodes as the only objective the node-best wins
    assert op.decide(ps, used, cap, objectives=np.array([0])) == 0


def test_choose_on_the_empty_window():
    assert op.choose(np.zeros((0, 2)), np.array([5, 5]), np.zeros(2), np.array([5, 5])).size == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8).flatmap(lambda k: st.tuples(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 50), st.booleans()),
             min_size=k, max_size=k),
    st.tuples(st.integers(1, 60), st.integers(0, 120)),
    st.tuples(st.integers(0, 40), st.integers(0, 80)))))
def test_backfill_choice_keeps_easy_reservation(case):
    # While a head waits, jobs still running at its shadow time must fit, together, in
    # what it leaves free then; the chosen subset is Pareto-optimal among those that do.
    rows, free, extra = case
    need = np.array([r[:2] for r in rows])
    past = np.array([r[2] for r in rows])
    free, extra = np.array(free), np.array(extra)
    used = np.array([5, 7])
    cap = used + free
    mask = op.choose(need, free, used, cap, reserve=(past, extra))
    tot = need[mask].sum(axis=0)
    assert (tot <= free).all() and (need[mask & past].sum(axis=0) <= extra).all()
    # no feasible subset dominates it (brute force over every subset)
    k = len(need)
    for m in range(1 << k):
        sel = np.array([(m >> i) & 1 for i in range(k)], dtype=bool)
        t = need[sel].sum(axis=0)
        if (t <= free).all() and (need[sel & past].sum(axis=0) <= extra).all():
            assert not ((t >= tot).all() and (t > tot).any())


@pytest.mark.parametrize("seed", range(3))
def test_ga_agrees_with_exhaustive_under_a_reservation(seed):
    rng = np.random.default_rng(100 + seed)
    k = 11
    need = np.stack([rng.integers(1, 40, k), rng.integers(0, 20_000, k)], axis=1)
    past = rng.random(k) < 0.5
    cons = np.hstack([need, need * past[:, None]])
    bound = np.array([100, 60_000, 40, 20_000])
    obj = np.arange(2)
    exact = {tuple(t) for t in op.exhaustive(cons, bound, obj).totals[:, :2]}
    ga = op.genetic(cons, bound, obj, seed=seed)
    assert {tuple(t) for t in ga.totals[:, :2]} == exact


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_window_optimiser_backfills_without_delaying_the_head(seed):
    # The optimiser as a selector: it chooses among EASY's candidates too (backfill views),
    # and with exact estimates no head starts after the reservation EASY gave it.
    from coscheduler.multi.selectors import WindowOptimiser
    from coscheduler.sim import Cluster, TraceJob, simulate
    from coscheduler.sim.resources import PoolModel

    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 14))
    jobs, take = [], []
    for i in range(n):
        run = 10.0 * int(rng.integers(1, 6))
        jobs.append(TraceJob(i, i + 1, 10.0 * int(rng.integers(0, 6)), run,
                             int(rng.integers(1, 7)), run, 0))
        take.append((int(rng.integers(0, 9)),))
    pools = PoolModel(("burst_buffer",), (10,), take)
    kinds = []

    class Spy(WindowOptimiser):
        def choose(self, view):
            kinds.append(view.kind)
            return super().choose(view)

    s = simulate(jobs, Cluster(6, 1), Spy(window=4), "easy", pools=pools)
    assert s.finished == n
    for job, reserved_at in s.reservation.items():
        assert s.start[job] <= reserved_at
    events = sorted([(s.end[i], 0, i) for i in range(n)] + [(s.start[i], 1, i) for i in range(n)])
    busy = bb = 0
    for _, is_start, i in events:
        sign = 1 if is_start else -1
        busy += sign * jobs[i].procs
        bb += sign * take[i][0]
        assert 0 <= busy <= 6 and 0 <= bb <= 10


def test_window_optimiser_gets_backfill_views_on_lublin(lublin_swf):

    from coscheduler.multi import report
    from coscheduler.multi import workload as mw
    from coscheduler.multi.selectors import WindowOptimiser
    from coscheduler.sim.swf import read_swf

    lublin = lublin_swf
    wl = report.evaluation_part(mw.generate(read_swf(lublin), "S4", 1), 200)
    kinds = []

    class Spy(WindowOptimiser):
        def choose(self, view):
            kinds.append(view.kind)
            return super().choose(view)

    from coscheduler.sim.engine import simulate
    from coscheduler.sim.resources import pool_model

    nodes = wl.node_counts()
    pools = pool_model(wl.machine, wl.requests, nodes, wl.max_nodes)
    simulate(wl.jobs, wl.cluster, Spy(10), "easy", pools=pools)
    assert kinds.count("backfill") > 0 and kinds.count("pick") > 0
