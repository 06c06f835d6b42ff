"""Workflows as jobs: one Job per stage, chained by dependencies, with a runnable command.

``workflow_jobs`` turns one workflow at a core count and scale into its stage jobs;
``paper_mix`` is the paper's 15-workflow evaluation workload (section 4.4); ``small_mix`` a
one-of-each mix for a live demo on a small machine with emulated nodes.
"""

from __future__ import annotations

import math
import os
import sys

from coscheduler.model import InvalidInput, Job, check_finite, validate_job_id

from .definitions import WORKFLOWS, get_workflow
from .profile import STARTUP_S, check_cores, check_scale, stage_profile, walltime_request

# Paper, section 4.4: 4 Montage, 4 BLAST, 4 Statistics at 8/16/32/64 cores; 3 Synthetic at
# 16/32/64 cores; all queued at t = 0.
PAPER_MIX: tuple[tuple[str, int], ...] = tuple(
    (wf, cores) for wf in ("montage", "blast", "statistics", "synthetic")
    for cores in WORKFLOWS[wf].paper_cores
)

# The live demo: 4 emulated nodes of 2 cores on a 2-core host; one workflow of each kind.
# At DEMO_SCALE the four hold about 60 CPU-seconds of work in total (most of it BLAST's and
# Synthetic's), so a whole run takes about a minute on two real cores. (0.02 until the
# workloads were calibrated to the paper's Table 2, which made BLAST and Synthetic ~2x larger.)
DEMO_SCALE = 0.01
DEMO_NODES = 4
DEMO_NODE_CORES = 2
DEMO_CORES: dict[str, int] = {"montage": 2, "blast": 4, "statistics": 2, "synthetic": 4}
# What a sequential stage asks for: one core (a user who sized each step), or its workflow's
# cores (the paper's geometry: Slurm holds the workflow's allocation for every stage).
SEQUENTIAL_CORES = ("one", "workflow")


def stage_command(workflow: str, stage: str, tasks: int, workers: int, scale: float,
                  workdir: str | None = None, core_speed: float = 1.0) -> tuple[str, ...]:
    """The argv that runs one stage program with this interpreter."""
    argv = [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", workflow,
            "--stage", stage, "--tasks", str(tasks), "--workers", str(workers),
            "--scale", repr(float(scale))]
    if core_speed != 1.0:
        argv += ["--core-speed", repr(float(core_speed))]
    if workdir is not None:
        argv += ["--workdir", workdir]
    return tuple(argv)


def workflow_jobs(workflow: str, cores: int, scale: float, submit_time: float = 0.0,
                  id_prefix: str | None = None, *, workdir: str | os.PathLike | None = None,
                  node_cores: int | None = None, core_speed: float = 1.0,
                  user: str | None = None, sequential_cores: str = "one") -> list[Job]:
    """One Job per stage of ``workflow``, each depending on the previous stage's job.

    Parallel stages ask for ``cores`` cores, sequential ones for one, or with
    ``sequential_cores="workflow"`` for the workflow's cores too (the paper's geometry: a
    workflow's allocation held for each stage, a sequential stage's program using one of
    its cores; the idle CPU co-scheduling exists for). Job ids are
    ``{id_prefix}.{stage}`` (default prefix ``{workflow}-{cores}``), classes
    ``{workflow}/{stage}``, walltimes a user-style overestimate of the expected runtime.
    ``workdir``: a folder the stages share (under ``workdir/{id_prefix}``), so BLAST's merge
    reads the map's real outputs; without it every stage works in its own temp folder.
    ``node_cores``: cores per node, to set how many nodes a job spans (default one node).
    ``core_speed``: what one of the job's cores is worth in reference cores (emulated nodes
    that claim more cores than the host has are slower): the stage program shrinks its CPU
    work by it, so the stage keeps its CPU-to-wait profile on such cores.
    """
    wf = get_workflow(workflow)
    cores = check_cores(cores)
    scale = check_scale(scale)
    prefix = validate_job_id(id_prefix if id_prefix is not None else f"{wf.name}-{cores}",
                             "id_prefix")
    if node_cores is not None and (isinstance(node_cores, bool) or not isinstance(node_cores, int)
                                   or node_cores < 1):
        raise InvalidInput(f"node_cores must be an integer >= 1, got {node_cores!r}")
    if sequential_cores not in SEQUENTIAL_CORES:
        raise InvalidInput(f"sequential_cores must be one of {', '.join(SEQUENTIAL_CORES)}, "
                           f"got {sequential_cores!r}")
    speed = check_finite(core_speed, "core_speed", minimum=0.0, maximum=1.0)
    if not speed:
        raise InvalidInput(f"core_speed must be in (0, 1], got {core_speed!r}")
    shared = os.path.join(os.fspath(workdir), prefix) if workdir is not None else None
    jobs: list[Job] = []
    previous: str | None = None
    for spec in wf.stages:
        prof = stage_profile(wf, spec.name, cores, scale)
        job_id = f"{prefix}.{spec.name}"
        # (the program is the same either way: only what the job asks for changes)
        held = cores if sequential_cores == "workflow" else prof.cores
        nodes = 1 if node_cores is None else math.ceil(held / node_cores)
        jobs.append(Job(
            job_id=job_id,
            cores=held,
            nodes=nodes,
            # CPU work shrinks with the core speed (the stage keeps its profile); only the
            # interpreter's start-up, a fixed amount of CPU, runs slower.
            walltime_s=prof.walltime_s if speed == 1.0 else walltime_request(
                prof.runtime_s + STARTUP_S * (1.0 / speed - 1.0)),
            job_class=prof.job_class,
            submit_time=submit_time,
            stage_type=prof.stage_type,
            tasks=prof.tasks,
            workflow=prefix,
            depends_on=(previous,) if previous else (),
            mem_mb=max(1, math.ceil(prof.mem_mb)),
            user=user,
            command=stage_command(wf.name, spec.name, prof.tasks, prof.workers, scale, shared,
                                  speed),
        ))
        previous = job_id
    return jobs


def paper_mix(scale: float = 1.0, submit_time: float = 0.0) -> list[Job]:
    """The paper's 15 workflows (46 stage jobs), all submitted at ``submit_time``."""
    jobs: list[Job] = []
    for wf, cores in PAPER_MIX:
        jobs += workflow_jobs(wf, cores, scale, submit_time)
    return jobs


def demo_core_speed(host_cores: int | None = None, nodes: int = DEMO_NODES,
                    node_cores: int = DEMO_NODE_CORES) -> float:
    """What one emulated core is worth when ``nodes x node_cores`` share the host's cores."""
    host = host_cores if host_cores is not None else (os.cpu_count() or 1)
    return min(1.0, host / (nodes * node_cores))


def small_mix(scale: float = DEMO_SCALE, cores: dict[str, int] | None = None,
              node_cores: int = DEMO_NODE_CORES, submit_time: float = 0.0,
              workdir: str | os.PathLike | None = None,
              core_speed: float | None = None, tag: str = "demo",
              sequential_cores: str = "one") -> list[Job]:
    """One workflow of each kind, small enough for a live demo (about a minute in total).

    ``cores`` maps workflow -> cores (default DEMO_CORES: 2-4 cores on 2-core nodes).
    ``core_speed`` defaults to demo_core_speed() (4 emulated 2-core nodes on this host), so
    walltime requests hold when emulated cores are slower than real ones. ``tag`` names the
    run in the job ids (``montage-TAG.mProject``): a batch system never reuses a job id.
    ``sequential_cores``: as in ``workflow_jobs``.
    """
    speed = demo_core_speed(node_cores=node_cores) if core_speed is None else core_speed
    chosen = dict(DEMO_CORES if cores is None else cores)
    unknown = sorted(set(chosen) - set(WORKFLOWS))
    if unknown:
        raise InvalidInput(f"small_mix: unknown workflow(s) {unknown}; choose from {list(WORKFLOWS)}")
    jobs: list[Job] = []
    for wf, c in chosen.items():
        jobs += workflow_jobs(wf, c, scale, submit_time, f"{wf}-{tag}", workdir=workdir,
                              node_cores=node_cores, core_speed=speed,
                              sequential_cores=sequential_cores)
    return jobs


def workflow_of(jobs: list[Job]) -> dict[str, list[Job]]:
    """Group stage jobs by workflow instance, in order."""
    out: dict[str, list[Job]] = {}
    for j in jobs:
        out.setdefault(j.workflow or j.job_id, []).append(j)
    return out


__all__ = ["DEMO_CORES", "DEMO_NODES", "DEMO_NODE_CORES", "DEMO_SCALE", "PAPER_MIX", "SEQUENTIAL_CORES",
           "demo_core_speed", "paper_mix",
           "small_mix", "stage_command", "workflow_jobs", "workflow_of"]
