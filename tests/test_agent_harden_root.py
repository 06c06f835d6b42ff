"""The agent's process-admission rule and its state-file recovery on the REAL kernel
(root, this machine's cgroup v1), through a real ``cosched agent`` process (issue 8,
items 1-4). The same rules on a mimic directory are in test_agent_admission.py.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from monitoring.client import AgentClient, AgentError

from test_agent_cgroup import (ACCT, CPU, SLEEPY, TOKEN, _start_agent, cg_root, procs,  # noqa: F401
                               quota_file)

pytestmark = pytest.mark.root


def cpu_cgroup(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if "cpu" in ctrls.split(","):
            return path
    raise AssertionError(f"pid {pid} has no cpu cgroup line")


def _stop(ag) -> None:
    ag.send_signal(signal.SIGTERM)
    assert ag.wait(timeout=10) == 0


def test_http_refuses_a_thread_of_the_agent_and_the_agent_stays_put(procs, cg_root, tmp_path):
    ag, info = _start_agent(procs, cg_root, tmp_path / "state")
    c = AgentClient(info["url"], token=TOKEN)
    tids = [int(t) for t in os.listdir(f"/proc/{ag.pid}/task") if int(t) != ag.pid]
    assert tids, "the agent runs an HTTP thread and a tick thread"
    before = cpu_cgroup(ag.pid)
    for tid in tids:
        with pytest.raises(AgentError, match=r"thread") as e:
            c.register_job(f"t{tid}", [tid], 1)
        assert e.value.status == 400
    assert cpu_cgroup(ag.pid) == before
    assert c.jobs() == []
    assert not [d for d in (CPU / cg_root).iterdir() if d.is_dir()]
    _stop(ag)


def test_http_refuses_kernel_threads_and_init(procs, cg_root, tmp_path):
    ag, info = _start_agent(procs, cg_root, tmp_path / "state")
    c = AgentClient(info["url"], token=TOKEN)
    # kernel threads that live as long as the machine (kworkers come and go)
    lasting = ("ksoftirqd/", "migration/", "cpuhp/", "kswapd", "rcu_", "oom_reaper", "khugepaged")
    kthreads = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1] == "2" \
                    and Path(f"/proc/{p}/comm").read_text().startswith(lasting):
                kthreads.append(int(p))
        except (OSError, IndexError):
            continue
    assert kthreads, "no lasting kernel thread found"
    before = {p: cpu_cgroup(p) for p in [1, 2] + kthreads[:5]}
    for pid, words in [(2, "kernel thread"), (1, "pid 1")] + [(k, "kernel thread") for k in kthreads[:5]]:
        with pytest.raises(AgentError, match=words) as e:
            c.register_job("k", [pid], 1)
        assert e.value.status == 400
    assert {p: cpu_cgroup(p) for p in before} == before
    _stop(ag)


def test_processes_in_the_agents_own_cgroup_are_refused(procs, cg_root, tmp_path):
    """The agent runs in a cgroup of its own (as under systemd); another process there (not
    started by the agent) is the service's, never a job's."""
    own = CPU / f"cosched-test-own-{uuid.uuid4().hex[:8]}"
    own.mkdir()
    try:
        ag, info = _start_agent(procs, cg_root, tmp_path / "state")
        other = procs(SLEEPY)
        for pid in (ag.pid, other.pid):
            (own / "cgroup.procs").write_text(str(pid))
        c = AgentClient(info["url"], token=TOKEN)
        with pytest.raises(AgentError, match="agent's own cgroup") as e:
            c.register_job("o", [other.pid], 1)
        assert e.value.status == 400
        assert cpu_cgroup(other.pid) == "/" + own.name
        free = procs(SLEEPY)  # an ordinary process elsewhere is still welcome
        assert c.register_job("f", [free.pid], 1)["pids"] == [free.pid]
        _stop(ag)
    finally:
        for pid in (own / "cgroup.procs").read_text().split():
            try:
                (CPU / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        deadline = time.monotonic() + 3
        while own.exists() and time.monotonic() < deadline:
            try:
                own.rmdir()
            except OSError:
                time.sleep(0.05)
        assert not own.exists()


def _killed_agent_with_quota(procs, cg_root, state_dir):
    ag, info = _start_agent(procs, cg_root, state_dir)
    c = AgentClient(info["url"], token=TOKEN)
    job = procs(SLEEPY)
    c.register_job("j1", [job.pid], 2, walltime_s=600)
    c.set_quota("j1", 0.2, lease_s=600)
    ag.kill()
    ag.wait()
    assert quota_file(cg_root, "j1") == "40000"
    return job


def test_restart_with_a_state_file_of_random_bytes_lifts_the_quota(procs, cg_root, tmp_path):
    state = tmp_path / "state"
    job = _killed_agent_with_quota(procs, cg_root, state)
    (state / "state.json").write_bytes(b"\xff\xfe" + os.urandom(4096))
    ag, info = _start_agent(procs, cg_root, state)
    rec = info["recovery"]
    assert "unusable" in rec["problem"] and rec["restored"] == ["j1"]
    assert list(state.glob("state.json.broken-*"))
    assert quota_file(cg_root, "j1") == "-1"
    j = AgentClient(info["url"], token=TOKEN).job("j1")
    assert j["status"] == "released" and job.pid in j["pids"]
    _stop(ag)


def test_restart_never_moves_what_the_state_file_names_against_the_rule(procs, cg_root, tmp_path):
    """A state file whose job lists the test process (an ancestor of the agent) with
    cores 1e999: the restarted agent moves nothing of it and reports why."""
    state = tmp_path / "state"
    _killed_agent_with_quota(procs, cg_root, state)
    doc = json.loads((state / "state.json").read_text())
    doc["jobs"]["j1"]["spec"]["pids"] = [os.getpid()]
    (state / "state.json").write_text(json.dumps(doc).replace('"cores": 2.0', '"cores": 1e999'))
    mine = cpu_cgroup(os.getpid())
    ag, info = _start_agent(procs, cg_root, state)
    time.sleep(1.2)  # two ticks at 0.5 s
    assert cpu_cgroup(os.getpid()) == mine and cpu_cgroup(ag.pid) == mine
    rec = info["recovery"]
    assert "j1" in rec["problem"] and quota_file(cg_root, "j1") == "-1"
    j = AgentClient(info["url"], token=TOKEN).job("j1")
    assert j["cores"] == 1.0 and os.getpid() not in j["pids"]
    _stop(ag)


@pytest.mark.parametrize("job_id", ["a\n", "tasks", "cgroup.procs", "cpu.cfs_quota_us",
                                    "notify_on_release", "cpu.shares"])
def test_ids_with_a_newline_or_named_like_cgroup_files_are_400_on_real_cgroups(procs, cg_root,
                                                                               tmp_path, job_id):
    ag, info = _start_agent(procs, cg_root, tmp_path / "state")
    c = AgentClient(info["url"], token=TOKEN)
    p = procs(SLEEPY)
    before = sorted(str(x) for x in (CPU / cg_root).rglob("*"))
    with pytest.raises(AgentError) as e:
        c.register_job(job_id, [p.pid], 1)
    assert e.value.status == 400 and "job_id" in str(e.value)
    with pytest.raises(AgentError) as e:
        c.set_quota(job_id, 0.5, 10)
    assert e.value.status == 400
    assert sorted(str(x) for x in (CPU / cg_root).rglob("*")) == before
    assert c.health()
    _stop(ag)


def _spawn_at(pid: int, procs, cmd, **kw):
    """Start ``cmd`` so that the kernel gives it the number ``pid`` (ns_last_pid), as it
    would to any process once ``pid``'s holder ended; None if others kept taking it."""
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        p = procs(cmd, **kw)
        if p.pid == pid:
            return p
        p.kill()
        p.wait()
    return None


def test_a_registered_leaders_number_given_to_another_users_process_is_not_followed(procs, cg_root,
                                                                                    tmp_path):
    """Probed 2026-12-03: once a job's registered leader ended, a process of ``nobody``
    given its number was moved into the job's cgroup (under its 5 % quota) at the next
    full tick, and followed from then on."""
    ag, info = _start_agent(procs, cg_root, tmp_path / "state")
    c = AgentClient(info["url"], token=TOKEN)
    leader = procs(["sh", "-c", "sleep 3000 & exec sleep 1"])
    c.register_job("reuse", [leader.pid], 1)
    c.set_quota("reuse", 0.05, lease_s=600)
    assert leader.wait(timeout=10) == 0          # the job runs on in its child
    stranger = _spawn_at(leader.pid, procs, ["sleep", "3000"], user="nobody")
    assert stranger is not None, f"the kernel never gave pid {leader.pid} again"
    home = cpu_cgroup(stranger.pid)
    deadline = time.monotonic() + 6.0            # several full ticks (every 5th at 0.5 s)
    while time.monotonic() < deadline:
        assert cpu_cgroup(stranger.pid) == home, "another user's process was moved into the job"
        time.sleep(0.2)
    view = c.job("reuse")
    assert view["status"] == "running" and leader.pid not in view["pids"]
    assert any("no longer followed" in e["event"] for e in view["events"])
    _stop(ag)


def test_a_job_cgroup_removed_by_someone_else_is_made_again_with_its_quota(procs, cg_root, tmp_path):
    """Seen in the probe: an admin (or a cgroup manager) moves a throttled job's process out
    and removes its emptied cgroup. The agent kept reporting the quota and failing to move
    the process back, every tick, for good: the job ran unlimited. Now the cgroup is made
    again, the process moved back and the quota written to the kernel again."""
    ag, info = _start_agent(procs, cg_root, tmp_path / "state")
    c = AgentClient(info["url"], token=TOKEN)
    p = procs(SLEEPY)
    c.register_job("gone", [p.pid], 1)
    c.set_quota("gone", 0.2, lease_s=600)
    want = quota_file(cg_root, "gone")
    assert int(want) > 0
    for hier in (CPU, ACCT):
        (hier / "cgroup.procs").write_text(str(p.pid))   # (out to the root: an admin's move)
        (hier / cg_root / "gone").rmdir()
    assert not (CPU / cg_root / "gone").exists()
    deadline = time.monotonic() + 8.0            # several full ticks (every 5th at 0.5 s)
    while time.monotonic() < deadline and not (
            (CPU / cg_root / "gone").is_dir() and cpu_cgroup(p.pid) == f"/{cg_root}/gone"):
        time.sleep(0.2)
    assert cpu_cgroup(p.pid) == f"/{cg_root}/gone", "the job's process was left unlimited"
    assert quota_file(cg_root, "gone") == want
    view = c.job("gone")
    assert view["status"] == "running" and view["cpu_fraction"] == 0.2
    assert any("removed by someone else: made again" in e["event"] for e in view["events"])
    _stop(ag)
