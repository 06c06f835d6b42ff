"""Happiness Hp(t) and the losses, checked against hand-computed cases."""

import math

import pytest

from coscheduler.happiness import (degradation, degradation_loss, happiness, host_loss,
                                   projected_overrun_loss, walltime_loss)
from coscheduler.model import InvalidInput


def test_happiness_hand_cases():
    # 100 s walltime, 40 s elapsed -> 60 s left; 30 tasks left at 1 task/s need 30 s: Hp = 2.
    assert happiness(40, 100, 70, 100, 1.0) == pytest.approx(2.0)
    # Same job at 0.25 tasks/s needs 120 s for 30 tasks: Hp = 60 * 0.25 / 30 = 0.5 (overrun).
    assert happiness(40, 100, 70, 100, 0.25) == pytest.approx(0.5)
    # Exactly on time: 50 s left, 10 tasks at 0.2 tasks/s.
    assert happiness(50, 100, 0, 10, 0.2) == pytest.approx(1.0)


def test_happiness_edges():
    assert happiness(10, 100, 5, 5, 1.0) == math.inf      # nothing left to do
    assert happiness(120, 100, 1, 5, 1.0) == 0.0          # past walltime with work left
    assert happiness(10, 100, 1, 5, 0.0) == 0.0           # stalled
    assert happiness(10, 100, 1, None, 1.0) is None       # total unknown
    assert happiness(10, 100, 1, 5, None) is None         # rate unknown


@pytest.mark.parametrize("args", [
    (float("nan"), 100, 1, 5, 1.0), (-1, 100, 1, 5, 1.0), (1, 0, 1, 5, 1.0),
    (1, -5, 1, 5, 1.0), (1, 100, 1, 5, float("nan")), (1, 100, 1, 5, -2.0), (1, 100, -1, 5, 1.0),
])
def test_happiness_rejects_bad_input(args):
    with pytest.raises(InvalidInput):
        happiness(*args)


def test_walltime_loss_matches_the_paper_example():
    # Paper 3.2: walltime 100 s, finished in 140 s -> min(1, 40/100) = 0.4; in 70 s -> 0.
    assert walltime_loss(140, 100) == pytest.approx(0.4)
    assert walltime_loss(70, 100) == 0.0
    assert walltime_loss(100, 100) == 0.0
    assert walltime_loss(350, 100) == 1.0


def test_degradation_loss_saturates_at_fifty_percent():
    assert degradation(120, 100) == pytest.approx(0.2)
    assert degradation_loss(120, 100) == pytest.approx(0.4)    # 20 % slower / 50 %
    assert degradation_loss(150, 100) == pytest.approx(1.0)
    assert degradation_loss(300, 100) == 1.0
    assert degradation_loss(90, 100) == 0.0                    # faster than alone: no loss


def test_host_loss_prefers_degradation_when_alone_runtime_known():
    assert host_loss(120, 1000) == 0.0                         # within walltime
    assert host_loss(120, 1000, alone_runtime_s=100) == pytest.approx(0.4)
    assert host_loss(120, 1000, alone_runtime_s=None) == 0.0


def test_loss_rejects_bad_walltime():
    with pytest.raises(InvalidInput, match="walltime_s"):
        walltime_loss(10, 0)
    with pytest.raises(InvalidInput, match="alone_runtime_s"):
        degradation_loss(10, -1)


def test_projected_overrun_loss():
    # 60 s elapsed of 100, 50 of 100 tasks done at 0.5 tasks/s: end at 160 s -> loss 0.6.
    assert projected_overrun_loss(60, 100, 50, 100, 0.5) == pytest.approx(0.6)
    assert projected_overrun_loss(10, 100, 50, 100, 5.0) is None   # on time
    assert projected_overrun_loss(10, 100, 50, 100, 0.0) is None   # cannot project
