"""Shared test helpers: markers that skip with a reason when a real part is not available."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# Fuzz tests draw fresh examples on a developer's machine (that is how they find bugs) and a
# fixed sequence in CI, so that a run's verdict is about the commit, not the draw; whatever a
# local run finds becomes a plain regression test.
try:
    from hypothesis import settings as _hypothesis_settings
    _hypothesis_settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        _hypothesis_settings.load_profile("ci")
except ImportError:  # hypothesis is a test extra; the suite reports its absence itself
    pass


def is_root() -> bool:
    return os.geteuid() == 0


def cgroup_v1_cpu_writable() -> bool:
    return is_root() and os.access("/sys/fs/cgroup/cpu", os.W_OK) and os.path.exists(
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    )


def pytest_collection_modifyitems(config, items):
    skip_root = pytest.mark.skip(reason="needs root with a writable cgroup cpu controller")
    for item in items:
        cgroups = cgroup_v1_cpu_writable() or os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        if "root" in item.keywords and not (is_root() and cgroups):
            item.add_marker(skip_root)


@pytest.fixture(scope="session")
def bundled_data() -> Path:
    """The traces and workflow instances shipped in the package (coscheduler/data)."""
    from coscheduler.data import swf_dir

    return swf_dir().parent


@pytest.fixture(scope="session")
def lublin_swf() -> Path:
    """The bundled lublin_256.swf (coscheduler/data/swf)."""
    from coscheduler.data import swf_trace

    return swf_trace("lublin_256.swf")


@pytest.fixture
def sleeper():
    """A real process of the test's own that sleeps (to be registered, moved, throttled)."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def emu(tmp_path):
    """An emulated Mesos master with one 2-CPU agent, fast heartbeats and allocations
    (testbed/mesos; a real master cannot run here). test_mesos_emulator.py has its own."""
    from testbed.mesos import AgentSpec, MasterConfig, MesosEmulator

    e = MesosEmulator([AgentSpec(cpus=2, mem_mb=1024)], listen=("127.0.0.1", 0),
                      workdir=tmp_path / "emu",
                      config=MasterConfig(heartbeat_interval_s=0.3, allocation_interval_s=0.1))
    e.start()
    yield e
    e.close()
