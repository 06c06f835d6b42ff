"""Multi-resource schedule metrics (MRSch's section IV-B), from jobs, requests and a schedule.

- utilisation of a resource: the resource-seconds held by jobs *within the arrival period*
  [first submit, last submit] of the evaluated jobs, over capacity x that period's length.
  Measuring over the arrival period (not up to the last end) keeps the drain at the end,
  the same for every method, from hiding how well a method packs while jobs arrive;
- nodes count busy nodes; the burst buffer counts held GB; power counts the draw above
  idle (nodes x (W per node - idle W)) against the budget above the all-idle draw, the same
  pool the engine checks;
- mean wait (start - submit) and mean bounded slowdown ``max(1, (wait + run) / max(run,
  10 s))`` (MRSch's plain slowdown is dominated by jobs of a few seconds; the 10 s bound is
  the field's and this project's usual form).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from ..sim.metrics import BSLD_BOUND_S
from ..sim.resources import PoolModel


@dataclass(frozen=True)
class MultiMetrics:
    jobs: int
    node_util: float
    bb_util: float | None
    power_util: float | None
    mean_wait_s: float
    mean_slowdown: float

    def as_dict(self) -> dict:
        return asdict(self)


def _held_within(start: np.ndarray, end: np.ndarray, amount: np.ndarray, lo: float,
                 hi: float) -> float:
    overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    return float((overlap * amount).sum())


def multi_metrics(jobs: Sequence, nodes: Sequence[int], total_nodes: int, pools: PoolModel,
                  start: Sequence[float], end: Sequence[float]) -> MultiMetrics:
    submit = np.array([j.submit for j in jobs], dtype=float)
    run = np.array([j.run for j in jobs], dtype=float)
    s, e = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    lo, hi = float(submit.min()), float(submit.max())
    span = hi - lo
    if span <= 0:  # all at once: measure up to the last end instead
        hi = float(e.max())
        span = hi - lo
    node_util = _held_within(s, e, np.asarray(nodes, dtype=float), lo, hi) / (total_nodes * span)
    utils = {}
    take = np.asarray(pools.take, dtype=float).reshape(len(jobs), len(pools.names))
    for k, name in enumerate(pools.names):
        utils[name] = _held_within(s, e, take[:, k], lo, hi) / (pools.capacity[k] * span)
    wait = s - submit
    bsld = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_BOUND_S))
    return MultiMetrics(
        jobs=len(jobs), node_util=node_util, bb_util=utils.get("burst_buffer"),
        power_util=utils.get("power"), mean_wait_s=float(wait.mean()),
        mean_slowdown=float(bsld.mean()),
    )
