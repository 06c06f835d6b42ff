"""The instance's own cgroup on the host (Docker's ``cgroup_parent``).

Docker puts every container of an instance below ``/sys/fs/cgroup/CTRL/cosched-testbed-ID``
(one folder per mounted hierarchy). Without it all containers sit under Docker's single
``docker`` cgroup, which competes with the host's other processes with the weight of ONE
task: on a shared machine with ten busy processes the whole testbed would get a tenth of
a CPU. ``prepare`` makes the instance's cpu cgroup first with the weight of the CPUs the
testbed claims; ``remove`` deletes the instance's folders (and anything left below them,
deepest first: rmdir only, so a cgroup that still holds a process stays and is reported).
"""

from __future__ import annotations

import os
from pathlib import Path

from .compose import check_instance_id

PREFIX = "cosched-testbed-"


def cgroup_mounts(mountinfo: str | None = None) -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers and the v2 one)."""
    if mountinfo is None:
        try:
            with open("/proc/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return []
    out = []
    for line in mountinfo.splitlines():
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        fstype = right.split()[0]
        if fstype in ("cgroup", "cgroup2"):
            out.append(Path(left.split()[4]))
    return out


def parent_name(instance: str) -> str:
    return PREFIX + check_instance_id(instance)


def prepare(instance: str, weight: int, mounts: list[Path] | None = None) -> Path | None:
    """Make the instance's cpu cgroup and set its weight; None when there is no v1 cpu
    hierarchy (then Docker makes the folders and the default weight applies)."""
    for m in mounts if mounts is not None else cgroup_mounts():
        if (m / "cpu.shares").exists():
            d = m / parent_name(instance)
            d.mkdir(exist_ok=True)
            (d / "cpu.shares").write_text(f"{int(weight)}\n")
            return d
    return None


def remove(instance: str, mounts: list[Path] | None = None) -> tuple[list[str], list[str]]:
    """Remove the instance's folder in every hierarchy: (removed, left with processes)."""
    removed, left = [], []
    name = parent_name(instance)
    for m in mounts if mounts is not None else cgroup_mounts():
        top = m / name
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except FileNotFoundError:
                pass
            except OSError:
                left.append(dirpath)
        if not top.exists():
            removed.append(str(top))
    return removed, left


__all__ = ["cgroup_mounts", "parent_name", "prepare", "remove"]
