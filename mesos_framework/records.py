"""The Mesos backend's records: its configuration, a job's run and tasks, and task ids
(job id ~ attempt ~ part), shared by framework.py and its parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from coscheduler.backend import BackendError
from coscheduler.model import (
    Allocation,
    InvalidInput,
    Job,
    RunningJob,
    check_finite,
    validate_job_id,
)

_SEP = "~"   # task id = job id ~ attempt ~ part; job ids never hold "~"
# a framework state file lists the tasks of one framework: far below this
MAX_STATE_BYTES = 64 << 20


class _NoOffers(BackendError):
    """The held offers of an agent do not cover a task (the message says what is short)."""


def _not_processed(exc: Exception) -> bool:
    """Did a call fail before the master acted on it (5xx, no answer), as opposed to being
    refused (4xx: the master looked at it and said no)?"""
    status = getattr(exc, "status", None)
    return status is None or status >= 500


def task_id_for(job_id: str, attempt: int, part: int) -> str:
    return f"{job_id}{_SEP}{attempt}{_SEP}{part}"


def job_of_task(task_id: str) -> tuple[str, int, int] | None:
    """(job id, attempt, part) of one of our task ids, or None."""
    parts = task_id.rsplit(_SEP, 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    try:
        validate_job_id(parts[0])
    except InvalidInput:
        return None
    return parts[0], int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class FrameworkConfig:
    """The framework's settings (docs/mesos.md)."""

    name: str = "coscheduler"
    user: str = "root"
    role: str | None = None
    principal: str | None = None
    failover_timeout_s: float = 7 * 86400.0
    hold_s: float = 5.0
    hold_jitter: float = 0.5
    refuse_s: float = 2.0
    idle_refuse_s: float = 5.0
    accept_refuse_s: float = 0.0
    mem_per_core_mb: float = 32.0
    min_task_mem_mb: float = 32.0
    overtime_factor: float = 1.0
    max_requeues: int = 3
    settle_s: float = 0.5
    lease_s: float = 20.0
    state_file: str | None = None
    # A guest placed inside a host whose agent has no memory offer held waits this long for
    # one (REVIVE is sent at once), then goes back to the queue.
    guest_wait_s: float = 10.0
    # Job feeds (the queue folder, Slurm) are read at most this often.
    feed_interval_s: float = 1.0
    # Offers of every agent arrive within this long of the first one: until then a gang
    # bigger than the agents seen still holds offers (another agent may be about to offer);
    # after it, a job no set of the agents seen could hold waits without holding any.
    capacity_settle_s: float = 30.0
    # After a failover, a task of the previous instance whose job has not been submitted
    # within this long of registering (or of its being reported running) is killed; the
    # queue folder and Slurm feeds submit their jobs at their first poll, about a second in;
    # ten minutes leave room for a Slurm feed whose slurmctld is down meanwhile (a task
    # killed here loses its work: its job, when it comes, starts again).
    orphan_grace_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("failover_timeout_s", "hold_s", "hold_jitter", "refuse_s", "idle_refuse_s",
                     "accept_refuse_s", "mem_per_core_mb", "min_task_mem_mb", "overtime_factor",
                     "settle_s", "lease_s", "guest_wait_s", "feed_interval_s",
                     "capacity_settle_s", "orphan_grace_s"):
            check_finite(getattr(self, name), f"mesos framework {name}", minimum=0.0)
        if not self.user or not self.name:
            raise InvalidInput("mesos framework: user and name must not be empty")
        if isinstance(self.max_requeues, bool) or not isinstance(self.max_requeues, int) or self.max_requeues < 0:
            raise InvalidInput(f"mesos framework max_requeues must be an integer >= 0, got {self.max_requeues!r}")


@dataclass
class _Task:
    task_id: str
    agent_id: str
    hostname: str
    cores: int
    state: str = "TASK_STAGING"


@dataclass
class _Run:
    job: Job
    allocation: Allocation
    start: float
    quota: float
    host: str | None
    attempt: int
    tasks: dict[str, _Task]
    guests: list[str] = field(default_factory=list)
    kill_reason: tuple[str, str] | None = None   # (outcome state, reason) once we killed it
    lease_renewed: float = 0.0
    # A guest waiting for a memory offer on its host's agent: since when, and what each of
    # its tasks needs (agent id, cores, cpus, mem) and runs (env, argv).
    waiting_since: float | None = None
    parts: list[tuple[str, int, float, float]] = field(default_factory=list)
    launch: list[tuple[dict[str, str], list[str]]] = field(default_factory=list)

    def running_job(self) -> RunningJob:
        return RunningJob(self.job, self.allocation, self.start, self.quota, self.host,
                          tuple(self.guests))
