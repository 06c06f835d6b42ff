"""The compiled core of the batched environments: per-slot event state in numpy arrays,
stepped by functions that numba compiles (the ``rl`` extra installs it).

``batchenv.py`` (RLScheduler) and ``batchinspect.py`` (SchedInspector) keep every sequence
of a batch in one ``Sim``: ``(slots, jobs)`` arrays of job columns (indices in queue
order, see those modules), the queue of each slot as a prefix of ``q``, its running jobs
as a prefix of ``rs_end``/``rs_job`` sorted by estimated end, and ``(slots,)`` arrays of
scalars. The functions here are the engine's own rules on that state, one slot at a time
(a start, the end events, EASY's shadow time and backfilling pass, the metrics), written
as loops over plain numbers so that numba turns them into machine code: a decision costs
a few hundred nanoseconds instead of the Python engine's tens of microseconds.

Without numba the same functions run as plain Python (correct, and much slower);
``COMPILED`` says which. Floating-point operations are the reference's, in its order
(numba keeps IEEE semantics), so schedules, metrics and observations are bit-equal.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..model import InvalidInput

try:
    from numba import njit

    # Without numba's reference counting (``_nrt=False``): the state is ~30 arrays and
    # counting references to each on every call of a helper cost ~85 ns a call against
    # ~1.5 ns (measured), most of a step. The kernels allocate nothing, so none is needed.
    kernel = njit(cache=True, _nrt=False)
    COMPILED = True
except ImportError:  # pragma: no cover - the rl extra brings numba
    COMPILED = False

    def kernel(f):
        return f

INF = np.inf
BSLD_BOUND_S = 10.0  # sim/metrics.py

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


@kernel
def reset_slot(sim, s, nodes):
    """Back to the start of the loaded sequence (time 0, nothing queued or running)."""
    sim.free[s] = nodes
    sim.head[s] = -1
    sim.qlen[s] = 0
    sim.lo[s] = 0
    sim.hi[s] = 0
    sim.nxt[s] = 0
    sim.nrun[s] = 0
    sim.steps[s] = 0
    sim.decisions[s] = 0
    sim.rejections[s] = 0
    sim.now[s] = 0.0
    sim.wake[s] = INF
    sim.asking[s] = False
    for j in range(sim.n[s]):
        sim.rejected[s, j] = 0
        sim.waiting[s, j] = False


@kernel
def start_job(sim, s, job, t):
    """``QueueState.start``: the nodes taken, the job among the running ones by estimated
    end (after equal ends: ties never change a shadow time or an earliest start)."""
    sim.free[s] -= sim.need[s, job]
    e = t + sim.est[s, job]
    k = sim.nrun[s]
    while k > 0 and sim.rs_end[s, k - 1] > e:
        sim.rs_end[s, k] = sim.rs_end[s, k - 1]
        sim.rs_job[s, k] = sim.rs_job[s, k - 1]
        k -= 1
    sim.rs_end[s, k] = e
    sim.rs_job[s, k] = job
    sim.nrun[s] += 1
    sim.start[s, job] = t
    sim.end[s, job] = t + sim.run[s, job]


@kernel
def next_end(sim, s):
    """The earliest actual end among the running jobs (inf if none)."""
    m = INF
    for k in range(sim.nrun[s]):
        e = sim.end[s, sim.rs_job[s, k]]
        if e < m:
            m = e
    return m


@kernel
def release_until(sim, s, t):
    """Every running job that ends by ``t`` gives its nodes back (order kept)."""
    w = 0
    for k in range(sim.nrun[s]):
        job = sim.rs_job[s, k]
        if sim.end[s, job] <= t:
            sim.free[s] += sim.need[s, job]
        else:
            sim.rs_end[s, w] = sim.rs_end[s, k]
            sim.rs_job[s, w] = job
            w += 1
    sim.nrun[s] = w


@kernel
def enqueue(sim, s, job):
    sim.waiting[s, job] = True
    sim.qlen[s] += 1
    if job < sim.lo[s]:
        sim.lo[s] = job
    if job >= sim.hi[s]:
        sim.hi[s] = job + 1


@kernel
def first_waiting(sim, s):
    """The queue's first job (the queue is not empty)."""
    j = sim.lo[s]
    while not sim.waiting[s, j]:
        j += 1
    sim.lo[s] = j
    return j


@kernel
def pop_queue(sim, s, pos):
    """Remove and return the job at queue position ``pos``."""
    j = first_waiting(sim, s)
    while True:
        if sim.waiting[s, j]:
            if pos == 0:
                break
            pos -= 1
        j += 1
    sim.waiting[s, j] = False
    sim.qlen[s] -= 1
    return j


@kernel
def easy_pass(sim, s, t):
    """The head does not fit: EASY backfilling in queue order (``backfill.shadow_time``
    and ``easy_backfill``: a job fitting now starts if it ends by its estimate before the
    head's shadow time or uses only the extra nodes)."""
    free = sim.free[s]
    if sim.qlen[s] == 0 or free == 0:
        return
    need = sim.need
    waiting = sim.waiting
    shadow = INF
    extra = -1  # the shadow time is computed once a job fits now (none: nothing changes)
    for job in range(first_waiting(sim, s), sim.hi[s]):
        if not waiting[s, job]:
            continue
        nodes = need[s, job]
        if nodes > free:
            continue
        if extra < 0:
            shadow, extra = shadow_time(sim, s, free, need[s, sim.head[s]])
        if t + sim.est[s, job] <= shadow:
            pass  # gone by the shadow time
        elif nodes <= extra:
            extra -= nodes  # past it, on nodes the head leaves
        else:
            continue
        waiting[s, job] = False
        sim.qlen[s] -= 1
        start_job(sim, s, job, t)
        free -= nodes
        if free == 0:
            break


@kernel
def shadow_time(sim, s, free, head_need):
    """``backfill.shadow_time``: (the earliest estimated end at which the head fits, the
    nodes free then beyond its need), counting every job with that same end."""
    avail = free
    nrun = sim.nrun[s]
    k = 0
    while k < nrun:
        avail += sim.need[s, sim.rs_job[s, k]]
        if avail >= head_need:
            e = sim.rs_end[s, k]
            k += 1
            while k < nrun and sim.rs_end[s, k] == e:  # equal ends free nodes together
                avail += sim.need[s, sim.rs_job[s, k]]
                k += 1
            return e, avail - head_need
        k += 1
    raise ValueError("a head that can never fit")  # ruled out by validating jobs


@kernel
def slot_metrics(sim, s, max_procs, out):
    """``sim.metrics.compute_metrics`` of the slot's schedule, in the sequence's own job
    order and the same floating-point order: avg bsld, avg wait, avg turnaround, max
    bsld, worst user's mean bsld, utilisation, makespan into ``out``."""
    n = sim.n[s]
    users = 0
    u_sum = sim.u_sum[s]
    u_count = sim.u_count[s]
    for i in range(n):
        if sim.in_user[s, i] + 1 > users:
            users = sim.in_user[s, i] + 1
    for u in range(users):
        u_sum[u] = 0.0
        u_count[u] = 0
    total_wait = 0.0
    total_bsld = 0.0
    max_bsld = 0.0
    work = 0.0
    total_run = 0.0
    first = INF
    last = -INF
    for i in range(n):
        k = sim.rank[s, i]
        submit = sim.in_sub[s, i]
        run = sim.in_run[s, i]
        wait = sim.start[s, k] - submit
        bsld = (wait + run) / (run if run > BSLD_BOUND_S else BSLD_BOUND_S)
        if bsld < 1.0:
            bsld = 1.0
        total_wait += wait
        total_bsld += bsld
        if bsld > max_bsld:
            max_bsld = bsld
        work += run * sim.in_procs[s, i]
        u = sim.in_user[s, i]
        u_sum[u] += bsld
        u_count[u] += 1
        total_run += run
        if submit < first:
            first = submit
        if sim.end[s, k] > last:
            last = sim.end[s, k]
    worst = -INF
    for u in range(users):
        if u_count[u] > 0 and u_sum[u] / u_count[u] > worst:
            worst = u_sum[u] / u_count[u]
    makespan = last - first
    out[0] = total_bsld / n
    out[1] = total_wait / n
    out[2] = (total_wait + total_run) / n
    out[3] = max_bsld
    out[4] = worst
    out[5] = work / (makespan * max_procs)
    out[6] = makespan


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
