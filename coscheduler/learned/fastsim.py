"""The compiled core of the batched environments: the engine's rules on the state of
many sequences at once (``batchstate.Sim``: numpy arrays indexed ``[slot, job]`` and
``[slot]``), as functions that numba compiles (the ``rl`` extra installs it).

``batchenv.py`` (RLScheduler) and ``batchinspect.py`` (SchedInspector) hold the state and
call these functions: a start, the end events, EASY's shadow time and backfilling pass,
each environment's event loop and decision rule, its observation, the metrics; written as
loops over plain numbers, one slot at a time, so that numba turns them into machine code
(a decision costs well under a microsecond instead of the Python engine's tens).

All of them live in this one file on purpose: numba's on-disk cache notices a change of
the file that defines a function, not of another file whose functions it calls.

Without numba the same functions run as plain Python (correct, and many times slower);
``COMPILED`` says which. Floating-point operations are the reference's, in its order
(numba keeps IEEE semantics), so schedules, metrics and observations are bit-equal.
"""

from __future__ import annotations

import numpy as np

from .features import CAP, LOW

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
    for j in range(sim.waiting.shape[1]):  # the whole row: a longer sequence may have
        sim.rejected[s, j] = 0               # left a slot reloaded before its end
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


# -- RLScheduler (batchenv.py): a scorer picks from the FCFS window -----------------


@kernel
def rl_run(sim, s, easy):
    """The engine's loop from the slot's last decision to its next question (True) or to
    the end of the sequence (False)."""
    n = sim.n[s]
    while sim.nxt[s] < n or sim.nrun[s] > 0:
        t = sim.sub[s, sim.nxt[s]] if sim.nxt[s] < n else INF
        if sim.nrun[s] > 0:
            e = next_end(sim, s)
            if e <= t:
                t = e
                release_until(sim, s, t)
        while sim.nxt[s] < n and sim.sub[s, sim.nxt[s]] <= t:
            enqueue(sim, s, sim.nxt[s])
            sim.nxt[s] += 1
        head = sim.head[s]
        if head < 0 and sim.qlen[s] == 0:
            continue
        sim.decisions[s] += 1
        if sim.free[s] == 0 and head >= 0:
            continue
        if head >= 0:
            if sim.need[s, head] > sim.free[s]:
                if easy:
                    easy_pass(sim, s, t)
                continue
            start_job(sim, s, head, t)
            sim.head[s] = -1
            if sim.qlen[s] == 0:
                continue
        sim.now[s] = t
        sim.asking[s] = True
        return True
    sim.asking[s] = False
    return False


@kernel
def rl_step(sim, s, pos, easy):
    """Start the picked job or make it the head; True while the slot asks again."""
    sim.steps[s] += 1
    job = pop_queue(sim, s, pos)
    t = sim.now[s]
    if sim.need[s, job] > sim.free[s]:
        sim.head[s] = job
        if easy:
            easy_pass(sim, s, t)
    else:
        start_job(sim, s, job, t)
        if sim.qlen[s] > 0:
            return True
    return rl_run(sim, s, easy)


@kernel
def first_pick_run(sim, s, easy):
    """The slot's whole sequence, every question answered with the queue's first job:
    FCFS when the slot's jobs are in submit order (``wholetrace.py``)."""
    asking = rl_run(sim, s, easy)
    while asking:
        asking = rl_step(sim, s, 0, easy)


@kernel
def rl_step_many(sim, slots, positions, easy, out):
    for i in range(len(slots)):
        out[i] = rl_step(sim, slots[i], positions[i], easy)


@kernel
def rl_observe(sim, active, starts, window, total, wait_s, estimate_s, padding, rows, allowed):
    """``features.rl_observation`` and ``selection.action_mask`` for every asking slot."""
    for i in range(len(active)):
        s = active[i]
        r0 = starts[i]
        count = min(sim.qlen[s], window)
        free = sim.free[s]
        now = sim.now[s]
        share = min(free / total, CAP)
        runnable = False
        job = first_waiting(sim, s) if count else 0
        for k in range(count):
            while not sim.waiting[s, job]:
                job += 1
            r = r0 + k
            need = sim.need[s, job]
            rows[r, 0] = min((now - sim.sub[s, job]) / wait_s, CAP)
            rows[r, 1] = min(sim.est[s, job] / estimate_s, CAP)
            rows[r, 2] = min(need / total, CAP)
            rows[r, 4] = share
            if need <= free:
                rows[r, 3] = CAP
                rows[r, 5] = 0.0
                runnable = True
                allowed[r] = True
            else:
                rows[r, 3] = LOW
                # ChoiceView.earliest_start: the first running job's estimated end
                # (ascending) after which enough nodes are free; a past end counts as now
                avail = free
                wait = INF
                for j in range(sim.nrun[s]):
                    avail += sim.need[s, sim.rs_job[s, j]]
                    if avail >= need:
                        d = sim.rs_end[s, j] - now
                        wait = d if d > 0.0 else 0.0
                        break
                rows[r, 5] = min(wait / wait_s, CAP)
                allowed[r] = padding
            job += 1
        if not runnable:  # nothing can start: every job may be picked
            for k in range(count):
                allowed[r0 + k] = True


# -- SchedInspector (batchinspect.py): accept or reject the base policy's pick -------


@kernel
def insp_decide(sim, s, t, easy, max_rejections):
    """``decide_selected`` from its top; True when it asks about the queue's first job."""
    need = sim.need
    while True:
        if sim.head[s] < 0:
            if sim.qlen[s] == 0:
                return False
            if sim.rejected[s, first_waiting(sim, s)] < max_rejections:
                sim.now[s] = t
                return True
            sim.head[s] = pop_queue(sim, s, 0)
        head = sim.head[s]
        if need[s, head] > sim.free[s]:
            if easy:
                easy_pass(sim, s, t)
            return False
        start_job(sim, s, head, t)
        sim.head[s] = -1


@kernel
def insp_run(sim, s, easy, max_rejections):
    n = sim.n[s]
    while sim.nxt[s] < n or sim.nrun[s] > 0 or sim.wake[s] < INF:
        t = sim.sub[s, sim.arrivals[s, sim.nxt[s]]] if sim.nxt[s] < n else INF
        e = next_end(sim, s)
        if sim.wake[s] < t and sim.wake[s] < e:
            t = sim.wake[s]  # a retry after a rejection, before any other event
        if e <= t:
            t = e
            release_until(sim, s, t)
        while sim.nxt[s] < n and sim.sub[s, sim.arrivals[s, sim.nxt[s]]] <= t:
            enqueue(sim, s, sim.arrivals[s, sim.nxt[s]])
            sim.nxt[s] += 1
        if sim.head[s] < 0 and sim.qlen[s] == 0:
            continue
        sim.wake[s] = INF
        sim.decisions[s] += 1
        if sim.free[s] == 0 and sim.head[s] >= 0:
            continue
        if insp_decide(sim, s, t, easy, max_rejections):
            sim.asking[s] = True
            return True
    sim.asking[s] = False
    return False


@kernel
def insp_step(sim, s, accept, easy, max_rejections, retry_after):
    sim.steps[s] += 1
    t = sim.now[s]
    if not accept:
        sim.rejected[s, first_waiting(sim, s)] += 1
        sim.rejections[s] += 1
        sim.wake[s] = t + retry_after
        return insp_run(sim, s, easy, max_rejections)  # nothing more starts at this decision
    sim.head[s] = pop_queue(sim, s, 0)
    if insp_decide(sim, s, t, easy, max_rejections):
        return True
    return insp_run(sim, s, easy, max_rejections)


@kernel
def insp_step_many(sim, slots, accept, easy, max_rejections, retry_after, out):
    for i in range(len(slots)):
        out[i] = insp_step(sim, slots[i], accept[i], easy, max_rejections, retry_after)


@kernel
def insp_base_replay(sim, s, easy, max_rejections, nodes, max_procs, out):
    """The base policy alone (every pick accepted): its metrics into ``out``, then the
    slot back at its start, run to its first question; that answer is returned."""
    asking = insp_run(sim, s, easy, max_rejections)
    while asking:
        asking = insp_step(sim, s, True, easy, max_rejections, 0.0)
    slot_metrics(sim, s, max_procs, out)
    reset_slot(sim, s, nodes)
    return insp_run(sim, s, easy, max_rejections)


@kernel
def insp_observe(sim, active, window, total, norm, max_rejections, rows):
    """``features.inspector_observation`` of every asking slot's pick (queue position 0);
    ``norm``: wait_s, estimate_s, retry_after_s."""
    wait_s, estimate_s, retry = norm[0], norm[1], norm[2]
    delay_scale = retry / 10.0 * window
    for i in range(len(active)):
        s = active[i]
        free = sim.free[s]
        qlen = sim.qlen[s]
        count = min(qlen, window)
        pick = first_waiting(sim, s)
        delay = 0.0
        others = 0
        job = pick
        for k in range(count):
            while not sim.waiting[s, job]:
                job += 1
            est = sim.est[s, job]
            delay += retry / (est if est > 10.0 else 10.0)
            if k > 0 and sim.need[s, job] <= free:
                others += sim.need[s, job]  # what the others could use if the pick waits
            job += 1
        need = sim.need[s, pick]
        rows[i, 0] = min((sim.now[s] - sim.sub[s, pick]) / wait_s, CAP)
        rows[i, 1] = min(sim.est[s, pick] / estimate_s, CAP)
        rows[i, 2] = min(need / total, CAP)
        rows[i, 3] = min(sim.rejected[s, pick] / max(max_rejections, 1), 1.0)
        rows[i, 4] = min(delay / delay_scale, CAP)
        rows[i, 5] = CAP if need <= free else LOW
        rows[i, 6] = min(free / total, CAP)
        rows[i, 7] = min(min(float(others), float(free)) / total, CAP)
        rows[i, 8] = min(qlen / window, 1.0)
