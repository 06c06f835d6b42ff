"""The ASA_X learner (Algorithm 1): hand-computed cases, determinism, bad input."""

import math

import pytest

from coscheduler.learner import (AsaxLearner, ClassState, Decision, FittedTreeExpert, HostState,
                                 LearnerConfig, action_fractions, leaf_distribution, paper_experts)
from coscheduler.model import InvalidInput, StageType
from fixed_experts import ConstantExpert


def two_expert_learner(**cfg):
    cfg.setdefault("seed", 7)
    return AsaxLearner(LearnerConfig(m=2, fitted_expert=False, **cfg),
                       expert_factory=lambda: [ConstantExpert("a", (0.8, 0.2)), ConstantExpert("b", (0.2, 0.8))])


STATE = HostState("wf/stage", cpu_percent=10, mem_percent=10, stage_type="parallel",
                  elapsed_fraction=0.1, happiness=2.0)


def test_actions_are_j_over_m():
    assert action_fractions(10) == tuple(j / 10 for j in range(10))
    assert action_fractions(2) == (0.0, 0.5)


def test_round_closes_and_weights_update_as_computed_by_hand():
    L = two_expert_learner()
    d1 = L.decide(STATE, "host1", "guest1", now=1.0)
    d2 = L.decide(STATE, "host1", "guest2", now=2.0)
    # Seed 7's draws for decisions 1, 2, 3 are 0.260, 0.523, 0.447 against mixture (0.5, 0.5).
    assert (d1.action_index, d2.action_index) == (0, 1)
    assert d1.mixture == pytest.approx((0.5, 0.5))
    assert L.observe(d2.decision_id, 1.0, now=3.0) is None          # r = (0.2, 0.8)
    assert L.observe(d1.decision_id, 0.5, now=4.0) is None          # r = (0.6, 0.9)
    assert L.class_state("wf/stage").risk == pytest.approx([0.6, 0.9])
    d3 = L.decide(STATE, "host1", "guest3", now=5.0)
    assert d3.action_index == 0
    closed = L.observe(d3.decision_id, 1.0, now=6.0)                # r = (1.4, 1.1) > 1
    assert closed is not None and closed.round == 1 and closed.gamma == pytest.approx(1.0)
    assert closed.risk == pytest.approx((1.4, 1.1))
    # alpha_a = e^-1.4 / (e^-1.4 + e^-1.1) = 1 / (1 + e^0.3)
    expected_a = 1 / (1 + math.exp(0.3))
    assert L.weights("wf/stage") == pytest.approx({"a": expected_a, "b": 1 - expected_a})
    st = L.class_state("wf/stage")
    assert st.risk == [0.0, 0.0] and st.rounds == 1 and st.last_update == 6.0
    # Theorem 1 bookkeeping: mixture risk 0.5*1.4 + 0.5*1.1 = 1.25, best expert 1.1.
    assert L.excess_risk("wf/stage") == pytest.approx(0.15)
    assert L.theorem1_bound("wf/stage") == pytest.approx(math.log(2) + 0.5)


def test_next_decisions_use_the_new_weights():
    L = two_expert_learner(gamma_schedule="constant", gamma0=2.0)
    for _ in range(3):
        d = L.decide(STATE, "h", "g", now=0.0)
        L.observe(d.decision_id, 1.0, now=0.0)
    w = L.weights("wf/stage")
    d = L.decide(STATE, "h", "g", now=1.0)
    assert d.weights == pytest.approx((w["a"], w["b"]))
    assert d.mixture == pytest.approx((0.8 * w["a"] + 0.2 * w["b"], 0.2 * w["a"] + 0.8 * w["b"]))


def test_gamma_schedules():
    assert LearnerConfig(gamma0=2.0).gamma(4) == pytest.approx(1.0)
    assert LearnerConfig(gamma0=2.0, gamma_schedule="constant").gamma(4) == 2.0


def test_same_seed_same_actions_different_seed_differs():
    def run(seed):
        L = AsaxLearner(LearnerConfig(seed=seed))
        return [L.decide(STATE, "h", f"g{i}", now=float(i)).action_index for i in range(200)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_weights_are_kept_per_class():
    L = two_expert_learner(gamma_schedule="constant", gamma0=3.0)
    other = HostState("other/stage", 10, 10, "parallel", 0.1, 2.0)
    for _ in range(10):
        d = L.decide(STATE, "h", "g", now=0.0)
        L.observe(d.decision_id, 1.0 if d.action_index == 1 else 0.0, now=0.0)
    d = L.decide(other, "h2", "g", now=0.0)
    assert L.weights("other/stage") == pytest.approx({"a": 0.5, "b": 0.5})
    assert L.weights("wf/stage")["a"] > 0.5   # b put its mass on the lossy action 1
    assert d.job_class == "other/stage"


def test_paper_experts_follow_the_design_rule():
    cpu, mem, stage, elapsed = paper_experts(10)
    assert cpu.leaf_count == 9                         # Fig. 2: nine leaves
    acts = action_fractions(10)

    def mean_action(expert, **kw):
        base = dict(job_class="c", cpu_percent=10, mem_percent=10, stage_type="sequential",
                    elapsed_fraction=0.6, happiness=2.0)
        base.update(kw)
        p = expert.distribution(HostState(**base))
        assert sum(p) == pytest.approx(1.0) and min(p) > 0
        return sum(a * q for a, q in zip(acts, p))

    for expert, metric, low, high in [(cpu, "cpu_percent", 10, 95), (mem, "mem_percent", 10, 95)]:
        assert mean_action(expert, **{metric: low}) > mean_action(expert, **{metric: high}) + 0.2
        # A host likely to overrun lends (almost) nothing, whatever its metric.
        assert mean_action(expert, **{metric: low, "happiness": 0.5}) < 0.15
    assert mean_action(stage, stage_type="sequential") > mean_action(stage, stage_type="parallel")
    # Unknown Hp falls in the cautious middle bin.
    assert mean_action(cpu, happiness=None) < mean_action(cpu, happiness=2.0)


def test_leaf_distribution_peaks_at_its_generosity():
    p = leaf_distribution(1.0, 10)
    assert max(range(10), key=p.__getitem__) == 9
    p = leaf_distribution(0.0, 10)
    assert max(range(10), key=p.__getitem__) == 0
    with pytest.raises(InvalidInput):
        leaf_distribution(1.5, 10)


def test_fitted_expert_is_uniform_until_it_has_data_then_avoids_lossy_actions():
    fe = FittedTreeExpert(10, min_samples=20)
    assert fe.distribution(STATE) == pytest.approx([0.1] * 10)
    acts = action_fractions(10)
    for i in range(200):
        a = acts[i % 10]
        fe.learn(STATE, a, 1.0 if a >= 0.5 else 0.0)   # lending half or more hurts
    assert fe.fitted
    p = fe.distribution(STATE)
    assert sum(p[:5]) > 0.9
    assert max(range(10), key=p.__getitem__) == 4      # the largest harmless lending


@pytest.mark.parametrize("m", [0, 1, -3, 2.5, True])
def test_bad_m_is_refused(m):
    with pytest.raises(InvalidInput, match="m must be"):
        LearnerConfig(m=m)


@pytest.mark.parametrize("kw", [dict(gamma0=0), dict(gamma0=float("nan")),
                                dict(gamma_schedule="log"), dict(risk_threshold=-1),
                                dict(max_classes=0), dict(max_classes=1.5), dict(max_classes=True)])
def test_bad_config_is_refused(kw):
    with pytest.raises(InvalidInput):
        LearnerConfig(**kw)


def test_bad_losses_and_ids_are_refused_without_losing_state():
    L = two_expert_learner()
    d = L.decide(STATE, "h", "g", now=0.0)
    before = L.class_state("wf/stage").to_dict()
    for bad in (float("nan"), -0.1, 1.5, "x"):
        with pytest.raises(InvalidInput, match=f"loss of decision {d.decision_id}"):
            L.observe(d.decision_id, bad, now=1.0)
    assert L.class_state("wf/stage").to_dict() == before
    assert d.decision_id in L.pending                      # still waiting for a real loss
    with pytest.raises(InvalidInput, match="unknown or already observed"):
        L.observe(999, 0.5, now=1.0)
    L.observe(d.decision_id, 0.5, now=1.0)
    with pytest.raises(InvalidInput, match="already observed"):
        L.observe(d.decision_id, 0.5, now=1.0)


def test_unknown_class_and_bad_state_are_refused():
    L = AsaxLearner()
    with pytest.raises(InvalidInput, match="unknown job class 'nope'"):
        L.weights("nope")
    with pytest.raises(InvalidInput, match="cpu_percent"):
        HostState("c", float("nan"), 1, StageType.PARALLEL, 0.1, 1.0)
    with pytest.raises(InvalidInput, match="cpu_percent"):
        HostState("c", -5, 1, StageType.PARALLEL, 0.1, 1.0)
    with pytest.raises(InvalidInput, match="stage_type"):
        HostState("c", 5, 1, "serial", 0.1, 1.0)
    with pytest.raises(InvalidInput, match="job class"):
        HostState("../etc", 5, 1, "parallel", 0.1, 1.0)
    with pytest.raises(InvalidInput, match="host_job"):
        L.decide(STATE, "../x", "g", now=0.0)


def test_state_round_trips_and_restart_continues_identically():
    cfg = LearnerConfig(seed=11, fitted_expert=False)
    straight = AsaxLearner(cfg)
    first = AsaxLearner(cfg)
    losses = [0.0, 0.3, 1.0, 0.7, 0.2]
    actions_a, actions_b = [], []
    for i in range(60):
        for L, acts in ((straight, actions_a), (first, actions_b)):
            d = L.decide(STATE, "h", f"g{i}", now=float(i))
            acts.append(d.action_index)
            if i % 2:
                L.observe(d.decision_id, losses[i % 5], now=float(i))
        if i == 29:   # restart `first` from its saved plain data, as the store would
            saved = [ClassState.from_dict(s.to_dict()) for s in first.snapshot()]
            pending = [Decision.from_dict(d.to_dict()) for d in first.pending.values()]
            first = AsaxLearner(cfg, classes=saved, pending=pending, next_decision_id=first.next_decision_id)
    assert actions_a == actions_b
    assert straight.weights("wf/stage") == pytest.approx(first.weights("wf/stage"))


def test_saved_state_with_other_experts_is_refused():
    st = ClassState.fresh("wf/stage", ("x", "y"))
    with pytest.raises(InvalidInput, match="refusing to mix"):
        AsaxLearner(LearnerConfig(fitted_expert=False), classes=[st])


def test_corrupt_class_record_is_refused():
    d = ClassState.fresh("wf/stage", ("a", "b")).to_dict()
    d["weights"] = [0.9, 0.9]
    with pytest.raises(InvalidInput, match="not a distribution"):
        ClassState.from_dict(d)
    with pytest.raises(InvalidInput, match="not valid"):
        ClassState.from_dict({"job_class": "x"})


# -- the class bound (a Slurm site's default class user/jobname, job names with run numbers) --

def _decide_observe(learner, job_class, t, loss=0.5):
    d = learner.decide(STATE, "h", "g", t, job_class=job_class)
    learner.observe(d.decision_id, loss, t + 1)
    return d


def test_classes_past_the_bound_forget_the_least_recently_used():
    learner = AsaxLearner(LearnerConfig(seed=1, max_classes=3))
    for t, c in enumerate(["a/x", "b/x", "c/x"]):
        _decide_observe(learner, c, float(t))
    _decide_observe(learner, "a/x", 10.0)           # a used again: b is now the oldest
    _decide_observe(learner, "d/x", 11.0)
    assert learner.known_classes() == ["a/x", "c/x", "d/x"]
    assert not learner.holds("b/x") and learner.forgotten_classes == 1
    # a forgotten class comes back fresh
    assert learner.class_state("b/x").decisions == 0
    assert len(learner.known_classes()) == 3


def test_a_class_with_a_decision_pending_is_never_forgotten():
    learner = AsaxLearner(LearnerConfig(seed=1, max_classes=2))
    waiting = learner.decide(STATE, "h1", "g1", 0.0, job_class="a/x")    # its outcome is due
    _decide_observe(learner, "b/x", 1.0)
    _decide_observe(learner, "c/x", 2.0)                    # b goes, not a
    assert learner.holds("a/x") and not learner.holds("b/x")
    w_before = learner.class_state("a/x").decisions
    learner.observe(waiting.decision_id, 1.0, 3.0)          # reaches a's own state
    st = learner.class_state("a/x")
    assert st.decisions == w_before and st.observations == 1
    # every held class pending: the bound is passed, nothing is lost, until one is settled
    learner = AsaxLearner(LearnerConfig(seed=1, max_classes=2))
    pend = [learner.decide(STATE, "h", "g", float(t), job_class=c)
            for t, c in enumerate(["a/x", "b/x", "c/x"])]
    assert learner.known_classes() == ["a/x", "b/x", "c/x"]
    learner.forget(pend[0].decision_id)
    _decide_observe(learner, "d/x", 5.0)     # a settled (forgotten decision): a goes
    assert learner.known_classes() == ["b/x", "c/x", "d/x"]


def test_many_one_job_classes_hold_bounded_memory():
    """Measured before the bound: 20,000 one-job classes held 68 MB (3.4 KB a class)."""
    import tracemalloc

    from coscheduler.learner.asax import _MIXTURES_MAX

    learner = AsaxLearner(LearnerConfig(seed=1, max_classes=500))
    for t in range(500):
        _decide_observe(learner, f"alice/run_{t}", float(t))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for t in range(500, 12_500):
        _decide_observe(learner, f"alice/run_{t}", float(t))
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert len(learner.known_classes()) == 500 and learner.forgotten_classes == 12_000
    held = (learner._experts, learner._keyed, learner._valid, learner._recency)
    assert all(len(x) <= 500 for x in held) and not learner._pending_of
    assert len(learner._mixtures) <= _MIXTURES_MAX
    # Unbounded, 12,000 more classes would be about 41 MB. What grows here is the mixture
    # cache, bounded too (up to 8,192 entries, about 1.2 KB each): 16 MB at its peak.
    assert peak < 25_000_000, peak


def test_a_saved_state_larger_than_the_bound_keeps_the_classes_updated_last():
    learner = two_expert_learner()
    saved = []
    for t, c in enumerate(["a/x", "b/x", "c/x", "d/x"]):
        st = ClassState.fresh(c, learner.expert_names)
        st.last_update = float(10 - t) if c != "a/x" else 100.0
        saved.append(st)
    again = AsaxLearner(LearnerConfig(m=2, fitted_expert=False, max_classes=2),
                        expert_factory=lambda: [ConstantExpert("a", (0.8, 0.2)),
                                                ConstantExpert("b", (0.2, 0.8))],
                        classes=saved)
    assert again.known_classes() == ["a/x", "b/x"]


def test_the_controller_does_not_save_a_forgotten_class_over_its_saved_state():
    """A class forgotten in the pass that made it dirty: saving it at the end of the pass
    would recreate it fresh and write that over the state the store holds."""
    from coscheduler.controller.feedback import FeedbackMixin

    class Saves(FeedbackMixin):
        def __init__(self, learner):
            self.learner, self.saved = learner, []
            self.recorder = self
            self._dirty_classes = {"a/x", "b/x"}

        def save_class(self, st):
            self.saved.append((st.job_class, st.decisions))

    learner = AsaxLearner(LearnerConfig(seed=1, max_classes=1))
    _decide_observe(learner, "a/x", 0.0)
    _decide_observe(learner, "b/x", 1.0)
    ctl = Saves(learner)
    ctl._save_dirty()
    assert ctl.saved == [("b/x", 1)] and not learner.holds("a/x") and not ctl._dirty_classes
