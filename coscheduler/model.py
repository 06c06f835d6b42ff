"""The shared vocabulary: jobs, workflow stages, nodes, allocations and metrics samples.

Plain frozen dataclasses with validation at construction, so bad input is refused where it
enters (a backend, a file, an HTTP body) with an error that names the field, and never
reaches the learner.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Mapping

# Job ids and class names travel into file names, cgroup paths and SQL rows: keep them tame.
# Matched with fullmatch: "$" would also accept a final newline ("a\n").
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")
_CLASS_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/+-]{0,127}")


class InvalidInput(ValueError):
    """Raised for input that cannot be used; the message names the input and the problem."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut to about ``limit`` characters (a 10 KB id
    sent by a client is not echoed back whole)."""
    r = repr(value) if not isinstance(value, (str, bytes)) or len(value) <= 4 * limit \
        else repr(value[:limit + 1])
    if len(r) <= limit:
        return r
    size = f" ({len(value)} characters)" if isinstance(value, (str, bytes)) else ""
    return r[:limit] + "..." + size


def validate_job_id(job_id: object, what: str = "job_id") -> str:
    """Return job_id if it is a safe identifier (letters, digits, ``_.:+-``; no slashes)."""
    if not isinstance(job_id, str) or not _ID_RE.fullmatch(job_id) or job_id in (".", ".."):
        raise InvalidInput(
            f"{what} {shown(job_id)} is not a valid job id: use 1-128 letters, digits or '_.:+-', "
            "starting with a letter or digit"
        )
    return job_id


def validate_job_class(job_class: object) -> str:
    """Return job_class if it is a valid class key such as ``montage/mProject``."""
    if (
        not isinstance(job_class, str)
        or not _CLASS_RE.fullmatch(job_class)
        or ".." in job_class.split("/")
    ):
        raise InvalidInput(
            f"job class {shown(job_class)} is not valid: use 1-128 letters, digits or '_.:/+-'"
        )
    return job_class


def check_finite(value: object, name: str, *, minimum: float | None = None,
                 maximum: float | None = None, allow_none: bool = False) -> float | None:
    """Validate a number: finite, within bounds. Returns it as float (or None if allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{name} must be a number, got {shown(value)}")
    try:
        v = float(value)
    except OverflowError:  # an int such as 10**400: no float holds it
        raise InvalidInput(f"{name} must be finite, got an integer of {len(str(value))} digits") from None
    if math.isnan(v) or math.isinf(v):
        raise InvalidInput(f"{name} must be finite, got {shown(value)}")
    if minimum is not None and v < minimum:
        raise InvalidInput(f"{name} must be >= {minimum}, got {shown(value)}")
    if maximum is not None and v > maximum:
        raise InvalidInput(f"{name} must be <= {maximum}, got {shown(value)}")
    return v


class StageType(str, Enum):
    """A workflow stage is sequential (one core busy) or parallel (all cores busy)."""

    SEQUENTIAL = "sequential"
    PARALLEL = "parallel"

    @classmethod
    def parse(cls, value: object, where: str) -> "StageType":
        """``value`` as a StageType, or InvalidInput naming ``where``."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise InvalidInput(
                f"{where}: stage_type must be 'sequential' or 'parallel', got {value!r}"
            ) from None


@dataclass(frozen=True)
class Job:
    """A rigid batch job: one workflow stage, gang-started with all its cores.

    ``cores`` is the total request; ``nodes`` how many nodes it spans (cores split evenly,
    the remainder on the first nodes). ``mem_mb`` and ``bb_gb`` are its memory and
    node-local burst buffer (SSD) per node it spans, None when it states none; the
    co-allocation check keeps a guest's beside its host's within a node's capacity.
    ``walltime_s`` is the user's limit, which is also what the loss is measured against.
    ``job_class`` groups repeated jobs (for example ``montage/mProject``) so that what the
    learner learns carries over between them.
    """

    job_id: str
    cores: int
    walltime_s: float
    job_class: str
    submit_time: float = 0.0
    stage_type: StageType = StageType.PARALLEL
    tasks: int = 1
    nodes: int = 1
    workflow: str | None = None
    depends_on: tuple[str, ...] = ()
    mem_mb: int | None = None
    user: str | None = None
    bb_gb: int | None = None
    # What a live backend runs; the simulator ignores it.
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        validate_job_id(self.job_id)
        validate_job_class(self.job_class)
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise InvalidInput(f"job {self.job_id}: cores must be an integer >= 1, got {self.cores!r}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= self.cores:
            raise InvalidInput(
                f"job {self.job_id}: nodes must be an integer in 1..cores ({self.cores}), got {self.nodes!r}"
            )
        wt = check_finite(self.walltime_s, f"job {self.job_id}: walltime_s")
        if wt is None or wt <= 0:
            raise InvalidInput(f"job {self.job_id}: walltime_s must be > 0, got {self.walltime_s!r}")
        check_finite(self.submit_time, f"job {self.job_id}: submit_time", minimum=0.0)
        if isinstance(self.tasks, bool) or not isinstance(self.tasks, int) or self.tasks < 1:
            raise InvalidInput(f"job {self.job_id}: tasks must be an integer >= 1, got {self.tasks!r}")
        for name in ("mem_mb", "bb_gb"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise InvalidInput(f"job {self.job_id}: {name} must be an integer >= 0 or "
                                   f"None, got {v!r}")
        object.__setattr__(self, "stage_type", StageType.parse(self.stage_type, f"job {self.job_id}"))
        for dep in self.depends_on:
            validate_job_id(dep, f"job {self.job_id}: dependency")
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        object.__setattr__(self, "command", tuple(self.command))

    def cores_per_node(self) -> list[int]:
        """How the job's cores split over its nodes (the remainder goes to the first nodes)."""
        base, extra = divmod(self.cores, self.nodes)
        return [base + (1 if i < extra else 0) for i in range(self.nodes)]


@dataclass(frozen=True)
class Node:
    """A compute node and its core count."""

    name: str
    cores: int

    def __post_init__(self) -> None:
        validate_job_id(self.name, "node name")
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise InvalidInput(f"node {self.name}: cores must be an integer >= 1, got {self.cores!r}")


@dataclass(frozen=True)
class Allocation:
    """Cores held by one job, per node: ``((node, cores), ...)`` in node order."""

    job_id: str
    cores_by_node: tuple[tuple[str, int], ...]

    @property
    def cores(self) -> int:
        return sum(c for _, c in self.cores_by_node)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.cores_by_node)

    def as_dict(self) -> dict[str, int]:
        return dict(self.cores_by_node)


@dataclass(frozen=True)
class MetricsSample:
    """One measurement of a running job, as the monitoring agent reports it.

    ``cpu_percent`` is relative to the job's allocated cores (100 = all of them busy),
    ``mem_percent`` relative to its memory allocation (or the node's memory when it has
    none). ``tasks_per_s`` is the recent progress rate; ``tasks_total`` may be unknown.
    ``io_mb_s`` is the job's recent file I/O rate (MB read and written per second), None
    where the backend does not measure it.
    """

    job_id: str
    time: float
    cpu_percent: float
    mem_percent: float
    tasks_done: int = 0
    tasks_total: int | None = None
    tasks_per_s: float | None = None
    io_mb_s: float | None = None

    def __post_init__(self) -> None:
        validate_job_id(self.job_id)
        where = f"metrics of job {self.job_id}"
        check_finite(self.io_mb_s, f"{where}: io_mb_s", minimum=0.0, allow_none=True)
        check_finite(self.time, f"{where}: time", minimum=0.0)
        # CPU % may exceed 100 briefly when a job overshoots its allocation without a quota.
        check_finite(self.cpu_percent, f"{where}: cpu_percent", minimum=0.0)
        check_finite(self.mem_percent, f"{where}: mem_percent", minimum=0.0)
        if isinstance(self.tasks_done, bool) or not isinstance(self.tasks_done, int) or self.tasks_done < 0:
            raise InvalidInput(f"{where}: tasks_done must be an integer >= 0, got {self.tasks_done!r}")
        if self.tasks_total is not None and (
            isinstance(self.tasks_total, bool) or not isinstance(self.tasks_total, int) or self.tasks_total < 0
        ):
            raise InvalidInput(f"{where}: tasks_total must be an integer >= 0, got {self.tasks_total!r}")
        check_finite(self.tasks_per_s, f"{where}: tasks_per_s", minimum=0.0, allow_none=True)


@dataclass(frozen=True)
class RunningJob:
    """A job that holds an allocation now.

    A host job runs on its own cores; a guest job runs inside a host's allocation
    (``host_job`` set) with ``quota_fraction`` of its cores' CPU time. For a host,
    ``quota_fraction`` is what it keeps of its own cores (1.0 when alone).
    ``lendable`` False: the job holds cores but must never host a guest (on a real
    cluster, a job that did not opt in to co-scheduling, or one Slurm will not let share).
    """

    job: Job
    allocation: Allocation
    start_time: float
    quota_fraction: float = 1.0
    host_job: str | None = None
    guest_jobs: tuple[str, ...] = ()
    decision_id: int | None = None
    lendable: bool = True

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def is_guest(self) -> bool:
        return self.host_job is not None


@dataclass(frozen=True)
class Outcome:
    """What is known of a finished job: when it started and ended, and how it ended."""

    job_id: str
    start_time: float
    end_time: float
    state: str = "completed"  # completed | failed | cancelled | timeout
    reason: str = ""
    # Its mean CPU use over its life (% of its cores) and peak memory (% of its memory),
    # when the backend knows them (the process accounting at exit): what a job too short
    # to be sampled while it ran used. None: not known.
    cpu_percent: float | None = None
    mem_percent: float | None = None

    @property
    def runtime_s(self) -> float:
        return self.end_time - self.start_time


def freeze_mapping(m: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Turn ``{node: cores}`` into the tuple form Allocation keeps (input order)."""
    return tuple((k, int(v)) for k, v in m.items())


__all__ = [
    "Allocation", "InvalidInput", "Job", "MetricsSample", "Node", "Outcome", "RunningJob",
    "StageType", "check_finite", "freeze_mapping", "validate_job_class", "validate_job_id",
]
