"""Trajectory filtering (RLScheduler; issue 20): during the first ``filter_epochs`` epochs
training draws only sequences whose SJF mean bounded slowdown lies in the filter range,
and afterwards any sequence of the training part. Pure numpy and the simulator: no JAX."""

from __future__ import annotations

import numpy as np

from coscheduler.data import swf_trace
from coscheduler.learned import train as training
from coscheduler.learned.train import TrainConfig, epoch_starts, filtered_starts
from coscheduler.policies.queue import get_policy
from coscheduler.sim.cluster import Cluster
from coscheduler.sim.engine import simulate
from coscheduler.sim.metrics import compute_metrics
from coscheduler.sim.replay import window as trace_window
from coscheduler.sim.swf import read_swf


def test_filtered_starts_keeps_the_open_range_and_falls_back_to_all():
    starts = np.arange(6)
    scores = np.array([5.0, 10.0, 11.0, 149.0, 150.0, 900.0])
    assert filtered_starts(starts, scores, 10.0, 150.0).tolist() == [2, 3]
    assert filtered_starts(starts, scores, 1000.0, 2000.0).tolist() == list(range(6))


def test_filtering_epochs_draw_only_sequences_whose_sjf_figure_is_in_range(monkeypatch):
    monkeypatch.setattr(training, "POOL_SIZE", 80)
    trace = read_swf(swf_trace("lublin_256.swf"))
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    cfg = TrainConfig(kind="rlscheduler", trace="lublin_256.swf", out="unused.model",
                      sequence=64, filter_low=10.0, filter_high=150.0)
    starts, scores = training._pool(trace, cluster, cfg, np.random.default_rng([0, 7]))
    kept = filtered_starts(starts, scores, cfg.filter_low, cfg.filter_high)
    assert len(starts) == 80 and 0 < len(kept) < len(starts), sorted(scores.round(1))

    def sjf_bsld(start: int) -> float:   # recomputed here, not read from the pool
        jobs = trace_window(trace.jobs, start, cfg.sequence)
        sched = simulate(jobs, cluster, get_policy("SJF"), cfg.backfill)
        return compute_metrics(jobs, sched.start, sched.end, trace.max_procs).avg_bsld

    rng = np.random.default_rng([0, 0])
    drawn = epoch_starts(rng, kept, 10_000, 40)
    assert set(drawn) <= set(kept.tolist())
    assert all(10.0 < sjf_bsld(s) < 150.0 for s in set(drawn))
    # after the filtering epochs: the whole training part, filtered out or not
    later = epoch_starts(np.random.default_rng([0, 9]), None, 1_500, 400)
    assert min(later) >= 0 and max(later) < 1_500
    assert set(later) - set(kept.tolist())
    left_out = [int(s) for s, v in zip(starts, scores) if not 10.0 < v < 150.0]
    assert any(not 10.0 < sjf_bsld(s) < 150.0 for s in left_out[:5])
