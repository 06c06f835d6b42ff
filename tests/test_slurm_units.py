"""The Slurm parts that need no daemon: configuration texts, the command runner, the
priority ranking, the pyslurm translation, and the backend's reading of recorded real
cluster states (tests/fixtures/slurm: Slurm 22.05 and 24.11)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
import time
from types import SimpleNamespace

import pytest

from conftest import FIXTURES
from coscheduler.backend import BackendError
from coscheduler.model import Allocation, InvalidInput, Job
from coscheduler.policies.queue import get_policy
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import SlurmCommandError, SlurmCommands
from slurm_plugin.conf import (ClusterConfig, NodeConfig, render_cgroup_conf, render_job_submit,
                               render_slurm_conf)
from slurm_plugin.parse import (SlurmJob, parse_jobs_json, parse_nodes_json)
from slurm_plugin.priority import eligible, rank_jobs
from slurm_plugin.pyslurm_source import (_dependency_text, job_from_pyslurm, node_from_pyslurm,
                                         pyslurm_unavailable)
from slurm_plugin.source import CommandLineSource, make_source

SLURM = FIXTURES / "slurm"


# -- configuration ---------------------------------------------------------------------------

def config(**kw):
    base = dict(cluster_name="c123", controller_host="localhost", controller_port=20000,
                nodes=(NodeConfig("c123n1", 4, 20001), NodeConfig("c123n2", 4, 20002)),
                state_dir="/d/state", spool_dir="/d/spool", log_dir="/d/log", run_dir="/d/run",
                jobcomp_file="/d/log/jobcomp.txt", munge_socket="/d/munge/munge.socket")
    base.update(kw)
    return ClusterConfig(**base)


def test_slurm_conf_has_what_co_scheduling_needs():
    text = render_slurm_conf(config())
    lines = set(text.splitlines())
    for needed in ("SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
                   "JobSubmitPlugins=lua", "ProctrackType=proctrack/cgroup",
                   "TaskPlugin=task/cgroup", "JobAcctGatherType=jobacct_gather/cgroup",
                   "JobCompType=jobcomp/filetxt", "JobCompLoc=/d/log/jobcomp.txt",
                   "AuthInfo=socket=/d/munge/munge.socket", "SlurmctldPort=20000",
                   "SlurmdSpoolDir=/d/spool/%n", "SlurmdParameters=config_overrides"):
        assert needed in lines, needed
    assert "NodeName=c123n1 NodeHostname=localhost Port=20001 CPUs=4 RealMemory=1000 State=UNKNOWN" in lines
    assert "PartitionName=batch Nodes=c123n1,c123n2 Default=YES MaxTime=INFINITE State=UP" in lines
    assert "PartitionName=cosched Nodes=c123n1,c123n2 OverSubscribe=YES:4 MaxTime=INFINITE State=UP" in lines


def test_conf_for_containers_one_node_per_host():
    """What the Docker testbed renders: one slurmd per container, no cgroup plugins."""
    c = config(controller_host="ctl", nodes=(NodeConfig("n1", 8, 6818, hostname="node1"),
                                             NodeConfig("n2", 8, 6818, hostname="node2")),
               munge_socket=None, proctrack="proctrack/linuxproc", task_plugin="task/none",
               jobacct_gather="jobacct_gather/none")
    text = render_slurm_conf(c)
    assert "NodeName=n2 NodeHostname=node2 Port=6818 CPUs=8" in text
    assert "AuthInfo" not in text and "ProctrackType=proctrack/linuxproc" in text
    assert "ConstrainCores=no" in render_cgroup_conf(c)


@pytest.mark.parametrize("kw, match", [
    ({"cluster_name": "Bad Name"}, "cluster name"),
    ({"nodes": ()}, "at least one node"),
    ({"nodes": (NodeConfig("a", 1, 20001), NodeConfig("a", 1, 20002))}, "repeat"),
    ({"nodes": (NodeConfig("a", 1, 20001), NodeConfig("b", 1, 20001))}, "own port"),
    ({"nodes": (NodeConfig("a", 1, 20000),)}, "own port"),
    ({"state_dir": "relative/path"}, "absolute path"),
    ({"munge_socket": "/" + "x" * 120}, "Unix sockets"),
    ({"partition": "batch"}, "must differ"),
    ({"oversubscribe": 1}, "oversubscribe"),
])
def test_bad_cluster_descriptions_are_refused(kw, match):
    with pytest.raises(InvalidInput, match=match):
        config(**kw)


@pytest.mark.parametrize("kw, match", [
    ({"name": "n 1", "cpus": 1, "port": 1}, "node name"),
    ({"name": "n1", "cpus": 0, "port": 1}, "cpus"),
    ({"name": "n1", "cpus": 1, "port": 70000}, "port"),
    ({"name": "n1", "cpus": 1, "port": 1, "hostname": "a b"}, "hostname"),
])
def test_bad_nodes_are_refused(kw, match):
    with pytest.raises(InvalidInput, match=match):
        NodeConfig(**kw)


def test_job_submit_lua_gets_the_site_settings():
    text = render_job_submit("cs", (0, 64030))
    assert 'local COSCHED_PARTITION = "cs"' in text
    assert "local ADMIN_UIDS = { [0] = true, [64030] = true }" in text
    with pytest.raises(InvalidInput, match="partition"):
        render_job_submit("bad name")
    with pytest.raises(InvalidInput, match="template"):
        render_job_submit("cs", (0,), template="-- nothing here")


# -- the command runner ----------------------------------------------------------------------

def fake_bin(tmp_path, name, body):
    """A stand-in client program (a real executable): the runner's behaviour on failing,
    slow and odd programs is what is tested here; the real clients run in test_slurm_live."""
    p = tmp_path / name
    p.write_text(f"#!{sys.executable}\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def test_runner_retries_an_unreachable_controller_then_names_the_command(tmp_path):
    d = fake_bin(tmp_path, "squeue", "import sys\nsys.stderr.write('slurm_load_jobs error: Unable to "
                 "contact slurm controller (connect failure)\\n')\nsys.exit(1)")
    waits = []
    cmds = SlurmCommands(bin_dir=str(d), retries=2, backoff_s=0.1, sleep=waits.append)
    with pytest.raises(SlurmCommandError) as err:
        cmds.run("squeue", "--json")
    assert waits == [0.1, pytest.approx(0.3)]          # backoff 0.1, 0.3
    assert cmds.calls == 3
    msg = str(err.value)
    assert "`squeue --json`" in msg and "exit status 1" in msg and "Unable to contact" in msg
    assert err.value.transient and isinstance(err.value, BackendError)


def test_runner_does_not_retry_a_final_answer(tmp_path):
    d = fake_bin(tmp_path, "scontrol", "import sys\nsys.stderr.write('slurm_update error: Invalid job "
                 "id specified\\n')\nsys.exit(1)")
    cmds = SlurmCommands(bin_dir=str(d), retries=3, sleep=lambda s: None)
    with pytest.raises(SlurmCommandError, match="Invalid job id"):
        cmds.run("scontrol", "update", "JobId=99999", "Priority=5")
    assert cmds.calls == 1


def test_runner_times_out_a_hanging_command(tmp_path):
    d = fake_bin(tmp_path, "sinfo", "import time\ntime.sleep(30)")
    cmds = SlurmCommands(bin_dir=str(d), timeout_s=0.5, retries=1, sleep=lambda s: None)
    t0 = time.monotonic()
    with pytest.raises(SlurmCommandError, match="timed out after 0.5 s"):
        cmds.run("sinfo", "--json")
    assert time.monotonic() - t0 < 5 and cmds.calls == 2


def test_runner_names_a_missing_program(tmp_path):
    with pytest.raises(SlurmCommandError, match="not installed"):
        SlurmCommands(bin_dir=str(tmp_path)).run("squeue")


def test_source_reads_scontrol_text_on_a_release_without_json(tmp_path):
    text = (SLURM / "22.05" / "scontrol_show_job.txt").read_text()
    fake_bin(tmp_path, "squeue",
             "import sys\nsys.stderr.write(\"squeue: unrecognized option '--json'\\n\")\nsys.exit(1)")
    (tmp_path / "jobs.txt").write_text(text)
    fake_bin(tmp_path, "scontrol", "import sys\nif sys.argv[1:] == ['--version']: print('slurm 20.11.9')\n"
             f"else: sys.stdout.write(open({str(tmp_path / 'jobs.txt')!r}).read())")
    cmds = SlurmCommands(bin_dir=str(tmp_path), sleep=lambda s: None)
    jobs = CommandLineSource(cmds).jobs()
    assert len(jobs) == 10 and cmds.calls == 2      # scontrol --version, scontrol show job


# -- priority ranking --------------------------------------------------------------------------

def test_rank_jobs_uses_the_queue_policies_key_functions():
    now = 10_000.0
    jobs = [SlurmJob(1, state="PENDING", priority=5, submit_time=100.0, cpus=8, time_limit_s=3600),
            SlurmJob(2, state="PENDING", priority=5, submit_time=200.0, cpus=1, time_limit_s=60),
            SlurmJob(3, state="PENDING", priority=5, submit_time=300.0, cpus=2, time_limit_s=600),
            SlurmJob(4, state="PENDING", priority=0, submit_time=50.0, cpus=1, time_limit_s=60),
            SlurmJob(5, state="RUNNING", priority=5, submit_time=50.0, cpus=1, time_limit_s=60)]
    pend = eligible(jobs)
    assert [j.job_id for j in pend] == [1, 2, 3]        # held and running jobs are not touched
    assert [r.job_id for r in rank_jobs(pend, get_policy("FCFS"), now)] == [1, 2, 3]
    sjf = rank_jobs(pend, get_policy("SJF"), now, base=100)
    assert [(r.job_id, r.priority) for r in sjf] == [(2, 103), (3, 102), (1, 101)]
    # The same order the simulator's order_queue gives for these jobs.
    from coscheduler.policies.queue import order_queue
    for name in ("FCFS", "SJF", "WFP3", "UNICEP", "F1"):
        pol = get_policy(name)
        rows = [(j.submit_time, j.cpus, j.time_limit_s) for j in pend]
        expect = [pend[i].job_id for i in order_queue(pol, now, rows)]
        assert [r.job_id for r in rank_jobs(pend, pol, now)] == expect, name


def test_a_learned_scorer_plugs_in_like_a_policy():
    scorer = SimpleNamespace(key=lambda now, submit, procs, est: -procs)   # widest first
    jobs = [SlurmJob(i, state="PENDING", priority=1, submit_time=i, cpus=c, time_limit_s=60)
            for i, c in ((1, 1), (2, 4), (3, 2))]
    assert [r.job_id for r in rank_jobs(jobs, scorer, 10.0)] == [2, 3, 1]
    with pytest.raises(InvalidInput):
        rank_jobs(jobs, scorer, 10.0, base=0)


# -- pyslurm ---------------------------------------------------------------------------------

def test_pyslurm_is_not_used_when_it_cannot_import(tmp_path):
    assert "import pyslurm failed" in (pyslurm_unavailable() or "import pyslurm failed")
    if pyslurm_unavailable() is not None:
        assert isinstance(make_source(SlurmCommands(), "auto"), CommandLineSource)
        with pytest.raises(SlurmCommandError, match="pyslurm cannot be used"):
            make_source(SlurmCommands(), "pyslurm")


def test_pyslurm_records_translate_like_the_command_line():
    """Objects with pyslurm 25.11's documented attribute names (pyslurm.Job, pyslurm.Node)."""
    layout = {"rn2": {"cpu_ids": "0-1", "memory": 0}, "rn3": {"cpu_ids": "0,1", "memory": 0}}
    job = SimpleNamespace(
        id=4, name="gang", user_name="root", partition="batch", state="RUNNING",
        state_reason="None", priority=1, allocated_nodes="rn[2-3]", num_nodes=2, max_nodes=2,
        cpus=4, time_limit=5, submit_time=1795447145, eligible_time=1795447145,
        start_time=1795447145, end_time=1795447445, comment="", admin_comment="",
        dependencies=None, resource_sharing="OK", required_nodes="rn[2-3]", exit_code=0,
        exit_code_signal=0, requeue_count=0, batch_host="rn2",
        get_resource_layout_per_node=lambda: layout)
    j = job_from_pyslurm(job)
    (cli,) = [x for x in parse_jobs_json((SLURM / "24.11" / "squeue.json").read_text()) if x.name == "gang"]
    for f in ("job_id", "state", "nodes", "cpus", "time_limit_s", "cpus_by_node", "partition"):
        assert getattr(j, f) == getattr(cli, f), f
    held = SimpleNamespace(id=8, state="PENDING", state_reason="JobHeldUser", priority=0,
                           dependencies={"afterok": ["7(unfulfilled)"], "singleton": False,
                                         "satisfy": "all"}, time_limit=2, cpus=1)
    h = job_from_pyslurm(held)
    assert h.held and h.dependency == "afterok:7(unfulfilled)"
    assert _dependency_text({"afterany": [3], "afterok": [4], "satisfy": "any"}) == "afterany:3?afterok:4"
    node = node_from_pyslurm(SimpleNamespace(name="rn1", total_cpus=4, state="MIXED+PLANNED",
                                             partitions=["batch", "cosched"], allocated_cpus=1))
    assert (node.name, node.cpus, node.state, node.flags, node.usable) == ("rn1", 4, "MIXED", ("PLANNED",), True)


# -- the backend on recorded cluster states --------------------------------------------------

class RecordedCluster:
    """A SlurmSource that answers with a recorded real squeue/sinfo and keeps the writes the
    backend makes (what would go to scontrol), so the translation can be checked exactly."""

    name = "recorded"

    def __init__(self, version: str):
        d = SLURM / version
        self.jobs_list = parse_jobs_json((d / "squeue.json").read_text())
        node_file = d / ("sinfo.json" if version == "22.05" else "scontrol_show_node.json")
        self.nodes_list = parse_nodes_json(node_file.read_text())
        self.writes: list[tuple] = []

    def jobs(self):
        return list(self.jobs_list)

    def nodes(self):
        return list(self.nodes_list)

    def layout(self, job_id):
        return None

    def update(self, job_id, **fields):
        self.writes.append(("update", job_id, fields))

    def release(self, job_id):
        self.writes.append(("release", job_id))

    def hold(self, job_id):
        self.writes.append(("hold", job_id))

    def cancel(self, job_id):
        self.writes.append(("cancel", job_id))


@pytest.mark.parametrize("version", ("22.05", "24.11", "26.05"))
def test_backend_reads_a_recorded_cluster(version, tmp_path):
    src = RecordedCluster(version)
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "state.json")
    # queue: the held job (7); 8 waits on 7; depfailed (9) is in batch: not ours
    assert [j.job_id for j in b.queued()] == ["7"]
    (q,) = b.queued()
    assert (q.cores, q.nodes, q.walltime_s, q.job_class, q.stage_type.value) == \
           (2, 1, 180.0, "demo/held", "parallel")
    run = {r.job_id: r for r in b.running()}
    assert set(run) == {"4", "5", "6", "unavailable.rn2", "unavailable.rn3"}
    host, guest, gang = run["5"], run["6"], run["4"]
    assert (host.quota_fraction, host.guest_jobs, host.lendable) == (0.6, ("6",), True)
    assert (guest.host_job, guest.quota_fraction) == ("5", 0.4)
    # the batch job on rn2-rn3 did not opt in and does not share cores: it never hosts,
    # and Slurm places no sharing job on its nodes: their other cores are held by
    # placeholders (the nodes stay in nodes(), so no job is given up as too big)
    assert gang.lendable is False and gang.allocation.nodes == ("rn2", "rn3")
    assert [n.name for n in b.nodes()] == ["rn1", "rn2", "rn3"]
    for node in ("rn2", "rn3"):
        p = run[f"unavailable.{node}"]
        assert p.allocation.cores_by_node == ((node, 2),) and not p.lendable
    from coscheduler.controller.placement import free_cores
    assert free_cores({n.name: n.cores for n in b.nodes()}, b.running(), run) == \
        {"rn1": 1, "rn2": 0, "rn3": 0}      # rn1: the host holds 3, its guest shares them
    # terminal jobs of the partition: none (all finished ones ran in batch)
    assert b.drain_finished() == []


@pytest.mark.parametrize("told, read", [
    ((("rn2", 4), ("rn2", 1), ("rn3", 1)), (("rn2", 2), ("rn3", 2))),  # forged: the even split
    ((("rn2", 1), ("rn3", 1)), (("rn2", 2), ("rn3", 2))),              # too few CPUs
    ((("rn2", 3), ("rn9", 1)), (("rn2", 2), ("rn3", 2))),              # a node it does not hold
    ((("rn3", 1), ("rn2", 3)), (("rn3", 1), ("rn2", 3))),              # its own: taken
])
def test_a_layout_that_is_not_the_jobs_own_is_not_used(tmp_path, told, read):
    """Where the JSON gives no per-node layout, the backend asks ``scontrol show job -o
    -d``, which prints a job's name as typed: a user could write the layout there. A
    layout is used only if it names the job's nodes, each once, and adds up to its CPUs."""
    src = RecordedCluster("22.05")
    src.jobs_list = [dataclasses.replace(j, cpus_by_node=None) if j.name == "gang" else j
                     for j in src.jobs_list]
    asked = []
    src.layout = lambda job_id: asked.append(job_id) or told
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "state.json")
    gang = {r.job_id: r for r in b.running()}["4"]
    assert gang.allocation.cores_by_node == read
    b._refresh(force=True)   # decided once: not asked (nor warned of) again every pass
    assert {r.job_id: r for r in b.running()}["4"].allocation.cores_by_node == read
    assert asked == [4]


def test_backend_refuses_what_it_cannot_do(tmp_path):
    src = RecordedCluster("22.05")
    b = SlurmBackend(src, partition="cosched")
    gang = Job("4", 4, 300.0, "x/y")
    with pytest.raises(BackendError, match="not a queued job"):
        b.start(gang, Allocation("4", (("rn1", 4),)), 1.0)
    (q,) = b.queued()
    with pytest.raises(BackendError, match="not in partition"):
        b.start(q, Allocation("7", (("nowhere", 2),)), 1.0)
    with pytest.raises(BackendError, match=r"\(0, 1\]"):
        b.start(q, Allocation("7", (("rn1", 2),)), 1.5)
    with pytest.raises(BackendError, match="not a running co-scheduled job"):
        b.start(q, Allocation("7", (("rn1", 2),)), 0.5, host_job="4")
    with pytest.raises(BackendError, match="not a Slurm job id"):
        b.set_quota("../etc", 0.5)
    with pytest.raises(BackendError, match="not a running co-scheduled job"):
        b.set_quota("99999", 0.5)
    assert src.writes == []                              # nothing was written for any of them
    b.start(q, Allocation("7", (("rn1", 2),)), 1.0)
    assert src.writes == [("update", 7, {"NodeList": "rn1", "AdminComment": "cosched:v=1;quota=1.0000"}),
                          ("release", 7)]


def test_a_pass_of_starts_and_quota_changes_reads_slurm_once_and_sees_its_own_writes(tmp_path):
    """A co-allocation is a quota change of the host and a start of the guest. Each used
    to force a new squeue and sinfo (the whole queue parsed again: two per co-allocation);
    the backend now keeps what it wrote in its snapshot, so a second change of the same
    host's quota in the pass is still compared with what was written, not with the read."""
    src = RecordedCluster("22.05")
    reads = []
    src.jobs = lambda: reads.append(1) or list(src.jobs_list)
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json")
    b.drain_finished()                      # a pass starts with a fresh read
    before = len(reads)
    b.set_quota("5", 0.5)
    (q,) = b.queued()
    b.start(q, Allocation("7", (("rn1", 2),)), 0.5, host_job="5")
    b.set_quota("5", 0.6)                   # back to what the read said: must be written
    b.set_quota("5", 0.6)                   # the same again: nothing to write
    assert len(reads) == before
    assert src.writes == [
        ("update", 5, {"AdminComment": "cosched:v=1;quota=0.5000"}),
        ("update", 7, {"NodeList": "rn1", "AdminComment": "cosched:v=1;quota=0.5000;host=5"}),
        ("release", 7),
        ("update", 5, {"AdminComment": "cosched:v=1;quota=0.6000"}),
    ]
    assert "7" not in [j.job_id for j in b.queued()]     # released: no longer ours to start
    assert {r.job_id: r for r in b.running()}["7"].host_job == "5"
    b.drain_finished()
    assert len(reads) == before + 1         # the next pass reads Slurm again


def test_a_start_reads_slurm_again_only_past_a_few_times_what_a_read_takes(tmp_path):
    """At a large site a read of Slurm takes seconds: a start or quota change re-reads it
    only when the snapshot is older than WRITE_AGE_READS x the last read (and refresh_s)."""
    from slurm_plugin.reading import WRITE_AGE_READS

    src = RecordedCluster("22.05")
    reads = []
    src.jobs = lambda: reads.append(1) or list(src.jobs_list)
    now = [1000.0]
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json",
                     clock=lambda: now[0])
    b.drain_finished()
    b.last_read_s = 2.0                     # as if reading took 2 s
    now[0] += 2.0 * WRITE_AGE_READS - 1.0
    b.set_quota("5", 0.5)
    assert len(reads) == 1                  # younger than four reads: used as it is
    now[0] += 2.0
    b.set_quota("5", 0.4)
    assert len(reads) == 2                  # older: read again
    b.last_read_s = 0.0                     # a small cluster: refresh_s (0.25 s) as before
    now[0] += 0.5
    b.set_quota("5", 0.3)
    assert len(reads) == 3


def test_backend_gives_up_on_a_job_whose_dependency_failed_and_reports_it_once(tmp_path):
    src = RecordedCluster("22.05")
    # make the batch job with the failed dependency one of ours
    src.jobs_list = [j if j.name != "depfailed" else SlurmJob(**{**j.__dict__, "partition": "cosched",
                                                                 "priority": 0, "comment": ""})
                     for j in src.jobs_list]
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json")
    assert "9" not in [j.job_id for j in b.queued()]
    assert ("cancel", 9) in src.writes
    (o,) = b.drain_finished()
    assert (o.job_id, o.state) == ("9", "failed") and "afterok:2(failed)" in o.reason
    assert b.drain_finished() == []


def test_backend_state_file_survives_restarts_and_corruption(tmp_path):
    src = RecordedCluster("24.11")
    src.jobs_list = [SlurmJob(**{**j.__dict__, "partition": "cosched"}) if j.name == "done-ok" else j
                     for j in src.jobs_list]
    state = tmp_path / "s.json"
    b = SlurmBackend(src, partition="cosched", state_file=state)
    assert [o.job_id for o in b.drain_finished()] == ["1"]
    b2 = SlurmBackend(src, partition="cosched", state_file=state)   # a restarted controller
    assert b2.drain_finished() == []                                # reported once, ever
    state.write_text("{not json")
    b3 = SlurmBackend(src, partition="cosched", state_file=state)
    assert list(tmp_path.glob("s.json.broken-*"))                   # set aside, said so
    assert [o.job_id for o in b3.drain_finished()] == ["1"]


# -- the command line without a cluster ----------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["run", "--backend", "slurm", "--interval", "0"], "'--interval': 0.0 is not in the range x>0.0"),
    (["run", "--backend", "slurm", "--interval", "2", "--lease", "5"], "must exceed 3 x --interval"),
    (["run", "--backend", "slurm", "--queue-policy", "NOPE"], "unknown queue policy 'NOPE'"),
    (["run", "--backend", "nosuch"], "Invalid value for '--backend'"),
    (["slurm", "priority", "--policy", "NOPE", "--once"], "unknown queue policy 'NOPE'"),
    (["slurm", "run-paper-small", "--policies", "fifo"], "unknown policy"),
    (["slurm", "run-paper-small", "--scale", "2"], "must lie in (0, 1]"),
])
def test_bad_command_lines_say_what_is_wrong(args, message, tmp_path):
    from click.testing import CliRunner

    from coscheduler.cli import main

    res = CliRunner().invoke(main, args + (["--db", str(tmp_path / "x.db")] if args[0] == "run" else []))
    assert res.exit_code != 0 and message in res.output, res.output


def test_run_without_a_cluster_names_the_folder(tmp_path):
    from click.testing import CliRunner

    from coscheduler.cli import main

    res = CliRunner().invoke(main, ["run", "--backend", "slurm", "--slurm-dir", str(tmp_path / "none"),
                                    "--db", str(tmp_path / "x.db")])
    assert res.exit_code == 1 and f"no cluster in {tmp_path / 'none'}" in res.output
    res = CliRunner().invoke(main, ["slurm", "status", "--dir", str(tmp_path / "none"), "--json"])
    assert res.exit_code == 0 and json_of(res.output)["exists"] is False
    res = CliRunner().invoke(main, ["slurm", "down", "--dir", str(tmp_path / "none"), "--json"])
    assert res.exit_code == 0 and json_of(res.output)["already_stopped"] is True
    res = CliRunner().invoke(main, ["workload", "submit", "blast", "--cores", "2",
                                    "--dir", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no running cluster" in res.output


def json_of(text):
    import json

    return json.loads(text)


def test_backend_registry():
    from coscheduler.backends.registry import backend_names, factory

    assert "slurm" in backend_names()
    with pytest.raises(InvalidInput, match="unknown backend 'x'"):
        factory("x")


def test_a_job_slurm_forgets_is_read_from_the_jobcomp_log_or_reported_vanished(tmp_path):
    src = RecordedCluster("24.11")
    jobcomp = tmp_path / "jobcomp.txt"
    jobcomp.write_text((SLURM / "24.11" / "jobcomp.txt").read_text().replace(
        "Partition=batch", "Partition=cosched"))
    b = SlurmBackend(src, partition="cosched", jobcomp_file=jobcomp)
    assert {r.job_id for r in b.running()} >= {"5", "6"}      # host and guest seen running
    b._known[2] = "RUNNING"                                    # and job 2 (it failed since)
    src.jobs_list = [j for j in src.jobs_list if j.job_id not in (2, 6)]   # purged by Slurm
    outs = {o.job_id: o for o in b.drain_finished()}
    assert outs["2"].state == "failed" and "exit code 3" in outs["2"].reason   # from jobcomp
    assert outs["6"].state == "failed" and "vanished from Slurm" in outs["6"].reason
    assert b.drain_finished() == []


def test_backend_gives_up_on_a_released_job_whose_node_went_down(tmp_path):
    """A job released onto a node that goes down before it starts would pend there forever
    (ReqNodeNotAvail): the backend cancels it and reports it failed, once."""

    src = RecordedCluster("22.05")
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json")
    (q,) = b.queued()
    b.start(q, Allocation("7", (("rn1", 2),)), 1.0)
    src.jobs_list = [dataclasses.replace(j, priority=1, reason="None") if j.job_id == 7 else j
                     for j in src.jobs_list]
    b._snap_time = float("-inf")
    assert "7" in {r.job_id for r in b.running()}          # released, starting on rn1
    src.nodes_list = [dataclasses.replace(n, state="DOWN", flags=("NOT_RESPONDING",))
                      if n.name == "rn1" else n for n in src.nodes_list]
    b._snap_time = float("-inf")
    assert "7" not in {r.job_id for r in b.running()}
    assert ("cancel", 7) in src.writes
    (o,) = b.drain_finished()
    assert (o.job_id, o.state) == ("7", "failed") and "rn1 went down" in o.reason
    assert b.drain_finished() == []


class RecordingAgent:
    """Keeps the calls the backend makes to a node agent (monitoring.client.AgentClient's)."""

    def __init__(self):
        self.calls: list[tuple] = []

    def register_job(self, job_id, pids, cores, **kw):
        return {"job_id": job_id, "status": "running", "cores": float(cores)}

    def jobs(self):
        return []

    def set_quota(self, job_id, cpu_fraction, lease_s, role=None):
        self.calls.append(("quota", job_id, round(cpu_fraction, 4), role))
        return {}

    def clear_quota(self, job_id):
        self.calls.append(("clear", job_id))
        return {}


def test_backend_tells_the_agents_who_lends_and_who_borrows(tmp_path):
    """The quota a node agent receives says the job's role: a guest (its mark names a host)
    is sent "guest", a job lending its cores "host", on a set, on a lease renewal and when a
    guest starts; a full quota is a clear (no role, the defaults)."""
    src = RecordedCluster("22.05")
    now = [1000.0]
    agent = RecordingAgent()
    b = SlurmBackend(src, partition="cosched", agents={"rn1": agent}, lease_s=6.0,
                     clock=lambda: now[0])
    b.set_quota("5", 0.5)                 # the recorded host of guest 6
    b.set_quota("6", 0.3)
    assert agent.calls == [("quota", "5", 0.5, "host"), ("quota", "6", 0.3, "guest")]
    agent.calls.clear()
    now[0] += 10.0                        # past a third of the lease: renewed
    b._renew_leases()
    assert sorted(agent.calls) == [("quota", "5", 0.5, "host"), ("quota", "6", 0.3, "guest")]
    agent.calls.clear()
    b.set_quota("5", 1.0)
    assert agent.calls == [("clear", "5")]
    agent.calls.clear()
    (q,) = b.queued()
    b.start(q, Allocation("7", (("rn1", 2),)), 0.25, host_job="5")
    assert agent.calls == [("quota", "7", 0.25, "guest")]
    agent.calls.clear()
    now[0] += 10.0     # renewed while Slurm's answer does not show the guest's mark yet
    b._renew_leases()
    assert ("quota", "7", 0.25, "guest") in agent.calls
    # The wall clock stepped back an hour (NTP): renewed at once, not an hour later, when
    # the agents' leases (on their monotonic clocks) would long have lapsed.
    agent.calls.clear()
    now[0] -= 3600.0
    b._renew_leases()
    assert ("quota", "7", 0.25, "guest") in agent.calls
    agent.calls.clear()
    now[0] += 1.0      # and from then on every third of the lease, as before
    b._renew_leases()
    assert agent.calls == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_wrapper_record_another_user_put_at_the_jobs_path_is_not_the_jobs(tmp_path):
    """The usage folder is open to every user (1777) and job ids are predictable: another
    user's file at a job's path (or a link, or a FIFO) must not become what the job used
    (the controller learns its class's usual CPU use from it)."""
    usage = tmp_path / "usage"
    usage.mkdir()
    os.chmod(usage, 0o1777)
    b = SlurmBackend(RecordedCluster("24.11"), partition="cosched", usage_dir=usage)
    job = SlurmJob(41, state="COMPLETED", cpus=4, start_time=1000.0, end_time=1011.0, uid=1000)
    record = json.dumps({"job_id": 41, "start": 1000.5, "end": 1010.5, "cpu_s": 0.4, "rc": 0})
    path = usage / "41.json"
    path.write_text(record)
    os.chown(path, 65534, 65534)                       # nobody's, not the job user's (1000)
    o = b._outcome(job)
    assert o.cpu_percent is None and o.runtime_s == 11.0   # Slurm's times, not the record's
    os.chown(path, 1000, 1000)                         # the job's user's: read
    assert b._outcome(job).cpu_percent == pytest.approx(100.0 * 0.4 / (10.0 * 4))
    path.unlink()
    (tmp_path / "elsewhere.json").write_text(record)
    path.symlink_to(tmp_path / "elsewhere.json")       # a link, even to a good record
    assert b._outcome(job).cpu_percent is None
    path.unlink()
    os.mkfifo(path)                                    # never waited on
    assert b._outcome(job).cpu_percent is None


def test_usage_records_older_than_a_week_are_removed_about_once_an_hour(tmp_path, monkeypatch):
    """One record per job, in a folder that otherwise grew for as long as the cluster ran
    (a disk block per job). Only records and the wrapper's leftover temporaries older than
    USAGE_KEPT_S go; other files, new records and what a link points to stay."""
    import slurm_plugin.usage_files as usage_files

    usage = tmp_path / "usage"
    usage.mkdir()
    now = time.time()
    old = now - usage_files.USAGE_KEPT_S - 60
    for name, when in (("41.json", old), ("42.json.tmp.999", old), ("43.json", now - 3600),
                       ("notes.txt", old), ("44.json.bak", old)):
        (usage / name).write_text("{}")
        os.utime(usage / name, (when, when))
    target = tmp_path / "kept.json"
    target.write_text("{}")
    (usage / "45.json").symlink_to(target)
    os.utime(usage / "45.json", (old, old), follow_symlinks=False)
    b = SlurmBackend(RecordedCluster("24.11"), partition="cosched", usage_dir=usage)
    b.drain_finished()
    assert sorted(p.name for p in usage.iterdir()) == ["43.json", "44.json.bak", "notes.txt"]
    assert target.exists()
    (usage / "46.json").write_text("{}")
    os.utime(usage / "46.json", (old, old))
    b.drain_finished()                          # within the hour: not looked at again
    assert (usage / "46.json").exists()
    monkeypatch.setattr(time, "time", lambda: now + usage_files.USAGE_SCAN_S + 1)   # (the wall clock)
    b.drain_finished()
    assert not (usage / "46.json").exists()
    assert usage_files.prune_usage(tmp_path / "missing", now) == 0   # logged, not raised


def test_a_completed_jobs_outcome_carries_its_mean_cpu_use_from_the_job_wrappers_record(tmp_path):
    """The wrapper's rusage at exit (cpu_s) over the job's CPUs and runtime, in % as the
    agents count it (cpu_per_core real CPUs per Slurm CPU): what a job too short to be
    sampled used. Only this run's record counts; a stale or broken one gives None."""
    import json as _json


    usage = tmp_path / "usage"
    usage.mkdir()
    b = SlurmBackend(RecordedCluster("24.11"), partition="cosched", usage_dir=usage,
                     cpu_per_core=0.5)
    job = SlurmJob(41, state="COMPLETED", cpus=4, start_time=1000.0, end_time=1011.0,
                   uid=os.getuid())
    assert b._outcome(job).cpu_percent is None                 # no record
    (usage / "41.json").write_text(_json.dumps({"job_id": 41, "start": 1000.5, "end": 1010.5,
                                                "cpu_s": 5.0, "rc": 0}))
    o = b._outcome(job)
    assert (o.state, o.runtime_s) == ("completed", 10.0)
    assert o.cpu_percent == pytest.approx(100.0 * 5.0 / (10.0 * 4 * 0.5))   # 25 %
    (usage / "41.json").write_text(_json.dumps({"start": 500.0, "end": 510.0, "cpu_s": 5.0}))
    assert b._outcome(job).cpu_percent is None                 # an earlier run's record
    (usage / "41.json").write_text(_json.dumps({"start": 1000.5, "end": 1010.5, "cpu_s": "x"}))
    assert b._outcome(job).cpu_percent is None
    failed = SlurmJob(41, state="FAILED", cpus=4, start_time=1000.0, end_time=1011.0, exit_code=1,
                      uid=os.getuid())
    assert b._outcome(failed).cpu_percent is None
    with pytest.raises(InvalidInput, match="cpu_per_core"):
        SlurmBackend(RecordedCluster("24.11"), partition="cosched", cpu_per_core=float("nan"))


class CyclingCluster(RecordedCluster):
    """A stream of our jobs through Slurm's states, as a controller sees it for months:
    each job waits held, runs on two nodes (its layout asked of ``layout``), completes, and
    is purged from squeue a few refreshes later (MinJobAge)."""

    def __init__(self):
        super().__init__("24.11")
        self.jobs_list = []
        self.tick = 0

    def jobs(self):
        self.tick += 1
        out = []
        for jid in range(max(1, self.tick - 6), self.tick + 1):   # each lives 7 refreshes
            age = self.tick - jid
            state = ("PENDING", "PENDING", "RUNNING", "RUNNING", "COMPLETED", "COMPLETED",
                     "COMPLETED")[age]
            out.append(SlurmJob(job_id=jid, name=f"s{jid}", user="u", uid=1000,
                                partition="cosched", state=state, cpus=4,
                                priority=0 if state == "PENDING" else 1, time_limit_s=600.0,
                                submit_time=float(jid), start_time=float(jid) + 2 if age >= 2 else None,
                                end_time=float(jid) + 4 if age >= 4 else None,
                                nodes=("rn2", "rn3") if age >= 2 else (), node_count=2,
                                comment="cosched:class=soak/stage"))
        return out

    def layout(self, job_id):
        return (("rn2", 2), ("rn3", 2))


def test_a_backend_running_for_months_holds_only_the_jobs_slurm_lists(tmp_path, monkeypatch):
    """Per-job memory (the job cache, layouts asked of scontrol, ids already reported) is
    let go once Slurm purges a job: after 9,000 jobs the backend holds about the seven
    Slurm lists, and every job was reported once, in order."""
    monkeypatch.setattr("slurm_plugin.backend.ENDED_KEPT", 500)
    src = CyclingCluster()
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "state.json", refresh_s=0)
    ended = []
    for _ in range(3000):
        b.queued()
        b.running()
        ended += [o.job_id for o in b.drain_finished()]
    assert sorted(ended, key=int) == [str(j) for j in range(1, len(ended) + 1)]
    assert len(ended) >= 8990      # (the cluster moves on at each of the three reads)
    listed = set(b._jobs)
    assert len(listed) == 7
    assert set(b._job_cache) <= listed and set(b._layouts) <= listed
    assert len(b.reported) <= 2 * len(listed)   # (pruned at the next read)
    # the ended jobs' outcomes and eligible times: the last ENDED_KEPT at most
    assert 400 <= len(b.history) <= 500 and b.history[-1].job_id == ended[-1]
    assert len(b.eligible_at) <= 500 + len(listed)


def test_a_wall_clock_stepped_back_does_not_freeze_the_backends_view_of_slurm():
    """The backend asks Slurm again once ``refresh_s`` passed on the wall clock. Asked as
    ``now - last < refresh_s``, a step back of an hour (NTP) kept the old snapshot for an
    hour: no job that started or ended was seen (coscheduler/clocks.py)."""
    from coscheduler.clocks import due

    src = RecordedCluster("22.05")
    calls = [0]
    real_jobs = src.jobs

    def counted():
        calls[0] += 1
        return real_jobs()
    src.jobs = counted
    now = [1000.0]
    b = SlurmBackend(src, partition="cosched", clock=lambda: now[0])
    b.queued()
    first = calls[0]
    b.queued()
    assert calls[0] == first              # within refresh_s: the snapshot is reused
    now[0] -= 3600.0
    b.queued()
    assert calls[0] == first + 1          # stepped back: asked again at once
    assert due(100.0, 50.0, 60.0) is False and due(100.0, 40.0, 60.0) is True
    assert due(100.0, 200.0, 60.0) is True and due(0.0, float("-inf"), 60.0) is True


def test_the_agents_are_asked_for_their_jobs_at_once_not_one_after_the_other():
    """A pass over many nodes asked each agent in turn: a thousand round trips per pass.
    Here each agent answers only once all four are asking (a barrier): asked in turn, the
    first waits for the others, times out, and no node has metrics this pass."""
    import threading

    barrier = threading.Barrier(4, timeout=5)

    class WaitingAgent:
        def __init__(self, views):
            self.views = views

        def jobs(self):
            barrier.wait()
            return self.views

        def register_job(self, job_id, pids, cores, **kw):
            return {"job_id": job_id, "status": "running", "cores": float(cores)}

        def clear_quota(self, job_id):
            return {}

    def view(jid, cores):
        return {"job_id": jid, "status": "running", "cores": float(cores), "cpu_percent": 40.0,
                "mem_percent": 2.0, "tasks_done": 3, "tasks_total": 10, "tasks_per_s": 0.5,
                "start_time": 0.0, "cpu_fraction": 1.0}

    b = SlurmBackend(RecordedCluster("22.05"), partition="cosched",
                     agents={"rn1": WaitingAgent([view("5", 3), view("6", 1)]),
                             "rn2": WaitingAgent([]), "rn3": WaitingAgent([]),
                             "rn4": WaitingAgent([])})
    samples = b.metrics()
    assert sorted(samples) == ["5", "6"], samples
    assert samples["5"].cpu_percent == 40.0 and samples["6"].tasks_done == 3


def test_lease_renewals_go_to_the_nodes_at_once():
    """Renewals went one after the other: a thousand lending jobs waited a thousand round
    trips each pass. Each agent here answers only once both are renewing (a barrier)."""
    import threading

    barrier = threading.Barrier(2, timeout=5)
    now = [1000.0]

    class WaitingAgent:
        def __init__(self):
            self.renewed = []

        def set_quota(self, job_id, cpu_fraction, lease_s, role=None):
            barrier.wait()
            self.renewed.append((job_id, cpu_fraction))
            return {}

    a1, a2 = WaitingAgent(), WaitingAgent()
    b = SlurmBackend(RecordedCluster("22.05"), partition="cosched", agents={"rn1": a1, "rn2": a2},
                     lease_s=6.0, clock=lambda: now[0])
    b._quotas = {5: (0.5, ("rn1",)), 4: (0.25, ("rn2",))}
    b._renew_leases()
    assert a1.renewed == [("5", 0.5)] and a2.renewed == [("4", 0.25)]
    assert b._renewed == {5: 1000.0, 4: 1000.0}


def test_bench_slurm_prints_both_runs_side_by_side():
    from click.testing import CliRunner

    from slurm_plugin.bench import slurm

    res = CliRunner().invoke(slurm, ["--nodes", "4", "--jobs", "8", "--lending", "3",
                                     "--rtt-ms", "0", "--repeat", "1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out["runs"]) == {"one after the other", "at once"} and out["lending"] == 3
    bad = CliRunner().invoke(slurm, ["--jobs", "2", "--lending", "3"])
    assert bad.exit_code != 0 and "lending" in bad.output and "Traceback" not in bad.output


class UnansweredCluster(RecordedCluster):
    """Slurm 22.05 without a slurmctld: squeue --json exits 0 with only its errors."""

    def jobs(self):
        return parse_jobs_json(json.dumps({"meta": {}, "errors": [
            {"description": "Failed while looking for jobs", "error_number": -1,
             "error": "Unspecified error", "source": "slurm_load_jobs"}]}))


def test_slurm_answering_only_errors_is_said_so_with_what_to_check(tmp_path):
    # Before: "Slurm answered something unreadable: ... reported errors: Unspecified error".
    b = SlurmBackend(UnansweredCluster("22.05"), partition="cosched",
                     state_file=tmp_path / "state.json")
    with pytest.raises(BackendError) as info:
        b.queued()
    msg = str(info.value)
    assert msg.startswith("Slurm could not say what runs: ") and "unreadable" not in msg
    assert "Unspecified error" in msg and "`scontrol ping`" in msg
