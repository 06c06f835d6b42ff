"""CPU quotas of Mesos tasks, applied by the node agent (monitoring/) on each task's host.

The framework asks, the node agent writes cgroups (it stays the only part that does):

- before a task is launched, its job is registered with the agent of its Mesos agent with
  no pids (``pids: []``); the task's command then starts with a two-line shell prologue
  that writes its own pid into the job's ``cgroup.procs`` and execs the job, so no
  instruction of the job runs outside its quota (``monitoring/launch.py`` does the same
  for local processes). The task must run as root (or in a delegated cgroup) for that.
- when the agent reports ``container_status.executor_pid`` in TASK_RUNNING, that pid is
  registered too (the node agent follows descendants), a second way in.
- quotas are leased: the framework renews them on every controller pass; if it dies, the
  leases lapse and every job gets its full quota back.

``LocalNodeAgents`` runs one in-process ``NodeAgent`` per Mesos agent (the agents of an
emulated master all live on this machine); ``RemoteNodeAgents`` talks to ``cosched agent``
on each agent's host over HTTP (a real cluster: ``--node-agent HOST=URL``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from coscheduler import boundedjson
from coscheduler.model import InvalidInput, Job
from coscheduler.progress import write_json_atomic

log = logging.getLogger("mesos_framework.quotas")

# Runs as /bin/sh -c SCRIPT cosched-task CMD...: enter the job's cgroups, then become the job.
# As root a failure to enter is fatal (exit 97: the job would run unthrottled). A task run as
# its submitter's own user (CommandInfo.user) may not write root's cgroups: it goes on, and
# the node agent moves it in once it knows the task's pid (TASK_RUNNING's executor_pid).
ENTER_SCRIPT = ('for p in $COSCHED_CGROUP_PROCS; do echo $$ 2>/dev/null > "$p" || '
                '[ "$(id -u)" != 0 ] || exit 97; done; exec "$@"')


class NodeQuotas(Protocol):
    def prepare(self, agent_id: str, hostname: str, job: Job, cores: int) -> dict[str, str]:
        """Register the job's part on this agent; returns the task's extra environment."""
        ...

    def add_pid(self, agent_id: str, hostname: str, job_id: str, pid: int) -> None: ...

    def set_quota(self, agent_id: str, hostname: str, job_id: str, fraction: float,
                  lease_s: float) -> None: ...

    def release(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None:
        """Unregister the job from the node's agent; the agent's last view of it (None: no
        agent), whose ``life_cpu_percent`` is its mean CPU use over its life."""
        ...

    def sample(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None: ...

    def listing(self, agent_id: str, hostname: str) -> dict[str, dict[str, Any]]:
        """Every job's view on this agent's node, by job id, in one call."""
        ...

    def close(self) -> None: ...


def wrap_command(command: tuple[str, ...]) -> list[str]:
    """The argv of a task whose process enters its cgroups first (see ENTER_SCRIPT)."""
    sh = shutil.which("sh") or "/bin/sh"
    return [sh, "-c", ENTER_SCRIPT, "cosched-task", *command]


def _safe_name(value: str) -> str:
    """A cgroup and file name from a Mesos id (framework or agent): kept when it is made of
    ``[A-Za-z0-9._-]`` and short, else a digest (stable across restarts either way)."""
    if value and len(value) <= 64 and all(c.isalnum() or c in "._-" for c in value) \
            and value not in (".", ".."):
        return value
    return "h" + hashlib.sha256(value.encode()).hexdigest()[:24]


class LocalNodeAgents:
    """One in-process node agent per Mesos agent, all on this machine (an emulated master).

    ``cpu_per_core`` is what one offered core is worth in real CPUs (machine CPUs / all
    emulated cores): full quota of a job of c cores is c x cpu_per_core CPUs, as on the
    local backend's emulated nodes.

    Crash safety (the lease rule of ``cosched agent``, for agents that live in this
    process): once the framework id is known (``bind``, called at SUBSCRIBED), the agents'
    cgroup base is ``cosched-mesos-<framework id>`` and their state lives in
    ``<workdir>/<framework id>/``, both stable, so a restarted framework (same id, from its
    state file) finds and recovers what a killed one left: every quota lifted at once,
    the jobs adopted and managed again. A watchdog process (``watchdog.py``) lifts the
    quotas one lease after this process dies, whether or not anything comes back.
    """

    def __init__(self, workdir: str | os.PathLike, cpu_per_core: float | None = None, *,
                 total_cores: Callable[[], int] | None = None,
                 cgroup_base: str | None = None, interval_s: float = 0.5,
                 lease_s: float | None = None):
        if cpu_per_core is not None and not cpu_per_core > 0:
            raise InvalidInput(f"cpu_per_core must be > 0, got {cpu_per_core!r}")
        if cpu_per_core is None and total_cores is None:
            raise InvalidInput("local node agents: give cpu_per_core or total_cores")
        # None: machine CPUs / the cluster's cores, fixed when the first agent is needed
        # (after the first offers, which show each emulated agent whole).
        self.cpu_per_core = float(cpu_per_core) if cpu_per_core is not None else None
        self._total_cores = total_cores
        self.root_dir = Path(workdir)
        self.workdir = self.root_dir
        self._fixed_base = cgroup_base
        self.cgroup_base = cgroup_base or f"cosched-mesos-{os.getpid()}"
        self.interval_s = interval_s
        self.lease_s = lease_s
        self.agents: dict[str, Any] = {}
        self._names: dict[str, str] = {}
        self._bound: str | None = None
        self._watchdog: subprocess.Popen | None = None
        self._lock = threading.RLock()

    # -- crash safety ---------------------------------------------------------------------
    def bind(self, framework_id: str) -> None:
        """Name the cgroup base and the state folder after the framework id, stop a dead
        predecessor's watchdog, recover the agents it left, and start this one's watchdog."""
        with self._lock:
            if self._bound == framework_id:
                return
            if self.agents:      # agents made before the id was known keep their names
                return
            self._bound = framework_id
            name = _safe_name(framework_id)
            self.workdir = self.root_dir / name
            if self._fixed_base is None:
                self.cgroup_base = f"cosched-mesos-{name}"
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._stop_predecessor_watchdog()
            saved = self._read_meta()
            if self.cpu_per_core is None and saved.get("cpu_per_core"):
                self.cpu_per_core = float(saved["cpu_per_core"])
            for agent_id in saved.get("agents", {}):
                try:
                    self._agent(agent_id)      # recovery: quotas lifted, jobs adopted
                except Exception as exc:  # noqa: BLE001 - the next call retries
                    log.error("recovering the node agent of %s failed: %s", agent_id, exc)
            if self.lease_s is not None:
                self._start_watchdog()

    def _meta_path(self) -> Path:
        return self.workdir / "agents.json"

    def _read_meta(self) -> dict[str, Any]:
        try:
            data = boundedjson.loads(self._meta_path().read_bytes(), what="agents.json")
            return data if isinstance(data, dict) and isinstance(data.get("agents", {}), dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_meta(self) -> None:
        if self._bound is None:
            return
        write_json_atomic(self._meta_path(), {"cpu_per_core": self.cpu_per_core,
                                              "cgroup_base": self.cgroup_base,
                                              "agents": dict(self._names)}, prefix=".agents-")

    def _pidfile(self) -> Path:
        return self.workdir / "watchdog.pid"

    def _stop_predecessor_watchdog(self) -> None:
        try:
            pid = int(self._pidfile().read_text().split()[0])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            return
        if b"mesos_framework.watchdog" in cmd and self.cgroup_base.encode() in cmd:
            log.info("stopping the watchdog %d of a previous instance: this one recovers", pid)
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass

    def _start_watchdog(self) -> None:
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "mesos_framework.watchdog", "--base", self.cgroup_base,
             "--lease-s", str(self.lease_s), "--pidfile", str(self._pidfile())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=open(self.workdir / "watchdog.log", "ab"), start_new_session=True,
            cwd=str(Path(__file__).resolve().parent.parent))

    def _agent(self, agent_id: str):
        a = self.agents.get(agent_id)
        if a is None:
            from monitoring.agent import NodeAgent
            with self._lock:
                a = self.agents.get(agent_id)
                if a is not None:
                    return a
                if self.cpu_per_core is None:
                    total = max(1, int(self._total_cores()))
                    self.cpu_per_core = min(1.0, len(os.sched_getaffinity(0)) / total)
                # named after the Mesos agent id: the same name after a restart
                name = _safe_name(agent_id) if self._bound is not None else f"a{len(self.agents)}"
                self._names[agent_id] = name
                a = NodeAgent(cgroup_root=f"{self.cgroup_base}/{name}", interval_s=self.interval_s,
                              node_cpus=float(len(os.sched_getaffinity(0))),
                              cpu_per_core=self.cpu_per_core,
                              state_dir=self.workdir / "agents" / name,
                              progress_dir=self.workdir / "progress").start()
                self.agents[agent_id] = a
                self._write_meta()
        return a

    def prepare(self, agent_id: str, hostname: str, job: Job, cores: int) -> dict[str, str]:
        view = self._agent(agent_id).register_job({
            "job_id": job.job_id, "pids": [], "cores": cores, "walltime_s": job.walltime_s,
            "tasks_total": job.tasks, "job_class": job.job_class})
        return {"COSCHED_CGROUP_PROCS": " ".join(view["cgroup_procs"]),
                "COSCHED_PROGRESS_FILE": view["progress_file"]}

    def add_pid(self, agent_id: str, hostname: str, job_id: str, pid: int) -> None:
        a = self.agents.get(agent_id)
        if a is not None:
            view = a.job(job_id)
            a.register_job({"job_id": job_id, "pids": [pid], "cores": view["cores"]})

    def set_quota(self, agent_id: str, hostname: str, job_id: str, fraction: float,
                  lease_s: float) -> None:
        a = self._agent(agent_id)
        if fraction >= 1.0:
            a.clear_quota(job_id, "full quota given back by the framework")
        else:
            a.set_quota(job_id, fraction, lease_s)

    def release(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None:
        a = self.agents.get(agent_id)
        return a.unregister(job_id) if a is not None else None

    def sample(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None:
        a = self.agents.get(agent_id)
        return a.job(job_id) if a is not None else None

    def listing(self, agent_id: str, hostname: str) -> dict[str, dict[str, Any]]:
        a = self.agents.get(agent_id)
        return {v["job_id"]: v for v in a.jobs()} if a is not None else {}

    def close(self) -> None:
        left = False
        for a in reversed(list(self.agents.values())):
            try:
                left |= bool(a.close().get("left"))
            except Exception:  # noqa: BLE001 - closing anyway
                left = True
        self.agents = {}
        for mount in _mounts():
            try:
                os.rmdir(mount / self.cgroup_base)   # the base, once every agent root is gone
            except OSError:
                pass
        if self._watchdog is not None:
            try:
                # a clean close lifted everything the agents could; if cgroups are left
                # (jobs still running), the watchdog stays to lift and sweep them
                self._watchdog.stdin.write(b"exit" if left else b"bye")
                self._watchdog.stdin.close()
            except OSError:
                pass
            self._watchdog = None


def _mounts() -> list[Path]:
    try:
        from monitoring.cgroupfs import detect_layout
        layout = detect_layout()
    except Exception:  # noqa: BLE001 - no cgroups here: nothing to remove
        return []
    return [m for m in {layout.cpu_mount, layout.acct_mount} if m is not None]


class RemoteNodeAgents:
    """``cosched agent`` on each agent's host, by hostname (``{hostname: url}``)."""

    def __init__(self, urls: Mapping[str, str], token: str | None = None,
                 token_file: str | None = None):
        from monitoring.client import AgentClient
        if not urls:
            raise InvalidInput("node agents: give at least one HOST=URL")
        self.clients = {h: AgentClient(u, token=token, token_file=token_file) for h, u in urls.items()}

    def _client(self, hostname: str):
        c = self.clients.get(hostname)
        if c is None:
            raise InvalidInput(f"no node agent configured for Mesos agent host {hostname!r} "
                               f"(known: {sorted(self.clients)})")
        return c

    def prepare(self, agent_id: str, hostname: str, job: Job, cores: int) -> dict[str, str]:
        view = self._client(hostname).register_job(job.job_id, [], cores, walltime_s=job.walltime_s,
                                                   tasks_total=job.tasks, job_class=job.job_class)
        return {"COSCHED_CGROUP_PROCS": " ".join(view["cgroup_procs"]),
                "COSCHED_PROGRESS_FILE": view["progress_file"]}

    def add_pid(self, agent_id: str, hostname: str, job_id: str, pid: int) -> None:
        c = self._client(hostname)
        c.register_job(job_id, [pid], c.job(job_id)["cores"])

    def set_quota(self, agent_id: str, hostname: str, job_id: str, fraction: float,
                  lease_s: float) -> None:
        c = self._client(hostname)
        if fraction >= 1.0:
            c.clear_quota(job_id)
        else:
            c.set_quota(job_id, fraction, lease_s)

    def release(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None:
        return self._client(hostname).unregister(job_id)

    def sample(self, agent_id: str, hostname: str, job_id: str) -> dict[str, Any] | None:
        return self._client(hostname).job(job_id)

    def listing(self, agent_id: str, hostname: str) -> dict[str, dict[str, Any]]:
        return {v["job_id"]: v for v in self._client(hostname).jobs()}

    def close(self) -> None:
        for c in self.clients.values():
            c.close()


__all__ = ["ENTER_SCRIPT", "LocalNodeAgents", "NodeQuotas", "RemoteNodeAgents", "wrap_command"]
