"""What an emulated agent does on this machine: run a task's command as a real process
inside the agent's cgroups, and kill it.

With ``cgroups`` isolation (the default; root) every agent has one in-process
``monitoring.NodeAgent`` with its own cgroup root ``<base>/<agent>``; each task is a job of
that node agent, with its own cgroup below the root, so the node agent samples it and
applies CPU quotas to it exactly as on a cluster node. The task's CPU limit is its ``cpus``
times ``cpu_scale`` real CPUs (like a Mesos agent started with ``--cgroups_enable_cfs``).
The node agent can also be served over HTTP (``api_url``), so that a framework can set
leased quotas on tasks the way it would on a real node.

A task's process starts under ``/bin/sh`` that first writes its own pid into the task's
``cgroup.procs`` files and then ``exec``s the command, so no instruction of the task runs
outside its cgroup and the task's pid is the command's. Each task leads its own process
group (``killpg``). ``setpriv --pdeathsig KILL`` kills the task when the emulator dies; what
the task forked is caught by the emulator's watchdog (``start_watchdog``), which kills
everything left in the emulator's cgroups once the emulator is gone, even after ``kill -9``.

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
# $1 = how many cgroup.procs files follow; the shell enters each, then becomes the task
# (exec), so the task's pid is the command's own and its exit status is the command's.
_ENTER = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 126; shift; ' \
         'n=$((n-1)); done; exec "$@"'
# The emulator's watchdog: while the emulator (pid $1 with start time $2) lives, sleep;
# once it is gone (even killed with -9), kill every process left in the emulator's cgroup
# trees and remove them and its other folders ($3...). A task's own parent-death signal
# reaches only its first process; a process it forked has none, but it is in the cgroup.
_WATCHDOG = (
    'pid=$1; start=$2; shift 2; '
    'alive() { [ "$(sed "s/.*) //" /proc/$pid/stat 2>/dev/null | cut -d" " -f20)" = "$start" ]; }; '
    'while alive; do sleep 1; done; '
    'for d in "$@"; do [ -d "$d" ] || continue; '
    'for f in $(find "$d" -name cgroup.procs 2>/dev/null); do '
    'for p in $(cat "$f" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; done; done; '
    'sleep 1; '
    'for d in "$@"; do case "$d" in /sys/fs/cgroup/*) find "$d" -depth -type d -exec rmdir {} + 2>/dev/null;; '
    '*) rm -rf "$d";; esac; done')
_JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}\Z")
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
        prefix = [_SETPRIV, "--pdeathsig", "KILL"] if _SETPRIV else []
        full = prefix + ["/bin/sh", "-c", _ENTER, "cosched-mesos-task", str(len(procs))] + procs + argv
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


def start_watchdog(paths: list[str]) -> subprocess.Popen:
    """A detached shell that outlives this process only to clean up after it: once this
    process is gone it kills whatever runs in the cgroup folders among ``paths`` and
    removes ``paths``. Stop it with ``terminate()`` when closing normally."""
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(")", 1)[1].split()[19]
    return subprocess.Popen(["/bin/sh", "-c", _WATCHDOG, "cosched-mesos-watchdog", str(os.getpid()),
                             start] + list(paths), start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def real_cpus() -> float:
    return float(len(os.sched_getaffinity(0)))
