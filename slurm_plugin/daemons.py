"""The local cluster's processes: a daemon started in its own session with its log, reaped
and stopped (TERM, then KILL after a grace), and the cgroup folders slurmd leaves behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from monitoring.collect import start_ticks

CGROUP_V1 = Path("/sys/fs/cgroup")


# -- processes --------------------------------------------------------------------------------

@dataclass
class Daemon:
    """A process ``up`` started: identified by pid AND start (pids are reused)."""

    role: str            # munged | slurmctld | slurmd | agent
    name: str            # node name for slurmd/agent, else the role
    pid: int
    create_time: float   # epoch seconds: shown, and the identity in older state files
    argv: list[str]
    log: str
    # Clock ticks from boot to its start: the identity. The epoch time is computed from a
    # boot time given in whole seconds that moves by one when the clock is adjusted (a live
    # slurmctld was once taken for dead so).
    start_ticks: int | None = None

    def _is_ours(self, p: psutil.Process) -> bool:
        if self.start_ticks is not None:
            return start_ticks(self.pid) == self.start_ticks
        return abs(p.create_time() - self.create_time) <= 1.5

    def process(self) -> psutil.Process | None:
        try:
            p = psutil.Process(self.pid)
            if not self._is_ours(p):
                return None
            if p.status() == psutil.STATUS_ZOMBIE:
                _reap(self.pid)
                return None
            return p
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self.process() is not None


_children: dict[int, subprocess.Popen] = {}   # started by this process: reaped on stop


def _reap(pid: int) -> None:
    popen = _children.pop(pid, None)
    if popen is not None:
        try:
            popen.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            _children[pid] = popen


def _spawn(role: str, name: str, argv: list[str], log_path: Path, env: dict | None = None,
           stdout: Path | None = None) -> Daemon:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as err, open(stdout or log_path, "ab") as out:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 start_new_session=True, env=env, close_fds=True)
    _children[popen.pid] = popen
    try:
        ct = psutil.Process(popen.pid).create_time()
    except psutil.Error:
        ct = time.time()
    return Daemon(role, name, popen.pid, ct, argv, str(log_path), start_ticks(popen.pid))


def _stop(d: Daemon, grace_s: float = 10.0) -> str:
    """SIGTERM, wait, SIGKILL. Returns what happened."""
    p = d.process()
    if p is None:
        _reap(d.pid)
        return "not running"
    try:
        p.send_signal(signal.SIGTERM)
    except psutil.Error:
        return "not running"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap(d.pid)
        if d.process() is None:
            return "stopped"
        time.sleep(0.05)
    try:
        p.kill()
    except psutil.Error:
        pass
    psutil.wait_procs([p], timeout=5)
    _reap(d.pid)
    return "killed"


def slurm_cgroups(node: str) -> list[Path]:
    """The cgroup folders slurmd makes for ``node`` (MULTIPLE_SLURMD: ``slurm_<node>``)."""
    if not CGROUP_V1.is_dir():
        return []
    return [c / f"slurm_{node}" for c in sorted(CGROUP_V1.iterdir())
            if (c / f"slurm_{node}").is_dir()]


def _cgroup_pids(root: Path) -> set[int]:
    pids: set[int] = set()
    for dirpath, _dirs, files in os.walk(root):
        if "cgroup.procs" in files:
            try:
                pids.update(int(x) for x in Path(dirpath, "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
    return pids


def _rmdir_tree(root: Path) -> bool:
    """Remove an (empty of processes) cgroup tree bottom-up; True when gone."""
    for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass
    return not root.exists()
