"""``cosched mesos``: Mesos helpers. ``emulate`` runs the EMULATED master of testbed/mesos/
(no Mesos master can be installed here; the emulator follows the documented v1 scheduler
HTTP API, see testbed/mesos/README.md)."""

from __future__ import annotations

import json
import logging
import sys
import threading

import click

from coscheduler.stopsignals import stop_on_signals


@click.group("mesos")
def mesos() -> None:
    """Mesos: an emulated master for tests and trials (the framework's side is
    `cosched run --backend mesos`)."""


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = value, "5050"
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r}: give HOST:PORT with a port 0-65535", param_hint="--listen")
    return host, int(port)


@mesos.command("emulate")
@click.option("--agents", type=click.IntRange(1, 256), default=2, show_default=True,
              help="Number of emulated agents.")
@click.option("--cpus", type=click.FloatRange(min=0.01), default=4.0, show_default=True,
              help="cpus of each agent.")
@click.option("--mem", type=click.FloatRange(min=1), default=4096.0, show_default=True,
              help="mem of each agent, MB.")
@click.option("--disk", type=click.FloatRange(min=0), default=None, help="disk of each agent, MB.")
@click.option("--ports", default=None, metavar="BEGIN-END",
              help="A ports range each agent offers, e.g. 31000-32000.")
@click.option("--listen", default="127.0.0.1:5050", show_default=True,
              help="HOST:PORT of the master (port 0: any free port). Loopback unless you say so.")
@click.option("--heartbeat", type=click.FloatRange(min=0.01), default=15.0, show_default=True,
              help="Seconds between HEARTBEAT events (heartbeat_interval_seconds).")
@click.option("--allocation-interval", type=click.FloatRange(min=0.001), default=1.0,
              show_default=True, help="Seconds between periodic allocation passes.")
@click.option("--offer-timeout", type=click.FloatRange(min=0.001), default=None,
              help="Rescind offers not answered within this many seconds (default: never).")
@click.option("--status-update-retry", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True, help="Seconds before an unacknowledged status update is resent "
                                      "(doubling up to 600).")
@click.option("--cpu-scale", type=click.FloatRange(min=0.001), default=None,
              help="Real CPUs per emulated cpu [default: min(1, real CPUs / all agents' cpus)].")
@click.option("--isolation", type=click.Choice(["cgroups", "none"]), default="cgroups",
              show_default=True, help="cgroups: each task in its own cgroup under its agent's, "
                                      "CPU-limited, with a node agent per agent (root); none: plain "
                                      "processes.")
@click.option("--no-cpu-limit", is_flag=True, help="Do not cap tasks at their cpus (cgroups still "
                                                   "made and sampled).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Sandboxes and state [default: a new temporary folder, removed at exit].")
@click.option("--redirect-to", default=None, metavar="HOST:PORT",
              help="Play a non-leading master: answer every scheduler call with 307 to this leader.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
def emulate(agents, cpus, mem, disk, ports, listen, heartbeat, allocation_interval, offer_timeout,
            status_update_retry, cpu_scale, isolation, no_cpu_limit, workdir, redirect_to, log_level):
    """Run an EMULATED Mesos master with N agents on real HTTP (the documented v1 scheduler
    API, JSON), launching tasks as real local processes in per-agent cgroups.

    Prints one JSON line on stdout when ready (url, admin token file, agents: see
    docs/cli-json.md) and logs to stderr. SIGTERM/SIGINT: tasks killed, cgroups removed.
    """
    from testbed.mesos import AgentSpec, EmulatorUnavailable, MasterConfig, MesosEmulator
    from testbed.mesos.resources import ResourceError, parse_port_range

    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    addr = _listen(listen)
    try:
        port_range = parse_port_range(ports) if ports else None
    except ResourceError as e:
        raise click.BadParameter(str(e), param_hint="--ports")
    redirect = None
    if redirect_to:
        h, p = _listen(redirect_to)
        redirect = f"//{h}:{p}/api/v1/scheduler"
    config = MasterConfig(heartbeat_interval_s=heartbeat, allocation_interval_s=allocation_interval,
                          offer_timeout_s=offer_timeout, status_update_retry_s=status_update_retry)
    specs = [AgentSpec(cpus=cpus, mem_mb=mem, disk_mb=disk, ports=port_range) for _ in range(agents)]
    try:
        emu = MesosEmulator(specs, listen=addr, workdir=workdir, isolation=isolation,
                            cpu_scale=cpu_scale, cpu_limits=not no_cpu_limit, config=config)
    except (EmulatorUnavailable, ValueError, OSError) as e:
        raise click.ClickException(str(e))
    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger("testbed.mesos").info("signal %d: stopping", signum)
        stop.set()

    stop_on_signals(on_signal)   # (SIGHUP too: coscheduler/stopsignals.py)
    try:
        emu.start()
        if redirect:
            emu.master.set_redirect(redirect)
        click.echo(json.dumps(emu.ready_info()))
        sys.stdout.flush()
        while not stop.wait(0.5):
            pass
    finally:
        emu.close()
