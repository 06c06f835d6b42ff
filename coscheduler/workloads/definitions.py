"""The paper's four workflows as data: stages, task groups, and what each task burns.

Every workflow stage is its own job (paper section 3: one job per stage, so the happiness
metric sees one application). A stage runs its task groups one after the other (a group's
tasks depend on the previous group's, as in the DAG); inside a group, tasks are independent
and spread over the stage's workers (all its cores for a parallel stage, one for a
sequential stage).

Numbers are "at scale 1, on one reference core" (see burn.py). A task takes ``task_s``
seconds when it runs alone: ``cpu_frac`` of that is arithmetic, the rest is I/O or message
waiting. ``--scale`` multiplies every task's seconds and memory (file and message sizes by
scale ** 0.25, so files stay MB-sized at demo scales); task counts never change with scale,
so progress looks the same at any scale.

Where the numbers come from:
- Montage and BLAST: from the measured WfCommons instances (summary.EMBEDDED): task
  categories, their order, per-task runtimes, file counts and sizes. Both instances are small
  (a 1-degree mosaic, a "small" BLAST run, about 6 min of work each), so the workflows here
  are larger: parallel categories get more tasks (``TASKS_FACTOR``: more tiles, more query
  chunks) and BLAST's chunks search a larger database (``BLAST_TASK_TIME_FACTOR``; the
  paper's is over 6 GB); sequential categories keep the instance's per-task times. A whole
  workflow is 10-40 min on one core at scale 1, so 0.5-2 min at scale 0.05.
  Montage's CPU share is capped at 40 %: the instance ran on local disks where mProject was
  CPU-bound, while the paper's Montage on a shared file system used 21-45 % of its cores
  (Table 2), and that I/O-bound behaviour is what co-scheduling exploits.
- Statistics and Synthetic: no measured instance exists; the structure follows the paper's
  section 4.2 and the CPU/memory shares its Table 2 (Slurm column).
- Calibration to the paper's evaluation (section 4): there every stage is a Slurm job that
  holds its workflow's cores (8-64) for its whole duration, so a sequential stage keeps one
  of them busy. The factors above and the hand-made workflows' sizes are chosen so that,
  in that geometry and alone (space sharing), each workflow kind's CPU use of its held
  cores lies in Table 2's Slurm range (Montage 21-45 %, BLAST 91-96 %, Statistics
  10-26 %, Synthetic 99 %) and the kinds' mean total runtimes keep the paper's proportions
  (Montage 0.32 : BLAST 0.71 : Statistics 0.70 : Synthetic 0.49 h); so sequential steps are
  short next to the parallel ones (Synthetic's load is 1 % of its workflow's time).
  ``tests/test_workloads_definitions.py`` checks both; docs/simulator.md gives the figures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coscheduler.model import InvalidInput, StageType

from .summary import EMBEDDED

# Parallel categories of the measured instances get this many times their tasks.
TASKS_FACTOR: dict[str, int] = {"montage": 2, "blast": 3}
# BLAST's per-chunk search time over the instance's (a larger database).
BLAST_TASK_TIME_FACTOR = 1.9
MONTAGE_CPU_CAP = 0.40

KINDS = ("files", "merge", "message", "memload", "memcompute")


@dataclass(frozen=True)
class TaskGroup:
    """Tasks of one kind inside a stage (a WfCommons category, or a hand-made step).

    kind:
      files      read ``files_in`` inputs, compute, write ``files_out`` outputs, in ``rounds``
                 interleaved rounds; waiting time is real file I/O stretched to the floor.
      merge      read every output a previous stage handed off (or ``stand_ins`` files of
                 ``mb_in`` MB each when there are none), sort-merge them into one file.
      message    ``rounds`` of compute + a request/reply of ``msg_kb`` to a peer worker over
                 loopback TCP; waiting time is the round trip stretched to the floor.
      memload    allocate and fill ``1/tasks`` of a ``buffer_mb`` array and compute on it;
                 chunks are kept, so memory grows sequentially to ``buffer_mb``.
      memcompute each worker holds ``buffer_mb / workers`` and streams additions and
                 multiplications over it.
    ``buffer_mb`` for files/merge/message is each worker's working memory (the burn buffer:
    BLAST's in-memory database shard, Montage's image buffer).
    """

    name: str
    kind: str
    tasks: int
    task_s: float
    cpu_frac: float
    files_in: int = 0
    mb_in: float = 0.0
    files_out: int = 0
    mb_out: float = 0.0
    fsync_outputs: int = 0
    buffer_mb: float = 1.0
    rounds: int = 1
    msg_kb: float = 0.0
    handoff_out: str | None = None
    handoff_in: str | None = None
    stand_ins: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        where = f"task group {self.name!r}"
        if self.kind not in KINDS:
            raise InvalidInput(f"{where}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.tasks < 1 or self.rounds < 1:
            raise InvalidInput(f"{where}: tasks and rounds must be >= 1")
        if not self.task_s > 0 or not 0.0 <= self.cpu_frac <= 1.0:
            raise InvalidInput(f"{where}: task_s must be > 0 and cpu_frac in [0, 1]")

    def cpu_s(self, scale: float) -> float:
        return self.task_s * scale * self.cpu_frac

    def wait_s(self, scale: float) -> float:
        return self.task_s * scale * (1.0 - self.cpu_frac)


@dataclass(frozen=True)
class StageSpec:
    name: str
    stage_type: StageType
    groups: tuple[TaskGroup, ...]

    @property
    def tasks(self) -> int:
        return sum(g.tasks for g in self.groups)


@dataclass(frozen=True)
class WorkflowSpec:
    """A workflow: its stages in dependency order, and the paper's measured profile.

    ``paper_cpu_util`` and ``paper_mem_util`` are Table 2's Slurm column (64-core cluster):
    CPU and memory use as a share of the allocation, for simulations of the paper's cluster.
    """

    name: str
    description: str
    stages: tuple[StageSpec, ...]
    paper_cpu_util: float
    paper_mem_util: float
    paper_runtime_h: float
    paper_cores: tuple[int, ...] = field(default=(8, 16, 32, 64))

    def stage(self, name: str) -> StageSpec:
        for s in self.stages:
            if s.name == name:
                return s
        raise InvalidInput(
            f"workflow {self.name!r} has no stage {name!r}; stages: {[s.name for s in self.stages]}"
        )


def _measured(workflow: str, category: str) -> dict:
    for c in EMBEDDED[workflow]["categories"]:
        if c["category"] == category:
            return c
    raise KeyError(f"{workflow}/{category} not in the embedded WfCommons summary")


def _from_instance(workflow: str, category: str, *, parallel: bool, cpu_cap: float = 1.0,
                   time_factor: float = 1.0, **overrides) -> TaskGroup:
    """A task group sized from a measured category (see the module docstring)."""
    m = _measured(workflow, category)
    scaled = parallel and m["tasks"] > 1
    tasks = m["tasks"] * TASKS_FACTOR[workflow] if scaled else m["tasks"]
    task_s = m["runtime_s"] * (time_factor if scaled else 1.0)
    fields = dict(
        name=category, kind="files", tasks=tasks, task_s=task_s,
        cpu_frac=round(min(cpu_cap, m["avg_cpu_pct"] / 100.0), 3),
        files_in=round(m["files_in"]), mb_in=m["mb_in"],
        files_out=round(m["files_out"]), mb_out=m["mb_out"],
        fsync_outputs=1 if m["files_out"] >= 1 else 0,
        buffer_mb=max(1.0, m["memory_mb"] or 1.0),
        source=f"WfCommons {EMBEDDED[workflow]['instance']}: {category} x{m['tasks']}, "
               f"{m['runtime_s']} s, {m['avg_cpu_pct']} % CPU",
    )
    fields.update(overrides)
    return TaskGroup(**fields)


def _montage() -> WorkflowSpec:
    # Nine Montage steps (mViewer replaces mShrink + mJPEG in Montage 6), grouped as the
    # paper groups them: two parallel and two sequential stages.
    def g(cat: str, parallel: bool, **kw) -> TaskGroup:
        return _from_instance("montage", cat, parallel=parallel, cpu_cap=MONTAGE_CPU_CAP,
                              rounds=3 if parallel else 1, **kw)

    return WorkflowSpec(
        name="montage",
        description="I/O-bound sky mosaic: many MB-sized files, light CPU (Montage 2MASS)",
        stages=(
            StageSpec("mProject", StageType.PARALLEL, (g("mProject", True), g("mDiffFit", True))),
            StageSpec("mBgModel", StageType.SEQUENTIAL, (g("mConcatFit", False), g("mBgModel", False))),
            StageSpec("mBackground", StageType.PARALLEL, (g("mBackground", True),)),
            StageSpec("mAdd", StageType.SEQUENTIAL,
                      (g("mImgtbl", False), g("mAdd", False), g("mViewer", False))),
        ),
        paper_cpu_util=0.45, paper_mem_util=0.10, paper_runtime_h=0.35,
    )


def _blast() -> WorkflowSpec:
    # The instance's blastall reads a 5 GB database; here each map worker keeps a database
    # shard in memory (buffer_mb, scaled) and searches it, and writes a hit table that the
    # reduce stage merges (handed off through a shared --workdir, else stand-ins). Only the
    # merged result is fsync'ed: BLAST is CPU-bound, its hit tables are small.
    map_tasks = _measured("blast", "blastall")["tasks"] * TASKS_FACTOR["blast"]
    return WorkflowSpec(
        name="blast",
        description="CPU-bound sequence search: parallel map over query chunks, sequential merge",
        stages=(
            StageSpec("blastall", StageType.PARALLEL, (
                _from_instance("blast", "split_fasta", parallel=False, files_in=1, mb_in=0.5,
                               files_out=4, mb_out=0.5, fsync_outputs=0),
                _from_instance("blast", "blastall", parallel=True, files_in=1, mb_in=0.05,
                               time_factor=BLAST_TASK_TIME_FACTOR,
                               files_out=1, mb_out=0.5, buffer_mb=256.0, rounds=2,
                               fsync_outputs=0, handoff_out="blast-hits"),
            )),
            StageSpec("cat_blast", StageType.SEQUENTIAL, (
                _from_instance("blast", "cat_blast", parallel=False, kind="merge",
                               files_in=0, mb_in=0.5, files_out=1, mb_out=0.5,
                               handoff_in="blast-hits", stand_ins=map_tasks),
                _from_instance("blast", "cat", parallel=False, files_in=1, mb_in=0.1,
                               files_out=1, mb_out=0.1),
            )),
        ),
        paper_cpu_util=0.96, paper_mem_util=0.44, paper_runtime_h=0.71,
    )


def _statistics() -> WorkflowSpec:
    # Paper 4.2: "two stages composed of two sequential and two parallel sub-stages"; most of
    # the time goes to exchanging messages among parallel tasks (so the sequential load and
    # merge are short); 10-26 % CPU, 1-5 % memory.
    src = "hand-made from the paper, section 4.2 and Table 2"
    return WorkflowSpec(
        name="statistics",
        description="I/O- and message-bound statistics over a household power dataset",
        stages=(
            StageSpec("load", StageType.SEQUENTIAL, (TaskGroup(
                "load", "files", tasks=4, task_s=1.0, cpu_frac=0.30, files_in=1, mb_in=8.0,
                files_out=1, mb_out=4.0, fsync_outputs=1, buffer_mb=8.0, source=src),)),
            StageSpec("partial", StageType.PARALLEL, (TaskGroup(
                "partial", "message", tasks=128, task_s=7.0, cpu_frac=0.22, buffer_mb=4.0,
                rounds=8, msg_kb=256.0, source=src),)),
            StageSpec("merge", StageType.SEQUENTIAL, (TaskGroup(
                "merge", "files", tasks=4, task_s=1.0, cpu_frac=0.30, files_in=4, mb_in=4.0,
                files_out=1, mb_out=1.0, fsync_outputs=1, buffer_mb=4.0, source=src),)),
            StageSpec("aggregate", StageType.PARALLEL, (TaskGroup(
                "aggregate", "message", tasks=128, task_s=8.0, cpu_frac=0.18, buffer_mb=4.0,
                rounds=8, msg_kb=64.0, source=src),)),
        ),
        paper_cpu_util=0.26, paper_mem_util=0.05, paper_runtime_h=0.69,
    )


def _synthetic() -> WorkflowSpec:
    # Paper 4.2: loads memory with floating point numbers (sequential), then additions and
    # multiplications on them (parallel); 99 % CPU and over 90 % of the memory (Table 2).
    # A sequential stage holding its workflow's 16-64 cores must be short for the workflow
    # to use 99 % of them: the load fills 256 MB at scale 1. A job's memory does not
    # outlive it, so the parallel stage builds its own 8192 MB (2^30 float64) array, each
    # worker its share, before computing on it.
    src = "hand-made from the paper, section 4.2 and Table 2"
    return WorkflowSpec(
        name="synthetic",
        description="memory- and CPU-bound: sequential memory load, then parallel arithmetic",
        stages=(
            StageSpec("load", StageType.SEQUENTIAL, (TaskGroup(
                "load", "memload", tasks=8, task_s=0.03, cpu_frac=1.0, buffer_mb=256.0,
                source=src),)),
            StageSpec("compute", StageType.PARALLEL, (TaskGroup(
                "compute", "memcompute", tasks=128, task_s=19.5, cpu_frac=1.0, buffer_mb=8192.0,
                source=src),)),
        ),
        paper_cpu_util=0.99, paper_mem_util=0.95, paper_runtime_h=0.49,
        paper_cores=(16, 32, 64),
    )


WORKFLOWS: dict[str, WorkflowSpec] = {
    w.name: w for w in (_montage(), _blast(), _statistics(), _synthetic())
}


def get_workflow(name: str) -> WorkflowSpec:
    """The workflow called ``name``; a clear error listing the valid names otherwise."""
    try:
        return WORKFLOWS[name]
    except (KeyError, TypeError):
        raise InvalidInput(
            f"unknown workflow {name!r}: choose one of {', '.join(WORKFLOWS)}"
        ) from None
