"""A job whose processes come and go by the hundred a second (a shell loop of short commands,
a task farm): each tick lists children that end before the agent reaches them.

Before: every such child was reported as a refused process (a WARNING and a job event per
child, "not moved: pid N is not a running process"), was moved into the cgroup it was born
in (an event "followed new process(es)" each tick), and the /proc files of ended children
stayed open until the agent's file cap (2,048) evicted them, each forget then scanning every
open file: a tick of 64 quiet jobs and one such job cost 28 ms of CPU, now 21 ms.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest

from monitoring.cgroupfs import OpenFiles
from tests.test_agent_cgroup import CPU, cg_root, make_agent  # noqa: F401 - fixtures

# A leader that keeps KIDS children alive, each living 10-50 ms, until killed.
KIDS = 40
CHURN = [sys.executable, "-c", (
    "import os, random, time\n"
    "kids = set()\n"
    "while True:\n"
    f"    while len(kids) < {KIDS}:\n"
    "        pid = os.fork()\n"
    "        if pid == 0:\n"
    "            time.sleep(random.uniform(0.01, 0.05))\n"
    "            os._exit(0)\n"
    "        kids.add(pid)\n"
    "    kids.discard(os.wait()[0])\n")]


@pytest.fixture
def churning_leader():
    p = subprocess.Popen(CHURN, start_new_session=True)
    try:
        yield p
    finally:
        os.killpg(p.pid, 9)
        p.wait()


@pytest.mark.root
def test_children_that_end_between_reads_are_neither_refused_nor_followed(
        churning_leader, make_agent, cg_root, caplog):
    agent = make_agent()
    agent.register_job({"job_id": "farm", "pids": [churning_leader.pid], "cores": 1})
    caplog.set_level(logging.WARNING, logger="monitoring.agent")
    strays = []
    for _ in range(25):
        time.sleep(0.1)
        agent.tick()
        members = set(agent.job("farm")["pids"])
        # the /proc files kept open are those of processes the last tick found running
        strays.append({int(p.split("/")[2]) for p in agent._files._fds if p.startswith("/proc/")}
                      - members)
    events = [e["event"] for e in agent._jobs["farm"].events]
    assert [e for e in events if e.startswith("not moved")] == []
    assert [r.getMessage() for r in caplog.records if "not moved" in r.getMessage()] == []
    # the children were born in the job's cgroup: nothing to move, nothing to report
    assert [e for e in events if e.startswith("followed")] == []
    assert strays == [set()] * len(strays)
    # and they were all under its quota: the leader and a busy tick's children are in it
    assert churning_leader.pid in {int(x) for x in (CPU / cg_root / "farm" / "cgroup.procs").read_text().split()}
    assert agent.job("farm")["status"] == "running"


def test_forgetting_a_process_closes_its_files_only():
    """The files of one process are found by its prefix, not by a scan of every open file
    (and "/proc/12/" does not name "/proc/120/")."""
    files = OpenFiles()
    me, parent = os.getpid(), os.getppid()
    try:
        for pid in (me, parent):
            for name in ("stat", "status", "cmdline"):
                assert files.read(f"/proc/{pid}/{name}")
        files.read("/proc/loadavg")
        assert files.open_count == 7
        files.forget(f"/proc/{me}/")
        assert sorted(files._fds) == sorted([f"/proc/{parent}/stat", f"/proc/{parent}/status",
                                             f"/proc/{parent}/cmdline", "/proc/loadavg"])
        files.forget(f"/proc/{parent}0/")   # another process (a longer pid): none of these
        assert files.open_count == 4
        files.forget("/proc/")                         # any other prefix: still every match
        assert files.open_count == 0
    finally:
        files.close()
