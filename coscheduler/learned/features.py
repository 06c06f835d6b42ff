"""Observations of the learned schedulers, from a ``ChoiceView`` (numpy only).

RLScheduler sees one row per window job (``RL_FEATURES``), SchedInspector one row for its
base policy's pick (``INSPECTOR_FEATURES``). Every value lies in [0, 1]; the reference
implementations (DIR-LAB deep-batch-scheduler ``HPCSimPickJobs.py``, SchedInspector
``HPCSimSkip.py``) cap values at 1 - 1e-5 and code "can start now" as 1 - 1e-5 / 1e-5;
we do the same. Where they divide by a trace's maximum (processors, run time) we divide
by the machine's size (known on a live system too) or by a constant kept in the model
file's header (``Normalisation``), so a model scores the same job the same way on a trace,
in the live controller and in the Slurm hook.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..policies.selection import ChoiceView

CAP = 1.0 - 1e-5
LOW = 1e-5

RL_FEATURES = ("wait", "estimate", "nodes", "runnable", "free", "earliest_start")
INSPECTOR_FEATURES = ("wait", "estimate", "nodes", "rejections", "queue_delay", "runnable",
                      "free", "backfill", "queue")


@dataclass(frozen=True)
class Normalisation:
    """Scales of the features, stored in each model file.

    ``wait_s``: waits and start delays are divided by it (reference: 12 h);
    ``estimate_s``: estimates are divided by it (reference: the training trace's longest
    run time); ``retry_after_s``, ``window``: the inspector's summed queue delay is
    ``sum(retry_after / max(estimate, 10))`` over the window, divided by
    ``retry_after / 10 * window`` (the reference's normalisation, with its 128-job
    sequence length replaced by the window).
    """

    wait_s: float = 12 * 3600.0
    estimate_s: float = 12 * 3600.0
    retry_after_s: float = 600.0
    window: int = 128
    max_rejections: int = 10

    def as_dict(self) -> dict:
        return asdict(self)


def rl_observation(view: ChoiceView, norm: Normalisation, window: int) -> tuple[np.ndarray, int]:
    """(window x len(RL_FEATURES)) float64 rows, zero-padded, and the number of real rows."""
    n = min(view.size, window)
    obs = np.zeros((window, len(RL_FEATURES)), dtype=np.float64)
    if n == 0:
        return obs, 0
    total = float(view.total_nodes)
    need = view.need[:n]
    runnable = need <= view.free_nodes
    obs[:n, 0] = np.minimum((view.now - view.submit[:n]) / norm.wait_s, CAP)
    obs[:n, 1] = np.minimum(view.estimate[:n] / norm.estimate_s, CAP)
    obs[:n, 2] = np.minimum(need / total, CAP)
    obs[:n, 3] = np.where(runnable, CAP, LOW)
    obs[:n, 4] = min(view.free_nodes / total, CAP)
    if view.size > n:  # only the shown rows
        view = _head(view, n)
    obs[:n, 5] = np.minimum(view.earliest_start() / norm.wait_s, CAP)
    return obs, n


def _head(view: ChoiceView, n: int) -> ChoiceView:
    from dataclasses import replace

    return replace(view, jobs=view.jobs[:n], submit=view.submit[:n], procs=view.procs[:n],
                   estimate=view.estimate[:n], need=view.need[:n])


def inspector_observation(view: ChoiceView, norm: Normalisation) -> np.ndarray:
    """One row of ``INSPECTOR_FEATURES`` for the pick (window position 0)."""
    total = float(view.total_nodes)
    need = view.need
    runnable = need <= view.free_nodes
    pick_runs = bool(runnable[0])
    delay = float(np.sum(norm.retry_after_s / np.maximum(view.estimate, 10.0)))
    delay_scale = norm.retry_after_s / 10.0 * norm.window
    # what the other window jobs could use of the free nodes if the pick waits
    others = float(np.sum(need[1:][runnable[1:]]))
    backfill = min(others, float(view.free_nodes)) / total
    return np.array([
        min((view.now - view.submit[0]) / norm.wait_s, CAP),
        min(view.estimate[0] / norm.estimate_s, CAP),
        min(need[0] / total, CAP),
        min(view.rejections / max(norm.max_rejections, 1), 1.0),
        min(delay / delay_scale, CAP),
        CAP if pick_runs else LOW,
        min(view.free_nodes / total, CAP),
        min(backfill, CAP),
        min(view.queue_length / norm.window, 1.0),
    ], dtype=np.float64)
