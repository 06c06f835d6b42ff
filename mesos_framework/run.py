"""Run jobs on a Mesos master: the driver, the framework backend and the one Controller.

``MesosRun`` wires them and runs the loop: a controller pass whenever the driver brings
something new (offers, rescinds, status updates) or every ``pass_interval_s``, then the
held offers that waited too long go back (``MesosBackend.after_pass``).

``run_command`` is the command line (``cosched run --backend mesos --master URL``; until
the shared ``cosched run`` lands it is also ``python -m mesos_framework.run``). Jobs come
from a queue file (JSON: a list of jobs, or one job per line) or from ``--workload small``
(one Montage-, BLAST-, Statistics- and Synthetic-like workflow, as ``cosched demo`` runs).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import click

from coscheduler.controller import Controller, ControllerConfig, PassReport
from coscheduler.model import InvalidInput, Job, Outcome
from coscheduler.recorder import MemoryRecorder, Recorder

from .driver import MesosSchedulerDriver
from .framework import FrameworkConfig, MesosBackend
from .quotas import LocalNodeAgents, NodeQuotas, RemoteNodeAgents

log = logging.getLogger("mesos_framework.run")


@dataclass
class RunResult:
    outcomes: list[Outcome]
    passes: int
    seconds: float
    coallocations: int
    errors: list[str] = field(default_factory=list)
    fatal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "passes": self.passes,
                "coallocations": self.coallocations, "fatal": self.fatal,
                "jobs": [{"job_id": o.job_id, "state": o.state, "start": round(o.start_time, 3),
                          "end": round(o.end_time, 3), "reason": o.reason} for o in self.outcomes],
                "errors": self.errors[-20:]}


class MesosRun:
    """One framework instance: backend + driver + controller (see the module docstring)."""

    def __init__(self, master: str, policy: str = "asax", *, recorder: Recorder | None = None,
                 config: FrameworkConfig | None = None, quotas: NodeQuotas | None = None,
                 controller_config: ControllerConfig | None = None,
                 pass_interval_s: float = 0.25, driver_options: dict[str, Any] | None = None):
        self.backend = MesosBackend(config, quotas)
        self.driver = MesosSchedulerDriver(self.backend, self.backend.framework_info(), master,
                                           **(driver_options or {}))
        self.backend.attach(self.driver)
        self.recorder = recorder if recorder is not None else MemoryRecorder()
        self.policy = policy
        cc = controller_config or ControllerConfig(give_up_unplaceable=False)
        self.controller = Controller.from_recorder(self.backend, self.recorder, policy, config=cc)
        self.pass_interval_s = pass_interval_s
        self.reports: list[PassReport] = []
        self._stop = threading.Event()

    def submit(self, jobs: Iterable[Job]) -> None:
        for j in jobs:
            self.backend.submit(j)

    def start(self) -> "MesosRun":
        self.driver.start()
        return self

    def step(self) -> PassReport:
        self.backend.changed.clear()
        report = self.controller.step()
        self.backend.after_pass()
        if report.errors:
            for e in report.errors:
                log.info("pass: %s", e)
        self.reports.append(report)
        if len(self.reports) > 1000:
            self.reports = self.reports[-500:]
        return report

    def run(self, until: Callable[[], bool] | None = None, timeout_s: float | None = None) -> RunResult:
        """Pass after pass until every job ended (or ``until()``), the master reported a
        fatal error, ``stop()`` was called, or ``timeout_s`` passed."""
        t0 = time.monotonic()
        done = until or self.backend.idle
        coalloc, errors = 0, []
        while not self._stop.is_set():
            self.backend.changed.wait(self.pass_interval_s)
            r = self.step()
            coalloc += r.coallocated
            errors += r.errors
            if self.backend.fatal or done():
                break
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                errors.append(f"stopped after {timeout_s:g} s with jobs left")
                break
        return RunResult(list(self.backend.history), self.controller.passes,
                         time.monotonic() - t0, coalloc, errors, self.backend.fatal)

    def stop(self) -> None:
        self._stop.set()
        self.backend.changed.set()

    def close(self, failover: bool = False) -> None:
        """End the framework: its tasks killed and the framework torn down, or with
        ``failover`` both left to a next instance (within failover_timeout)."""
        self.backend.close(kill=not failover)
        self.driver.stop(failover=failover)


# -- job input -------------------------------------------------------------------------------

_JOB_FIELDS = {"job_id", "cores", "walltime_s", "job_class", "submit_time", "stage_type", "tasks",
               "nodes", "workflow", "depends_on", "mem_mb", "user", "command"}


def read_queue_file(path: str | os.PathLike) -> list[Job]:
    """Jobs from a JSON file: a list of job objects, or one object per line (JSON lines).
    Each needs job_id, cores, walltime_s, job_class and command (a list of strings)."""
    text = Path(path).read_text()
    stripped = text.lstrip()
    try:
        items = json.loads(text) if stripped.startswith("[") else \
            [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise InvalidInput(f"queue file {path}: not JSON ({exc})") from None
    jobs = []
    for i, item in enumerate(items):
        where = f"queue file {path}: job {i + 1}"
        if not isinstance(item, dict):
            raise InvalidInput(f"{where} is not an object")
        unknown = sorted(set(item) - _JOB_FIELDS)
        if unknown:
            raise InvalidInput(f"{where}: unknown field(s) {unknown}; known: {sorted(_JOB_FIELDS)}")
        cmd = item.get("command")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise InvalidInput(f"{where}: command must be a non-empty list of strings")
        try:
            jobs.append(Job(**{**item, "command": tuple(cmd),
                               "depends_on": tuple(item.get("depends_on", ()))}))
        except TypeError as exc:
            raise InvalidInput(f"{where}: {exc}") from None
    return jobs


def parse_node_agents(specs: Iterable[str]) -> dict[str, str]:
    out = {}
    for s in specs:
        host, sep, url = s.partition("=")
        if not sep or not host or not url.startswith("http://"):
            raise InvalidInput(f"--node-agent {s!r}: use HOST=http://ADDR:PORT")
        out[host] = url
    return out


# -- the command line ------------------------------------------------------------------------

@click.command("run")
@click.option("--master", required=True, help="Any Mesos master: http://HOST:PORT (307 redirects to the leader are followed).")
@click.option("--policy", default="asax", show_default=True, type=click.Choice(["space-sharing", "static", "asax"]))
@click.option("--queue-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Jobs to run (JSON list or JSON lines).")
@click.option("--workload", type=click.Choice(["small"]), default=None,
              help="Built-in jobs: one workflow of each kind (as cosched demo).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="State database (learner weights, decisions); default: in memory.")
@click.option("--role", default=None, help="Mesos role to subscribe with.")
@click.option("--principal", default=None)
@click.option("--user", default="root", show_default=True, help="Unix user tasks run as.")
@click.option("--failover-timeout", type=float, default=7 * 86400.0, show_default=True)
@click.option("--state-file", type=click.Path(dir_okay=False), default=None,
              help="Where the framework id and launched tasks are kept for failover.")
@click.option("--hold", "hold_s", type=float, default=5.0, show_default=True,
              help="Seconds an offer is held for a gang before it is declined.")
@click.option("--refuse", "refuse_s", type=float, default=2.0, show_default=True,
              help="refuse_seconds of the filter on declined offers.")
@click.option("--quotas", type=click.Choice(["local", "remote", "none"]), default="local", show_default=True,
              help="local: one in-process node agent per Mesos agent (an emulated master on "
                   "this machine, needs root); remote: cosched agent per host (--node-agent); "
                   "none: no CPU quotas (space sharing only).")
@click.option("--node-agent", multiple=True, help="HOST=http://ADDR:PORT of cosched agent on a Mesos agent host.")
@click.option("--token-file", default=None, help="Token of the remote node agents.")
@click.option("--cpu-per-core", type=float, default=None,
              help="Real CPUs per offered core for local quotas (default: this machine's CPUs / "
                   "the cores first offered).")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Give up after this many seconds.")
@click.option("--json", "as_json", is_flag=True)
def run_command(master, policy, queue_file, workload, db, role, principal, user, failover_timeout,
                state_file, hold_s, refuse_s, quotas, node_agent, token_file, cpu_per_core,
                timeout_s, as_json):
    """Run jobs as Mesos tasks: first-fit gangs over offers, co-allocation by POLICY."""
    try:
        jobs = _jobs(queue_file, workload)
        config = FrameworkConfig(user=user, role=role, principal=principal,
                                 failover_timeout_s=failover_timeout, hold_s=hold_s,
                                 refuse_s=refuse_s, state_file=state_file)
        make_quotas = _quotas(quotas, node_agent, token_file, cpu_per_core, policy)
        mr = MesosRun(master, policy, recorder=_recorder(db), config=config)
        mr.backend.quotas = make_quotas(mr.backend)
    except (InvalidInput, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    mr.submit(jobs)
    signal.signal(signal.SIGTERM, lambda *_: mr.stop())
    mr.start()
    try:
        result = mr.run(timeout_s=timeout_s)
    except KeyboardInterrupt:
        mr.stop()
        result = None
    finally:
        mr.close(failover=False)
    if result is None:
        raise click.ClickException("interrupted: tasks killed, framework torn down")
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
    else:
        for o in result.outcomes:
            click.echo(f"{o.job_id:40s} {o.state:9s} {o.start_time:7.1f}s -> {o.end_time:7.1f}s {o.reason}")
        click.echo(f"{len(result.outcomes)} outcomes, {result.coallocations} co-allocations, "
                   f"{result.passes} passes, {result.seconds:.1f} s")
    if result.fatal:
        raise click.ClickException(f"the master reported: {result.fatal}")


def _jobs(queue_file, workload) -> list[Job]:
    if bool(queue_file) == bool(workload):
        raise InvalidInput("give exactly one of --queue-file or --workload")
    if queue_file:
        return read_queue_file(queue_file)
    from testbed.workloads.jobs import small_mix
    return small_mix(tag=f"mesos{int(time.time()) % 100000}",
                     workdir=tempfile.mkdtemp(prefix="cosched-mesos-"))


def _quotas(kind, node_agent, token_file, cpu_per_core, policy
            ) -> Callable[[MesosBackend], NodeQuotas | None]:
    """What applies CPU quotas, made once the backend exists (local agents size
    themselves from the cores it was offered)."""
    if kind == "none":
        if policy != "space-sharing":
            raise InvalidInput(f"--policy {policy} co-allocates, which needs CPU quotas: use "
                               "--quotas local or remote, or --policy space-sharing")
        return lambda backend: None
    if kind == "remote":
        agents = RemoteNodeAgents(parse_node_agents(node_agent), token_file=token_file)
        return lambda backend: agents
    from coscheduler.backends.local import check_local_support
    check_local_support()
    return lambda backend: LocalNodeAgents(tempfile.mkdtemp(prefix="cosched-mesos-agents-"),
                                           cpu_per_core, total_cores=backend.cluster_cores)


def _recorder(db: Path | None) -> Recorder:
    if db is None:
        return MemoryRecorder()
    from coscheduler.store import SqliteStore
    return SqliteStore(db)


if __name__ == "__main__":   # python -m mesos_framework.run --master URL ...
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    run_command()


__all__ = ["MesosRun", "RunResult", "parse_node_agents", "read_queue_file", "run_command"]
