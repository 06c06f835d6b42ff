"""``cosched agent``: run the per-node monitoring agent (see monitoring/README.md)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import threading
from pathlib import Path

import click

from coscheduler.cli._types import FiniteRange, positive
from coscheduler.stopsignals import stop_on_signals


def _token(token_file: str | None, state_dir: Path) -> tuple[str, str]:
    """Read the token file, or create ``STATE_DIR/token`` (mode 600) when none is given."""
    from monitoring.api import read_token_file

    if token_file:
        return read_token_file(token_file), token_file
    path = state_dir / "token"
    state_dir.mkdir(parents=True, exist_ok=True)
    try:   # (O_EXCL: a link or a FIFO put there is not written through; refused below)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    # follow=False: the agent's own file; a link there may lead to any file (/dev/zero)
    return read_token_file(str(path), follow=False), str(path)


def _guest_weight(_ctx, _param, value: str) -> int | None:
    from coscheduler.model import InvalidInput
    from monitoring.roles import check_guest_weight

    try:
        return check_guest_weight(value)
    except InvalidInput as e:
        raise click.BadParameter(str(e))


def _describe(e: Exception) -> str:
    """An error as one line that names the path (OSError's str() is "[Errno 13] ...")."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    return str(e)


@click.command("agent")
@click.option("--listen", default="127.0.0.1:9137", show_default=True,
              help="HOST:PORT to serve the HTTP API on (port 0: any free port).")
@click.option("--token-file", type=click.Path(dir_okay=False),
              help="File whose first line is the Bearer token writes need "
                   "[default: STATE_DIR/token, created if missing].")
@click.option("--cgroup-root", default="cosched", show_default=True,
              help="The agent's cgroup, relative to the controller's mount (e.g. cosched/n1).")
@click.option("--interval", type=positive(), default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--node-cpus", type=positive(), default=None,
              help="Emulated node: cap the agent's cgroup root to this many CPUs.")
@click.option("--cpu-per-core", type=positive(), default=1.0, show_default=True,
              help="Real CPUs per job core (an emulated node's core may be a fraction of a CPU).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Where the crash-recovery state file, token and progress files live "
                   "[default: /var/lib/cosched-agent as root].")
@click.option("--progress-dir", type=click.Path(file_okay=False), default=None,
              help="Folder for progress files [default: STATE_DIR/progress].")
@click.option("--max-lease", type=positive(), default=3600.0, show_default=True,
              help="Longest quota lease accepted, seconds.")
@click.option("--retention", type=FiniteRange(min=0.0), default=300.0, show_default=True,
              help="Seconds a finished job's last sample stays readable.")
@click.option("--cgroup-version", type=click.Choice(["auto", "1", "2"]), default="auto",
              show_default=True, help="Force cgroup v1 or v2 instead of detecting.")
@click.option("--guest-weight", default="idle", show_default=True, callback=_guest_weight,
              help="How a guest job competes for its host's cores: 'idle' (the idle class: it "
                   "runs only on what its host leaves) or a cpu.weight 1-10000 (for guests that "
                   "wait on messages or files in short rounds; the host keeps its weight 1000)")
@click.option("--discover-slurm", is_flag=True,
              help="Register Slurm jobs found in the cpuacct/unified hierarchy by themselves.")
@click.option("--slurm-node", default=None,
              help="With --discover-slurm: only this Slurm node's jobs (several slurmd on one "
                   "host each have their own slurm_NODE cgroup).")
@click.option("--check", is_flag=True,
              help="Print the detected cgroup layout and exit without changing anything.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def agent(listen, token_file, cgroup_root, interval, node_cpus, cpu_per_core, state_dir,
          progress_dir, max_lease, retention, cgroup_version, guest_weight, discover_slurm,
          slurm_node, check, log_level):
    """Sample this node's jobs and apply leased cgroup CPU quotas, over an HTTP JSON API.

    Stops cleanly on SIGTERM, SIGINT and SIGHUP: every quota is lifted and empty job
    cgroups removed.
    After a crash, the next start cleans what was left (state file + scan of the root).
    """
    from coscheduler.model import InvalidInput
    from monitoring.agent import NodeAgent, default_state_dir
    from monitoring.api import AgentServer
    from monitoring.cgroupfs import CgroupError, detect_layout

    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    version = None if cgroup_version == "auto" else int(cgroup_version)
    if check:
        try:
            click.echo(json.dumps(detect_layout(prefer=version).describe()))
        except CgroupError as e:
            raise click.ClickException(str(e))
        return
    sdir = Path(state_dir) if state_dir else default_state_dir()
    try:
        token, token_path = _token(token_file, sdir)
        node_agent = NodeAgent(cgroup_root, interval_s=interval, node_cpus=node_cpus,
                               cpu_per_core=cpu_per_core, state_dir=sdir, progress_dir=progress_dir,
                               max_lease_s=max_lease, finished_retention_s=retention,
                               discover_slurm=discover_slurm, slurm_node=slurm_node,
                               cgroup_version=version, guest_weight=guest_weight)
    except (InvalidInput, CgroupError, OSError) as e:
        what = _describe(e)
        if os.geteuid() != 0:
            # Not root: that, not the path that happened to fail first, is what to fix.
            raise click.ClickException(
                f"cosched agent needs root (it moves processes between cgroups and writes their "
                f"CPU quotas); running as uid {os.geteuid()} it could not start: {what}. "
                "Run it as root (monitoring/cosched-agent.service), or use --check to see the "
                "cgroup layout without changing anything")
        raise click.ClickException(what)
    try:
        server = AgentServer(node_agent, listen, token)
    except (OSError, InvalidInput) as e:
        node_agent.close()
        raise click.ClickException(f"cannot listen on {listen}: {e}")
    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger("monitoring.agent").info("signal %d: stopping", signum)
        stop.set()

    stop_on_signals(on_signal)   # (SIGHUP too: coscheduler/stopsignals.py)
    server.start()
    # One line on stdout that scripts can read: where the agent listens and its token file.
    click.echo(json.dumps({"url": server.url, "token_file": token_path, "pid": os.getpid(),
                           "cgroup": str(node_agent.actuator.cpu.root),
                           "recovery": node_agent.recovery}), nl=True)
    sys.stdout.flush()
    try:
        node_agent.run(stop)
    finally:
        server.shutdown()
        done = node_agent.close(restore=True)
        logging.getLogger("monitoring.agent").info("stopped: %s", done)
