"""``cosched slurm``: a real Slurm cluster on this machine, the priority hook, the scaled mix.

    cosched slurm up [--nodes N] [--cpus C] [--dir D] [--json]
    cosched slurm down [--dir D] [--json]
    cosched slurm status [--dir D] [--json]
    cosched slurm env [--dir D]                      # `eval $(cosched slurm env)` sets SLURM_CONF
    cosched slurm priority --policy P [--once | --interval S] [--partition P] [--json]
    cosched slurm run-paper-small [--policies ...] [--scale S] [--json]

The cluster's parts live in slurm_plugin/ (cluster.py starts and stops daemons, conf.py
writes the configuration, backend.py is what `cosched run --backend slurm` drives).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

import click

from coscheduler.model import InvalidInput
from coscheduler.cli._common import echo_json


def running_slurm_cluster(directory: Path | None, otherwise: str = ""):
    """The state of the running `cosched slurm up` cluster in ``directory`` (default folder
    when None), or a one-line error saying how to start one (``otherwise``: another way)."""
    from slurm_plugin.cluster import ClusterError, default_dir, load_state

    d = directory or default_dir()
    try:
        state = load_state(d)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if state is None or state.stopped is not None:
        raise click.ClickException(f"no running cluster in {d}: start one with "
                                   f"`cosched slurm up --dir {d}`{otherwise}")
    return state


def submit_workflow(name: str, tag: str, opts: dict) -> None:
    """``cosched workload submit NAME`` (a ``coscheduler.submitters`` entry point): one Slurm
    job per stage, each ``afterok`` the previous one; prints the jobs (or JSON)."""
    from coscheduler.workloads import workflow_jobs
    from slurm_plugin.commands import SlurmCommandError, SlurmCommands
    from slurm_plugin.submit import SubmitOptions, submit_jobs

    cores, scale, cosched, as_json = opts["cores"], opts["scale"], opts["cosched"], opts["as_json"]
    slurm_conf, partition, workdir = opts["slurm_conf"], opts["partition"], opts["workdir"]
    progress_dir, usage_dir, time_factor = opts["progress_dir"], opts["usage_dir"], opts["time_factor"]
    speed, node_cores, default_part = 1.0, None, None
    if slurm_conf is None:
        state = running_slurm_cluster(opts["directory"], ", or give --slurm-conf for a site's Slurm")
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


def _dir_option(fn):
    return click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
                        default=None,
                        help="The cluster's folder [default: $COSCHED_SLURM_DIR, else "
                             "/var/lib/coscheduler/slurm as root].")(fn)


def _state(directory):
    return running_slurm_cluster(directory)


@click.group()
def slurm() -> None:
    """A real Slurm cluster on this machine, and the hooks for a site's own Slurm."""


@slurm.command("up")
@click.option("--nodes", type=int, default=2, show_default=True, help="Emulated nodes (one slurmd each).")
@click.option("--cpus", type=int, default=4, show_default=True,
              help="CPUs per node (may exceed the machine's: the node agents share its CPUs).")
@_dir_option
@click.option("--name", default=None, help="Cluster name [the one last started in --dir, else "
              "c<slurmctld port>].")
@click.option("--partition", default="cosched", show_default=True, help="Co-scheduling partition.")
@click.option("--oversubscribe", type=int, default=4, show_default=True,
              help="Jobs that may share one core (OverSubscribe=YES:N).")
@click.option("--mesos-partition", default=None,
              help="Also a partition whose jobs run on Mesos (held by the submit hook for "
                   "`cosched run --backend mesos --from-slurm`; docs/mesos.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the cluster as JSON.")
def up_cmd(nodes, cpus, directory, name, partition, oversubscribe, mesos_partition, as_json):
    """Install Slurm and munge if missing, start munged, slurmctld, N slurmd and a node
    agent per node; wait until the nodes are idle."""
    from slurm_plugin.cluster import ClusterError, up

    try:
        state = up(directory, nodes=nodes, cpus=cpus, name=name, partition=partition,
                   oversubscribe=oversubscribe, mesos_partition=mesos_partition,
                   say=lambda m: click.echo(m, err=True))
    except (ClusterError, InvalidInput) as exc:
        raise click.ClickException(str(exc)) from None
    s = state.summary()
    if as_json:
        echo_json(s)
        return
    click.echo(f"Slurm cluster {s['cluster']} runs: nodes {', '.join(s['nodes'])}, "
               f"partition {s['partition']} (co-scheduling)"
               + (f", partition {mesos_partition} (run on Mesos)" if mesos_partition else ""))
    click.echo(f"  export SLURM_CONF={s['slurm_conf']}")
    for node, url in s["agents"].items():
        click.echo(f"  node agent {node}: {url}")
    click.echo(f"  state: {s['state_dir']}")


@slurm.command("down")
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def down_cmd(directory, as_json):
    """Stop exactly what `up` started (by pid), cancel its jobs, remove its cgroups."""
    from slurm_plugin.cluster import ClusterError, down

    try:
        report = down(directory, say=lambda m: click.echo(m, err=True))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(report)
        return
    if report["already_stopped"]:
        click.echo(f"nothing runs in {report['state_dir']}")
        return
    for what in report["stopped"] + report["killed"]:
        click.echo(f"stopped {what}")
    for cg in report["cgroups_removed"]:
        click.echo(f"removed cgroup {cg}")
    for cg in report["cgroups_left"]:
        click.echo(f"could not remove cgroup {cg}", err=True)


@slurm.command("status")
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def status_cmd(directory, as_json):
    """What runs: daemons, nodes as Slurm sees them, agents, jobs."""
    from slurm_plugin.cluster import ClusterError, status

    try:
        s = status(directory)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(s)
        return
    if not s["exists"]:
        click.echo(f"no cluster in {s['state_dir']}")
        return
    click.echo(f"cluster {s['cluster']} in {s['state_dir']}: {'running' if s['running'] else 'NOT running'}")
    for d in s["daemons"]:
        click.echo(f"  {d['role']:<10} {d['name']:<12} pid {d['pid']:<8} {'alive' if d['alive'] else 'gone'}")
    for n, st in s["nodes"].items():
        click.echo(f"  node {n}: {st}")
    for n, a in s["agents"].items():
        click.echo(f"  agent {n}: {a['url']} {'healthy' if a['healthy'] else 'NOT healthy'}")
    if s.get("jobs"):
        click.echo("  jobs: " + ", ".join(f"{k} {v}" for k, v in s["jobs"].items()))


@slurm.command("env")
@_dir_option
def env_cmd(directory):
    """Print `export SLURM_CONF=...` for the cluster (use: eval "$(cosched slurm env)")."""
    state = _state(directory)
    click.echo(f"export SLURM_CONF={shlex.quote(state.slurm_conf)}")


@slurm.command("priority")
@click.option("--policy", "policy_name", default="FCFS", show_default=True,
              help="Queue policy: FCFS, SJF, F1, WFP3, UNICEP, ..., or a learned model "
                   "rl:NAME|PATH (cosched models list).")
@click.option("--partition", default=None, help="Only this partition's pending jobs [all].")
@click.option("--inspector", default=None, metavar="NAME|PATH",
              help="A SchedInspector model over its base policy, or reject-blocked:BASE[:BUDGET] "
                   "(the hand-written inspector), instead of --policy: a rejected top job "
                   "goes last for the inspector's retry delay.")
@click.option("--once", is_flag=True, help="One pass, then exit.")
@click.option("--interval", type=float, default=10.0, show_default=True,
              help="Seconds between passes (without --once).")
@click.option("--base", type=int, default=1_000_000, show_default=True,
              help="Priority of the last job when the queue is numbered afresh (then "
                   "1000 apart); a pass writes only the jobs that must move to keep the order.")
@_dir_option
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              help="A site's slurm.conf instead of a local cluster.")
@click.option("--json", "as_json", is_flag=True, help="Print each pass as JSON.")
def priority_cmd(policy_name, partition, inspector, once, interval, base, directory, slurm_conf,
                 as_json):
    """Order pending jobs with a queue policy by setting their Slurm priorities."""
    from coscheduler.learned.registry import resolve_policy
    from slurm_plugin.commands import SlurmCommandError, SlurmCommands
    from slurm_plugin.priority import apply_priorities
    from slurm_plugin.source import CommandLineSource

    try:
        policy = resolve_policy(policy_name)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--policy") from None
    if inspector is not None:
        from coscheduler.learned.registry import inspector_for
        from coscheduler.policies.selection import InspectedRanking

        try:
            policy = InspectedRanking(inspector_for(inspector))
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--inspector") from None
    if not interval > 0:
        raise click.BadParameter(f"must be > 0, got {interval}", param_hint="--interval")
    conf = slurm_conf or _state(directory).slurm_conf
    try:
        source = CommandLineSource(SlurmCommands(conf))
    except InvalidInput as exc:   # (a bad $COSCHED_SLURM_MAX_JSON_MB, say)
        raise click.ClickException(str(exc)) from None
    while True:
        try:
            rep = apply_priorities(source, policy, partition=partition, base=base)
        except (SlurmCommandError, InvalidInput) as exc:
            if once:
                raise click.ClickException(str(exc)) from None
            click.echo(f"priority pass failed: {exc}", err=True)
        else:
            if as_json:
                click.echo(json.dumps({"policy": policy.name, **rep.as_dict()}))
            else:
                order = " ".join(f"{r.job_id}({r.priority})" for r in rep.ranked) or "(no pending jobs)"
                click.echo(f"{policy.name}: {order}; {len(rep.changed)} changed")
                for e in rep.errors:
                    click.echo(f"  {e}", err=True)
        if once:
            return
        time.sleep(interval)


@slurm.command("run-paper-small")
@click.option("--policies", default=",".join(("space-sharing", "static", "asax")), show_default=True,
              help="Comma-separated: space-sharing, static, asax.")
@click.option("--scale", type=float, default=0.02, show_default=True, help="Work per task.")
@click.option("--seed", type=int, default=0, show_default=True, help="ASA_X's seed.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between passes.")
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds per policy.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="ASA_X state database [CLUSTER_DIR/paper-small.db].")
@click.option("--dedicated", is_flag=True,
              help="Give the cluster's cgroup the CPU weight of dedicated nodes for the run, so "
                   "other work on this machine cannot starve it (its CPU stays capped by the "
                   "node quotas).")
@click.option("--nodes", type=int, default=2, show_default=True, help="Nodes, if a cluster is started.")
@click.option("--cpus", type=int, default=4, show_default=True, help="CPUs per node, if started.")
@_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def run_paper_small_cmd(policies, scale, seed, interval, timeout, db, dedicated, nodes, cpus,
                        directory, as_json):
    """The scaled-down mix of the four workflows through real Slurm under each policy
    (starts a cluster in --dir if none runs there, and stops it after)."""
    from slurm_plugin.cluster import ClusterError, down, load_state, up, default_dir
    from slurm_plugin.experiment import POLICIES, run_policies
    from coscheduler.store import SqliteStore

    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [p for p in chosen if p not in POLICIES]
    if bad or not chosen:
        raise click.BadParameter(f"unknown policy {bad or policies!r}; choose from {', '.join(POLICIES)}",
                                 param_hint="--policies")
    if not 0 < scale <= 1:
        raise click.BadParameter(f"must lie in (0, 1], got {scale}", param_hint="--scale")
    d = directory or default_dir()
    def say(m):
        click.echo(m, err=True)

    started_here = False
    try:
        state = load_state(d)
        if state is None or state.stopped is not None or not all(x.alive() for x in state.daemons):
            state = up(d, nodes=nodes, cpus=cpus, say=say)
            started_here = True
    except (ClusterError, InvalidInput) as exc:
        raise click.ClickException(str(exc)) from None
    db = db or Path(state.dir) / "paper-small.db"
    from coscheduler.store import StoreError

    try:
        store = SqliteStore(db, create=True)
        store.claim_controller()
    except (InvalidInput, StoreError) as exc:
        if started_here:
            down(d, say=say)
        raise click.ClickException(str(exc)) from None
    err = sys.stderr

    def progress(policy, daemon) -> None:
        if err.isatty() and not as_json:
            running = daemon.controller._last.values()
            guests = sum(1 for r in running if r.host_job)
            err.write(f"\r  {policy:<14} pass {daemon.stats.passes:4d}  running {len(running)} "
                      f"({guests} guests)  finished {daemon.stats.finished}   ")
            err.flush()

    try:
        runs = run_policies(state, chosen, scale=scale, recorder=store, seed=seed,
                            interval_s=interval, timeout_s=timeout, dedicated=dedicated,
                            on_pass=progress)
    finally:
        store.close()
        if started_here:
            down(d, say=say)
    if as_json:
        echo_json({"mode": "slurm", "cluster": state.name, "db": str(db), "scale": scale,
                   "dedicated": dedicated, "load_average": round(os.getloadavg()[0], 2),
                   "results": [r.summary() for r in runs]})
        return
    click.echo("")
    click.echo(f"{'policy':<14} {'makespan':>9} {'mean wait':>10} {'CPU util':>9} "
               f"{'slowdown':>9} {'co-alloc':>9} {'completed':>10}")
    for r in runs:
        slow = "-" if r.mean_slowdown is None else f"{r.mean_slowdown * 100:+.1f}%"
        click.echo(f"{r.policy:<14} {r.makespan_s:>8.1f}s {r.mean_wait_s:>9.1f}s "
                   f"{r.cpu_util * 100:>8.1f}% {slow:>9} {r.coallocations:>9} {r.completed:>5}/{r.jobs}")
    click.echo("\nCPU util: kernel CPU time of the jobs over the capacity of the cores they held; "
               "slowdown: runtime vs the same stage under space sharing.")
