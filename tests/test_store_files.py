"""Opening the state file: what is created, what is refused (and left untouched), how an
older schema is migrated."""

from __future__ import annotations

import hashlib
import os
import sqlite3

import pytest

from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.model import InvalidInput
from coscheduler.store import (APPLICATION_ID, SCHEMA_VERSION, ForeignDatabase, MissingStateDatabase,
                               NewerSchema, NotAStateDatabase, OlderSchema, SqliteStore, StoreError,
                               default_db_path)
from coscheduler.store.schema import MIGRATIONS


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_refused_and_left_alone(path, error, match) -> None:
    """Every way of opening ``path`` (plain, create, read-only) raises ``error`` naming it,
    and the file is byte-for-byte unchanged afterwards."""
    before = digest(path)
    for kwargs in ({}, {"create": True}, {"readonly": True}):
        with pytest.raises(error, match=match):
            SqliteStore(path, **kwargs)
    assert digest(path) == before


def fill(path) -> None:
    lrn = AsaxLearner(LearnerConfig(fitted_expert=False))
    with SqliteStore(path, create=True) as s:
        d = lrn.decide(HostState("a/b", 10, 10, "parallel", 0.1, 2.0), "h", "g", 1.0)
        s.record_decision(d, 0.5, 0.5, class_state=lrn.class_state("a/b"))


def test_missing_file_is_created_only_when_asked(tmp_path):
    path = tmp_path / "deep" / "dir" / "state.db"
    with pytest.raises(MissingStateDatabase, match=f"no state database at {path}"):
        SqliteStore(path)
    with pytest.raises(MissingStateDatabase):
        SqliteStore(path, readonly=True)
    assert not path.exists() and not path.parent.exists()
    with SqliteStore(path, create=True, create_dirs=True) as s:
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert s.conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
        meta = dict(s.conn.execute("SELECT key, value FROM meta"))
    assert meta["app"] == "coscheduler" and meta["schema_version"] == str(SCHEMA_VERSION)


def test_store_errors_are_invalid_input():
    assert issubclass(StoreError, InvalidInput)


def test_random_bytes_are_refused_and_left_alone(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(os.urandom(4096))
    assert_refused_and_left_alone(path, NotAStateDatabase, f"{path} is not an SQLite database")


def test_a_damaged_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "state.db"
    fill(path)
    data = bytearray(path.read_bytes())
    data[100:] = os.urandom(len(data) - 100)      # keep the header, garble every page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=str(path)):
        with SqliteStore(path) as s:
            s.load()


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    con.execute("INSERT INTO invoices (amount) VALUES (12.5)")
    con.commit()
    con.close()
    assert_refused_and_left_alone(path, ForeignDatabase,
                                  rf"{path} is an SQLite database of another program.*invoices")
    assert not (tmp_path / "other.db-wal").exists()


def test_another_programs_application_id_is_refused(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("PRAGMA application_id = 1234")
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ForeignDatabase, match="application_id 0x4d2"):
        SqliteStore(path, create=True)


def test_a_newer_schema_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "state.db"
    fill(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    assert_refused_and_left_alone(path, NewerSchema,
                                  rf"{path} has schema version {SCHEMA_VERSION + 1}, newer")


def test_an_older_schema_is_migrated_in_a_transaction(tmp_path):
    path = tmp_path / "state.db"
    fill(path)
    v2 = MIGRATIONS + (("ALTER TABLE decisions ADD COLUMN node TEXT",
                        "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)"),)
    # Reads never migrate.
    with pytest.raises(OlderSchema, match=f"{path} has schema version {SCHEMA_VERSION}, older"):
        SqliteStore(path, readonly=True, _migrations=v2)
    with SqliteStore(path, _migrations=v2) as s:
        meta = dict(s.conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(SCHEMA_VERSION + 1)
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        cols = [r[1] for r in s.conn.execute("PRAGMA table_info(decisions)")]
        assert "node" in cols
        assert len(s.load().pending) == 1          # nothing lost on the way
    # And now this (older) code refuses the migrated file instead of misreading it.
    with pytest.raises(NewerSchema):
        SqliteStore(path)


def test_a_failing_migration_changes_nothing(tmp_path):
    path = tmp_path / "state.db"
    fill(path)
    broken = MIGRATIONS + (("ALTER TABLE decisions ADD COLUMN node TEXT",
                            "ALTER TABLE no_such_table ADD COLUMN x TEXT"),)
    with pytest.raises(StoreError, match=rf"{path}: migrating the schema from version "
                                         rf"{SCHEMA_VERSION} to {SCHEMA_VERSION + 1} failed"):
        SqliteStore(path, _migrations=broken)
    with SqliteStore(path) as s:
        cols = [r[1] for r in s.conn.execute("PRAGMA table_info(decisions)")]
        assert "node" not in cols
        assert len(s.load().pending) == 1


def test_empty_file_and_empty_database(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(NotAStateDatabase, match="empty file"):
        SqliteStore(empty)
    with pytest.raises(NotAStateDatabase, match="empty file"):
        SqliteStore(empty, readonly=True)
    SqliteStore(empty, create=True).close()      # nothing to lose: initialised
    SqliteStore(empty, readonly=True).close()

    blank = tmp_path / "blank.db"          # SQLite, but no table and no application id
    con = sqlite3.connect(blank)
    con.execute("PRAGMA user_version = 5")
    con.commit()
    con.close()
    assert blank.stat().st_size > 0
    with pytest.raises(NotAStateDatabase, match=f"{blank} is an empty SQLite database"):
        SqliteStore(blank)
    SqliteStore(blank, create=True).close()
    SqliteStore(blank).close()


def test_a_half_made_file_is_refused(tmp_path):
    path = tmp_path / "state.db"
    fill(path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE outcomes")
    con.commit()
    con.close()
    with pytest.raises(NotAStateDatabase, match="missing tables: outcomes"):
        SqliteStore(path)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(NotAStateDatabase, match="is a directory"):
        SqliteStore(tmp_path, create=True)


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv("COSCHED_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"
    monkeypatch.delenv("COSCHED_DB")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert str(default_db_path()) == "/var/lib/coscheduler/state.db"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_db_path() == tmp_path / ".local/state/coscheduler/state.db"
