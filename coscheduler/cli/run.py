"""``cosched run``: the controller as a daemon against a real batch system.

    cosched run --backend slurm [--slurm-dir D | --slurm-conf F --agents FILE]
                [--partition P] [--policy space-sharing|static|asax] [--queue-policy Q]
                [--db PATH] [--interval S] [--lease S] [--keep-held]

Logs each start, co-allocation and ASA_X decision on stderr. SIGTERM/SIGINT: every quota
it applied is given back and the jobs it still holds are handed to the batch system
(``--keep-held`` leaves them held, for a quick restart). A restart resumes from ``--db``.
Backends come from ``coscheduler/backends/registry.py``.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import click

from ..backends.registry import backend_names, make_backend
from ..model import InvalidInput
from ._common import db_option, resolve_db


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
@click.option("--partition", default=None, help="Slurm: the co-scheduling partition [cosched].")
@click.option("--policy", type=click.Choice(["space-sharing", "static", "asax"]), default="asax",
              show_default=True, help="Co-allocation policy.")
@click.option("--static-fraction", type=float, default=0.5, show_default=True,
              help="Quota fraction the static policy lends.")
@click.option("--queue-policy", default="FCFS", show_default=True,
              help="Queue order: FCFS, SJF, F1, WFP3, UNICEP, ..., or a learned model "
                   "rl:NAME|PATH (cosched models list).")
@click.option("--inspector", default=None, metavar="NAME|PATH",
              help="Queue order by a SchedInspector model over its base policy (instead of "
                   "--queue-policy).")
@db_option
@click.option("--interval", type=float, default=2.0, show_default=True,
              help="Seconds between passes.")
@click.option("--lease", "lease_s", type=float, default=20.0, show_default=True,
              help="Seconds a quota lasts at the node agent unless renewed (fail-safe).")
@click.option("--keep-held", is_flag=True,
              help="On exit, leave queued jobs held for the next controller.")
@click.option("--max-passes", type=int, default=None, help="Stop after N passes (tests).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def run(backend_name, slurm_dir, slurm_conf, agents, slurm_source, partition, policy,
        static_fraction, queue_policy, inspector, db, interval, lease_s, keep_held, max_passes, log_level):
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
    if backend_name == "slurm" and slurm_dir is None and slurm_conf is None:
        from slurm_plugin.cluster import default_dir

        slurm_dir = default_dir()
    db_path = resolve_db(db)
    options = {"slurm_dir": str(slurm_dir) if slurm_dir else None, "slurm_conf": slurm_conf,
               "agents": agents, "slurm_source": slurm_source, "partition": partition,
               "lease_s": lease_s, "db": str(db_path)}
    try:
        backend = make_backend(backend_name, options)
    except (InvalidInput, OSError) as exc:
        raise click.ClickException(f"cannot connect to {backend_name}: {exc}") from None
    except Exception as exc:  # BackendError and friends: Slurm not reachable
        raise click.ClickException(f"cannot connect to {backend_name}: {exc}") from None
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
        daemon = ControllerDaemon(backend, store, policy, interval_s=interval, queue_order=order,
                                  static_fraction=static_fraction, release_on_exit=not keep_held)
        signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
        signal.signal(signal.SIGINT, lambda *_: daemon.stop())
        click.echo(f"cosched run: {policy} on {backend_name}, state in {db_path}", err=True)
        stats = daemon.run(max_passes=max_passes)
        click.echo(f"cosched run: stopped after {stats.passes} passes ({stats.started} started, "
                   f"{stats.coallocated} co-allocated, {stats.finished} finished, "
                   f"{stats.errors} errors)", err=True)
    finally:
        store.close()
