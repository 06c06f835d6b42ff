"""``cosched workload submit``: one workflow to Slurm, one job per stage with ``afterok``.

The options live here; the submitting is the body's (a ``coscheduler.submitters`` entry
point: ``slurm`` in slurm_plugin/cli.py, ``mesos`` with ``--mesos`` in mesos_framework/cli.py).

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

``--cores`` larger than the cluster: against a local cluster (``--dir``) the command knows
its size and refuses the value at once (usage error naming ``--cores``, the value and the
cluster's cores), since such a stage would wait at the head of the queue forever. With
``--slurm-conf`` the command does not know the site's size and does not ask: sbatch
normally refuses a job no node set of the partition can hold, and that refusal is the
command's error; a co-scheduled stage Slurm accepts anyway is given up by the controller
("no set of this cluster's nodes can hold it", ``ControllerConfig.give_up_unplaceable``).
With ``--mesos`` nothing knows the size at submit time (Mesos offers what is free, not what
exists): the stage waits in the framework's queue for offers large enough.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from .. import plugins
from ..model import InvalidInput
from ._types import MAX_JOB_CORES, positive

ALIASES = {"stats": "statistics"}


@click.command("submit")
@click.argument("workflow")
@click.option("--cores", type=click.IntRange(1, MAX_JOB_CORES), required=True,
              help="Cores of the parallel stages; more than a local cluster (--dir) has is refused.")
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
    opts = dict(cores=cores, scale=scale, cosched=cosched, directory=directory,
                slurm_conf=slurm_conf, partition=partition, progress_dir=progress_dir,
                usage_dir=usage_dir, workdir=workdir, time_factor=time_factor, queue_dir=queue_dir,
                node_cores=node_cores, core_speed=core_speed, as_json=as_json)
    name = ALIASES.get(workflow, workflow)
    tag = tag or f"{name}-{time.strftime('%H%M%S')}"
    try:
        submitter = plugins.load("coscheduler.submitters", "mesos" if mesos else "slurm",
                                 "workload submitter")
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    submitter(name, tag, opts)
