"""``cosched workload``: list, show, mix and run-stage through the real command group."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.progress import read_progress


def invoke(*args: str):
    return CliRunner().invoke(main, ["workload", *args])


def test_list_names_every_workflow_and_stage():
    res = invoke("list", "--json")
    assert res.exit_code == 0, res.output
    rows = {r["workflow"]: r for r in json.loads(res.output)}
    assert set(rows) == {"montage", "blast", "statistics", "synthetic"}
    assert [s["stage_type"] for s in rows["montage"]["stages"]] == [
        "parallel", "sequential", "parallel", "sequential"]
    assert [s["stage_type"] for s in rows["blast"]["stages"]] == ["parallel", "sequential"]
    assert sorted(s["stage_type"] for s in rows["statistics"]["stages"]) == [
        "parallel", "parallel", "sequential", "sequential"]
    assert [s["stage_type"] for s in rows["synthetic"]["stages"]] == ["sequential", "parallel"]
    text = invoke("list")
    assert "mProject" in text.output and "parallel" in text.output


def test_show_prints_the_stage_jobs_with_profiles():
    res = invoke("show", "blast", "--cores", "16", "--scale", "0.05", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["workflow"] == "blast" and doc["cores"] == 16
    first, second = doc["stages"]
    assert first["job"]["cores"] == 16 and second["job"]["cores"] == 1
    assert second["job"]["depends_on"] == [first["job"]["job_id"]]
    assert first["cpu_util"] > 0.8 and first["walltime_s"] > first["runtime_s"]
    table = invoke("show", "montage", "--cores", "4")
    assert table.exit_code == 0 and "montage-4.mProject" in table.output


def test_show_rejects_an_unknown_workflow_with_the_choices():
    res = invoke("show", "lammps")
    assert res.exit_code == 2
    assert "lammps" in res.output and "montage" in res.output


def test_mix_lists_the_paper_and_demo_mixes():
    paper = json.loads(invoke("mix", "paper", "--json").output)
    assert len(paper) == 46 and len({j["workflow"] for j in paper}) == 15
    small = invoke("mix", "small")
    assert small.exit_code == 0 and "4 workflows" in small.output


def test_run_stage_runs_for_real_and_reports(tmp_path):
    progress = tmp_path / "p.json"
    res = invoke("run-stage", "--workflow", "synthetic", "--stage", "compute", "--tasks", "4",
                 "--workers", "2", "--scale", "0.002", "--workdir", str(tmp_path / "w"),
                 "--progress-file", str(progress), "--json")
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    assert rep["tasks"] == 4 and rep["workers"] == 2 and rep["cpu_s"] > 0
    p = read_progress(progress)
    assert (p.done, p.total) == (4, 4)


def test_run_stage_runs_a_sequential_stage_on_one_worker(tmp_path):
    res = invoke("run-stage", "--workflow", "statistics", "--stage", "merge", "--tasks", "2",
                 "--workers", "4", "--scale", "0.002", "--workdir", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert "sequential: running 1 worker" in res.output and "on 1 workers" in res.output


def test_show_measure_runs_the_stages_and_reports_beside_the_profile():
    res = invoke("show", "synthetic", "--cores", "1", "--scale", "0.0005", "--measure", "--json")
    assert res.exit_code == 0, res.output
    stages = json.loads(res.output)["stages"]
    assert [s["stage"] for s in stages] == ["load", "compute"]
    for s in stages:
        assert s["measured"]["tasks"] == s["tasks"] and s["measured"]["cpu_s"] >= 0
    # The load is a few milliseconds at this scale (it is 1 % of Synthetic's time); the
    # compute stage's CPU time shows.
    assert stages[1]["measured"]["cpu_s"] > 0
