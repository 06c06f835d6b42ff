"""Property tests (hypothesis) of the engine, and a differential test against a naive,
obviously-slow reference written from the issue's rules alone."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduler.policies import POLICIES, get_policy
from coscheduler.sim import Cluster, TraceJob, simulate
from coscheduler.sim.backfill import shadow_time

MODES = ("none", "easy", "conservative")


@st.composite
def workloads(draw, exact=False, max_jobs=10):
    nodes = draw(st.integers(1, 6))
    ppn = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_jobs))
    jobs = []
    for i in range(n):
        # Coarse time steps make ties (equal ends, arrivals at an end, a backfill ending
        # exactly at the shadow time) common: that is where off-by-one rules hide.
        submit = 10.0 * draw(st.integers(0, 8))
        run = 10.0 * draw(st.integers(1, 5))
        procs = draw(st.integers(1, nodes * ppn))
        if exact:
            estimate = run
        else:
            estimate = 10.0 * draw(st.integers(1, 7))
        jobs.append(TraceJob(i, i + 1, submit, run, procs, estimate, draw(st.integers(0, 2))))
    return Cluster(nodes, ppn), jobs


def busy_nodes_never_exceed(cluster, jobs, start, end):
    need = [cluster.nodes_for(j.procs) for j in jobs]
    # Sweep: at equal times, ends (-) before starts (+), as the engine frees nodes first.
    events = sorted([(end[i], -need[i]) for i in range(len(jobs))]
                    + [(start[i], need[i]) for i in range(len(jobs))])
    busy = 0
    for _, delta in events:
        busy += delta
        assert 0 <= busy <= cluster.nodes


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(workloads(), st.sampled_from(list(POLICIES)), st.sampled_from(MODES))
def test_basic_invariants(workload, policy, mode):
    cluster, jobs = workload
    schedule = simulate(jobs, cluster, get_policy(policy), mode)
    assert schedule.finished == len(jobs)  # every job finishes exactly once
    for job, s, e in zip(jobs, schedule.start, schedule.end):
        assert math.isfinite(s)
        assert s >= job.submit  # no job starts before it is submitted
        assert e == s + job.run  # and it runs for its actual run time
    busy_nodes_never_exceed(cluster, jobs, schedule.start, schedule.end)


@SETTINGS
@given(workloads(exact=True), st.sampled_from(list(POLICIES)))
def test_easy_never_starts_the_reserved_job_after_its_reservation(workload, policy):
    cluster, jobs = workload
    schedule = simulate(jobs, cluster, get_policy(policy), "easy")
    for job, reserved_at in schedule.reservation.items():
        assert schedule.start[job] <= reserved_at


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(max_jobs=12), st.sampled_from(list(POLICIES)), st.sampled_from(MODES))
def test_engine_matches_the_naive_reference(workload, policy, mode):
    cluster, jobs = workload
    expected = reference(jobs, cluster, get_policy(policy), mode)
    assert simulate(jobs, cluster, get_policy(policy), mode).start == expected


def _full_scans_only(monkeypatch):
    """Make EASY scan the whole queue at every decision (as before its incremental scan);
    returns a counter of the decisions that would have taken the incremental path."""
    from coscheduler.sim import backfill, decision

    seen = {"incremental": 0}
    scan = backfill.easy_backfill

    def full(state, now, started):
        if state.bf_fresh is not None and state.bf_head == state.head and not state.uses_now:
            seen["incremental"] += 1
        state.bf_fresh = None
        scan(state, now, started)

    monkeypatch.setattr(decision, "easy_backfill", full)
    return seen


@SETTINGS
@given(workloads(max_jobs=14), st.sampled_from(list(POLICIES)))
def test_easy_trying_only_newcomers_after_a_full_scan_changes_no_start(workload, policy):
    """EASY after a full scan with the same head and no job ended tries only the jobs
    queued since (backfill.easy_backfill): the schedule is the one of a scan every time."""
    cluster, jobs = workload
    fast = simulate(jobs, cluster, get_policy(policy), "easy")
    with pytest.MonkeyPatch.context() as mp:
        _full_scans_only(mp)
        slow = simulate(jobs, cluster, get_policy(policy), "easy")
    assert (fast.start, fast.reservation) == (slow.start, slow.reservation)


def test_easy_incremental_scans_change_nothing_on_the_bundled_traces(bundled_data, monkeypatch):
    """The same on real traces (lublin 10,000 jobs, CTC-SP2), where most decisions follow
    an arrival alone, for the key-function orders: and the incremental path is taken."""
    from coscheduler.sim import read_swf

    traces = [read_swf(bundled_data / "swf" / name) for name in
              ("lublin_256.swf", "CTC-SP2-1996-3.1-cln.swf.gz")]
    runs = [(t, name) for t in traces for name in ("FCFS", "SJF", "F1", "WFP3")]
    fast = [simulate(t.jobs, Cluster.from_swf_header(t.max_nodes, t.max_procs),
                     get_policy(name), "easy") for t, name in runs]
    seen = _full_scans_only(monkeypatch)
    for (t, name), f in zip(runs, fast):
        s = simulate(t.jobs, Cluster.from_swf_header(t.max_nodes, t.max_procs),
                     get_policy(name), "easy")
        assert (f.start, f.reservation, f.decisions) == (s.start, s.reservation, s.decisions), name
    assert seen["incremental"] > 1000


def test_shadow_time_counts_every_job_ending_at_the_shadow():
    need = [2, 1, 3]
    running = [(150.0, 0), (150.0, 1), (200.0, 2)]
    # free 1 + job0 2 = 3 >= 3 at 150, and job1 also ends at 150: extra = 4 - 3 = 1
    assert shadow_time(1, 3, running, need) == (150.0, 1)
    assert shadow_time(0, 6, running, need) == (200.0, 0)


# ----------------------------------------------------------------------------------------
# The reference: one pass per event time, everything recomputed from scratch with
# sorted() and sums; no heaps, no incremental lists. Slow and plain on purpose.
def reference(jobs, cluster, policy, mode):
    n = len(jobs)
    need = [cluster.nodes_for(j.procs) for j in jobs]
    start = [None] * n
    end = [None] * n
    est_end = [None] * n
    waiting: list[int] = []
    head = None
    arrived = set()
    last = -math.inf
    while any(s is None for s in start):
        # next event time: the earliest arrival not yet seen, or end after the last event
        candidates = [j.submit for j in jobs if j.index not in arrived]
        candidates += [e for e in end if e is not None and e > last]
        now = last = min(candidates)
        for j in jobs:
            if j.index not in arrived and j.submit == now:
                arrived.add(j.index)
                waiting.append(j.index)
        running = [i for i in range(n) if start[i] is not None and end[i] > now]
        free = cluster.nodes - sum(need[i] for i in running)

        def key(i):
            j = jobs[i]
            return (policy.key(now, j.submit, j.procs, j.estimate), j.submit, i)

        order = sorted(waiting, key=key)
        if head is not None:
            order = [head] + [i for i in order if i != head]
        head = None
        started_now = []
        while order and need[order[0]] <= free:
            i = order.pop(0)
            start[i], end[i], est_end[i] = now, now + jobs[i].run, now + jobs[i].estimate
            free -= need[i]
            started_now.append(i)
        if order:
            head = order[0]
            rest = order[1:]
            running = [i for i in range(n) if start[i] is not None and end[i] > now]
            if mode == "easy" and free > 0:
                by_est = sorted(running, key=lambda i: (est_end[i], i))
                avail, shadow = free, None
                for i in by_est:
                    avail += need[i]
                    if avail >= need[head]:
                        shadow = est_end[i]
                        break
                avail = free + sum(need[i] for i in running if est_end[i] <= shadow)
                extra = avail - need[head]
                for i in rest:
                    if need[i] > free:
                        continue
                    if now + jobs[i].estimate <= shadow:
                        pass
                    elif need[i] <= extra:
                        extra -= need[i]
                    else:
                        continue
                    start[i], end[i], est_end[i] = now, now + jobs[i].run, now + jobs[i].estimate
                    free -= need[i]
                    running.append(i)
            elif mode == "conservative" and free > 0:
                # reservations as (start, end, nodes); running jobs busy until est_end
                busy = [(now, max(est_end[i], now), need[i]) for i in running]

                def fits(t, d, k):
                    points = {t} | {b for b, _, _ in busy if t < b < t + d}
                    return all(
                        sum(m for b, e, m in busy if b <= p < e) + k <= cluster.nodes
                        for p in points
                    )

                def earliest(d, k):
                    for t in sorted({now} | {e for _, e, _ in busy}):
                        if t >= now and fits(t, d, k):
                            return t
                    raise AssertionError("never fits")

                for i in [head] + rest:
                    d, k = jobs[i].estimate, need[i]
                    t = earliest(d, k)
                    busy.append((t, t + d, k))
                    if i != head and t == now and k <= free:
                        start[i], end[i], est_end[i] = now, now + jobs[i].run, now + d
                        free -= k
        waiting = [i for i in waiting if start[i] is None]
    return start
