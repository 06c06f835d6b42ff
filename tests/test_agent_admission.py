"""Which processes the agent may move into a job cgroup, and what it trusts from its state
file (issue 8, items 1-4). On a MIMIC cgroup v2 directory: a move there is a line in a
file, so a test that fails (the agent wrongly moving pid 1 or itself) harms nothing. The
same rules on the real kernel are in test_agent_harden_root.py.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coscheduler.model import InvalidInput
from monitoring.agent import NodeAgent
from monitoring.mimic import MimicV2FS
from monitoring.recovery import StateFile
from monitoring.state import JobSpec

SLEEPY = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def mimic(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    return fs


@pytest.fixture
def sleeper():
    p = subprocess.Popen(SLEEPY)
    yield p
    p.kill()
    p.wait()


@pytest.fixture
def agent_tid():
    """A thread id of this process (which hosts the in-process agent): not a process."""
    ready, stop, out = threading.Event(), threading.Event(), []

    def body():
        out.append(threading.get_native_id())
        ready.set()
        stop.wait(30)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    ready.wait(5)
    yield out[0]
    stop.set()
    t.join(5)


def _agent(mimic, tmp_path, **kw) -> NodeAgent:
    return NodeAgent("cosched", layout=mimic.layout(), fs=mimic, state_dir=tmp_path / "state", **kw)


def _in_job_cgroup(mimic, job: str) -> set[int]:
    return {int(x) for x in (mimic.mount / "cosched" / job / "cgroup.procs").read_text().split()}


def _moved_anywhere(mimic) -> set[int]:
    return {int(x) for p in mimic.mount.rglob("cgroup.procs") for x in p.read_text().split()}


# ---- the rule itself -------------------------------------------------------------------
def test_rule_refuses_init_kernel_threads_threads_self_and_ancestors(agent_tid, sleeper):
    from monitoring.admission import Admission, Refused

    adm = Admission()
    cases = {
        1: "pid 1",
        2: "kernel thread",
        agent_tid: "thread",
        os.getpid(): "the agent itself",
        2 ** 22 + 17: "not a running process",
        2 ** 400: "not a running process",
    }
    if os.getppid() > 1:    # (a run whose parent exited has init as its only ancestor)
        cases[os.getppid()] = "ancestor of the agent"
    for pid, words in cases.items():
        with pytest.raises(Refused, match=words) as e:
            adm.check(pid)
        assert isinstance(e.value, InvalidInput) and e.value.rule
    # a kernel thread other than kthreadd (its children are kernel threads too)
    kthreads = [int(p) for p in os.listdir("/proc") if p.isdigit() and Admission._ppid(int(p)) == 2]
    if kthreads:
        with pytest.raises(Refused, match="kernel thread"):
            adm.check(kthreads[0])
    adm.check(sleeper.pid)  # an ordinary user process passes
    for bad in (True, -1, 0, "12", 1.5, None):
        with pytest.raises(Refused, match="not a process id"):
            adm.check(bad)
    # seen from a child (as an agent this process started), this process is an ancestor
    child = subprocess.run(
        [sys.executable, "-c", "import os\nfrom monitoring.admission import Admission, Refused\n"
         "try:\n    Admission().check(os.getppid())\nexcept Refused as e:\n    print(e)"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert "ancestor of the agent" in child.stdout, child.stdout + child.stderr


def test_rule_refuses_processes_in_the_agents_own_cgroup_unless_it_started_them(sleeper):
    from monitoring.admission import Admission, Refused

    adm = Admission(own_cgroup="/system.slice/agent.service", top="/",
                    cgroup_of=lambda pid: "/system.slice/agent.service")
    with pytest.raises(Refused, match="agent's own cgroup"):
        adm.check(_unrelated_pid())
    adm.check(sleeper.pid)  # a child of the agent's process (an in-process backend's job)
    # the hierarchy's root cgroup holds everything: no rule there
    Admission(own_cgroup="/", cgroup_of=lambda pid: "/").check(_unrelated_pid())
    # nor at the root of the agent's view: inside a container (Docker on cgroup v1) the
    # container's cgroup is mounted as the root, and a batch system starts every job there
    Admission(own_cgroup="/docker/abc", top="/docker/abc",
              cgroup_of=lambda pid: "/docker/abc").check(_unrelated_pid())
    with pytest.raises(Refused, match="agent's own cgroup"):
        Admission(own_cgroup="/docker/abc/agent", top="/docker/abc",
                  cgroup_of=lambda pid: "/docker/abc/agent").check(_unrelated_pid())
    # the host's cgroup tree mounted in a container: the container's cpu cgroup is not the
    # root, and Slurm (no cpu cgroup of its own) leaves its jobs there; a process Slurm
    # placed in the job's cgroup is the job's, the rest of the cgroup is still refused
    in_container = Admission(own_cgroup="/docker/abc", top="/",
                             cgroup_of=lambda pid: "/docker/abc")
    in_container.check(_unrelated_pid(), placed_by_batch=True)
    with pytest.raises(Refused, match="agent's own cgroup"):
        in_container.check(_unrelated_pid())


def _unrelated_pid() -> int:
    """A live user process that is neither this process, its ancestor nor its descendant."""
    from monitoring.admission import Admission, Refused

    mine = {os.getpid()}
    p = os.getppid()
    while p > 1:
        mine.add(p)
        p = Admission._ppid(p) or 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in mine or pid <= 2:
            continue
        try:
            Admission().check(pid)
        except Refused:
            continue
        if not Admission._descends_from(pid, os.getpid()):
            return pid
    pytest.skip("no unrelated user process found")


# ---- registration (items 1 and 2) ------------------------------------------------------
def test_registration_refuses_a_thread_of_the_agent_mimic(mimic, tmp_path, agent_tid, sleeper):
    agent = _agent(mimic, tmp_path)
    try:
        with pytest.raises(InvalidInput, match=rf"pid {agent_tid} .*thread"):
            agent.register_job({"job_id": "j1", "pids": [agent_tid], "cores": 1})
        with pytest.raises(InvalidInput, match="thread"):
            agent.register_job({"job_id": "j1", "pids": [sleeper.pid, agent_tid], "cores": 1})
        assert os.getpid() not in _moved_anywhere(mimic) and agent_tid not in _moved_anywhere(mimic)
        assert agent.jobs() == []
    finally:
        agent.close()


@pytest.mark.parametrize("pid,words", [(2, "kernel thread"), (1, "pid 1")])
def test_registration_refuses_kthreadd_and_init_mimic(mimic, tmp_path, pid, words):
    agent = _agent(mimic, tmp_path)
    try:
        with pytest.raises(InvalidInput, match=words):
            agent.register_job({"job_id": "k", "pids": [pid], "cores": 1})
        assert _moved_anywhere(mimic) == set()
    finally:
        agent.close()


def test_followed_processes_obey_the_same_rule_mimic(mimic, tmp_path, agent_tid, sleeper):
    """Processes that enter later (here: listed by a batch system's cgroup) are checked too."""
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "cgroup.procs").write_text(f"{sleeper.pid}\n{agent_tid}\n2\n")
    agent = _agent(mimic, tmp_path)
    agent._sample_only = lambda spec: False  # mimic is v2; move as on v1
    try:
        agent.register_job(JobSpec(job_id="b1", cores=1.0, pids=(sleeper.pid,),
                                   batch_cgroup=str(batch)))
        agent.tick()
        moved = _moved_anywhere(mimic)
        assert sleeper.pid in moved
        assert not moved & {agent_tid, os.getpid(), 2}
        events = " ".join(e["event"] for e in agent.job("b1")["events"])
        assert "thread" in events and "kernel thread" in events
    finally:
        agent.close()


# ---- the state file (items 3 and 4) ------------------------------------------------------
def _leave_state(mimic, tmp_path, sleeper, edit) -> Path:
    """A previous agent registered sleeper as job j1 and was 'killed'; edit its state file."""
    a = _agent(mimic, tmp_path)
    a.register_job({"job_id": "j1", "pids": [sleeper.pid], "cores": 2, "walltime_s": 60})
    a.set_quota("j1", 0.2, lease_s=600)
    a.close(restore=False)  # as after kill -9: quota and state file stay
    path = tmp_path / "state" / "state.json"
    text = edit(path.read_text())
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_recovery_validates_the_state_file_like_the_api_mimic(mimic, tmp_path, sleeper):
    def poison(text):
        doc = json.loads(text)
        doc["jobs"]["j1"]["spec"]["pids"] = [1, sleeper.pid]
        return json.dumps(doc).replace('"cores": 2.0', '"cores": 1e999').replace(
            '"cores": 2', '"cores": 1e999')

    _leave_state(mimic, tmp_path, sleeper, poison)
    agent = _agent(mimic, tmp_path)
    try:
        agent.tick()
        agent.tick()
        assert 1 not in _moved_anywhere(mimic)
        rec = agent.recovery
        assert rec["adopted"] == ["j1"] and "j1" in (rec["problem"] or "")
        assert "pid 1" in rec["problem"] or "cores" in rec["problem"]
        j = agent.job("j1")
        assert j["cores"] == 1.0 and 1 not in j["pids"] and j["status"] == "released"
        assert (mimic.mount / "cosched" / "j1" / "cpu.max").read_text().startswith("max")
    finally:
        agent.close()


def test_recovery_refuses_a_saved_pid_that_breaks_the_rule_mimic(mimic, tmp_path, sleeper, agent_tid):
    def poison(text):
        doc = json.loads(text)
        doc["jobs"]["j1"]["spec"]["pids"] = [agent_tid]
        return json.dumps(doc)

    _leave_state(mimic, tmp_path, sleeper, poison)
    agent = _agent(mimic, tmp_path)
    try:
        agent.tick()
        assert agent_tid not in _moved_anywhere(mimic) and os.getpid() not in _moved_anywhere(mimic)
        assert "thread" in agent.recovery["problem"]
    finally:
        agent.close()


@pytest.mark.parametrize("content", [
    os.urandom(64) + b"\xff\xfe\xc3\x28",                      # not UTF-8
    b"[" * 100_000 + b"]" * 100_000,                            # nested past the recursion limit
    b'{"format": "cosched-agent-state/1", "pid": ' + b"9" * 5000 + b"}",  # too many digits
    b'{"format": "cosched-agent-state/1", "jobs": {"j1": {"spec": 7}}, "saved_at": 1e999}',
    b'{"format": "cosched-agent-state/1", "jobs": [1, 2]}',
    b"",
], ids=["random-bytes", "deep", "huge-int", "odd-values", "jobs-list", "empty"])
def test_broken_state_file_is_set_aside_reported_and_quotas_lifted_mimic(mimic, tmp_path, sleeper,
                                                                        content):
    path = _leave_state(mimic, tmp_path, sleeper, lambda text: content)
    assert (mimic.mount / "cosched" / "j1" / "cpu.max").read_text().startswith("40000")
    agent = _agent(mimic, tmp_path)
    try:
        rec = agent.recovery
        assert (mimic.mount / "cosched" / "j1" / "cpu.max").read_text().startswith("max")
        assert rec["restored"] == ["j1"] and rec["adopted"] == ["j1"]
        assert "unusable" in rec["problem"] and list(path.parent.glob("state.json.broken-*"))
        assert agent.job("j1")["status"] == "released"
    finally:
        agent.close()


def test_state_file_loader_never_raises(tmp_path):
    sf = StateFile(tmp_path / "state.json")
    for content in (b"\x00" * 10, b"\xff" * 100, b"null", b"1e999", b'{"format": 3}',
                    b"[" * 50_000, b'{"format": "cosched-agent-state/1", "cgroup_root": 5}'):
        sf.path.write_bytes(content)
        st = sf.load()
        assert st is not None and st.problem, content[:20]



def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for f in Path(f"/proc/{pid}/task").glob("*/children"):
        out.update(int(x) for x in f.read_text().split())
    return out


@pytest.fixture
def forking_task(tmp_path):
    """A batch task (parent) with a worker it forked (child), both listed in a batch-system
    cgroup folder: ``(parent, child, batch)``. The parent is started by a shell that exits
    at once, so neither descends from this process (the in-process agent): as a batch
    daemon's, they are not the agent's own."""
    code = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            "time.sleep(120)")
    out = subprocess.run(["sh", "-c", f'{shlex.quote(sys.executable)} -c "{code}" >/dev/null 2>&1 & echo $!'],
                         capture_output=True, text=True, check=True).stdout
    parent = int(out.split()[0])
    try:
        deadline = time.monotonic() + 10
        while not (kids := _children(parent)) and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = kids
        batch = tmp_path / "batch"
        batch.mkdir()
        (batch / "cgroup.procs").write_text(f"{parent}\n{child}\n")
        yield parent, child, batch
    finally:
        for pid in (*_children(parent), parent):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def _stale_batch_reads(monkeypatch, parent: int, n: int) -> None:
    """The next ``n`` reads of a batch cgroup come before the fork: they list the parent only."""
    import monitoring.collect as collect

    real_read, left = collect.cgroup_tree_pids, [n]

    def read(d):
        if left[0] > 0:
            left[0] -= 1
            return {parent}
        return real_read(d)

    monkeypatch.setattr(collect, "cgroup_tree_pids", read)


def _agent_sharing_its_cpu_cgroup(mimic, tmp_path) -> NodeAgent:
    """Slurm on cgroup v1 in a container: every process shares the agent's cpu cgroup,
    which is not the hierarchy's root (Slurm has no cpu cgroup of its own)."""
    from monitoring.admission import Admission

    agent = _agent(mimic, tmp_path)
    agent._sample_only = lambda spec: False  # mimic is v2; move as on v1
    agent.admission = Admission(own_cgroup="/docker/abc", top="/", cgroup_of=lambda pid: "/docker/abc")
    return agent


def test_a_worker_forked_after_the_batch_cgroup_was_read_is_followed_not_refused_mimic(
        mimic, tmp_path, monkeypatch, forking_task):
    """CI run of stop 45 (Slurm 24.11 on cgroup v1 in a container): the job's task forked
    its worker between the agent's read of the job's Slurm cgroup and its walk of the
    task's children. Without the batch system's word the own-cgroup rule refused the
    worker, the refusal was remembered, and the worker ran unthrottled to its end."""
    parent, child, batch = forking_task
    _stale_batch_reads(monkeypatch, parent, 1)
    agent = _agent_sharing_its_cpu_cgroup(mimic, tmp_path)
    try:
        agent.register_job(JobSpec(job_id="b1", cores=1.0, batch_cgroup=str(batch)))
        agent.tick()
        assert {parent, child} <= _in_job_cgroup(mimic, "b1")
        assert "agent's cgroup" not in " ".join(e["event"] for e in agent.job("b1")["events"])
    finally:
        agent.close()


def test_an_own_cgroup_refusal_is_lifted_once_the_batch_system_lists_the_pid_mimic(
        mimic, tmp_path, monkeypatch, forking_task):
    parent, child, batch = forking_task
    _stale_batch_reads(monkeypatch, parent, 2)   # both reads of the first tick are stale
    agent = _agent_sharing_its_cpu_cgroup(mimic, tmp_path)
    try:
        agent.register_job(JobSpec(job_id="b1", cores=1.0, batch_cgroup=str(batch)))
        agent.tick()
        assert child not in _in_job_cgroup(mimic, "b1")
        assert "agent's cgroup" in " ".join(e["event"] for e in agent.job("b1")["events"])
        agent.tick()
        assert {parent, child} <= _in_job_cgroup(mimic, "b1")
    finally:
        agent.close()


def test_an_own_cgroup_refusal_outside_the_batch_cgroup_stays_mimic(mimic, tmp_path, forking_task):
    parent, child, batch = forking_task
    (batch / "cgroup.procs").write_text(f"{parent}\n")   # the child left the job's cgroup
    agent = _agent_sharing_its_cpu_cgroup(mimic, tmp_path)
    try:
        agent.register_job(JobSpec(job_id="b1", cores=1.0, batch_cgroup=str(batch)))
        for _ in range(2):
            agent.tick()
        assert child not in _in_job_cgroup(mimic, "b1") and parent in _in_job_cgroup(mimic, "b1")
        events = [e["event"] for e in agent.job("b1")["events"]]
        assert sum("agent's cgroup" in e for e in events) == 1, events   # said once
    finally:
        agent.close()
