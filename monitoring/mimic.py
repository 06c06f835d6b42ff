"""A directory that mimics a cgroup v2 hierarchy, for hosts whose kernel offers no cgroup2
``cpu`` controller (for example cgroup v1 hosts such as our CI machine).

It is NOT the kernel: it enforces nothing. It reproduces the files and the rules the agent
relies on (``cgroup.controllers`` / ``cgroup.subtree_control`` delegation, ``cpu.max``
format, ``cgroup.procs`` moves with ESRCH for dead processes, EBUSY on removing a busy
cgroup, ``cpu.stat`` accounting from the listed processes' real CPU times) so that the v2
code path runs end to end. Tests that use it say so in their names.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import psutil

from .cgroupfs import CgroupFS, Layout

_CPU_MAX_RE = re.compile(r"^(max|\d+)( \d+)?\n?$")


class MimicV2FS(CgroupFS):
    """``idle=False`` mimics a kernel before 5.15 (no ``cpu.idle``)."""

    def __init__(self, mount: str | os.PathLike, controllers: str = "cpu memory io pids",
                 idle: bool = True):
        super().__init__()
        self.mount = Path(mount)
        self.idle = idle
        self.mount.mkdir(parents=True, exist_ok=True)
        self._files(self.mount, controllers, root=True)

    def layout(self) -> Layout:
        return Layout(2, self.mount, self.mount)

    def _files(self, d: Path, controllers: str, root: bool = False) -> None:
        (d / "cgroup.controllers").write_text(controllers + "\n")
        (d / "cgroup.subtree_control").write_text("\n")
        (d / "cgroup.procs").write_text("")
        (d / "cpu.stat").write_text("usage_usec 0\nuser_usec 0\nsystem_usec 0\n")
        if not root and "cpu" in controllers.split():
            self._cpu_files(d)
            with open(d / "cpu.stat", "a") as f:
                f.write("nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")

    def _cpu_files(self, d: Path) -> None:
        (d / "cpu.max").write_text("max 100000\n")
        (d / "cpu.weight").write_text("100\n")
        if self.idle:
            (d / "cpu.idle").write_text("0\n")

    # ---- CgroupFS ------------------------------------------------------------------------
    def read_hot(self, path: Path | str) -> str | None:
        try:
            return self.read(Path(path))
        except OSError:
            return None

    def mkdir(self, path: Path) -> bool:
        path = Path(path)
        try:
            os.mkdir(path)
        except FileExistsError:
            return False
        enabled = (path.parent / "cgroup.subtree_control").read_text().split()
        self._files(path, " ".join(enabled))
        return True

    def rmdir(self, path: Path) -> bool:
        path = Path(path)
        if not path.exists():
            return True
        if self._live(path) or any(p.is_dir() for p in path.iterdir()):
            return False
        shutil.rmtree(path)
        return True

    def read(self, path: Path) -> str:
        path = Path(path)
        if path.name == "cgroup.controllers" and path.parent != self.mount:
            # as in the kernel: what the parent delegates, read at the time of asking
            return (path.parent.parent / "cgroup.subtree_control").read_text()
        if path.name == "cgroup.procs":
            return "".join(f"{p}\n" for p in self._live(path.parent))
        if path.name == "cpu.stat" and path.exists():
            usage = 0.0
            for pid in self._live(path.parent):
                try:
                    t = psutil.Process(pid).cpu_times()
                    usage += t.user + t.system
                except psutil.Error:
                    pass
            lines = [ln for ln in path.read_text().splitlines() if not ln.startswith("usage_usec")]
            return f"usage_usec {int(usage * 1e6)}\n" + "\n".join(lines) + "\n"
        return path.read_text()

    def write(self, path: Path, value: str) -> None:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
        if path.name == "cgroup.procs":
            pid = int(value)
            if not psutil.pid_exists(pid):
                raise ProcessLookupError(errno.ESRCH, "No such process", str(path))
            for procs in self.mount.rglob("cgroup.procs"):
                pids = [p for p in procs.read_text().split() if p != str(pid)]
                procs.write_text("".join(f"{p}\n" for p in pids))
            with open(path, "a") as f:
                f.write(f"{pid}\n")
            return
        if path.name == "cgroup.subtree_control":
            have = set(path.read_text().split())
            offered = set(self.read(path.parent / "cgroup.controllers").split())
            for tok in value.split():
                name = tok[1:]
                if tok[0] not in "+-" or name not in offered:
                    raise FileNotFoundError(errno.ENOENT, f"controller {name} not available", str(path))
                if tok[0] == "+":
                    if self._live(path.parent):
                        raise OSError(errno.EBUSY, "cgroup has processes (no internal processes rule)")
                    have.add(name)
                else:
                    have.discard(name)
            path.write_text(" ".join(sorted(have)) + "\n")
            if "cpu" in have:  # children gain the cpu interface files
                for child in path.parent.iterdir():
                    if child.is_dir() and not (child / "cpu.max").exists():
                        self._cpu_files(child)
            return
        if path.name == "cpu.idle":
            # the kernel (sched_group_set_idle): an idle group gets the idle minimum weight
            # (cpu.weight reads 1); one made busy again gets the default weight
            if value.strip() not in ("0", "1"):
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
            path.write_text(value.strip() + "\n")
            (path.parent / "cpu.weight").write_text("1\n" if value.strip() == "1" else "100\n")
            return
        if path.name == "cpu.weight":
            idle = path.parent / "cpu.idle"
            w = value.strip()
            # the kernel refuses a weight outside 1..10000, and any weight in an idle group
            if (not w.isdigit() or not 1 <= int(w) <= 10_000
                    or (idle.exists() and idle.read_text().strip() == "1")):
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
            path.write_text(w + "\n")
            return
        if path.name == "cpu.max":
            m = _CPU_MAX_RE.match(value)
            if not m or (m.group(1) != "max" and int(m.group(1)) < 1000):
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
            period = m.group(2).strip() if m.group(2) else path.read_text().split()[1]
            path.write_text(f"{m.group(1)} {period}\n")
            return
        path.write_text(value)

    def _live(self, d: Path) -> list[int]:
        try:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []
        return [p for p in pids if psutil.pid_exists(p) and _not_zombie(p)]


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
