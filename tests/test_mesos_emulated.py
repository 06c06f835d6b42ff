"""The framework against the emulated master (testbed/mesos, `cosched mesos emulate`), run
as its own process on a free port, over real HTTP, with real task processes.

Written against the emulator's documented command line only (the issue's
`cosched mesos emulate --agents N --cpus C --mem MB --listen ADDR`); the emulator and the
driver share no code. The faults put in through the emulator's admin API are in
test_mesos_faults.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from coscheduler.model import Job
from mesos_framework.framework import FrameworkConfig
from mesos_framework.run import MesosRun

pytestmark = [pytest.mark.mesos]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def emulator():
    procs = []

    def start(agents=2, cpus=2, mem=2048):
        port = _free_port()
        p = subprocess.Popen([sys.executable, "-m", "coscheduler.cli", "mesos", "emulate",
                              "--agents", str(agents), "--cpus", str(cpus), "--mem", str(mem),
                              "--listen", f"127.0.0.1:{port}"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(p)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                return p, f"http://127.0.0.1:{port}"
            except OSError:
                if p.poll() is not None:
                    raise RuntimeError(p.stderr.read().decode()[-2000:])
                time.sleep(0.05)
        raise RuntimeError("the emulator did not listen within 30 s")

    yield start
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGCONT)
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(p.pid, signal.SIGKILL)


def sleeper(jid, seconds, cores=2, nodes=1, **kw) -> Job:
    return Job(jid, cores, 60.0, "test/sleep", nodes=nodes, command=("/bin/sleep", str(seconds)), **kw)


def quick(**kw) -> FrameworkConfig:
    return FrameworkConfig(**{"settle_s": 0.3, "hold_s": 1.0, "refuse_s": 0.5, "idle_refuse_s": 0.5, **kw})


def test_gang_launches_only_whole_and_runs_to_completion(emulator):
    _, url = emulator(agents=2, cpus=2)
    mr = MesosRun(url, "space-sharing", config=quick())
    mr.submit([sleeper("gang", 1, cores=4, nodes=2), sleeper("small", 1, cores=1, submit_time=1.0)])
    mr.start()
    try:
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    states = {o.job_id: o.state for o in result.outcomes}
    assert states == {"gang": "completed", "small": "completed"}, result.outcomes
    starts = {j: t for t, j, _ in mr.backend.starts}
    assert starts["gang"] <= starts["small"]      # the gang (first in the queue) was not overtaken


def test_two_frameworks_with_competing_gangs_both_finish(emulator):
    """Each wants every core of the cluster; bounded, jittered holding lets one get all of
    them, then the other: no deadlock."""
    _, url = emulator(agents=2, cpus=2)
    runs = [MesosRun(url, "space-sharing", config=quick(name=f"fw{i}", hold_s=0.5))
            for i in range(2)]
    for i, mr in enumerate(runs):
        mr.submit([sleeper(f"gang{i}", 1, cores=4, nodes=2)])
        mr.start()
    import threading
    results = {}
    threads = [threading.Thread(target=lambda i=i, mr=mr: results.__setitem__(i, mr.run(timeout_s=90)))
               for i, mr in enumerate(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for mr in runs:
        mr.close()
    assert [o.state for o in results[0].outcomes] == ["completed"]
    assert [o.state for o in results[1].outcomes] == ["completed"]


def test_framework_failover_reconciles_and_adopts_its_running_gang(emulator, tmp_path):
    _, url = emulator(agents=2, cpus=2)
    state = str(tmp_path / "fw.json")
    first = MesosRun(url, "space-sharing", config=quick(state_file=state, failover_timeout_s=60))
    first.submit([sleeper("long", 4, cores=4, nodes=2)])
    first.start()
    first.run(until=lambda: bool(first.backend.running()), timeout_s=30)
    assert [rj.job_id for rj in first.backend.running()] == ["long"]
    first.close(failover=True)            # dies: no TEARDOWN, tasks keep running
    second = MesosRun(url, "space-sharing", config=quick(state_file=state, failover_timeout_s=60))
    second.submit([sleeper("long", 4, cores=4, nodes=2)])
    assert [rj.job_id for rj in second.backend.running()] == ["long"]   # adopted, not queued
    second.start()
    try:
        result = second.run(timeout_s=60)
    finally:
        second.close()
    assert [o.state for o in result.outcomes] == ["completed"]
    assert second.backend.starts == []     # never launched twice
    assert second.driver.framework_id == first.driver.framework_id


def test_master_that_stops_sending_heartbeats_is_left_and_resubscribed(emulator):
    proc, url = emulator(agents=1, cpus=2)
    mr = MesosRun(url, "space-sharing", config=quick(),
                  driver_options={"heartbeat_misses": 0.1, "backoff_max_s": 0.5})
    mr.submit([sleeper("j", 0.5, cores=1)])
    mr.start()
    try:
        deadline = time.monotonic() + 20
        while mr.driver.subscriptions < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGSTOP)   # silent, connection still open: a partition
        time.sleep(max(3.0, 0.1 * (mr.driver.heartbeat_interval_s or 15) * 2))
        os.killpg(proc.pid, signal.SIGCONT)
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    assert mr.driver.disconnections >= 1 and mr.driver.subscriptions >= 2
    assert any("heartbeats" in e for e in mr.driver.stream_errors)
    assert [o.state for o in result.outcomes] == ["completed"]


@pytest.mark.root
def test_static_co_allocation_applies_real_cpu_quotas(emulator, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for cgroup quotas")
    from mesos_framework.quotas import LocalNodeAgents
    _, url = emulator(agents=1, cpus=2)
    burn = [sys.executable, "-c", "import time\nt=time.time()+6\nwhile time.time()<t: pass"]
    host = Job("host", 2, 60.0, "test/burn", command=tuple(burn))
    guest = Job("guest", 2, 60.0, "test/burn", submit_time=0.5, command=tuple(burn))
    mr = MesosRun(url, "static", config=quick())
    mr.backend.quotas = LocalNodeAgents(tmp_path, cpu_per_core=0.5)
    mr.submit([host, guest])
    mr.start()
    samples = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not mr.backend.idle():
            mr.backend.changed.wait(0.25)
            mr.step()
            run = {rj.job_id: rj for rj in mr.backend.running()}
            if "guest" in run and "host" in run and run["guest"].host_job == "host":
                agent = next(iter(mr.backend.quotas.agents.values()))
                h, g = agent.job("host"), agent.job("guest")
                if h.get("cpu_percent") is not None and g.get("cpu_percent") is not None:
                    samples.append((h["quota_us"], g["quota_us"], h["cpu_percent"], g["cpu_percent"]))
    finally:
        mr.close()
    assert samples, "host and guest never ran together"
    hq, gq = samples[-1][0], samples[-1][1]
    # Static 50 % of 2 shared cores: host keeps 1 - 0.5 = 50 %, guest 50 % of its 2 cores.
    assert hq == pytest.approx(gq, rel=0.05)
    h_cpu = sorted(s[2] for s in samples)[len(samples) // 2]
    g_cpu = sorted(s[3] for s in samples)[len(samples) // 2]
    assert 0.5 < h_cpu / max(g_cpu, 1e-6) < 2.0


def test_a_completed_jobs_outcome_carries_its_mean_cpu_use_from_the_node_agent(emulator, tmp_path):
    """A job too short to be sampled is learned from what it used: the node agent reads its
    cgroup's CPU counter when it finishes or is unregistered, and the framework puts the
    mean use over its life in the job's outcome (in % of its cores, as samples are)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for cgroups")
    from mesos_framework.quotas import LocalNodeAgents
    _, url = emulator(agents=1, cpus=2)
    burn = [sys.executable, "-c", "import time\nt=time.time()+1.5\nwhile time.time()<t: pass"]
    jobs = [Job("busy", 1, 60.0, "test/burn", command=tuple(burn)),
            Job("idle", 1, 60.0, "test/sleep", command=("/bin/sleep", "1.5"))]
    mr = MesosRun(url, "space-sharing", config=quick())
    mr.backend.quotas = LocalNodeAgents(tmp_path, cpu_per_core=1.0)
    mr.submit(jobs)
    mr.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not mr.backend.idle():
            mr.backend.changed.wait(0.25)
            mr.step()
    finally:
        mr.close()
    out = {o.job_id: o for o in mr.backend.history}
    assert out["busy"].state == "completed" and out["idle"].state == "completed"
    # One busy core for most of its life (start-up and the launch count against it).
    assert out["busy"].cpu_percent is not None and 40.0 < out["busy"].cpu_percent <= 100.0, out
    assert out["idle"].cpu_percent is not None and out["idle"].cpu_percent < 20.0, out


@pytest.mark.root
@pytest.mark.live
def test_done_when_scaled_down_cosched_run_runs_the_four_workflows_with_gangs_and_coallocations(tmp_path):
    """The issue's done-when on a smaller cluster: `cosched mesos emulate` in one process,
    `cosched run --backend mesos --policy asax --workload small` in another, until idle;
    every stage completes, the 4-core stages run as 2-agent gangs, and `cosched decisions
    list` reads the run's database (the decisions ASA_X made, if any)."""
    import json
    from mesos_emu_proc import EmulatorProcess

    emu = EmulatorProcess(agents=2, cpus=2, mem=2048)
    db = tmp_path / "state.db"
    try:
        # --overtime: on a loaded machine a stage may take many times its walltime; this
        # test is about the run, not about walltimes (losses still count them).
        p = subprocess.run([sys.executable, "-m", "coscheduler.cli", "run", "--backend", "mesos",
                            "--master", emu.url, "--policy", "asax", "--db", str(db),
                            "--workload", "small", "--workload-scale", "0.002", "--overtime", "30",
                            "--interval", "0.5", "--until-idle"],
                           capture_output=True, text=True, timeout=400)
    finally:
        emu.stop()
    assert p.returncode == 0, p.stderr[-3000:]
    done = [json.loads(f.read_text()) for f in (tmp_path / "state.mesos-queue" / "done").glob("*.json")]
    states = {d["job"]["job_id"]: d["outcome"]["state"] for d in done}
    assert len(states) == 12 and set(states.values()) == {"completed"}, states
    gangs = [line for line in p.stderr.splitlines() if " started " in line and " on " in line
             and line.split(" on ", 1)[1].count(":") >= 2 and "(" in line]
    assert gangs, "no stage ran as a gang over two agents"
    out = subprocess.run([sys.executable, "-m", "coscheduler.cli", "decisions", "list", "--db", str(db),
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    decisions = json.loads(out.stdout)["decisions"]
    # Since ASA_X lends only a host's measured idle CPU (issue 19), whether this tiny run
    # (stages of a few seconds) shows a host with idle CPU before it ends is timing: about
    # half the runs here make no decision. ASA_X's quotas through Mesos are asserted by
    # test_mesos_faults.py::test_asax_coallocation_through_the_emulator_applies_the_quotas_it_chose.
    assert all(d["host_job"] and d["guest_job"] for d in decisions), decisions
    assert all(0.0 <= d["action_fraction"] < 1.0 for d in decisions), decisions
