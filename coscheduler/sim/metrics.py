"""The field's standard schedule metrics, from job records and a schedule.

- bounded slowdown of a job: ``max(1, (wait + run) / max(run, 10))`` (the 10 s bound keeps
  very short jobs from dominating the mean);
- mean bounded slowdown, maximum, and the worst user's mean (fairness: the user whose
  jobs fared worst on average; jobs without a user id, -1, count as one user);
- mean wait and mean turnaround (wait + run);
- utilisation ``sum(run * procs) / ((last end - first submit) * MaxProcs)``;
- makespan ``last end - first submit``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from ..model import InvalidInput

BSLD_BOUND_S = 10.0


@dataclass(frozen=True)
class Metrics:
    jobs: int
    avg_bsld: float
    avg_wait: float
    avg_turnaround: float
    max_bsld: float
    worst_user_bsld: float
    utilization: float
    makespan: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def bounded_slowdown(wait: float, run: float) -> float:
    return max(1.0, (wait + run) / max(run, BSLD_BOUND_S))


def compute_metrics(
    jobs: Sequence,
    start: Sequence[float],
    end: Sequence[float],
    max_procs: int,
) -> Metrics:
    """Metrics of a schedule; ``jobs`` need ``submit``, ``run``, ``procs`` and ``user``."""
    n = len(jobs)
    if n == 0:
        raise InvalidInput("cannot compute metrics of an empty schedule (no jobs)")
    if len(start) != n or len(end) != n:
        raise InvalidInput(f"schedule has {len(start)}/{len(end)} start/end times for {n} jobs")
    total_wait = total_bsld = max_bsld = work = 0.0
    per_user: dict[int, list[float]] = {}
    for job, s in zip(jobs, start):
        wait = s - job.submit
        run = job.run
        bsld = (wait + run) / (run if run > BSLD_BOUND_S else BSLD_BOUND_S)
        if bsld < 1.0:
            bsld = 1.0
        total_wait += wait
        total_bsld += bsld
        if bsld > max_bsld:
            max_bsld = bsld
        work += run * job.procs
        acc = per_user.get(job.user)
        if acc is None:
            per_user[job.user] = [bsld, 1]
        else:
            acc[0] += bsld
            acc[1] += 1
    first_submit = min(j.submit for j in jobs)
    makespan = max(end) - first_submit
    total_run = sum(j.run for j in jobs)
    return Metrics(
        jobs=n,
        avg_bsld=total_bsld / n,
        avg_wait=total_wait / n,
        avg_turnaround=(total_wait + total_run) / n,
        max_bsld=max_bsld,
        worst_user_bsld=max(s / c for s, c in per_user.values()),
        utilization=work / (makespan * max_procs),
        makespan=makespan,
    )
