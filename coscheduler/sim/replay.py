"""Replay a loaded trace (or a window of it) under one policy: the CLI's and bench's glue."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..model import InvalidInput
from ..policies.queue import QueuePolicy, get_policy
from ..policies.selection import Selector
from .cluster import Cluster
from .engine import Schedule, simulate
from .metrics import Metrics, compute_metrics
from .swf import SwfTrace, TraceJob


def window(jobs: list[TraceJob], start_index: int = 0, count: int | None = None) -> list[TraceJob]:
    """Jobs ``start_index .. start_index+count-1``, replayed from job ``start_index``'s submit.

    A job in the window submitted before that instant (possible when submit times are not
    in job-number order) is taken as submitted at the window's start: the replay does not
    know what happened before it.
    """
    total = len(jobs)
    if total == 0:
        raise InvalidInput("the trace has no usable jobs")
    if not 0 <= start_index < total:
        raise InvalidInput(f"start index {start_index} is outside the trace's jobs 0..{total - 1}")
    if count is None:
        count = total - start_index
    if count < 1:
        raise InvalidInput(f"the window must hold at least 1 job, got {count}")
    if start_index + count > total:
        raise InvalidInput(
            f"window {start_index}..{start_index + count - 1} runs past the trace's last job "
            f"({total - 1}); at most {total - start_index} jobs from index {start_index}"
        )
    chosen = jobs[start_index:start_index + count]
    t0 = chosen[0].submit
    return [j if j.submit >= t0 else j._replace(submit=t0) for j in chosen]


@dataclass
class ReplayResult:
    trace: str
    policy: str
    backfill: str
    metrics: Metrics
    wall_seconds: float
    schedule: Schedule
    rejections: int | None = None  # an inspector's rejections, else None

    def as_json(self) -> dict:
        """The documented ``--json`` object (issue 3, point 8)."""
        m = self.metrics
        return {
            "trace": self.trace,
            "policy": self.policy,
            "backfill": self.backfill,
            "jobs": m.jobs,
            "avg_bsld": m.avg_bsld,
            "avg_wait": m.avg_wait,
            "avg_turnaround": m.avg_turnaround,
            "max_bsld": m.max_bsld,
            "utilization": m.utilization,
            "makespan": m.makespan,
            "wall_seconds": self.wall_seconds,
            **({"rejections": self.rejections} if self.rejections is not None else {}),
        }


def replay(
    trace: SwfTrace,
    policy: str | QueuePolicy | Selector,
    backfill: str = "none",
    *,
    jobs: list[TraceJob] | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Simulate ``jobs`` (default: the whole trace) on the trace's machine.

    ``wall_seconds`` covers simulation and metrics, not reading the file.
    """
    chosen = trace.jobs if jobs is None else jobs
    queue_policy = get_policy(policy) if isinstance(policy, str) else policy
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    t0 = time.perf_counter()
    schedule = simulate(chosen, cluster, queue_policy, backfill, progress=progress)
    metrics = compute_metrics(chosen, schedule.start, schedule.end, trace.max_procs)
    wall = time.perf_counter() - t0
    result = ReplayResult(trace.path, queue_policy.name, backfill, metrics, wall, schedule)
    if not isinstance(queue_policy, QueuePolicy) and queue_policy.kind == "inspector":
        result.rejections = schedule.rejections
    return result
