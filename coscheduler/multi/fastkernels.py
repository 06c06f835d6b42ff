"""The compiled core of MRSch's batched environment (``fastenv.py``): the engine's rules
with pools beside nodes, EASY with the agent choosing among its candidates, and MRSch's
observations, over the state of many job sets at once (``MSim``: numpy arrays indexed
``[slot, job]``, ``[slot, job, pool]`` and ``[slot]``).

The rules are ``sim/engine.replay_steps``, ``sim/decision.decide_selected`` and
``easy_selected`` (``_easy_pools`` when the agent does not choose the backfilled jobs),
``sim/backfill.shadow_time_pools``; the observations are ``multi/mrsch.state_features``,
``measurement`` and ``goal_vector``. Jobs are renumbered in the window's queue order
(its key, submit time, position: the engine's tie rule), so a slot's queue is its waiting
jobs in index order; ``orig`` keeps each job's position in its set, which breaks ties of
the running list as the reference's ``(estimated end, job)`` tuples do.

Every function lives in this one file on purpose: numba's on-disk cache notices a change
of the file that defines a function, not of another file whose functions it calls (so
none of ``learned/fastsim.py``'s kernels is called from here).

Without numba they run as plain Python (``COMPILED`` False): correct, many times slower.
"""

from __future__ import annotations

import math

import numpy as np

# The queue and the running set are kept as in RLScheduler's environment: its kernels that
# do not touch the resource pools serve here as they are.
from ..learned.fastsim import COMPILED, kernel  # noqa: F401 - COMPILED re-exported
from ..learned.fastsim import enqueue, first_waiting, next_end, pop_queue

INF = np.inf
PICK, BACKFILL = 0, 1  # what an asking slot asks (``MSim.kind``)


@kernel
def reset_slot(sim, s, nodes):
    """Back to the start of the loaded set (nothing queued or running, pools full)."""
    sim.free[s] = nodes
    for p in range(sim.pfree.shape[1]):
        sim.pfree[s, p] = sim.cap[p]
    sim.head[s] = -1
    sim.qlen[s] = 0
    sim.lo[s] = 0
    sim.hi[s] = 0
    sim.nxt[s] = 0
    sim.nrun[s] = 0
    sim.steps[s] = 0
    sim.decisions[s] = 0
    sim.now[s] = 0.0
    sim.asking[s] = False
    sim.ncand[s] = 0
    for j in range(sim.waiting.shape[1]):  # the whole row: a longer set may have left
        sim.waiting[s, j] = False            # a slot reloaded before its end


@kernel
def fits(sim, s, job):
    """``QueueState.fits``: nodes and every pool free now."""
    if sim.need[s, job] > sim.free[s]:
        return False
    for p in range(sim.pfree.shape[1]):
        if sim.take[s, job, p] > sim.pfree[s, p]:
            return False
    return True


@kernel
def start_job(sim, s, job, t):
    """``PoolQueueState.start``: resources taken; the job among the running ones sorted
    by (estimated end, position in its set), as the reference's ``insort``."""
    sim.free[s] -= sim.need[s, job]
    for p in range(sim.pfree.shape[1]):
        sim.pfree[s, p] -= sim.take[s, job, p]
    e = t + sim.est[s, job]
    o = sim.orig[s, job]
    k = sim.nrun[s]
    while k > 0 and (sim.rs_end[s, k - 1] > e
                     or (sim.rs_end[s, k - 1] == e and sim.orig[s, sim.rs_job[s, k - 1]] > o)):
        sim.rs_end[s, k] = sim.rs_end[s, k - 1]
        sim.rs_job[s, k] = sim.rs_job[s, k - 1]
        k -= 1
    sim.rs_end[s, k] = e
    sim.rs_job[s, k] = job
    sim.nrun[s] += 1
    sim.start[s, job] = t
    sim.end[s, job] = t + sim.run[s, job]


@kernel
def release_until(sim, s, t):
    """Every running job that ends by ``t`` gives its resources back (order kept)."""
    w = 0
    for k in range(sim.nrun[s]):
        job = sim.rs_job[s, k]
        if sim.end[s, job] <= t:
            sim.free[s] += sim.need[s, job]
            for p in range(sim.pfree.shape[1]):
                sim.pfree[s, p] += sim.take[s, job, p]
        else:
            sim.rs_end[s, w] = sim.rs_end[s, k]
            sim.rs_job[s, w] = job
            w += 1
    sim.nrun[s] = w


@kernel
def shadow_pools(sim, s, head):
    """``backfill.shadow_time_pools`` for a head that does not fit now: the shadow time
    into ``sim.shadow``, the extra nodes into ``sim.extra`` and of every pool into
    ``sim.pextra``."""
    pools = sim.pfree.shape[1]
    avail = sim.free[s]
    for p in range(pools):
        sim.pextra[s, p] = sim.pfree[s, p]
    nrun = sim.nrun[s]
    k = 0
    shadow = -INF
    while True:
        ok = avail >= sim.need[s, head]
        for p in range(pools):
            if sim.pextra[s, p] < sim.take[s, head, p]:
                ok = False
        if ok:
            break
        if k == nrun:
            raise ValueError("a head that can never fit")  # ruled out at load
        e = sim.rs_end[s, k]
        while k < nrun and sim.rs_end[s, k] == e:  # equal ends give back together
            job = sim.rs_job[s, k]
            avail += sim.need[s, job]
            for p in range(pools):
                sim.pextra[s, p] += sim.take[s, job, p]
            k += 1
        shadow = e
    sim.shadow[s] = shadow
    sim.extra[s] = avail - sim.need[s, head]
    for p in range(pools):
        sim.pextra[s, p] -= sim.take[s, head, p]


@kernel
def within_extra(sim, s, job, t):
    """EASY's test for a job that fits now: gone by the shadow time, or within the extra
    of every resource."""
    if t + sim.est[s, job] <= sim.shadow[s]:
        return True
    if sim.need[s, job] > sim.extra[s]:
        return False
    for p in range(sim.pfree.shape[1]):
        if sim.take[s, job, p] > sim.pextra[s, p]:
            return False
    return True


@kernel
def take_extra(sim, s, job, t):
    """A backfilled job running past the shadow time uses the extra."""
    if t + sim.est[s, job] > sim.shadow[s]:
        sim.extra[s] -= sim.need[s, job]
        for p in range(sim.pfree.shape[1]):
            sim.pextra[s, p] -= sim.take[s, job, p]


@kernel
def easy_in_order(sim, s, t):
    """``backfill._easy_pools``: EASY in queue order (an agent without backfill choice)."""
    shadow_pools(sim, s, sim.head[s])
    job = first_waiting(sim, s)
    while job < sim.hi[s]:
        if sim.waiting[s, job] and fits(sim, s, job) and within_extra(sim, s, job, t):
            take_extra(sim, s, job, t)
            sim.waiting[s, job] = False
            sim.qlen[s] -= 1
            start_job(sim, s, job, t)
            if sim.free[s] == 0:
                break
        job += 1


@kernel
def backfill_ask(sim, s, t, window):
    """``easy_selected``'s loop head: the first ``window`` candidates in queue order into
    ``sim.cand``; True when there is one (the slot asks), False when EASY is done."""
    if sim.qlen[s] == 0 or sim.free[s] <= 0:
        return False
    c = 0
    job = first_waiting(sim, s)
    while job < sim.hi[s] and c < window:
        if sim.waiting[s, job] and fits(sim, s, job) and within_extra(sim, s, job, t):
            sim.cand[s, c] = job
            c += 1
        job += 1
    if c == 0:
        return False
    sim.ncand[s] = c
    sim.kind[s] = BACKFILL
    sim.now[s] = t
    return True


@kernel
def pick_loop(sim, s, t, window, choice):
    """``decide_selected`` from its pick loop: a head that fits starts; without a head,
    True (the slot asks for a pick); a head that does not fit keeps its reservation and
    EASY runs (the agent choosing, ``choice``, or in queue order)."""
    while True:
        head = sim.head[s]
        if head < 0:
            if sim.qlen[s] == 0:
                return False
            sim.kind[s] = PICK
            sim.now[s] = t
            return True
        if not fits(sim, s, head):
            break
        start_job(sim, s, head, t)
        sim.head[s] = -1
    if sim.qlen[s] == 0 or sim.free[s] == 0:
        return False
    if choice:
        shadow_pools(sim, s, sim.head[s])
        return backfill_ask(sim, s, t, window)
    easy_in_order(sim, s, t)
    return False


@kernel
def mr_run(sim, s, window, choice):
    """The engine's loop from the slot's last decision to its next question (True) or to
    the end of the set (False)."""
    n = sim.n[s]
    while sim.nxt[s] < n or sim.nrun[s] > 0:
        t = sim.sub[s, sim.arrivals[s, sim.nxt[s]]] if sim.nxt[s] < n else INF
        if sim.nrun[s] > 0:
            e = next_end(sim, s)
            if e <= t:
                t = e
                release_until(sim, s, t)
        while sim.nxt[s] < n and sim.sub[s, sim.arrivals[s, sim.nxt[s]]] <= t:
            enqueue(sim, s, sim.arrivals[s, sim.nxt[s]])
            sim.nxt[s] += 1
        if sim.head[s] < 0 and sim.qlen[s] == 0:
            continue
        sim.decisions[s] += 1
        if sim.free[s] == 0 and sim.head[s] >= 0:
            continue
        if pick_loop(sim, s, t, window, choice):
            sim.asking[s] = True
            return True
    sim.asking[s] = False
    return False


@kernel
def mr_step(sim, s, pos, window, choice):
    """Answer the slot's question with a window (or candidate) position; True while the
    slot asks again."""
    sim.steps[s] += 1
    t = sim.now[s]
    if sim.kind[s] == PICK:
        sim.head[s] = pop_queue(sim, s, pos)
        if pick_loop(sim, s, t, window, choice):
            return True
    else:
        job = sim.cand[s, pos]
        take_extra(sim, s, job, t)
        sim.waiting[s, job] = False
        sim.qlen[s] -= 1
        start_job(sim, s, job, t)
        if backfill_ask(sim, s, t, window):
            return True
    return mr_run(sim, s, window, choice)


@kernel
def mr_step_many(sim, slots, positions, window, choice, out):
    for i in range(len(slots)):
        out[i] = mr_step(sim, slots[i], positions[i], window, choice)


# -- observations (multi/mrsch.py) ---------------------------------------------------


@kernel
def time_feature(seconds, scale):
    """``mrsch._time_feature``: log1p(minutes) over log1p(a week in minutes), at most 1."""
    x = math.log1p((seconds if seconds > 0.0 else 0.0) / 60.0) / scale
    return x if x < 1.0 else 1.0


@kernel
def unit_times(sim, s, now, free, cap, units, p, scale, states, i, at):
    """``mrsch._unit_times`` of nodes (``p`` < 0) or pool ``p``: ``units`` availability
    flags then ``units`` times into ``row[at:]``. The running list is sorted by estimated
    end, so by remaining time: the reference's stable argsort keeps it as it is."""
    size = cap / units
    nrun = sim.nrun[s]
    k = 0
    freed = free
    last = 0.0
    if nrun > 0:
        last = sim.rs_end[s, nrun - 1] - now
        if last < 0.0:
            last = 0.0
    if nrun > 0:  # freed after the first running job
        j = sim.rs_job[s, 0]
        freed += sim.need[s, j] if p < 0 else sim.take[s, j, p]
    for u in range(units):
        need = (u + 1) * size - 1e-9
        if need <= free:
            states[i, at + u] = 1.0
            states[i, at + units + u] = 0.0
            continue
        states[i, at + u] = 0.0
        while k < nrun and freed < need:  # searchsorted(freed, need, "left")
            k += 1
            if k < nrun:
                j = sim.rs_job[s, k]
                freed += sim.need[s, j] if p < 0 else sim.take[s, j, p]
        if k < nrun:
            r = sim.rs_end[s, k] - now
            wait = r if r > 0.0 else 0.0
        else:
            wait = last
        states[i, at + units + u] = time_feature(wait, scale)


@kernel
def mr_observe(sim, active, window, node_units, pool_units, dynamic, padding, scale,
               states, meas, goals, sizes, allowed, demand):
    """``state_features``, ``measurement``, ``goal_vector`` (``dynamic``; else equal
    weights) and the agent's action mask (``padding``: any job; else runnable ones while
    one is) of every asking slot, into row ``i`` of the outputs for ``active[i]``."""
    pools = sim.pfree.shape[1]
    r = 1 + pools
    total = sim.capf[0]
    for i in range(len(active)):
        s = active[i]
        now = sim.now[s]
        for x in range(states.shape[1]):
            states[i, x] = 0.0
        # the window: the first ``window`` waiting jobs, or the backfill candidates
        backfill = sim.kind[s] == BACKFILL
        size = sim.ncand[s] if backfill else min(sim.qlen[s], window)
        sizes[i] = size
        width = 3 + pools
        job = first_waiting(sim, s) if size > 0 and not backfill else 0
        any_fits = False
        for k in range(size):
            if backfill:
                job = sim.cand[s, k]
            else:
                while not sim.waiting[s, job]:
                    job += 1
            if k < window:
                states[i, k * width] = sim.need[s, job] / sim.capf[0]
                for p in range(pools):
                    states[i, k * width + 1 + p] = sim.take[s, job, p] / sim.capf[1 + p]
                states[i, k * width + 1 + pools] = time_feature(sim.est[s, job], scale)
                states[i, k * width + 2 + pools] = time_feature(now - sim.sub[s, job], scale)
            ok = fits(sim, s, job)
            allowed[i, k] = backfill or padding or ok
            any_fits = any_fits or ok
            if not backfill:
                job += 1
        for k in range(size, allowed.shape[1]):
            allowed[i, k] = False
        if not (backfill or padding or any_fits):
            for k in range(size):
                allowed[i, k] = True
        at = window * width
        unit_times(sim, s, now, float(sim.free[s]), total, node_units, -1, scale,
                   states, i, at)
        at += 2 * node_units
        for p in range(pools):
            unit_times(sim, s, now, float(sim.pfree[s, p]), sim.capf[1 + p], pool_units, p,
                       scale, states, i, at)
            at += 2 * pool_units
        meas[i, 0] = 1.0 - sim.free[s] / total
        for p in range(pools):
            meas[i, 1 + p] = 1.0 - sim.pfree[s, p] / sim.capf[1 + p]
        # Eq. (1): running jobs by their remaining estimate, waiting ones (the head
        # excepted) by their estimate
        for j in range(r):
            demand[j] = 0.0
        if dynamic:
            for k in range(sim.nrun[s]):
                job = sim.rs_job[s, k]
                rem = sim.rs_end[s, k] - now
                if rem < 0.0:
                    rem = 0.0
                demand[0] += rem * (sim.need[s, job] / sim.capf[0])
                for p in range(pools):
                    demand[1 + p] += rem * (sim.take[s, job, p] / sim.capf[1 + p])
            if sim.qlen[s] > 0:
                for job in range(first_waiting(sim, s), sim.hi[s]):
                    if sim.waiting[s, job]:
                        est = sim.est[s, job]
                        demand[0] += est * (sim.need[s, job] / sim.capf[0])
                        for p in range(pools):
                            demand[1 + p] += est * (sim.take[s, job, p] / sim.capf[1 + p])
        tot = 0.0
        for j in range(r):
            tot += demand[j]
        for j in range(r):
            goals[i, j] = demand[j] / tot if tot > 0.0 else 1.0 / r
