"""`decisions prune` past the learner's class bound: the saved classes a restart no longer
reads (``LearnerConfig.max_classes``) are deleted whole, and a restart rebuilds the same
learner as before the prune."""

from __future__ import annotations

import json

from click.testing import CliRunner

from coscheduler.backends import VirtualBackend
from coscheduler.cli import main
from coscheduler.cli.decisions import MAX_CLASSES_DEFAULT
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.store.retention import delete_classes, forgotten_classes
from coscheduler.store.sqlite import SqliteStore

from class_bound_store import BOUND, CLASSES, PENDING, fill, state

# what a restart bounded to 3 reads: the newest three (u/f, then u/h and u/c of the 50.0
# tie) and the pending ones (the learner then holds the pending ones and u/f)
READ = {"u/f", "u/h", "u/c"} | PENDING


def _fill(path) -> None:
    with SqliteStore(path, create=True) as store:
        fill(store)


def _restart(path, bound: int = BOUND):
    with SqliteStore(path) as store:
        backend = VirtualBackend({"n0": 8}, start_time=10_000.0)
        ctl = Controller.from_recorder(backend, store, "asax", LearnerConfig(seed=3, max_classes=bound))
        learner = ctl.policy.learner
        fitted = {c: [(e._X, e._y, e._since_fit) for e in learner.experts_for(c)
                      if hasattr(e, "_X")] for c in learner.known_classes()}
        states = {c: learner.class_state(c).to_dict() for c in learner.known_classes()}
        return learner.known_classes(), states, fitted, sorted(learner.pending)


def _count(path, sql: str, *args) -> int:
    with SqliteStore(path) as store, store.reading("count") as conn:
        return conn.execute(sql, args).fetchone()[0]


def test_the_classes_past_the_bound_go_whole_and_a_restart_rebuilds_the_same_learner(tmp_path):
    db = tmp_path / "s.db"
    _fill(db)
    before = _restart(db)
    assert set(before[0]) == {"u/f"} | PENDING
    rounds = _count(db, "SELECT COUNT(*) FROM weight_history")
    with SqliteStore(db) as store:
        deleted = store.prune_classes(1e9, BOUND)
    assert set(deleted) == set(CLASSES) - READ and all(n == 25 for n in deleted.values())
    assert _restart(db) == before
    gone = json.dumps(sorted(deleted))
    for table in ("classes", "decisions", "weight_history"):
        assert _count(db, f"SELECT COUNT(*) FROM {table} WHERE job_class IN "
                          "(SELECT value FROM json_each(?))", gone) == 0, table
    assert _count(db, "SELECT COUNT(*) FROM classes") == len(READ)
    assert _count(db, "SELECT COUNT(*) FROM weight_history") < rounds
    # outcomes go with their decisions; credits stay, without a decision
    assert _count(db, "SELECT COUNT(*) FROM outcomes o WHERE NOT EXISTS "
                      "(SELECT 1 FROM decisions d WHERE d.id = o.decision_id)") == 0
    assert _count(db, "SELECT COUNT(*) FROM walltime_credits WHERE decision_id IS NULL") == \
        len(deleted)
    with SqliteStore(db) as store:
        assert store.prune_classes(1e9, BOUND) == {}     # nothing more to let go


def test_a_class_used_since_the_cut_or_within_the_bound_stays(tmp_path):
    db = tmp_path / "s.db"
    _fill(db)
    with SqliteStore(db) as store:
        # u/d decided at times 76..100: a cut at 90 keeps it, and every class after it
        assert "u/d" not in store.prune_classes(90.0, BOUND)
        assert store.prune_classes(1e9, len(CLASSES)) == {}    # none past the bound
    assert _count(db, "SELECT COUNT(*) FROM classes WHERE job_class = 'u/d'") == 1


def test_a_class_used_again_between_finding_and_deleting_is_kept(tmp_path):
    db = tmp_path / "s.db"
    _fill(db)
    with SqliteStore(db) as store:
        with store.reading("find") as conn:
            found = forgotten_classes(conn, 1e9, BOUND)
        assert "u/a" in found
        # a running controller asks about u/a again: a decision pending now
        d = AsaxLearner(LearnerConfig(seed=5), next_decision_id=10_000).decide(
            state("u/a", 20.0), "hx", "gx", 500.0, job_class="u/a")
        store.record_decision(d, 0.9, d.action_fraction)
        with store.writing("delete") as conn:
            deleted = delete_classes(conn, found, 1e9, BOUND)
    assert "u/a" not in deleted and deleted
    assert _count(db, "SELECT COUNT(*) FROM decisions WHERE job_class = 'u/a'") == 26


def test_cosched_decisions_prune_deletes_the_classes_past_the_bound(tmp_path):
    db = tmp_path / "s.db"
    _fill(db)
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "0",
                                  "--max-classes", str(BOUND), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert set(out["classes_deleted"]) == set(CLASSES) - READ
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "0",
                                  "--max-classes", "0"])
    assert r.exit_code != 0 and "--max-classes" in r.output
    assert MAX_CLASSES_DEFAULT == LearnerConfig().max_classes


def test_the_prune_defaults_to_the_bound_the_controller_started_with_and_refuses_a_smaller(tmp_path):
    db = tmp_path / "s.db"
    _fill(db)
    with SqliteStore(db) as store:
        assert store.class_bound() is None
    _restart(db)     # a controller bounded to BOUND started on it
    with SqliteStore(db) as store:
        assert store.class_bound() == BOUND
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "0",
                                  "--max-classes", str(BOUND - 1)])
    assert r.exit_code != 0 and f"bound of {BOUND} classes" in r.output
    assert "Traceback" not in r.output
    assert _count(db, "SELECT COUNT(*) FROM classes") == len(CLASSES)    # nothing deleted
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "0",
                                  "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["max_classes"] == BOUND and set(out["classes_deleted"]) == set(CLASSES) - READ
