"""What an emulated agent does on this machine: run a task's command as a real process
inside the agent's cgroups, and kill it.

With ``cgroups`` isolation (the default; root) every agent has one in-process
``monitoring.NodeAgent`` with its own cgroup root ``<base>/<agent>``; each task is a job of
that node agent, with its own cgroup below the root, so the node agent samples it and
applies CPU quotas to it exactly as on a cluster node. The task's CPU limit is its ``cpus``
times ``cpu_scale`` real CPUs (like a Mesos agent started with ``--cgroups_enable_cfs``).
The node agent can also be served over HTTP (``api_url``), so that a framework can set
leased quotas on tasks the way it would on a real node.

A task's process starts under a small ``/bin/sh`` supervisor that first writes its own pid
into the task's ``cgroup.procs`` files and then runs the command, so no instruction of the
task runs outside its cgroup. ``setpriv --pdeathsig HUP`` makes the supervisor kill the
task's whole process group when the emulator dies, even on ``kill -9``; each task leads its
own process group (``killpg``).

``none`` isolation runs plain processes (no root needed, no quotas).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

log = logging.getLogger("testbed.mesos.runtime")

_SETPRIV = shutil.which("setpriv")
# The task's supervisor, a POSIX shell that leads the task's process group:
# $1 = how many cgroup.procs files follow; it enters each (so the command starts inside
# its cgroups), then runs the command as its child and waits for it. Its parent-death
# signal is SIGHUP (setpriv), on which it kills the whole group: a task never outlives the
# emulator, even one killed with -9 (a forked grandchild has no parent-death signal of its
# own). SIGTERM from a kill is caught and ignored by the supervisor (a caught signal is
# reset to its default in the child; an ignored one would be inherited) so the command gets
# its grace period; when the command ends, its status is passed on: exit code as is, a
# death by signal re-raised on the supervisor itself.
_SUPERVISE = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; n=$((n-1)); done; '
    "trap 'kill -KILL 0' HUP; trap ':' TERM INT; "
    '"$@" & child=$!; '
    'while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done; '
    'if [ "$rc" -gt 128 ] && [ "$rc" -lt 160 ]; then sig=$((rc-128)); trap - HUP TERM INT; ulimit -c 0; '
    'kill -s "$sig" $$ 2>/dev/null || kill -"$sig" $$; fi; exit "$rc"')
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}$")
CGROUP_PREFIX = "cosched-mesos-"


class LaunchError(RuntimeError):
    """The task's process could not be started; the message says why."""


def node_job_id(framework_id: str, task_id: str, taken: set[str]) -> str:
    """The node agent's job id for a task: the task id itself when it is a safe job id and
    free on that agent, else ``task-<hash>`` of framework and task id."""
    if _JOB_ID_RE.match(task_id) and task_id not in (".", "..") and task_id not in taken:
        return task_id
    return "task-" + hashlib.sha1(f"{framework_id}/{task_id}".encode()).hexdigest()[:20]


def command_argv(command: dict[str, Any]) -> list[str]:
    """CommandInfo -> argv. shell (default true): ``/bin/sh -c value``; otherwise ``value``
    is the executable and ``arguments[1:]`` its arguments (``arguments[0]`` is argv[0] in
    Mesos; here argv[0] is always the executable's name as given)."""
    value = command.get("value")
    if command.get("shell", True):
        return ["/bin/sh", "-c", value]
    args = list(command.get("arguments") or [])
    return [value] + args[1:]


def command_env(command: dict[str, Any]) -> dict[str, str]:
    out = {}
    for var in (command.get("environment") or {}).get("variables") or []:
        if var.get("type", "VALUE") in ("VALUE", "UNKNOWN") and var.get("value") is not None:
            out[var["name"]] = var["value"]
    return out


class AgentRuntime:
    """Processes and cgroups of one emulated agent."""

    def __init__(self, name: str, workdir: Path, *, cgroup_base: str | None, cpus: float,
                 cpu_scale: float, cpu_limits: bool = True, serve_api: bool = False,
                 token: str | None = None, interval_s: float = 0.5, fast_dir: Path | None = None):
        self.name = name
        self.workdir = workdir
        self.sandboxes = workdir / "sandboxes"
        self.sandboxes.mkdir(parents=True, exist_ok=True)
        # The node agent rewrites its small state file on every registration, and tasks
        # their progress files: on a busy disk a rename costs tens of ms, on tmpfs 10 us.
        small = fast_dir if fast_dir is not None else workdir
        self.progress_dir = small / "progress"
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        self._state_dir = small / "node-agent"
        self.node_agent = None
        self.api = None
        self.cgroup = None
        if cgroup_base is not None:
            from monitoring.agent import NodeAgent

            self.node_agent = NodeAgent(
                cgroup_root=f"{cgroup_base}/{name}", interval_s=interval_s,
                node_cpus=(cpus * cpu_scale) if cpu_limits else None, cpu_per_core=cpu_scale,
                state_dir=self._state_dir, progress_dir=self.progress_dir,
                finished_retention_s=60.0).start()
            self.cgroup = str(self.node_agent.actuator.cpu.root)
            if serve_api:
                from monitoring.api import AgentServer

                try:
                    self.api = AgentServer(self.node_agent, "127.0.0.1:0", token).start()
                except Exception:
                    self.node_agent.close()
                    raise

    @property
    def api_url(self) -> str | None:
        return self.api.url if self.api is not None else None

    def launch(self, job_id: str, argv: list[str], env: dict[str, str], sandbox: Path, *,
               cpus: float, mem_mb: float | None, hints: dict[str, Any]) -> subprocess.Popen:
        """Start one task process in its own cgroup (and process group)."""
        sandbox.mkdir(parents=True, exist_ok=True)
        procs: list[str] = []
        env = dict(env)
        if self.node_agent is not None:
            reg: dict[str, Any] = {"job_id": job_id, "pids": [], "cores": max(cpus, 0.001)}
            if mem_mb:
                reg["mem_mb"] = mem_mb
            reg.update({k: v for k, v in hints.items() if v is not None})
            try:
                view = self.node_agent.register_job(reg)
            except Exception as e:
                raise LaunchError(f"cannot create the task's cgroup on {self.name}: {e}") from None
            procs = list(view["cgroup_procs"])
            env["COSCHED_PROGRESS_FILE"] = view["progress_file"]
        prefix = [_SETPRIV, "--pdeathsig", "HUP"] if _SETPRIV else []
        full = prefix + ["/bin/sh", "-c", _SUPERVISE, "cosched-mesos-task", str(len(procs))] + procs + argv
        try:
            with open(sandbox / "stdout", "ab") as out, open(sandbox / "stderr", "ab") as err:
                return subprocess.Popen(full, env=env, cwd=sandbox, stdout=out, stderr=err,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            self.release(job_id)
            raise LaunchError(f"cannot start the task's command: {e}") from None

    def cgroup_pids(self, job_id: str) -> list[int]:
        """Every process in the task's cgroup (also those that left its process group)."""
        if self.node_agent is None:
            return []
        try:
            path = self.node_agent.actuator.procs_files(job_id)[0]
            with open(path) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError, IndexError):
            return []

    def signal(self, pgid: int, job_id: str, sig: int) -> None:
        """Send ``sig`` to the task's process group and to anything else in its cgroup."""
        try:
            if sig in (signal.SIGTERM, signal.SIGINT):
                os.killpg(pgid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGKILL:
            for pid in self.cgroup_pids(job_id):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def release(self, job_id: str) -> None:
        """The task is over: its cgroup goes (the node agent removes it once empty)."""
        if self.node_agent is None:
            return
        try:
            self.node_agent.unregister(job_id)
        except Exception as e:  # unknown or already finished: nothing to undo
            log.debug("agent %s: unregister %s: %s", self.name, job_id, e)

    def close(self) -> dict[str, Any]:
        done: dict[str, Any] = {}
        if self.api is not None:
            try:
                self.api.shutdown()
            except Exception:
                log.exception("agent %s: stopping the node agent API", self.name)
            self.api = None
        if self.node_agent is not None:
            done = self.node_agent.close(restore=True)
            self.node_agent = None
        return done


def new_token() -> str:
    return secrets.token_urlsafe(32)


def real_cpus() -> float:
    return float(len(os.sched_getaffinity(0)))
