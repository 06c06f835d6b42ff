"""The priority hook writes only the jobs that must move (slurm_plugin/priority.py,
``stable_priorities``): pure, no Slurm needed."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_plugin.priority import KEEP_MAX, STRIDE, WRITE_MAX, stable_priorities

BASE = 1_000_000


def _decreasing(order, prio) -> bool:
    values = [prio[j] for j in order]
    return all(a > b for a, b in zip(values, values[1:]))


def _written(before, after) -> set:
    return {j for j, v in after.items() if before.get(j) != v}


def test_a_fresh_queue_is_numbered_stride_apart_from_the_base():
    p = stable_priorities([5, 3, 9], {}, BASE)
    assert p == {5: BASE + 2 * STRIDE, 3: BASE + STRIDE, 9: BASE}


def test_an_arrival_at_the_tail_writes_only_the_new_job():
    """FCFS: a new job goes last. Ranked as base + n - rank, every job ahead of it moved up
    by one: 201 scontrol updates for one submission on a real queue of 200."""
    order = list(range(200))
    first = stable_priorities(order, {}, BASE)
    second = stable_priorities(order + [200], first, BASE)
    assert _written(first, second) == {200}
    assert _decreasing(order + [200], second) and second[200] >= 1


def test_an_arrival_in_the_middle_or_at_the_head_writes_only_the_new_job():
    order = list(range(50))
    first = stable_priorities(order, {}, BASE)
    mid = order[:20] + [99] + order[20:]
    second = stable_priorities(mid, first, BASE)
    assert _written(first, second) == {99} and _decreasing(mid, second)
    head = [77] + mid
    third = stable_priorities(head, second, BASE)
    assert _written(second, third) == {77} and _decreasing(head, third)


def test_jobs_leaving_write_nothing():
    order = list(range(30))
    first = stable_priorities(order, {}, BASE)
    left = [j for j in order if j not in (0, 7, 29)]
    assert _written(first, stable_priorities(left, first, BASE)) == set()


def test_slurms_own_priorities_in_order_are_kept_and_held_or_odd_ones_are_not():
    # priority/basic gives each new job one less than the last, near 0xFFFF0000
    current = {1: 4294901759, 2: 4294901758, 3: 0, 4: 4294901757, 5: None}
    p = stable_priorities([1, 2, 3, 4, 5], current, BASE)
    # no room between ...758 and ...757 for job 3: job 4 moves with it, 1 and 2 stay
    assert _written(current, p) == {3, 4, 5}
    assert _decreasing([1, 2, 3, 4, 5], p)


def test_no_room_down_to_priority_1_numbers_the_queue_afresh():
    current = {1: 3, 2: 2, 3: 1}
    p = stable_priorities([1, 2, 9, 3], current, BASE)     # nothing fits under 2
    assert p == {1: BASE + 3 * STRIDE, 2: BASE + 2 * STRIDE, 9: BASE + STRIDE, 3: BASE}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 10_000), st.booleans())
def test_any_order_and_current_priorities_give_a_strictly_decreasing_order(n, seed, roomy):
    """Whatever the current priorities (none, held, out of range, dense or far apart), the
    result decreases strictly along the order within Slurm's range; with room between the
    current ones, as many are kept as the longest decreasing run of them allows."""
    rng = random.Random(seed)
    order = rng.sample(range(1000), n)
    if roomy:     # far apart: every stretch fits between its neighbours
        current = {j: rng.randint(1, 1000) * 100 * STRIDE if rng.random() < 0.8 else
                   rng.choice([None, 0, KEEP_MAX + 5]) for j in order}
    else:         # dense, duplicates, small: stretches may not fit
        current = {j: rng.choice([None, 0, -3, 1, 2, 3, 5, 8, KEEP_MAX, KEEP_MAX + 5])
                   for j in order}
    p = stable_priorities(order, current, BASE)
    assert set(p) == set(order) and _decreasing(order, p)
    assert all(1 <= v <= KEEP_MAX for v in p.values())
    assert all(v <= WRITE_MAX for j, v in p.items() if current.get(j) != v)
    if not roomy:
        return
    vals = [current[j] if isinstance(current[j], int) and 1 <= current[j] <= KEEP_MAX else None
            for j in order]
    best = [0] * len(vals)
    for i, v in enumerate(vals):
        if v is not None:
            best[i] = 1 + max((best[k] for k in range(i) if vals[k] is not None and vals[k] > v),
                              default=0)
    kept = len(order) - len(_written(current, p))
    assert kept == max(best, default=0)
