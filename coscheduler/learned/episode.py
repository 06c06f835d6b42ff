"""One training or evaluation episode over the simulator engine (numpy only).

An episode replays a job sequence with ``sim.engine.replay_steps`` and stops at every
question the engine asks a selector: RLScheduler's "which window job next?" or
SchedInspector's "accept the base policy's pick?". The gymnasium environments
(``envs.py``) and the rollout workers (``rollout.py``) both drive these classes, so the
environment is the simulator itself, not a copy of it.

Rewards come at the end of a sequence only:
- RLScheduler: minus the chosen metric (mean bounded slowdown, mean wait in hours), or
  the utilisation for ``util``;
- SchedInspector: (bsld_base - bsld_inspected) / bsld_base, the base policy's own replay
  of the same sequence giving bsld_base.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..model import InvalidInput
from ..policies.queue import POLICIES, QueuePolicy
from ..policies.selection import MASK_RULES, ChoiceView, action_mask
from ..sim.cluster import Cluster
from ..sim.engine import BACKFILL_MODES, Schedule, replay_steps, simulate
from ..sim.metrics import Metrics, compute_metrics
from .features import (INSPECTOR_FEATURES, RL_FEATURES, Normalisation,
                       inspector_observation, rl_observation)

METRICS = ("bsld", "wait", "util")


def metric_value(metrics: Metrics, metric: str) -> float:
    """The figure an episode optimises: lower is better except for ``util``."""
    if metric == "bsld":
        return metrics.avg_bsld
    if metric == "wait":
        return metrics.avg_wait / 3600.0
    if metric == "util":
        return metrics.utilization
    raise InvalidInput(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")


class _Asker:
    """The selector the engine sees; the episode answers for it."""

    def __init__(self, kind: str, queue_policy: QueuePolicy, window: int,
                 max_rejections: int = 0, retry_after: float = 600.0):
        self.name = f"episode-{kind}"
        self.kind = kind
        self.queue_policy = queue_policy
        self.window = window
        self.max_rejections = max_rejections
        self.retry_after = retry_after

    def choose(self, view):  # pragma: no cover - the episode answers instead
        raise RuntimeError("an episode's selector is driven by step()")


class _Episode:
    def __init__(self, jobs: Sequence, cluster: Cluster, backfill: str, max_procs: int):
        if backfill not in BACKFILL_MODES:
            raise InvalidInput(f"unknown backfill mode {backfill!r}; valid: {', '.join(BACKFILL_MODES)}")
        if not jobs:
            raise InvalidInput("an episode needs at least one job")
        self.jobs = list(jobs)
        self.cluster = cluster
        self.backfill = backfill
        self.max_procs = max_procs
        self.view: ChoiceView | None = None
        self.schedule: Schedule | None = None
        self.metrics: Metrics | None = None
        self.steps = 0

    def _start(self, asker) -> bool:
        """Begin the replay; False if it finished without asking anything."""
        self._gen = replay_steps(self.jobs, self.cluster, asker, self.backfill)
        self.schedule = self.metrics = None
        self.steps = 0
        return self._advance(None, first=True)

    def _advance(self, answer, first: bool = False) -> bool:
        try:
            self.view = next(self._gen) if first else self._gen.send(answer)
            return True
        except StopIteration as stop:
            self.view = None
            self.schedule = stop.value
            self.metrics = compute_metrics(self.jobs, self.schedule.start, self.schedule.end,
                                           self.max_procs)
            return False

    @property
    def done(self) -> bool:
        return self.view is None


class SchedulingEpisode(_Episode):
    """RLScheduler's episode: pick the next job from the window."""

    features = RL_FEATURES

    def __init__(self, jobs: Sequence, cluster: Cluster, backfill: str = "none", *,
                 max_procs: int | None = None, metric: str = "bsld", window: int = 128,
                 mask: str = "runnable", norm: Normalisation | None = None):
        super().__init__(jobs, cluster, backfill, max_procs or cluster.procs)
        if metric not in METRICS:
            raise InvalidInput(f"unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if mask not in MASK_RULES:
            raise InvalidInput(f"unknown mask rule {mask!r}; valid: {', '.join(MASK_RULES)}")
        self.metric = metric
        self.window = window
        self.mask_rule = mask
        self.norm = norm or Normalisation(window=window)

    def reset(self) -> bool:
        return self._start(_Asker("scorer", POLICIES["FCFS"], self.window))

    def observe(self) -> tuple[np.ndarray, np.ndarray]:
        """(window x features) observation and the boolean action mask (window,)."""
        obs, n = rl_observation(self.view, self.norm, self.window)
        mask = np.zeros(self.window, dtype=bool)
        mask[:n] = action_mask(self.view, self.mask_rule)[:n]
        return obs, mask

    def step(self, action: int) -> float:
        """Answer the current question; the reward (non-zero only once done)."""
        if self.view is None:
            raise InvalidInput("the episode is over; reset it first")
        n = min(self.view.size, self.window)
        allowed = action_mask(self.view, self.mask_rule)
        if not (0 <= int(action) < n) or not allowed[int(action)]:
            raise InvalidInput(f"action {action} is masked (window has {n} jobs; allowed: "
                               f"{np.flatnonzero(allowed[:n]).tolist()[:10]}...)")
        self.steps += 1
        if self._advance(int(action)):
            return 0.0
        value = metric_value(self.metrics, self.metric)
        return value if self.metric == "util" else -value


class InspectorEpisode(_Episode):
    """SchedInspector's episode: accept (0) or reject (1) the base policy's pick."""

    features = INSPECTOR_FEATURES

    def __init__(self, jobs: Sequence, cluster: Cluster, base: QueuePolicy,
                 backfill: str = "none", *, max_procs: int | None = None,
                 norm: Normalisation | None = None):
        super().__init__(jobs, cluster, backfill, max_procs or cluster.procs)
        self.base = base
        self.norm = norm or Normalisation()
        self.base_bsld: float | None = None

    def reset(self) -> bool:
        sched = simulate(self.jobs, self.cluster, self.base, self.backfill)
        self.base_bsld = compute_metrics(self.jobs, sched.start, sched.end, self.max_procs).avg_bsld
        return self._start(_Asker("inspector", self.base, self.norm.window,
                                  self.norm.max_rejections, self.norm.retry_after_s))

    def observe(self) -> np.ndarray:
        return inspector_observation(self.view, self.norm)

    def step(self, action: int) -> float:
        if self.view is None:
            raise InvalidInput("the episode is over; reset it first")
        if action not in (0, 1):
            raise InvalidInput(f"inspector action must be 0 (accept) or 1 (reject), got {action!r}")
        self.steps += 1
        if self._advance(action == 0):
            return 0.0
        return self.reward()

    def reward(self) -> float:
        return (self.base_bsld - self.metrics.avg_bsld) / self.base_bsld

    @property
    def rejections(self) -> int:
        return self.schedule.rejections if self.schedule else 0
