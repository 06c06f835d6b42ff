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
    Ties: submit time, then job id."""
    key = policy.key

    def order(jobs: Sequence[Job], now: float) -> list[Job]:
        return sorted(jobs, key=lambda j: (key(now, j.submit_time, j.cores, j.walltime_s),
                                           j.submit_time, j.job_id))

    return order
