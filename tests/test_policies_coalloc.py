"""Co-allocation policies as pure functions: quota arithmetic, Static, SpaceSharing, ASA_X."""

from __future__ import annotations

import pytest

from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.model import Allocation, InvalidInput, Job, RunningJob
from coscheduler.policies.coalloc import (Asax, HostCandidate, SpaceSharing, Static,
                                          host_quota_fraction, lent_share, make_policy)
from fixed_experts import OneActionPerClass


def fixed_learner(by_class: dict[str, int]) -> AsaxLearner:
    return AsaxLearner(LearnerConfig(seed=3), expert_factory=lambda: [OneActionPerClass(by_class)])


def host(jid, cores, job_class="h"):
    j = Job(jid, cores=cores, walltime_s=100, job_class=job_class)
    return RunningJob(j, Allocation(jid, (("n1", cores),)), start_time=0.0)


def cand(rj, guest_cores, lent=0.0):
    state = HostState(rj.job.job_class, 30.0, 20.0, "parallel", 0.5, 2.0)
    return HostCandidate(rj, Allocation("g", (("n1", guest_cores),)), lent, None, state)


GUEST = Job("g", cores=4, walltime_s=50, job_class="guest")


def test_quota_arithmetic_by_hand():
    # Guest of 4 cores at a = 0.5 inside an 8-core host: host keeps 1 - 0.5 * 4 / 8 = 0.75.
    assert host_quota_fraction(8, lent_share(0.5, 4)) == pytest.approx(0.75)
    # Whole host shared at 90 %: host keeps 10 %.
    assert host_quota_fraction(8, lent_share(0.9, 8)) == pytest.approx(0.1)
    # Two guests: 0.3 * 2 + 0.5 * 4 = 2.6 core-equivalents of 8.
    assert host_quota_fraction(8, 0.3 * 2 + 0.5 * 4) == pytest.approx(1 - 2.6 / 8)
    assert host_quota_fraction(8, 0.0) == 1.0
    with pytest.raises(InvalidInput, match="quota fraction"):
        host_quota_fraction(4, 4.0)


def test_space_sharing_never_co_allocates():
    p = SpaceSharing()
    assert p.co_allocates is False
    cands = [cand(host(f"h{i}", 8), 4) for i in range(5)]
    r = p.choose(GUEST, iter(cands), now=1.0)
    assert r.choice is None and r.asked == () and r.declined == ()


@pytest.mark.parametrize("cores", [4, 8, 16])
def test_static_gives_half_on_the_first_candidate(cores):
    p = Static()
    cands = iter([cand(host("h1", cores), 4), cand(host("h2", cores), 4)])
    r = p.choose(GUEST, cands, now=1.0)
    assert r.choice.host_job == "h1"
    assert r.choice.guest_quota == 0.5
    assert r.choice.host_quota == pytest.approx(1 - 0.5 * 4 / cores)
    assert r.asked == ("h1",)
    assert r.choice.decision is None
    # The second candidate was never pulled (lazy candidates stay unbuilt).
    assert next(cands).host.job_id == "h2"


def test_static_with_no_candidate_and_bad_fraction():
    assert Static().choose(GUEST, [], 0.0).choice is None
    with pytest.raises(InvalidInput, match="static quota fraction"):
        Static(1.0)


def test_asax_decline_path_observes_loss_zero_and_tries_the_next_host():
    learner = fixed_learner({"busy": 0, "idle": 5})
    p = Asax(learner)
    cands = [cand(host("h1", 8, "busy"), 4), cand(host("h2", 8, "busy"), 4),
             cand(host("h3", 8, "idle"), 4)]
    r = p.choose(GUEST, iter(cands), now=7.0)
    assert r.asked == ("h1", "h2", "h3")
    assert [d.host_job for d in r.declined] == ["h1", "h2"]
    assert all(d.action_index == 0 for d in r.declined)
    # Declines were observed at once: not pending any more, and with loss 0 no risk moved.
    assert all(d.decision_id not in learner.pending for d in r.declined)
    assert learner.class_state("busy").observations == 2
    assert learner.class_state("busy").risk == [0.0]
    ch = r.choice
    assert ch.host_job == "h3" and ch.guest_quota == pytest.approx(0.5)
    assert ch.host_quota == pytest.approx(1 - 0.5 * 4 / 8)
    assert ch.decision.decision_id in learner.pending
    assert ch.decision.job_class == "idle"   # weights are kept per host class


def test_asax_all_decline_gives_no_choice():
    p = Asax(fixed_learner({}))
    r = p.choose(GUEST, [cand(host("h1", 8), 4)], now=0.0)
    assert r.choice is None and len(r.declined) == 1 and r.asked == ("h1",)


def test_asax_quota_accounts_for_what_the_host_already_lends():
    p = Asax(fixed_learner({"h": 5}))
    r = p.choose(GUEST, [cand(host("h1", 16), 4, lent=2.0)], now=0.0)
    assert r.choice.host_quota == pytest.approx(1 - (2.0 + 0.5 * 4) / 16)


def test_make_policy_by_name():
    assert isinstance(make_policy("slurm"), SpaceSharing)
    assert make_policy("static").fraction == 0.5
    assert isinstance(make_policy("ASAX"), Asax)
    with pytest.raises(InvalidInput, match="unknown co-allocation policy"):
        make_policy("greedy")
