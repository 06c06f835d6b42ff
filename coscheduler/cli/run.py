"""``cosched run``: the controller as a daemon against a real batch system.

    cosched run --backend slurm [--slurm-dir D | --slurm-conf F --agents FILE]
    cosched run --backend slurmrestd --url URL --token-file JWT [--slurm-dir D | --agents FILE]
                [--partition P] [--policy space-sharing|static|asax] [--queue-policy Q]
                [--db PATH] [--interval S] [--lease S] [--keep-held]
    cosched run --backend mesos --master URL [--policy P] [--queue DIR] [--workload small]
                [--queue-file F] [--from-slurm] [--quotas local|remote|none] [--until-idle] ...

Logs each start, co-allocation and ASA_X decision on stderr. SIGTERM, SIGINT or SIGHUP: every quota
it applied is given back and the jobs it still holds are handed to the batch system
(``--keep-held`` leaves them held, for a quick restart; on Mesos: the framework fails over
instead of being torn down, its tasks run on). A restart resumes from ``--db``.
Backends come from ``coscheduler/backends/registry.py``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from ..backends.registry import backend_names, make_backend
from ..model import InvalidInput
from ..stopsignals import stop_on_signals
from ._common import db_option, resolve_db
from ._types import FiniteRange, positive


@click.command("run")
@click.option("--backend", "backend_name", type=click.Choice(backend_names()), required=True,
              help="What runs the jobs.")
@click.option("--slurm-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Slurm: a cluster started by `cosched slurm up` (its folder) "
                   "[default: that command's default folder, unless --slurm-conf is given].")
@click.option("--slurm-conf", type=click.Path(dir_okay=False), default=None,
              help="Slurm: a site's slurm.conf (with --agents for the node agents).")
@click.option("--agents", type=click.Path(dir_okay=False), default=None,
              help="Slurm: JSON file naming each node's agent (docs/slurm.md).")
@click.option("--slurm-source", type=click.Choice(["auto", "cli", "pyslurm"]), default="auto",
              show_default=True, help="Slurm: read through the command line or pyslurm.")
@click.option("--url", default=None,
              help="slurmrestd: its address, http://HOST:PORT (with --token-file, a JWT).")
@click.option("--partition", default=None, help="Slurm: the co-scheduling partition [cosched].")
@click.option("--policy", type=click.Choice(["space-sharing", "static", "asax"]), default="asax",
              show_default=True, help="Co-allocation policy.")
@click.option("--static-fraction", type=FiniteRange(0.0, 1.0, min_open=True), default=0.5, show_default=True,
              help="Quota fraction the static policy lends.")
@click.option("--queue-policy", default="FCFS", show_default=True,
              help="Queue order: FCFS, SJF, F1, WFP3, UNICEP, ..., or a learned model "
                   "rl:NAME|PATH (cosched models list).")
@click.option("--inspector", default=None, metavar="NAME|PATH",
              help="Queue order by a SchedInspector model over its base policy, or "
                   "reject-blocked:BASE[:BUDGET], the hand-written inspector (instead of "
                   "--queue-policy).")
@db_option
@click.option("--interval", type=positive(), default=2.0, show_default=True,
              help="Seconds between passes.")
@click.option("--lease", "lease_s", type=positive(), default=20.0, show_default=True,
              help="Seconds a quota lasts at the node agent unless renewed (fail-safe).")
@click.option("--keep-held", is_flag=True,
              help="On exit, leave queued jobs held for the next controller.")
@click.option("--max-passes", type=click.IntRange(min=1), default=None, help="Stop after N passes (tests).")
@click.option("--until-idle", is_flag=True,
              help="Stop once nothing is queued or running and no more jobs are coming "
                   "(Mesos: the queue folder is empty).")
@click.option("--master", default=None,
              help="Mesos: any master, http://HOST:PORT (307 redirects to the leader are followed).")
@click.option("--role", default=None, help="Mesos: the role to subscribe with.")
@click.option("--principal", default=None, help="Mesos: FrameworkInfo.principal.")
@click.option("--secret-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Mesos: the principal's secret (first line), sent as HTTP Basic "
                   "authentication (masters that require framework authentication).")
@click.option("--framework-user", "mesos_user", default="root", show_default=True,
              help="Mesos: FrameworkInfo.user, the Unix user tasks run as (a job's own user, "
                   "when it has one, goes in its CommandInfo).")
@click.option("--failover-timeout", type=FiniteRange(min=0.0), default=7 * 86400.0, show_default=True,
              help="Mesos: seconds the master keeps the tasks after this framework disconnects.")
@click.option("--mesos-state-file", type=click.Path(dir_okay=False), default=None,
              help="Mesos: framework id and launched tasks, for failover [beside --db].")
@click.option("--hold", type=FiniteRange(min=0.0), default=5.0, show_default=True,
              help="Mesos: seconds an offer is held for a gang before it is declined.")
@click.option("--refuse", type=FiniteRange(min=0.0), default=2.0, show_default=True,
              help="Mesos: refuse_seconds of the filter on offers declined after holding.")
@click.option("--overtime", type=FiniteRange(min=0.0), default=1.0, show_default=True,
              help="Mesos: a job still running at (1 + this) x its walltime is killed (outcome "
                   "timeout); its walltime stays what ASA_X measures losses against.")
@click.option("--quotas", type=click.Choice(["local", "remote", "none"]), default="local",
              show_default=True,
              help="Mesos: who applies CPU quotas: local (an in-process node agent per Mesos agent, "
                   "for agents on this machine, e.g. the emulator; root), remote (cosched agent on "
                   "each agent host, --node-agent), none (space sharing only).")
@click.option("--node-agent", multiple=True, metavar="HOST=URL",
              help="Mesos: the node agent of a Mesos agent host (repeat per host).")
@click.option("--token-file", default=None,
              help="Mesos: token of the remote node agents; slurmrestd: the JWT (docs/slurm.md).")
@click.option("--cpu-per-core", type=positive(), default=None,
              help="Mesos, local quotas: real CPUs per offered core [machine CPUs / offered cores].")
@click.option("--queue", "mesos_queue", type=click.Path(file_okay=False), default=None,
              help="Mesos: the job queue folder [$COSCHED_MESOS_QUEUE, else beside --db].")
@click.option("--queue-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Mesos: put these jobs (JSON list or JSON lines) in the queue at start.")
@click.option("--workload", type=click.Choice(["small"]), default=None,
              help="Mesos: put one workflow of each kind (as cosched demo) in the queue at start.")
@click.option("--workload-scale", type=positive(), default=None,
              help="Mesos: work per task of --workload [0.02, as cosched demo].")
@click.option("--from-slurm", is_flag=True,
              help="Mesos: also run the jobs the Slurm submit hook marked for Mesos "
                   "(--slurm-dir or --slurm-conf; docs/mesos.md).")
@click.option("--mesos-partition", default=None,
              help="Mesos, --from-slurm: the Slurm partition whose jobs run on Mesos [mesos].")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def run(backend_name, slurm_dir, slurm_conf, agents, slurm_source, url, partition, policy,
        static_fraction, queue_policy, inspector, db, interval, lease_s, keep_held, max_passes,
        until_idle, master, role, principal, secret_file, mesos_user, failover_timeout, mesos_state_file, hold,
        refuse, overtime, quotas, node_agent, token_file, cpu_per_core, mesos_queue, queue_file, workload,
        workload_scale, from_slurm, mesos_partition, log_level):
    """Run the controller against a real batch system until SIGTERM."""
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ..controller import order_by
    from ..daemon import ControllerDaemon
    from ..store import SqliteStore, StoreError

    if not interval > 0:
        raise click.BadParameter(f"must be > 0, got {interval}", param_hint="--interval")
    if not lease_s > 3 * interval:
        raise click.BadParameter(f"must exceed 3 x --interval ({3 * interval:g} s) so that "
                                 "leases are renewed in time", param_hint="--lease")
    from ..learned.registry import resolve_policy

    try:
        order = order_by(resolve_policy(queue_policy))
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--queue-policy") from None
    if inspector is not None:
        from ..learned.registry import inspector_for

        try:
            order = order_by(inspector_for(inspector))
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--inspector") from None
    if backend_name == "mesos" and not master:
        raise click.BadParameter("the Mesos backend needs the master's URL", param_hint="--master")
    if backend_name != "mesos" and (master or workload or queue_file or from_slurm):
        raise click.BadParameter("--master, --workload, --queue-file and --from-slurm are "
                                 "options of --backend mesos")
    # neither --slurm-dir nor --slurm-conf: the Slurm body picks its default cluster folder
    if backend_name == "slurmrestd" and not (url and token_file):
        raise click.BadParameter("the slurmrestd backend needs --url and --token-file",
                                 param_hint="--url")
    db_path = resolve_db(db)
    options = {"slurm_dir": str(slurm_dir) if slurm_dir else None, "slurm_conf": slurm_conf,
               "agents": agents, "slurm_source": slurm_source, "url": url, "partition": partition,
               "lease_s": lease_s, "db": str(db_path), "policy": policy, "master": master,
               "role": role, "principal": principal, "secret_file": secret_file,
               "mesos_user": mesos_user,
               "failover_timeout": failover_timeout, "mesos_state_file": mesos_state_file,
               "hold": hold, "refuse": refuse, "overtime": overtime, "quotas": quotas, "node_agent": node_agent,
               "token_file": token_file, "cpu_per_core": cpu_per_core, "mesos_queue": mesos_queue,
               "queue_file": queue_file, "workload": workload, "workload_scale": workload_scale,
               "from_slurm": from_slurm,
               "mesos_partition": mesos_partition}
    # The database first: a second controller stops before it touches the batch system.
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        store = SqliteStore(db_path, create=True)
    except (InvalidInput, StoreError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        store.claim_controller()   # one controller per database: a second one stops here
    except StoreError as exc:
        store.close()
        raise click.ClickException(str(exc)) from None
    try:
        backend = make_backend(backend_name, options)
    except Exception as exc:  # InvalidInput, OSError, BackendError: not reachable, bad options
        store.close()
        raise click.ClickException(f"cannot connect to {backend_name}: {exc}") from None
    until = None
    if until_idle:
        drained = getattr(backend, "drained", None)
        if drained is None:
            store.close()
            raise click.BadParameter(f"the {backend_name} backend cannot tell when it is idle",
                                     param_hint="--until-idle")
        until = lambda d: drained()  # noqa: E731
    try:
        from ..controller import ControllerConfig

        config = ControllerConfig(**getattr(backend, "controller_options", {}))
        daemon = ControllerDaemon(backend, store, policy, interval_s=interval, queue_order=order,
                                  static_fraction=static_fraction, release_on_exit=not keep_held,
                                  config=config)
        stop_on_signals(lambda *_: daemon.stop())   # (SIGHUP too: coscheduler/stopsignals.py)
        click.echo(f"cosched run: {policy} on {backend_name}, state in {db_path}", err=True)
        stats = daemon.run(max_passes=max_passes, until=until)
        click.echo(f"cosched run: stopped after {stats.passes} passes ({stats.started} started, "
                   f"{stats.coallocated} co-allocated, {stats.finished} finished, "
                   f"{stats.errors} errors)", err=True)
        if stats.fatal:
            raise click.ClickException(f"the backend stopped: {stats.fatal}")
    finally:
        store.close()
