"""Against a real Slurm 22.05 (slurmctld, two slurmd, munged) started by `cosched slurm up`
on this machine, with the project's node agents: the submit hook through real sbatch, the
priority hook, co-allocation with kernel quotas, a multi-node gang with srun, and faults
(the controller killed and restarted, slurmctld restarted or frozen, a job cancelled by its
owner, a node going DOWN under a host and its guest). Root and Slurm (testbed/test.sh
installs it)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coscheduler.backend import BackendError
from coscheduler.controller import Controller
from coscheduler.learner import LearnerConfig
from coscheduler.model import Job
from coscheduler.recorder import MemoryRecorder
from fixed_experts import ConstantExpert
from slurm_cases import METADATA_CASES
from slurm_plugin import cluster as cl
from slurm_plugin.commands import SlurmCommandError, SlurmCommands
from slurm_plugin.connect import backend_for_cluster
from slurm_plugin.parse import ParseError, parse_jobs_json, parse_scontrol_jobs
from slurm_plugin.submit import SubmitOptions, submit_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.root]

BUSY = str(Path(__file__).parent / "fixtures" / "busy_job.py")
LOOPS_PER_CPU_S = 10_000_000
CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def wait_until(pred, timeout=30.0, step=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root")
    d = Path(tempfile.mkdtemp(prefix="cosched-slurm-test-"))   # /tmp: open to munged
    os.chmod(d, 0o755)
    try:
        st = cl.up(d, nodes=2, cpus=4, say=lambda m: None)
    except cl.ClusterError as exc:
        pytest.fail(f"cosched slurm up failed: {exc}")
    yield st
    report = cl.down(d, say=lambda m: None)
    assert not report["cgroups_left"], report
    assert not any(x.alive() for x in st.daemons)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def slurm(state):
    """Run Slurm commands on the test cluster; every job is cancelled after the test."""
    cmds = state.commands()
    yield cmds
    jobs = parse_jobs_json(cmds.run("squeue", "--json", "--states=all"))
    live = [str(j.job_id) for j in jobs if not j.terminal]
    if live:
        cmds.run("scancel", *live)
    for n in state.nodes:
        try:
            cmds.run("scontrol", "update", f"NodeName={n}", "State=RESUME")
        except SlurmCommandError:
            pass   # it was not down
    wait_until(lambda: not [j for j in parse_jobs_json(cmds.run("squeue", "--json", "--states=all"))
                            if not j.terminal], 30, what="test jobs to end")


def sbatch(state, *args, user=None, script="#!/bin/sh\nsleep 30\n"):
    """Real sbatch as root or as ``user``; returns (exit code, stdout, stderr)."""
    env = state.commands().env()
    argv = ["sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *args]
    if user:
        pw = pwd.getpwnam(user)
        argv = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", *argv]
    p = subprocess.run(argv, input=script, capture_output=True, text=True, env=env, timeout=30)
    return p.returncode, p.stdout.strip(), p.stderr


def job(cmds, jid) -> dict:
    out = cmds.run("scontrol", "show", "job", "-o", str(jid))
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def measured_loops_per_cpu_s() -> int:
    """The busy job's spin loops per CPU second in this interpreter (the jobs run in the
    same one), from the fastest of three short probes: a VM two to three times slower than
    the one LOOPS_PER_CPU_S was set on made a 1-minute host take 4 minutes (a CI failure).
    Timed by this thread's CPU clock: the process's counts the CPU of every other thread
    in it too, and a probe that reads slow gives the job too little work (a 1-minute host
    ended in 57 s on 26.05)."""
    spec = importlib.util.spec_from_file_location("busy_job_fixture", BUSY)
    busy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(busy)
    probe = 2_000_000
    best = math.inf
    for _ in range(3):
        t0 = time.thread_time()
        busy.spin(probe)
        best = min(best, time.thread_time() - t0)
    return max(1, int(probe / max(best, 1e-3)))


def busy_job(name, cores, work_cpu_s, walltime=300.0, cls="test/busy", tasks=100,
             loops_per_cpu_s=LOOPS_PER_CPU_S):
    loops = max(1, int(work_cpu_s * loops_per_cpu_s / tasks))
    return Job(job_id=name, cores=cores, walltime_s=walltime, job_class=cls, tasks=tasks,
               command=(sys.executable, BUSY, str(tasks), str(loops)))


def submit(state, jobs, cosched=True):
    subs = submit_jobs(state.commands(), jobs, SubmitOptions(
        partition=state.partition, default_partition=state.default_partition, cosched=cosched,
        output_dir=state.jobs_dir, usage_dir=state.usage_dir, progress_dir=state.progress_dir))
    return [str(s.slurm_job_id) for s in subs]


def cpu_ns(node, jid) -> int:
    f = next(CPUACCT.glob(f"slurm_{node}/uid_*/job_{jid}"), None)
    # A job cgroup gone mid-window (the job ended, or another cluster's clean-up on a
    # shared cgroup tree removed it) must fail by name, not as a negative CPU share.
    assert f is not None, f"job {jid}'s cgroup is gone from {CPUACCT}/slurm_{node}"
    return int((f / "cpuacct.usage").read_text())


def kernel_quota_us(backend, node, jid) -> int:
    view = backend.agents[node].job(jid)
    return int((Path(view["cgroup"]) / "cpu.cfs_quota_us").read_text())


def step_until(ctl, pred, timeout=60.0, what="controller state"):
    try:
        return wait_until(lambda: (ctl.step(), pred())[1], timeout, 0.3, what)
    except AssertionError as exc:
        seen = [(r.job_id, r.allocation.nodes, r.host_job, r.quota_fraction)
                for r in ctl.backend.running()] if hasattr(ctl, "backend") else "?"
        raise AssertionError(f"{exc}; running: {seen}{_cluster_view(ctl)}") from None


def _cluster_view(ctl) -> str:
    """What Slurm and the controller saw when a wait timed out: each job's state and reason,
    the nodes, the backend's notes and the controller log's tail (a CI failure is then
    explained by its log alone)."""
    b = getattr(ctl, "backend", None)
    cmds = getattr(getattr(b, "source", None), "cmd", None)
    out = []
    try:
        if cmds is not None:
            out.append("squeue: " + " | ".join(cmds.run(
                "squeue", "-h", "-t", "all", "-o", "%i %j %T %r prio=%Q nodes=%N req=%n").splitlines()))
            out.append("sinfo: " + " | ".join(cmds.run("sinfo", "-h", "-N", "-o", "%N %t %C").splitlines()))
            conf = Path(cmds.slurm_conf or "")
            logf = conf.parent / "log" / "slurmctld.log"
            if logf.exists():
                out.append("slurmctld.log tail: " + " | ".join(logf.read_text(errors="replace").splitlines()[-25:]))
    except Exception as exc:   # diagnostics only: never hide the first failure
        out.append(f"(could not read the cluster: {exc})")
    if cmds is None and b is not None:     # another source (slurmrestd): what it reads
        try:
            out.append("jobs: " + " | ".join(f"{j.job_id} {j.name} {j.state} held={j.held} "
                                             f"nodes={','.join(j.nodes)} {j.admin_comment}"
                                             for j in b.source.jobs()))
        except Exception as exc:
            out.append(f"(could not read the jobs: {exc})")
    notes = getattr(b, "errors", None)
    if notes:
        out.append(f"backend notes: {list(notes)[-10:]}")
    return "".join("\n  " + x for x in out)


# -- the submit hook ---------------------------------------------------------------------------

def test_hook_accepts_and_refuses_metadata_like_the_parser(state, slurm):
    for comment, minutes, problem in METADATA_CASES:
        rc, out, err = sbatch(state, "-p", state.partition, f"--time={minutes}", f"--comment={comment}")
        if problem is None:
            assert rc == 0, (comment, err)
            j = job(slurm, out)
            # held for the controller, shareable, not requeued; the comment kept as given
            assert (j["Priority"], j["OverSubscribe"], j["Requeue"]) == ("0", "YES", "0"), comment
        else:
            assert rc != 0, comment
            assert "cosched: " in err and problem.replace("'", "") in err.replace("'", ""), (comment, err)
    for args, problem in [((f"-p{state.partition}",), "need a time limit"),
                          ((f"-p{state.partition}", "--time=0"), "need a time limit"),
                          ((f"-p{state.default_partition},{state.partition}", "-t1"), "cannot be combined"),
                          ((f"-p{state.partition}", "-t1", "--array=1-2"), "job arrays"),
                          ((f"-p{state.default_partition}", "-t1", "--comment=cosched:type=parallel"),
                           "only read in partition")]:
        rc, out, err = sbatch(state, *args)
        assert rc != 0 and problem in err, (args, err)
    # What the user typed is quoted in slurmctld's log with its control characters shown
    # as \NNN: a newline in a comment cannot start a log line of the user's choosing.
    rc, out, err = sbatch(state, f"-p{state.partition}", "-t1",
                          "--comment=cosched:class=a\nerror: forged by a user")
    assert rc != 0 and "\\010error: forged" in err, err
    ctld_log = (Path(state.dir) / "log" / "slurmctld.log").read_text(errors="replace")
    assert "\\010error: forged by a user" in ctld_log
    assert not any("error: forged by a user" in line and "cosched" not in line
                   for line in ctld_log.splitlines())
    # A job of another partition is untouched: not held, not shared.
    rc, out, err = sbatch(state, f"-p{state.default_partition}", "-t1")
    assert rc == 0
    assert job(slurm, out)["Priority"] != "0"


def test_hook_keeps_users_from_releasing_or_opting_in(state, slurm):
    rc, mine, err = sbatch(state, f"-p{state.partition}", "-t1", user="nobody")
    assert rc == 0, err
    env = slurm.env()

    def as_nobody(*args):
        pw = pwd.getpwnam("nobody")
        return subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                               "scontrol", *args], capture_output=True, text=True, env=env)

    log = Path(state.dir) / "log" / "slurmctld.log"

    def refused(p, why):
        # scontrol says only "Unspecified error" (22.05); the reason is in slurmctld's log
        return p.returncode != 0 and why in log.read_text(errors="replace")

    assert refused(as_nobody("release", mine), "released by the coscheduler controller")
    assert refused(as_nobody("update", f"JobId={mine}", "Comment=cosched:class=x/y"),
                   "fixed at submission")
    assert refused(as_nobody("update", f"JobId={mine}", f"Partition={state.default_partition}"),
                   "cannot change partition")
    rc, other, err = sbatch(state, f"-p{state.default_partition}", "-t1", "--hold", user="nobody")
    assert refused(as_nobody("update", f"JobId={other}", f"Partition={state.partition}"),
                   "when it is submitted")
    p = as_nobody("update", f"JobId={mine}", "TimeLimit=00:00:30")   # what a user may do
    assert p.returncode == 0, p.stderr
    assert job(slurm, mine)["Priority"] == "0"          # still held
    slurm.run("scontrol", "release", mine)              # an admin (the controller) may
    assert job(slurm, mine)["Priority"] != "0"


# -- the priority hook ---------------------------------------------------------------------------

def test_priority_hook_reorders_the_real_queue(state, slurm):
    from click.testing import CliRunner

    from coscheduler.cli import main

    part = state.default_partition
    rc, blocker, err = sbatch(state, f"-p{part}", "-t5", "-N2", "--ntasks-per-node=4",
                              script="#!/bin/sh\nsleep 60\n")
    assert rc == 0, err
    wait_until(lambda: job(slurm, blocker)["JobState"] == "RUNNING", 20, what="the blocker to run")
    # submitted in this order (FCFS), longest time limit first
    ids = []
    for minutes in (9, 3, 7, 1):
        rc, out, err = sbatch(state, f"-p{part}", f"-t{minutes}", "-N2", "--ntasks-per-node=4",
                              script="#!/bin/sh\nsleep 1\n")
        ids.append(out)
    res = CliRunner().invoke(main, ["slurm", "priority", "--policy", "SJF", "--once", "--json",
                                    "--partition", part, "--dir", state.dir])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert [str(r["job_id"]) for r in rep["order"]] == [ids[3], ids[1], ids[2], ids[0]]
    queue = slurm.run("squeue", "-h", "-t", "PD", "-p", part, "--sort=-p", "-o", "%i")
    assert queue.split() == [ids[3], ids[1], ids[2], ids[0]]   # visible in squeue
    # a second pass changes nothing
    res = CliRunner().invoke(main, ["slurm", "priority", "--policy", "SJF", "--once", "--json",
                                    "--partition", part, "--dir", state.dir])
    assert json.loads(res.output)["changed"] == []
    # and Slurm starts them in that order
    slurm.run("scancel", blocker)
    wait_until(lambda: all(job(slurm, i)["JobState"] == "COMPLETED" for i in ids), 60,
               what="the reordered jobs to run")
    starts = [job(slurm, i)["StartTime"] for i in (ids[3], ids[1], ids[2], ids[0])]
    assert starts == sorted(starts)


# -- co-allocation with real quotas ---------------------------------------------------------------

def test_asax_coallocates_a_guest_in_a_host_with_the_quotas_it_chose(state, slurm):
    """ASA_X (its experts fixed to lend 40 %) puts a 2-core guest on a busy 4-core host's
    node; the agents hold both kernel quotas and the measured CPU stays within them."""
    b = backend_for_cluster(state, lease_s=30)
    n1 = state.nodes[0]
    # enough work that the host still runs through the measurement on a fast, idle machine
    # (26.05's Python 3.14 finished 60 units before the window closed)
    host_id, filler_id = submit(state, [busy_job("host", 4, 150), busy_job("filler", 4, 150, cls="test/filler")])
    (guest_id,) = submit(state, [busy_job("guest", 2, 150, cls="test/guest")])
    forty = tuple(1.0 if k == 4 else 0.0 for k in range(10))
    rec = MemoryRecorder()
    # The quota mechanics at the expert's exact fraction: the host is busy, so idle-only
    # lending (tests/test_lending.py) would lend it nothing.
    ctl = Controller.from_recorder(b, rec, "asax", learner_config=LearnerConfig(seed=1),
                                   expert_factory=lambda: [ConstantExpert("lend40", forty)],
                                   idle_only=False)
    # host and filler take both nodes; the guest does not fit free cores: co-allocated
    step_until(ctl, lambda: {r.job_id for r in b.running()} >= {host_id, filler_id}, 30,
               "host and filler to start")
    running = step_until(ctl, lambda: {r.job_id: r for r in b.running() if r.job_id == guest_id
                                       and r.host_job}, 30, "the guest to be co-allocated")
    g = running[guest_id]
    (d,) = [d for d in rec.decisions.values() if d[0].guest_job == guest_id
            and d[0].decision_id not in rec.outcomes]        # the one carried out
    decision, host_q, guest_q = d
    assert decision.guest_job == guest_id and decision.action_fraction == pytest.approx(0.4)
    assert g.host_job == decision.host_job and g.allocation.nodes == (n1,) == \
        next(r for r in b.running() if r.job_id == g.host_job).allocation.nodes
    assert (host_q, guest_q) == (pytest.approx(0.8), pytest.approx(0.4))   # 1 - 0.4 x 2/4
    host = g.host_job
    # Slurm runs both on n1 (squeue), the agents hold the quotas in the kernel
    wait_until(lambda: job(slurm, guest_id)["JobState"] == "RUNNING", 20, what="the guest to run")
    assert job(slurm, guest_id)["NodeList"] == job(slurm, host)["NodeList"] == n1
    wait_until(lambda: b.agents[n1].job(guest_id).get("pids"), 10, what="the agent to follow the guest")
    assert kernel_quota_us(b, n1, host) == 80_000      # 0.8 x 4 cores x 0.25 CPU x 100 ms
    assert kernel_quota_us(b, n1, guest_id) == 20_000  # 0.4 x 2 cores x 0.25 CPU x 100 ms
    # and their roles: the guest yields a core both want to its host (monitoring/roles.py;
    # on cgroup v1 through cpu.shares)
    for jid, role, shares in ((host, "host", "10240"), (guest_id, "guest", "2")):
        view = b.agents[n1].job(jid)
        assert view["role"] == role
        assert (Path(view["cgroup"]) / "cpu.shares").read_text().strip() == shares
    # Measured CPU over a window. On a machine shared with other tenants the emulated node's
    # cgroup competes with every runnable task at equal weight and can be starved (neither
    # job then reaches its quota, and the split is by CFS weight, not by quota). For the
    # window the cluster's cgroup gets the weight of a dedicated node: it still gets at most
    # its quotas (1 CPU for the node: the filler on the other node is cancelled first).
    slurm.run("scancel", filler_id)
    before = cl.set_cpu_weight(state, 262144)
    try:
        time.sleep(1.0)
        t0 = time.monotonic()
        h0, g0 = cpu_ns(n1, host), cpu_ns(n1, guest_id)
        for _ in range(12):
            ctl.step()
            time.sleep(0.5)
        wall = time.monotonic() - t0
        h_cpu, g_cpu = (cpu_ns(n1, host) - h0) / 1e9 / wall, (cpu_ns(n1, guest_id) - g0) / 1e9 / wall
    finally:
        cl.set_cpu_weight(state, before)
    load = os.getloadavg()[0]
    print(f"measured over {wall:.1f} s: host {h_cpu:.3f} CPU (quota 0.8), guest {g_cpu:.3f} CPU "
          f"(quota 0.2); load average {load:.1f}")
    # A cap is a cap, whatever else the machine runs. The host is served first (its guest
    # yields a core both want): it gets its quota, or nearly all the node got when the machine
    # starves the node below the two quotas; the guest runs on the rest, up to its quota
    # (22.05 at a load of 10: host 0.799, guest 0.188; 26.05 at 11: 0.800 and 0.112).
    assert 0 < h_cpu <= 0.8 * 1.15 and 0 < g_cpu <= 0.2 * 1.25
    assert h_cpu + g_cpu >= 0.5, "the node was starved even at a dedicated node's weight"
    # Served first: the host gets what the node got up to its quota, or, when something
    # outside the node held both back (one CI run, 26.05 at load 3: host 0.707 of 0.8,
    # guest 0.177 of 0.2, the node under its 1 CPU), at least as large a part of its quota
    # as the guest of its own. A guest served before its host shows as the guest near its
    # quota and the host far below its own.
    assert h_cpu >= 0.9 * min(0.8, h_cpu + g_cpu) or h_cpu / 0.8 >= 0.9 * (g_cpu / 0.2), \
        "the host was not served first"
    assert g_cpu / (h_cpu + g_cpu) <= 0.3                 # quota share 0.2
    # the guest leaves (its owner cancels it): the host gets all its cores back, and the
    # default weight
    slurm.run("scancel", guest_id)
    step_until(ctl, lambda: kernel_quota_us(b, n1, host) == 100_000, 30, "the host's full quota")
    view = b.agents[n1].job(host)
    assert view["role"] is None and (Path(view["cgroup"]) / "cpu.shares").read_text().strip() == "1024"
    (o,) = [o for o in b.history if o.job_id == guest_id]
    assert o.state == "cancelled" and "scancel" in o.reason


# -- the controller daemon: killed, restarted, slurmctld restarted ---------------------------------

def start_daemon(state, db, *extra):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    path = Path(state.dir) / "log" / f"cosched-run-{time.time():.3f}.log"
    print(f"cosched run log: {path}")
    log = open(path, "ab")
    return subprocess.Popen([sys.executable, "-m", "coscheduler", "run", "--backend", "slurm",
                             "--slurm-dir", state.dir, "--db", str(db), "--interval", "0.5",
                             "--lease", "4", *extra], stdout=log, stderr=log, env=env,
                            start_new_session=True)


def agent_view(b, node, jid):
    try:
        return b.agents[node].job(jid)
    except Exception:  # noqa: BLE001
        return {}


def test_controller_killed_and_restarted_loses_no_job_and_quotas_lapse_within_a_lease(state, slurm, tmp_path):
    b = backend_for_cluster(state)
    n1 = state.nodes[0]
    # Enough work that host and guest still run through the kill, the lease and the restart
    # on an idle machine too (3 CPU-s finished before the lease lapsed there).
    host, filler = submit(state, [busy_job("khost", 4, 20, walltime=300),
                                  busy_job("kfill", 4, 20, walltime=300)])
    (guest,) = submit(state, [busy_job("kguest", 2, 6, walltime=300)])
    db = tmp_path / "state.db"
    p = start_daemon(state, db, "--policy", "static")
    try:
        wait_until(lambda: agent_view(b, n1, guest).get("cpu_fraction") == 0.5, 40,
                   what="the static co-allocation")
        assert agent_view(b, n1, host)["cpu_fraction"] == 0.75
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        t_kill = time.monotonic()
        # fail-safe: within one lease (4 s) both get their full CPU back
        views = {}

        def lapsed():
            views.update({j: agent_view(b, n1, j) for j in (guest, host)})
            return all(v.get("cpu_fraction") == 1.0 for v in views.values())
        try:
            wait_until(lapsed, 8, 0.1, "the leases to lapse")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; agent views: {views}") from None
        lapsed_s = time.monotonic() - t_kill
        assert all(v["status"] == "running" for v in views.values()), views
        assert lapsed_s <= 4 + 1.5, lapsed_s
        assert "lease expired" in views[host]["quota_reason"]
        assert kernel_quota_us(b, n1, host) == 100_000 and kernel_quota_us(b, n1, guest) == 50_000
        # restart: it finds host and guest again (AdminComment) and re-applies the quotas
        p = start_daemon(state, db, "--policy", "static")
        wait_until(lambda: agent_view(b, n1, guest).get("cpu_fraction") == 0.5 or
                   job(slurm, guest)["JobState"] != "RUNNING", 20, what="the quotas to come back")
        ids = (host, filler, guest)
        wait_until(lambda: all(job(slurm, i)["JobState"] == "COMPLETED" for i in ids), 300,
                   what="every job to complete")
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=30) == 0


def test_sigterm_gives_quotas_back_and_hands_held_jobs_to_slurm(state, slurm, tmp_path):
    b = backend_for_cluster(state)
    n1 = state.nodes[0]
    host, filler = submit(state, [busy_job("thost", 4, 60), busy_job("tfill", 4, 60)])
    (guest,) = submit(state, [busy_job("tguest", 2, 60)])
    # a stage that waits for the host: held for the controller until the host ends
    (later,) = submit(state, [Job("tlater", 1, 60.0, "test/later",
                                  command=(sys.executable, BUSY, "1", "10"))])
    slurm.run("scontrol", "update", f"JobId={later}", f"Dependency=afterok:{host}")
    p = start_daemon(state, tmp_path / "state.db", "--policy", "static")
    try:
        wait_until(lambda: agent_view(b, n1, guest).get("cpu_fraction") == 0.5, 40,
                   what="the static co-allocation")
        assert job(slurm, later)["Priority"] == "0"           # held, waiting for the host
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
        for f in sorted((Path(state.dir) / "log").glob("cosched-run-*.log"))[-1:]:
            print(f.read_text()[-3000:])
    # every quota given back, on the agents and in the kernel
    assert agent_view(b, n1, guest)["cpu_fraction"] == 1.0
    assert agent_view(b, n1, host)["cpu_fraction"] == 1.0
    assert kernel_quota_us(b, n1, host) == 100_000 and kernel_quota_us(b, n1, guest) == 50_000
    assert "quota=1.0000" in job(slurm, guest)["AdminComment"]
    # the held job now belongs to Slurm's own scheduling, unshared
    j = job(slurm, later)
    assert j["Priority"] != "0" and j["OverSubscribe"] == "NO", j


def test_controller_survives_a_slurmctld_restart(state, slurm, tmp_path):
    from coscheduler.daemon import ControllerDaemon
    import threading

    b = backend_for_cluster(state)
    first, second = submit(state, [
        Job("chain-a", 1, 120.0, "test/chain", command=(sys.executable, BUSY, "10", "400000")),
        Job("chain-b", 1, 120.0, "test/chain", depends_on=("chain-a",),
            command=(sys.executable, BUSY, "10", "400000"))])
    d = ControllerDaemon(b, MemoryRecorder(), "static", interval_s=0.5, release_on_exit=False,
                         keep_reports=1000)
    t = threading.Thread(target=d.run, daemon=True)
    t.start()
    try:
        wait_until(lambda: job(slurm, first)["JobState"] == "RUNNING", 30, what="the first stage")
        passes = d.stats.passes
        # Down for longer than the command runner's retries (0.2 + 0.6 + 1.8 s) last.
        cl.restart_daemon(state, "slurmctld", down_s=6.0)
        after_restart = d.stats.passes
        wait_until(lambda: all(job(slurm, i)["JobState"] == "COMPLETED" for i in (first, second)), 90,
                   what="both stages to complete after the restart")
        wait_until(lambda: {o.job_id for o in b.history} >= {first, second}, 10, what="outcomes")
        assert {o.job_id: o.state for o in b.history if o.job_id in (first, second)} == \
               {first: "completed", second: "completed"}
        # each outcome carries the job's mean CPU use, from the job wrapper's record
        for o in b.history:
            if o.job_id in (first, second):
                assert o.cpu_percent is not None and 0 < o.cpu_percent <= 100, o
        # It saw slurmctld gone (Slurm's clients wait for it up to their timeout; a pass
        # either waited through the outage or reported an error), and carried on.
        longest = max(r.duration_s for r in d.stats.reports)
        print(f"longest pass {longest:.1f} s, {d.stats.errors} errors, {d.stats.passes} passes")
        assert longest >= 3.0 or d.stats.errors >= 1
        # and kept stepping after it: a count of passes, waited for (a pass takes seconds in a
        # loaded container; a CI run on 26.05 saw 4 passes in all by the time both stages ended)
        # (counted from after the restart: a pass blocked on the outage ends after it, so
        # ``after_restart`` may still equal ``passes``; asserting "> passes + 3" failed once
        # with exactly passes + 3 when it did)
        wait_until(lambda: d.stats.passes >= after_restart + 3, 60, what="passes after the restart")
        assert after_restart >= passes and t.is_alive()
    finally:
        d.stop()
        t.join(30)


# -- gang placement across nodes, followed by both agents ---------------------------------------------

def test_two_node_gang_started_together_and_followed_on_both_nodes(state, slurm):
    b = backend_for_cluster(state, lease_s=30)
    burn = "import time\nt = time.time() + 12\nwhile time.time() < t: pass\n"
    gang = Job("gang", 8, 120.0, "test/gang", nodes=2,
               command=("srun", "-N2", "-n2", sys.executable, "-c", burn))
    (gid,) = submit(state, [gang])
    ctl = Controller(b, recorder=MemoryRecorder())
    rj = step_until(ctl, lambda: next((r for r in b.running() if r.job_id == gid), None), 30, "the gang")
    assert rj.allocation.cores_by_node == ((state.nodes[0], 4), (state.nodes[1], 4))
    wait_until(lambda: job(slurm, gid)["JobState"] == "RUNNING", 20, what="the gang to run")
    # srun's processes on each node (started after the batch script) found by that node's
    # agent, with the job's 4 cores there. The controller keeps stepping, as it does for
    # real: the backend registers a job again wherever an agent's cores differ from its
    # allocation, at each metrics read. (Seen once in CI, 2026-11-29: an agent's view held
    # 1.0 core. The likely cause, not reproduced: the agent discovered the job while its
    # cgroup held only slurmstepd, whose environment has no CPU count, and kept the guess
    # of 1; it now reads the cores again until it can, tests/test_agent_v2.py.)
    for node in state.nodes:
        def followed(node=node):
            ctl.step()
            v = agent_view(b, node, gid)
            return v if v.get("pids") and v.get("cpu_percent") and v.get("cores") == 4.0 else None
        v = wait_until(followed, 15, what=f"the agent of {node} to follow the gang on 4 cores")
        assert v["status"] == "running"
    b.set_quota(gid, 0.5)
    for node in state.nodes:
        assert kernel_quota_us(b, node, gid) == 50_000     # 0.5 x 4 x 0.25 CPU on each node
    assert "quota=0.5000" in job(slurm, gid)["AdminComment"]
    b.set_quota(gid, 1.0)


def test_a_job_name_written_as_scontrol_fields_changes_nothing_the_backend_reads(state, slurm):
    """``scontrol show job -o -d`` prints a job's name as typed. Read first-key-wins from
    it (the per-node layout's source on 22.05 until 2026-11-28), a user's name made their
    2-CPU job a 1-CPU one holding 4 more CPUs on the first node. The backend now reads the
    layout from the JSON and uses a layout only if it is the job's own."""
    n1, n2 = state.nodes
    forged = f"x Nodes={n1} CPU_IDs=0-3 NumCPUs=1 AdminComment=cosched:v=1;quota=0.1"
    rc, jid, err = sbatch(state, "-p", "cosched", "-N", "2", "-n", "3", "-t", "5", "-J", forged,
                          user="nobody")
    assert rc == 0, err
    slurm.run("scontrol", "release", jid)     # (the submit hook holds it for the controller)
    wait_until(lambda: job(slurm, jid)["JobState"] == "RUNNING", 20, what="the job to run")
    b = backend_for_cluster(state, lease_s=30)
    rj = next(r for r in b.running() if r.job_id == jid)
    assert rj.job.cores == 3 and rj.quota_fraction == 1.0
    # 3 tasks on 2 nodes: 2 CPUs on one, 1 on the other (the forged read: n1 4 + 1, n2 1)
    assert sorted(n for n, _ in rj.allocation.cores_by_node) == [n1, n2]
    assert sorted(c for _, c in rj.allocation.cores_by_node) == [1, 2]
    with pytest.raises(ParseError, match=f"job {jid}'s line does not begin"):
        parse_scontrol_jobs(slurm.run("scontrol", "show", "job", "-o", "-d", jid))


def test_agent_discovers_a_job_it_was_never_told_about(state, slurm):
    """--discover-slurm on real slurmd: only the agent of the job's node registers it, with
    the cores Slurm gave it, and follows a process the job starts later."""
    b = backend_for_cluster(state)
    n1, n2 = state.nodes
    script = ("#!/bin/sh\n"
              f"{sys.executable} -c 'import time; time.sleep(2)'\n"
              f"{sys.executable} -c 'import time; t=time.time()+6\nwhile time.time()<t: pass' &\n"
              "wait\n")
    rc, jid, err = sbatch(state, f"-p{state.default_partition}", "-t2", f"-w{n1}", "-c3",
                          script=script)
    assert rc == 0, err

    def followed_both_processes():
        v = agent_view(b, n1, jid)
        # A job the agent has registered but not sampled yet reports nprocs None.
        return v if (v.get("nprocs") or 0) >= 2 and v.get("cpu_percent") else None

    v = wait_until(followed_both_processes, 20, what="the late child to be followed")
    assert v["source"] == "slurm" and v["cores"] == 3.0
    assert agent_view(b, n2, jid) == {}
    assert any("followed new process" in e["event"] or "discovered" in e["event"] for e in v["events"])


# -- faults ---------------------------------------------------------------------------------------

def test_node_down_under_a_host_and_its_guest(state, slurm):
    """An admin sets the node of a host and its guest DOWN. Slurm 22.05 kills what it kills
    (seen here: the host, NODE_FAIL; the oversubscribed guest kept running, and the node
    came straight back, ReturnToService=2): every job that ended is reported failed with
    the reason, its decision is not learned from, the controller carries on, and a job that
    survives its partner holds no quota any more."""
    from coscheduler.policies.coalloc import Static

    b = backend_for_cluster(state, lease_s=30)
    submit(state, [busy_job("dhost", 4, 60), busy_job("dfill", 4, 60)])
    (guest,) = submit(state, [busy_job("dguest", 2, 60)])
    rec = MemoryRecorder()
    ctl = Controller(b, Static(0.5), rec)
    step_until(ctl, lambda: any(r.job_id == guest and r.host_job for r in b.running()), 40,
               "the co-allocation")
    (g,) = [r for r in b.running() if r.job_id == guest]
    host, node = g.host_job, g.allocation.nodes[0]
    slurm.run("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=test")
    ended = step_until(ctl, lambda: {o.job_id: o for o in b.history if o.job_id in (guest, host)},
                       30, "a job on the node to end")
    for jid, o in ended.items():
        assert o.state == "failed" and f"{node} went down" in o.reason, o
    for _ in range(4):
        ctl.step()
        time.sleep(0.5)
    for jid in {guest, host} - set(ended):
        # it survived the node's DOWN and its partner: full quota, on the kernel too
        assert job(slurm, jid)["JobState"] == "RUNNING"
        cores = 2 if jid == guest else 4
        assert agent_view(b, node, jid)["cpu_fraction"] == 1.0
        assert kernel_quota_us(b, node, jid) == cores * 25_000
    for jid in ended:
        assert agent_view(b, node, jid).get("status") in (None, "finished", "released")
    assert ctl.step().errors == []                          # it carries on


def test_slurm_command_failures_are_named_and_retried(state, slurm):
    b = backend_for_cluster(state)
    with pytest.raises(BackendError, match="not a running co-scheduled job"):
        b.set_quota("99999", 0.5)
    ctld = state.daemon("slurmctld")
    quick = SlurmCommands(state.slurm_conf, timeout_s=1.0, retries=1, backoff_s=0.1)
    os.kill(ctld.pid, signal.SIGSTOP)
    try:
        with pytest.raises(SlurmCommandError) as err:
            quick.run("squeue", "--json")
        assert "`squeue --json`" in str(err.value) and "timed out after 1 s" in str(err.value)
        assert quick.calls == 2
        ctl = Controller(b, recorder=MemoryRecorder())
        b.source.cmd.timeout_s, b.source.cmd.retries = 1.0, 0
        rep = ctl.step()                                     # no crash: the error is reported
        assert rep.errors and "squeue" in " ".join(rep.errors)
    finally:
        os.kill(ctld.pid, signal.SIGCONT)
    assert "UP" in slurm.run("scontrol", "ping")


# -- the command line --------------------------------------------------------------------------------

def test_workload_submit_chains_stages_and_opts_in(state, slurm):
    from click.testing import CliRunner

    from coscheduler.cli import main

    res = CliRunner().invoke(main, ["workload", "submit", "blast", "--cores", "2", "--cosched",
                                    "--dir", state.dir, "--json", "--tag", "blast-t1"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["workflow"] == "blast-t1" and out["cosched"] is True
    assert [j["stage"] for j in out["jobs"]] == ["blastall", "cat_blast"]
    a, c = (str(j["slurm_job_id"]) for j in out["jobs"])
    ja, jc = job(slurm, a), job(slurm, c)
    assert ja["Priority"] == "0" and ja["Partition"] == state.partition
    assert jc["Dependency"] == f"afterok:{a}(unfulfilled)"
    assert ja["Comment"].startswith("cosched:class=blast/blastall,type=parallel,tasks=121")
    res = CliRunner().invoke(main, ["workload", "submit", "nosuch", "--cores", "2", "--dir", state.dir])
    assert res.exit_code != 0 and "unknown workflow 'nosuch'" in res.output


def test_status_and_a_second_cluster_side_by_side(state):
    s = cl.status(state.dir)
    assert s["running"] and set(s["nodes"]) == set(state.nodes), s
    assert all(a["healthy"] for a in s["agents"].values())
    tmp = Path(state.dir) / "other-cluster"
    other = cl.up(tmp, nodes=1, cpus=2, say=lambda m: None)
    try:
        assert other.name != state.name and not set(other.nodes) & set(state.nodes)
        assert other.controller_port != state.controller_port
        assert "UP" in other.commands().run("scontrol", "ping")
        again = cl.up(tmp, nodes=1, cpus=2, say=lambda m: None)   # already runs
        assert [d.pid for d in again.daemons] == [d.pid for d in other.daemons]
    finally:
        first = cl.down(tmp, say=lambda m: None)
        second = cl.down(tmp, say=lambda m: None)
    assert len(first["stopped"]) == 4 and not first["cgroups_left"]
    assert second["already_stopped"] and not second["stopped"]
    s = cl.status(state.dir)
    assert s["running"], s                                  # the first one is untouched
    # Up again in the same folder after down: before, slurmctld refused ("CLUSTER NAME
    # MISMATCH": the name was made from a new port) and up failed after 60 s.
    with pytest.raises(cl.ClusterError, match=f"holds the state of Slurm cluster '{other.name}'"):
        cl.up(tmp, nodes=1, cpus=2, name="someoneelse", say=lambda m: None)
    t0 = time.monotonic()
    third = cl.up(tmp, nodes=1, cpus=2, say=lambda m: None)
    try:
        assert third.name == other.name and time.monotonic() - t0 < 30
        assert "UP" in third.commands().run("scontrol", "ping")
    finally:
        cl.down(tmp, say=lambda m: None)


# -- walltime credit ------------------------------------------------------------------------------

def test_a_host_slowed_past_its_time_limit_by_its_guest_still_completes(state, slurm):
    """A 4-core host with a 1-minute Slurm time limit and 75 CPU seconds of work on its
    emulated node's 1 CPU; Static lends part of its quota to a guest, so it runs past the
    minute and Slurm would kill it (TIMEOUT). The backend sees the projected end in its
    progress and adds the missing minutes (scontrol update TimeLimit=+M): the host runs
    past its original limit and completes."""
    from coscheduler.policies.coalloc import Static

    b = backend_for_cluster(state, lease_s=30)
    # Both nodes idle first: a node resumed after an earlier test may take a while to come
    # back, and then neither host could start (a CI run saw nothing running after 40 s).
    wait_until(lambda: all(line.split()[1].rstrip("*~#$@+") == "idle"
                           for line in slurm.run("sinfo", "-h", "-N", "-o", "%N %t").splitlines()
                           if line.strip()), 90, 0.5, "both nodes to be idle")
    # two such hosts fill both nodes; the guest joins one of them, the other is cancelled.
    # 75 s of this machine's CPU: past the 1-minute limit even at the node's whole CPU (a
    # probe that reads 20 % slow still leaves a minute of work), 100 s at the host's share
    # (quota 0.75 of 1 CPU, beside the guest), well within the wait below even so.
    loops = measured_loops_per_cpu_s()
    hosts = submit(state, [busy_job("whost", 4, 75, walltime=60, tasks=60, loops_per_cpu_s=loops),
                           busy_job("whost2", 4, 75, walltime=60, tasks=60, loops_per_cpu_s=loops)])
    (guest,) = submit(state, [busy_job("wguest", 2, 120, walltime=300, cls="test/guest")])
    ctl = Controller(b, Static(0.5), MemoryRecorder())
    # The guest joins at the default CPU weight: while both hosts run, the nodes' quotas add
    # up to the whole machine (2 x 1 CPU), and at a dedicated node's weight slurmd, the
    # agents and this controller starved (CI, 22.05/24.11/26.05: a slurmd ping took 63 s,
    # squeue timed out, no host had metrics, so no guest joined and both hosts hit their limit).
    g = step_until(ctl, lambda: next((r for r in b.running() if r.job_id == guest and r.host_job),
                                     None), 90, "the guest to be co-allocated")
    host = g.host_job
    slurm.run("scancel", *[h for h in hosts if h != host])
    # the host lends: 0.75 x 4 cores x 0.25 CPU x 100 ms in the kernel (a host that ran at
    # its whole node's CPU would not show what the credit is for)
    node = g.allocation.nodes[0]
    step_until(ctl, lambda: kernel_quota_us(b, node, host) == 75_000, 20,
               "the host's lending quota in the kernel")
    before = cl.set_cpu_weight(state, 262144)    # one node's quota now: 1 CPU of the 2
    try:
        step_until(ctl, lambda: job(slurm, host)["JobState"] not in ("RUNNING", "COMPLETING"),
                   240, "the host to end")
    finally:
        cl.set_cpu_weight(state, before)
    info = job(slurm, host)
    credits = [c for c in b.credits if c.job_id == host]
    print(f"host {host}: {info['JobState']} after {info['RunTime']}, time limit {info['TimeLimit']}, "
          f"{loops / 1e6:.1f}M loops per CPU second, "
          f"credits {[(c.minutes, round(c.projected_end - c.time)) for c in credits]}; "
          f"load average {os.getloadavg()[0]:.1f}")
    assert credits and credits[0].limit_s == 60.0 and info["TimeLimit"] != "00:01:00"
    assert info["JobState"] == "COMPLETED"
    h, m, sec = (int(x) for x in info["RunTime"].split(":"))
    assert h * 3600 + m * 60 + sec > 60, "the host did not run past its original limit"
