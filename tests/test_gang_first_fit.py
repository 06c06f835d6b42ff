"""First-fit gang allocation, guest placement and the Permit step, by hand-worked cases."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler.model import Allocation, InvalidInput, Job
from coscheduler.policies.gang import (Offer, PendingGang, first_fit, guest_placement,
                                       permit_step, rescind, subtract)


def job(cores, nodes=1, jid="j"):
    return Job(jid, cores=cores, walltime_s=100, job_class="c", nodes=nodes)


def test_single_node_takes_the_first_node_with_room():
    a = first_fit(job(4), [("n1", 2), ("n2", 4), ("n3", 8)])
    assert a == Allocation("j", (("n2", 4),))


def test_multi_node_gang_spans_exactly_its_nodes():
    # 10 cores on 3 nodes -> parts 4, 3, 3.
    a = first_fit(job(10, 3), [("n1", 3), ("n2", 4), ("n3", 3), ("n4", 8)])
    assert a is not None
    assert a.cores == 10 and len(a.nodes) == 3
    assert a.cores_by_node == (("n1", 3), ("n2", 4), ("n3", 3))


def test_big_part_is_not_lost_to_greedy_order():
    # Parts 3 and 2; the first node only holds 2: a greedy "largest part first" would fail.
    a = first_fit(job(5, 2), [("n1", 2), ("n2", 3)])
    assert a == Allocation("j", (("n1", 2), ("n2", 3)))


def test_fragmentation_no_fit_although_total_suffices():
    # 8 free cores in total, but no node holds a 4-core single-node job.
    assert first_fit(job(4), [("n1", 3), ("n2", 3), ("n3", 2)]) is None
    # Two nodes of 4 are needed for 8 cores on 2 nodes; only one node has 4.
    assert first_fit(job(8, 2), [("n1", 4), ("n2", 3), ("n3", 3)]) is None


def test_no_fit_when_too_few_nodes():
    assert first_fit(job(3, 3), [("n1", 8), ("n2", 8)]) is None


def test_mapping_input_keeps_its_order():
    a = first_fit(job(2), {"b": 2, "a": 2})
    assert a.nodes == ("b",)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=8), st.integers(1, 20), st.integers(1, 4))
def test_first_fit_finds_a_placement_whenever_one_exists(free, cores, nodes):
    if nodes > cores:
        return
    j = job(cores, nodes)
    pairs = [(f"n{i}", c) for i, c in enumerate(free)]
    a = first_fit(j, pairs)
    base, extra = divmod(cores, nodes)
    big = sum(1 for c in free if c >= base + 1)
    ok = sum(1 for c in free if c >= base)
    exists = big >= extra and ok >= nodes
    assert (a is not None) == exists
    if a is not None:
        room = dict(pairs)
        assert a.cores == cores and len(set(a.nodes)) == nodes
        assert all(room[n] >= c for n, c in a.cores_by_node)
        assert sorted(c for _, c in a.cores_by_node) == sorted(j.cores_per_node())


def test_guest_placement_inside_the_host_cores_only():
    host = Allocation("h", (("n1", 4), ("n2", 4)))
    g = guest_placement(job(4, jid="g"), host)
    assert g == Allocation("g", (("n1", 4),))
    # A 6-core single-node guest cannot fit in a host with 4 cores per node.
    assert guest_placement(job(6, jid="g"), host) is None
    # Two-node guest of 6 uses 3 + 3 of the host's cores.
    assert guest_placement(job(6, 2, jid="g"), host) == Allocation("g", (("n1", 3), ("n2", 3)))


def test_guest_placement_skips_cores_other_guests_use():
    host = Allocation("h", (("n1", 4), ("n2", 4)))
    g = guest_placement(job(3, jid="g"), host, {"n1": 2})
    assert g == Allocation("g", (("n2", 3),))
    assert guest_placement(job(3, jid="g"), host, {"n1": 2, "n2": 2}) is None


def test_subtract_refuses_overdraw():
    free = {"n1": 4}
    subtract(free, Allocation("j", (("n1", 3),)))
    assert free == {"n1": 1}
    with pytest.raises(InvalidInput, match="n1"):
        subtract(free, Allocation("k", (("n1", 2),)))


# -- Permit step ---------------------------------------------------------------------------

def offer(oid, node, cores, t=0.0):
    return Offer(oid, node, cores, t)


def test_permit_waits_then_places_and_declines_the_rest():
    gang = PendingGang(job(8, 2), since=0.0)
    r1 = permit_step(gang, [offer("o1", "a", 4)], now=1.0, timeout_s=30)
    assert r1.status == "waiting" and r1.decline == () and len(r1.gang.held) == 1
    r2 = permit_step(r1.gang, [offer("o2", "b", 2), offer("o3", "c", 6)], now=2.0, timeout_s=30)
    assert r2.status == "placed"
    assert r2.allocation == Allocation("j", (("a", 4), ("c", 4)))
    assert dict(r2.accept) == {"o1": 4, "o3": 4}
    assert r2.decline == ("o2",)
    assert r2.gang is None


def test_permit_adds_offers_on_one_node():
    gang = PendingGang(job(6), since=0.0)
    r = permit_step(gang, [offer("o1", "a", 2), offer("o2", "a", 4), offer("o3", "a", 4)],
                    now=0.0, timeout_s=10)
    assert r.status == "placed"
    assert dict(r.accept) == {"o1": 2, "o2": 4}
    assert r.decline == ("o3",)


def test_permit_times_out_and_declines_everything_held():
    gang = PendingGang(job(8), since=0.0)
    r = permit_step(gang, [offer("o1", "a", 4)], now=5.0, timeout_s=10)
    assert r.status == "waiting"
    r = permit_step(r.gang, [offer("o2", "b", 4)], now=10.0, timeout_s=10)
    assert r.status == "timed_out"
    assert set(r.decline) == {"o1", "o2"} and r.accept == () and r.gang is None


def test_permit_refuses_a_repeated_offer_and_rescind_drops_one():
    gang = PendingGang(job(8), since=0.0, held=(offer("o1", "a", 4),))
    with pytest.raises(InvalidInput, match="o1"):
        permit_step(gang, [offer("o1", "a", 4)], now=1.0, timeout_s=10)
    assert rescind(gang, "o1").held == ()


def test_offer_validation_names_the_field():
    with pytest.raises(InvalidInput, match="cores"):
        Offer("o1", "a", -1, 0.0)
    with pytest.raises(InvalidInput, match="node"):
        Offer("o1", "../etc", 1, 0.0)
