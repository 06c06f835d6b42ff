"""``cosched workload``: the emulated workflows (list, show, mix), and running one stage."""

from __future__ import annotations

import sys

import click

from coscheduler.workloads import (DEMO_SCALE, WORKFLOWS, get_workflow, paper_mix, small_mix,
                               workflow_jobs, workflow_profiles)
from coscheduler.workloads.burn import REF_RATE_CACHED, REF_RATE_STREAMING, measure_rates
from coscheduler.workloads.pool import TaskFailed
from coscheduler.workloads.stage import run_stage

from ..model import InvalidInput, Job
from ..outputs import OutputError
from ._common import echo_json


def _job_dict(job: Job) -> dict:
    return {
        "job_id": job.job_id, "job_class": job.job_class, "workflow": job.workflow,
        "stage_type": job.stage_type.value, "cores": job.cores, "nodes": job.nodes,
        "tasks": job.tasks, "walltime_s": job.walltime_s, "mem_mb": job.mem_mb,
        "submit_time": job.submit_time, "depends_on": list(job.depends_on),
        "command": list(job.command),
    }


@click.group()
def workload() -> None:
    """The paper's four workflows as real programs (Montage, BLAST, Statistics, Synthetic)."""


@workload.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def list_cmd(as_json: bool) -> None:
    """List the workflows and their stages."""
    rows = []
    for wf in WORKFLOWS.values():
        rows.append({
            "workflow": wf.name, "description": wf.description,
            "paper_cores": list(wf.paper_cores),
            "stages": [{"stage": s.name, "stage_type": s.stage_type.value, "tasks": s.tasks,
                        "steps": [g.name for g in s.groups]} for s in wf.stages],
        })
    if as_json:
        echo_json(rows)
        return
    for r in rows:
        click.echo(f"{r['workflow']}: {r['description']} (paper: {r['paper_cores']} cores)")
        for s in r["stages"]:
            click.echo(f"  {s['stage']:<12} {s['stage_type']:<10} {s['tasks']:>4} tasks"
                       f"  ({', '.join(s['steps'])})")


@workload.command("show")
@click.argument("workflow")
@click.option("--cores", type=int, default=8, show_default=True, help="cores of the parallel stages")
@click.option("--scale", type=float, default=1.0, show_default=True, help="work factor")
@click.option("--measure", is_flag=True,
              help="also run every stage for real, one after the other, and show what it did")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def show_cmd(workflow: str, cores: int, scale: float, measure: bool, as_json: bool) -> None:
    """Show WORKFLOW's stage jobs and their expected runtime, CPU and memory use."""
    try:
        profiles = workflow_profiles(workflow, cores, scale)
        jobs = workflow_jobs(workflow, cores, scale)
    except InvalidInput as e:
        raise click.BadParameter(str(e)) from None
    measured = [run_stage(p.workflow, p.stage, workers=p.workers, scale=scale).as_dict()
                for p in profiles] if measure else [None] * len(profiles)
    if as_json:
        out = [{**p.as_dict(), "job": _job_dict(j), **({"measured": m} if m else {})}
               for p, j, m in zip(profiles, jobs, measured)]
        echo_json({"workflow": get_workflow(workflow).name, "cores": cores,
                               "scale": scale, "stages": out})
        return
    click.echo(f"{'job':<24} {'type':<10} {'cores':>5} {'tasks':>5} {'runtime_s':>10} "
               f"{'walltime_s':>10} {'cpu_util':>8} {'mem_mb':>8}")
    for p, j, m in zip(profiles, jobs, measured):
        click.echo(f"{j.job_id:<24} {p.stage_type.value:<10} {j.cores:>5} {p.tasks:>5} "
                   f"{p.runtime_s:>10.1f} {j.walltime_s:>10.0f} {p.cpu_util:>8.2f} {p.mem_mb:>8.0f}")
        if m:
            click.echo(f"{'  measured':<46} {m['elapsed_s']:>10.1f} {'':>10} "
                       f"{m['cpu_util']:>8.2f} {m['max_rss_mb']:>8.0f}")
    click.echo(f"total runtime alone: {sum(p.runtime_s for p in profiles):.1f} s"
               + (f" (measured {sum(m['elapsed_s'] for m in measured):.1f} s, without "
                  "interpreter starts; max_rss is the largest process)" if measure else ""))


@workload.command("mix")
@click.argument("which", type=click.Choice(["paper", "small"]))
@click.option("--scale", type=float, default=None,
              help=f"work factor (default: 1 for paper, {DEMO_SCALE} for small)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def mix_cmd(which: str, scale: float | None, as_json: bool) -> None:
    """List the jobs of the paper's 15-workflow mix or of the small demo mix."""
    try:
        if which == "paper":
            jobs = paper_mix(1.0 if scale is None else scale)
        else:
            jobs = small_mix(DEMO_SCALE if scale is None else scale)
    except InvalidInput as e:
        raise click.BadParameter(str(e)) from None
    if as_json:
        echo_json([_job_dict(j) for j in jobs])
        return
    for j in jobs:
        after = f" after {','.join(j.depends_on)}" if j.depends_on else ""
        click.echo(f"{j.job_id:<28} {j.cores:>3} cores {j.tasks:>4} tasks "
                   f"walltime {j.walltime_s:>7.0f} s{after}")
    click.echo(f"{len(jobs)} jobs in {len({j.workflow for j in jobs})} workflows")


@workload.command("run-stage")
@click.option("--workflow", required=True)
@click.option("--stage", required=True)
@click.option("--tasks", type=int, default=None, help="number of tasks (default: the stage's)")
@click.option("--workers", type=int, default=1, show_default=True,
              help="worker processes (the job's cores for a parallel stage)")
@click.option("--scale", type=float, default=1.0, show_default=True)
@click.option("--workdir", default=None, help="shared working directory (default: private temp)")
@click.option("--progress-file", default=None, help="progress file (default: $COSCHED_PROGRESS_FILE)")
@click.option("--json", "as_json", is_flag=True, help="print the measurements as JSON")
def run_stage_cmd(workflow: str, stage: str, tasks: int | None, workers: int, scale: float,
                  workdir: str | None, progress_file: str | None, as_json: bool) -> None:
    """Run one stage for real (as its job would), reporting progress after each task."""
    try:
        spec = get_workflow(workflow).stage(stage)
        if spec.stage_type.value == "sequential" and workers != 1:
            click.echo(f"{workflow}/{stage} is sequential: running 1 worker", err=True)
            workers = 1
        rep = run_stage(workflow, stage, workers=workers, scale=scale, tasks=tasks,
                        workdir=workdir, progress_file=progress_file)
    except OutputError as e:   # --workdir, --progress-file: one line, not a usage error
        raise click.ClickException(str(e)) from None
    except InvalidInput as e:
        raise click.BadParameter(str(e)) from None
    except TaskFailed as e:
        click.echo(f"stage {workflow}/{stage} failed: {e}", err=True)
        sys.exit(1)
    if as_json:
        echo_json(rep.as_dict(), indent=None)
    else:
        click.echo(f"{workflow}/{stage}: {rep.tasks} tasks on {rep.workers} workers in "
                   f"{rep.elapsed_s:.2f} s, CPU {rep.cpu_s:.2f} s ({100 * rep.cpu_util:.0f} % "
                   f"of the workers' cores), peak RSS {rep.max_rss_mb:.0f} MB")


@workload.command("calibrate")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def calibrate_cmd(as_json: bool) -> None:
    """Measure this machine's CPU kernel rate against the reference core the work is sized on."""
    rates = measure_rates()
    out = {
        "cached_per_s": round(rates["cached"]), "streaming_per_s": round(rates["streaming"]),
        "ref_cached_per_s": REF_RATE_CACHED, "ref_streaming_per_s": REF_RATE_STREAMING,
        "speed_vs_reference": round(rates["cached"] / REF_RATE_CACHED, 3),
    }
    if as_json:
        echo_json(out, indent=None)
        return
    click.echo(f"kernel: {out['cached_per_s']} it/s cached (reference {REF_RATE_CACHED:.0f}), "
               f"{out['streaming_per_s']} it/s streaming (reference {REF_RATE_STREAMING:.0f})")
    click.echo(f"one core here is {out['speed_vs_reference']:.2f}x the reference core: "
               f"CPU-bound stages take about {1 / out['speed_vs_reference']:.2f}x their profile")



# `cosched workload submit` (Slurm) lives in its own module; its imports of Slurm code are
# inside the command, so loading it here costs nothing.
from .workload_submit import submit_cmd  # noqa: E402

workload.add_command(submit_cmd)

# MRSch's multi-resource sets (S1-S10): defined with the other multi-resource commands.
from .multi import workload_multi  # noqa: E402

workload.add_command(workload_multi)

# SWF -> Batsim JSON (coscheduler/sim/batsim.py).
from .workload_batsim import workload_batsim  # noqa: E402

workload.add_command(workload_batsim)
