"""A controller restarting on a state database with one damaged or edited row starts: the row
is left out of the learner with one WARNING naming the file, the table, the row and what is
wrong, every intact row is restored as before, and the file is not changed by the start.

Before, the restart refused the whole file in one line (a damaged decision or class state),
or failed with a ValueError traceback (a loss of 'bad' or 1e999 in an outcome row)."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from coscheduler.backends import VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner
from coscheduler.store import SqliteStore

from store_workload import CONFIG, drive

CLASS = "montage/mProject"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, int, int]:
    """(a store written by the learner's own run, an observed decision id, a pending one)."""
    path = tmp_path_factory.mktemp("restart-damaged") / "state.db"
    with SqliteStore(path, create=True, synchronous="NORMAL") as store:
        drive(AsaxLearner(CONFIG), store, max_commits=150)
    con = sqlite3.connect(path)
    observed = con.execute("SELECT MIN(decision_id) FROM outcomes WHERE kind != 'cancelled'").fetchone()[0]
    pending = con.execute("SELECT MIN(id) FROM decisions d WHERE NOT EXISTS "
                          "(SELECT 1 FROM outcomes o WHERE o.decision_id = d.id)").fetchone()[0]
    con.close()
    assert observed is not None and pending is not None
    return path, observed, pending


def damaged(pristine, tmp_path: Path, sql: str) -> Path:
    src, observed, pending = pristine
    path = tmp_path / "state.db"
    shutil.copy(src, path)
    con = sqlite3.connect(path)
    con.execute(sql.format(observed=observed, pending=pending, cls=CLASS))
    con.commit()
    con.close()
    return path


def restart(path: Path) -> tuple[Controller, AsaxLearner]:
    store = SqliteStore(path)
    try:
        ctl = Controller.from_recorder(VirtualBackend({"n1": 8}), store, "asax", learner_config=CONFIG)
    except BaseException:
        store.close()
        raise
    return ctl, ctl.policy.learner


def reference(pristine, tmp_path_factory) -> AsaxLearner:
    path = tmp_path_factory.mktemp("reference") / "state.db"
    shutil.copy(pristine[0], path)
    ctl, learner = restart(path)
    ctl.recorder.close()
    return learner


def states(learner: AsaxLearner) -> dict[str, dict]:
    return {c: learner.class_state(c).to_dict() for c in learner.known_classes()}


def rows(path: Path) -> list:
    con = sqlite3.connect(path)
    try:
        return [con.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
                for t in ("decisions", "outcomes", "classes", "weight_history")]
    finally:
        con.close()


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "coscheduler.store"]


@pytest.mark.parametrize("sql,table,row,field", [
    ("UPDATE decisions SET weights = '\"abcdef\"' WHERE id = {observed}",
     "decisions", "id {observed}", "weights must be a list"),
    ("UPDATE decisions SET mixture = '[]' WHERE id = {pending}",
     "decisions", "id {pending}", "do not line up"),
    ("UPDATE decisions SET time = 9e999 WHERE id = {pending}",
     "decisions", "id {pending}", "time must be finite"),
    ("UPDATE outcomes SET loss = 'bad' WHERE decision_id = {observed}",
     "outcomes", "of decision id {observed}", "loss of decision {observed} must be a number"),
    ("UPDATE outcomes SET loss = 9e999 WHERE decision_id = {observed}",
     "outcomes", "of decision id {observed}", "must be finite"),
])
def test_a_damaged_decision_or_outcome_row_is_skipped_with_a_warning(
        pristine, tmp_path, tmp_path_factory, caplog, sql, table, row, field):
    ref = reference(pristine, tmp_path_factory)
    path = damaged(pristine, tmp_path, sql)
    before = rows(path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="coscheduler.store"):
        ctl, learner = restart(path)
    ctl.recorder.close()
    _, observed, pending = pristine
    ids = {"observed": observed, "pending": pending}
    (line,) = warnings_of(caplog)
    assert line.startswith(f"{path}: table {table}, row {row.format(**ids)} is damaged and skipped "
                           "at restart: "), line
    assert field.format(**ids) in line
    # every intact row is as the undamaged file gives it
    skipped = {pending} if "pending" in sql else set()
    assert set(learner.pending) == set(ref.pending) - skipped
    assert learner.next_decision_id == ref.next_decision_id
    assert states(learner) == states(ref)
    assert rows(path) == before      # nothing deleted: the row stays for the operator


def test_a_damaged_class_state_goes_on_from_its_last_round(pristine, tmp_path, tmp_path_factory, caplog):
    ref = reference(pristine, tmp_path_factory)
    path = damaged(pristine, tmp_path, "UPDATE classes SET state = '{{' WHERE job_class = '{cls}'")
    con = sqlite3.connect(path)
    last_round, weights = con.execute("SELECT round, weights_after FROM weight_history WHERE "
                                      "job_class = ? ORDER BY round DESC LIMIT 1", (CLASS,)).fetchone()
    con.close()
    with caplog.at_level(logging.WARNING, logger="coscheduler.store"):
        ctl, learner = restart(path)
    ctl.recorder.close()
    (line,) = warnings_of(caplog)
    assert line.startswith(f"{path}: table classes, row '{CLASS}' is damaged and skipped at "
                           f"restart: class {CLASS}: not valid JSON"), line
    assert f"goes on from round {last_round} of weight_history" in line
    st = learner.class_state(CLASS)
    assert (st.rounds, st.weights) == (last_round, json.loads(weights))
    assert st.weights == ref.class_state(CLASS).weights     # what the learner had learnt
    others = {c: s for c, s in states(ref).items() if c != CLASS}
    assert {c: s for c, s in states(learner).items() if c != CLASS} == others
    assert set(learner.pending) == set(ref.pending)
