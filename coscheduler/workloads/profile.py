"""What a stage is expected to do when it runs alone: runtime, CPU use, memory, walltime.

Pure arithmetic over the definitions, for the walltime requests of the jobs and for a
discrete-event simulator that models the stage without running it. The live programs
(stage.py) are the truth; tests and ``cosched workload show --measure`` compare the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coscheduler.model import InvalidInput, StageType, check_finite

from .definitions import StageSpec, TaskGroup, WorkflowSpec, get_workflow

# Overheads of the live program on the reference machine (measured, see the report in the
# module's tests): interpreter + numpy start, and per task group forking the workers and
# staging its input files in.
STARTUP_S = 0.25
GROUP_OVERHEAD_S = 0.05
FILL_BYTES_PER_S = 2e9  # first touch + fill of fresh memory (synthetic arrays)
PROCESS_MB = 30.0  # resident memory of one worker process before it allocates anything
# CPU spent inside the waiting time (building, copying and parsing file and message data);
# it adds CPU seconds but, hidden under the waiting floor, no runtime.
IO_CPU_BYTES_PER_S = 2e9
MESSAGE_CPU_S = 0.0004  # per request/reply round trip on loopback, besides the bytes
WALLTIME_FACTOR = 1.75  # users overestimate: request 1.75x the expected runtime...
WALLTIME_MIN_MARGIN_S = 5.0  # ...and at least this much more (process start jitter)


def io_factor(scale: float) -> float:
    """File and message sizes shrink more slowly than time (scale ** 0.25), so files stay
    MB-sized at demo scales while their real I/O time stays within the waiting floor."""
    return min(1.0, scale ** 0.25)


def file_bytes(total_mb: float, files: int, scale: float) -> int:
    """Bytes of each of ``files`` files holding ``total_mb`` at scale 1 (tiny files stay tiny)."""
    if files <= 0:
        return 0
    each = total_mb * 1e6 / files
    return int(max(min(each, 65536.0), each * io_factor(scale)))


def buffer_bytes(group: TaskGroup, scale: float, workers: int) -> int:
    """Working memory of one worker of this group (see TaskGroup)."""
    total = group.buffer_mb * 1e6 * scale
    if group.kind == "memload":
        return int(total / group.tasks)  # one chunk per task
    if group.kind == "memcompute":
        return int(max(2**20, total / workers))
    return int(max(2**20, total))


def split_tasks(groups: tuple[TaskGroup, ...], total: int | None) -> list[int]:
    """Task counts per group: the defined ones, or ``total`` spread proportionally.

    Each group keeps at least one task (its step still happens); the remainder goes to the
    largest fractional parts, so the counts add up to exactly ``total``.
    """
    counts = [g.tasks for g in groups]
    if total is None or total == sum(counts):
        return counts
    if isinstance(total, bool) or not isinstance(total, int) or total < len(groups):
        raise InvalidInput(
            f"tasks must be an integer >= {len(groups)} (one per step of the stage), got {total!r}"
        )
    defined = sum(counts)
    shares = [total * c / defined for c in counts]
    out = [max(1, math.floor(s)) for s in shares]
    while sum(out) > total:  # the max(1, ...) floors can overshoot
        i = max(range(len(out)), key=lambda k: (out[k] - shares[k], out[k]))
        out[i] -= 1
    order = sorted(range(len(out)), key=lambda k: shares[k] - out[k], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class GroupPlan:
    """One task group as it will run: how many tasks, on how many workers, each task's needs."""

    name: str
    kind: str
    tasks: int
    workers: int
    cpu_s: float  # per task: the computation
    wait_s: float  # per task: I/O or message waiting (the floor)
    overhead_s: float
    io_cpu_s: float = 0.0  # per task: CPU used while waiting (copying data)
    overhead_cpu_s: float | None = None  # CPU of the overhead when not overhead_s x 1 core

    @property
    def overhead_cpu(self) -> float:
        return self.overhead_s if self.overhead_cpu_s is None else self.overhead_cpu_s

    @property
    def waves(self) -> int:
        return math.ceil(self.tasks / self.workers)

    def runtime_s(self, cpu_capacity: float = math.inf) -> float:
        """Fluid model: waves of tasks, and never faster than the CPU capacity allows.

        ``cpu_capacity`` is the cores' worth of CPU time the job may use (quota x cores).
        Optimistic: it assumes waiting overlaps perfectly with other tasks' computing.
        """
        alone = self.waves * (self.cpu_s + max(self.wait_s, self.io_cpu_s))
        cpu_bound = (self.tasks * (self.cpu_s + self.io_cpu_s) / cpu_capacity
                     if cpu_capacity > 0 else math.inf)
        overhead = self.overhead_s / min(1.0, cpu_capacity)
        return overhead + max(alone, cpu_bound)


@dataclass(frozen=True)
class StageProfile:
    """Expected behaviour of one stage job running alone on ``cores`` cores at ``scale``.

    cpu_util: CPU time used / (cores x runtime), 0..1. mem_mb: expected peak memory of the
    job's processes. mem_share: the paper's memory use as a share of the allocation for this
    workflow (Table 2), for simulating the paper's cluster rather than this program.
    """

    workflow: str
    stage: str
    job_class: str
    stage_type: StageType
    cores: int
    workers: int
    scale: float
    tasks: int
    runtime_s: float
    cpu_s: float
    cpu_util: float
    mem_mb: float
    mem_share: float
    walltime_s: float
    groups: tuple[GroupPlan, ...]
    # Shares of the runtime alone spent waiting on files (the disk / shared file system)
    # and computing over a working set streamed from memory (larger than the caches), and
    # the files' bytes read and written per second: what the simulator's interference
    # model and the I/O-aware expert see of the stage.
    io_share: float = 0.0
    membw_share: float = 0.0
    io_mb_s: float = 0.0

    def runtime_under_quota(self, quota_fraction: float) -> float:
        """Expected runtime when the job gets ``quota_fraction`` of its cores' CPU time."""
        q = check_finite(quota_fraction, "quota_fraction", minimum=0.0, maximum=1.0)
        if q == 0:
            return math.inf
        capacity = q * self.cores
        return STARTUP_S / min(1.0, capacity) + sum(g.runtime_s(capacity) for g in self.groups)

    def slowdown(self, quota_fraction: float) -> float:
        """Runtime under the quota over the runtime alone (1.0 = not slowed)."""
        return self.runtime_under_quota(quota_fraction) / self.runtime_s

    def as_dict(self) -> dict:
        return {
            "workflow": self.workflow, "stage": self.stage, "job_class": self.job_class,
            "stage_type": self.stage_type.value, "cores": self.cores, "workers": self.workers,
            "scale": self.scale, "tasks": self.tasks, "runtime_s": round(self.runtime_s, 3),
            "cpu_s": round(self.cpu_s, 3), "cpu_util": round(self.cpu_util, 3),
            "mem_mb": round(self.mem_mb, 1), "mem_share": self.mem_share,
            "walltime_s": self.walltime_s, "io_share": round(self.io_share, 3),
            "membw_share": round(self.membw_share, 3), "io_mb_s": round(self.io_mb_s, 3),
        }


def check_scale(scale: object) -> float:
    s = check_finite(scale, "scale", minimum=0.0)
    if s is None or s <= 0:
        raise InvalidInput(f"scale must be > 0, got {scale!r}")
    return s


def check_cores(cores: object) -> int:
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InvalidInput(f"cores must be an integer >= 1, got {cores!r}")
    return cores


def workers_for(stage: StageSpec, cores: int) -> int:
    """A parallel stage runs one worker per core; a sequential stage one worker."""
    return cores if stage.stage_type is StageType.PARALLEL else 1


def message_bytes(group: TaskGroup, scale: float) -> int:
    """Bytes of one message of a ``message`` group at this scale."""
    return max(16, int(group.msg_kb * 1024 * io_factor(scale)))


def _io_cpu_s(g: TaskGroup, scale: float) -> float:
    if g.kind == "message":
        return g.rounds * (MESSAGE_CPU_S + 2 * message_bytes(g, scale) / IO_CPU_BYTES_PER_S)
    moved = (file_bytes(g.mb_in, g.files_in, scale) * g.files_in
             + file_bytes(g.mb_out, g.files_out, scale) * g.files_out)
    return moved / IO_CPU_BYTES_PER_S


def plan_groups(stage: StageSpec, workers: int, scale: float,
                tasks: int | None = None) -> tuple[GroupPlan, ...]:
    counts = split_tasks(stage.groups, tasks)
    plans = []
    for g, n in zip(stage.groups, counts):
        w = min(workers, n)
        overhead = GROUP_OVERHEAD_S
        fill = g.buffer_mb * 1e6 * scale / FILL_BYTES_PER_S
        overhead_cpu = None
        if g.kind == "memload":
            overhead += fill
        elif g.kind == "memcompute":  # each worker fills its own share, all at once
            overhead += fill / w
            overhead_cpu = GROUP_OVERHEAD_S + fill
        plans.append(GroupPlan(g.name, g.kind, n, w, g.cpu_s(scale), g.wait_s(scale), overhead,
                               _io_cpu_s(g, scale), overhead_cpu))
    return tuple(plans)


def _mem_mb(stage: StageSpec, workers: int, scale: float) -> float:
    peak = 0.0
    for g in stage.groups:
        w = min(workers, g.tasks)
        procs = w + (1 if w > 1 else 0)
        if g.kind in ("memload", "memcompute"):
            data = g.buffer_mb * scale
        else:
            files = (file_bytes(g.mb_in, g.files_in, scale) * g.files_in
                     + file_bytes(g.mb_out, g.files_out, scale) * g.files_out) / 1e6
            data = w * (buffer_bytes(g, scale, w) / 1e6 + files)
        peak = max(peak, procs * PROCESS_MB + data)
    return peak


def walltime_request(runtime_s: float) -> float:
    """A user-style overestimate of the runtime, in whole seconds."""
    return float(math.ceil(max(WALLTIME_FACTOR * runtime_s, runtime_s + WALLTIME_MIN_MARGIN_S)))


def stage_profile(workflow: str | WorkflowSpec, stage: str, cores: int, scale: float,
                  tasks: int | None = None) -> StageProfile:
    """Expected behaviour of ``workflow``'s ``stage`` on ``cores`` cores at ``scale``."""
    wf = workflow if isinstance(workflow, WorkflowSpec) else get_workflow(workflow)
    spec = wf.stage(stage)
    cores = check_cores(cores)
    scale = check_scale(scale)
    workers = workers_for(spec, cores)
    groups = plan_groups(spec, workers, scale, tasks)
    runtime = STARTUP_S + sum(g.runtime_s() for g in groups)
    cpu = STARTUP_S + sum(g.overhead_cpu + g.tasks * (g.cpu_s + g.io_cpu_s) for g in groups)
    job_cores = cores if spec.stage_type is StageType.PARALLEL else 1
    io_share, membw_share, io_bytes = _io_and_memory(spec, groups, scale, workers)
    return StageProfile(
        workflow=wf.name, stage=spec.name, job_class=f"{wf.name}/{spec.name}",
        stage_type=spec.stage_type, cores=job_cores, workers=workers, scale=scale,
        tasks=sum(g.tasks for g in groups), runtime_s=runtime, cpu_s=cpu,
        cpu_util=min(1.0, cpu / (job_cores * runtime)),
        mem_mb=_mem_mb(spec, workers, scale), mem_share=wf.paper_mem_util,
        walltime_s=walltime_request(runtime), groups=groups,
        io_share=min(1.0, io_share / runtime), membw_share=min(1.0, membw_share / runtime),
        io_mb_s=io_bytes / runtime / 1e6,
    )


def _io_and_memory(spec: StageSpec, groups: tuple[GroupPlan, ...], scale: float,
                   workers: int) -> tuple[float, float, float]:
    """Seconds (of the runtime alone) waiting on files and streaming memory, and the bytes
    the stage's files move. Messages wait on the network, not the disk: not counted."""
    from .burn import CACHED_LIMIT_BYTES   # burn imports numpy: only when profiling

    io_s = membw_s = io_bytes = 0.0
    for g, plan in zip(spec.groups, groups):
        busy = plan.waves * plan.cpu_s
        if g.kind in ("files", "merge"):
            io_s += plan.waves * plan.wait_s
            moved = (file_bytes(g.mb_in, g.files_in, scale) * g.files_in
                     + file_bytes(g.mb_out, g.files_out, scale) * g.files_out)
            io_bytes += plan.tasks * moved
        if buffer_bytes(g, scale, plan.workers) > CACHED_LIMIT_BYTES:
            membw_s += busy
    return io_s, membw_s, io_bytes


def workflow_profiles(workflow: str, cores: int, scale: float) -> list[StageProfile]:
    """Profiles of every stage of a workflow, in dependency order."""
    wf = get_workflow(workflow)
    return [stage_profile(wf, s.name, cores, scale) for s in wf.stages]
