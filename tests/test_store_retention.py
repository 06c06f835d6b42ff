"""`decisions prune`: old decisions let go, and a restart rebuilds the same learner."""

from __future__ import annotations

import json
import random

from click.testing import CliRunner

from coscheduler.backends import VirtualBackend
from coscheduler.bench.restart import write_database
from coscheduler.cli import main
from coscheduler.cli.decisions import KEEP_MIN
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.learner.experts import paper_experts
from coscheduler.learner.fitted import FittedTreeExpert
from coscheduler.recorder import OutcomeRecord
from coscheduler.store.sqlite import SqliteStore

CFG = LearnerConfig(seed=3)


def _experts():
    return paper_experts() + [FittedTreeExpert(min_samples=6, refit_every=3, max_samples=12)]


def _record(path, n: int, pending: int = 3):
    """n decisions of two classes at times 0..n-1, observed (a few cancelled), then
    ``pending`` more never observed."""
    store = SqliteStore(path, create=True)
    learner = AsaxLearner(CFG, _experts)
    rng = random.Random(0)
    with store.batch():
        for k in range(n + pending):
            c = ("a/x", "b/y")[k % 2]
            st = HostState(job_class=c, cpu_percent=rng.uniform(0, 100), mem_percent=30.0,
                           stage_type="parallel", elapsed_fraction=rng.random(), happiness=1.0)
            d = learner.decide(st, f"h{k}", f"g{k}", float(k), job_class=c)
            store.record_decision(d, 0.8, d.action_fraction)
            if k >= n:
                continue
            if k % 7 == 3:
                learner.forget(d.decision_id)
                store.record_outcome(OutcomeRecord(d.decision_id, float(k), 0.0, "cancelled"))
                continue
            loss = rng.random() * d.action_fraction
            learner.observe(d.decision_id, loss, float(k))
            store.record_outcome(OutcomeRecord(d.decision_id, float(k), loss, "degradation"))
        for st in learner.snapshot():
            store.save_class(st)
    store.close()
    return learner


def _fitted(ctl: Controller, job_class: str) -> tuple:
    e = ctl.learner.experts_for(job_class)[-1]
    return e._X, e._y, e._since_fit, e._model


def test_pruned_decisions_change_nothing_a_restart_rebuilds(tmp_path):
    whole, pruned = tmp_path / "whole.db", tmp_path / "pruned.db"
    _record(whole, 200)
    _record(pruned, 200)
    with SqliteStore(pruned) as s:
        before = s.load()
        deleted = s.prune(150.0, keep_per_class=15)
        after = s.load()
    # Old ones went (cancelled ones too), each class's last 15 observed and the pending stayed.
    assert sum(deleted.values()) > 100
    assert len(after.pending) == 3 and after.pending == before.pending
    assert after.observed_counts == before.observed_counts
    kept = {}
    for d, _ in after.observed:
        kept[d.job_class] = kept.get(d.job_class, 0) + 1
    assert all(n >= 15 for n in kept.values()) and len(after.observed) < len(before.observed)
    assert after.next_decision_id == before.next_decision_id
    assert {c.job_class: c.weights for c in after.classes} == {c.job_class: c.weights
                                                              for c in before.classes}
    ctl = [Controller.from_recorder(VirtualBackend({"n": 4}, start_time=1e4), SqliteStore(p),
                                    "asax", CFG, expert_factory=_experts)
           for p in (whole, pruned)]
    for c in ("a/x", "b/y"):
        assert _fitted(ctl[0], c) == _fitted(ctl[1], c)
        assert ctl[0].learner.experts_for(c)[-1].fitted


def test_a_prune_in_short_transactions_deletes_what_one_would_and_counts_each_once(
        tmp_path, monkeypatch):
    import coscheduler.store.records as records
    from coscheduler.store.retention import delete_decisions, prune_candidates

    one, chunked = tmp_path / "one.db", tmp_path / "chunked.db"
    _record(one, 200)
    _record(chunked, 200)
    with SqliteStore(one) as s:
        whole = s.prune(150.0, keep_per_class=15)
        expect = s.load()
    monkeypatch.setattr(records, "PRUNE_CHUNK", 7)
    commits = []
    with SqliteStore(chunked) as s:
        real = s.writing

        def counted(what):
            commits.append(what)
            return real(what)
        monkeypatch.setattr(s, "writing", counted)
        assert s.prune(150.0, keep_per_class=15) == whole
        got = s.load()
    assert len(commits) == -(-sum(whole.values()) // 7)     # one transaction per chunk
    assert got.observed_counts == expect.observed_counts
    assert [d.decision_id for d, _ in got.observed] == [d.decision_id for d, _ in expect.observed]
    # Rows another prune deleted since they were found are neither deleted nor counted again.
    again = tmp_path / "again.db"
    _record(again, 200)
    with SqliteStore(again) as s:
        with s.reading("find") as conn:
            rows = prune_candidates(conn, 150.0, 15)
        with s.writing("first") as conn:
            first = delete_decisions(conn, rows)
        with s.writing("second") as conn:
            assert delete_decisions(conn, rows) == {}
        assert s.load().observed_counts == expect.observed_counts
    assert first == whole


def test_a_prune_that_kept_too_few_for_the_expert_is_relearned_from_what_is_left(tmp_path, caplog):
    path = tmp_path / "s.db"
    _record(path, 200)
    with SqliteStore(path) as s:
        s.prune(1e9, keep_per_class=4)
    ctl = Controller.from_recorder(VirtualBackend({"n": 4}, start_time=1e4), SqliteStore(path),
                                   "asax", CFG, expert_factory=_experts)
    assert "relearns from the 4 outcomes kept" in caplog.text
    assert len(ctl.learner.experts_for("a/x")[-1]._y) == 4


def test_cosched_decisions_prune(tmp_path):
    db = tmp_path / "s.db"
    write_database(db, 80)       # (simulated times: decades ago)
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "1",
                                  "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["deleted"] == {} and out["left"] == 80      # all within --keep-per-class
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "1",
                                  "--keep-per-class", "10"])
    assert r.exit_code != 0 and "--keep-per-class" in r.output
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(tmp_path / "none.db"),
                                  "--older-than", "1"])
    assert r.exit_code != 0 and "no state database" in r.output


def test_the_cli_keeps_at_least_what_the_default_learner_recalls_from():
    assert KEEP_MIN >= AsaxLearner(LearnerConfig()).recall_window()


def test_prune_with_vacuum_gives_the_space_back(tmp_path):
    db = tmp_path / "s.db"
    _record(db, 600)
    size = db.stat().st_size
    r = CliRunner().invoke(main, ["decisions", "prune", "--db", str(db), "--older-than", "0",
                                  "--keep-per-class", str(KEEP_MIN), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)   # 300 per class, all within the keep: only cancelled ones go
    cancelled = sum(1 for k in range(600) if k % 7 == 3)
    assert sum(out["deleted"].values()) == cancelled and out["left"] == 603 - cancelled
    with SqliteStore(db) as s:
        s.prune(1e9, keep_per_class=15)
        s.vacuum()
        assert len(s.load().observed) >= 30
    assert db.stat().st_size < size / 3
