"""SqliteStore.batch: a controller pass's writes in one transaction (issue 24).

Real SQLite files: what another connection sees while a batch is open, what one failing
write undoes, and how many commits a real controller pass makes.
"""

from __future__ import annotations

import sqlite3

import pytest

from coscheduler.bench.controller import _BenchBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.model import InvalidInput
from coscheduler.policies.coalloc import Asax
from coscheduler.recorder import MemoryRecorder, OutcomeRecord
from coscheduler.store import SqliteStore, StoreError


def _decisions(n: int):
    lrn = AsaxLearner(LearnerConfig(fitted_expert=False))
    return [lrn.decide(HostState("a/b", 10.0, 10.0, "parallel", 0.5, 2.0), f"h{i}", f"g{i}", 5.0)
            for i in range(n)]


def _count(path, table: str) -> int:
    con = sqlite3.connect(path)
    try:
        return con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def test_a_batch_is_one_transaction_and_a_failed_write_undoes_only_itself(tmp_path):
    path = tmp_path / "state.db"
    d1, d2 = _decisions(2)
    with SqliteStore(path, create=True) as store:
        with store.batch():
            store.record_decision(d1, 0.8, 0.2)
            assert _count(path, "decisions") == 0          # nothing committed yet
            with pytest.raises(InvalidInput, match="already recorded"):
                store.record_decision(d1, 0.8, 0.2)       # refused: the batch goes on
            with pytest.raises(InvalidInput, match="unknown decision"):
                store.record_outcome(OutcomeRecord(999, 6.0, 0.0, "declined"))
            store.record_decision(d2, 0.7, 0.3)
            store.record_outcome(OutcomeRecord(d2.decision_id, 6.0, 0.0, "declined"))
            assert store.alone_runtime("a/b") is None      # reads work inside a batch
            with store.batch():                           # nested: the same transaction
                store.record_alone_runtime("a/b", 100.0)
            assert store.alone_runtime("a/b") == 100.0
            assert _count(path, "decisions") == 0
        assert _count(path, "decisions") == 2 and _count(path, "outcomes") == 1
        assert _count(path, "alone_runtimes") == 1
        loaded = store.load()
        assert [d.decision_id for d in loaded.pending] == [d1.decision_id]


def test_what_a_batch_wrote_is_kept_when_its_block_raises(tmp_path):
    path = tmp_path / "state.db"
    (d,) = _decisions(1)
    with SqliteStore(path, create=True) as store:
        with pytest.raises(RuntimeError):
            with store.batch():
                store.record_decision(d, 1.0, 0.0)
                raise RuntimeError("a bug in the pass")
        assert _count(path, "decisions") == 1
        store.record_outcome(OutcomeRecord(d.decision_id, 6.0, 0.0, "declined"))  # not in a batch
        assert _count(path, "outcomes") == 1


def test_a_batch_on_a_readonly_store_writes_nothing_and_says_why(tmp_path):
    path = tmp_path / "state.db"
    SqliteStore(path, create=True).close()
    (d,) = _decisions(1)
    with SqliteStore(path, readonly=True) as store:
        with store.batch():
            with pytest.raises(StoreError, match="read-only"):
                store.record_decision(d, 1.0, 0.0)


def test_a_controller_pass_commits_once_and_records_what_the_memory_recorder_gets(tmp_path):
    """One cold ASA_X pass over 60 queued x 40 running jobs: the same decisions and outcomes
    in the SQLite file as in memory, written in one write transaction (each write its own
    before)."""
    memory = MemoryRecorder()
    Controller(_BenchBackend(60, 40, 2), Asax(AsaxLearner(LearnerConfig(seed=2))), memory).step()
    path = tmp_path / "state.db"
    with SqliteStore(path, create=True) as store:
        statements: list[str] = []
        store.conn.set_trace_callback(statements.append)
        report = Controller(_BenchBackend(60, 40, 2), Asax(AsaxLearner(LearnerConfig(seed=2))),
                            store).step()
        store.conn.set_trace_callback(None)
        assert report.errors == [] and report.coallocated > 5 and report.declined > 0
        # one write transaction (the reads of exclusive runtimes are read transactions)
        assert sum(s.strip().upper() == "BEGIN IMMEDIATE" for s in statements) == 1
        assert sum(s.strip().upper().startswith("SAVEPOINT") for s in statements) > 10
        loaded = store.load()
    assert _count(path, "decisions") == len(memory.decisions)
    assert _count(path, "outcomes") == len(memory.outcomes)
    pending = {d.decision_id for d in loaded.pending}
    assert pending == {i for i in memory.decisions if i not in memory.outcomes}
    assert {c.job_class: c.weights for c in loaded.classes} == \
        {c: s.weights for c, s in memory.classes.items()}
