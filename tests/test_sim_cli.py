"""`cosched simulate swf` and `cosched bench simulator` through click's test runner."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from coscheduler.cli import main
from coscheduler.cli import progress_bar

SMALL = str(FIXTURES / "swf" / "small.swf")
BAD = str(FIXTURES / "swf" / "bad.swf")


def cosched(*args):
    return CliRunner().invoke(main, list(args))


def test_json_single_policy_is_one_object():
    result = cosched("simulate", "swf", SMALL, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # notes go to stderr, stdout is pure JSON
    assert out["policy"] == "FCFS" and out["backfill"] == "none" and out["jobs"] == 4
    assert out["avg_wait"] == pytest.approx(63.75)  # see test_sim_metrics for the hand sums
    assert out["makespan"] == 145.0
    assert "4 jobs read" in result.stderr


def test_json_several_policies_is_a_list():
    result = cosched("simulate", "swf", SMALL, "--policy", "fcfs,SJF,wfp3", "--backfill",
                     "easy", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [o["policy"] for o in out] == ["FCFS", "SJF", "WFP3"]
    assert {o["backfill"] for o in out} == {"easy"}


def test_table_compares_policies():
    result = cosched("simulate", "swf", SMALL, "--policy", "FCFS,SAF")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["policy", "backfill", "jobs", "avg"]
    assert lines[2].split()[:3] == ["FCFS", "none", "4"]
    assert lines[3].split()[:3] == ["SAF", "none", "4"]
    assert lines[2].split()[3] == "3.80"  # mean bounded slowdown by hand: 15.2083 / 4


def test_window_options():
    result = cosched("simulate", "swf", SMALL, "--start-index", "1", "--jobs", "2", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["jobs"] == 2 and out["makespan"] == 45.0


def test_window_past_the_end_is_a_clean_error():
    result = cosched("simulate", "swf", SMALL, "--start-index", "3", "--jobs", "5")
    assert result.exit_code == 1
    assert "Error: window 3..7 runs past the trace's last job (3)" in result.stderr
    assert "Traceback" not in result.output


def test_malformed_line_is_a_clean_error_with_file_and_line():
    result = cosched("simulate", "swf", BAD)
    assert result.exit_code == 1
    assert f"Error: {BAD}:3: expected 18 fields, found 17" in result.stderr
    assert "--skip-bad-lines" in result.stderr
    assert result.exc_info[0] is SystemExit  # no exception escaped click
    assert "Traceback" not in result.output


def test_skip_bad_lines_reports_count():
    result = cosched("simulate", "swf", BAD, "--skip-bad-lines", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["jobs"] == 2
    assert "skipped 2 malformed line(s)" in result.stderr
    assert f"{BAD}:4: field 'run time' is not a number: 'x5'" in result.stderr


def test_dropped_jobs_are_reported():
    result = cosched("simulate", "swf", SMALL)
    assert "dropped 1 job(s): run time <= 0" in result.stderr


def test_unknown_policy_is_a_usage_error():
    result = cosched("simulate", "swf", SMALL, "--policy", "FCFS,EDF")
    assert result.exit_code == 2
    assert "unknown queue policy 'EDF'" in result.stderr


def test_no_progress_bar_on_short_runs_and_never_on_stdout(monkeypatch):
    result = cosched("simulate", "swf", SMALL, "--json")
    assert "simulating" not in result.stderr
    # Force the bar (as if the run were long): it goes to stderr, stdout stays JSON.
    monkeypatch.setattr(progress_bar, "PROGRESS_AFTER_S", 0.0)
    result = cosched("simulate", "swf", SMALL, "--json", "--policy", "FCFS,SJF")
    assert result.exit_code == 0, result.output
    assert "simulating" in result.stderr
    assert len(json.loads(result.stdout)) == 2


def test_bench_says_when_data_is_absent(tmp_path):
    result = cosched("bench", "simulator", "--data-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["lublin_256"] == {"skipped": f"trace not found: {tmp_path / 'lublin_256.swf'}"}
    assert out["hpc2n_whole"]["skipped"].startswith("trace not found")
    human = cosched("bench", "simulator", "--data-dir", str(tmp_path))
    assert "lublin_256.swf: skipped (trace not found" in human.stdout


def test_bench_figures_on_a_small_stand_in_trace(tmp_path):
    shutil.copy(SMALL, tmp_path / "lublin_256.swf")
    result = cosched("bench", "simulator", "--data-dir", str(tmp_path), "--json",
                     "--repeat", "1", "--no-whole")
    assert result.exit_code == 0, result.output
    lub = json.loads(result.stdout)["lublin_256"]
    assert lub["jobs"] == 4
    assert lub["fcfs"]["jobs_per_second"] > 0 and lub["fcfs_easy"]["jobs_per_second"] > 0
    assert lub["fcfs"]["avg_bsld"] == pytest.approx((1 + 110 / 30 + 115 / 40 + 115 / 15) / 4)
    assert "window_1024" not in lub  # fewer than 1,024 jobs


def test_real_trace_window(bundled_data):
    path = bundled_data / "swf" / "lublin_256.swf"
    result = cosched("simulate", "swf", str(path), "--jobs", "1024", "--backfill", "easy",
                     "--policy", "FCFS,SJF", "--json")
    assert result.exit_code == 0, result.output
    fcfs, sjf = json.loads(result.stdout)
    assert fcfs["jobs"] == sjf["jobs"] == 1024
    assert 0 < fcfs["utilization"] <= 1 and fcfs["avg_bsld"] >= 1
    assert fcfs["avg_bsld"] != sjf["avg_bsld"]
