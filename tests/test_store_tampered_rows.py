"""Rows damaged or edited in the state database, and FIFOs where the database or its lock
should be: every read command (`cosched decisions ...`, `cosched experts ...`) answers with
one line naming the file, the row and the field, exits non-zero, and never hangs or prints a
traceback (the probe in notes/probe_ctl: damage.py, fifo_probe.sh)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.learner import AsaxLearner
from coscheduler.store import SqliteStore, StoreError

from store_workload import CONFIG, drive

REPO = Path(__file__).resolve().parents[1]
CLASS = "montage/mProject"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, int]:
    """(a small store written by the project's own learner run, a decision id with an outcome)."""
    path = tmp_path_factory.mktemp("tampered") / "state.db"
    with SqliteStore(path, create=True, synchronous="NORMAL") as store:
        drive(AsaxLearner(CONFIG), store, max_commits=150)
    con = sqlite3.connect(path)
    did = con.execute("SELECT MIN(decision_id) FROM outcomes WHERE kind != 'cancelled'").fetchone()[0]
    rounds = con.execute("SELECT COUNT(*) FROM weight_history WHERE job_class = ?", (CLASS,)).fetchone()[0]
    con.close()
    assert did is not None and rounds > 0, "the workload must observe and close rounds"
    return path, did


def damaged(pristine: tuple[Path, int], tmp_path: Path, *sql: str) -> tuple[Path, int]:
    """A copy of the store with ``sql`` run on it (``{id}``: the observed decision's id)."""
    src, did = pristine
    path = tmp_path / "state.db"
    shutil.copy(src, path)
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys=OFF")
    for statement in sql:
        con.execute(statement.format(id=did, cls=CLASS))
    con.commit()
    con.close()
    return path, did


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)   # not a traceback
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def first(col: str, value: str) -> str:
    """SQL for the JSON list in ``col`` with its first number replaced by ``value``."""
    return f"'[{value}' || substr({col}, instr({col}, ','))"


# -- decisions list / show: the decision row --------------------------------------------------------
D = "UPDATE decisions SET {col} = {val} WHERE id = {{id}}"

DECISION_CASES = [
    # (column, SQL value, the field the message must name); each a traceback or a wrong
    # answer before the read checks
    ("time", "'soon'", "time must be a number"),
    ("time", "9e999", "time must be finite"),
    ("action_fraction", "'half'", "action fraction must be a number"),
    ("action_fraction", "9e999", "action fraction must be finite"),
    ("host_job", "X'00ff41'", "host_job"),
]


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("col,val,field", DECISION_CASES)
def test_decisions_list_and_show_name_a_damaged_decision_row(pristine, tmp_path, col, val, field, as_json):
    path, did = damaged(pristine, tmp_path, D.format(col=col, val=val))
    flag = ["--json"] if as_json else []
    for cmd in (["decisions", "list", "--last", "1000"], ["decisions", "show", str(did)]):
        one_line_error(run(*cmd, "--db", str(path), *flag), str(path), f"decision {did}", field)


@pytest.mark.parametrize("col,val,field,as_json", [
    ("weights", first("weights", "1e999"), "weights holds a NaN or infinite number", True),
    ("weights", "'\"abcdef\"'", "weights must be a list", False),
    ("mixture", first("mixture", "NaN"), "mixture holds a NaN or infinite number", True),
    # an empty mixture printed "action 7 of 0..-1" and exit 0
    ("mixture", "'[]'", "do not line up", False),
    ("expert_dists", "'[[1],[2]]'", "distributions do not line up", False),   # IndexError
    # a text action printed "action x of 0..9" and exit 0
    ("action_index", "'x'", "action index must be an integer", False),
    ("weights", "'" + "[" * 100_000 + "]" * 100_000 + "'", "weights: nested more than", False),
])
def test_decisions_show_names_a_damaged_decision_field(pristine, tmp_path, col, val, field, as_json):
    path, did = damaged(pristine, tmp_path, D.format(col=col, val=val))
    flag = ["--json"] if as_json else []
    one_line_error(run("decisions", "show", str(did), "--db", str(path), *flag),
                   str(path), f"decision {did}", field)
    # the rest of the file still reads
    assert run("decisions", "list", "--db", str(path), "--last", "1").exit_code == 0


@pytest.mark.parametrize("val,field", [("'bad'", "loss must be a number"), ("9e999", "loss must be finite")])
def test_decisions_list_names_a_damaged_loss(pristine, tmp_path, val, field):
    path, did = damaged(pristine, tmp_path, f"UPDATE outcomes SET loss = {val} WHERE decision_id = {{id}}")
    for flag in ([], ["--json"]):
        one_line_error(run("decisions", "list", "--last", "1000", "--db", str(path), *flag),
                       str(path), f"outcome of decision {did}", field)


def test_a_decision_time_past_time_t_is_shown_not_a_traceback(pristine, tmp_path):
    """1e300 is finite (the write path takes it); time.gmtime cannot: shown as seconds."""
    path, did = damaged(pristine, tmp_path, D.format(col="time", val="1e300"))
    for cmd in (["decisions", "list", "--last", "1000"], ["decisions", "show", str(did)]):
        result = run(*cmd, "--db", str(path))
        assert result.exit_code == 0, (result.output, result.exception)
        assert "t=1e+300 s" in result.output


# -- walltime credits -------------------------------------------------------------------------------
CREDIT = ("INSERT INTO walltime_credits (decision_id, job_id, time, minutes, limit_s, projected_end, "
          "capped) VALUES ({{id}}, '1', {t}, {m}, {limit}, {end}, 0)")


@pytest.mark.parametrize("t,m,limit,end,field", [
    ("'t'", "'m'", "'l'", "'p'", "time must be a number"),
    ("9e999", "5", "9e999", "9e999", "time must be finite"),
    ("1000", "0", "600", "1300", "minutes must be an integer >= 1"),
])
def test_decisions_show_names_a_damaged_walltime_credit(pristine, tmp_path, t, m, limit, end, field):
    path, did = damaged(pristine, tmp_path, CREDIT.format(t=t, m=m, limit=limit, end=end))
    for flag in ([], ["--json"]):
        one_line_error(run("decisions", "show", str(did), "--db", str(path), *flag),
                       str(path), f"walltime credit 1 of decision {did}", field)


def test_a_sound_walltime_credit_still_shows(pristine, tmp_path):
    path, did = damaged(pristine, tmp_path, CREDIT.format(t="1000", m="5", limit="600", end="1300"))
    data = json.loads(run("decisions", "show", str(did), "--db", str(path), "--json").output)
    assert data["decision"]["walltime_credits"] == [
        {"job_id": "1", "time": 1000.0, "minutes": 5, "limit_s": 600.0, "projected_end": 1300.0,
         "capped": False}]


# -- experts history / show ---------------------------------------------------------------------------
W = "UPDATE weight_history SET {col} = {val} WHERE job_class = '{{cls}}' AND round = 1"


@pytest.mark.parametrize("col,val,field,as_json", [
    ("gamma", "'g'", "gamma must be a number", False),
    ("time", "9e999", "time must be finite", True),
    ("time", "'then'", "time must be a number", False),
    ("risk", first("risk", "NaN"), "risk must be finite", True),
    ("weights_after", "'\"abcdef\"'", "weights after must be a list", False),
    ("weights_after", first("weights_after", "1e999"), "weights after must be finite", True),
    ("weights_after", "'[1]'", ", 1 entries", False),
])
def test_experts_history_names_a_damaged_round(pristine, tmp_path, col, val, field, as_json):
    path, _ = damaged(pristine, tmp_path, W.format(col=col, val=val))
    flag = ["--json"] if as_json else []
    one_line_error(run("experts", "history", CLASS, "--db", str(path), *flag),
                   str(path), f"round 1 of class {CLASS}", field)


def test_experts_history_names_a_text_round_number(pristine, tmp_path):
    """It printed "r1" in the round column, exit 0."""
    path, _ = damaged(pristine, tmp_path, W.format(col="round", val="'r' || round"))
    one_line_error(run("experts", "history", CLASS, "--db", str(path)),
                   str(path), f"round r1 of class {CLASS}", "round must be an integer")


def _edit_class_state(path: Path, **changes: object) -> None:
    con = sqlite3.connect(path)
    (text,) = con.execute("SELECT state FROM classes WHERE job_class = ?", (CLASS,)).fetchone()
    state = json.loads(text)
    for key, value in changes.items():
        if key == "risk0":
            state["risk"][0] = value
        else:
            state[key] = value
    con.execute("UPDATE classes SET state = ? WHERE job_class = ?", (json.dumps(state), CLASS))
    con.commit()
    con.close()


@pytest.mark.parametrize("change,as_json,field", [
    ({"last_update": "soon"}, False, "last update must be a number"),   # TypeError in fmt_time
    ({"risk0": math.nan}, True, "holds a NaN"),                         # not JSON compliant
])
def test_experts_show_names_a_damaged_class_state(pristine, tmp_path, change, as_json, field):
    path, _ = damaged(pristine, tmp_path)
    _edit_class_state(path, **change)
    flag = ["--json"] if as_json else []
    one_line_error(run("experts", "show", "--db", str(path), *flag), str(path), CLASS, field)


# -- FIFOs: no hang ------------------------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI in a child process with a timeout: on the code before the fix it hung in open()."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "coscheduler", *args], capture_output=True,
                          text=True, timeout=30, cwd=REPO, env=env)


def test_a_fifo_at_the_database_path_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "state.db"
    os.mkfifo(fifo)
    r = cli("decisions", "list", "--db", str(fifo))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip().splitlines() == [f"Error: {fifo} is not a regular file (a FIFO), "
                                             "not a state database"]


@pytest.mark.parametrize("command", [["decisions", "list"], ["experts", "show"]])
def test_a_fifo_at_the_lock_path_is_refused_not_waited_on(pristine, tmp_path, command):
    path, _ = damaged(pristine, tmp_path)
    os.mkfifo(f"{path}.lock")
    r = cli(*command, "--db", str(path))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert f"{path}.lock is not a regular file (a FIFO)" in line


def test_a_controller_refuses_a_fifo_lock_in_one_line(pristine, tmp_path):
    """ControllerLock opened it (O_RDWR does not block on Linux), then ftruncate failed:
    an OSError traceback at the controller's start."""
    path, _ = damaged(pristine, tmp_path)
    os.mkfifo(f"{path}.lock")
    with SqliteStore(path) as store:
        with pytest.raises(StoreError, match="is not a regular file \\(a FIFO\\)"):
            store.claim_controller(wait_s=0.1)


def test_a_database_reached_through_a_symlink_still_reads(pristine, tmp_path):
    """The regular-file check follows links on purpose (issue 24 item 8)."""
    path, _ = damaged(pristine, tmp_path)
    link = tmp_path / "link.db"
    link.symlink_to(path)
    assert run("decisions", "list", "--db", str(link)).exit_code == 0
