"""The stage programs really run: progress, files, hand-offs, signals, failures, CPU share.

Everything here runs at tiny scales (a few seconds in total); the CPU-share tests compare
runs side by side with tolerant thresholds because the 2-core machine is shared.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from coscheduler.model import InvalidInput

from coscheduler.model import StageType
from coscheduler.progress import read_progress
from coscheduler.workloads.burn import REF_RATE_CACHED, REF_RATE_STREAMING, Burner, measure_rates, new_buffer
from coscheduler.workloads import WORKFLOWS, stage_profile
from coscheduler.workloads import stage as stage_mod
from coscheduler.workloads import tasks as tasks_mod
from coscheduler.workloads.pool import TaskFailed
from coscheduler.workloads.profile import STARTUP_S, split_tasks

TINY = 0.002

STAGES = [(wf.name, s.name, s.stage_type) for wf in WORKFLOWS.values() for s in wf.stages]


def _tiny_tasks(workflow: str, stage: str) -> int:
    groups = WORKFLOWS[workflow].stage(stage).groups
    return max(len(groups), 4)


@pytest.mark.parametrize("workflow,stage,stage_type", STAGES,
                         ids=[f"{w}/{s}" for w, s, _ in STAGES])
def test_every_stage_runs_and_reports_monotonic_progress(workflow, stage, stage_type, tmp_path,
                                                         monkeypatch):
    calls: list[tuple[int, int]] = []
    real = stage_mod.write_progress

    def record(done, total, path=None):
        calls.append((done, total))
        return real(done, total, path)

    monkeypatch.setattr(stage_mod, "write_progress", record)
    progress = tmp_path / "progress.json"
    tasks = _tiny_tasks(workflow, stage)
    workers = 2 if stage_type is StageType.PARALLEL else 1
    rep = stage_mod.run_stage(workflow, stage, workers=workers, scale=TINY, tasks=tasks,
                              workdir=tmp_path / "work", progress_file=progress)
    groups = WORKFLOWS[workflow].stage(stage).groups
    weights = stage_mod.task_weights(groups)
    steps = [w for g, n, w in zip(groups, split_tasks(groups, tasks), weights) for _ in range(n)]
    units = sum(steps)
    assert calls == [(sum(steps[:i]), units) for i in range(tasks + 1)]
    final = read_progress(progress)
    assert final is not None and (final.done, final.total) == (units, units)
    assert rep.tasks == tasks and rep.cpu_s > 0 and rep.elapsed_s > 0
    # nothing left behind but hand-offs for the next stage
    left = [p for p in (tmp_path / "work").rglob("*") if p.is_file()]
    assert all("blast-hits" in str(p) for p in left), left


def test_progress_counts_work_so_a_heavy_first_group_is_not_read_as_late():
    """Montage's mProject runs 42 tasks of 16.2 s, then 90 of 0.16 s: counted in tasks, a
    stage halfway through its work had done 16 % of its tasks (Hp 0.1-0.4 for hosts on
    pace in the testbed). Counted in work units, the two fractions agree within 1 %."""
    groups = WORKFLOWS["montage"].stage("mProject").groups
    weights = stage_mod.task_weights(groups)
    assert weights == [103, 1]
    counts = split_tasks(groups, None)
    seconds = [g.task_s for g in groups]
    total_s = sum(n * t for n, t in zip(counts, seconds))
    total_u = sum(n * w for n, w in zip(counts, weights))
    half = counts[0] // 2                                   # half the heavy tasks done
    assert half / sum(counts) < 0.17                        # by tasks: looks 3x late
    assert abs(half * weights[0] / total_u - half * seconds[0] / total_s) < 0.01
    one = WORKFLOWS["statistics"].stage("partial").groups
    assert stage_mod.task_weights(one) == [1]               # one group: plain task counts


def test_stage_program_writes_the_progress_file_named_by_the_environment(tmp_path):
    progress = tmp_path / "p.json"
    env = dict(os.environ, COSCHED_PROGRESS_FILE=str(progress))
    seen: list[int] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", "statistics",
         "--stage", "partial", "--tasks", "12", "--workers", "2", "--scale", "0.005",
         "--report"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:
        p = read_progress(progress)
        if p is not None and (not seen or seen[-1] != p.done):
            seen.append(p.done)
        time.sleep(0.005)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert read_progress(progress).done == 12 and read_progress(progress).total == 12
    assert seen == sorted(seen) and len(seen) >= 2  # watched it grow
    rep = json.loads(out)
    assert rep["tasks"] == 12 and rep["workers"] == 2


def test_montage_tasks_really_create_and_remove_files(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # the private workdir lands here
    seen: dict[str, int] = {}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            try:
                for p in tmp_path.rglob("*.dat"):
                    seen[str(p)] = max(seen.get(str(p), 0), p.stat().st_size)
            except FileNotFoundError:
                pass  # a file or folder went away mid-walk: look again
            time.sleep(0.002)

    t = threading.Thread(target=watch)
    t.start()
    try:
        stage_mod.run_stage("montage", "mProject", workers=2, scale=0.01, tasks=6)
    finally:
        stop.set()
        t.join()
    outputs = [p for p in seen if "-out" in p]
    inputs = [p for p in seen if "-in" in p]
    assert len(outputs) >= 4 and inputs  # outputs of several tasks, staged-in inputs
    assert max(seen.values()) > 500_000  # MB-sized images, not empty files
    assert list(tmp_path.iterdir()) == []  # the private workdir is gone


def test_blast_merge_consumes_the_map_outputs_through_a_shared_workdir(tmp_path):
    work = tmp_path / "wf"
    stage_mod.run_stage("blast", "blastall", workers=2, scale=TINY, tasks=5, workdir=work)
    hits = sorted((work / "blast-hits").glob("*.dat"))
    assert len(hits) == 4  # one split task + four map tasks
    stage_mod.run_stage("blast", "cat_blast", workers=1, scale=TINY, workdir=work)
    assert list((work / "blast-hits").glob("*.dat")) == []  # merged and consumed
    assert [p for p in work.rglob("*") if p.is_file()] == []


def test_a_workflows_job_commands_run_end_to_end(tmp_path):
    """The Job commands themselves, in dependency order, sharing a workdir (BLAST hand-off)."""
    from coscheduler.workloads import workflow_jobs
    jobs = workflow_jobs("blast", 2, 0.0005, workdir=tmp_path, id_prefix="b1")
    for job in jobs:
        progress = tmp_path / f"{job.job_id}.progress"
        env = dict(os.environ, COSCHED_PROGRESS_FILE=str(progress))
        proc = subprocess.run(list(job.command), env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        p = read_progress(progress)
        groups = WORKFLOWS["blast"].stage(job.job_class.split("/")[1]).groups
        units = sum(n * w for n, w in zip(split_tasks(groups, job.tasks),
                                          stage_mod.task_weights(groups)))
        assert (p.done, p.total) == (units, units)
        if job.job_class == "blast/blastall":
            assert len(list((tmp_path / "b1" / "blast-hits").glob("*.dat"))) == 120
    assert [p for p in (tmp_path / "b1").rglob("*.dat")] == []  # merged and consumed


def test_killing_the_stage_kills_its_workers(tmp_path):
    import psutil
    proc = subprocess.Popen(
        [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", "synthetic",
         "--stage", "compute", "--workers", "2", "--scale", "0.05", "--workdir", str(tmp_path)])
    try:
        deadline = time.time() + 20
        kids: list = []
        while time.time() < deadline and len(kids) < 2:
            kids = psutil.Process(proc.pid).children()
            time.sleep(0.02)
        assert len(kids) == 2
    finally:
        proc.kill()  # SIGKILL: no cleanup code runs in the main process
        proc.wait()
    gone, alive = psutil.wait_procs(kids, timeout=5)
    assert alive == [], "workers outlived their stage"


def test_sigterm_stops_the_stage_and_cleans_up(tmp_path):
    progress = tmp_path / "p.json"
    work = tmp_path / "w"
    proc = subprocess.Popen(
        [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", "montage", "--stage",
         "mProject", "--workers", "2", "--scale", "0.05", "--workdir", str(work),
         "--progress-file", str(progress)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while time.time() < deadline:
        p = read_progress(progress)
        if p is not None and p.done >= 1:
            break
        time.sleep(0.02)
    else:
        proc.kill()
        pytest.fail("stage made no progress within 20 s")
    assert any(work.rglob("*.dat"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 128 + signal.SIGTERM
    assert [p for p in work.rglob("*") if p.is_file()] == []
    assert read_progress(progress).done < read_progress(progress).total


def test_a_failing_task_fails_the_stage_with_its_traceback(tmp_path, monkeypatch):
    def boom(self, task):
        raise RuntimeError(f"disk on fire in task {task}")

    monkeypatch.setattr(tasks_mod.MemComputeRunner, "run", boom)  # inherited by forked workers
    with pytest.raises(TaskFailed, match="disk on fire"):
        stage_mod.run_stage("synthetic", "compute", workers=2, scale=TINY, tasks=4,
                            workdir=tmp_path)


def test_bad_arguments_get_a_clear_message():
    proc = subprocess.run(
        [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", "montage",
         "--stage", "mShrink"], capture_output=True, text=True)
    assert proc.returncode == 2 and "mShrink" in proc.stderr and "mProject" in proc.stderr


def test_cpu_bound_and_io_bound_tasks_use_the_cpu_they_should(tmp_path):
    """A fixed amount of CPU work per task; Montage's is a smaller share of its runtime.

    Elapsed times depend on what else runs on the machine, so the CPU seconds each stage
    burned are compared with its expected exclusive runtime (a constant), not with wall time.
    """
    def run(workflow, stage, tasks):
        rep = stage_mod.run_stage(workflow, stage, workers=1, scale=0.01, tasks=tasks,
                                  workdir=tmp_path)
        prof = stage_profile(workflow, stage, 1, 0.01, tasks=tasks)
        # in-process: no interpreter start to pay for
        return rep, rep.cpu_s / (prof.runtime_s - STARTUP_S)

    blast, blast_share = run("blast", "blastall", 5)
    montage, montage_share = run("montage", "mProject", 2)
    # The work is a fixed count of kernel iterations sized on the reference core (burn.py),
    # so a faster core burns fewer CPU seconds for it: the shares are put in reference-core
    # terms with this machine's kernel rates (a cached and a streamed buffer bound the speed
    # of any stage's). Seen: 0.45-0.60 raw for blast on a core 2.0x / 1.5x the reference.
    rates = measure_rates(duration_s=0.2, repeats=2)
    fastest = max(rates["cached"] / REF_RATE_CACHED, rates["streaming"] / REF_RATE_STREAMING)
    slowest = min(rates["cached"] / REF_RATE_CACHED, rates["streaming"] / REF_RATE_STREAMING)
    # Absolute shares also drift with the load (a busy core burns more CPU seconds per unit
    # of work: blast measured 1.47-1.57 on the reference machine, montage 0.48-0.61), so the
    # bounds are loose and the discriminating check is the ratio of the two, measured side
    # by side (~0.32 there).
    assert blast_share * fastest > 0.6 and blast_share * slowest < 3.0, (blast, rates)
    assert montage_share * fastest > 0.15 and montage_share * slowest < 1.2, (montage, rates)
    assert montage_share / blast_share < 0.6, (montage, blast)
    # (Not their wall-time utilisations: those are the load's. Blast's 5 s measured 0.32
    # while Montage's 0.25 s measured 0.61 with another process busy on the second core.)


def test_core_speed_shrinks_the_cpu_work_only(tmp_path):
    """On an emulated core worth a quarter of a reference core the stage does a quarter of
    the CPU work, so it keeps its CPU-to-wait profile there."""
    full = stage_mod.run_stage("blast", "blastall", workers=1, scale=0.01, tasks=4,
                               workdir=tmp_path / "a")
    quarter = stage_mod.run_stage("blast", "blastall", workers=1, scale=0.01, tasks=4,
                                  workdir=tmp_path / "b", core_speed=0.25)
    assert quarter.cpu_s < 0.5 * full.cpu_s, (quarter, full)
    with pytest.raises(InvalidInput, match="core_speed"):
        stage_mod.run_stage("blast", "blastall", workers=1, scale=0.01, tasks=2,
                            workdir=tmp_path / "c", core_speed=0.0)


# ---------------------------------------------------------------------------------------
# CPU share: a CPU-bound task takes longer when it gets less CPU


_BURN = """
import sys, time
from coscheduler.workloads.burn import Burner, new_buffer
b = Burner(new_buffer(2**20))
b.iterations(2000)  # warm up
sys.stdin.readline()  # wait until placed (affinity, cgroup)
t0 = time.perf_counter()
b.seconds(float(sys.argv[1]))
print(time.perf_counter() - t0, flush=True)
"""


def _timed_burn(seconds: float, place=None) -> float:
    proc = subprocess.Popen([sys.executable, "-c", _BURN, str(seconds)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        if place:
            place(proc.pid)
        out, _ = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return float(out)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_cpu_work_takes_longer_when_sharing_a_core():
    cpu = sorted(os.sched_getaffinity(0))[0]

    def pin(pid):
        os.sched_setaffinity(pid, {cpu})

    alone = _timed_burn(0.2, pin)
    # Two busy loops on the same core: our share drops from 1/(1+k) to 1/(3+k) when k other
    # processes already run there, so the ratio stays above 1.5 for k <= 3.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for h in hogs:
            os.sched_setaffinity(h.pid, {cpu})
        time.sleep(0.05)
        shared = _timed_burn(0.2, pin)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert shared > 1.4 * alone, (alone, shared)  # ideal: 3x


def _cgroup_cpu_limiter():
    """(make, remove) for a CPU-limited cgroup on v1 or v2, or None."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").exists() and os.access(v1, os.W_OK):
        def make(name, quota):
            d = v1 / name
            d.mkdir()
            (d / "cpu.cfs_period_us").write_text("100000")
            (d / "cpu.cfs_quota_us").write_text(str(int(quota * 100000)))
            return d
        return make
    v2 = Path("/sys/fs/cgroup")
    if "cpu" in (v2 / "cgroup.controllers").read_text().split() if (v2 / "cgroup.controllers").exists() else False:
        def make(name, quota):
            d = v2 / name
            d.mkdir()
            (d / "cpu.max").write_text(f"{int(quota * 100000)} 100000")
            return d
        return make
    return None


@pytest.mark.root
def test_a_cgroup_quota_slows_cpu_bound_work(tmp_path):
    make = _cgroup_cpu_limiter()
    if make is None:
        pytest.skip("no writable cgroup cpu controller (v1 cpu.cfs_quota_us or v2 cpu.max)")
    quota = 0.2
    group = make(f"cosched-test-workloads-{os.getpid()}", quota)
    try:
        def into(pid):
            (group / "cgroup.procs").write_text(str(pid))

        def run(place=None):
            proc = subprocess.Popen(
                [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", "blast",
                 "--stage", "blastall", "--tasks", "3", "--scale", "0.02", "--report",
                 "--workdir", str(tmp_path)], stdout=subprocess.PIPE, text=True)
            if place:
                place(proc.pid)  # before it gets past its imports
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0
            return json.loads(out)

        free = [run(), run()]  # best of two: other processes slow the free runs too
        limited = run(into)
    finally:
        group.rmdir()  # the process has exited, so the group is empty
    cpu_free = min(r["cpu_s"] for r in free)
    # The same work is done under the quota (a fixed amount, not "until a deadline"); the
    # bounds are loose because process and pool start-up CPU varies from run to run...
    # (measured 0.9-1.75: a throttled process refills cold caches every period).
    assert 0.6 < limited["cpu_s"] / cpu_free < 2.5, (free, limited)
    # ...so it takes at least its CPU time over the quota, and longer than without it.
    assert limited["elapsed_s"] > 0.8 * limited["cpu_s"] / quota, (free, limited)
    assert limited["elapsed_s"] > 1.5 * min(r["elapsed_s"] for r in free), (free, limited)


def test_parts_of_a_stage_split_its_tasks_and_together_run_each_once(tmp_path):
    """A job that spans several agents (Mesos: one task per part, $COSCHED_PART/PARTS) runs
    each task of the stage in exactly one part."""
    from coscheduler.workloads.stage import parse_part, part_tasks

    assert parse_part(None, {}) is None and parse_part(None, {"COSCHED_PARTS": "1", "COSCHED_PART": "0"}) is None
    assert parse_part(None, {"COSCHED_PART": "1", "COSCHED_PARTS": "3"}) == (1, 3)
    assert parse_part("0/2", {}) == (0, 2)
    for bad in ("2/2", "x/2", "1", "-1/2"):
        with pytest.raises(InvalidInput):
            parse_part(bad, {})
    assert sorted(part_tasks(7, (0, 2)) + part_tasks(7, (1, 2))) == list(range(7))
    reps = [stage_mod.run_stage("blast", "blastall", workers=1, scale=0.002, tasks=5, part=(k, 2),
                      workdir=tmp_path, progress_file=tmp_path / f"p{k}.json") for k in range(2)]
    assert [r.tasks for r in reps] == [3, 2]
    import json
    rec = json.loads((tmp_path / "p1.json").read_text())
    heavy = stage_mod.task_weights(WORKFLOWS["blast"].stage("blastall").groups)[1]
    assert rec["done"] == rec["total"] == 2 * heavy   # part 1: two blastall tasks


def test_a_slow_emulated_core_uses_only_its_share_of_a_real_cpu(tmp_path):
    """A sequential stage in a four-core allocation of cores worth a quarter of a real CPU
    (the demo's emulated nodes, the paper's geometry) must look like one busy core of
    four, not like a whole real CPU. The same work takes its CPU either way; only how
    fast it may take it changes (the sleeps between slices)."""
    fast, slow = Burner(new_buffer(2**20)), Burner(new_buffer(2**20), speed=0.25)
    for burner in (fast, slow):
        c0, t0 = time.thread_time(), time.perf_counter()
        assert burner.seconds(0.15) == round(0.15 * burner.rate)
        burner.cpu, burner.wall = time.thread_time() - c0, time.perf_counter() - t0
    # (a busy machine only lowers a share of a real CPU, never raises it)
    assert slow.cpu / slow.wall <= 0.4, (slow.cpu, slow.wall)
    assert slow.wall >= 2.5 * slow.cpu
    assert fast.cpu / fast.wall > slow.cpu / slow.wall
    with pytest.raises(ValueError, match="burn speed must lie in"):
        Burner(new_buffer(2**20), speed=0.0)
    # a one-worker CPU-bound stage at that speed: its CPU over its elapsed time stays near
    # a quarter (at full speed: about 1.0; its start-up is not slowed)
    rep = stage_mod.run_stage("blast", "blastall", workers=1, scale=0.01, tasks=2,
                              workdir=tmp_path, core_speed=0.25)
    assert rep.cpu_util <= 0.45, rep
