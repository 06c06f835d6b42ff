"""What should be on this node: the registered jobs, their desired CPU quotas and leases.

Pure data and arithmetic; no file or process is touched here. The agent keeps one
:class:`JobState` per job and asks :func:`job_quota_us` what the kernel should hold.
"""

from __future__ import annotations

import collections
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from coscheduler.happiness import HAPPINESS_DONE
from coscheduler.model import InvalidInput, check_finite, shown, validate_job_class, validate_job_id

from .admission import PID_MAX_LIMIT, Admission, Refused
from .cgroupfs import UnsafePath, validate_cgroup_name

# The kernel refuses CFS quotas under 1 ms per period.
MIN_QUOTA_US = 1000
# Hp when every task is done (infinitely happy); JSON has no infinity, so report a cap:
# the same value the learner stores (coscheduler/happiness.py).
HAPPINESS_CAP = HAPPINESS_DONE
MAX_CORES = 4096
# A thousandth of a core (what the emulated Mesos agent gives a task of 0 cpus): below
# it per-core figures (CPU %) grow without bound (5e-324 cores read Infinity).
MIN_CORES = 0.001
# Counts beyond this lose precision as floats (happiness arithmetic): no job has that many tasks.
MAX_COUNT = 2 ** 53


def validate_agent_job_id(job_id: object) -> str:
    """A job id the agent can use: a valid job id that is also a safe name for its cgroup
    (not a cgroup interface file such as ``tasks`` or ``cgroup.procs``)."""
    validate_job_id(job_id)
    try:
        return validate_cgroup_name(job_id, "job_id")
    except UnsafePath as e:
        raise InvalidInput(str(e)) from None


@dataclass(frozen=True)
class JobSpec:
    """A job as registered: its processes, allocation and what happiness needs.

    ``cores`` may be fractional (an emulated node can hand out parts of a core).
    ``source`` says how the agent learnt of the job: ``pids`` (POST /v1/jobs),
    ``slurm`` (found in a batch-system cgroup) or ``adopted`` (left by a previous run).
    """

    job_id: str
    cores: float
    pids: tuple[int, ...] = ()
    walltime_s: float | None = None
    start_time: float | None = None
    tasks_total: int | None = None
    job_class: str | None = None
    progress_file: str | None = None
    mem_mb: float | None = None
    source: str = "pids"
    batch_cgroup: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["pids"] = list(self.pids)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobSpec":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["pids"] = tuple(known.get("pids", ()))
        return cls(**known)


def _int_or_none(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise InvalidInput(f"{name} must be an integer in 0..2**53, got {str(value)[:40]}")
    return value


def check_pids(value: object, *, admission: "Admission | None" = None) -> tuple[int, ...]:
    """A list of process ids; with ``admission``, every pid must pass the agent's rule
    (monitoring.admission), which names the rule that refused it."""
    if not isinstance(value, (list, tuple)):
        raise InvalidInput(f"pids must be a list of process ids, got {shown(value)}")
    if len(value) > 4096:
        raise InvalidInput("pids: more than 4096 processes in one registration")
    out = []
    for p in value:
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise InvalidInput(f"pids: {shown(p)} is not a valid process id (integers 1..{PID_MAX_LIMIT})")
        if admission is not None:
            admission.check(p)
        out.append(p)
    return tuple(dict.fromkeys(out))


def progress_path(value: object, progress_dir: Path, job_id: str) -> str:
    """The job's progress file: the given path if it lies inside ``progress_dir``, else
    ``<progress_dir>/<job_id>.json``. Symlinks are resolved before the check."""
    base = Path(os.path.realpath(progress_dir))
    if value is None:
        return str(base / f"{job_id}.json")
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidInput(f"progress_file must be a path string, got {shown(value)}")
    p = Path(value)
    if not p.is_absolute():
        p = base / p
    # Resolve the folder (which must exist) but keep the file name: the file may not exist yet.
    resolved = Path(os.path.realpath(p.parent)) / p.name
    if p.name in ("", ".", "..") or base not in resolved.parents:
        raise InvalidInput(
            f"progress_file {shown(value)} is outside the agent's progress directory {base}"
        )
    return str(resolved)


def parse_registration(body: object, progress_dir: Path, *, admission: "Admission | None" = None,
                       now: float | None = None) -> JobSpec:
    """Validate a registration body (the JSON of POST /v1/jobs, or a job read back from the
    state file) into a JobSpec; with ``admission`` every pid must pass the agent's rule."""
    if not isinstance(body, Mapping):
        raise InvalidInput(f"registration must be a JSON object, got {type(body).__name__}")
    allowed = {"job_id", "pids", "cores", "walltime_s", "start_time", "tasks_total",
               "job_class", "progress_file", "mem_mb"}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise InvalidInput(f"registration: unknown field(s) {unknown}; known: {sorted(allowed)}")
    job_id = validate_agent_job_id(body.get("job_id"))
    if "pids" not in body:
        raise InvalidInput(f"job {job_id}: pids is required (a list; [] to start the job in "
                           "its cgroup afterwards, see cgroup_procs)")
    try:
        pids = check_pids(body["pids"], admission=admission)
    except Refused as e:
        raise e.at(f"job {job_id}: ") from None
    except InvalidInput as e:
        raise InvalidInput(f"job {job_id}: {e}") from None
    cores = check_finite(body.get("cores"), f"job {job_id}: cores")
    if cores is None or not MIN_CORES <= cores <= MAX_CORES:
        raise InvalidInput(f"job {job_id}: cores must be >= {MIN_CORES} and <= {MAX_CORES}, "
                           f"got {shown(body.get('cores'))}")
    walltime = check_finite(body.get("walltime_s"), f"job {job_id}: walltime_s", allow_none=True)
    if walltime is not None and walltime <= 0:
        raise InvalidInput(f"job {job_id}: walltime_s must be > 0, got {walltime!r}")
    start = check_finite(body.get("start_time"), f"job {job_id}: start_time", minimum=0.0,
                         allow_none=True)
    if start is None and walltime is not None:
        start = time.time() if now is None else now
    mem = check_finite(body.get("mem_mb"), f"job {job_id}: mem_mb", allow_none=True)
    if mem is not None and mem < 1:
        raise InvalidInput(f"job {job_id}: mem_mb must be >= 1, got {mem!r}")
    job_class = body.get("job_class")
    if job_class is not None:
        validate_job_class(job_class)
    return JobSpec(
        job_id=job_id, cores=cores, pids=pids, walltime_s=walltime, start_time=start,
        tasks_total=_int_or_none(body.get("tasks_total"), f"job {job_id}: tasks_total"),
        job_class=job_class, progress_file=progress_path(body.get("progress_file"), progress_dir, job_id),
        mem_mb=mem,
    )


def check_fraction(value: object) -> float:
    f = check_finite(value, "cpu_fraction", minimum=0.0, maximum=1.0)
    assert f is not None
    return f


def job_quota_us(fraction: float | None, cores: float, cpu_per_core: float, period_us: int,
                 node_quota_us: int | None, cap_full: bool) -> int | None:
    """What the kernel should hold for a job, in microseconds per period (None = no limit).

    quota = fraction x cores x cpu_per_core x period, at least the kernel's 1 ms, never
    above the node's own quota (a child above its parent is refused by the kernel).
    ``fraction`` None means the job has its full quota: its whole allocation when
    ``cap_full`` (an emulated node, where no cpuset keeps a job on its cores), else no limit.
    """
    if fraction is None:
        if not cap_full:
            return None
        fraction = 1.0
    q = max(MIN_QUOTA_US, int(round(fraction * cores * cpu_per_core * period_us)))
    if node_quota_us is not None:
        q = min(q, node_quota_us)
    return q


def node_quota_us(node_cpus: float | None, period_us: int) -> int | None:
    if node_cpus is None:
        return None
    return max(MIN_QUOTA_US, int(round(node_cpus * period_us)))


def finite_happiness(hp: float | None) -> float | None:
    if hp is None:
        return None
    return HAPPINESS_CAP if math.isinf(hp) or hp > HAPPINESS_CAP else hp


@dataclass
class JobState:
    """The agent's live record of one job (mutated under the agent's lock)."""

    spec: JobSpec
    registered_at: float
    status: str = "running"  # running | finished | released
    fraction: float | None = None  # None: full quota
    role: str | None = None  # "host", "guest" or None while it lends nor borrows (roles.py)
    kernel_role: str = "?"  # the role its cgroup's files were last brought to ("" none, "?" unknown)
    quota_us: int | None = None  # what the kernel should hold now
    lease_deadline: float | None = None  # wall clock, for display
    quota_reason: str = "registered: full quota"
    finished_at: float | None = None
    members: set[int] = field(default_factory=set)
    sample: dict[str, Any] = field(default_factory=dict)
    events: collections.deque = field(default_factory=lambda: collections.deque(maxlen=20))
    apply_error: str | None = None
    seen_processes: bool = False  # a job registered with no pids waits for its first one
    # Its mean CPU use over its life, read from its cgroup's counter when it finished or was
    # unregistered (``JobObservation._life_cpu_percent``); None: not known.
    life_cpu_percent: float | None = None
    # Discovered in Slurm's cgroups before its cores could be read: 1 until they are
    # (restore.py reads them again at each tick; a registration that gives cores ends it).
    cores_guessed: bool = False
    # Each registered pid's start in clock ticks since boot (``collect.ProcStat.start_ticks``)
    # when it was registered: a registered pid is followed only while the process holding
    # it is that one. Once it ends the kernel may give its number to anyone's new process.
    pid_starts: dict[int, int] = field(default_factory=dict)

    def event(self, now: float, what: str) -> None:
        self.events.append({"time": round(now, 3), "event": what})
