"""Gymnasium environments over the simulator engine (needs the ``rl`` extra).

- ``SchedulingEnv`` (``coscheduler/Scheduling-v0``), RLScheduler: the observation is the
  window (``window`` x ``len(RL_FEATURES)`` in [0, 1], zero rows for padding); the action
  is a window position; ``info["action_mask"]`` says which positions may be picked
  (padding never; under the ``runnable`` rule only jobs that can start now, unless none
  can). The reward comes at the end of the sequence: minus the metric (mean bsld, mean
  wait in hours) or the utilisation.
- ``InspectorEnv`` (``coscheduler/Inspector-v0``), SchedInspector: the observation is the
  base policy's pick (``INSPECTOR_FEATURES``); action 0 accepts, 1 rejects; the reward at
  the end is (bsld_base - bsld_inspected) / bsld_base.

Each ``reset`` replays a fresh ``sequence``-job sequence (256) drawn from the first 20 %
of the trace with the environment's ``np_random`` (``options={"start": i}`` picks one).
A masked action is never taken: the environment leaves the state as it was, returns
reward 0 and ``info["invalid_action"] = True``.

Both are registered on import, so ``gymnasium.make("coscheduler/Scheduling-v0",
trace=PATH)`` works once ``coscheduler.learned.envs`` is imported (or use the module
prefix: ``gymnasium.make("coscheduler.learned.envs:coscheduler/Scheduling-v0", ...)``).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..policies.queue import get_policy
from ..sim.cluster import Cluster
from ..sim.replay import window as trace_window
from ..sim.swf import SwfTrace, read_swf
from .episode import InspectorEpisode, SchedulingEpisode
from .features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation
from .windows import SEQUENCE_JOBS, train_limit

SCHEDULING_ID = "coscheduler/Scheduling-v0"
INSPECTOR_ID = "coscheduler/Inspector-v0"


def _load(trace: str | Path | SwfTrace) -> SwfTrace:
    return trace if isinstance(trace, SwfTrace) else read_swf(trace)


class _TraceEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, trace, backfill: str, sequence: int):
        self.trace = _load(trace)
        self.cluster = Cluster.from_swf_header(self.trace.max_nodes, self.trace.max_procs)
        self.backfill = backfill
        self.sequence = sequence
        self.limit = train_limit(len(self.trace.jobs), sequence=sequence)
        longest = max(j.run for j in self.trace.jobs[:self.limit])
        self.norm_estimate = float(max(longest, 1.0))
        self.episode = None

    def _jobs(self, options) -> tuple[int, list]:
        start = (options or {}).get("start")
        if start is None:
            start = int(self.np_random.integers(0, self.limit - self.sequence + 1))
        return start, trace_window(self.trace.jobs, int(start), self.sequence)

    def _info(self) -> dict:
        return {"start": self.start, "steps": self.episode.steps}


class SchedulingEnv(_TraceEnv):
    """RLScheduler's environment; see the module docstring."""

    def __init__(self, trace, backfill: str = "none", metric: str = "bsld", window: int = 128,
                 mask: str = "runnable", sequence: int = SEQUENCE_JOBS):
        super().__init__(trace, backfill, sequence)
        self.metric, self.window, self.mask = metric, window, mask
        self.norm = Normalisation(estimate_s=self.norm_estimate, window=window)
        self.observation_space = spaces.Box(0.0, 1.0, (window, len(RL_FEATURES)), np.float32)
        self.action_space = spaces.Discrete(window)
        self._mask = np.zeros(window, dtype=bool)
        self._obs = np.zeros((window, len(RL_FEATURES)), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        while True:
            self.start, jobs = self._jobs(options)
            self.episode = SchedulingEpisode(jobs, self.cluster, self.backfill,
                                             max_procs=self.trace.max_procs, metric=self.metric,
                                             window=self.window, mask=self.mask, norm=self.norm)
            if self.episode.reset():
                break
            options = None  # a sequence with no choice to make: draw another
        return self._observe(), {**self._info(), "action_mask": self._mask.copy()}

    def _observe(self) -> np.ndarray:
        obs, mask = self.episode.observe()
        self._obs = obs.astype(np.float32)
        self._mask = mask
        return self._obs.copy()

    def step(self, action):
        action = int(action)
        if not (0 <= action < self.window) or not self._mask[action]:
            return (self._obs.copy(), 0.0, False, False,
                    {**self._info(), "action_mask": self._mask.copy(), "invalid_action": True})
        reward = self.episode.step(action)
        done = self.episode.done
        obs = self._obs.copy() if done else self._observe()
        info = {**self._info(), "action_mask": self._mask.copy() if not done
                else np.zeros(self.window, dtype=bool)}
        if done:
            info["metrics"] = self.episode.metrics.as_dict()
        return obs, float(reward), done, False, info


class InspectorEnv(_TraceEnv):
    """SchedInspector's environment; see the module docstring."""

    def __init__(self, trace, base: str = "SJF", backfill: str = "none",
                 sequence: int = SEQUENCE_JOBS):
        super().__init__(trace, backfill, sequence)
        self.base = get_policy(base)
        self.norm = Normalisation(estimate_s=self.norm_estimate)
        self.observation_space = spaces.Box(0.0, 1.0, (len(INSPECTOR_FEATURES),), np.float32)
        self.action_space = spaces.Discrete(2)
        self._obs = np.zeros(len(INSPECTOR_FEATURES), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        while True:
            self.start, jobs = self._jobs(options)
            self.episode = InspectorEpisode(jobs, self.cluster, self.base, self.backfill,
                                            max_procs=self.trace.max_procs, norm=self.norm)
            if self.episode.reset():
                break
            options = None
        self._obs = self.episode.observe().astype(np.float32)
        return self._obs.copy(), self._info()

    def step(self, action):
        reward = self.episode.step(int(action))
        done = self.episode.done
        if not done:
            self._obs = self.episode.observe().astype(np.float32)
        info = self._info()
        if done:
            info.update(metrics=self.episode.metrics.as_dict(), base_bsld=self.episode.base_bsld,
                        rejections=self.episode.rejections)
        return self._obs.copy(), float(reward), done, False, info


for _id, _cls in ((SCHEDULING_ID, "SchedulingEnv"), (INSPECTOR_ID, "InspectorEnv")):
    if _id not in gym.registry:
        gym.register(id=_id, entry_point=f"{__name__}:{_cls}")
