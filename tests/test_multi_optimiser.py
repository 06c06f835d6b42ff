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
