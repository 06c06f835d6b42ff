"""The command line of the learned schedulers: models list, rl: policies, inspectors,
simulate learned (on the shipped models), train's clear errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.data import swf_dir
from coscheduler.learned.registry import list_models

from test_learned_models import inspector_model, rl_model
from coscheduler.learned.modelfile import save_model

SMALL = Path(__file__).parent / "fixtures" / "swf" / "small.swf"
SWF = swf_dir()   # the bundled traces (coscheduler/data/swf)


def run(*args):
    result = CliRunner().invoke(main, list(args))
    return result


def test_models_list_json_shape():
    r = run("models", "list", "--all", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert rows, "at least one model is shipped"
    for row in rows:
        assert {"name", "kind", "trace", "metric", "backfill", "path"} <= set(row)
        assert row["kind"] in ("rlscheduler", "inspector", "mrsch", "scalar-rl"), row
        assert Path(row["path"]).stat().st_size < 1_000_000
    # every model file of the package is listed and loads (learned and multi-resource)
    from coscheduler.resources import resource_dir
    files = {p.stem for pkg in ("coscheduler.learned", "coscheduler.multi")
             for p in resource_dir(pkg, "models").glob("*.model")}
    assert {row["name"] for row in rows} == files
    assert {row["kind"] for row in rows} == {"rlscheduler", "inspector", "mrsch", "scalar-rl"}
    assert run("models", "list").exit_code == 0


def test_simulate_swf_reports_a_learned_policy_under_its_given_name(tmp_path):
    # a shipped model on the trace of the machine it was trained for (another machine's
    # trace is refused: tests/test_learned_machine.py)
    name = next(r["name"] for r in list_models()
                if r["kind"] == "rlscheduler" and r["trace"] == "lublin_256.swf")
    path = save_model(rl_model(2), tmp_path / "mine.model")
    ins = save_model(inspector_model(-50.0, "SJF"), tmp_path / "ins.model")
    r = run("simulate", "swf", str(swf_dir() / "lublin_256.swf"), "--jobs", "256", "--policy",
            f"SJF,rl:{name},rl:{path}", "--inspector", str(ins), "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["policy"] for o in out] == ["SJF", f"rl:{name}", f"rl:{path}",
                                          "SJF+inspector:ins"]
    assert out[3]["rejections"] > 0 and "rejections" not in out[0]
    for o in out:
        assert o["jobs"] == out[0]["jobs"]


def test_simulate_swf_takes_the_hand_written_inspector_over_any_heuristic():
    r = run("simulate", "swf", str(SMALL), "--policy", "F1", "--inspector", "reject-blocked:f1",
            "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["policy"] for o in out] == ["F1", "F1+reject-blocked"]
    assert out[1]["jobs"] == out[0]["jobs"] and "rejections" in out[1]
    r = run("simulate", "swf", str(SMALL), "--inspector", "reject-blocked:nosuch")
    assert r.exit_code == 2 and "unknown queue policy 'nosuch'" in r.stderr
    assert "Traceback" not in r.stderr


def test_inspector_budget_measures_the_rule_per_budget_and_chooses_on_validation():
    """`simulate inspector-budget`: budget 0 is the base policy (the same figures); the
    choice is the budget with the lowest validation bsld, whatever the held-out figures;
    a larger budget is taken by `simulate swf` as reject-blocked:BASE:BUDGET."""
    trace = swf_dir() / "lublin_256.swf"
    r = run("simulate", "inspector-budget", "--trace", str(trace), "--base", "SJF",
            "--budgets", "1000,0", "--json")
    assert r.exit_code == 0, r.stderr
    (t,) = json.loads(r.stdout)["tables"]
    assert t["base"] == "SJF" and [b["budget"] for b in t["budgets"]] == [0, 1000]
    zero, large = t["budgets"]
    assert zero["validation"]["bsld"] == t["base_validation"]["bsld"]
    assert zero["heldout"]["bsld"] == t["base_heldout"]["bsld"]
    assert len(t["validation_windows"]) == 24 and len(t["heldout_windows"]) == 10
    assert max(t["validation_windows"]) < min(t["heldout_windows"])
    best = min(t["budgets"], key=lambda b: b["validation"]["bsld"])["budget"]
    assert t["chosen"] == best
    r = run("simulate", "swf", str(SMALL), "--policy", "SJF", "--inspector",
            "reject-blocked:SJF:1000", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)[1]["policy"] == "SJF+reject-blocked/1000"
    for args, what in ((("--budgets", "ten"), "integers separated by commas"),
                       (("--budgets", "-1"), "from 0 to 100000"),
                       (("--base", "nosuch"), "nosuch")):
        r = run("simulate", "inspector-budget", "--trace", str(trace), *args)
        assert r.exit_code != 0 and what in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_bad_learned_policies_get_clear_errors(tmp_path):
    r = run("simulate", "swf", str(SMALL), "--policy", "rl:nosuchmodel")
    assert r.exit_code == 2 and "unknown model 'nosuchmodel'; shipped models:" in r.stderr
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    r = run("simulate", "swf", str(SMALL), "--policy", f"rl:{junk}")
    assert r.exit_code == 2 and "junk.model: not a coscheduler model file" in r.stderr
    ins = save_model(inspector_model(), tmp_path / "ins.model")
    r = run("simulate", "swf", str(SMALL), "--policy", f"rl:{ins}")
    assert r.exit_code == 2 and "is a inspector model, but a rlscheduler model is needed" in r.stderr
    r = run("simulate", "swf", str(SMALL), "--inspector", str(tmp_path / "none.model"))
    assert r.exit_code == 2 and "model file not found" in r.stderr


def test_simulate_learned_puts_models_beside_heuristics(tmp_path):
    rows = [r for r in list_models() if r["trace"] == "lublin_256.swf"]
    names = [r["name"] for r in rows][:2]
    r = run("simulate", "learned", "--traces", "lublin_256.swf", "--models", ",".join(names),
            "--out", str(tmp_path / "rep"), "--json")
    assert r.exit_code == 0, r.stderr
    rep = json.loads(r.stdout)
    table = rep["traces"]["lublin_256.swf"]["mean_bsld"]
    assert abs(table["none"]["FCFS"] - 7273.8) < 0.05
    for name in names:
        row = next(x for x in rows if x["name"] == name)
        if row["kind"] == "rlscheduler":
            assert f"rl:{name}" in table[row["backfill"]]
    assert all(Path(p).stat().st_size > 1000 for p in rep["curves"])
    # each window's bsld per policy, their mean the table's, and a plot per backfilling
    per_window = rep["traces"]["lublin_256.swf"]["window_bsld"]["none"]
    assert len(per_window["FCFS"]) == len(rep["traces"]["lublin_256.swf"]["windows"]) == 10
    assert abs(sum(per_window["FCFS"]) / 10 - table["none"]["FCFS"]) < 1e-6
    assert sorted(Path(p).name for p in rep["window_plots"]) == \
        ["windows-lublin_256-easy.png", "windows-lublin_256-none.png"]
    assert all(Path(p).stat().st_size > 1000 for p in rep["window_plots"])
    assert (tmp_path / "rep" / "report.json").is_file()
    text = run("simulate", "learned", "--traces", "lublin_256.swf", "--models", names[0],
               "--out", str(tmp_path / "rep2"))
    assert text.exit_code == 0 and "seed-1 windows" in text.stdout


def test_train_command_and_its_checkpoint_check(tmp_path):
    # the real command in a child process (JAX must not load in the test process)
    import subprocess
    import sys

    from learned_helpers import write_stuck_shorts_trace

    trace = write_stuck_shorts_trace(tmp_path / "stuck.swf")
    out = tmp_path / "m.model"
    args = [sys.executable, "-m", "coscheduler.cli", "train", "rlscheduler", "--trace",
            str(trace), "--epochs", "1", "--trajectories", "2", "--no-eval", "--out", str(out)]
    r = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["epochs"] == 1 and Path(summary["model"]).is_file()
    assert summary["curve_png"] and Path(summary["curve_png"]).is_file()
    r = subprocess.run(args + ["--seed", "5"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and "a checkpoint with other settings (seed)" in r.stderr


def test_train_options_sequence_imitate_rounds_and_start_reject_reach_the_model(tmp_path):
    import subprocess
    import sys

    from coscheduler.learned.modelfile import load_model
    from learned_helpers import write_stuck_shorts_trace

    trace = write_stuck_shorts_trace(tmp_path / "stuck.swf")
    common = [sys.executable, "-m", "coscheduler.cli", "train"]
    out = tmp_path / "seq.model"
    r = subprocess.run(common + ["rlscheduler", "--trace", str(trace), "--epochs", "1",
                                 "--trajectories", "2", "--sequence", "64", "--no-eval",
                                 "--imitate", "sjf", "--imitate-rounds", "2",
                                 "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    header = load_model(out).header
    assert header["sequence_jobs"] == 64
    # two cloning rounds (one epoch alone would give one)
    assert header["imitated"] == "SJF"
    assert [r["imitation"] for r in header["curve"] if "imitation" in r] == [1, 2]
    report = json.loads(out.with_name("seq.report.json").read_text())
    assert report["validation_windows"]["jobs"] == 128   # twice the sequence
    out = tmp_path / "insp.model"
    r = subprocess.run(common + ["inspector", "--trace", str(trace), "--base", "sjf",
                                 "--epochs", "1", "--trajectories", "2", "--sequence", "64",
                                 "--start-reject", "0.05", "--no-eval", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert load_model(out).header["start_reject"] == 0.05
    r = subprocess.run(common + ["inspector", "--trace", str(trace), "--base", "sjf",
                                 "--start-reject", "1.5", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "--start-reject" in r.stderr


def test_relative_reward_divides_by_sjf_on_the_same_sequence(tmp_path):
    import subprocess
    import sys

    from coscheduler.learned.train import _load_checkpoint, checkpoint_path
    from coscheduler.learned.windows import train_limit
    from coscheduler.policies.queue import get_policy
    from coscheduler.sim.cluster import Cluster
    from coscheduler.sim.engine import simulate
    from coscheduler.sim.metrics import compute_metrics
    from coscheduler.sim.replay import window as trace_window
    from coscheduler.sim.swf import read_swf
    from learned_helpers import write_stuck_shorts_trace

    trace_path = write_stuck_shorts_trace(tmp_path / "stuck.swf")
    out = tmp_path / "rel.model"
    common = [sys.executable, "-m", "coscheduler.cli", "train", "rlscheduler", "--trace",
              str(trace_path), "--epochs", "1", "--trajectories", "1", "--sequence", "64",
              "--imitate", "none", "--no-eval", "--relative-reward", "--out", str(out)]
    r = subprocess.run(common, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    row = next(x for x in _load_checkpoint(checkpoint_path(out))[0]["curve"] if x["epoch"] == 1)
    divisor = -row["mean_value"] / row["mean_reward"]   # the one sequence's SJF bsld
    trace = read_swf(trace_path)
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    sjf = set()
    for start in range(train_limit(len(trace.jobs), sequence=64) - 64 + 1):
        jobs = trace_window(trace.jobs, start, 64)
        sched = simulate(jobs, cluster, get_policy("SJF"), "none")
        sjf.add(round(compute_metrics(jobs, sched.start, sched.end, trace.max_procs).avg_bsld, 9))
    assert round(divisor, 9) in sjf and divisor > 1.5   # not the absolute reward (divisor 1)
    r = subprocess.run(common + ["--metric", "util", "--fresh"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 1 and "relative reward is for RLScheduler with the bsld" in r.stderr


def test_resolve_policy_gives_heuristics_or_scorers(tmp_path):
    from coscheduler.learned.registry import resolve_policy
    from coscheduler.policies.queue import QueuePolicy
    from coscheduler.policies.selection import order_by_scores

    assert isinstance(resolve_policy("sjf"), QueuePolicy)
    path = save_model(rl_model(1), tmp_path / "x.model")
    scorer = resolve_policy(f"rl:{path}")
    assert scorer.kind == "scorer" and scorer.name == f"rl:{path}"
    order, scores = order_by_scores(scorer, 100.0, [(0, 1, 50), (5, 2, 500), (9, 1, 10)], 2, 4)
    assert sorted(order) == [0, 1, 2] and list(scores) == sorted(scores, reverse=True)


def test_slurm_priority_and_run_take_learned_policies(tmp_path):
    r = run("slurm", "priority", "--policy", "rl:nosuchmodel", "--once", "--slurm-conf",
            str(tmp_path / "slurm.conf"))
    assert r.exit_code == 2 and "unknown model 'nosuchmodel'" in r.stderr
    r = run("run", "--backend", "slurm", "--queue-policy", "rl:nosuchmodel", "--slurm-conf",
            str(tmp_path / "slurm.conf"), "--max-passes", "1")
    assert r.exit_code == 2 and "unknown model 'nosuchmodel'" in r.stderr


def test_simulate_paper_takes_a_learned_queue_policy(tmp_path):
    path = save_model(rl_model(4), tmp_path / "q.model")
    r = run("simulate", "paper", "--cores", "64", "--policies", "space-sharing", "--repeat", "1",
            "--scale", "0.05", "--queue-policy", f"rl:{path}", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["settings"]["queue_policy"] == f"rl:{path}"
    assert out["runs"][0]["completed"] == 46
    ins = save_model(inspector_model(50.0, "SJF"), tmp_path / "i.model")
    r = run("simulate", "paper", "--cores", "64", "--policies", "space-sharing", "--repeat", "1",
            "--scale", "0.05", "--inspector", str(ins), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["settings"]["queue_policy"].startswith("SJF+inspector:")
    r = run("simulate", "paper", "--queue-policy", "rl:nosuchmodel")
    assert r.exit_code == 2 and "unknown model" in r.stderr


def test_simulate_learned_in_parallel_gives_the_serial_report():
    # one task of each kind: lublin's tables with its model, an HPC2N model on lublin's
    # windows (cross-trace), and an inspector of lublin
    from coscheduler.learned.report import build_report

    rows = list_models()
    pick = [next(r for r in rows if r["trace"] == "lublin_256.swf" and r["kind"] == "rlscheduler"),
            next(r for r in rows if r["trace"] != "lublin_256.swf" and r["kind"] == "rlscheduler"),
            next(r for r in rows if r["trace"] == "lublin_256.swf" and r["kind"] == "inspector")]
    traces = [swf_dir() / "lublin_256.swf"]
    done: list[str] = []
    serial = build_report(traces, pick, workers=1)
    parallel = build_report(traces, pick, workers=2, progress=done.append)
    serial.pop("seconds"), parallel.pop("seconds")
    assert json.dumps(parallel) == json.dumps(serial)
    assert serial["cross_trace"][pick[1]["backfill"]][f"rl:{pick[1]['name']}"]["lublin_256.swf"] > 0
    assert len(serial["inspectors"]) == 1
    # beside each inspector, the hand-written rule over its base on the same windows
    row = serial["inspectors"][0]
    assert row["rule_bsld"] > 0 and -1 < row["rule_improvement"] < 1
    assert done == ["lublin_256.swf, backfill none", "lublin_256.swf, backfill easy",
                    f"rl:{pick[1]['name']} on lublin_256.swf", f"inspector {pick[2]['name']}"]


def _tiny_stuck_model(tmp_path):
    """An untrained RLScheduler model for the stuck-shorts trace with 512-job sequences,
    saved, and its row as ``list_models`` gives one."""
    model = rl_model(seed=3, trace="stuck.swf", backfill="none", sequence_jobs=512)
    save_model(model, tmp_path / "tiny.model")
    return model, {"name": "tiny", "kind": "rlscheduler", "trace": "stuck.swf",
                   "backfill": "none", "path": str(tmp_path / "tiny.model")}


def test_simulate_learned_later_windows_hold_only_unseen_jobs(tmp_path):
    # a tiny trace (2,100 jobs) and a model "trained" on it with 512-job sequences: its
    # training part then ends at job 513, not at 20 % (420); the later windows start after
    # both, the seed-1 ones need not
    import statistics

    from coscheduler.learned.evaluate import window_bsld
    from coscheduler.learned.gate import validation_starts
    from coscheduler.learned.report import build_report
    from coscheduler.learned.selectors import LearnedScorer
    from coscheduler.learned.windows import train_limit
    from coscheduler.policies.queue import get_policy
    from coscheduler.sim.swf import read_swf
    from learned_helpers import write_stuck_shorts_trace

    trace_path = write_stuck_shorts_trace(tmp_path / "stuck.swf", cycles=300)
    trace = read_swf(trace_path)
    n = len(trace.jobs)
    assert n == 2100 and train_limit(n) == 420 and train_limit(n, sequence=512) == 513
    model, row = _tiny_stuck_model(tmp_path)
    rep = build_report([trace_path], [row], workers=1, windows="later")
    entry = rep["traces"]["stuck.swf"]
    assert rep["window_set"] == "later" and entry["first_heldout_job"] == 513
    starts = entry["windows"]
    assert len(starts) == 10 and min(starts) >= 513 and max(starts) + 1024 <= n
    # disjoint from the model's validation windows (and so from the gate's)
    val, jobs = validation_starts(n, 0, 512)
    assert max(val) + jobs <= 513
    # the figures are the model's and the heuristics' own replays of exactly those windows
    scorer = LearnedScorer(model, name="rl:tiny")
    assert entry["mean_bsld"]["none"]["rl:tiny"] == \
        statistics.fmean(window_bsld(trace, scorer, "none", starts))
    assert entry["mean_bsld"]["none"]["F1"] == \
        statistics.fmean(window_bsld(trace, get_policy("F1"), "none", starts))
    seed1 = build_report([trace_path], [row], workers=1)
    assert seed1["window_set"] == "seed1" and seed1["traces"]["stuck.swf"]["windows"] != starts
    # the command: the same windows, the verdict against the 5 % target, a plot per backfilling
    r = run("simulate", "learned", "--traces", str(trace_path), "--models", "lublin256",
            "--windows", "later", "--workers", "1", "--out", str(tmp_path / "rep"))
    assert r.exit_code == 0, r.stderr
    assert "ten later (held-out) windows" in r.stdout and "from job 420 of 2100" in r.stdout
    assert (tmp_path / "rep" / "windows-stuck-none-later.png").is_file()
    r = run("simulate", "learned", "--traces", str(trace_path), "--windows", "unseen")
    assert r.exit_code == 2 and "--windows" in r.stderr


def test_simulate_learned_heldout_windows_are_the_gates_every_whole_window(tmp_path):
    # --windows heldout: every whole 1,024-job window after the training part, back to back,
    # exactly the release gate's held-out check (a 4,200-job trace, 512-job sequences: the
    # training part ends at job 840, then three whole windows)
    import statistics

    from coscheduler.learned.evaluate import window_bsld
    from coscheduler.learned.gate import heldout_windows
    from coscheduler.learned.report import build_report
    from coscheduler.learned.selectors import LearnedScorer
    from coscheduler.sim.swf import read_swf
    from learned_helpers import write_stuck_shorts_trace

    trace_path = write_stuck_shorts_trace(tmp_path / "stuck.swf", cycles=600)
    trace = read_swf(trace_path)
    n = len(trace.jobs)
    assert n == 4200
    model, row = _tiny_stuck_model(tmp_path)
    rep = build_report([trace_path], [row], workers=1, windows="heldout")
    entry = rep["traces"]["stuck.swf"]
    assert rep["window_set"] == "heldout"
    assert entry["windows"] == [840, 1864, 2888] == heldout_windows(n, 512)[0]
    scorer = LearnedScorer(model, name="rl:tiny")
    assert entry["mean_bsld"]["none"]["rl:tiny"] == \
        statistics.fmean(window_bsld(trace, scorer, "none", entry["windows"]))
    r = run("simulate", "learned", "--traces", str(trace_path), "--models", "lublin256",
            "--windows", "heldout", "--workers", "1", "--out", str(tmp_path / "rep"))
    assert r.exit_code == 0, r.stderr
    assert "every one of the held-out windows of 1,024 jobs (3)" in r.stdout
    assert "starts 840, 1864, 2888" in r.stdout
    assert (tmp_path / "rep" / "windows-stuck-none-heldout.png").is_file()
