"""ASA_X learns as the paper has it (issue 19 item 3), on hand-worked cases:

- the loss is the HOST's: its degradation against its runtime alone, min(1, d / 0.5); the
  walltime rule min(1, overrun / walltime) when its runtime alone is unknown;
- Hp from speed relative to alone: the paper's (budget - t) x rate / remaining with the
  budget (1 + 10 %) x the runtime alone;
- a round closes when the pair's host finishes;
- at most a few hosts are asked per guest.
"""

from __future__ import annotations

import pytest

from coscheduler import happiness as hp
from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller, ControllerConfig
from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.model import Allocation, InvalidInput, Job, RunningJob
from coscheduler.policies.coalloc import Asax, HostCandidate
from coscheduler.recorder import MemoryRecorder


def test_loss_is_the_hosts_degradation_or_its_walltime_overrun():
    # Alone 100 s, shared 120 s: d = 0.2, loss = 0.2 / 0.5 = 0.4.
    assert hp.host_loss(120.0, 175.0, 100.0) == pytest.approx(0.4)
    # 160 s: d = 0.6 -> saturates at 1.
    assert hp.host_loss(160.0, 175.0, 100.0) == 1.0
    # Faster than alone: 0.
    assert hp.host_loss(95.0, 175.0, 100.0) == 0.0
    # Runtime alone unknown: the paper's walltime example, 140 s for a 100 s walltime: 0.4;
    # 70 s: 0.
    assert hp.host_loss(140.0, 100.0) == pytest.approx(0.4)
    assert hp.host_loss(70.0, 100.0) == 0.0


def test_hp_from_speed_relative_to_alone():
    # 100 tasks, 100 s alone (1 task/s), walltime 175 s; budget min(175, 1.1 x 100) = 110 s.
    # At 50 s with 50 done at 1 task/s: (110 - 50) x 1 / 50 = 1.2 (slack).
    assert hp.happiness_vs_alone(50.0, 175.0, 100.0, 50, 100, 1.0) == pytest.approx(1.2)
    # Slowed to 0.8 task/s with 40 done: (110 - 50) x 0.8 / 60 = 0.8 (< 1: too slow).
    assert hp.happiness_vs_alone(50.0, 175.0, 100.0, 40, 100, 0.8) == pytest.approx(0.8)
    # The walltime form calls the slowed job happy: (175 - 50) x 0.8 / 60 = 1.67.
    assert hp.happiness(50.0, 175.0, 40, 100, 0.8) == pytest.approx(125 * 0.8 / 60)
    with pytest.raises(InvalidInput, match="alone_runtime_s"):
        hp.happiness_vs_alone(50.0, 175.0, -1.0, 40, 100, 0.8)


def _pair(pair_loss: bool | None = None):
    """One 8-core node: host h (8 cores, u = 0.2, 100 s alone) from t = 0, guest g (4 cores,
    u = 0.5, 300 s alone) queued at t = 1. The guest outlives its host."""
    b = VirtualBackend({"n1": 8}, kill_at_walltime=False)
    b.submit(Job("h", 8, 175.0, "h", tasks=100), Profile(100.0, 0.2, 10.0))
    b.submit(Job("g", 4, 600.0, "g", tasks=100, submit_time=1.0), Profile(300.0, 0.5, 10.0))
    rec = MemoryRecorder()
    rec.record_alone_runtime("h", 100.0)
    learner = AsaxLearner(LearnerConfig(seed=0, fitted_expert=False))
    learner.actions = tuple(0.5 if j else 0.0 for j in range(len(learner.actions)))
    cfg = ControllerConfig() if pair_loss is None else ControllerConfig(pair_loss=pair_loss)
    ctl = Controller(b, Asax(learner, idle_only=False), rec, config=cfg)
    return b, ctl, rec, learner


def test_a_round_closes_when_the_pairs_host_finishes_with_the_hosts_loss():
    b, ctl, rec, learner = _pair()
    closed_at = None
    for _ in range(400):
        ctl.step()
        if closed_at is None and learner.class_state("h").rounds:
            closed_at = b.t
        if b.idle():
            break
        b.advance(1.0)
    lent = [(d, o) for k, (d, _, _) in rec.decisions.items()
            if d.action_index > 0 for o in [rec.outcomes[k]]]
    assert len(lent) == 1
    d, o = lent[0]
    [host_end] = [x.end_time for x in b.history if x.job_id == "h"]
    [guest_end] = [x.end_time for x in b.history if x.job_id == "g"]
    assert host_end < guest_end
    # Observed when the host ended, with the host's own degradation (not the guest's).
    h_runtime = host_end - 0.0
    assert o.kind == "degradation"
    assert o.loss == pytest.approx(hp.degradation_loss(h_runtime, 100.0), abs=1e-6)
    # The class's round closed then (the risk threshold was not reached: loss <= 1 and
    # p_i(a_j) < 1), once, and the recorder has it.
    assert closed_at is not None and host_end <= closed_at <= host_end + 1.0 + 1e-9
    assert learner.class_state("h").rounds == 1 and len(rec.rounds) == 1


def test_without_round_per_host_only_the_threshold_closes_rounds():
    b, _, rec, learner = _pair()
    ctl = Controller(b, Asax(learner, idle_only=False), rec,
                     config=ControllerConfig(round_per_host=False))
    b.run_until_idle(ctl, tick_s=1.0)
    assert learner.class_state("h").rounds == 0


def test_asax_asks_at_most_a_few_hosts():
    learner = AsaxLearner(LearnerConfig(seed=0, fitted_expert=False))
    learner.actions = tuple(0.0 for _ in learner.actions)   # every host declines
    policy = Asax(learner, idle_only=False, max_asks=3)
    guest = Job("g", 2, 100.0, "g")
    cands = []
    for i in range(6):
        rj = RunningJob(Job(f"h{i}", 4, 100.0, "h"), Allocation(f"h{i}", (("n1", 4),)), 0.0)
        cands.append(HostCandidate(rj, Allocation("g", (("n1", 2),)), 0.0, None,
                                   HostState("h", 10.0, 10.0, "parallel", 0.1, 2.0)))
    result = policy.choose(guest, iter(cands), 1.0)
    assert result.choice is None and result.asked == ("h0", "h1", "h2")
    with pytest.raises(InvalidInput, match="max_asks"):
        Asax(learner, max_asks=0)


def test_the_paper_runs_learn_per_workflow_kind_and_stage_by_default():
    """Issue 19, item 3: job classes per workflow kind and stage. The simulated stages'
    classes are kind/stage/cores; the default granularity keeps kind/stage, so the sizes
    of one stage pool their rounds and different stages never do."""
    import inspect

    from coscheduler.experiments import paper
    from coscheduler.learner.classes import class_key

    assert inspect.signature(paper.run_paper).parameters["classes"].default == "stage"
    key = class_key(paper.CLASSES["stage"])
    job = Job("j", cores=8, walltime_s=10.0, job_class="montage/mProject/8")
    other_size = Job("k", cores=16, walltime_s=10.0, job_class="montage/mProject/16")
    other_stage = Job("m", cores=8, walltime_s=10.0, job_class="montage/mAdd/8")
    assert key(job) == key(other_size) == "montage/mProject"
    assert key(other_stage) == "montage/mAdd"
    with pytest.raises(InvalidInput, match="prefix:N"):
        class_key("prefix:0")
