"""Monitoring agent on cgroup v2 (``cpu.max``, ``cpu.stat``).

This host's kernel binds the ``cpu`` controller to cgroup v1, so its cgroup2 mount
(/sys/fs/cgroup/unified) cannot offer ``cpu.max``. The tests therefore run:

* the v2 quota path on a MIMIC: a temporary directory that mimics the v2 files and rules
  (monitoring/mimic.py; the kernel enforces nothing there): names say ``mimic``;
* process moves and ``cpu.stat`` accounting on the REAL cgroup2 mount (root): names say
  ``real_cgroup2``;
* a real quota test on a cgroup2 mount that offers ``cpu``, which runs only where the kernel
  allows it and is skipped here with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from monitoring.agent import NodeAgent
from monitoring.cgroupfs import CgroupError, CgroupFS, Layout, parse_mountinfo, read_controllers
from monitoring.execute import V2Actuator
from monitoring.mimic import MimicV2FS

BUSY = [sys.executable, "-c", "while True: pass"]
SLEEPY = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def spawn(cmd):
        p = subprocess.Popen(cmd)
        started.append(p)
        return p

    yield spawn
    for p in started:
        p.kill()
        p.wait()


@pytest.fixture
def mimic(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    # What systemd (Delegate=yes) or an operator does on a real v2 host.
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    return fs


def _read(p: Path) -> str:
    return p.read_text().strip()


def test_v2_mimic_quota_lifecycle_hierarchy_and_drift(mimic, procs, tmp_path):
    """MIMIC v2 directory: cpu.max writes, delegation, re-assertion, removal."""
    agent = NodeAgent("cosched/n1", layout=mimic.layout(), fs=mimic, node_cpus=1.5,
                      state_dir=tmp_path / "state")
    try:
        root = mimic.mount / "cosched" / "n1"
        # the ancestor the agent created delegates cpu, and so does its own root
        assert "cpu" in _read(mimic.mount / "cosched" / "cgroup.subtree_control").split()
        assert "cpu" in _read(root / "cgroup.subtree_control").split()
        assert _read(root / "cpu.max") == "150000 100000"
        p = procs(SLEEPY)
        view = agent.register_job({"job_id": "j1", "pids": [p.pid], "cores": 2})
        assert view["created"] and p.pid in view["pids"]
        assert str(p.pid) in _read(root / "j1" / "cgroup.procs")
        # emulated node: full quota = the allocation (2 cores), capped by the node's 1.5 CPUs
        assert _read(root / "j1" / "cpu.max") == "150000 100000"
        agent.set_quota("j1", 0.2, lease_s=30)
        assert _read(root / "j1" / "cpu.max") == "40000 100000"
        agent.tick()   # read back and found right: later ticks compare the kernel's text
        assert agent.actuator.stats.drift_corrected == 0
        # someone rewrites it behind our back: the next tick re-asserts it
        mimic.write(root / "j1" / "cpu.max", "max 100000")
        agent.tick()
        assert _read(root / "j1" / "cpu.max") == "40000 100000"
        assert agent.actuator.stats.drift_corrected == 1
        agent.clear_quota("j1")
        assert _read(root / "j1" / "cpu.max") == "150000 100000"
        p.kill()
        p.wait()
        agent.tick()
        assert agent.job("j1")["status"] == "finished"
        assert not (root / "j1").exists()
    finally:
        agent.close()
    assert not (mimic.mount / "cosched").exists()


def test_a_removed_job_takes_only_its_own_cached_writes_with_it(mimic, procs, tmp_path):
    """The write cache forgets a removed job's files, not those of a job whose name it
    prefixes (j1, j10). (It matched by pathlib parents, quadratic in the jobs: 2 ms a job
    removed with 64 jobs, 40 ms with 1,024, inside the tick.)"""
    agent = NodeAgent("cosched/n1", layout=mimic.layout(), fs=mimic, state_dir=tmp_path / "state")
    try:
        root = mimic.mount / "cosched" / "n1"
        p1, p10 = procs(SLEEPY), procs(SLEEPY)
        for job, p in (("j1", p1), ("j10", p10)):
            agent.register_job({"job_id": job, "pids": [p.pid], "cores": 2})
            agent.set_quota(job, 0.5, lease_s=30)

        def cached(job):
            return [k for k in agent.actuator._cache if k.parent == root / job]
        assert cached("j1") and cached("j10")
        p1.kill()
        p1.wait()
        agent.tick()
        assert agent.job("j1")["status"] == "finished"
        assert cached("j1") == [] and cached("j10")
    finally:
        agent.close()


def test_v2_mimic_refuses_without_delegated_cpu_controller(tmp_path):
    """MIMIC v2 directory whose parent does not delegate cpu: a clear error naming the fix."""
    fs = MimicV2FS(tmp_path / "cgroup2")
    with pytest.raises(CgroupError, match=r"echo \+cpu"):
        NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "s")


def test_v2_mimic_cpu_stat_accounting(mimic, procs, tmp_path):
    """MIMIC v2 directory: CPU % comes from cpu.stat usage_usec when it covers the job."""
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, state_dir=tmp_path / "s")
    try:
        p = procs(BUSY)
        agent.register_job({"job_id": "busy", "pids": [p.pid], "cores": 1})
        proc = psutil.Process(p.pid)
        agent.tick()
        c0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        time.sleep(1.0)
        agent.tick()
        own = 100 * (sum(proc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
        j = agent.job("busy")
        assert j["cpu_source"] == "cgroup"
        # what the process itself used (the box is shared: its share varies, the match not)
        assert own > 5 and abs(j["cpu_percent"] - own) < 10, (j["cpu_percent"], own)
        assert j["nprocs"] == 1 and j["rss_bytes"] > 0
    finally:
        agent.close()


def _cgroup2_mounts() -> list[Path]:
    with open("/proc/self/mountinfo") as f:
        return [Path(m) for m, t, _ in parse_mountinfo(f.read()) if t == "cgroup2"]


def _root() -> bool:
    return os.geteuid() == 0


@pytest.mark.root
def test_v2_real_cgroup2_moves_and_cpu_stat_accounting(procs):
    """REAL cgroup2 mount: create a cgroup, move a busy process in, read cpu.stat, refuse to
    remove a busy cgroup. (cpu.max itself needs the cpu controller; see the mimic tests.)"""
    mounts = [m for m in _cgroup2_mounts() if os.access(m, os.W_OK)]
    if not _root() or not mounts:
        pytest.skip("needs root and a writable cgroup2 mount")
    mount = mounts[0]
    rel = f"cosched-test-v2-{uuid.uuid4().hex[:8]}"
    act = V2Actuator(Layout(2, mount, mount), rel, CgroupFS())
    act.fs.mkdir(act.cpu.root)  # setup() would enable cpu, which this kernel cannot
    p = procs(BUSY)
    try:
        act.ensure_job("j1")
        res = act.move("j1", [p.pid])
        assert res.moved == [p.pid]
        assert act.job_pids("j1") == {p.pid}
        proc = psutil.Process(p.pid)
        u0, c0 = act.usage_ns("j1"), sum(proc.cpu_times()[:2])
        time.sleep(1.0)
        u1, c1 = act.usage_ns("j1"), sum(proc.cpu_times()[:2])
        # the kernel's cgroup counter agrees with the process's own CPU time
        assert u0 is not None and c1 - c0 > 0.05
        assert (u1 - u0) / 1e9 == pytest.approx(c1 - c0, rel=0.2, abs=0.03)
        assert act.remove_job("j1") is False  # busy: nothing moved out, nothing removed
        p.kill()
        p.wait()
        assert act.remove_job("j1") is True
    finally:
        p.kill()
        p.wait()
        for d in (act.cpu.job("j1"), act.cpu.root):
            if d.exists():
                for pid in (d / "cgroup.procs").read_text().split():
                    (mount / "cgroup.procs").write_text(pid)
                d.rmdir()


@pytest.mark.root
def test_v2_real_cgroup2_quota_where_kernel_allows(procs, tmp_path):
    """REAL cgroup2 with the cpu controller: 20 % quota measured. Only where the kernel
    offers cpu on a cgroup2 mount (not on this cgroup v1 host)."""
    mounts = [m for m in _cgroup2_mounts() if "cpu" in read_controllers(m)]
    if not _root() or not mounts:
        pytest.skip("no cgroup2 mount offers the cpu controller here (the kernel binds it to "
                    "cgroup v1); the v2 quota path is covered by the mimic tests")
    agent = NodeAgent(f"cosched-test-v2-{uuid.uuid4().hex[:8]}", cgroup_version=2,
                      state_dir=tmp_path / "s")
    try:
        p = procs(BUSY)
        agent.register_job({"job_id": "j1", "pids": [p.pid], "cores": 1})
        agent.set_quota("j1", 0.2, lease_s=60)
        proc = psutil.Process(p.pid)
        t0 = sum(proc.cpu_times()[:2])
        time.sleep(2.0)
        share = (sum(proc.cpu_times()[:2]) - t0) / 2.0
        assert 0.10 <= share <= 0.25
    finally:
        agent.close()


def _slurm_v2_job(mimic, tmp_path, pid, job_id, folder, node="n1"):
    """A MIMIC of Slurm's v2 layout: <scope>/<folder>/step_batch/user/task_0 holding ``pid``,
    the cpu controller enabled down to the job (Slurm's cgroup/v2 does), and a fake /proc
    entry for the process: its cgroup path and the environment slurmstepd gives a task."""
    d = mimic.mount
    for part in ("system.slice", "slurmstepd.scope", folder, "step_batch", "user", "task_0"):
        mimic.write(d / "cgroup.subtree_control", "+cpu")
        d = d / part
        mimic.mkdir(d)
    job = mimic.mount / "system.slice" / "slurmstepd.scope" / folder
    (d / "cgroup.procs").write_text(f"{pid}\n")
    (job / "cpuset.cpus.effective").write_text("0-3\n")
    (job / "cpu.stat").write_text("usage_usec 5000000\n")
    proc = tmp_path / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::/{d.relative_to(mimic.mount)}\n")
    (proc / "environ").write_bytes(f"PATH=/bin\0SLURM_JOB_ID={job_id}\0SLURMD_NODENAME={node}\0".encode())
    return job, d


@pytest.mark.parametrize("folder", ["job_42", "0SLUID5K4V3NWH2Y8Q"])
def test_v2_mimic_slurm_job_found_from_its_processes_and_quota_written_in_place(mimic, procs, tmp_path, folder):
    """MIMIC v2 holding Slurm's layout (the job folder named job_42, or by SLUID as 26.05
    does): the agent finds the job from its processes' /proc/PID/cgroup and environment,
    reads its cores and CPU, never moves its task, and writes the quota in place, in the
    job's own cgroup's cpu.max; a lapsed lease gives 'max' back."""
    p = procs(SLEEPY)
    job, task = _slurm_v2_job(mimic, tmp_path, p.pid, "42", folder)
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.tick()
        j = agent.job("42")
        assert j["source"] == "slurm" and j["cores"] == 4 and p.pid in j["pids"]
        (job / "cpu.stat").write_text("usage_usec 6000000\n")
        agent.tick()
        assert agent.job("42")["cpu_source"] == "batch"
        agent.set_quota("42", 0.25, 10)
        assert _read(job / "cpu.max") == "100000 100000"          # 0.25 of 4 cores
        agent.tick()
        assert (task / "cgroup.procs").read_text().split() == [str(p.pid)]   # not moved
        assert not (mimic.mount / "cosched" / "42").exists()
        (job / "cpu.max").write_text("max 100000\n")              # changed behind our back
        agent.tick()
        assert _read(job / "cpu.max") == "100000 100000"          # re-asserted
    finally:
        agent.close()
    assert _read(job / "cpu.max") == "max 100000"                 # no limit left behind


def test_v2_another_nodes_job_is_not_discovered(mimic, procs, tmp_path):
    p = procs(SLEEPY)
    _slurm_v2_job(mimic, tmp_path, p.pid, "7", "job_7", node="n2")
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.tick()
        assert agent.jobs() == [] or all(j["job_id"] != "7" for j in agent.jobs())
    finally:
        agent.close()


def test_slurm_job_cgroup_is_read_from_the_path_never_built():
    from monitoring.cgroupfs import slurm_job_cgroup_v2, slurm_jobs_v2, unified_path

    assert slurm_job_cgroup_v2("/system.slice/slurmstepd.scope/job_5/step_batch/user/task_0") == \
        "/system.slice/slurmstepd.scope/job_5"
    assert slurm_job_cgroup_v2("/system.slice/n1_slurmstepd.scope/0SLUIDX/step_0.1/slurm") == \
        "/system.slice/n1_slurmstepd.scope/0SLUIDX"
    assert slurm_job_cgroup_v2("/system.slice/slurmd.service") is None
    assert slurm_job_cgroup_v2("/step_0") is None
    assert unified_path("12:cpu,cpuacct:/x\n0::/a/b\n") == "/a/b"
    procs = [("/s/job_5/step_batch/user/task_0", {"SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1"}),
             ("/s/job_5/step_batch/slurm", {}),                                 # slurmstepd
             ("/s/X9/step_0/user/task_0", {"SLURM_JOB_ID": "6", "SLURMD_NODENAME": "n2"}),
             ("/s/job_8/step_0/user/task_0", {"SLURM_JOB_ID": "5", "SLURMD_NODENAME": "n1"})]
    assert slurm_jobs_v2(procs[:3]) == {"5": "/s/job_5", "6": "/s/X9"}
    assert slurm_jobs_v2(procs[:3], "n2") == {"6": "/s/X9"}
    assert "5" not in slurm_jobs_v2(procs)    # one id claimed by two cgroups: neither trusted


def test_in_place_quota_writes_only_below_the_mount(mimic):
    from monitoring.cgroupfs import UnsafePath
    from monitoring.execute import InPlaceQuota

    q = InPlaceQuota(mimic.mount, mimic)
    with pytest.raises(UnsafePath):
        q.set_quota(mimic.mount / ".." / "x", 1000)
    with pytest.raises(UnsafePath):
        q.set_quota(mimic.mount, 1000)
    mimic.mkdir(mimic.mount / "j")
    d = mimic.mount / "j" / "k"
    mimic.mkdir(d)        # no +cpu in the parent's subtree_control: no cpu.max
    with pytest.raises(CgroupError, match="cpu controller is not enabled"):
        q.set_quota(d, 1000)


def test_a_nodes_cpus_from_the_job_level_slurm_environment():
    from monitoring.collect import cpus_of_node

    assert cpus_of_node("4(x2)", "c1n[1-2]", "c1n2") == 4
    assert cpus_of_node("4,2(x2)", "a1,b[07-08]", "b08") == 2
    assert cpus_of_node("4", "n1", "n2") is None
    assert cpus_of_node("4(x3)", "n[1-2]", "n1") is None     # lists that disagree: unknown


# -- roles: a guest's cgroup idle, a lending host's weighted up (monitoring/roles.py) --------
# On the MIMIC (file-writing logic only: the kernel enforces nothing there); the real v2
# proof, with the host's CPU share measured, is the VM (testbed/slurm_vm.sh).

def _host_and_guest(mimic, procs, tmp_path, *, discover=True, **kw):
    """Two Slurm jobs on one node in Slurm's v2 layout, 41 (to be the host) and 42 (its
    guest), and an agent that discovered them."""
    cgs = {}
    for jid in ("41", "42"):
        p = procs(SLEEPY)
        cgs[jid], _ = _slurm_v2_job(mimic, tmp_path, p.pid, jid, f"job_{jid}")
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=discover,
                      slurm_node="n1", state_dir=tmp_path / "s", **kw)
    agent.proc_root = str(tmp_path / "proc")
    agent.tick()
    return agent, cgs


def _files(d: Path) -> tuple[str, ...]:
    return tuple(_read(d / f) if (d / f).exists() else "-" for f in ("cpu.max", "cpu.idle", "cpu.weight"))


DEFAULTS = ("max 100000", "0", "100")


def test_roles_table_and_validation():
    from coscheduler.model import InvalidInput
    from monitoring.roles import HOST_WEIGHT, check_guest_weight, check_role, role_files

    assert role_files("guest", 2) == [("cpu.idle", "1")]
    assert role_files("host", 2) == [("cpu.idle", "0"), ("cpu.weight", str(HOST_WEIGHT))]
    assert role_files(None, 2) == [("cpu.idle", "0"), ("cpu.weight", "100")]
    assert HOST_WEIGHT / (HOST_WEIGHT + 100) >= 0.9     # the host's floor without cpu.idle
    assert role_files("guest", 1) == [("cpu.shares", "2")]
    assert role_files("host", 1) == [("cpu.shares", str(HOST_WEIGHT * 1024 // 100))]
    assert role_files(None, 1) == [("cpu.shares", "1024")]
    # a site's guest weight (cosched agent --guest-weight): not idle, a plain weight
    assert role_files("guest", 2, guest_weight=50) == [("cpu.idle", "0"), ("cpu.weight", "50")]
    assert role_files("guest", 1, guest_weight=100) == [("cpu.shares", "1024")]
    assert role_files("guest", 1, guest_weight=1) == [("cpu.shares", "10")]
    assert role_files("host", 1, guest_weight=100) == role_files("host", 1)
    assert check_guest_weight("idle") is None and check_guest_weight("250") == 250
    for bad in ("0", "10001", "-3", "1.5", "nan", "", "weight"):
        with pytest.raises(InvalidInput, match="guest weight must be 'idle' or an integer"):
            check_guest_weight(bad)
    assert check_role(None) is None and check_role("guest") == "guest"
    for bad in ("Guest", "", 1, ["host"]):
        with pytest.raises(InvalidInput, match="role must be 'host', 'guest' or null"):
            check_role(bad)


def test_v2_mimic_guest_idle_host_weight_in_place_then_cleared_lapsed_unregistered(mimic, procs, tmp_path):
    """MIMIC v2, Slurm's layout: a guest's job cgroup gets cpu.idle 1, its host's cpu.weight
    1000, in place beside cpu.max; a tick re-asserts them; clearing, a lapsed lease,
    unregistering and the agent's exit each give the defaults back."""
    agent, cg = _host_and_guest(mimic, procs, tmp_path, interval_s=0.05)
    try:
        assert _files(cg["41"]) == _files(cg["42"]) == DEFAULTS
        assert agent.set_quota("41", 0.5, 30, role="host")["role"] == "host"
        agent.set_quota("42", 0.5, 30, role="guest")
        assert _files(cg["41"]) == ("200000 100000", "0", "1000")
        assert _files(cg["42"]) == ("200000 100000", "1", "1")   # an idle group's weight reads 1
        assert not (mimic.mount / "cosched" / "42").exists()      # nothing moved, nothing ours
        mimic.write(cg["42"] / "cpu.idle", "0")                   # changed behind our back
        mimic.write(cg["41"] / "cpu.weight", "100")
        agent.tick()
        assert _read(cg["42"] / "cpu.idle") == "1" and _read(cg["41"] / "cpu.weight") == "1000"
        # a renewal without a role drops it (every PUT states the whole request)
        agent.set_quota("41", 0.5, 30)
        assert _files(cg["41"]) == ("200000 100000", "0", "100")
        agent.set_quota("41", 0.5, 30, role="host")
        agent.clear_quota("41")
        assert _files(cg["41"]) == DEFAULTS and agent.job("41")["role"] is None
        agent.set_quota("42", 0.5, 0.1, role="guest")               # lapses
        time.sleep(0.15)
        agent.enforce_leases()
        assert _files(cg["42"]) == DEFAULTS
        assert "lease expired" in agent.job("42")["quota_reason"]
        agent.set_quota("42", 0.5, 30, role="guest")
        agent.unregister("42")                                     # the job leaves the agent
        assert _files(cg["42"]) == DEFAULTS
        agent.set_quota("41", 0.5, 30, role="host")
    finally:
        agent.close()
    assert _files(cg["41"]) == DEFAULTS                             # nothing left at exit


@pytest.mark.parametrize("discover", [True, False])
def test_v2_mimic_recovery_after_a_crash_gives_idle_and_weight_back(mimic, procs, tmp_path, discover):
    """MIMIC v2: an agent dies (no clean-up) with a guest idle and a host weighted; the next
    one, from its state file (and by discovering the jobs again, when it discovers), gives
    cpu.max, cpu.idle and cpu.weight their defaults."""
    agent, cg = _host_and_guest(mimic, procs, tmp_path)
    agent.set_quota("41", 0.5, 600, role="host")
    agent.set_quota("42", 0.5, 600, role="guest")
    agent.close(restore=False)                                      # as after kill -9
    assert _files(cg["41"])[1:] == ("0", "1000") and _files(cg["42"])[1] == "1"
    again = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=discover,
                      slurm_node="n1", state_dir=tmp_path / "s")
    again.proc_root = str(tmp_path / "proc")
    try:
        assert sorted(again.recovery["restored_in_place"]) == ["41", "42"]
        assert _files(cg["41"]) == _files(cg["42"]) == DEFAULTS
        again.tick()
        assert _files(cg["41"]) == _files(cg["42"]) == DEFAULTS
        if discover:
            assert {j["job_id"] for j in again.jobs()} == {"41", "42"}
    finally:
        again.close()


def test_v2_mimic_kernel_without_cpu_idle_keeps_the_quota_and_says_so_once(tmp_path, procs, caplog):
    """MIMIC v2 of a kernel before 5.15 (no cpu.idle): the guest's quota is written all the
    same; the missing file is logged once, not on every request or tick."""
    fs = MimicV2FS(tmp_path / "cgroup2", idle=False)
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent, cg = _host_and_guest(fs, procs, tmp_path)
    try:
        with caplog.at_level("WARNING", logger="monitoring.agent"):
            agent.set_quota("42", 0.25, 30, role="guest")
            agent.set_quota("41", 0.75, 30, role="host")
            agent.tick()
            agent.set_quota("42", 0.3, 30, role="guest")
        assert _files(cg["42"]) == ("120000 100000", "-", "100")
        assert _files(cg["41"]) == ("300000 100000", "-", "1000")
        said = [r for r in caplog.records if "cpu.idle" in r.getMessage()]
        assert len(said) == 1 and "said once" in said[0].getMessage()
        assert agent.job("42")["apply_error"] is None and agent.job("42")["role"] == "guest"
    finally:
        agent.close()
    assert _files(cg["41"]) == ("max 100000", "-", "100")


def test_v2_mimic_a_job_found_before_its_cores_are_readable_gets_them_at_a_later_tick(
        mimic, procs, tmp_path):
    """slurmstepd makes the job's cgroup before it writes the cpuset or starts the task
    whose environment holds the CPUs. Found in that moment, a job was registered with 1
    core and kept it: its quota was a share of 1 core, not of its 4 (a CI run saw an agent's
    view of a two-node gang at 1.0 core). The agent now reads them again until it can."""
    p = procs(SLEEPY)
    job, _ = _slurm_v2_job(mimic, tmp_path, p.pid, "42", "job_42")
    (job / "cpuset.cpus.effective").unlink()      # not written yet
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.tick()
        assert agent.job("42")["cores"] == 1
        agent.set_quota("42", 0.5, 30)
        assert _read(job / "cpu.max") == "50000 100000"           # 0.5 of the guessed core
        (job / "cpuset.cpus.effective").write_text("0-3\n")
        agent.tick()
        j = agent.job("42")
        assert j["cores"] == 4
        assert any("cores read: 4" in e["event"] for e in j["events"])
        assert _read(job / "cpu.max") == "200000 100000"          # 0.5 of 4 cores
        (job / "cpuset.cpus.effective").write_text("0-1\n")       # read once, then kept
        agent.tick()
        assert agent.job("42")["cores"] == 4
    finally:
        agent.close()


def test_v2_mimic_a_followed_jobs_environment_is_not_read_again_at_each_tick(
        mimic, procs, tmp_path, monkeypatch):
    """Discovery read every Slurm task's environment (up to 1 MiB each, set by the job's
    user) at every tick, also for jobs long followed. Once a job is followed in its own
    cgroup with its cores known, its processes' environments are no longer read."""
    from monitoring import collect

    p = procs(SLEEPY)
    _slurm_v2_job(mimic, tmp_path, p.pid, "42", "job_42")
    reads: list[str] = []
    real = collect.read_environ
    monkeypatch.setattr(collect, "read_environ",
                        lambda path, keys: reads.append(path) or real(path, keys))
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.tick()
        assert agent.job("42")["cores"] == 4 and len(reads) >= 1
        reads.clear()
        agent.tick()
        agent.tick()
        assert reads == []
    finally:
        agent.close()


def test_v2_mimic_a_failing_discovery_does_not_stop_the_sampling_of_followed_jobs(
        mimic, procs, tmp_path, monkeypatch):
    """Discovery reads what jobs' users control (their processes' environments): should it
    ever raise, the tick went no further, and no job on the node was sampled again."""
    from monitoring import collect

    p = procs(SLEEPY)
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.register_job({"job_id": "j1", "pids": [p.pid], "cores": 1})

        def broken(*a, **k):
            raise RuntimeError("a bug in discovery")
        monkeypatch.setattr(collect, "discover_slurm_jobs_v2", broken)
        before = agent.counters["ticks"]
        agent.tick()
        assert agent.counters["ticks"] == before + 1
        assert agent.job("j1")["sample_time"] is not None
    finally:
        agent.close()


def test_v2_mimic_every_process_is_read_only_when_a_new_job_folder_appears(
        mimic, procs, tmp_path, monkeypatch):
    """v2 discovery read every process's /proc/PID/cgroup at every tick (5 us each: a
    node's 1,500 processes cost more than the agent's whole budget). While each folder in
    Slurm's step scope is a job followed already, it does not; a new job's folder makes it
    read them at the next tick, and every V2_FULL_SCAN_TICKS ticks it reads them anyway."""
    from monitoring import collect, restore

    scans: list[int] = []
    real = collect.discover_slurm_jobs_v2
    monkeypatch.setattr(collect, "discover_slurm_jobs_v2",
                        lambda *a, **k: scans.append(1) or real(*a, **k))
    p1, p2 = procs(SLEEPY), procs(SLEEPY)
    _slurm_v2_job(mimic, tmp_path, p1.pid, "42", "job_42")
    agent = NodeAgent("cosched", layout=mimic.layout(), fs=mimic, discover_slurm=True,
                      slurm_node="n1", state_dir=tmp_path / "s")
    agent.proc_root = str(tmp_path / "proc")
    try:
        agent.tick()
        assert agent.job("42")["cores"] == 4 and len(scans) == 1
        for _ in range(3):
            agent.tick()
        assert len(scans) == 1                     # only followed jobs in the scope
        _slurm_v2_job(mimic, tmp_path, p2.pid, "43", "0SLUID5K4V3NWH2Y8Q")   # a new job
        agent.tick()
        assert len(scans) == 2 and agent.job("43")["status"] == "running"
        agent.tick()
        assert len(scans) == 2
        while agent.counters["ticks"] % restore.V2_FULL_SCAN_TICKS:
            agent.tick()
        agent.tick()                               # the periodic full read
        assert len(scans) == 3
    finally:
        agent.close()
