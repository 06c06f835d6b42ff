"""The controller's pure pieces on their own: free cores and the EASY reservation
(placement.py), the candidate-host index (hosts.py) and the quota rule (quotas.py)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler.controller.hosts import HostIndex, MaxTree, host_state
from coscheduler.controller.placement import (CoStart, EasyBackfill, FreeCores, Start,
                                              core_releases, easy_reservation, free_cores,
                                              own_start_estimate)
from coscheduler.controller.quotas import quota_without_guest, wanted_quota
from coscheduler.controller import ControllerConfig
from coscheduler.model import Allocation, Job, MetricsSample, RunningJob


def job(jid, cores, walltime=100.0, nodes=1):
    return Job(jid, cores=cores, walltime_s=walltime, job_class="c", nodes=nodes)


def running(jid, cores_by_node, start, walltime, quota=1.0, host=None, guests=()):
    cores = sum(c for _, c in cores_by_node)
    return RunningJob(job(jid, cores, walltime), Allocation(jid, tuple(cores_by_node)), start,
                      quota, host, tuple(guests))


def by_id(*rjs):
    return {rj.job_id: rj for rj in rjs}


# -- placement.py ----------------------------------------------------------------------------

def test_free_cores_counts_a_guest_only_when_its_host_is_gone():
    host = running("h", [("n0", 4)], 0.0, 100.0, guests=("g",))
    guest = running("g", [("n0", 2)], 0.0, 100.0, host="h")
    orphan = running("o", [("n1", 1)], 0.0, 100.0, host="gone")
    jobs = [host, guest, orphan]
    assert free_cores({"n0": 4, "n1": 4}, jobs, by_id(*jobs)) == {"n0": 0, "n1": 3}


def test_free_cores_never_go_below_zero():
    over = running("a", [("n0", 6)], 0.0, 100.0)
    assert free_cores({"n0": 4}, [over], by_id(over)) == {"n0": 0}


def test_free_cores_fit_take_and_cap():
    free = FreeCores({"n0": 2, "n1": 4})
    assert free.fit(job("big", 5)) is None               # more than any node holds
    alloc = free.fit(job("a", 3))
    assert alloc.cores_by_node == (("n1", 3),)
    free.take(alloc)
    assert (free.cores, free.total, free.max) == ({"n0": 2, "n1": 1}, 3, 2)
    window = FreeCores({"n0": 2, "n1": 4})
    window.cap_at(free, alloc)
    assert (window.cores, window.total, window.max) == ({"n0": 2, "n1": 1}, 3, 2)


def test_reservation_is_the_earliest_end_that_frees_enough_cores():
    a = running("a", [("n0", 4)], 0.0, 50.0)
    b = running("b", [("n1", 4)], 0.0, 80.0)
    res = easy_reservation(job("w", 6, nodes=2), {"n0": 0, "n1": 0}, [a, b], [], 10.0, by_id(a, b))
    assert res == (80.0, {"n0": 1, "n1": 1})
    # A job this pass plans to start holds its cores until now + its walltime.
    half = running("half", [("n1", 2)], 0.0, 80.0)
    planned = [Start(job("p", 2), Allocation("p", (("n1", 2),)))]
    res = easy_reservation(job("w", 6, nodes=2), {"n0": 0, "n1": 0}, [a, half], planned, 10.0,
                           by_id(a, half))
    assert res == (110.0, {"n0": 1, "n1": 1})


def test_an_own_start_waits_for_the_jobs_ahead_to_start_first():
    """8 cores, all held: 4 free at 10 s and 4 at 20 s. A 4-core job alone starts at 10 s;
    behind a 4-core job of walltime 100 it starts at 20 s; behind an 8-core one, when that one
    ends (20 + 100 s); a job larger than the cluster ahead never lets it start."""
    a = running("a", [("n0", 4)], 0.0, 10.0)
    b = running("b", [("n0", 4)], 0.0, 20.0)
    guest = running("g", [("n0", 2)], 0.0, 500.0, host="a")   # inside a: frees nothing
    rel = core_releases([a, b, guest], [], 0.0, by_id(a, b, guest))
    assert sorted(rel) == [(10.0, 4), (20.0, 4)]
    assert own_start_estimate(4, 0, rel, [], 0.0) == 10.0
    assert own_start_estimate(4, 0, rel, [job("x", 4)], 0.0) == 20.0
    assert own_start_estimate(4, 0, rel, [job("x", 8)], 0.0) == 120.0
    assert own_start_estimate(4, 0, rel, [job("x", 9)], 0.0) == math.inf
    assert own_start_estimate(4, 4, rel, [], 5.0) == 5.0          # free now
    # A job this pass starts holds its cores until now + its walltime.
    planned = [Start(job("p", 2), Allocation("p", (("n0", 2),)))]
    assert core_releases([], planned, 3.0, {}) == [(103.0, 2)]


def test_reservation_never_found_for_a_job_larger_than_what_frees():
    a = running("a", [("n0", 4)], 0.0, 50.0)
    assert easy_reservation(job("w", 5), {"n0": 0}, [a], [], 0.0, by_id(a)) is None


def test_a_guest_that_outlives_its_host_keeps_its_cores_until_its_own_end():
    host = running("h", [("n0", 4)], 0.0, 50.0, guests=("g",))
    guest = running("g", [("n0", 2)], 0.0, 90.0, host="h")
    jobs = [host, guest]
    res = easy_reservation(job("w", 4), {"n0": 0}, jobs, [], 0.0, by_id(*jobs))
    assert res == (90.0, {"n0": 0})
    # Same for a guest this pass plans to start inside a host.
    lone = running("h2", [("n0", 4)], 0.0, 50.0)
    choice = type("C", (), {"host_job": "h2", "placement": Allocation("g2", (("n0", 2),))})()
    plan = [CoStart(job("g2", 2, walltime=100.0), choice, 1.0)]
    res = easy_reservation(job("w", 4), {"n0": 0}, [lone], plan, 0.0, by_id(lone))
    assert res == (100.0, {"n0": 0})


def test_backfill_lets_short_jobs_use_free_cores_and_long_ones_only_the_window():
    cores = EasyBackfill({"n0": 4, "n1": 4})
    cores.reserve(100.0, {"n0": 0, "n1": 2})    # the reserved job needs n0 and 2 of n1
    assert cores.start(job("long", 3, walltime=500.0), now=0.0) is None
    long_ok = cores.start(job("long2", 2, walltime=500.0), now=0.0)
    assert long_ok.cores_by_node == (("n1", 2),)
    short = cores.start(job("short", 4, walltime=50.0), now=0.0)
    assert short.cores_by_node == (("n0", 4),)
    assert cores.free.cores == {"n0": 0, "n1": 2}
    # The window never exceeds what is free: a short job on n1 shrinks it.
    assert cores.start(job("short2", 1, walltime=50.0), now=0.0).cores_by_node == (("n1", 1),)
    assert cores.start(job("long3", 2, walltime=500.0), now=0.0) is None


def test_backfill_without_reservation_is_plain_first_fit():
    cores = EasyBackfill({"n0": 2})
    assert cores.shadow is None
    assert cores.start(job("a", 2, walltime=1e6), now=0.0).cores_by_node == (("n0", 2),)
    assert cores.start(job("b", 1), now=0.0) is None


# -- hosts.py --------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=0, max_size=40), st.data())
def test_max_tree_finds_what_a_walk_finds(values, data):
    tree = MaxTree(list(values))
    alive = list(values)
    for i in data.draw(st.lists(st.integers(0, max(0, len(values) - 1)), max_size=10)):
        if values:
            tree.remove(i)
            alive[i] = -math.inf
    start = data.draw(st.integers(0, len(values) + 2))
    x = data.draw(st.floats(-11, 11))
    want = next((k for k in range(start, len(alive)) if alive[k] >= x), -1)
    assert tree.first_at_least(start, x) == want


def test_host_index_ranks_by_first_fit_and_skips_asked_cooldown_and_guests():
    h1 = running("h1", [("n1", 4)], 0.0, 1000.0)
    h0 = running("h0", [("n0", 4)], 0.0, 1000.0)
    h2 = running("h2", [("n2", 4)], 0.0, 1000.0)
    was = running("was", [("n3", 4)], 0.0, 1000.0)
    jobs = [h1, h0, h2, was]
    index = HostIndex(jobs, {"n0": 4, "n1": 4, "n2": 4, "n3": 4}, {}, 10.0,
                      running_by_id=by_id(*jobs), was_guest={"was"},
                      cooldown={("g", "h0"): 20.0},
                      config=ControllerConfig(former_guests_host=False))
    ids = [c.host.job_id for c in index.candidates(job("g", 2), None)]
    assert ids == ["h1", "h2"]                       # h0 in cooldown, "was" was a guest
    index.mark_asked(["h1"])
    assert [c.host.job_id for c in index.candidates(job("g", 2), None)] == ["h2"]
    assert list(index.candidates(job("g", 5), None)) == []   # no host has 5 spare cores


def test_host_index_under_a_reservation_keeps_only_hosts_that_outlive_the_guest():
    early = running("early", [("n0", 4)], 0.0, 100.0)
    late = running("late", [("n1", 4)], 0.0, 1000.0)
    jobs = [early, late]
    index = HostIndex(jobs, {"n0": 4, "n1": 4}, {}, 0.0, running_by_id=by_id(*jobs),
                      was_guest=set(), cooldown={}, config=ControllerConfig())
    guest = job("g", 2, walltime=500.0)
    assert [c.host.job_id for c in index.candidates(guest, shadow=None)] == ["early", "late"]
    assert [c.host.job_id for c in index.candidates(guest, shadow=200.0)] == ["late"]


def test_host_state_reads_unknown_metrics_as_busy():
    h = running("h", [("n0", 4)], 0.0, 100.0)
    s = host_state(h, None, 50.0)
    assert (s.cpu_percent, s.mem_percent, s.happiness, s.elapsed_fraction) == (100.0, 100.0, None, 0.5)
    s = host_state(h, MetricsSample("h", 50.0, 20.0, 30.0, 5, 10, 0.1), 50.0)
    assert (s.cpu_percent, s.mem_percent) == (20.0, 30.0) and s.happiness is not None


def test_a_host_not_sampled_yet_lends_what_its_class_usually_leaves_idle():
    """An agent's first sample of a job comes a tick or two after its start; until then a
    host whose class is known is taken to use what that class usually uses (so stages
    shorter than two ticks can host), and the experts see that use, Hp unknown. A host of
    an unknown class, or with the option off, lends nothing until it is measured."""
    from coscheduler.controller.hoststate import host_own_state
    from coscheduler.controller.usage import ClassUsage

    h = running("h", [("n0", 4)], 0.0, 100.0)
    usage = ClassUsage()
    usage.add("c", 25.0, 10.0, 0.5)            # class "c" (host and guest) uses 1 of 4 cores

    def caps(config, samples=None, known=usage):
        index = HostIndex([h], {"n0": 4}, samples or {}, 10.0, running_by_id=by_id(h),
                          was_guest=set(), cooldown={}, config=config, usage=known,
                          idle_only=True)
        return [(c.host.job_id, c.loan_cap) for c in index.candidates(job("g", 4), None)]

    # idle: 4 - 1 used - 0.4 margin = 2.6 cores; the guest needs 1 + 0.4: all of it is lent
    assert caps(ControllerConfig()) == [("h", pytest.approx(1.4 / 4))]
    assert caps(ControllerConfig(lend_unsampled_by_class=False)) == []
    assert caps(ControllerConfig(), known=None) == []
    # A sample, once there, is what counts: a busy host lends nothing whatever its class.
    busy = {"h": MetricsSample("h", 10.0, 95.0, 10.0, 1, 10, 0.1)}
    assert caps(ControllerConfig(), busy) == []

    own = host_own_state(h, None, 50.0, unsampled=usage.expected("c"))
    assert (own.cpu_percent, own.mem_percent, own.io_mb_s, own.happiness) == (25.0, 10.0, 0.5, None)
    assert host_own_state(h, None, 50.0).cpu_percent == 100.0     # unknown: read as busy


# -- quotas.py -------------------------------------------------------------------------------

def test_wanted_quota_counts_only_guests_that_name_the_host():
    host = running("h", [("n0", 4)], 0.0, 100.0, quota=0.5, guests=("g", "stray", "gone"))
    g = running("g", [("n0", 2)], 0.0, 100.0, quota=0.5, host="h")
    stray = running("stray", [("n0", 2)], 0.0, 100.0, quota=0.5, host="other")
    assert wanted_quota(host, by_id(host, g, stray)) == 0.75
    assert wanted_quota(running("alone", [("n0", 4)], 0.0, 1.0), {}) == 1.0


def test_wanted_quota_puts_the_host_first_when_guests_claim_too_much():
    host = running("h", [("n0", 2)], 0.0, 100.0, guests=("g",))
    g = running("g", [("n0", 4)], 0.0, 100.0, quota=0.9, host="h")
    assert wanted_quota(host, by_id(host, g)) == 1.0


def test_quota_without_guest_drops_the_gone_guest_and_unknown_ones():
    host = running("h", [("n0", 4)], 0.0, 100.0, quota=0.25, guests=("a", "b", "unknown"))
    a = running("a", [("n0", 2)], 0.0, 100.0, quota=0.5, host="h")
    b = running("b", [("n0", 2)], 0.0, 100.0, quota=1.0, host="h")
    assert quota_without_guest(host, "b", by_id(host, a, b)) == (0.75, ("a",))


def test_host_index_refuses_guests_whose_memory_or_burst_buffer_do_not_fit_beside():
    def with_req(jid, cores, mem=None, bb=None, walltime=1000.0):
        return Job(jid, cores=cores, walltime_s=walltime, job_class="c", mem_mb=mem, bb_gb=bb)

    host = RunningJob(with_req("h", 4, mem=3000, bb=100), Allocation("h", (("n0", 4),)), 0.0,
                      1.0, None, ("g1",))
    g1 = RunningJob(with_req("g1", 1, mem=500, bb=50), Allocation("g1", (("n0", 1),)), 0.0,
                    0.5, "h", ())
    jobs = [host, g1]
    cfg = ControllerConfig(max_guests_per_host=2, node_mem_mb=4096, node_bb_gb=200)

    def hosts_for(guest, config=cfg):
        index = HostIndex(jobs, {"n0": 4}, {}, 10.0, running_by_id=by_id(*jobs),
                          was_guest=set(), cooldown={}, config=config)
        return [c.host.job_id for c in index.candidates(guest, None)]

    assert hosts_for(with_req("a", 2, mem=596)) == ["h"]        # 3000 + 500 + 596 = 4096
    assert hosts_for(with_req("b", 2, mem=597)) == []           # one MB too many
    assert hosts_for(with_req("c", 2, bb=50)) == ["h"]          # 100 + 50 + 50 = 200
    assert hosts_for(with_req("d", 2, bb=51)) == []
    assert hosts_for(with_req("e", 2)) == ["h"]                 # states nothing: cores only
    # capacities not configured: only cores count, as before
    assert hosts_for(with_req("b", 2, mem=597), ControllerConfig(max_guests_per_host=2)) == ["h"]


def test_fits_beside_names_the_guest_and_the_host():
    from coscheduler.policies.gang import fits_beside
    host = Job("h", cores=4, walltime_s=10.0, job_class="c", mem_mb=4000)
    guest = Job("g", cores=1, walltime_s=10.0, job_class="c", mem_mb=200)
    why = fits_beside(guest, host, node_mem_mb=4096)
    assert why == "guest g needs 200 MB of memory per node; host h and its guests hold 4000 of the node's 4096"
    assert fits_beside(guest, host, node_bb_gb=10) is None


def test_bad_memory_and_burst_buffer_requests_name_the_job():
    import pytest

    from coscheduler.model import InvalidInput
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidInput, match="job j: mem_mb must be an integer >= 0"):
            Job("j", cores=1, walltime_s=1.0, job_class="c", mem_mb=bad)
        with pytest.raises(InvalidInput, match="job j: bb_gb must be an integer >= 0"):
            Job("j", cores=1, walltime_s=1.0, job_class="c", bb_gb=bad)
    with pytest.raises(InvalidInput, match="controller node_mem_mb must be an integer >= 1"):
        ControllerConfig(node_mem_mb=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-10, 10), min_size=0, max_size=40), st.data())
def test_max_tree_set_and_empty_agree_with_a_walk(values, data):
    """Values set one by one into an empty tree (and changed, up or down) are found as a
    walk over the values finds them, with updates that stop early where nothing changes."""
    n = len(values)
    tree, alive = MaxTree.empty(n), [-math.inf] * n
    for i, x in data.draw(st.lists(st.tuples(st.integers(0, max(0, n - 1)), st.floats(-10, 10)),
                                   max_size=30)) if n else []:
        tree.set(i, x)
        alive[i] = x
    if n:
        for i in data.draw(st.lists(st.integers(0, n - 1), max_size=5)):
            tree.remove(i)
            alive[i] = -math.inf
    start = data.draw(st.integers(0, n + 2))
    x = data.draw(st.floats(-11, 11))
    assert tree.first_at_least(start, x) == next((k for k in range(start, n) if alive[k] >= x), -1)
    assert all(tree.value(k) == alive[k] for k in range(n))


def test_a_pass_leaves_the_garbage_collector_as_it_found_it():
    """The collector waits during a pass and runs again after it, also when the backend
    fails; a process that turned it off keeps it off."""
    import gc

    from coscheduler.bench.controller import _BenchBackend
    from coscheduler.controller import Controller
    from coscheduler.policies.coalloc import Static

    class Failing(_BenchBackend):
        def running(self):
            raise RuntimeError("backend down")

    seen = []

    class Watching(_BenchBackend):
        def queued(self):
            seen.append(gc.isenabled())
            return super().queued()

    assert gc.isenabled()
    report = Controller(Watching(20, 12, 1), Static(0.5)).step()
    assert seen == [False] and gc.isenabled() and report.coallocated > 0
    report = Controller(Failing(20, 12, 1), Static(0.5)).step()
    assert gc.isenabled() and "backend down" in report.errors[0]
    gc.disable()
    try:
        Controller(Watching(20, 12, 1), Static(0.5)).step()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_cooldowns_set_before_the_clock_stepped_back_expire():
    """The Slurm backend's clock is the wall clock. Stepped back an hour, a decline's
    cooldown (600 s) would have lasted an hour and ten minutes: the pair was never asked
    again for that long. Entries ending further away than a cooldown lasts are dropped."""
    from coscheduler.bench.controller import _BenchBackend
    from coscheduler.controller import Controller
    from coscheduler.policies.coalloc import Static

    ctl = Controller(_BenchBackend(2, 4, 0), Static(0.5))
    now = 10_000.0
    cd = ctl.config.decline_cooldown_s
    ctl._cooldown = {("g1", "h1"): now + cd, ("g2", "h2"): now + 10.0, ("g3", "h3"): now - 1.0}
    ctl.passes = 64
    ctl._expire_cooldowns(now - 3600.0)      # the clock stepped back an hour
    assert ctl._cooldown == {}
    ctl._cooldown = {("g1", "h1"): now + cd, ("g2", "h2"): now + 10.0, ("g3", "h3"): now - 1.0}
    ctl._expire_cooldowns(now)               # no step: the live ones stay
    assert ctl._cooldown == {("g1", "h1"): now + cd, ("g2", "h2"): now + 10.0}
