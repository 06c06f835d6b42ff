"""A whole trace replayed with FCFS by the batched environments' compiled kernels.

``cosched simulate swf`` and ``cosched bench simulator`` replay traces of hundreds of
thousands of jobs; the Python engine (``sim.engine``) takes about a second for HPC2N's
202,871 jobs with EASY, most of it per-event Python. The compiled kernels of the training
environments (``fastsim.py``, numba) implement the same rules; answering every question
with the queue's first job makes them FCFS, because a slot's queue is kept in the order
its jobs are loaded, here submit order (ties by trace order, as the engine's key).

Same start and end times, bit for bit, and the same metrics as ``sim.replay.replay``
(``tests/test_wholetrace.py`` replays the bundled traces through both). What it does not
give: the per-job reservation times of EASY (``Schedule.reservation`` stays empty) and
progress callbacks. Other orders and conservative backfilling take the Python engine;
so does everything when numba is not installed (``available()``).

It lives here rather than in ``sim`` because the kernels do: numba's cache notices a change
of the file defining a kernel only, so they stay in one file (see fastsim.py).
"""

from __future__ import annotations

import time

import numpy as np

from ..model import InvalidInput
from ..policies.queue import QueuePolicy
from ..sim.cluster import Cluster
from ..sim.engine import Schedule
from ..sim.replay import ReplayResult
from ..sim.swf import SwfTrace, TraceJob
from . import batchstate, fastsim

BACKFILLS = ("none", "easy")


def available() -> bool:
    """The kernels are compiled (numba installed): only then is this path faster."""
    return fastsim.COMPILED


def handles(policy, backfill: str) -> bool:
    """FCFS (the queue policy, not a learned selector) without or with EASY backfilling."""
    return isinstance(policy, QueuePolicy) and policy.name == "FCFS" and backfill in BACKFILLS


def replay(trace: SwfTrace, jobs: list[TraceJob] | None = None, backfill: str = "easy"
           ) -> ReplayResult:
    """``sim.replay.replay(trace, "FCFS", backfill, jobs=jobs)`` on the compiled kernels."""
    if backfill not in BACKFILLS:
        raise InvalidInput(f"the compiled replay does backfill none or easy, not {backfill!r}")
    chosen = trace.jobs if jobs is None else jobs
    if not chosen:
        raise InvalidInput("the trace has no usable jobs")
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    t0 = time.perf_counter()
    cols = batchstate.job_columns(chosen, cluster.procs)
    if (cols[0] < 0).any():
        raise InvalidInput("a job's submit time is negative")
    sim = batchstate.new_sim(1, len(chosen), cluster.nodes)
    order = np.argsort(cols[0], kind="stable")   # the queue: submit order, ties by trace order
    batchstate.put_sequence(sim, 0, cols, order, cluster.procs_per_node, cluster.nodes)
    fastsim.first_pick_run(sim, 0, backfill == "easy")
    start, end = batchstate.schedule(sim, 0)
    metrics = batchstate.metrics(sim, 0, trace.max_procs)
    wall = time.perf_counter() - t0
    schedule = Schedule(start=start, end=end, decisions=int(sim.decisions[0]),
                        finished=len(chosen))
    return ReplayResult(trace.path, "FCFS", backfill, metrics, wall, schedule)


__all__ = ["BACKFILLS", "available", "handles", "replay"]
