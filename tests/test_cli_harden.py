"""Command-line errors found by trying the commands carelessly (issue 8, item 13): each bad
input is refused before any work starts, with one message naming the option as the user
typed it; no traceback; nothing overwritten without a word."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.learner import AsaxLearner
from coscheduler.sim.swf import SwfFormatError, read_swf
from coscheduler.store import SqliteStore

from nobody import nobody  # noqa: F401  (fixture)
from store_workload import CONFIG, drive

ROOT = Path(__file__).resolve().parents[1]


def refused(args: list[str], *needles: str, code: int = 2, env=None) -> str:
    t0 = time.monotonic()
    r = CliRunner().invoke(main, args, env=env)
    assert r.exit_code == code, (args, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    for n in needles:
        assert n in r.output, (n, r.output)
    assert time.monotonic() - t0 < 5, "the command did work before refusing"
    return r.output


@pytest.mark.root
@pytest.mark.parametrize("args,option", [
    (["--seconds", "-1"], "--seconds"), (["--seconds", "0"], "--seconds"),
    (["--interval", "-1"], "--interval"), (["--interval", "0"], "--interval"),
])
def test_bench_agent_refuses_bad_numbers_before_starting_anything(args, option):
    out = refused(["bench", "agent", "--jobs", "2", "--requests", "1"] + args, option)
    assert out.count("Error") == 1 and "interval_s" not in out
    assert not [p for p in Path("/tmp").glob("cosched-bench-agent-*") if p.stat().st_mtime > time.time() - 5]


@pytest.mark.parametrize("args,option", [(["--pending", "-5"], "--pending"),
                                         (["--running", "0"], "--running"),
                                         (["--repeat", "0"], "--repeat")])
def test_bench_controller_names_the_option_that_is_wrong(args, option):
    out = refused(["bench", "controller"] + args, option)
    other = {"--pending": "--running", "--running": "--pending", "--repeat": "--running"}[option]
    assert other not in out


@pytest.mark.root
def test_agent_as_an_unprivileged_user_says_it_needs_root(nobody):
    r = nobody.run(["agent", "--listen", "127.0.0.1:0"], "/nonexistent")
    assert r.returncode == 1, (r.stdout, r.stderr)
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "Traceback" not in r.stderr
    assert "root" in line[0] and "uid 65534" in line[0], line[0]
    assert not Path("/nonexistent").exists()


def test_progress_never_overwrites_a_file_that_is_not_a_progress_record(tmp_path):
    precious = tmp_path / "notes.txt"
    precious.write_text("do not lose me\n")
    refused(["progress", "--done", "3", "--file", str(precious)], str(precious), "not a progress",
            code=1)
    assert precious.read_text() == "do not lose me\n"
    refused(["progress", "--done", "3"], str(precious), code=1,
            env={"COSCHED_PROGRESS_FILE": str(precious)})
    assert precious.read_text() == "do not lose me\n"
    refused(["progress", "--done", "1", "--file", str(tmp_path)], code=2)
    # a progress record is updated, a new file is created
    rec = tmp_path / "p.json"
    for done in (1, 2):
        r = CliRunner().invoke(main, ["progress", "--done", str(done), "--total", "5", "--file", str(rec)])
        assert r.exit_code == 0, r.output
        assert json.loads(rec.read_text())["done"] == done


def test_decisions_list_of_an_unknown_class_is_an_error_like_experts_show(tmp_path):
    path = tmp_path / "state.db"
    learner = AsaxLearner(CONFIG)
    with SqliteStore(path, create=True, synchronous="NORMAL") as store:
        drive(learner, store, max_commits=40)
    for cmd in (["experts", "show"], ["decisions", "list"]):
        refused(cmd + ["--class", "nosuch", "--db", str(path)], "unknown job class 'nosuch'", code=1)
    klass = learner.known_classes()[0]
    r = CliRunner().invoke(main, ["decisions", "list", "--class", klass, "--db", str(path), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["decisions"]


SWF = """; MaxNodes: 8
; MaxProcs: 8
1 0 0 10 1 -1 -1 1 20 -1 1 1 1 1 1 1 -1 -1
2 5 0 10 2 -1 -1 2 20 -1 1 1 1 1 1 1 -1 -1
1 7 0 10 4 -1 -1 4 20 -1 1 1 1 1 1 1 -1 -1
"""


def test_swf_with_duplicate_job_numbers_is_refused_or_skipped_with_a_count(tmp_path):
    f = tmp_path / "dup.swf"
    f.write_text(SWF)
    with pytest.raises(SwfFormatError, match=r"dup.swf:5: job number 1 already appears on line 3"):
        read_swf(f)
    t = read_swf(f, skip_bad_lines=True)
    assert [j.job_id for j in t.jobs] == [1, 2] and t.skipped_lines == 1
    assert "job number 1" in t.bad_line_examples[0]
    r = CliRunner().invoke(main, ["simulate", "swf", str(f)])
    assert r.exit_code == 1 and "job number 1 already appears on line 3" in r.output
