"""testbed.report on plain data: runs to and from JSON, ratios, the co-located slowdown, the
side-by-side comparison, the tables and the plots (simulated runs stand in for measured
ones here; the real run is in test_testbed_docker.py)."""

from __future__ import annotations

import json

import pytest

from coscheduler.experiments import paper as paper_exp
from coscheduler.experiments.paper import PaperRun, StageRecord
from testbed import report
from testbed.compose import TestbedSpec
from testbed.experiment import WORKLOADS, check_fits, get_workload, predict, stages
from coscheduler.model import InvalidInput

SPEC = TestbedSpec(instance="t", nodes=2, cpus=8, cpu_limit=1.0)


@pytest.fixture(scope="module")
def sim_runs():
    return predict(get_workload("paper-small"), SPEC, 0.05, ["space-sharing", "static", "asax"])


def test_paper_small_is_the_papers_mix_at_an_eighth_of_the_cores():
    w = get_workload("paper-small")
    mix = w.mix()
    assert len(mix) == 15 and w.largest_job() == 8
    assert sorted(c for k, c in mix if k == "montage") == [1, 2, 4, 8]
    assert sorted(c for k, c in mix if k == "synthetic") == [2, 4, 8]
    assert w.paper_cores(SPEC) == 128                      # 2 x 8 x 8: the paper's load 4x
    assert w.paper_cores(TestbedSpec(instance="t", nodes=1, cpus=8)) == 64
    assert w.paper_cores(TestbedSpec(instance="t", nodes=3, cpus=8)) is None
    with pytest.raises(InvalidInput, match="--cpus 8"):
        check_fits(w, TestbedSpec(instance="t", nodes=4, cpus=4))
    with pytest.raises(InvalidInput, match="unknown testbed workload"):
        get_workload("paper-huge")
    assert set(WORKLOADS) == {"paper-small"}


def test_testbed_stages_run_the_simulators_jobs_with_slower_cores():
    w = get_workload("paper-small")
    st = stages(w, 0.1, "r0", cpu_per_core=0.125)
    sim = paper_exp.paper_workload(0.1, "r0", "one", mix=w.mix())
    assert [s.job.job_id for s in st] == [s.job.job_id for s in sim]
    assert [s.job.cores for s in st] == [s.job.cores for s in sim]
    assert [s.profile for s in st] == [s.profile for s in sim]
    cmd = st[0].job.command
    assert cmd[cmd.index("--core-speed") + 1] == "0.125"
    assert "--core-speed" not in sim[0].job.command


def test_runs_survive_json(sim_runs):
    for r in sim_runs:
        back = report.run_from_json(json.loads(json.dumps(report.run_to_json(r))))
        assert back.as_json() == r.as_json()
        assert back.stages == r.stages


def test_ratios_and_comparison(sim_runs):
    summary = paper_exp.summarise(sim_runs)
    slow = report.colocated_slowdown(sim_runs)
    assert slow["space-sharing"] is None              # nothing co-located
    assert slow["static"] is not None and slow["static"] >= -0.05
    r = report.ratios(summary, slow)
    assert r["space-sharing"]["mean_wait_s"] == 1.0
    rows = report.compare(r, r)
    assert all(row["difference"] in (0.0, None) for row in rows)
    assert not any(row["flagged"] for row in rows)
    doubled = {p: {**m, "mean_wait_s": (m["mean_wait_s"] or 0) * 1.3} for p, m in r.items()}
    flagged = [row for row in report.compare(doubled, r) if row["flagged"]]
    assert {row["metric"] for row in flagged} == {"mean_wait_s"}
    assert all(row["difference"] == pytest.approx(0.3) for row in flagged)


def test_stage_key_strips_the_run_tag():
    assert report.stage_key("static-r0.montage-1.mProject") == "montage-1.mProject"
    assert report.stage_key("x") == "x"


def test_colocated_slowdown_uses_the_same_stage_under_space_sharing():
    def run(policy, recs):
        return PaperRun(cores=16, policy=policy, repeat=0, seed=0, scale=1.0, learning=None,
                        makespan_s=1, mean_wait_s=0, mean_response_s=1, cpu_util=0.5,
                        cluster_util=0.5, busy_core_seconds=1, held_core_seconds=2,
                        peak_held_cores=1, coallocations=0, guest_quotas=[], timeouts=0,
                        overruns=0, failed=0, completed=len(recs), workflow_runtime_s={},
                        stages=recs)

    def rec(jid, start, end, host=None):
        return StageRecord(jid, "w", 1, (), 0.0, 0.0, start, end, "completed", host)

    base = run("space-sharing", [rec("a.w.s1", 0, 10), rec("a.w.s2", 0, 20), rec("a.w.s3", 0, 5)])
    st = run("static", [rec("b.w.s1", 0, 12), rec("b.w.s2", 0, 30, host="b.w.s1"),
                        rec("b.w.s3", 0, 50)])                  # s3 alone: not counted
    out = report.colocated_slowdown([base, st])
    assert out["static"] == pytest.approx(((12 / 10 - 1) + (30 / 20 - 1)) / 2)
    alone = report.alone_runtimes([base, st])
    assert report.run_slowdowns(st, alone, "host") == pytest.approx([12 / 10 - 1])
    assert report.run_slowdowns(st, alone, "guest") == pytest.approx([30 / 20 - 1])


def test_tables_show_the_papers_figures_for_the_scaled_size(sim_runs):
    text = report.tables(paper_exp.summarise(sim_runs), 16, 128, "TITLE")
    assert text.startswith("TITLE\n16 cores (the paper's 128 cores scaled down, load 4x)")
    assert "1.5" in text      # the paper's mean wait under Slurm at 128 cores (h)


def test_the_whole_report_and_its_plots(tmp_path, sim_runs):
    data = {"setup": {"workload": "paper-small", "nodes": 2, "cpus": 8, "cpu_limit": 1.0,
                      "cores": 16, "paper_cores": 128, "scale": 0.05, "seed": 0,
                      "suite": "bookworm"},
            "runs": [report.run_to_json(r) for r in sim_runs],
            "load_average": {"start": [1.0, 1.0, 1.0], "end": [2.0, 1.5, 1.0]}}
    (tmp_path / "run.json").write_text(json.dumps(data))
    rep = report.build(report.load(tmp_path))
    # The "testbed" here is the simulator itself: every ratio agrees.
    assert not any(row["flagged"] for row in rep["comparison"])
    out = report.text(rep)
    assert "TESTBED (real Slurm in containers)" in out and "SIMULATOR" in out
    assert "testbed vs simulator" in out and "load average" in out
    paths = report.write_plots(rep["runs"], rep["sim_runs"], tmp_path / "plots", "t")
    assert [p.name for p in paths][:3] == ["makespan.png", "mean-response.png", "cpu-util.png"]
    assert {p.name for p in paths[3:]} == {f"timeline-{r.policy}.png" for r in sim_runs}
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_load_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="cosched testbed run"):
        report.load(tmp_path)
    (tmp_path / "run.json").write_text("{\"x\": 1}")
    with pytest.raises(ValueError, match="not a testbed run.json"):
        report.load(tmp_path)
    (tmp_path / "run.json").write_text("{broken")
    with pytest.raises(ValueError, match="not a testbed run.json"):
        report.load(tmp_path / "run.json")


def test_measure_run_reproduces_the_simulators_own_measurement():
    """What the testbed's runner hands to measure_run (history, starts, start quotas, busy
    core-seconds) gives back the simulator's figures when fed the simulator's run."""
    from types import SimpleNamespace

    from coscheduler.model import Outcome

    w = get_workload("paper-small")
    (sim,) = predict(w, SPEC, 0.05, ["static"])
    st = stages(w, 0.05, "c16-r0", cpu_per_core=0.125)
    by_id = {r.job_id: r for r in sim.stages}
    assert set(by_id) == {s.job.job_id for s in st}
    recorded = SimpleNamespace(
        history=[Outcome(r.job_id, r.start, r.end, r.state) for r in sim.stages],
        starts=[(r.start, r.job_id, r.host) for r in sim.stages],
        start_quotas={r.job_id: 1.0 for r in sim.stages},
        busy_core_seconds=sim.busy_core_seconds)
    got = paper_exp.measure_run(st, recorded, 16, "static", 0, 0, 0.05, None)
    for key in ("makespan_s", "mean_wait_s", "mean_response_s", "cpu_util", "coallocations",
                "completed", "failed"):
        assert getattr(got, key) == pytest.approx(getattr(sim, key)), key


def test_the_runners_backend_counts_a_stages_use_at_exit_in_its_emulated_cores(tmp_path):
    """The testbed's emulated cores are a fraction of a real CPU (cluster.json's
    cpu_per_core); a stage too short to be sampled is learned from the job wrapper's record,
    which must be in the agents' unit: a busy stage reads 100 %, not cpu_per_core x 100."""
    from slurm_plugin.commands import SlurmCommands
    from slurm_plugin.parse import SlurmJob
    from testbed.runner import slurm_backend

    usage = tmp_path / "usage"
    usage.mkdir()
    cluster = {"cpu_per_core": 0.125,
               "nodes": {"c1": {"url": "http://127.0.0.1:9"}, "c2": {"url": "http://127.0.0.1:9"}}}
    b = slurm_backend(SlurmCommands(str(tmp_path / "slurm.conf")), cluster, usage,
                      tmp_path / "run.backend.json")
    # 4 emulated cores x 0.125 real CPU, busy for 10 s: 5 CPU-seconds
    (usage / "7.json").write_text(json.dumps({"start": 100.0, "end": 110.0, "cpu_s": 5.0}))
    o = b._outcome(SlurmJob(7, state="COMPLETED", cpus=4, start_time=100.0, end_time=110.0))
    assert o.cpu_percent == pytest.approx(100.0)
