"""Queue-ordering policies: the formulas of issue 3 point 4, limits, ties, registry."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coscheduler.model import InvalidInput
from coscheduler.policies import POLICIES, get_policy, order_queue, policy_names


def key(name, now, submit, procs, estimate):
    return get_policy(name)(now, submit, procs, estimate)


def test_registry_holds_the_eight_policies_in_order():
    assert policy_names() == ["FCFS", "LCFS", "SJF", "SAF", "SRF", "WFP3", "UNICEP", "F1"]
    assert [p.name for p in POLICIES.values() if p.uses_now] == ["WFP3", "UNICEP"]


def test_lookup_is_case_insensitive_and_errors_name_the_choices():
    assert get_policy(" wfp3 ") is POLICIES["WFP3"]
    with pytest.raises(InvalidInput, match="unknown queue policy 'EDF'; valid policies: FCFS, LCFS"):
        get_policy("EDF")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("FCFS", 100.0),
        ("LCFS", -100.0),
        ("SJF", (50.0, 100.0)),
        ("SAF", 50.0 * 8),
        ("SRF", 50.0 / 8),
        ("WFP3", -((300.0 - 100.0) / 50.0) ** 3 * 8),  # -(4^3)*8 = -512
        ("UNICEP", -200.0 / (3.0 * 50.0)),  # log2(8) = 3
        ("F1", math.log10(50.0) * 8 + 870 * 2.0),  # log10(100) = 2
    ],
)
def test_formulas(name, expected):
    # now = 300, submit = 100 (wait 200), 8 processors, estimate 50 s
    assert key(name, 300.0, 100.0, 8, 50.0) == pytest.approx(expected)


def test_wfp3_value_by_hand():
    assert key("WFP3", 300.0, 100.0, 8, 50.0) == pytest.approx(-512.0)


def test_unicep_one_processor_takes_the_limit():
    # log2(1) = 0: a one-processor job that has waited goes first; at zero wait its key is 0.
    assert key("UNICEP", 10.0, 5.0, 1, 100.0) == -math.inf
    assert key("UNICEP", 5.0, 5.0, 1, 100.0) == 0.0
    # and it beats any wide job that has waited
    assert key("UNICEP", 10.0, 5.0, 1, 100.0) < key("UNICEP", 10.0, 0.0, 64, 1.0)


def test_f1_at_submit_zero_goes_first():
    assert key("F1", 0.0, 0.0, 4, 100.0) == -math.inf
    assert key("F1", 0.0, 0.0, 4, 100.0) < key("F1", 0.0, 1.0, 1, 1.0)


def test_order_queue_breaks_ties_by_submit_then_position():
    # SAF keys: all 100. Submits 5, 3, 3: position 1 before 2 (same submit), both before 0.
    jobs = [(5.0, 1, 100.0), (3.0, 2, 50.0), (3.0, 4, 25.0)]
    assert order_queue(get_policy("SAF"), 10.0, jobs) == [1, 2, 0]


def test_order_queue_uses_now_for_time_dependent_policies():
    # WFP3, job0 (submit 0, est 100) and job1 (submit 90, est 5), one processor each.
    jobs = [(0.0, 1, 100.0), (90.0, 1, 5.0)]
    # now=90: job0 -(90/100)^3 = -0.729, job1 -(0/5)^3 = 0: job0 first.
    assert order_queue(get_policy("WFP3"), 90.0, jobs) == [0, 1]
    # now=100: job0 -(100/100)^3 = -1, job1 -(10/5)^3 = -8: job1 overtakes.
    assert order_queue(get_policy("WFP3"), 100.0, jobs) == [1, 0]


def test_static_policies_do_not_depend_on_now():
    for p in POLICIES.values():
        if not p.uses_now:
            assert p(0.0, 10.0, 4, 60.0) == p(1e6, 10.0, 4, 60.0)


finite_job = st.tuples(
    st.floats(0, 1e6), st.integers(1, 4096), st.floats(1, 1e6)
)


@given(now_extra=st.floats(0, 1e6), jobs=st.lists(finite_job, max_size=20))
def test_order_queue_is_a_sorted_permutation(now_extra, jobs):
    now = max((j[0] for j in jobs), default=0.0) + now_extra
    for policy in POLICIES.values():
        order = order_queue(policy, now, jobs)
        assert sorted(order) == list(range(len(jobs)))
        keys = [(policy(now, *jobs[i]), jobs[i][0], i) for i in order]
        assert keys == sorted(keys)
