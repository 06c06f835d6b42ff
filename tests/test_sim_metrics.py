"""Schedule metrics, computed by hand, and the replay window."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from coscheduler.model import InvalidInput
from coscheduler.sim import TraceJob, compute_metrics, read_swf
from coscheduler.sim.metrics import bounded_slowdown
from coscheduler.sim.replay import replay, window


def test_bounded_slowdown_bounds():
    assert bounded_slowdown(wait=0, run=5) == 1.0  # (0+5)/10 = 0.5, bounded below by 1
    assert bounded_slowdown(wait=15, run=5) == 2.0  # (15+5)/max(5, 10)
    assert bounded_slowdown(wait=30, run=30) == 2.0  # (30+30)/30


def test_small_fixture_fcfs_metrics_by_hand():
    # small.swf: 4 nodes x 2 processors. Jobs (submit, run, procs -> nodes):
    #   a (0, 100, 8 -> 4), b (20, 30, 4 -> 2), c (25, 40, 3 -> 2), d (30, 15, 1 -> 1)
    # FCFS, no backfilling: a runs 0-100; b is the head from 20; at 100 b and c start
    # (b ends 130, c ends 140), d waits (0 free); at 130 d starts, ends 145.
    # waits 0, 80, 75, 100 -> mean 63.75; turnarounds 100, 110, 115, 115 -> mean 110.
    # bsld: a 100/100 = 1, b 110/30 = 3.6667, c 115/40 = 2.875, d 115/15 = 7.6667
    #   mean 15.2083/4 = 3.8021, max 7.6667.
    # users: 5 (a, d) -> (1 + 7.6667)/2 = 4.3333; 7 (b, c) -> 3.2708: worst 4.3333.
    # makespan 145 - 0; utilisation (800 + 120 + 120 + 15) / (145 * 8) = 1055/1160.
    trace = read_swf(FIXTURES / "swf" / "small.swf")
    result = replay(trace, "FCFS", "none")
    assert result.schedule.start == [0, 100, 100, 130]
    m = result.metrics
    assert m.jobs == 4
    assert m.avg_wait == pytest.approx(63.75)
    assert m.avg_turnaround == pytest.approx(110.0)
    assert m.avg_bsld == pytest.approx((1 + 110 / 30 + 115 / 40 + 115 / 15) / 4)
    assert m.max_bsld == pytest.approx(115 / 15)
    assert m.worst_user_bsld == pytest.approx((1 + 115 / 15) / 2)
    assert m.makespan == 145.0
    assert m.utilization == pytest.approx(1055 / 1160)


def test_json_object_has_the_documented_keys():
    trace = read_swf(FIXTURES / "swf" / "small.swf")
    out = replay(trace, "sjf", "easy").as_json()
    assert list(out) == ["trace", "policy", "backfill", "jobs", "avg_bsld", "avg_wait",
                         "avg_turnaround", "max_bsld", "utilization", "makespan",
                         "wall_seconds"]
    assert (out["policy"], out["backfill"], out["jobs"]) == ("SJF", "easy", 4)


def test_metrics_refuse_empty_or_mismatched_input():
    with pytest.raises(InvalidInput, match="empty schedule"):
        compute_metrics([], [], [], 4)
    job = TraceJob(0, 1, 0.0, 10.0, 1, 10.0, -1)
    with pytest.raises(InvalidInput, match="1/0 start/end times for 1 jobs"):
        compute_metrics([job], [0.0], [], 4)


def jobs_at(submits):
    return [TraceJob(i, i + 1, float(s), 10.0, 1, 10.0, -1) for i, s in enumerate(submits)]


def test_window_selects_jobs_and_starts_at_first_submit():
    jobs = jobs_at([0, 5, 7, 9, 12])
    chosen = window(jobs, 1, 3)
    assert [j.index for j in chosen] == [1, 2, 3]
    # the replay starts at job 1's submit: a job submitted earlier is clamped to it
    assert [j.submit for j in window(jobs_at([0, 10, 4, 12]), 1, 3)] == [10.0, 10.0, 12.0]
    assert len(window(jobs, 2)) == 3  # default: to the end


@pytest.mark.parametrize(
    "start, count, message",
    [(5, 1, "start index 5 is outside the trace's jobs 0..4"),
     (3, 3, "runs past the trace's last job \\(4\\); at most 2 jobs from index 3"),
     (0, 0, "at least 1 job")],
)
def test_window_errors(start, count, message):
    with pytest.raises(InvalidInput, match=message):
        window(jobs_at([0, 1, 2, 3, 4]), start, count)


def test_window_replay_on_empty_cluster():
    # Window of jobs 1..2 of small.swf: b (20, 2 nodes) and c (25, 2 nodes) start at once
    # because the window's cluster is empty (job a is not part of it).
    trace = read_swf(FIXTURES / "swf" / "small.swf")
    result = replay(trace, "FCFS", "none", jobs=window(trace.jobs, 1, 2))
    assert result.schedule.start == [20, 25]
    assert result.metrics.makespan == 65 - 20
