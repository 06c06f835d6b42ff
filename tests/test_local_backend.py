"""The local backend on this machine's real cgroups, with real busy processes (root)."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import psutil
import pytest

from coscheduler.backend import BackendError
from testbed.local import LocalBackend, check_local_support
from coscheduler.controller import Controller
from coscheduler.model import Allocation, InvalidInput, Job

BUSY = str(Path(__file__).parent / "fixtures" / "busy_job.py")
LOOPS_PER_CPU_S = 10_000_000      # busy_job.py spins about this many loops per CPU-second

pytestmark = pytest.mark.root


def busy(job_id, cores=1, tasks=4, loops=2_000_000, walltime=60.0, children=0, **kw):
    cmd = [sys.executable, BUSY, str(tasks), str(loops)]
    if children:
        cmd += ["--children", str(children)]
    return Job(job_id=job_id, cores=cores, walltime_s=walltime, job_class="test/busy",
               tasks=tasks, command=tuple(cmd), **kw)


def wait_until(pred, timeout=30.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def kernel_quota_us(backend, job_id) -> int:
    node = backend._runs[job_id].data.node
    cg = Path(backend.agents[node].job(job_id)["cgroup"])
    f = cg / "cpu.cfs_quota_us"
    if f.exists():
        return int(f.read_text())
    quota = (cg / "cpu.max").read_text().split()[0]
    return -1 if quota == "max" else int(quota)


def run_to_end(backend, controller=None, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not backend.idle():
        if controller is not None:
            controller.step()
        else:
            backend.drain_finished()
        assert time.monotonic() < deadline, f"jobs still running: {[r.job_id for r in backend.running()]}"
        time.sleep(0.1)
    if controller is not None:
        controller.step()


@pytest.fixture
def backend_factory(tmp_path):
    made = []

    def make(nodes, **kw):
        b = LocalBackend(nodes, tmp_path / f"b{len(made)}", **kw)
        made.append(b)
        return b

    yield make
    for b in made:
        b.close()
        assert not Path(f"/sys/fs/cgroup/cpu/{b.cgroup_base}").exists(), "cgroups left behind"


def test_quota_caps_a_cpu_bound_job(backend_factory):
    b = backend_factory({"n1": 1}, cpus=1.0)
    job = busy("capped", tasks=4, loops=LOOPS_PER_CPU_S // 8)     # ~0.5 CPU-s of work
    b.submit(job)
    b.start(job, Allocation("capped", (("n1", 1),)), quota_fraction=0.25)
    assert kernel_quota_us(b, "capped") == 25_000                 # 0.25 x 1 core x 100 ms
    run_to_end(b)
    (o,) = b.history
    assert o.state == "completed"
    cpu = b.usage["capped"].cpu_seconds
    assert cpu > 0.2
    # A cap is a cap, whatever else the machine runs: CPU time <= quota x wall time.
    assert cpu / o.runtime_s <= 0.25 * 1.3
    # The outcome carries what the job used over its life (its exit's accounting): at most
    # the quarter of its core it was allowed, in % of the core.
    assert o.cpu_percent is not None and 5.0 < o.cpu_percent <= 25.0 * 1.3, o
    assert o.cpu_percent == pytest.approx(100.0 * cpu / o.runtime_s, rel=0.05)
    # Its peak resident memory in % of the node's, as the agent's samples measure it (the
    # job registers no memory size): an interpreter's few tens of MB, not 100 %.
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024.0
    assert o.mem_percent is not None and 0.0 < o.mem_percent < 5.0, o
    assert o.mem_percent <= 100.0 * rss / psutil.virtual_memory().total * 1.01


def test_guest_inside_host_gets_the_lent_quota_and_host_gets_it_back(backend_factory):
    b = backend_factory({"n1": 4}, cpus=1.0)          # each emulated core = 0.25 CPU
    host = busy("host", cores=4, tasks=1000, loops=LOOPS_PER_CPU_S)
    guest = busy("guest", cores=2, tasks=1000, loops=LOOPS_PER_CPU_S)
    for j in (host, guest):
        b.submit(j)
    b.start(host, Allocation("host", (("n1", 4),)), 1.0)
    assert kernel_quota_us(b, "host") == 100_000                  # 4 x 0.25 CPU: its full share
    a = 0.5                                                       # lend half of 2 shared cores
    b.set_quota("host", 1 - a * 2 / 4)
    b.start(guest, Allocation("guest", (("n1", 2),)), a, host_job="host")
    assert kernel_quota_us(b, "host") == 75_000
    assert kernel_quota_us(b, "guest") == 25_000                  # 0.5 x 2 x 0.25 CPU
    (rg,) = [r for r in b.running() if r.job_id == "guest"]
    assert rg.host_job == "host"
    with pytest.raises(BackendError, match="spare"):
        b.submit(busy("third", cores=3))
        b.start(busy("third", cores=3), Allocation("third", (("n1", 3),)), 0.5, host_job="host")
    b.cancel("guest")
    b.set_quota("host", 1.0)
    assert kernel_quota_us(b, "host") == 100_000
    b.cancel("host")
    states = {o.job_id: o.state for o in b.drain_finished()}
    assert states == {"guest": "cancelled", "host": "cancelled"}


def test_processes_a_job_starts_later_are_followed(backend_factory):
    b = backend_factory({"n1": 1}, cpus=1.0, agent_interval_s=0.2)
    job = busy("forker", tasks=1000, loops=LOOPS_PER_CPU_S, children=2)
    b.submit(job)
    b.start(job, Allocation("forker", (("n1", 1),)), 0.3)
    node = b.agents["n1"]
    cg = Path(node.job("forker")["cgroup"])
    procs_file = cg / ("cgroup.procs" if (cg / "cgroup.procs").exists() else "tasks")
    # The shell launcher, the job and its two children all end up in the job's cgroup.
    assert wait_until(lambda: len(procs_file.read_text().split()) >= 3, timeout=10)
    b.cancel("forker")


def test_walltime_overrun_is_killed(backend_factory):
    b = backend_factory({"n1": 1}, cpus=1.0, overtime_factor=0.0)
    job = busy("late", tasks=1000, loops=LOOPS_PER_CPU_S, walltime=1.0)
    b.submit(job)
    b.start(job, Allocation("late", (("n1", 1),)), 1.0)
    run_to_end(b, timeout=20)
    (o,) = b.history
    assert o.state == "timeout" and 1.0 <= o.runtime_s < 5.0


def test_controller_runs_a_dependency_chain_for_real(backend_factory):
    b = backend_factory({"n1": 2}, cpus=1.0)
    first = busy("wf.a", cores=2, tasks=2, loops=LOOPS_PER_CPU_S // 20)
    second = busy("wf.b", cores=1, tasks=2, loops=LOOPS_PER_CPU_S // 20, depends_on=("wf.a",))
    for j in (first, second):
        b.submit(j)
    ctl = Controller(b)
    run_to_end(b, ctl)
    out = {o.job_id: o for o in b.history}
    assert out["wf.a"].state == out["wf.b"].state == "completed"
    assert out["wf.b"].start_time >= out["wf.a"].end_time
    assert b.usage["wf.a"].cpu_seconds > 0 and b.held_core_seconds() > 0


def test_bad_jobs_are_refused_at_submit(backend_factory):
    b = backend_factory({"n1": 2}, cpus=1.0)
    with pytest.raises(InvalidInput, match="one emulated node"):
        b.submit(busy("wide", cores=2, nodes=2))
    with pytest.raises(InvalidInput, match="no command"):
        b.submit(Job("nocmd", 1, 10.0, "test/x"))
    with pytest.raises(InvalidInput, match="largest emulated node"):
        b.submit(busy("big", cores=3))


def test_support_check_passes_here():
    check_local_support()


def test_jobs_die_with_the_backend_process(tmp_path):
    """If the process that owns the backend is killed (-9), its jobs do not run on, unseen
    and possibly throttled: the launcher's parent-death signal kills them."""
    import json
    import os
    import signal
    import subprocess

    import psutil

    script = f"""
import json, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from testbed.local import LocalBackend
from coscheduler.model import Allocation, Job
b = LocalBackend({{"n1": 1}}, {str(tmp_path / "w")!r}, cpus=1.0)
job = Job("long", 1, 600.0, "test/busy", tasks=1000,
          command=({sys.executable!r}, {BUSY!r}, "1000", "{LOOPS_PER_CPU_S}"))
b.submit(job)
b.start(job, Allocation("long", (("n1", 1),)), 0.5)
print(json.dumps({{"pid": b._runs["long"].data.popen.pid}}), flush=True)
time.sleep(600)
"""
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        job_pid = json.loads(owner.stdout.readline())["pid"]
        assert psutil.pid_exists(job_pid)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
        assert wait_until(lambda: not psutil.pid_exists(job_pid)
                          or psutil.Process(job_pid).status() == psutil.STATUS_ZOMBIE, timeout=10)
        # The dead owner's empty cgroups are tidied by the next backend that starts.
        left = list(Path("/sys/fs/cgroup/cpu").glob(f"cosched-local-{owner.pid}-*"))
        assert left
        LocalBackend({"n1": 1}, tmp_path / "next", cpus=1.0).close()
        assert not any(p.exists() for p in left)
    finally:
        if owner.poll() is None:
            owner.kill()


def test_controller_co_allocates_a_guest_inside_a_busy_host_for_real(backend_factory):
    """Static on real processes: the node is full, so the queued job runs inside the host at
    50 %, the kernel holds both quotas, and the host gets its full quota back after."""
    from coscheduler.policies.coalloc import Static

    b = backend_factory({"n1": 4}, cpus=1.0)
    host = busy("host", cores=4, tasks=1000, loops=LOOPS_PER_CPU_S, walltime=120.0)
    guest = busy("guest", cores=2, tasks=2, loops=LOOPS_PER_CPU_S // 20, walltime=60.0,
                 submit_time=0.0)
    b.submit(host)
    ctl = Controller(b, Static(0.5))
    ctl.step()
    b.submit(guest)
    ctl.step()
    running = {r.job_id: r for r in b.running()}
    assert running["guest"].host_job == "host"
    assert kernel_quota_us(b, "host") == 75_000     # 1 - 0.5 x 2/4 of 4 x 0.25 CPU
    assert kernel_quota_us(b, "guest") == 25_000    # 0.5 x 2 x 0.25 CPU
    assert wait_until(lambda: (ctl.step(), "guest" not in {r.job_id for r in b.running()})[1],
                      timeout=30)
    ctl.step()
    assert kernel_quota_us(b, "host") == 100_000
    assert {o.job_id: o.state for o in b.history}["guest"] == "completed"
    b.cancel("host")
