"""Issue 24, item 8: the store under a symlinked path and a damaged page."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from coscheduler.store import DatabaseInUse, SqliteStore, StoreError


def test_two_controllers_reaching_one_database_through_a_symlink_take_one_lock(tmp_path):
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "state.db"
    link = tmp_path / "link.db"
    first = SqliteStore(real, create=True)
    first.claim_controller()
    link.symlink_to(real)
    second = SqliteStore(link)
    try:
        with pytest.raises(DatabaseInUse, match=str(os.getpid())):
            second.claim_controller(wait_s=0.2)
    finally:
        second.close()
        first.close()


def _fill(path: Path, n: int = 400) -> None:
    with SqliteStore(path, create=True) as s:
        for i in range(n):
            s.record_alone_runtime(f"class/c{i:04d}", 10.0 + i)


def _damage_last_pages(path: Path) -> None:
    size = path.stat().st_size
    page = 4096
    with open(path, "r+b") as f:
        f.seek(size - 2 * page)
        f.write(b"\xa5" * (2 * page))


def test_a_damaged_page_is_a_one_line_error_naming_the_file_and_the_last_good_copy(tmp_path):
    db = tmp_path / "state.db"
    _fill(db)
    good = tmp_path / "state.db.good"
    assert good.exists(), "a clean close keeps a good copy"
    _damage_last_pages(db)
    damaged_bytes = db.read_bytes()
    errors = []
    try:
        store = SqliteStore(db)
    except StoreError as e:   # damage found at open: also one line, naming the file
        errors.append(e)
        store = None
    if store is not None:
        try:
            for i in range(400):
                try:
                    store.alone_runtime(f"class/c{i:04d}")
                    store.record_alone_runtime(f"class/c{i:04d}", 99.0)
                except StoreError as e:
                    errors.append(e)
                    break
            assert errors, "the damaged pages were never read"
            # after the damage is known, nothing more is written over the file
            with pytest.raises(StoreError, match="refusing to record"):
                store.record_alone_runtime("class/new", 1.0)
        finally:
            store.close()
    msg = str(errors[0])
    assert "\n" not in msg and str(db) in msg and "damaged" in msg
    if store is not None:
        assert str(good) in msg
        assert db.read_bytes() == damaged_bytes   # not written over
    # the good copy is sound and holds the data
    with sqlite3.connect(good) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT COUNT(*) FROM alone_runtimes").fetchone()[0] == 400



def _rows(path: Path) -> int:
    with sqlite3.connect(path) as c:
        return c.execute("SELECT COUNT(*) FROM alone_runtimes").fetchone()[0]


def test_a_running_store_keeps_a_good_copy_on_schedule(tmp_path, monkeypatch):
    """Between clean closes, every GOOD_COPY_EVERY write transactions (single writes and a
    controller pass's batch alike) refresh ``<db>.good`` with what was written so far."""
    import coscheduler.store.sqlite as store_sqlite

    monkeypatch.setattr(store_sqlite, "GOOD_COPY_EVERY", 5)
    db, good = tmp_path / "state.db", tmp_path / "state.db.good"
    store = SqliteStore(db, create=True)
    try:
        for i in range(4):
            store.record_alone_runtime(f"class/a{i}", 1.0 + i)
        assert not good.exists(), "a copy before the schedule (and before any close)"
        store.record_alone_runtime("class/a4", 5.0)          # the 5th write
        assert good.exists() and _rows(good) == 5
        with store.batch():                                   # one pass: 5 writes, one commit
            for i in range(5):
                store.record_alone_runtime(f"class/b{i}", 1.0)
        assert _rows(good) == 10, "a batch's writes count towards the schedule"
        store.record_alone_runtime("class/c0", 1.0)
        assert _rows(good) == 10, "the copy is refreshed on schedule, not on every write"
    finally:
        store.close()
    assert _rows(good) == 11, "a clean close keeps the state it closes on"


def test_a_damaged_file_never_replaces_the_last_good_copy(tmp_path, monkeypatch):
    import coscheduler.store.sqlite as store_sqlite

    db, good = tmp_path / "state.db", tmp_path / "state.db.good"
    _fill(db)                      # 400 rows; the clean close keeps them in the good copy
    copy_before = good.read_bytes()
    _damage_last_pages(db)
    monkeypatch.setattr(store_sqlite, "GOOD_COPY_EVERY", 1)   # a copy after every write
    try:
        store = SqliteStore(db)
    except StoreError:
        store = None               # found at open: nothing was written, nothing copied
    if store is not None:
        try:
            assert store.keep_good_copy() is False, "a copy was taken of a damaged file"
            with pytest.raises(StoreError, match="damaged"):
                store.record_alone_runtime("class/new", 1.0)
        finally:
            store.close()          # (a clean close of a damaged store copies nothing)
    assert good.read_bytes() == copy_before
    with sqlite3.connect(good) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert _rows(good) == 400
