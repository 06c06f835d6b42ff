"""What the command line writes: never over a device node, FIFO or another file it does not
own, an unwritable --out refused in one line (before the long work where it can be), no
temporary or truncated file left by a failed write, and no output overwriting another."""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import coscheduler
from coscheduler.cli import main

DATA = Path(coscheduler.__file__).resolve().parent / "data" / "swf"
LUBLIN = str(DATA / "lublin_256.swf")
MODELS = Path(coscheduler.__file__).resolve().parent / "learned" / "models"
UNWRITABLE = "/proc/cosched-test-output"   # reading /proc needs no root, writing it fails
STAGE = ["workload", "run-stage", "--workflow", "blast", "--stage", "cat_blast",
         "--scale", "0.001", "--tasks", "2"]


def _invoke(args, env=None):
    return CliRunner().invoke(main, args, env=env)


def _one_line_error(r, *names) -> str:
    """The run failed with one ``Error: ...`` line naming ``names`` (no traceback)."""
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for name in names:
        assert str(name) in lines[0]
    return lines[0]


def _cli_limited(args, cwd, max_file_bytes):
    """The CLI in a child whose files cannot grow beyond ``max_file_bytes`` (as on a full
    file system: a write past it fails with EFBIG; Python ignores SIGXFSZ)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
    env = dict(os.environ, PYTHONPATH=str(Path(coscheduler.__file__).resolve().parent.parent),
               PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "coscheduler", *args], cwd=cwd, env=env,
                          preexec_fn=limit, capture_output=True, text=True, timeout=120)


# --- 1. a device node or FIFO is never replaced ------------------------------------------

@pytest.mark.parametrize("link", [False, True])
def test_workload_batsim_refuses_a_fifo_as_out(tmp_path, link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = fifo
    if link:
        out = tmp_path / "w.json"
        out.symlink_to(fifo)
    r = _invoke(["workload", "batsim", "--from", LUBLIN, "--jobs", "50", "--out", str(out)])
    assert "is a FIFO" in _one_line_error(r, out)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.path.islink(out) == link
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"pipe", out.name})


# --- 2. run-stage's progress file ----------------------------------------------------------

@pytest.mark.parametrize("what", ["fifo", "other-file", "env-other-file"])
def test_run_stage_refuses_a_progress_file_that_is_not_one(tmp_path, what):
    target = tmp_path / "v.txt"
    if what == "fifo":
        os.mkfifo(target)
    else:
        target.write_text("someone's notes\n")
    args, env = STAGE + ["--workdir", str(tmp_path / "work")], None
    if what == "env-other-file":
        env = {"COSCHED_PROGRESS_FILE": str(target)}
    else:
        args += ["--progress-file", str(target)]
    r = _invoke(args, env=env)
    _one_line_error(r, target)
    if what == "fifo":
        assert stat.S_ISFIFO(os.lstat(target).st_mode)
    else:
        assert target.read_text() == "someone's notes\n"
    assert not (tmp_path / "work").exists()   # refused before any task ran


def test_run_stage_still_rewrites_its_own_progress_record(tmp_path):
    target = tmp_path / "p.json"
    target.write_text(json.dumps({"done": 0, "total": 2, "time": 1.0}))
    r = _invoke(STAGE + ["--workdir", str(tmp_path / "work"), "--progress-file", str(target)])
    assert r.exit_code == 0, r.output
    rec = json.loads(target.read_text())
    assert rec["done"] == rec["total"] and rec["total"] > 0


# --- 3. an output that cannot be written: one line, before the work -----------------------

def _gate_model(tmp_path):
    model = tmp_path / "m.model"
    shutil.copy(MODELS / "lublin256-easy.model", model)
    (tmp_path / "m.report.json").mkdir()   # the report cannot replace a folder
    return [str(model)]


CASES = {
    "workload multi": lambda t: ["workload", "multi", "--from", LUBLIN, "--set", "S1",
                                 "--out", UNWRITABLE],
    "simulate multi": lambda t: ["simulate", "multi", "--from", LUBLIN, "--sets", "S1",
                                 "--methods", "fcfs", "--jobs", "64", "--windows", "1",
                                 "--workers", "1", "--out", UNWRITABLE],
    "simulate learned": lambda t: ["simulate", "learned", "--traces", LUBLIN, "--models",
                                   "lublin256", "--workers", "1", "--out", UNWRITABLE],
    "simulate swf": lambda t: ["simulate", "swf", LUBLIN, "--jobs", "20", "--out", UNWRITABLE],
    "run-stage --workdir": lambda t: STAGE + ["--workdir", UNWRITABLE],
    "run-stage --workdir a file": lambda t: STAGE + ["--workdir", LUBLIN],
    "run-stage --progress-file": lambda t: STAGE + ["--progress-file", UNWRITABLE],
    "demo --workdir": lambda t: ["demo", "--db", str(t / "demo.db"), "--workdir", UNWRITABLE],
    "models gate": lambda t: ["models", "gate", *_gate_model(t)],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_unwritable_output_is_one_line_naming_it(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    args = CASES[case](tmp_path)
    r = _invoke(args)
    if case == "models gate":
        assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.output
        assert f"error: {tmp_path / 'm.report.json'} exists and is a folder" in r.output
        assert "Traceback" not in r.output
        return
    named = LUBLIN if case.endswith("a file") else UNWRITABLE
    _one_line_error(r, named)


def test_calibrate_refuses_an_unwritable_save_before_measuring(monkeypatch):
    from coscheduler.calibration import measure

    def no_measuring(*a, **k):
        raise AssertionError("measured before checking --save")
    monkeypatch.setattr(measure, "measure", no_measuring)
    _one_line_error(_invoke(["calibrate", "--quick", "--save", UNWRITABLE + ".json"]),
                    UNWRITABLE)


def test_train_rlscheduler_refuses_an_unwritable_out_before_training(monkeypatch):
    pytest.importorskip("jax")
    from coscheduler.learned import train

    def no_training(*a, **k):
        raise AssertionError("trained before checking --out")
    monkeypatch.setattr(train, "train", no_training)
    r = _invoke(["train", "rlscheduler", "--trace", LUBLIN, "--epochs", "1",
                 "--out", UNWRITABLE + ".model"])
    _one_line_error(r, UNWRITABLE)


def test_train_mrsch_refuses_an_unwritable_out_before_training(monkeypatch):
    pytest.importorskip("jax")
    from coscheduler.multi import train

    def no_training(*a, **k):
        raise AssertionError("trained before checking --out")
    monkeypatch.setattr(train, "train", no_training)
    r = _invoke(["train", "mrsch", "--trace", LUBLIN, "--set", "S1",
                 "--out", UNWRITABLE + ".model"])
    _one_line_error(r, UNWRITABLE)


# --- 3 and 5. a full file system: no truncated output, no temporary file ------------------

@pytest.mark.parametrize("case", ["workload batsim", "workload multi", "simulate swf"])
def test_a_write_that_runs_out_of_space_leaves_nothing(tmp_path, case):
    out = tmp_path / "out"
    out.mkdir()
    args = {
        "workload batsim": ["workload", "batsim", "--from", LUBLIN, "--jobs", "200",
                            "--out", str(out / "b.json")],
        "workload multi": ["workload", "multi", "--from", LUBLIN, "--set", "S1",
                           "--out", str(out / "m.swf")],
        "simulate swf": ["simulate", "swf", LUBLIN, "--jobs", "200", "--out", str(out)],
    }[case]
    r = _cli_limited(args, tmp_path, 4096)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr, r.stderr
    err = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert len(err) == 1 and "cannot write" in err[0] and "too large" in err[0], r.stderr
    assert list(out.iterdir()) == []


# --- 4. two policies never share a jobs.csv ------------------------------------------------

def test_simulate_swf_gives_each_policy_its_own_jobs_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for folder, name in (("a-b", "x.model"), ("a", "b-x.model")):
        (tmp_path / folder).mkdir()
        shutil.copy(MODELS / "lublin256-easy.model", tmp_path / folder / name)
    r = _invoke(["simulate", "swf", LUBLIN, "--jobs", "20",
                 "--policy", "rl:a-b/x.model,rl:a/b-x.model,FCFS", "--out", "d"])
    assert r.exit_code == 0, r.output
    wrote = [line.split()[1] for line in r.output.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 3 and len(set(wrote)) == 3, wrote
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(
        Path(w).name for w in wrote)
