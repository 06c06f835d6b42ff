"""Hand-computed schedules: each policy with and without EASY backfilling, plus the engine's
event-ordering rules and conservative backfilling.

Every trace runs on 4 one-processor nodes and starts the same way: j0 takes the whole
machine from its submit time for 100 s and j1 arrives 1 s later; j1 cannot fit, so it
becomes the blocked head and keeps its place while j2..j4 arrive. When j0 ends, j1 starts
and the policy orders j2..j4: that is where the policies differ. Jobs are
(submit, run, procs, estimate); "est_end" is start + estimate.
"""

from __future__ import annotations

import math

import pytest

from coscheduler.model import InvalidInput
from coscheduler.policies import get_policy
from coscheduler.sim import Cluster, TraceJob, simulate


def run(rows, policy, backfill, nodes=4, ppn=1):
    jobs = [TraceJob(i, i + 1, s, r, n, e, -1) for i, (s, r, n, e) in enumerate(rows)]
    schedule = simulate(jobs, Cluster(nodes, ppn), get_policy(policy), backfill)
    return schedule.start, schedule.end


# ---------------------------------------------------------------- FCFS
FCFS_TRACE = [
    (0, 100, 4, 100),  # j0
    (1, 50, 2, 50),    # j1
    (2, 40, 3, 80),    # j2
    (3, 30, 2, 30),    # j3
    (4, 60, 1, 90),    # j4
]


def test_fcfs_no_backfill():
    # t=100: j0 ends, head j1 starts (2 free). Order by submit: j2, j3, j4; j2 needs 3 > 2:
    #        j2 becomes the head; without backfilling nothing else starts.
    # t=150: j1 ends (4 free): j2 starts (1 free), ends 190; j3 needs 2 > 1: head.
    # t=190: j2 ends (4 free): j3 starts (ends 220), j4 starts (ends 250).
    start, end = run(FCFS_TRACE, "FCFS", "none")
    assert start == [0, 100, 150, 190, 190]
    assert end == [100, 150, 190, 220, 250]


def test_fcfs_easy():
    # t=100: j1 starts (2 free); head j2 (3 nodes). Shadow: j1's est_end 150 frees 2 -> 4 >= 3,
    #        so shadow 150, extra 1. j3 (2 nodes) fits and 100+30 = 130 <= 150: starts, 0 free.
    # t=130: j3 ends (2 free). Shadow 150, extra 1. j4 (1 node): 130+90 = 220 > 150, but
    #        1 <= extra: starts on the extra node, ends 190.
    # t=150: j1 ends (3 free): j2 starts, ends 190.
    start, end = run(FCFS_TRACE, "FCFS", "easy")
    assert start == [0, 100, 150, 100, 130]
    assert end == [100, 150, 190, 130, 190]


# ---------------------------------------------------------------- LCFS
LCFS_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 2, 50),
    (2, 20, 1, 20),
    (3, 40, 3, 40),
    (4, 30, 2, 30),
]


def test_lcfs_no_backfill():
    # t=100: j1 starts (2 free). Order by -submit: j4, j3, j2. j4 (2) starts, ends 130, 0 free;
    #        j3 (3) becomes the head.
    # t=130: j4 ends (2 free): j3 still does not fit.
    # t=150: j1 ends (4 free): j3 starts (ends 190), then j2 (1) starts (ends 170).
    start, end = run(LCFS_TRACE, "LCFS", "none")
    assert start == [0, 100, 150, 150, 100]
    assert end == [100, 150, 170, 190, 130]


def test_lcfs_easy():
    # t=100: as above: j1 and j4 start, head j3, 0 free: nothing to backfill.
    # t=130: j4 ends (2 free). Shadow: j1's est_end 150 -> 4 >= 3: shadow 150, extra 1.
    #        j2 (1 node): 130+20 = 150 <= 150: starts, ends 150.
    # t=150: j1 and j2 end (4 free): j3 starts, ends 190.
    start, end = run(LCFS_TRACE, "LCFS", "easy")
    assert start == [0, 100, 130, 150, 100]
    assert end == [100, 150, 150, 190, 130]


# ---------------------------------------------------------------- SJF
SJF_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 2, 50),
    (2, 60, 1, 70),
    (3, 20, 3, 20),
    (4, 10, 1, 10),
]


def test_sjf_no_backfill():
    # t=100: j1 starts (2 free). Order by estimate: j4 (10), j3 (20), j2 (70).
    #        j4 starts (1 free), ends 110; j3 (3) becomes the head.
    # t=110: j4 ends (2 free): j3 still waits.
    # t=150: j1 ends (4 free): j3 starts (ends 170), j2 starts (ends 210).
    start, end = run(SJF_TRACE, "SJF", "none")
    assert start == [0, 100, 150, 150, 100]
    assert end == [100, 150, 210, 170, 110]


def test_sjf_easy():
    # t=100: j1, j4 start; head j3 (3), 1 free. Shadow: est_ends j4 110 (+1 -> 2),
    #        j1 150 (+2 -> 4 >= 3): shadow 150, extra 1. j2 (1 node): 100+70 = 170 > 150
    #        but 1 <= extra: starts, ends 160.
    # t=150: j1 ends (with j4 gone, 3 free): j3 starts, ends 170.
    start, end = run(SJF_TRACE, "SJF", "easy")
    assert start == [0, 100, 100, 150, 100]
    assert end == [100, 150, 160, 170, 110]


# ---------------------------------------------------------------- SAF
SAF_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 2, 50),
    (2, 30, 3, 30),   # area 90
    (3, 10, 1, 50),   # area 50
    (4, 40, 1, 100),  # area 100
]


def test_saf_no_backfill():
    # t=100: j1 starts (2 free). Order by area: j3 (50), j2 (90), j4 (100).
    #        j3 starts (1 free), ends 110; j2 (3) becomes the head.
    # t=150: j1 ends (4 free): j2 starts (ends 180), j4 starts (ends 190).
    start, end = run(SAF_TRACE, "SAF", "none")
    assert start == [0, 100, 150, 100, 150]
    assert end == [100, 150, 180, 110, 190]


def test_saf_easy():
    # t=100: j1, j3 start; head j2 (3), 1 free. Shadow: j1 and j3 both have est_end 150
    #        (j3's estimate is 50 though it runs 10): at 150, 1 + 2 + 1 = 4 nodes are free,
    #        so shadow 150 and extra 4 - 3 = 1 (both jobs ending at 150 count).
    #        j4: 100+100 > 150 but 1 <= extra: starts, ends 140.
    # t=150: j1 ends (j3 left at 110, j4 at 140: 4 free): j2 starts, ends 180.
    start, end = run(SAF_TRACE, "SAF", "easy")
    assert start == [0, 100, 150, 100, 100]
    assert end == [100, 150, 180, 110, 140]


# ---------------------------------------------------------------- SRF
SRF_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 2, 50),
    (2, 40, 1, 40),  # ratio 40
    (3, 60, 3, 60),  # ratio 20
    (4, 20, 1, 30),  # ratio 30
]


def test_srf_no_backfill():
    # t=100: j1 starts (2 free). Order by estimate/procs: j3 (20), j4 (30), j2 (40).
    #        j3 (3) becomes the head at once.
    # t=150: j1 ends (4 free): j3 starts (ends 210), j4 starts (ends 170), 0 free: j2 head.
    # t=170: j4 ends: j2 starts, ends 210.
    start, end = run(SRF_TRACE, "SRF", "none")
    assert start == [0, 100, 170, 150, 150]
    assert end == [100, 150, 210, 210, 170]


def test_srf_easy():
    # t=100: j1 starts; head j3 (3), 2 free. Shadow (150, j1) -> 4: shadow 150, extra 1.
    #        In queue order j4: 100+30 = 130 <= 150: starts (ends 120);
    #        j2: 100+40 = 140 <= 150: starts (ends 140). 0 free.
    # t=150: j1 ends (4 free): j3 starts, ends 210.
    start, end = run(SRF_TRACE, "SRF", "easy")
    assert start == [0, 100, 100, 150, 100]
    assert end == [100, 150, 140, 210, 120]


# ---------------------------------------------------------------- WFP3
WFP3_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 2, 50),
    (10, 20, 1, 90),
    (60, 10, 3, 10),
    (80, 30, 1, 30),
]


def test_wfp3_no_backfill():
    # t=100: j1 starts (2 free). Keys -(w/est)^3 * n: j2 -(90/90)^3 = -1,
    #        j3 -(40/10)^3 * 3 = -192, j4 -(20/30)^3 = -0.30. Order j3, j2, j4: j3 (3) is head.
    # t=150: j1 ends (4 free): j3 starts (ends 160), 1 free. Keys now: j2 -(140/90)^3 = -3.76,
    #        j4 -(70/30)^3 = -12.7: j4 goes first (ends 180), 0 free; j2 becomes the head.
    # t=160: j3 ends: j2 starts, ends 180.
    start, end = run(WFP3_TRACE, "WFP3", "none")
    assert start == [0, 100, 160, 150, 150]
    assert end == [100, 150, 180, 160, 180]


def test_wfp3_easy():
    # t=100: head j3 (3), 2 free. Shadow (150, j1) -> 4: shadow 150, extra 1.
    #        In order j2: 100+90 > 150 but 1 <= extra: starts (ends 120), extra 0;
    #        j4: 100+30 = 130 <= 150: starts (ends 130).
    # t=150: j1 ends (4 free): j3 starts, ends 160.
    start, end = run(WFP3_TRACE, "WFP3", "easy")
    assert start == [0, 100, 100, 150, 100]
    assert end == [100, 150, 120, 160, 130]


# ---------------------------------------------------------------- UNICEP
UNICEP_TRACE = [
    (0, 100, 4, 100),
    (1, 50, 1, 50),
    (10, 30, 2, 50),
    (20, 20, 4, 20),
    (30, 40, 1, 40),
]


def test_unicep_no_backfill():
    # t=100: j1 (1 node) starts, 3 free. Keys -w/(log2(n) * est): j2 -90/(1*50) = -1.8,
    #        j3 -80/(2*20) = -2, j4 has n = 1 and has waited: -inf. Order j4, j3, j2.
    #        j4 starts (ends 140), 2 free; j3 (4) becomes the head.
    # t=150: j1 ends (4 free, j4 gone): j3 starts (ends 170), 0 free: j2 head.
    # t=170: j2 starts, ends 200.
    start, end = run(UNICEP_TRACE, "UNICEP", "none")
    assert start == [0, 100, 170, 150, 100]
    assert end == [100, 150, 200, 170, 140]


def test_unicep_easy():
    # t=100: head j3 (4), 2 free. Shadow: est_ends (140, j4) +1 -> 3, (150, j1) +1 -> 4:
    #        shadow 150, extra 0. j2 (2 nodes): 100+50 = 150 <= 150: starts, ends 130.
    # t=150: j3 starts, ends 170.
    start, end = run(UNICEP_TRACE, "UNICEP", "easy")
    assert start == [0, 100, 100, 150, 100]
    assert end == [100, 150, 130, 170, 140]


# ---------------------------------------------------------------- F1
# F1 = log10(est) * n + 870 * log10(s): submit times near 1000 keep the 870*log10(s)
# term close between jobs so that the size term matters.
F1_TRACE = [
    (1000, 100, 4, 100),
    (1001, 50, 2, 50),
    (1002, 40, 1, 1000),  # 3 + 870*log10(1002) = 2613.755
    (1003, 20, 1, 100),   # 2 + 870*log10(1003) = 2613.132
    (1004, 30, 2, 10),    # 1*2 + 870*log10(1004) = 2613.508
]


def test_f1_keys_as_computed_in_the_comment():
    key = get_policy("F1").key
    assert key(0, 1002, 1, 1000) == pytest.approx(2613.755, abs=1e-3)
    assert key(0, 1003, 1, 100) == pytest.approx(2613.132, abs=1e-3)
    assert key(0, 1004, 2, 10) == pytest.approx(2613.508, abs=1e-3)


def test_f1_no_backfill():
    # t=1100: j1 starts (2 free). Order j3, j4, j2: j3 starts (1 free, ends 1120);
    #         j4 (2) becomes the head.
    # t=1120: j3 ends (2 free): j4 starts (ends 1150), 0 free: j2 head.
    # t=1150: j1, j4 end: j2 starts, ends 1190.
    start, end = run(F1_TRACE, "F1", "none")
    assert start == [1000, 1100, 1150, 1100, 1120]
    assert end == [1100, 1150, 1190, 1120, 1150]


def test_f1_easy():
    # t=1100: j1, j3 start; head j4 (2), 1 free. Shadow (1150, j1) +2 -> 3 >= 2:
    #         shadow 1150, extra 1. j2: 1100+1000 > 1150, 1 <= extra: starts, ends 1140.
    # t=1140: j2 ends (2 free, j3 gone at 1120): j4 starts, ends 1170.
    start, end = run(F1_TRACE, "F1", "easy")
    assert start == [1000, 1100, 1100, 1100, 1140]
    assert end == [1100, 1150, 1140, 1120, 1170]


def test_policies_give_different_schedules_on_one_trace():
    # The same trace, ordered by each policy without backfilling: the hand-computed
    # traces above differ, so a policy silently falling back to FCFS would show here.
    fcfs = run(SJF_TRACE, "FCFS", "none")[0]
    assert run(SJF_TRACE, "SJF", "none")[0] != fcfs


# ---------------------------------------------------------------- conservative
CONS_TRACE = [
    (0, 100, 2, 100),  # j0
    (1, 10, 3, 10),    # j1
    (2, 10, 4, 10),    # j2
    (3, 200, 1, 200),  # j3: long, narrow
    (4, 5, 1, 5),      # j4: short, narrow
]


def test_fcfs_none_on_conservative_trace():
    # j1 head at t=1; t=100: j1 starts (1 free), j2 (4) head; t=110: j2 starts (0 free);
    # t=120: j3 and j4 start.
    start, end = run(CONS_TRACE, "FCFS", "none")
    assert start == [0, 100, 110, 120, 120]
    assert end == [100, 110, 120, 320, 125]


def test_easy_delays_the_second_job():
    # t=3: head j1 (3), 2 free. Shadow (100, j0) +2 -> 4: shadow 100, extra 1. j2 (4) does
    #      not fit; j3: 3+200 > 100 but 1 <= extra: starts, ends 203.
    # t=4: 1 free; shadow 100, extra 0 (j3 holds the extra node). j4: 4+5 <= 100: starts.
    # t=100: j1 starts, ends 110. j2 needs all 4 nodes, so waits for j3: starts 203.
    start, end = run(CONS_TRACE, "FCFS", "easy")
    assert start == [0, 100, 203, 3, 4]
    assert end == [100, 110, 213, 203, 9]


def test_conservative_protects_every_queued_job():
    # t=3: profile: 2 free until 100, then 4. Reservations in order: j1 [100,110) 3 nodes,
    #      j2 [110,120) 4 nodes; j3 (1 node, 200 s) would overlap j2's slot: reserved at 120.
    # t=4: j4 (1 node, 5 s) fits in [4,9) without touching any reservation: starts now.
    # t=100: j1; t=110: j2; t=120: j3.
    start, end = run(CONS_TRACE, "FCFS", "conservative")
    assert start == [0, 100, 110, 120, 4]
    assert end == [100, 110, 120, 320, 9]


def test_conservative_with_an_overrunning_job():
    # 6 nodes. j0 (4 nodes, estimate 50) really runs 100 s; head j1 (3) waits from t=1.
    # t=60: the profile counts j0's 4 nodes as free from now (its estimate has passed),
    #       though only 2 are really free. Reservations: j1 [60,70) 3 nodes, j2 [60,70)
    #       3 nodes: the profile is full until 70, so j3 (1 node) is reserved at 70; j2's
    #       slot is "now" but it does not really fit (3 > 2), so nothing starts.
    # t=100: j0 ends: j1 and j2 start; t=110: j3.
    rows = [(0, 100, 4, 50), (1, 10, 3, 10), (2, 10, 3, 10), (60, 5, 1, 5)]
    start, _ = run(rows, "FCFS", "conservative", nodes=6)
    assert start == [0, 100, 100, 110]
    # EASY: shadow = j0's est_end 50 (past), extra = 6 - 3 = 3: j3 takes an extra node.
    start, _ = run(rows, "FCFS", "easy", nodes=6)
    assert start == [0, 100, 100, 60]


# ---------------------------------------------------------------- event-ordering rules
def test_finishing_jobs_free_nodes_before_arrivals_at_the_same_time():
    # j0 ends at 10 exactly when j1 arrives: j1 starts at 10, not later.
    start, _ = run([(0, 10, 4, 10), (10, 5, 4, 5)], "FCFS", "none")
    assert start == [0, 10]


def test_all_arrivals_at_a_time_are_queued_before_the_decision():
    # j1 and j2 both arrive at 5 while 1 node is free; SJF must see both and pick j2
    # (ends 15); j1 then takes that node at 15.
    start, _ = run([(0, 100, 3, 100), (5, 50, 1, 50), (5, 10, 1, 10)], "SJF", "none")
    assert start == [0, 15, 5]


def test_blocked_top_keeps_its_place_against_later_arrivals():
    # LCFS: j1 is the top at t=1 and does not fit: it becomes the head. j2 arrives later
    # with a smaller key (-2 < -1) but must not overtake j1 at t=100.
    start, _ = run([(0, 100, 4, 100), (1, 10, 4, 10), (2, 10, 1, 10)], "LCFS", "none")
    assert start == [0, 100, 110]


def test_overrunning_job_counts_as_ending_at_its_estimate():
    # j0 (estimate 50) really runs 100 s. Head j1 needs 4: shadow = j0's est_end 50, extra 0.
    # At t=60 the shadow lies in the past: j2 can neither end before it nor use extra
    # nodes, so it is not backfilled and waits behind j1.
    start, _ = run([(0, 100, 2, 50), (1, 10, 4, 10), (60, 10, 1, 10)], "FCFS", "easy")
    assert start == [0, 100, 110]
    # With j1 needing 3, one node is extra at the (past) shadow time: j2 takes it at 60.
    start, _ = run([(0, 100, 2, 50), (1, 10, 3, 10), (60, 10, 1, 10)], "FCFS", "easy")
    assert start == [0, 100, 60]


def test_jobs_take_whole_nodes():
    # 2 nodes x 4 processors: a 5-processor job takes both nodes, so a 1-processor job
    # cannot share the second node with it.
    start, _ = run([(0, 10, 5, 10), (0, 10, 1, 10)], "FCFS", "none", nodes=2, ppn=4)
    assert start == [0, 10]
    start, _ = run([(0, 10, 4, 10), (0, 10, 4, 10)], "FCFS", "none", nodes=2, ppn=4)
    assert start == [0, 0]


def test_schedule_reports_easy_reservation_of_the_head():
    jobs = [TraceJob(i, i, *row, -1) for i, row in enumerate(FCFS_TRACE)]
    schedule = simulate(jobs, Cluster(4), get_policy("FCFS"), "easy")
    # j1 became the head at t=1 with shadow 100 (j0's est_end); j2 at t=100 with 150.
    assert schedule.reservation == {1: 100, 2: 150}
    assert schedule.finished == 5
    assert all(math.isfinite(x) for x in schedule.start)


def test_ties_break_by_submit_then_position():
    # Same SAF key (est*n = 10) for all three; j2 was submitted first, then j1 and j3 at
    # the same time: j1 before j3 by position. One node, so the order is the start order.
    rows = [(0, 5, 1, 5), (2, 10, 1, 10), (1, 10, 1, 10), (2, 10, 1, 10)]
    start, _ = run(rows, "SAF", "none", nodes=1)
    assert start == [0, 15, 5, 25]


@pytest.mark.parametrize(
    "row, message",
    [((0, 10, 5, 10), "needs 5 processors"), ((0, 0, 1, 10), "run time"),
     ((0, 10, 1, 0), "estimate")],
)
def test_engine_refuses_jobs_it_cannot_run(row, message):
    with pytest.raises(InvalidInput, match=message):
        run([row], "FCFS", "none")


def test_engine_refuses_unknown_backfill_mode():
    with pytest.raises(InvalidInput, match="unknown backfill mode 'greedy'"):
        run([(0, 1, 1, 1)], "FCFS", "greedy")
