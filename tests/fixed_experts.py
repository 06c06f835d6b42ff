"""Experts with known answers, for tests that compute the learner's updates by hand."""

from __future__ import annotations


class ConstantExpert:
    """The same distribution whatever the host's state."""

    def __init__(self, name: str, p):
        self.name, self.p = name, tuple(p)

    def distribution(self, state):
        return self.p

    def learn(self, state, action_fraction, loss):
        return None


class OneActionPerClass:
    """All probability on one action per host job class (action 0 for unknown classes)."""

    def __init__(self, by_class: dict[str, int], m: int = 10, name: str = "fixed"):
        self.by_class, self.m, self.name = by_class, m, name

    def distribution(self, state):
        j = self.by_class.get(state.job_class, 0)
        return tuple(1.0 if k == j else 0.0 for k in range(self.m))

    def learn(self, state, action_fraction, loss):
        return None
