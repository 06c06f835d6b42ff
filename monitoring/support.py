"""Whether this machine can run jobs under node agents' cgroup CPU quotas (local backend,
Mesos agents with local quotas, the Mesos emulator): a plain reason when it cannot."""

from __future__ import annotations

import os
from pathlib import Path


class CgroupsUnavailable(RuntimeError):
    """This machine (or user) cannot run the local backend; the message says what is needed."""


def check_local_support() -> None:
    """Raise CgroupsUnavailable with a plain reason when live co-scheduling cannot run here."""
    if os.name != "posix" or not Path("/proc/self/stat").exists():
        raise CgroupsUnavailable("the local backend needs Linux (/proc and cgroups)")
    if os.geteuid() != 0:
        raise CgroupsUnavailable(
            "the local backend writes CPU quotas into cgroups, which needs root: run it as root "
            "(for example `sudo cosched demo`)")
    v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v1.exists():
        if not os.access(v1.parent, os.W_OK):
            raise CgroupsUnavailable(f"{v1.parent} is not writable (read-only cgroup mount?)")
        return
    if v2.exists():
        if "cpu" not in v2.read_text().split():
            raise CgroupsUnavailable("the cgroup v2 hierarchy has no cpu controller enabled")
        return
    raise CgroupsUnavailable("no cgroup cpu controller found (neither v1 cpu.cfs_quota_us nor v2 cpu.max)")
