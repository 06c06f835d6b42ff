"""Workflow definitions, stage profiles and the job mixes (pure; no processes run here)."""

from __future__ import annotations

import math
import sys

import pytest

from coscheduler.model import InvalidInput, Job, StageType
from coscheduler.workloads.jobs import DEMO_CORES
from coscheduler.workloads import (DEMO_NODE_CORES, DEMO_NODES, DEMO_SCALE, WORKFLOWS, paper_mix,
                               small_mix, stage_profile, workflow_jobs, workflow_profiles)
from coscheduler.workloads.definitions import BLAST_TASK_TIME_FACTOR, TASKS_FACTOR, get_workflow
from coscheduler.workloads.profile import file_bytes, split_tasks, walltime_request
from coscheduler.workloads.stage import build_parser
from coscheduler.workloads.summary import EMBEDDED, INSTANCE_FILES, summarize_instance


@pytest.mark.parametrize("workflow", list(WORKFLOWS))
def test_workflow_jobs_are_a_dependency_chain_of_valid_jobs(workflow):
    spec = get_workflow(workflow)
    jobs = workflow_jobs(workflow, 16, 0.05, submit_time=5.0, id_prefix="wf1")
    assert [j.job_id for j in jobs] == [f"wf1.{s.name}" for s in spec.stages]
    assert all(isinstance(j, Job) for j in jobs)
    assert jobs[0].depends_on == ()
    for prev, job in zip(jobs, jobs[1:]):
        assert job.depends_on == (prev.job_id,)
    for job, stage in zip(jobs, spec.stages):
        assert job.job_class == f"{workflow}/{stage.name}"
        assert job.workflow == "wf1" and job.submit_time == 5.0
        assert job.stage_type is stage.stage_type
        assert job.cores == (16 if stage.stage_type is StageType.PARALLEL else 1)
        assert job.tasks == stage.tasks
        prof = stage_profile(workflow, stage.name, 16, 0.05)
        # a user-style overestimate: 1.75x the expected runtime, or 5 s more for tiny stages
        assert prof.runtime_s * 1.5 <= job.walltime_s <= max(2 * prof.runtime_s, prof.runtime_s + 6)
        # the command runs the stage program with this interpreter and parses
        assert job.command[:3] == (sys.executable, "-m", "coscheduler.workloads.stage")
        args = build_parser().parse_args(list(job.command[3:]))
        assert (args.workflow, args.stage, args.tasks) == (workflow, stage.name, stage.tasks)
        assert args.workers == job.cores and args.scale == 0.05
    assert len({j.job_class for j in jobs}) == len(jobs)


def test_workflow_jobs_defaults_and_options():
    jobs = workflow_jobs("blast", 8, 1.0)
    assert [j.job_id for j in jobs] == ["blast-8.blastall", "blast-8.cat_blast"]
    assert [j.stage_type for j in jobs] == [StageType.PARALLEL, StageType.SEQUENTIAL]
    shared = workflow_jobs("blast", 4, 0.1, workdir="/tmp/wfs", node_cores=2, id_prefix="b")
    assert shared[0].nodes == 2 and shared[1].nodes == 1
    assert all("/tmp/wfs/b" in j.command for j in shared)
    slow = workflow_jobs("blast", 4, 0.1, core_speed=0.25)
    fast = workflow_jobs("blast", 4, 0.1)
    # On 4x slower cores the stage does a quarter of the CPU work (it keeps its profile), so
    # only the interpreter's start-up takes longer: the walltime grows a little, not 4x.
    assert "--core-speed" in slow[0].command and "--core-speed" not in fast[0].command
    assert fast[0].walltime_s < slow[0].walltime_s < 1.5 * fast[0].walltime_s


@pytest.mark.parametrize("bad", [
    dict(workflow="lammps"), dict(cores=0), dict(cores=2.5), dict(scale=0.0),
    dict(scale=float("nan")), dict(id_prefix="a/b"), dict(core_speed=0.0),
    dict(node_cores=0),
])
def test_workflow_jobs_rejects_bad_input_naming_it(bad):
    args = dict(workflow="montage", cores=8, scale=1.0) | bad
    with pytest.raises(InvalidInput) as e:
        workflow_jobs(**args)
    name = next(iter(bad))
    assert (name if name != "workflow" else "lammps") in str(e.value)


def test_unknown_stage_names_the_stages():
    with pytest.raises(InvalidInput, match="mProject"):
        stage_profile("montage", "mJPEG", 8, 1.0)


def test_paper_mix_has_the_papers_15_workflows_and_core_counts():
    jobs = paper_mix(1.0)
    by_wf: dict[str, list[Job]] = {}
    for j in jobs:
        by_wf.setdefault(j.workflow, []).append(j)
    assert len(by_wf) == 15
    cores = {}
    for wf_id, stage_jobs in by_wf.items():
        kind = stage_jobs[0].job_class.split("/")[0]
        cores.setdefault(kind, []).append(max(j.cores for j in stage_jobs))
        assert len(stage_jobs) == len(WORKFLOWS[kind].stages)
    assert {k: sorted(v) for k, v in cores.items()} == {
        "montage": [8, 16, 32, 64], "blast": [8, 16, 32, 64],
        "statistics": [8, 16, 32, 64], "synthetic": [16, 32, 64],
    }
    assert all(j.submit_time == 0.0 for j in jobs)
    assert len({j.job_id for j in jobs}) == len(jobs) == 46
    ids = {j.job_id for j in jobs}
    assert all(set(j.depends_on) <= ids for j in jobs)


def test_small_mix_fits_the_demo_machine_and_runs_about_a_minute():
    jobs = small_mix()
    kinds = {j.job_class.split("/")[0] for j in jobs}
    assert kinds == set(WORKFLOWS)
    assert all(1 <= j.cores <= 4 for j in jobs)
    for j in jobs:  # every job fits on the emulated nodes
        assert j.nodes <= DEMO_NODES and max(j.cores_per_node()) <= DEMO_NODE_CORES
    cpu = sum(stage_profile(j.job_class.split("/")[0], j.job_class.split("/")[1], j.cores,
                            DEMO_SCALE).cpu_s for j in jobs)
    assert 30 <= cpu <= 120, cpu  # CPU-seconds of work: about a minute on two cores
    assert len({j.job_id for j in jobs}) == len(jobs)


@pytest.mark.parametrize("workflow", list(WORKFLOWS))
def test_scale_005_runs_a_workflow_in_one_or_two_minutes_on_one_core(workflow):
    total = sum(p.runtime_s for p in workflow_profiles(workflow, 1, 0.05))
    assert 30 <= total <= 150, total
    # and the work shrinks with the scale
    assert sum(p.runtime_s for p in workflow_profiles(workflow, 1, 0.5)) > 8 * total


def test_profiles_match_the_papers_workload_character():
    def util(wf, stage):
        return stage_profile(wf, stage, 8, 1.0).cpu_util
    assert 0.2 <= util("montage", "mProject") <= 0.45          # I/O-bound
    assert util("blast", "blastall") >= 0.9                    # CPU-bound
    assert 0.08 <= util("statistics", "partial") <= 0.26       # message-bound
    assert util("synthetic", "compute") >= 0.95                # CPU- and memory-bound
    synth = stage_profile("synthetic", "compute", 16, 1.0)
    assert synth.mem_mb > 8000 and synth.mem_share >= 0.9
    assert stage_profile("statistics", "partial", 16, 1.0).mem_mb < 1000


def test_parallel_stages_speed_up_with_cores_sequential_ones_do_not():
    p8, p64 = (stage_profile("blast", "blastall", c, 1.0) for c in (8, 64))
    assert p64.runtime_s < p8.runtime_s / 4
    s8, s64 = (stage_profile("montage", "mAdd", c, 1.0) for c in (8, 64))
    assert s8.runtime_s == s64.runtime_s and s8.cores == s64.cores == 1


def test_slowdown_under_quota_cpu_bound_vs_io_bound():
    blast = stage_profile("blast", "blastall", 8, 1.0)
    montage = stage_profile("montage", "mProject", 8, 1.0)
    assert blast.slowdown(1.0) == pytest.approx(1.0)
    assert blast.slowdown(0.5) == pytest.approx(2.0, rel=0.05)
    assert montage.slowdown(0.5) < 1.05  # 40 % CPU: half the cores is enough
    assert montage.slowdown(0.2) > 1.5
    assert blast.runtime_under_quota(0.0) == math.inf
    with pytest.raises(InvalidInput):
        blast.runtime_under_quota(1.5)


def test_split_tasks_keeps_every_step_and_the_total():
    groups = get_workflow("montage").stage("mAdd").groups  # 3 + 3 + 4 tasks
    assert split_tasks(groups, None) == [3, 3, 4]
    for n in range(3, 40):
        counts = split_tasks(groups, n)
        assert sum(counts) == n and min(counts) >= 1
    with pytest.raises(InvalidInput, match="tasks"):
        split_tasks(groups, 2)


def test_walltime_and_file_sizes():
    assert walltime_request(100.0) == 175.0
    assert walltime_request(1.0) == 6.0
    assert file_bytes(8.0, 2, 1.0) == 4_000_000
    assert 1_000_000 < file_bytes(8.0, 2, 0.05) < 4_000_000  # shrinks slower than time
    assert file_bytes(0.001, 1, 0.001) == 1000  # tiny files stay as they are


def test_definitions_derive_from_the_embedded_wfcommons_summary():
    cats = {c["category"]: c for c in EMBEDDED["montage"]["categories"]}
    mproject = get_workflow("montage").stage("mProject").groups[0]
    assert mproject.tasks == TASKS_FACTOR["montage"] * cats["mProject"]["tasks"]
    assert mproject.task_s == cats["mProject"]["runtime_s"]
    assert mproject.cpu_frac == 0.40  # capped: the paper's Montage is I/O-bound
    assert get_workflow("montage").stage("mProject").groups[1].cpu_frac == pytest.approx(
        cats["mDiffFit"]["avg_cpu_pct"] / 100, abs=1e-3)
    blast = {c["category"]: c for c in EMBEDDED["blast"]["categories"]}
    blastall = get_workflow("blast").stage("blastall").groups[1]
    assert blastall.tasks == TASKS_FACTOR["blast"] * blast["blastall"]["tasks"]
    assert blastall.task_s == pytest.approx(BLAST_TASK_TIME_FACTOR * blast["blastall"]["runtime_s"])
    # sequential categories keep the instance's per-task time
    assert get_workflow("montage").stage("mAdd").groups[1].task_s == cats["mAdd"]["runtime_s"]
    assert blastall.cpu_frac == pytest.approx(blast["blastall"]["avg_cpu_pct"] / 100, abs=1e-3)
    # every measured category appears in exactly one stage, in DAG order
    for wf in ("montage", "blast"):
        names = [g.name for s in get_workflow(wf).stages for g in s.groups]
        assert names == [c["category"] for c in EMBEDDED[wf]["categories"]]


@pytest.mark.parametrize("workflow", list(INSTANCE_FILES))
def test_embedded_summary_matches_the_bundled_data(workflow, bundled_data):
    path = bundled_data / "workflows" / INSTANCE_FILES[workflow]
    assert summarize_instance(path) == EMBEDDED[workflow]


def test_summarize_instance_reads_a_small_wfformat_file(tmp_path):
    import json
    doc = {"workflow": {"makespanInSeconds": 10, "tasks": [
        {"name": "a_ID1", "category": "a", "runtimeInSeconds": 2.0, "avgCPU": 50.0,
         "memoryInBytes": 2e6, "parents": [], "files": [
             {"link": "output", "name": "x", "sizeInBytes": 1_000_000}]},
        {"name": "b_ID2", "category": "b", "runtimeInSeconds": 4.0, "avgCPU": 100.0,
         "memory": 1000, "parents": ["a_ID1"], "files": [
             {"link": "input", "name": "x", "sizeInBytes": 1_000_000}]},
    ]}}
    p = tmp_path / "wf.json"
    p.write_text(json.dumps(doc))
    s = summarize_instance(p)
    assert [c["category"] for c in s["categories"]] == ["a", "b"]
    assert s["categories"][1]["parents"] == ["a"]
    assert s["categories"][0]["mb_out"] == 1.0 and s["categories"][1]["memory_mb"] == 1.0
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="bad.json"):
        summarize_instance(tmp_path / "bad.json")


def test_the_papers_geometry_holds_the_workflows_cores_for_every_stage_and_runs_the_same_programs():
    one = small_mix(tag="g")
    held = small_mix(tag="g", sequential_cores="workflow")
    assert [j.job_id for j in one] == [j.job_id for j in held]
    sizes = dict(DEMO_CORES)
    for a, b in zip(one, held):
        wf = a.job_class.split("/")[0]
        assert b.cores == sizes[wf]                          # every stage: the workflow's cores
        assert a.command == b.command and a.walltime_s == b.walltime_s and a.mem_mb == b.mem_mb
        if a.stage_type is StageType.SEQUENTIAL:
            assert a.cores == 1 < b.cores
    assert any(a.cores < b.cores for a, b in zip(one, held))
    with pytest.raises(InvalidInput, match="sequential_cores must be one of one, workflow, got 'all'"):
        small_mix(sequential_cores="all")
