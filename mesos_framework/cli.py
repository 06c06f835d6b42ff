"""What mesos_framework adds to the ``cosched`` command line: ``cosched workload submit
--mesos`` puts a workflow's stages into the framework's queue folder (a
``coscheduler.submitters`` entry point). ``cosched run --backend mesos`` is connect.py's."""

from __future__ import annotations

from pathlib import Path

import click

from coscheduler.cli._common import echo_json
from coscheduler.model import InvalidInput


def submit_workflow(name: str, tag: str, opts: dict) -> None:
    """One queue entry per stage (wider stages are gangs); prints the jobs (or JSON)."""
    from coscheduler.store import default_db_path
    from coscheduler.workloads import workflow_jobs

    from .queue import JobQueue, default_queue_dir

    cores, scale, workdir, as_json = opts["cores"], opts["scale"], opts["workdir"], opts["as_json"]
    queue_dir, node_cores, core_speed = opts["queue_dir"], opts["node_cores"], opts["core_speed"]
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
