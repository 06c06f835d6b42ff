"""The discrete-event loop: job records in, per-job start and end times out.

Non-preemptive; virtual time jumps from event to event. At each event time ``t``:

1. jobs that finish at ``t`` free their nodes;
2. jobs that arrive at ``t`` are queued (all of them);
3. one decision (``decision.decide``) starts what the policy and backfilling allow.

A selector (a learned scorer or inspector) is asked inside the decision; the engine is a
generator (``replay_steps``) that yields each question and takes the answer back, so the
same loop serves plain replays (``simulate``) and learning environments, which step it.
An inspector's rejection schedules one more decision point (a retry ``SKIP_TIME`` later)
besides arrivals and ends.

Jobs run for their actual run time; estimates only matter for ordering and reservations.
The loop keeps per-job state in plain lists and a heap of end events, so replaying a
200,000-job trace stays a matter of seconds in plain Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Callable, Generator, Protocol, Sequence

from ..model import InvalidInput
from ..policies.queue import QueuePolicy
from .cluster import Cluster
from .gcpause import gc_paused
from ..policies.selection import ChoiceView, Selector
from .decision import PoolQueueState, QueueState, decide, decide_pools, decide_selected
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
    rejections: int = 0  # an inspector's rejections of its base policy's picks


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
    policy: QueuePolicy | Selector,
    backfill: str = "none",
    *,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 4096,
    pools: PoolModel | None = None,
) -> Schedule:
    """Replay ``jobs`` on an empty ``cluster``; time starts at the earliest submit time.

    ``policy`` is a key-function ``QueuePolicy`` (the fast path) or a ``Selector`` (a
    scorer or an inspector, see ``coscheduler.policies.selection``), which the engine asks
    whenever a new head must be chosen. ``progress(finished)`` (optional) is called every
    ``progress_every`` finished jobs and once at the end: the engine itself does no I/O.

    ``pools`` (from ``resources.pool_model``) adds global pools beside the nodes (burst
    buffer, power): a job then starts only when all of its requests fit, and EASY and
    conservative backfilling count every pool.
    """
    with gc_paused():   # millions of small objects, freed by reference counting (gcpause.py)
        return _run(replay_steps(jobs, cluster, policy, backfill, progress=progress,
                                 progress_every=progress_every, pools=pools), policy)


def _run(steps: Generator, policy: QueuePolicy | Selector) -> Schedule:
    if not isinstance(policy, QueuePolicy):
        ask = policy.choose
        try:
            view = next(steps)
            while True:
                view = steps.send(ask(view))
        except StopIteration as stop:
            return stop.value
    try:
        next(steps)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("a key-function replay asked for a choice")  # pragma: no cover


def replay_steps(
    jobs: Sequence[JobRecord],
    cluster: Cluster,
    policy: QueuePolicy | Selector,
    backfill: str = "none",
    *,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 4096,
    pools: PoolModel | None = None,
) -> Generator[ChoiceView, object, Schedule]:
    """The engine as a generator: it yields a ``ChoiceView`` each time a selector must
    choose (never for a key-function policy) and takes the answer through ``send``;
    its return value (``StopIteration.value``) is the ``Schedule``.

    This is how a learning environment steps the very engine that ``simulate`` runs.
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
    selector = None if isinstance(policy, QueuePolicy) else policy
    order = policy if selector is None else selector.queue_policy
    with_pools = pools is not None and not pools.empty
    if pools is not None and len(pools.take) != n:
        raise InvalidInput(f"{len(pools.take)} pool requests for {n} jobs")
    state = (PoolQueueState if with_pools else QueueState)(
        key=order.key,
        uses_now=order.uses_now,
        total_nodes=cluster.nodes,
        submit=submit,
        procs=procs,
        estimate=[j.estimate for j in jobs],
        need=[-(-p // ppn) for p in procs],
        pool_names=pools.names if with_pools else (),
        pool_cap=pools.capacity if with_pools else (),
        pool_take=pools.take if with_pools else None,
    )
    plain = decide_pools if with_pools else decide
    if selector is not None:
        state.attach(selector, cluster)
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

    while next_arrival < n or ends or state.wake < inf:
        t = submit[arrivals[next_arrival]] if next_arrival < n else inf
        if state.wake < t and (not ends or state.wake < ends[0][0]):
            t = state.wake  # an inspector's retry after a rejection, before any event
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
            if selector is None:
                chosen = plain(state, t, backfill)
            else:
                chosen = yield from decide_selected(state, t, backfill)
            for job in chosen:
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
                    decisions=decisions, finished=finished, rejections=state.rejections_total)
