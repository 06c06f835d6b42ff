"""``cosched workload submit``: one workflow to Slurm, one job per stage with ``afterok``.

    cosched workload submit montage|blast|stats|statistics|synthetic --cores C [--scale S]
        [--cosched] [--dir D | --slurm-conf F --progress-dir P --usage-dir U] [--json]
    cosched workload submit WORKFLOW --cores C --mesos [--queue DIR] [--node-cores N]
        [--core-speed X] [--json]

With ``--cosched`` the stages go to the co-scheduling partition with their metadata
(class, stage type, tasks, workflow, stage, walltime) in ``--comment``; without it, to the
default partition as plain Slurm jobs. ``--json`` prints
``{"workflow", "cosched", "partition", "jobs": [{"stage", "name", "slurm_job_id"}]}``;
with ``--mesos``: ``{"workflow", "mesos": true, "queue", "jobs": [{"stage", "name", "cores",
"nodes"}]}``.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from ..model import InvalidInput
from ._common import echo_json, running_slurm_cluster
from ._types import MAX_JOB_CORES, positive

ALIASES = {"stats": "statistics"}


@click.command("submit")
@click.argument("workflow")
@click.option("--cores", type=click.IntRange(1, MAX_JOB_CORES), required=True, help="Cores of the parallel stages.")
@click.option("--scale", type=positive(), default=0.02, show_default=True,
              help="Work per task (1 = the paper's size).")
@click.option("--cosched", is_flag=True, help="Opt the stages in to co-scheduling.")
@click.option("--tag", default=None, help="Name of this workflow instance [WORKFLOW-HHMMSS].")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A cluster started by `cosched slurm up` [its default folder].")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              help="A site's slurm.conf instead of a local cluster.")
@click.option("--partition", default=None, help="Co-scheduling partition [cosched].")
@click.option("--progress-dir", default=None,
              help="Node agents' progress folder [the local cluster's; on a site: "
                   "/var/lib/cosched-agent/progress].")
@click.option("--usage-dir", default=None,
              help="Where each job records its CPU time [the local cluster's; none on a site].")
@click.option("--workdir", default=None, help="Folder the stages share [CLUSTER/work/TAG].")
@click.option("--time-factor", type=positive(), default=1.0, show_default=True,
              help="Slurm's --time = this x the stage's walltime (whole minutes); the walltime "
                   "itself goes in the metadata.")
@click.option("--mesos", is_flag=True,
              help="Put the stages in the Mesos framework's queue folder instead of Slurm "
                   "(cosched run --backend mesos runs them).")
@click.option("--queue", "queue_dir", type=click.Path(file_okay=False), default=None,
              help="Mesos: the queue folder [$COSCHED_MESOS_QUEUE, else beside the state database].")
@click.option("--node-cores", type=click.IntRange(1, MAX_JOB_CORES), default=None,
              help="Mesos: cores per agent a stage may take (wider stages are gangs) [one agent].")
@click.option("--core-speed", type=positive(), default=1.0, show_default=True,
              help="Mesos: what one offered core is worth in real cores (stages shrink their CPU work).")
@click.option("--json", "as_json", is_flag=True, help="Print the submitted jobs as JSON.")
def submit_cmd(workflow, cores, scale, cosched, tag, directory, slurm_conf, partition,
               progress_dir, usage_dir, workdir, time_factor, mesos, queue_dir, node_cores,
               core_speed, as_json):
    """Submit WORKFLOW to Slurm, one job per stage, each after the previous one (or, with
    --mesos, to the Mesos framework's queue)."""
    if mesos:
        _submit_mesos(workflow, cores, scale, tag, queue_dir, workdir, node_cores, core_speed, as_json)
        return
    from slurm_plugin.commands import SlurmCommandError, SlurmCommands
    from slurm_plugin.submit import SubmitOptions, submit_jobs
    from testbed.workloads import workflow_jobs

    name = ALIASES.get(workflow, workflow)
    tag = tag or f"{name}-{time.strftime('%H%M%S')}"
    speed, node_cores, default_part = 1.0, None, None
    if slurm_conf is None:
        state = running_slurm_cluster(directory, ", or give --slurm-conf for a site's Slurm")
        slurm_conf = state.slurm_conf
        partition = partition or state.partition
        default_part = state.default_partition
        progress_dir = progress_dir or state.progress_dir
        usage_dir = usage_dir or state.usage_dir
        workdir = workdir or str(Path(state.dir) / "work" / tag)
        out_dir = state.jobs_dir
        speed = min(1.0, state.cpu_per_core)   # emulated cores are slower than real ones
        node_cores = state.cpus
        total = state.cpus * len(state.nodes)
        if cores > total:   # such a job would wait at the head of the queue forever
            raise click.BadParameter(f"{cores} cores: the cluster in {state.dir} has {total} "
                                     f"({len(state.nodes)} nodes of {state.cpus})",
                                     param_hint="'--cores'")
    else:
        out_dir = None
    try:
        jobs = workflow_jobs(name, cores, scale, id_prefix=tag, workdir=workdir,
                             node_cores=node_cores, core_speed=speed)
        subs = submit_jobs(SlurmCommands(slurm_conf), jobs, SubmitOptions(
            partition=partition or "cosched", default_partition=default_part, cosched=cosched,
            output_dir=out_dir, usage_dir=usage_dir, progress_dir=progress_dir,
            time_limit_factor=time_factor))
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None
    except SlurmCommandError as exc:
        raise click.ClickException(str(exc)) from None
    out = {"workflow": tag, "cosched": cosched,
           "partition": (partition or "cosched") if cosched else default_part,
           "jobs": [{"stage": s.stage, "name": s.name, "slurm_job_id": s.slurm_job_id} for s in subs]}
    if as_json:
        echo_json(out)
        return
    for s in subs:
        click.echo(f"{s.slurm_job_id:>8}  {s.name}")
    click.echo(f"submitted {len(subs)} stage jobs of {tag}" + (" (co-scheduled)" if cosched else ""))


def _submit_mesos(workflow, cores, scale, tag, queue_dir, workdir, node_cores, core_speed, as_json):
    from mesos_framework.queue import JobQueue, default_queue_dir
    from testbed.workloads import workflow_jobs

    from ..store import default_db_path

    name = ALIASES.get(workflow, workflow)
    tag = tag or f"{name}-{time.strftime('%H%M%S')}"
    root = Path(queue_dir) if queue_dir else default_queue_dir(default_db_path())
    try:
        jobs = workflow_jobs(name, cores, scale, id_prefix=tag,
                             workdir=workdir or str(root / "work" / tag),
                             node_cores=node_cores, core_speed=core_speed)
        JobQueue(root).submit(jobs)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot write to the queue {root}: {exc}") from None
    out = {"workflow": tag, "mesos": True, "queue": str(root),
           "jobs": [{"stage": j.job_id.rsplit(".", 1)[-1], "name": j.job_id, "cores": j.cores,
                     "nodes": j.nodes} for j in jobs]}
    if as_json:
        echo_json(out)
        return
    for j in jobs:
        click.echo(f"{j.job_id}  ({j.cores} cores on {j.nodes} agent(s))")
    click.echo(f"queued {len(jobs)} stage jobs of {tag} for Mesos in {root}")
