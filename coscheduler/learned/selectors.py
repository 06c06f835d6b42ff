"""Learned models as selectors (``coscheduler.policies.selection``): numpy only.

``LearnedScorer`` scores every window job with RLScheduler's kernel network;
``LearnedInspector`` accepts or rejects its base policy's pick with SchedInspector's
network. Both choose greedily (the most likely action), so a replay is deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..policies.queue import get_policy
from ..policies.selection import ChoiceView, Inspector, Scorer
from .features import inspector_observation, rl_observation
from .modelfile import Model, ModelError, load_model
from .nets import kernel_scores, mlp


def _nan_features(model: Model, view: ChoiceView) -> ModelError:
    return ModelError(f"{model.path or model.name}: NaN features at time {view.now} (a job "
                      "with a NaN submit time, estimate or size?); the model cannot score them")


class LearnedScorer(Scorer):
    """RLScheduler: one shared MLP scores every job of the window."""

    def __init__(self, model: Model, name: str | None = None):
        if model.kind != "rlscheduler":
            raise ValueError(f"{model.path or model.name}: a {model.kind} model cannot score jobs")
        h = model.header
        super().__init__(name or f"rl:{model.name}", int(h.get("window", 128)),
                         h.get("mask", "runnable"))
        self.model = model
        self.params = model.params
        self.norm = model.norm

    def scores(self, view: ChoiceView) -> np.ndarray:
        obs, n = rl_observation(view, self.norm, max(view.size, 1))
        if not np.isfinite(obs).all():
            raise _nan_features(self.model, view)
        return kernel_scores(self.params, obs)[:view.size]


class LearnedInspector(Inspector):
    """SchedInspector: accept (logit 0) or reject (logit 1) the base policy's pick."""

    def __init__(self, model: Model, name: str | None = None, base: str | None = None):
        if model.kind != "inspector":
            raise ValueError(f"{model.path or model.name}: a {model.kind} model cannot inspect")
        h = model.header
        norm = model.norm
        policy = get_policy(base or h["base"])
        super().__init__(name or f"{policy.name}+inspector:{model.name}", policy,
                         int(norm.window), int(norm.max_rejections), float(norm.retry_after_s))
        self.model = model
        self.params = model.params
        self.norm = norm

    def logits(self, view: ChoiceView) -> np.ndarray:
        obs = inspector_observation(view, self.norm)
        if not np.isfinite(obs).all():
            raise _nan_features(self.model, view)
        return mlp(self.params, "pi", obs)

    def accept(self, view: ChoiceView) -> bool:
        z = self.logits(view)
        return bool(z[0] >= z[1])


def load_scorer(path: str | Path, name: str | None = None) -> LearnedScorer:
    return LearnedScorer(load_model(path, "rlscheduler"), name)


def load_inspector(path: str | Path, name: str | None = None,
                   base: str | None = None) -> LearnedInspector:
    return LearnedInspector(load_model(path, "inspector"), name, base)
