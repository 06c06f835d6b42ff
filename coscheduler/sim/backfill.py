"""Backfilling: starting later jobs ahead of a blocked head without delaying it (too much).

EASY (Mu'alem & Feitelson, 2001): the head gets a reservation at its *shadow time*, the
earliest estimated end of running jobs at which enough nodes are free for it; the nodes
free then beyond the head's need are the *extra* nodes. A later job (in queue order) may
start now if it fits now and either ends, by its estimate, by the shadow time or uses
only extra nodes.

Conservative: every waiting job, in queue order, gets a reservation at the earliest time
the availability profile allows; a job starts now only when its earliest slot is now and
it fits now, so no job is delayed beyond the reservation it would get from the jobs ahead
of it. Reservations are recomputed at each decision (a compressing schedule).

Both use running jobs' *estimated* ends; a job that outlived its estimate counts as
ending at its estimate, which may be in the past (then the shadow time is in the past
too, and only extra nodes can be backfilled until it ends).

With pools beside nodes (burst buffer, power; ``QueueState.pool_take``), every rule
counts every resource: the shadow time is the first estimated end at which the head's
nodes *and* its take from every pool are free; the extra of each resource is what is free
then beyond the head's need; a backfilled job that runs past the shadow time must fit in
the extra of every resource; the conservative profile tracks every resource over time.

These functions read and update the decision's ``QueueState`` (see ``queue_state.py``).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - for type hints only
    from .queue_state import QueueState


def shadow_time(
    free: int, head_need: int, running_est: list[tuple[float, int]], need: list[int]
) -> tuple[float, int]:
    """(shadow time, extra nodes) for a head needing ``head_need`` nodes.

    ``running_est`` is sorted by estimated end. Raises if the head can never fit, which
    the engine rules out by checking every job against the machine size first.
    """
    avail = free
    count = len(running_est)
    for k, (est_end, job) in enumerate(running_est):
        avail += need[job]
        if avail >= head_need:
            # Jobs with the same estimated end free their nodes at that instant too.
            k += 1
            while k < count and running_est[k][0] == est_end:
                avail += need[running_est[k][1]]
                k += 1
            return est_end, avail - head_need
    raise ValueError(f"a job needing {head_need} nodes can never fit ({avail} nodes in all)")


def shadow_time_pools(state: "QueueState", head: int) -> tuple[float, int, list[int]]:
    """(shadow time, extra nodes, extra per pool) for ``head`` counting every pool."""
    need, take = state.need, state.pool_take
    head_need, head_take = need[head], take[head]
    avail = state.free
    pool_avail = list(state.pool_free)
    running = state.running_est
    count = len(running)
    k = 0
    while True:
        if avail >= head_need and all(a >= t for a, t in zip(pool_avail, head_take)):
            break
        if k == count:
            raise ValueError(f"job {head} can never fit ({avail} nodes, pools {pool_avail})")
        est_end = running[k][0]
        # every job with this estimated end gives its resources back at that instant
        while k < count and running[k][0] == est_end:
            job = running[k][1]
            avail += need[job]
            for p, t in enumerate(take[job]):
                pool_avail[p] += t
            k += 1
        shadow = est_end
    if k == 0:
        shadow = float("-inf")  # fits now: no reservation needed (callers do not ask)
    return shadow, avail - head_need, [a - t for a, t in zip(pool_avail, head_take)]


def _easy_pools(state: "QueueState", now: float, started: list[int]) -> None:
    """EASY counting nodes and every pool (see module doc)."""
    need, estimate, take = state.need, state.estimate, state.pool_take
    shadow, extra, pool_extra = shadow_time_pools(state, state.head)
    entries = state.entries
    pos = 0
    while pos < len(entries):
        job = entries[pos][2]
        nodes = need[job]
        if nodes <= state.free and state.pools_fit(job):
            if now + estimate[job] <= shadow:
                pass  # gone by the shadow time: the head's resources are back by then
            elif nodes <= extra and all(t <= e for t, e in zip(take[job], pool_extra)):
                extra -= nodes  # runs past the shadow time within every extra
                for p, t in enumerate(take[job]):
                    pool_extra[p] -= t
            else:
                pos += 1
                continue
            del entries[pos]
            state.start(job, now, started)
            if state.free == 0:
                break
        else:
            pos += 1


def easy_backfill(state: "QueueState", now: float, started: list[int]) -> None:
    """Start, in queue order, the jobs EASY allows ahead of ``state.head``.

    A decision that follows a full scan with the same head and no job ended since (only
    arrivals, or an inspector's retry) tries only the jobs queued since: every job the
    scan left could not start then, and cannot now, as free nodes, the shadow time and
    the extra nodes are what the scan left (the jobs it started end by the shadow time
    or hold extra nodes only) and time moved on. On HPC2N this skips about half the scans.
    """
    if state.pool_take is not None:
        _easy_pools(state, now, started)
        return
    need, estimate = state.need, state.estimate
    entries = state.entries
    free = state.free
    fresh = state.bf_fresh
    if fresh is not None and state.bf_head == state.head and not state.uses_now:
        shadow, extra = state.bf_shadow, state.bf_extra
        if len(fresh) > 1:
            fresh.sort()   # queue order (an entry sorts by key, submit, position)
        for entry in fresh:
            job = entry[2]
            nodes = need[job]
            if nodes > free:
                continue
            if now + estimate[job] > shadow:
                if nodes > extra:
                    continue
                extra -= nodes
            del entries[bisect_left(entries, entry)]
            state.start(job, now, started)
            free -= nodes
            if free == 0:   # (nothing starts before a job ends: then a full scan)
                state.bf_fresh = None
                return
        state.bf_extra = extra
        state.bf_fresh = []
        return
    state.bf_fresh = None
    shadow, extra = shadow_time(free, need[state.head], state.running_est, need)
    taken: list[int] = []   # positions of the started jobs, deleted after the scan
    for pos, entry in enumerate(entries):
        job = entry[2]
        nodes = need[job]
        if nodes > free:
            continue
        if now + estimate[job] > shadow:   # (gone by the shadow time otherwise)
            if nodes > extra:
                continue
            extra -= nodes  # still running at the shadow time, on nodes the head leaves
        taken.append(pos)
        state.start(job, now, started)
        free -= nodes
        if free == 0:
            break
    else:   # every waiting job was tried: a later decision may try only newcomers
        state.bf_head, state.bf_shadow, state.bf_extra = state.head, shadow, extra
        state.bf_fresh = []
    if len(taken) == 1:
        del entries[taken[0]]
    elif taken:
        for pos in reversed(taken):
            del entries[pos]


class _Profile:
    """Free nodes over time, as a step function: ``free[k]`` from ``times[k]`` on."""

    def __init__(self, now: float, free: int, running_est: list[tuple[float, int]],
                 need: list[int]):
        self.times = [now]
        self.free = [free]
        for est_end, job in running_est:
            t = est_end if est_end > now else now  # outlived its estimate: counts as now
            if t == self.times[-1]:
                self.free[-1] += need[job]
            else:
                self.times.append(t)
                self.free.append(self.free[-1] + need[job])

    def earliest(self, nodes: int, duration: float) -> float:
        """Earliest breakpoint from which ``nodes`` are free for ``duration`` seconds."""
        times, free = self.times, self.free
        last = len(times)
        for k in range(last):
            if free[k] < nodes:
                continue
            end = times[k] + duration
            m = k + 1
            while m < last and times[m] < end and free[m] >= nodes:
                m += 1
            if m == last or times[m] >= end:
                return times[k]
        raise ValueError(f"{nodes} nodes are never free")  # ruled out by the engine's checks

    def _split(self, t: float) -> int:
        """Index of the breakpoint at ``t``, inserting one if needed."""
        k = bisect_left(self.times, t)
        if k < len(self.times) and self.times[k] == t:
            return k
        self.times.insert(k, t)
        self.free.insert(k, self.free[k - 1])
        return k

    def reserve(self, start: float, duration: float, nodes: int) -> None:
        k = self._split(start)
        m = self._split(start + duration)
        for i in range(k, m):
            self.free[i] -= nodes


class _PoolProfile:
    """Free nodes and pools over time: ``free[k]`` (a list, nodes first) from ``times[k]``."""

    def __init__(self, state: "QueueState", now: float):
        need, take = state.need, state.pool_take
        self.times = [now]
        self.free = [[state.free, *state.pool_free]]
        for est_end, job in state.running_est:
            t = est_end if est_end > now else now  # outlived its estimate: counts as now
            if t != self.times[-1]:
                self.times.append(t)
                self.free.append(list(self.free[-1]))
            row = self.free[-1]
            row[0] += need[job]
            for p, amount in enumerate(take[job]):
                row[p + 1] += amount

    @staticmethod
    def _fits(row: list[int], want: list[int]) -> bool:
        for f, w in zip(row, want):
            if f < w:
                return False
        return True

    def earliest(self, want: list[int], duration: float) -> float:
        times, free, fits = self.times, self.free, self._fits
        last = len(times)
        for k in range(last):
            if not fits(free[k], want):
                continue
            end = times[k] + duration
            m = k + 1
            while m < last and times[m] < end and fits(free[m], want):
                m += 1
            if m == last or times[m] >= end:
                return times[k]
        raise ValueError(f"{want} is never free")  # ruled out by the engine's checks

    def _split(self, t: float) -> int:
        k = bisect_left(self.times, t)
        if k < len(self.times) and self.times[k] == t:
            return k
        self.times.insert(k, t)
        self.free.insert(k, list(self.free[k - 1]))
        return k

    def reserve(self, start: float, duration: float, want: list[int]) -> None:
        k = self._split(start)
        m = self._split(start + duration)
        for i in range(k, m):
            row = self.free[i]
            for p, w in enumerate(want):
                row[p] -= w


def _conservative_pools(state: "QueueState", now: float, started: list[int]) -> None:
    """Conservative backfilling counting nodes and every pool (see module doc)."""
    need, estimate, take = state.need, state.estimate, state.pool_take
    entries = state.entries
    # smallest node count from each position on: as on the CPU-only path, the pass stops
    # once no job further down could fit in the nodes free now
    suffix_min = [0] * len(entries)
    smallest = state.total_nodes + 1
    for k in range(len(entries) - 1, -1, -1):
        smallest = min(smallest, need[entries[k][2]])
        suffix_min[k] = smallest
    profile = _PoolProfile(state, now)
    head = state.head
    want = [need[head], *take[head]]
    profile.reserve(profile.earliest(want, estimate[head]), estimate[head], want)
    kept = []
    for k, entry in enumerate(entries):
        if suffix_min[k] > state.free:
            kept.extend(entries[k:])
            break
        job = entry[2]
        want = [need[job], *take[job]]
        at = profile.earliest(want, estimate[job])
        profile.reserve(at, estimate[job], want)
        if at == now and state.fits(job):
            state.start(job, now, started)
        else:
            kept.append(entry)
    state.entries = kept


def conservative_backfill(state: "QueueState", now: float, started: list[int]) -> None:
    """Reserve for every waiting job in queue order; start those whose slot is now.

    The pass stops once no job further down the queue could fit in the nodes free now:
    reservations only matter for jobs behind them, and those cannot start now either.
    This keeps a decision cheap when the machine is full, although a long queue with a
    few free nodes still costs O(queue x profile) per decision.
    """
    if state.pool_take is not None:
        _conservative_pools(state, now, started)
        return
    need, estimate = state.need, state.estimate
    entries = state.entries
    # smallest node count from each position to the end of the queue
    suffix_min = [0] * len(entries)
    smallest = state.total_nodes + 1
    for k in range(len(entries) - 1, -1, -1):
        nodes = need[entries[k][2]]
        if nodes < smallest:
            smallest = nodes
        suffix_min[k] = smallest
    profile = _Profile(now, state.free, state.running_est, need)
    head = state.head
    profile.reserve(profile.earliest(need[head], estimate[head]), estimate[head], need[head])
    kept = []
    for k, entry in enumerate(entries):
        if suffix_min[k] > state.free:
            kept.extend(entries[k:])
            break
        job = entry[2]
        nodes, duration = need[job], estimate[job]
        at = profile.earliest(nodes, duration)
        profile.reserve(at, duration, nodes)
        if at == now and nodes <= state.free:
            state.start(job, now, started)
        else:
            kept.append(entry)
    state.entries = kept
