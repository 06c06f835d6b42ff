"""The state database cannot be written for a while (another writer holds it past the busy
timeout, or the disk is full): the controller keeps every record, writes them in order once
it can, and makes no decision it could not record meanwhile. Before this, a pass's writes
were dropped: decisions missing from the file, outcomes refused as "unknown decision", and
decisions left pending in the file that a restart would have observed a second time."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest

from coscheduler.backends import VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.policies.coalloc import Asax
from coscheduler.store import StoreUnavailable
from coscheduler.store.sqlite import SqliteStore
from test_controller_store_restart import _workload  # the same 80 jobs of two classes

CFG = LearnerConfig(seed=4)


def _run(store, fault_at: int, mend_at: int, fault, mend):
    b = VirtualBackend({"n1": 8, "n2": 8})
    _workload(b)
    ctl = Controller(b, Asax(AsaxLearner(CFG), idle_only=False), store)
    reports = []
    for k in range(5000):
        if k == fault_at:
            fault()
        if k == mend_at:
            mend()
        reports.append(ctl.step())
        if b.idle():
            break
        nxt = b.next_event()
        b.advance(10.0 if nxt is None else min(10.0, max(nxt - b.t, 1e-3)))
    return ctl, reports


def _assert_file_holds_what_the_learner_did(ctl: Controller, path, least: int = 10) -> None:
    learner = ctl.learner
    made = set(range(1, learner.next_decision_id))
    assert len(made) >= least
    with SqliteStore(path, readonly=True) as store:
        loaded = store.load()
    recorded = {d.decision_id for d, _ in loaded.observed} | {d.decision_id for d in loaded.pending}
    assert recorded == made       # every decision made is in the file, none twice
    assert {d.decision_id for d in loaded.pending} == set(learner.pending)
    saved = {c.job_class: (c.weights, c.observations, c.rounds) for c in loaded.classes}
    assert saved == {c: (learner.class_state(c).weights, learner.class_state(c).observations,
                         learner.class_state(c).rounds) for c in learner.known_classes()}
    # A restart from the file has the learner the run ended with.
    b = VirtualBackend({"n1": 8, "n2": 8})
    with SqliteStore(path) as store:
        again = Controller.from_recorder(b, store, "asax", learner_config=CFG, idle_only=False)
        assert {c: again.learner.weights(c) for c in learner.known_classes()} == {
            c: learner.weights(c) for c in learner.known_classes()}


def test_records_wait_while_another_writer_holds_the_database_and_none_is_lost(tmp_path):
    path = tmp_path / "state.db"
    store = SqliteStore(path, create=True, busy_timeout_s=0.05)
    holder = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    fault_at, mend_at = 30, 80

    ctl, reports = _run(store, fault_at, mend_at,
                        lambda: holder.execute("BEGIN IMMEDIATE"),
                        lambda: holder.execute("ROLLBACK"))
    held = reports[fault_at:mend_at]
    assert any(r.unwritten > 0 for r in held)
    assert any("wait to be written" in e for r in held for e in r.errors)
    # From the first pass that found records waiting, no guest starts until they are written.
    first = next(i for i, r in enumerate(held) if r.unwritten > 0)
    assert sum(r.coallocated for r in held[first + 1:]) == 0
    # Once the file can be written again, the first pass writes them all.
    assert reports[mend_at].unwritten == 0
    assert all(r.unwritten == 0 for r in reports[mend_at:])
    assert sum(r.coallocated for r in reports[mend_at:]) > 0   # and co-allocation goes on
    assert not any("unknown decision" in e for r in reports for e in r.errors)
    ctl.recorder.close()
    holder.close()
    _assert_file_holds_what_the_learner_did(ctl, path)


def test_a_pass_whose_commit_fails_loses_neither_its_records_nor_its_class_states(tmp_path):
    """The commit itself fails (the disk filled between the writes and the commit): the
    batch wrote nothing, so every record and every class saved in it waits."""
    from contextlib import contextmanager

    class CommitFails(SqliteStore):
        fail = set()      # the batches (counted from 1) whose commit fails
        batches = 0

        @contextmanager
        def batch(self, what="save a controller pass"):
            type(self).batches += 1
            if self.batches not in self.fail:
                with super().batch(what):
                    yield
                return
            self.conn.execute("BEGIN IMMEDIATE")
            self._batch = 0
            try:
                yield
            finally:
                self._batch = None
                self.conn.execute("ROLLBACK")
            raise StoreUnavailable(f"{self.path}: cannot save a controller pass now: "
                                   "database or disk is full")

    # A class marked to save (after declines) and saved in a batch that is then lost is
    # saved again at the next pass.
    path = tmp_path / "lone.db"
    CommitFails.fail, CommitFails.batches = {1}, 0
    ctl = Controller(VirtualBackend({"n1": 8}), Asax(AsaxLearner(CFG), idle_only=False),
                     CommitFails(path, create=True))
    ctl.learner.class_state("light").decisions += 3
    ctl._dirty_classes.add("light")
    assert ctl.step().unwritten == 0 and ctl._dirty_classes == {"light"}
    ctl.step()
    ctl.recorder.close()
    with SqliteStore(path, readonly=True) as store:
        assert [(c.job_class, c.decisions) for c in store.load().classes] == [("light", 3)]

    path = tmp_path / "state.db"
    CommitFails.fail, CommitFails.batches = set(range(30, 70, 2)), 0   # every other one
    ctl, reports = _run(CommitFails(path, create=True), 10 ** 6, 10 ** 6, None, None)
    assert sum(r.unwritten > 0 for r in reports) >= 2
    assert not any("unknown decision" in e for r in reports for e in r.errors)
    ctl.recorder.close()
    _assert_file_holds_what_the_learner_did(ctl, path)


@pytest.mark.parametrize("free_before_exit", [True, False])
def test_at_exit_the_daemon_writes_what_waits_or_says_how_many_records_are_lost(
        tmp_path, caplog, free_before_exit):
    from coscheduler.daemon import ControllerDaemon

    path = tmp_path / "state.db"
    b = VirtualBackend({"n1": 8, "n2": 8})
    _workload(b)
    daemon = ControllerDaemon(b, SqliteStore(path, create=True, busy_timeout_s=0.05), "asax",
                              learner_config=CFG)
    holder = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    waiting = 0
    for k in range(60):
        if k == 20:
            holder.execute("BEGIN IMMEDIATE")
        waiting = daemon.controller.step().unwritten
        nxt = b.next_event()
        b.advance(10.0 if nxt is None else min(10.0, max(nxt - b.t, 1e-3)))
    assert waiting > 0
    if free_before_exit:
        holder.execute("ROLLBACK")
    done = daemon.shutdown()
    if free_before_exit:
        assert done["records_lost"] == 0
        daemon.recorder.close()
        _assert_file_holds_what_the_learner_did(daemon.controller, path, least=1)
    else:
        assert done["records_lost"] == waiting
        assert f"{waiting} records could not be written" in caplog.text
        holder.execute("ROLLBACK")
    holder.close()


def test_a_busy_database_is_a_store_unavailable_naming_the_file(tmp_path):
    path = tmp_path / "state.db"
    store = SqliteStore(path, create=True, busy_timeout_s=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match=str(path)):
            store.record_alone_runtime("light", 100.0)
        with pytest.raises(StoreUnavailable, match="another program held it"):
            SqliteStore(path, busy_timeout_s=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.record_alone_runtime("light", 100.0)   # and once it is free, the write is made
    assert store.alone_runtime("light") == 100.0
    store.close()


def test_a_good_copy_that_fails_leaves_no_partial_file_and_waits_before_the_next_try(
        tmp_path, monkeypatch):
    # On a nearly full disk the copy (the whole file) fails where small writes still fit;
    # its partial file must not keep the space the database needs, nor be retried each pass.
    import coscheduler.store.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "GOOD_COPY_EVERY", 3)
    store = SqliteStore(tmp_path / "state.db", create=True)
    store.good_copy.mkdir()      # the copy is written, then cannot take this name
    tries = []
    real = store.keep_good_copy
    monkeypatch.setattr(store, "keep_good_copy", lambda: tries.append(1) or real())
    for k in range(7):
        store.record_alone_runtime("light", 100.0 + k)
    assert not store.good_copy.with_name("state.db.good.tmp").exists()
    assert len(tries) == 2       # after writes 3 and 6, not after every write past 3
    store.good_copy.rmdir()
    store.close()
    assert store.good_copy.is_file()


@pytest.mark.root
def test_records_wait_while_the_disk_is_full_and_none_is_lost(tmp_path, monkeypatch):
    """A real full file system: a 4 MB tmpfs filled by a file, then emptied (the last good
    copy is made every 5 writes, around the fault too)."""
    import coscheduler.store.sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "GOOD_COPY_EVERY", 5)
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        path = mnt / "state.db"
        filler = mnt / "filler"

        def fill():
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(fd, b"x" * 65536)
            except OSError:
                pass
            finally:
                os.close(fd)

        tmp_copy = mnt / "state.db.good.tmp"
        ctl, reports = _run(SqliteStore(path, create=True), 40, 90, fill, filler.unlink)
        full = reports[40:90]
        assert any(r.unwritten > 0 for r in full)
        assert all(r.unwritten == 0 for r in reports[90:])
        assert not any("unknown decision" in e for r in reports for e in r.errors)
        ctl.recorder.close()
        assert (mnt / "state.db.good").exists() and not tmp_copy.exists()
        _assert_file_holds_what_the_learner_did(ctl, path)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
