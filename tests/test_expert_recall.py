"""A restarted learner's experts are recalled from their last outcomes only
(``recall``): the result must be the expert that heard every outcome."""

from __future__ import annotations

import random

import pytest

from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.learner.experts import paper_experts
from coscheduler.learner.fitted import FittedTreeExpert
from coscheduler.model import InvalidInput


def _outcomes(n: int, seed: int = 0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        state = HostState(job_class="c", cpu_percent=rng.uniform(0, 100),
                          mem_percent=rng.uniform(0, 100), stage_type="parallel",
                          elapsed_fraction=rng.random(), happiness=rng.uniform(0.3, 2.0))
        a = rng.choice([0.0, 0.1, 0.3, 0.5, 0.7])
        out.append((state, a, min(1.0, a * state.cpu_percent / 100 + rng.random() * 0.1)))
    return out


def _state(e: FittedTreeExpert):
    return (e._X, e._y, e._since_fit, e._fits, e._model)


@pytest.mark.parametrize("seen", [0, 3, 6, 7, 12, 13, 14, 15, 16, 29, 40, 41, 100, 257])
def test_recalling_the_last_outcomes_gives_the_expert_that_heard_them_all(seen):
    outcomes = _outcomes(seen + 30, seed=seen)
    heard = FittedTreeExpert(min_samples=6, refit_every=3, max_samples=12, seed=2)
    for s, a, loss in outcomes[:seen]:
        heard.learn(s, a, loss)
    recalled = FittedTreeExpert(min_samples=6, refit_every=3, max_samples=12, seed=2)
    window = recalled.recall_window
    recalled.recall(outcomes[max(0, seen - window):seen], seen)
    assert _state(recalled) == _state(heard)
    # and they go on alike: same refits, same distributions
    probe = _outcomes(5, seed=99)
    for s, a, loss in outcomes[seen:]:
        heard.learn(s, a, loss)
        recalled.learn(s, a, loss)
        assert _state(recalled) == _state(heard)
        assert [recalled.distribution(p) for p, _, _ in probe] == \
            [heard.distribution(p) for p, _, _ in probe]


def test_the_refit_schedule_shortcut_matches_learning_one_by_one():
    e = FittedTreeExpert(min_samples=20, refit_every=10, max_samples=300)
    fits, last = 0, 0
    for n, (s, a, loss) in enumerate(_outcomes(2000, seed=5), start=1):
        e.learn(s, a, loss)
        if e._since_fit == 0:
            fits, last = fits + 1, n
        if n % 97 == 0 or n in (19, 20, 300, 301, 330, 331):
            assert FittedTreeExpert(min_samples=20, refit_every=10,
                                    max_samples=300)._refits(n) == (last, fits)


def test_too_few_outcomes_to_recall_are_refused():
    e = FittedTreeExpert(min_samples=6, refit_every=3, max_samples=12)
    with pytest.raises(InvalidInput, match="needs the last"):
        e.recall(_outcomes(5), 100)
    with pytest.raises(InvalidInput, match="cannot be the last"):
        e.recall(_outcomes(5), 3)


def test_the_learner_needs_as_many_outcomes_as_its_widest_expert():
    assert AsaxLearner(LearnerConfig(fitted_expert=False)).recall_window() == 0
    fitted = AsaxLearner(LearnerConfig())
    assert fitted.recall_window() == FittedTreeExpert().recall_window

    class Opaque:
        name = "opaque"

        def distribution(self, state):
            return (0.1,) * 10

        def learn(self, state, a, loss):
            pass

    assert AsaxLearner(LearnerConfig(), lambda: paper_experts() + [Opaque()]).recall_window() is None
