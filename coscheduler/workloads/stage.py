"""The stage program: runs one workflow stage's tasks for real and reports progress.

    python -m coscheduler.workloads.stage --workflow montage --stage mProject \\
        --tasks 198 --workers 8 --scale 0.05 [--workdir D] [--part K/N] [--report]

Runs the stage's task groups in order, each over ``--workers`` processes, and after every
finished task writes ``{"done", "total"}`` with coscheduler.progress.write_progress (to
$COSCHED_PROGRESS_FILE, or ``--progress-file``). Progress counts work, not tasks: a task
adds its group's weight (``task_weights``), so a stage whose first tasks are its heaviest
does not look late to Hp (counted in tasks, a Montage mProject on pace read Hp 0.1-0.4).
Files go to a private temporary directory removed at the end; with ``--workdir`` they go
to a scratch folder inside it (also removed) and only hand-offs between stages (BLAST's
hit tables) stay in the workdir. SIGTERM (a walltime kill) cleans up too. ``--report``
prints one JSON line: elapsed and CPU seconds, peak memory, tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coscheduler.model import InvalidInput
from coscheduler.outputs import OutputError, make_output_dir
from coscheduler.progress import ENV_VAR, check_progress_file, write_progress

from .definitions import get_workflow
from .pool import TaskFailed, run_group
from .profile import check_cores, check_scale, split_tasks, workers_for
from .tasks import StageContext, make_runner, remove_tree


@dataclass(frozen=True)
class StageReport:
    workflow: str
    stage: str
    tasks: int
    workers: int
    scale: float
    elapsed_s: float
    cpu_s: float
    max_rss_mb: float

    @property
    def cpu_util(self) -> float:
        """CPU time over (workers x elapsed): the share of the job's cores it kept busy."""
        return self.cpu_s / (self.workers * self.elapsed_s) if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "workflow": self.workflow, "stage": self.stage, "tasks": self.tasks,
            "workers": self.workers, "scale": self.scale,
            "elapsed_s": round(self.elapsed_s, 3), "cpu_s": round(self.cpu_s, 3),
            "cpu_util": round(self.cpu_util, 3), "max_rss_mb": round(self.max_rss_mb, 1),
        }


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _max_rss_mb() -> float:
    # ru_maxrss is in KB on Linux; children's is the largest single child.
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024.0


def part_tasks(count: int, part: tuple[int, int] | None) -> list[int]:
    """The task indices of one part of a job of several parts (round robin), or all."""
    if part is None:
        return list(range(count))
    k, n = part
    return list(range(k, count, n))


def parse_part(value: str | None, env: dict | None = None) -> tuple[int, int] | None:
    """``K/N`` (``--part``), else $COSCHED_PART and $COSCHED_PARTS (what the Mesos framework
    gives each task of a job that spans several agents); None for a job of one part."""
    env = os.environ if env is None else env
    if value is None and env.get("COSCHED_PARTS"):
        value = f"{env.get('COSCHED_PART', '')}/{env['COSCHED_PARTS']}"
    if value is None:
        return None
    k, sep, n = value.partition("/")
    if not sep or not k.isdigit() or not n.isdigit() or not 0 <= int(k) < int(n):
        raise InvalidInput(f"part {value!r}: give K/N with 0 <= K < N")
    return None if int(n) == 1 else (int(k), int(n))


def task_weights(groups) -> list[int]:
    """Each group's progress units per task: its time per task over the stage's lightest
    group's, rounded (1 for every task of a one-group stage). Montage's mProject: 103 for
    an mProject task, 1 for an mDiffFit."""
    lightest = min(g.task_s for g in groups)
    if lightest <= 0:
        return [1] * len(groups)
    return [max(1, round(g.task_s / lightest)) for g in groups]


def run_stage(workflow: str, stage: str, *, workers: int, scale: float, tasks: int | None = None,
              workdir: str | os.PathLike | None = None,
              progress_file: str | os.PathLike | None = None,
              core_speed: float = 1.0, part: tuple[int, int] | None = None) -> StageReport:
    """Run one stage for real (see the module docstring). Raises InvalidInput, TaskFailed.
    With ``part`` (K, N) only every N-th task from the K-th runs: one part of a job that
    spans several nodes, each part on its own node with its own workers."""
    wf = get_workflow(workflow)
    spec = wf.stage(stage)
    workers = check_cores(workers)
    scale = check_scale(scale)
    counts = split_tasks(spec.groups, tasks)
    mine = [part_tasks(n, part) for n in counts]
    tasks_mine = sum(len(m) for m in mine)
    weights = task_weights(spec.groups)
    total = sum(len(m) * w for m, w in zip(mine, weights))

    if not 0.0 < core_speed <= 1.0:
        raise InvalidInput(f"core_speed must lie in (0, 1], got {core_speed!r}")
    target = progress_file if progress_file is not None else os.environ.get(ENV_VAR)
    if target:   # never over another file, a FIFO or a device (cosched progress --file too)
        check_progress_file(target)
    private = workdir is None
    try:
        if private:
            base = Path(tempfile.mkdtemp(prefix=f"cosched-{wf.name}-{spec.name}-"))
        else:
            base = make_output_dir(workdir)
        scratch = base if private else Path(tempfile.mkdtemp(prefix=f".{wf.name}-{spec.name}-",
                                                             dir=base))
    except OutputError:
        raise
    except OSError as exc:
        where = workdir if workdir is not None else tempfile.gettempdir()
        raise OutputError(f"cannot use work folder {where}: {exc.strerror or exc}") from None
    ctx = StageContext(wf.name, spec.name, scale, base, scratch, core_speed)

    done = 0

    def reporter(weight: int):
        def report(_task: int) -> None:
            nonlocal done
            done += weight
            write_progress(done, total, progress_file)
        return report

    t0 = time.perf_counter()
    cpu0 = _cpu_seconds()
    try:
        write_progress(0, total, progress_file)
        for group, n, indices, weight in zip(spec.groups, counts, mine, weights):
            if not indices:
                continue
            runner = make_runner(group, ctx, n, min(workers, len(indices)))
            run_group(runner, indices, min(workers, len(indices)), reporter(weight))
    finally:
        remove_tree(scratch)
    return StageReport(wf.name, spec.name, tasks_mine, workers, scale,
                       time.perf_counter() - t0, _cpu_seconds() - cpu0, _max_rss_mb())


def _terminate(signum: int, _frame: object) -> None:
    # Turn SIGTERM into SystemExit so that the finally blocks remove the files.
    raise SystemExit(128 + signum)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m coscheduler.workloads.stage",
        description="Run one workflow stage's tasks for real and report progress.")
    p.add_argument("--workflow", required=True)
    p.add_argument("--stage", required=True)
    p.add_argument("--tasks", type=int, default=None,
                   help="number of tasks (default: the stage's own count)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: 1; use the job's cores for a parallel stage)")
    p.add_argument("--scale", type=float, default=1.0, help="work per task factor (default 1)")
    p.add_argument("--workdir", default=None, help="shared working directory (default: private temp)")
    p.add_argument("--progress-file", default=None,
                   help="progress file (default: $COSCHED_PROGRESS_FILE)")
    p.add_argument("--core-speed", type=float, default=1.0,
                   help="what one core is worth in reference cores, in (0, 1] (emulated nodes): "
                        "CPU work shrinks by it so the stage keeps its profile (default 1)")
    p.add_argument("--part", default=None, metavar="K/N",
                   help="run part K of N of the stage's tasks (default: $COSCHED_PART/"
                        "$COSCHED_PARTS when set, as the Mesos framework sets them for a job "
                        "that spans several agents; else all)")
    p.add_argument("--report", action="store_true", help="print a JSON line with measurements")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    workers = args.workers
    if workers is None:
        workers = 1
    try:
        part = parse_part(args.part)
        cores = os.environ.get("COSCHED_CORES", "")
        if part is not None and cores.isdigit() and int(cores) >= 1:
            workers = min(workers, int(cores))   # this part's own cores
        spec = get_workflow(args.workflow).stage(args.stage)
        if workers_for(spec, check_cores(workers)) != workers:
            print(f"stage: {args.workflow}/{args.stage} is sequential: running 1 worker, "
                  f"not {workers}", file=sys.stderr)
            workers = 1
        rep = run_stage(args.workflow, args.stage, workers=workers, scale=args.scale,
                        tasks=args.tasks, workdir=args.workdir, progress_file=args.progress_file,
                        core_speed=args.core_speed, part=part)
    except InvalidInput as e:
        print(f"stage: {e}", file=sys.stderr)
        return 2
    except TaskFailed as e:
        print(f"stage {args.workflow}/{args.stage} failed: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if args.report:
        print(json.dumps(rep.as_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
