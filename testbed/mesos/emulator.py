"""``MesosEmulator``: an emulated master with N agents on real HTTP, in one object.

    with MesosEmulator([AgentSpec(cpus=4, mem_mb=4096)] * 2, listen=("127.0.0.1", 0)) as emu:
        print(emu.url)          # http://127.0.0.1:PORT  (the scheduler API is /api/v1/scheduler)
        emu.master.lose_agent(emu.agent_ids[0])   # fault injection, see README.md

It owns a work folder (sandboxes, node-agent state, the admin token), the cgroup root
``cosched-mesos-<pid>-<n>`` (one child per agent) and the tasks; ``close()`` kills the tasks
and removes both. A root left by an emulator that died (kill -9) is removed by the next one.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .master import AgentSpec, Master, MasterConfig
from .runtime import CGROUP_PREFIX, new_token, real_cpus, start_watchdog
from .server import SCHEDULER_PATH, MasterServer

log = logging.getLogger("testbed.mesos")
_instances = itertools.count(1)


class EmulatorUnavailable(RuntimeError):
    """The emulator cannot run as asked on this machine; the message says what is needed."""


def check_cgroups() -> None:
    """Raise EmulatorUnavailable unless this process can make cgroups with CPU quotas."""
    try:
        from monitoring.support import CgroupsUnavailable, check_local_support
    except ImportError as e:  # pragma: no cover
        raise EmulatorUnavailable(str(e)) from None
    try:
        check_local_support()
    except CgroupsUnavailable as e:
        raise EmulatorUnavailable(f"{e}; or run the emulator with isolation 'none' "
                                  "(plain processes, no CPU quotas)") from None


def kill_orphaned_tasks() -> list[int]:
    """SIGKILL the processes still inside the cgroups of emulators that died (their owner
    pid, in the root's name ``cosched-mesos-<pid>-<n>``, is gone). Normally there are none:
    a task's supervisor kills its group when the emulator dies; this covers a machine
    without ``setpriv``. Only our own prefix, only dead owners."""
    import signal

    import psutil
    from monitoring.cgroupfs import detect_layout

    layout = detect_layout()
    killed: list[int] = []
    for mount in {layout.cpu_mount, layout.acct_mount} - {None}:
        for root in Path(mount).glob(f"{CGROUP_PREFIX}*"):  # type: ignore[arg-type]
            owner = root.name[len(CGROUP_PREFIX):].split("-")[0]
            if not root.is_dir() or not owner.isdigit() or psutil.pid_exists(int(owner)):
                continue
            for procs in root.rglob("cgroup.procs"):
                try:
                    pids = [int(x) for x in procs.read_text().split()]
                except (OSError, ValueError):
                    continue
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    except ProcessLookupError:
                        pass
    if killed:
        psutil.wait_procs([p for p in (_proc(x) for x in killed) if p is not None], timeout=3)
    return killed


_SHM = Path("/dev/shm")


def _fast_dir(name: str) -> Path | None:
    """``/dev/shm/<name>`` (created, mode 700), or None without a writable tmpfs there.
    Folders left there by dead emulators (their owner pid in the name) are removed."""
    import psutil

    if not (_SHM.is_dir() and os.access(_SHM, os.W_OK)):
        return None
    for old in _SHM.glob(f"{CGROUP_PREFIX}*"):
        owner = old.name[len(CGROUP_PREFIX):].split("-")[0]
        if old.is_dir() and owner.isdigit() and not psutil.pid_exists(int(owner)):
            shutil.rmtree(old, ignore_errors=True)
    path = _SHM / name
    try:
        path.mkdir(mode=0o700)
    except OSError:
        return None
    return path


def _proc(pid: int):
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


class MesosEmulator:
    def __init__(self, agents: list[AgentSpec], *, listen: tuple[str, int] = ("127.0.0.1", 5050),
                 workdir: str | os.PathLike | None = None, isolation: str = "cgroups",
                 cpu_scale: float | None = None, cpu_limits: bool = True,
                 agent_api: bool = True, config: MasterConfig | None = None,
                 token: str | None = None, keep_workdir: bool = False):
        if not agents:
            raise ValueError("the emulator needs at least one agent")
        if isolation not in ("cgroups", "none"):
            raise ValueError(f"isolation {isolation!r}: use 'cgroups' or 'none'")
        for i, a in enumerate(agents):
            if not (a.cpus > 0 and a.mem_mb > 0):
                raise ValueError(f"agent {i + 1}: cpus and mem must be > 0, got {a.cpus}, {a.mem_mb}")
        if cpu_scale is not None and not cpu_scale > 0:
            raise ValueError(f"cpu_scale must be > 0, got {cpu_scale!r}")
        self.isolation = isolation
        cgroup_base = None
        if isolation == "cgroups":
            check_cgroups()
            from monitoring.recovery import remove_orphaned_roots

            killed = kill_orphaned_tasks()
            if killed:
                log.warning("killed %d task processes left by dead emulators: %s", len(killed), killed)
            removed = remove_orphaned_roots(CGROUP_PREFIX)
            if removed:
                log.info("removed cgroups left by dead emulators: %s", removed)
            cgroup_base = f"{CGROUP_PREFIX}{os.getpid()}-{next(_instances)}"
        # Real CPUs per emulated cpu: the emulated cluster never claims more than the machine.
        total = sum(a.cpus for a in agents)
        self.cpu_scale = cpu_scale if cpu_scale is not None else min(1.0, real_cpus() / total)
        self._own_workdir = workdir is None
        self.keep_workdir = keep_workdir
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="cosched-mesos-emu-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = token or new_token()
        self.token_file = self.workdir / "admin-token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token + "\n")
        # Small, often rewritten files (node-agent state, progress) on tmpfs when there is one.
        self.fast_dir = _fast_dir(cgroup_base or f"{CGROUP_PREFIX}{os.getpid()}-{next(_instances)}")
        self.cgroup_base = cgroup_base
        # Cleans up after this process if it dies without close() (kill -9).
        self._watchdog = start_watchdog(
            self._cgroup_dirs() + ([str(self.fast_dir)] if self.fast_dir else [])
            + ([str(self.workdir)] if self._own_workdir and not keep_workdir else []))
        config = config or MasterConfig()
        config.hostname = listen[0] if listen[0] not in ("", "0.0.0.0", "::") else "127.0.0.1"
        try:
            self.master = Master(agents, self.workdir, config=config, cgroup_base=cgroup_base,
                                 cpu_scale=self.cpu_scale, cpu_limits=cpu_limits,
                                 serve_agent_api=agent_api and isolation == "cgroups",
                                 token=self.token, fast_dir=self.fast_dir)
        except Exception:
            self._remove_dirs()
            self._stop_watchdog()
            raise
        try:
            self.server = MasterServer(self.master, listen, self.token)
        except OSError as e:
            self.master.close()
            if cgroup_base:
                self._remove_base()
            self._remove_dirs()
            self._stop_watchdog()
            raise EmulatorUnavailable(f"cannot listen on {listen[0]}:{listen[1]}: {e}") from None
        config.port = self.server.address[1]
        self._closed = False

    def start(self) -> "MesosEmulator":
        self.master.start()
        self.server.start()
        log.info("emulated Mesos master %s at %s with %d agents", self.master.id, self.url,
                 len(self.master.agents))
        return self

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def scheduler_url(self) -> str:
        return self.url + SCHEDULER_PATH

    @property
    def agent_ids(self) -> list[str]:
        return list(self.master.agents)

    def ready_info(self) -> dict[str, Any]:
        """What ``cosched mesos emulate`` prints when ready (docs/cli-json.md)."""
        return {"url": self.url, "scheduler_url": self.scheduler_url,
                "admin_url": self.url + "/admin", "admin_token_file": str(self.token_file),
                "master_id": self.master.id, "pid": os.getpid(), "workdir": str(self.workdir),
                "isolation": self.isolation, "cgroup": self.cgroup_base, "cpu_scale": self.cpu_scale,
                "emulated": True, "agents": [
                    {k: a[k] for k in ("id", "hostname", "resources", "cgroup", "agent_api_url")}
                    for a in self.master.agent_views()]}

    def close(self) -> dict[str, Any]:
        """Stop serving, kill every task, remove the cgroups (and the work folder if ours)."""
        if self._closed:
            return {}
        self._closed = True
        # Streams end first so that frameworks see the master go; then the tasks.
        with self.master.lock:
            for fw in self.master.frameworks.values():
                if fw.sub is not None:
                    fw.sub.close()
        done = self.master.close()
        self.server.shutdown()
        if self.cgroup_base:
            self._remove_base()
        self._remove_dirs()
        self._stop_watchdog()
        log.info("emulator stopped: %s", json.dumps(done, default=str))
        return done

    def _remove_dirs(self) -> None:
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self.fast_dir is not None:
            shutil.rmtree(self.fast_dir, ignore_errors=True)

    def _stop_watchdog(self) -> None:
        import signal

        try:
            os.killpg(self._watchdog.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._watchdog.wait()

    def _cgroup_dirs(self) -> list[str]:
        if not self.cgroup_base:
            return []
        from monitoring.cgroupfs import detect_layout

        layout = detect_layout()
        return [str(Path(m) / self.cgroup_base)
                for m in {layout.cpu_mount, layout.acct_mount} - {None}]  # type: ignore[operator]

    def _remove_base(self) -> None:
        for d in self._cgroup_dirs():
            base = Path(d)
            if base.is_dir():
                for d in sorted((p for p in base.rglob("*") if p.is_dir()),
                                key=lambda p: len(p.parts), reverse=True) + [base]:
                    try:
                        os.rmdir(d)
                    except OSError as e:
                        log.warning("cannot remove cgroup %s: %s", d, e)

    def __enter__(self) -> "MesosEmulator":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
