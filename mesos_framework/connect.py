"""Building the Mesos backend for ``cosched run --backend mesos`` (coscheduler/backends/registry.py).

``backend_from_options`` reads the run command's options (a plain dict), makes the
framework backend, its node-agent quotas and job feeds, starts the scheduler driver and
waits for the master's SUBSCRIBED (a master that cannot be reached is reported at once,
not retried silently). The daemon (coscheduler/daemon.py) then drives it like any backend;
the hooks it calls are on ``MesosBackend`` (``after_pass``, ``wait_for_change``, ...).
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from coscheduler.boundedfile import read_line_secret
from coscheduler.backend import BackendError
from coscheduler.model import InvalidInput

from .driver import MesosSchedulerDriver, parse_master
from .feeds import QueueFeed, WorkloadFeed
from .framework import FrameworkConfig, MesosBackend
from .quotas import LocalNodeAgents, NodeQuotas, RemoteNodeAgents
from .queue import JobQueue, default_queue_dir, read_queue_file

log = logging.getLogger("mesos_framework.connect")


def parse_node_agents(specs: Iterable[str]) -> dict[str, str]:
    """``HOST=http://ADDR:PORT`` pairs (``--node-agent``) -> {hostname: url}."""
    out = {}
    for s in specs:
        host, sep, url = s.partition("=")
        if not sep or not host or not url.startswith(("http://", "https://")):
            raise InvalidInput(f"--node-agent {s!r}: use HOST=http://ADDR:PORT")
        out[host] = url
    return out


def make_quotas(kind: str, *, node_agents: Iterable[str] = (), token_file: str | None = None,
                cpu_per_core: float | None = None, policy: str = "asax",
                workdir: str | Path | None = None, lease_s: float | None = None
                ) -> Callable[[MesosBackend], NodeQuotas | None]:
    """Who applies CPU quotas, made once the backend exists (local agents size themselves
    from the cores it is offered): ``local`` (one in-process node agent per Mesos agent:
    the master's agents run on this machine, as the emulator's do), ``remote`` (``cosched
    agent`` on each agent host) or ``none`` (space sharing only)."""
    if kind == "none":
        if policy not in ("space-sharing",):
            raise InvalidInput(f"--policy {policy} co-allocates, which needs CPU quotas: use "
                               "--quotas local or remote, or --policy space-sharing")
        return lambda backend: None
    if kind == "remote":
        agents = RemoteNodeAgents(parse_node_agents(node_agents), token_file=token_file)
        return lambda backend: agents
    if kind != "local":
        raise InvalidInput(f"--quotas {kind!r}: choose local, remote or none")
    from monitoring.support import check_local_support
    check_local_support()
    # A stable folder (beside the framework state file) lets a restarted framework find
    # what a killed one left; without a state file there is no restart to prepare for.
    return lambda backend: LocalNodeAgents(workdir or tempfile.mkdtemp(prefix="cosched-mesos-agents-"),
                                           cpu_per_core, total_cores=backend.cluster_cores,
                                           lease_s=lease_s)


def framework_config(options: Mapping[str, Any]) -> FrameworkConfig:
    def opt(name, default):
        v = options.get(name)
        return default if v is None else v

    state_file = options.get("mesos_state_file")
    if state_file is None and options.get("db"):
        state_file = str(Path(options["db"]).with_suffix(".mesos.json"))
    return FrameworkConfig(
        name=opt("framework_name", "coscheduler"), user=opt("mesos_user", "root"),
        role=options.get("role"), principal=options.get("principal"),
        failover_timeout_s=float(opt("failover_timeout", 7 * 86400.0)),
        hold_s=float(opt("hold", 5.0)), refuse_s=float(opt("refuse", 2.0)),
        overtime_factor=float(opt("overtime", 1.0)),
        lease_s=float(opt("lease_s", 20.0)), state_file=state_file)


def backend_from_options(options: Mapping[str, Any]) -> MesosBackend:
    """For ``cosched run --backend mesos``: ``master`` (required), ``role``, ``principal``,
    ``mesos_user``, ``failover_timeout``, ``hold``, ``refuse``, ``overtime``, ``mesos_state_file`` (default
    beside ``db``), ``quotas`` (local|remote|none), ``node_agent``, ``token_file``,
    ``cpu_per_core``, ``mesos_queue`` (default beside ``db``), ``queue_file``,
    ``workload`` ("small"), ``from_slurm`` (+ ``slurm_conf``/``slurm_dir``,
    ``mesos_partition``), ``connect_timeout``."""
    master = options.get("master")
    if not master:
        raise InvalidInput("--backend mesos needs --master http://HOST:PORT")
    master = parse_master(master)
    config = framework_config(options)
    policy = options.get("policy") or "asax"
    quotas = make_quotas(options.get("quotas") or "local", node_agents=options.get("node_agent") or (),
                         token_file=options.get("token_file"),
                         cpu_per_core=options.get("cpu_per_core"), policy=policy,
                         workdir=(Path(config.state_file).with_suffix(".agents")
                                  if config.state_file else None),
                         lease_s=config.lease_s)
    db = Path(options["db"]) if options.get("db") else None
    queue_dir = Path(options["mesos_queue"]) if options.get("mesos_queue") else default_queue_dir(db)
    queue = JobQueue(queue_dir).ensure()
    if options.get("queue_file"):
        jobs = read_queue_file(options["queue_file"])
        queue.submit(jobs)
        log.info("%d job(s) of %s put in the queue %s", len(jobs), options["queue_file"], queue_dir)

    backend = MesosBackend(config)
    backend.quotas = quotas(backend)
    feed = QueueFeed(queue)
    feed.poll(backend)       # jobs of a previous run first: the controller adopts what still runs
    backend.add_feed(feed)
    if options.get("workload"):
        if options["workload"] != "small":
            raise InvalidInput(f"--workload {options['workload']!r}: only 'small' is known")
        backend.add_feed(WorkloadFeed(queue, local_cores=(options.get("quotas") or "local") == "local",
                                      scale=options.get("workload_scale")))
    if options.get("from_slurm"):
        from .slurm_feed import slurm_feed_from_options
        backend.add_feed(slurm_feed_from_options(options))
    secret = None
    if options.get("secret_file"):
        if not options.get("principal"):
            raise InvalidInput("--secret-file needs --principal (HTTP Basic authentication)")
        try:   # (bounded, no FIFO wait, UTF-8, a non-empty line: InvalidInput otherwise)
            secret = read_line_secret(options["secret_file"], f"--secret-file {options['secret_file']}")
        except OSError as exc:
            raise InvalidInput(f"--secret-file {options['secret_file']}: cannot read a secret "
                               f"({exc.strerror or exc})") from None
    driver = MesosSchedulerDriver(backend, backend.framework_info(), master,
                                  principal=options.get("principal"), secret=secret)
    backend.attach(driver)
    driver.start()
    timeout = float(options.get("connect_timeout") or 15.0)
    deadline = time.monotonic() + timeout
    while driver.subscriptions < 1 and time.monotonic() < deadline and driver.status == 2:
        time.sleep(0.05)
    if driver.subscriptions < 1:
        why = (driver.stream_errors or ["no answer"])[-1]
        backend.close(kill=False)
        raise BackendError(f"no subscription to the Mesos master {master} within {timeout:g} s: {why}")
    log.info("subscribed to %s as framework %s; jobs from %s%s", driver.master, driver.framework_id,
             queue_dir, " and Slurm" if options.get("from_slurm") else "")
    return backend


__all__ = ["backend_from_options", "framework_config", "make_quotas", "parse_node_agents"]
