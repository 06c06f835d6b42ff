"""One scheduling decision: which waiting jobs start now.

The engine owns time and events; this module owns the rule applied at each decision
point (issue 3, point 3):

1. The waiting queue is ordered by the policy, smallest key first (ties: submit time,
   then position in the trace).
2. The top job starts if it fits; repeat while the top fits.
3. A top job that does not fit becomes the *head*: it keeps its place (later arrivals,
   whatever their key, do not overtake it) until it starts. Only backfilling
   (``backfill.py``) may start other jobs before it.

``decide`` is the seam a co-scheduling step will extend later (guest jobs placed on a
host job's nodes): it reads and updates one ``QueueState`` and returns the jobs started.

Resources beside nodes (``sim/resources.py``): with ``pool_take`` set (a
``PoolQueueState``), a job fits only when its nodes *and* its take from every global pool
(burst buffer, power) are free, and reservations and backfilling count every pool
(``decide_pools``, or ``decide_selected`` with a selector; a selector's view then carries
the pools in ``ChoiceView.extra``). Without pools, ``decide`` runs exactly the CPU-only
path: the pool checks live in separate functions so that it pays nothing for them.
"""

from __future__ import annotations

from typing import Any, Generator

import numpy as np

from ..policies.selection import ChoiceView
from .backfill import conservative_backfill, easy_backfill, shadow_time, shadow_time_pools
from .queue_state import Entry, PoolQueueState, QueueState  # noqa: F401 - re-exported


def _reorder(state: QueueState, now: float) -> None:
    """Recompute time-dependent keys and sort (only for policies that use ``now``)."""
    key, submit, procs, estimate = state.key, state.submit, state.procs, state.estimate
    state.entries = sorted(
        [(key(now, submit[j], procs[j], estimate[j]), submit[j], j) for _, _, j in state.entries]
    )


def decide_selected(state: QueueState, now: float, backfill: str
                    ) -> Generator[ChoiceView, Any, list[int]]:
    """``decide`` with a selector choosing each new head (a generator: it yields the
    selector's view and takes the answer back; see ``engine.replay_steps``).

    - A scorer picks the head from the window (FCFS order); a pick that fits starts and
      the scorer is asked again; one that does not fit becomes the head, as in ``decide``.
    - An inspector sees the base policy's top job before it becomes the head. On a
      rejection nothing more starts now (no backfilling either: the reference's skip),
      and the engine adds a decision point ``retry_after`` seconds later.

    Backfilling then runs as in ``decide`` (EASY in queue order: FCFS for a scorer).
    """
    started: list[int] = []
    state.wake = float("inf")
    if state.free == 0 and state.head is not None:
        return started
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    selector = state.selector
    pools = state.pool_take is not None
    while True:
        if head is None:
            if not entries:
                break
            if state.scoring:
                pos = yield state.view(now, "pick")
                if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) \
                        or not 0 <= pos < min(len(entries), state.window):
                    raise ValueError(f"selector {selector.name!r} picked {pos!r}; the window "
                                     f"has {min(len(entries), state.window)} jobs")
                head = entries.pop(int(pos))[2]
            else:
                job = entries[0][2]
                times = state.rejected.get(job, 0)
                if times < selector.max_rejections:
                    if not (yield state.view(now, "inspect")):
                        state.rejected[job] = times + 1
                        state.rejections_total += 1
                        state.wake = now + selector.retry_after
                        break
                head = entries.pop(0)[2]
        if need[head] > state.free or (pools and not state.pools_fit(head)):
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        state.reservation[head] = (
            shadow_time_pools(state, head)[0] if pools
            else shadow_time(state.free, need[head], state.running_est, need)[0]
        )
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        if getattr(selector, "backfill_choice", False) and state.scoring:
            yield from easy_selected(state, now, started)
        else:
            easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started


def easy_selected(state: QueueState, now: float, started: list[int]
                  ) -> Generator[ChoiceView, Any, None]:
    """EASY backfilling whose order a selector chooses (``selector.backfill_choice``).

    EASY's rule is unchanged: the head keeps its reservation (shadow time and the extra of
    every resource, computed once per decision as in ``easy_backfill``); a job may start
    now if it fits now and either ends by its estimate before the shadow time or fits in
    the extra of every resource. Instead of trying the candidates in queue order, the
    selector is shown the first ``window`` candidates in queue order (a ``"backfill"``
    view, ``extra["reserve"]`` holding the reservation) and picks one; it starts, the
    candidates are recomputed, and so on until none is left (DRAS's backfilling on CQSim,
    the code MRSch extends, works this way).
    """
    pools = state.pool_take is not None
    need, estimate, take = state.need, state.estimate, state.pool_take
    if pools:
        shadow, extra, pool_extra = shadow_time_pools(state, state.head)
    else:
        shadow, extra = shadow_time(state.free, need[state.head], state.running_est, need)
        pool_extra = []
    selector = state.selector
    window = state.window
    entries = state.entries
    while entries and state.free > 0:
        cands: list[int] = []
        positions: list[int] = []
        for pos, entry in enumerate(entries):
            job = entry[2]
            if need[job] > state.free or (pools and not state.pools_fit(job)):
                continue
            if now + estimate[job] > shadow and (
                    need[job] > extra
                    or (pools and any(t > e for t, e in zip(take[job], pool_extra)))):
                continue
            cands.append(job)
            positions.append(pos)
            if len(cands) == window:
                break
        if not cands:
            return
        view = state.view(now, "backfill", cands)
        ends = now + state._estimate[view.jobs]
        view.extra["reserve"] = {
            "shadow": shadow, "nodes": extra,
            "pools": np.asarray(pool_extra, dtype=np.int64),
            "past_shadow": ends > shadow,
        }
        pick = yield view
        if isinstance(pick, bool) or not isinstance(pick, (int, np.integer)) \
                or not 0 <= pick < len(cands):
            raise ValueError(f"selector {selector.name!r} picked {pick!r} among "
                             f"{len(cands)} backfill candidates")
        job = cands[int(pick)]
        if now + estimate[job] > shadow:  # runs past the shadow time: uses the extra
            extra -= need[job]
            if pools:
                pool_extra = [e - t for e, t in zip(pool_extra, take[job])]
        del entries[positions[int(pick)]]
        state.start(job, now, started)


def decide(state: QueueState, now: float, backfill: str) -> list[int]:
    """Start what the rules allow at ``now``; return the started jobs in start order."""
    started: list[int] = []
    if state.free == 0 and state.head is not None:
        return started  # nothing fits, not even a one-node job
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    while True:
        if head is None:
            if not entries:
                break
            head = entries.pop(0)[2]
        if need[head] > state.free:
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        # A new head: note the reservation it gets now (the property tests check it).
        state.reservation[head] = shadow_time(state.free, need[head], state.running_est, need)[0]
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started


def decide_pools(state: QueueState, now: float, backfill: str) -> list[int]:
    """``decide`` with pools beside nodes: a job starts when nodes and every pool fit.

    ``decide``'s loop again on purpose: the CPU-only path stays free of the pool tests,
    which cost ~4 % on a 1,024-job window (measured side by side).
    """
    started: list[int] = []
    if state.free == 0 and state.head is not None:
        return started
    if state.uses_now and state.entries:
        _reorder(state, now)
    entries = state.entries
    need = state.need
    head = state.head
    while True:
        if head is None:
            if not entries:
                break
            head = entries.pop(0)[2]
        if need[head] > state.free or not state.pools_fit(head):
            break
        state.start(head, now, started)
        head = None
    if head is not None and head != state.head and backfill == "easy":
        state.reservation[head] = shadow_time_pools(state, head)[0]
    state.head = head
    if head is None or not entries or state.free == 0:
        return started
    if backfill == "easy":
        easy_backfill(state, now, started)
    elif backfill == "conservative":
        conservative_backfill(state, now, started)
    return started
