"""Stage 3, order: the queue-ordering callables the controller accepts.

A queue order takes the queued jobs and the current time and returns them in the order
placement should try them, like the QueueSort point of the Kubernetes scheduler framework.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..model import Job

QueueOrder = Callable[[Sequence[Job], float], list[Job]]


def fcfs(jobs: Sequence[Job], now: float) -> list[Job]:
    """First come, first served: by submit time, then job id."""
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def order_by(policy) -> QueueOrder:
    """Adapt a queue policy with ``key(now, submit, procs, estimate)`` (for example
    ``coscheduler.policies.queue.get_policy("SJF")``) to a queue-ordering callable.
    Ties: submit time, then job id. A scorer (``coscheduler.policies.selection.Scorer``,
    e.g. a learned RLScheduler model) gives ``order_by_scores`` instead."""
    if getattr(policy, "kind", None) == "scorer":
        return order_by_scores(policy)
    if getattr(policy, "kind", None) == "inspector":
        return order_by_inspector(policy)
    key = policy.key

    def order(jobs: Sequence[Job], now: float) -> list[Job]:
        return sorted(jobs, key=lambda j: (key(now, j.submit_time, j.cores, j.walltime_s),
                                           j.submit_time, j.job_id))

    return order


def order_by_scores(scorer) -> QueueOrder:
    """A queue order from a scorer's scores over the machine as the controller sees it
    (cores as the unit: a job needs its cores, running jobs end at start + walltime).

    The controller passes ``machine=(free cores, total cores, [(estimated end, cores)])``
    to an order whose ``wants_machine`` is set; without it the machine counts as full.
    """
    from ..policies.selection import order_by_scores as rank

    def order(jobs: Sequence[Job], now: float, machine=None) -> list[Job]:
        free, total, running = machine if machine is not None else (0, 1, ())
        rows = [(j.submit_time, j.cores, j.walltime_s) for j in jobs]
        positions, _ = rank(scorer, now, rows, free, max(total, 1), 1, running)
        return [jobs[p] for p in positions]

    order.wants_machine = True  # type: ignore[attr-defined]
    return order


def order_by_inspector(inspector) -> QueueOrder:
    """A queue order from an inspector over its base policy (``InspectedRanking``: a
    rejected top job goes last for the inspector's retry delay), machine in cores."""
    from ..policies.selection import InspectedRanking

    ranking = InspectedRanking(inspector)

    def order(jobs: Sequence[Job], now: float, machine=None) -> list[Job]:
        free, total, running = machine if machine is not None else (0, 1, ())
        rows = [(j.submit_time, j.cores, j.walltime_s) for j in jobs]
        positions = ranking.rank(now, rows, [j.job_id for j in jobs], free, max(total, 1), 1,
                                 running)
        return [jobs[p] for p in positions]

    order.wants_machine = True  # type: ignore[attr-defined]
    order.ranking = ranking  # type: ignore[attr-defined]
    return order
