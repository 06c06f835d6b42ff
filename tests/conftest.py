"""Shared test helpers: markers that skip with a reason when a real part is not available."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
LUBLIN_SWF = SHARED_DATA / "swf" / "lublin_256.swf"


def is_root() -> bool:
    return os.geteuid() == 0


def cgroup_v1_cpu_writable() -> bool:
    return is_root() and os.access("/sys/fs/cgroup/cpu", os.W_OK) and os.path.exists(
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    )


def pytest_collection_modifyitems(config, items):
    skip_root = pytest.mark.skip(reason="needs root with a writable cgroup cpu controller")
    for item in items:
        if "root" in item.keywords and not (is_root() and (cgroup_v1_cpu_writable() or os.path.exists("/sys/fs/cgroup/cgroup.controllers"))):
            item.add_marker(skip_root)


@pytest.fixture
def shared_data() -> Path:
    """../shared/data when present; tests that need it skip otherwise."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def lublin_swf() -> Path:
    """../shared/data/swf/lublin_256.swf when present; tests that need it skip otherwise."""
    if not LUBLIN_SWF.is_file():
        pytest.skip(f"shared trace not found at {LUBLIN_SWF}")
    return LUBLIN_SWF
