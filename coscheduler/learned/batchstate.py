"""The state of a batch of sequences for the compiled environments (``fastsim.py``):
allocation, loading a sequence into a slot, and reading its outcome (plain Python)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..model import InvalidInput
from .fastsim import INF, reset_slot, slot_metrics

# per job (slots, jobs), in queue order: submit, estimate, run, nodes, start, end, and
# per job in the sequence's own order: submit, run, processors, user code, queue index;
# the waiting flags (the queue: waiting jobs by index), running jobs (rs_*), the
# inspector's arrival order and rejection counts; per slot: jobs, free nodes, head (-1:
# none), queue length, the queue's bounds (no waiting job below lo or from hi on), next
# arrival, running count, steps, decision points, rejections, time of the question,
# retry time, asking
Sim = namedtuple("Sim", (
    "sub", "est", "run", "need", "start", "end",
    "in_sub", "in_run", "in_procs", "in_user", "rank",
    "waiting", "rs_end", "rs_job", "arrivals", "rejected",
    "n", "free", "head", "qlen", "lo", "hi", "nxt", "nrun", "steps", "decisions",
    "rejections", "now", "wake", "asking", "u_sum", "u_count"))


def new_sim(slots: int, jobs: int, nodes: int) -> Sim:
    """An empty state for ``slots`` sequences of at most ``jobs`` jobs on ``nodes`` nodes
    (at most one running job per node)."""
    shape = (slots, jobs)
    cap = max(1, min(jobs, nodes))
    i64, f64 = np.int64, np.float64
    return Sim(
        sub=np.zeros(shape, f64), est=np.ones(shape, f64), run=np.ones(shape, f64),
        need=np.zeros(shape, i64), start=np.zeros(shape, f64), end=np.zeros(shape, f64),
        in_sub=np.zeros(shape, f64), in_run=np.ones(shape, f64),
        in_procs=np.zeros(shape, i64), in_user=np.zeros(shape, i64),
        rank=np.zeros(shape, i64),
        waiting=np.zeros(shape, np.bool_), rs_end=np.zeros((slots, cap), f64),
        rs_job=np.zeros((slots, cap), i64), arrivals=np.zeros(shape, i64),
        rejected=np.zeros(shape, i64),
        n=np.zeros(slots, i64), free=np.zeros(slots, i64), head=np.full(slots, -1, i64),
        qlen=np.zeros(slots, i64), lo=np.zeros(slots, i64), hi=np.zeros(slots, i64),
        nxt=np.zeros(slots, i64), nrun=np.zeros(slots, i64),
        steps=np.zeros(slots, i64), decisions=np.zeros(slots, i64),
        rejections=np.zeros(slots, i64),
        now=np.zeros(slots, f64), wake=np.full(slots, INF), asking=np.zeros(slots, np.bool_),
        u_sum=np.zeros(shape, f64), u_count=np.zeros(shape, i64))  # metrics' scratch


def job_columns(jobs, procs_limit: int) -> np.ndarray:
    """(5, n) float64: submit, run, processors, estimate, user of each job, in order;
    a clear error for a job the engine would refuse."""
    cols = np.array([(j.submit, j.run, j.procs, j.estimate, j.user) for j in jobs],
                    dtype=np.float64).reshape(len(jobs), 5).T
    _, run, procs, est, _ = cols
    bad = ~((run > 0) & (est > 0) & (procs >= 1) & (procs <= procs_limit))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidInput(f"job at position {i}: run time and estimate must be > 0 and "
                           f"1 <= processors <= {procs_limit}")
    return cols


def put_sequence(sim: Sim, slot: int, cols: np.ndarray, order: np.ndarray, ppn: int,
                 nodes: int) -> None:
    """Load a sequence (``job_columns``) into ``slot``, renumbered by ``order`` (queue
    index -> position in the sequence), and reset the slot."""
    sub, run, procs_f, est, user_f = cols
    n = len(sub)
    procs = procs_f.astype(np.int64)
    _, user = np.unique(user_f, return_inverse=True)
    sim.in_sub[slot, :n] = sub
    sim.in_run[slot, :n] = run
    sim.in_procs[slot, :n] = procs
    sim.in_user[slot, :n] = user
    sim.rank[slot, order] = np.arange(n)
    sim.sub[slot, :n] = sub[order]
    sim.run[slot, :n] = run[order]
    sim.est[slot, :n] = est[order]
    sim.need[slot, :n] = -(-procs[order] // ppn)
    sim.n[slot] = n
    reset_slot(sim, slot, nodes)


def metrics(sim: Sim, slot: int, max_procs: int):
    """The slot's ``Metrics`` (equal to ``compute_metrics`` of its schedule)."""
    from ..sim.metrics import Metrics

    out = np.empty(7)
    slot_metrics(sim, slot, max_procs, out)
    return Metrics(int(sim.n[slot]), *(float(v) for v in out))


def schedule(sim: Sim, slot: int) -> tuple[list[float], list[float]]:
    """Start and end times in the sequence's own job order."""
    k = sim.rank[slot, :sim.n[slot]]
    return sim.start[slot, k].tolist(), sim.end[slot, k].tolist()
