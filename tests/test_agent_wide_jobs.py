"""A job with many processes: the kernel hands out a /proc or cgroup list (children,
cgroup.procs) one page per read, whatever buffer is asked for, so a list longer than about
600 pids takes several reads. Reading only the first page followed half of such a job.
"""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from monitoring import collect
from monitoring.cgroupfs import CgroupFS, OpenFiles
from tests.test_agent_cgroup import CPU, cg_root, make_agent  # noqa: F401 - fixtures

# A leader that forks N children which wait for a signal, then says so on stdout.
WIDE = [sys.executable, "-c", (
    "import os, signal, sys, time\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    if os.fork() == 0:\n"
    "        signal.pause()\n"
    "        os._exit(0)\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n")]
CHILDREN = 900   # about 3.5 KB of pids per page: this list spans two pages


@pytest.fixture
def wide_leader():
    p = subprocess.Popen(WIDE + [str(CHILDREN)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        kids = {c.pid for c in psutil.Process(p.pid).children()}
        assert len(kids) == CHILDREN
        yield p, kids
    finally:
        for c in psutil.Process(p.pid).children():
            c.kill()
        p.kill()
        p.wait()


def _children_file(pid: int) -> str:
    return f"/proc/{pid}/task/{pid}/children"


def test_one_read_of_a_long_list_returns_a_page_only(wide_leader):
    """The premise: without it the tests below would prove nothing."""
    p, kids = wide_leader
    fd = os.open(_children_file(p.pid), os.O_RDONLY)
    try:
        first = os.read(fd, 65536)
    finally:
        os.close(fd)
    assert len(first) <= 4096 < len(" ".join(map(str, kids)))


def test_every_child_of_a_wide_leader_is_found(wide_leader):
    p, kids = wide_leader
    assert collect.descendants([p.pid]) == kids
    files = OpenFiles()
    try:
        assert set(collect.job_processes([p.pid], files)) == kids | {p.pid}
        # kept open and read again from offset 0: the whole list again
        assert set(collect.job_processes([p.pid], files)) == kids | {p.pid}
        raw = files.read(_children_file(p.pid))
        assert {int(x) for x in raw.split()} == kids
    finally:
        files.close()


def test_a_short_file_is_read_in_one_system_call_and_a_long_one_whole(wide_leader):
    p, kids = wide_leader
    assert CgroupFS().read(f"/proc/{p.pid}/stat").startswith(f"{p.pid} (")
    assert {int(x) for x in CgroupFS().read(_children_file(p.pid)).split()} == kids


@pytest.mark.root
def test_a_wide_job_registered_by_its_leader_is_all_under_its_quota(wide_leader, make_agent, cg_root):
    """Every process of a job registered after it started is moved into the job's cgroup
    (before: the children past the first page of the list escaped the quota)."""
    p, kids = wide_leader
    agent = make_agent()
    agent.register_job({"job_id": "wide", "pids": [p.pid], "cores": 1})
    agent.set_quota("wide", 0.5, lease_s=60)
    agent.tick()
    in_cgroup = {int(x) for x in (CPU / cg_root / "wide" / "cgroup.procs").read_text().split()}
    assert in_cgroup == kids | {p.pid}
    assert set(agent.job("wide")["pids"]) == kids | {p.pid}
    # a quiet tick: nothing to follow again, no event per tick
    events = len(agent._jobs["wide"].events)
    agent.tick()
    assert len(agent._jobs["wide"].events) == events
