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
