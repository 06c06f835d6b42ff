"""From Slurm to Mesos: jobs submitted to the partition the submit hook marks for Mesos run
as Mesos tasks (mesos_framework/slurm_feed.py, docs/mesos.md "From Slurm").

The pure parts (marks, dependencies, a Slurm job as a Job) first; then the real thing: a
real Slurm 22.05 (`cosched slurm up --mesos-partition mesos`, real sbatch through the real
job_submit.lua) and the emulated Mesos master in its own process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from coscheduler.model import InvalidInput
from mesos_framework.slurm_feed import (SlurmFeed, format_mark, job_from_slurm, parse_mark,
                                        translate_dependencies)
from slurm_plugin.parse import SlurmJob


def test_marks_round_trip_and_values_cannot_break_the_format():
    text = format_mark("failed", reason="task x; FAILED = exit 1", runtime_s="3.2")
    assert text.startswith("cosched:v=1;run=mesos;state=failed;")
    m = parse_mark(text)
    assert m["state"] == "failed" and m["runtime_s"] == "3.2" and ";" not in m["reason"]
    assert parse_mark("cosched:v=1;quota=0.5") is None and parse_mark(None) is None


def test_dependencies_on_jobs_run_on_mesos_become_the_frameworks_others_wait():
    ours = {12: "slurm-12", 13: "slurm-13"}
    d = translate_dependencies("afterok:12(unfulfilled),afterok:13(unfulfilled)", ours)
    assert d.depends_on == ("slurm-12", "slurm-13") and not d.waiting and d.problem is None
    assert translate_dependencies("afterok:99(unfulfilled)", ours).waiting      # Slurm's own job
    assert translate_dependencies("afterok:99", ours) == translate_dependencies("", ours)  # met
    assert translate_dependencies("afterany:12(unfulfilled)", ours).waiting
    assert translate_dependencies("afterok:12?afterok:13", ours).waiting
    assert "never" in translate_dependencies("afterok:99(failed)", ours).problem


def _sj(**kw) -> SlurmJob:
    base = dict(job_id=41, name="stage-a", user="alice", partition="mesos", state="PENDING",
                priority=0, cpus=4, max_nodes=2, node_count=2, time_limit_s=600.0,
                comment="cosched:class=montage/mProject,type=parallel,tasks=9,walltime=300",
                admin_comment="cosched:v=1;run=mesos;state=queued")
    base.update(kw)
    return SlurmJob(**base)


def test_a_marked_slurm_job_becomes_a_job_running_its_batch_script_as_its_user():
    job = job_from_slurm(_sj(), "#!/bin/sh\necho hi\n", {"WorkDir": "/home/alice", "StdOut": "/home/alice/o"},
                         ("slurm-40",))
    assert (job.job_id, job.cores, job.nodes, job.walltime_s) == ("slurm-41", 4, 2, 300.0)
    assert (job.job_class, job.tasks, job.user, job.depends_on) == ("montage/mProject", 9, "alice", ("slurm-40",))
    assert job.command[:2] == ("/bin/sh", "-c") and job.command[-1] == "#!/bin/sh\necho hi\n"
    assert job.command[4:6] == ("/home/alice", "/home/alice/o")
    plain = job_from_slurm(_sj(comment="", cpus=1, max_nodes=None, node_count=None), "#!/bin/sh\n", {})
    assert (plain.job_class, plain.walltime_s, plain.nodes) == ("alice/stage-a", 600.0, 1)
    with pytest.raises(InvalidInput, match="#!"):
        job_from_slurm(_sj(), "echo no shebang\n", {})


def test_the_bridge_runs_the_script_in_its_folder_with_its_output_appended(tmp_path):
    job = job_from_slurm(_sj(), "#!/bin/sh\necho \"$SLURM_JOB_ID $SLURM_NODEID/$SLURM_NNODES $(pwd)\"\n"
                                "echo oops >&2\nexit 3\n",
                         {"WorkDir": str(tmp_path), "StdOut": str(tmp_path / "out"), "StdErr": str(tmp_path / "err")})
    env = {**os.environ, "MESOS_SANDBOX": str(tmp_path), "COSCHED_PART": "1", "COSCHED_PARTS": "2"}
    p = subprocess.run(list(job.command), env=env, timeout=30)
    assert p.returncode == 3
    assert (tmp_path / "out").read_text() == f"41 1/2 {tmp_path}\n"
    assert (tmp_path / "err").read_text() == "oops\n"
    assert not list(tmp_path.glob("slurm-script-*"))       # the script copy is removed


# -- the real thing -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    from slurm_plugin import cluster as cl

    if os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root")
    d = Path(tempfile.mkdtemp(prefix="cosched-mesos-slurm-"))
    os.chmod(d, 0o755)
    try:
        st = cl.up(d, nodes=1, cpus=2, mesos_partition="mesos", say=lambda m: None)
    except cl.ClusterError as exc:
        pytest.fail(f"cosched slurm up failed: {exc}")
    yield st
    report = cl.down(d, say=lambda m: None)
    assert not report["cgroups_left"], report
    shutil.rmtree(d, ignore_errors=True)


def _sbatch(state, *args, script):
    p = subprocess.run(["sbatch", "--parsable", *args], input=script, capture_output=True, text=True,
                       env=state.commands().env(), timeout=30)
    return p.returncode, p.stdout.strip().split(";")[0], p.stderr


def _show(state, jid) -> dict:
    out = state.commands().run("scontrol", "show", "job", "-o", str(jid))
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


@pytest.mark.slurm
@pytest.mark.mesos
@pytest.mark.root
def test_the_submit_hook_holds_and_marks_jobs_for_mesos_and_refuses_bad_ones(cluster):
    rc, jid, err = _sbatch(cluster, "-p", "mesos", "-t", "5", "-c", "2", "--output=/dev/null",
                           "--comment=cosched:class=t/x,tasks=3", script="#!/bin/sh\ntrue\n")
    assert rc == 0, err
    j = _show(cluster, jid)
    assert j["Priority"] == "0" and j["JobState"] == "PENDING"
    assert j["AdminComment"] == "cosched:v=1;run=mesos;state=queued"
    for args, why in [(("-p", "mesos,batch", "-t", "5"), "cannot be combined"),
                      (("-p", "mesos",), "time limit"),
                      (("-p", "mesos", "-t", "5", "--comment=cosched:bogus=1"), "unknown"),
                      (("-p", "mesos,cosched", "-t", "5"), "cannot be combined")]:
        rc, _, err = _sbatch(cluster, *args, "--output=/dev/null", script="#!/bin/sh\ntrue\n")
        assert rc != 0 and why in err, (args, err)
    rc, other, _ = _sbatch(cluster, "-p", "batch", "-t", "5", "--output=/dev/null", "--hold",
                           script="#!/bin/sh\ntrue\n")
    assert _show(cluster, other).get("AdminComment", "(null)") in ("(null)", "")
    cluster.commands().run("scancel", jid, other)


@pytest.mark.slurm
@pytest.mark.mesos
@pytest.mark.root
def test_jobs_marked_for_mesos_run_as_mesos_tasks_in_order_and_report_back_to_slurm(cluster, tmp_path):
    from mesos_emu_proc import EmulatorProcess, wait_for
    from mesos_framework.framework import FrameworkConfig
    from mesos_framework.run import MesosRun

    from slurm_plugin.commands import SlurmCommands
    from slurm_plugin.source import make_source

    work = Path(tempfile.mkdtemp(prefix="cosched-mesos-slurm-work-"))
    os.chmod(work, 0o755)
    common = ["-p", "mesos", "-t", "5", f"--chdir={work}", f"--output={work}/%j.out"]
    rc, a, err = _sbatch(cluster, *common, "-c", "1", "--comment=cosched:class=t/a,walltime=60",
                         script='#!/bin/sh\necho "a ran as $SLURM_JOB_ID in $(pwd)"\nsleep 1\necho done > a.flag\n')
    assert rc == 0, err
    rc, b, err = _sbatch(cluster, *common, "-c", "2", f"--dependency=afterok:{a}",
                         script='#!/bin/sh\ntest -f a.flag || exit 9\necho "b saw a"\n')
    assert rc == 0, err
    rc, c, err = _sbatch(cluster, *common, "-c", "1", script="#!/bin/sh\nsleep 120\n")
    assert rc == 0, err
    emu = EmulatorProcess(agents=1, cpus=4)      # a, then b beside c
    cmds = SlurmCommands(cluster.slurm_conf)
    feed = SlurmFeed(make_source(cmds, "cli"), cmds, "mesos")
    mr = MesosRun(emu.url, "space-sharing", config=FrameworkConfig(settle_s=0.3, hold_s=1.0, refuse_s=0.5,
                                                                    idle_refuse_s=0.5, feed_interval_s=0.3))
    mr.backend.add_feed(feed)
    mr.start()
    ends = {}
    try:
        def progress():
            mr.step()
            for o in mr.backend.history:
                ends.setdefault(o.job_id, o)
            return f"slurm-{a}" in ends and f"slurm-{b}" in ends and \
                f"slurm-{c}" in {r.job_id for r in mr.backend.running()}

        wait_for(progress, 90, 0.2, "a and b to run on Mesos and c to start")
        assert _show(cluster, b).get("Dependency") in ("(null)", "")   # now the framework's
        mc = _show(cluster, c)["AdminComment"]
        assert "state=running" in mc and "agents=" in mc
        cmds.run("scancel", c)                      # its owner cancels it in Slurm
        wait_for(lambda: (mr.step(), f"slurm-{c}" in {o.job_id for o in mr.backend.history})[1], 30, 0.2,
                 "c to be killed on Mesos")
        for _ in range(5):
            mr.step()
            time.sleep(0.1)
    finally:
        mr.close()
        emu.stop()
    out = {o.job_id: o for o in mr.backend.history}
    assert out[f"slurm-{a}"].state == "completed" and out[f"slurm-{b}"].state == "completed", out
    assert out[f"slurm-{b}"].start_time >= out[f"slurm-{a}"].end_time       # afterok kept
    assert out[f"slurm-{c}"].state == "cancelled" and "Slurm" in out[f"slurm-{c}"].reason
    assert (work / f"{a}.out").read_text() == f"a ran as {a} in {work}\n"
    assert (work / f"{b}.out").read_text() == "b saw a\n"
    for jid, state in ((a, "completed"), (b, "completed")):
        j = _show(cluster, jid)
        assert j["JobState"] == "CANCELLED"                       # it never ran in Slurm
        assert parse_mark(j["AdminComment"])["state"] == state, j["AdminComment"]
    # c ended in Slurm first (its owner), which then takes no more changes to it
    assert _show(cluster, c)["JobState"] == "CANCELLED"
    assert "runtime_s=" in _show(cluster, a)["AdminComment"]
    shutil.rmtree(work, ignore_errors=True)
