"""The discrete-event loop: job records in, per-job start and end times out.

Non-preemptive; virtual time jumps from event to event. At each event time ``t``:

1. jobs that finish at ``t`` free their nodes;
2. jobs that arrive at ``t`` are queued (all of them);
3. one decision (``decision.decide``) starts what the policy and backfilling allow.

Jobs run for their actual run time; estimates only matter for ordering and reservations.
The loop keeps per-job state in plain lists and a heap of end events, so replaying a
200,000-job trace stays a matter of seconds in plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Callable, Protocol, Sequence

from ..model import InvalidInput
from ..policies.queue import QueuePolicy
from .cluster import Cluster
from .decision import PoolQueueState, QueueState, decide, decide_general
from .resources import PoolModel

BACKFILL_MODES = ("none", "easy", "conservative")


class JobRecord(Protocol):
    """What the engine reads from a job (``swf.TraceJob`` has it)."""

    submit: float
    run: float
    procs: int
    estimate: float


@dataclass
class Schedule:
    """The outcome of a replay, indexed like the input jobs."""

    start: list[float]
    end: list[float]
    # Under EASY: the shadow time each job got when it first became the blocked head.
    reservation: dict[int, float] = field(default_factory=dict)
    decisions: int = 0  # decision points visited
    finished: int = 0  # end events processed: equals the number of jobs


def _validate(jobs: Sequence[JobRecord], cluster: Cluster) -> None:
    for i, job in enumerate(jobs):
        if not (job.run > 0 and job.estimate > 0 and job.submit >= 0):
            raise InvalidInput(
                f"job at position {i}: run time and estimate must be > 0 and submit time "
                f">= 0, got run={job.run!r} estimate={job.estimate!r} submit={job.submit!r}"
            )
        if not 1 <= job.procs <= cluster.procs:
            raise InvalidInput(
                f"job at position {i}: needs {job.procs!r} processors, the cluster has "
                f"{cluster.procs} ({cluster.nodes} nodes x {cluster.procs_per_node})"
            )


def simulate(
    jobs: Sequence[JobRecord],
    cluster: Cluster,
    policy: QueuePolicy,
    backfill: str = "none",
    *,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 4096,
    pools: PoolModel | None = None,
    selector: Callable[[QueueState, float], int] | None = None,
) -> Schedule:
    """Replay ``jobs`` on an empty ``cluster``; time starts at the earliest submit time.

    ``progress(finished)`` (optional) is called every ``progress_every`` finished jobs and
    once at the end: the engine itself does no I/O.

    ``pools`` (from ``resources.pool_model``) adds the global pools beside the nodes (burst
    buffer, power): every job then starts only when all of its requests fit. ``selector``
    picks the next job to try from the queue (see ``decision.py``); ``None`` takes the top.
    """
    if backfill not in BACKFILL_MODES:
        raise InvalidInput(
            f"unknown backfill mode {backfill!r}; valid modes: {', '.join(BACKFILL_MODES)}"
        )
    _validate(jobs, cluster)
    n = len(jobs)
    submit = [j.submit for j in jobs]
    run = [j.run for j in jobs]
    procs = [j.procs for j in jobs]
    ppn = cluster.procs_per_node
    with_pools = pools is not None and not pools.empty
    state = (PoolQueueState if with_pools else QueueState)(
        key=policy.key,
        uses_now=policy.uses_now,
        total_nodes=cluster.nodes,
        submit=submit,
        procs=procs,
        estimate=[j.estimate for j in jobs],
        need=[-(-p // ppn) for p in procs],
        pool_cap=pools.capacity if with_pools else (),
        pool_take=pools.take if with_pools else None,
        select=selector,
    )
    if pools is not None and len(pools.take) != n:
        raise InvalidInput(f"{len(pools.take)} pool requests for {n} jobs")
    start = [math.nan] * n
    end = [math.nan] * n
    arrivals = sorted(range(n), key=submit.__getitem__)  # stable: ties keep trace order
    ends: list[tuple[float, int]] = []  # heap of (end time, job)
    next_arrival = 0
    finished = 0
    report_at = progress_every
    decisions = 0
    inf = float("inf")
    release, enqueue = state.release, state.enqueue
    step = decide_general if (with_pools or selector is not None) else decide

    while next_arrival < n or ends:
        t = submit[arrivals[next_arrival]] if next_arrival < n else inf
        if ends and ends[0][0] <= t:
            t = ends[0][0]
            while ends and ends[0][0] <= t:
                release(heappop(ends)[1])
                finished += 1
        while next_arrival < n and submit[arrivals[next_arrival]] <= t:
            enqueue(arrivals[next_arrival], t)
            next_arrival += 1
        if state.head is not None or state.entries:
            decisions += 1
            for job in step(state, t, backfill):
                start[job] = t
                finish = end[job] = t + run[job]
                heappush(ends, (finish, job))
        if progress is not None and finished >= report_at:
            progress(finished)
            report_at = finished + progress_every
    if progress is not None:
        progress(finished)
    if finished != n or state.waiting():
        # Cannot happen with validated input; a broken invariant must not pass silently.
        raise RuntimeError(f"simulation ended with {n - finished} of {n} jobs not finished")
    return Schedule(start=start, end=end, reservation=state.reservation,
                    decisions=decisions, finished=finished)
