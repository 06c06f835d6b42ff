"""SqliteStore: the learner's persistent state in one SQLite file (the embedded default).

Implements ``coscheduler.recorder.Recorder`` (``records.py``; rows <-> records in
``rows.py``). Every write is its own small transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``),
so a killed process loses at most the call in flight, unless made inside ``batch()`` (the
controller saves each pass so: one commit per pass, each write a savepoint);
the combined writes (``record_observation``, ``record_update``, ``record_decision`` with a
class state) keep the class state and the rows it counts in step. The file runs in WAL
mode with a busy timeout, so several processes may open it: writers queue, readers see
a consistent snapshot and never block the writer.

Opening never resets or overwrites anything: a file that is not SQLite, an SQLite file of
another program, or a newer schema is refused with a ``StoreError`` naming the path. A
missing file is created only with ``create=True``, and its folder only with
``create_dirs=True`` (``created_dirs`` then says what was made, for the caller to report).

One controller per database: a controller claims the store (``claim_controller``, done by
``Controller`` itself) with a lock beside the file (``store/lock.py``); a second one is
refused with an error naming the holder's pid. Other writers (tools, tests) may share it.

A read-only store changes nothing on disk: when no ``-wal`` file exists (no writer has the
database open) and no controller holds the lock, it reads the file as immutable, so SQLite
creates no ``-wal``/``-shm`` beside it; otherwise it reads through the writer's WAL. A
``-wal`` left without its ``-shm`` is read from a private copy (SQLite would create the
``-shm`` beside the database to read it). ``-wal``/``-shm`` that are not regular files (a
FIFO) are refused, as a FIFO at the database or its lock is.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ..model import InvalidInput
from .errors import (DamagedDatabase, ForeignDatabase, MissingStateDatabase, NewerSchema,
                     NotAStateDatabase, OlderSchema, StoreError, StoreUnavailable)
from .lock import ControllerLock, ReaderLock, file_kind
from .paths import expand_user
from .records import RecorderMixin
from .rows import _DECISION_COLS, _dumps, _loads, _quota  # noqa: F401 - the old names
from .schema import APP_NAME, APPLICATION_ID, MIGRATIONS, REQUIRED_TABLES

SQLITE_MAGIC = b"SQLite format 3\x00"
# a good copy every this many write transactions (besides each clean close); a pass
# writes a few, so this is every few minutes of a busy controller
GOOD_COPY_EVERY = 500
_DAMAGE_CODES = (11, 26)   # SQLITE_CORRUPT, SQLITE_NOTADB
# A write that may succeed later: SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR, SQLITE_FULL,
# SQLITE_CANTOPEN (primary codes; extended ones carry them in their low byte).
_TRANSIENT_CODES = (5, 6, 10, 13, 14)

log = logging.getLogger("coscheduler.store")


def _is_damage(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _DAMAGE_CODES:
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text
SYNCHRONOUS_MODES = ("FULL", "NORMAL")


class SqliteStore(RecorderMixin):
    """The state database. Use as a context manager or call ``close()``.

    ``create``: make the file (and its directory) if missing, initialise an empty one.
    ``readonly``: open without any write (the operator CLI); never migrates.
    ``synchronous``: "FULL" (default) makes each commit durable across a power loss;
    "NORMAL" survives a killed process but may lose the last commits on power loss, and is
    much faster on slow disks (simulator runs, benchmarks).
    """

    def __init__(self, path: str | Path, *, create: bool = False, readonly: bool = False,
                 synchronous: str = "FULL", busy_timeout_s: float = 10.0,
                 create_dirs: bool = False,
                 _migrations: Sequence[Sequence[str]] = MIGRATIONS):
        if create and readonly:
            raise ValueError("a state database cannot be both created and opened read-only")
        if synchronous not in SYNCHRONOUS_MODES:
            raise InvalidInput(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
        self.path = expand_user(path, "state database")
        self.readonly = readonly
        self._migrations = tuple(tuple(m) for m in _migrations)
        self.schema_version = len(self._migrations)
        self._conn: sqlite3.Connection | None = None
        self._claim: ControllerLock | None = None
        self._reader: ReaderLock | None = None
        self._copy_dir: Path | None = None   # a read-only open's private copy, if any
        self.created_dirs: list[Path] = []
        self.damaged: str | None = None   # why the file is known damaged (then never written)
        self._writes = 0
        self._writes_since_copy = 0
        self._batch: int | None = None   # inside batch(): the writes made so far
        fresh = self._check_file(create, create_dirs)
        try:
            self._conn = self._connect(busy_timeout_s)
            if readonly:
                self._identify_readonly()
            else:
                self._identify_and_migrate(create or fresh)
                mode = self._switch_to_wal(busy_timeout_s)
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: cannot switch to WAL mode (journal mode is {mode})")
                self._conn.execute(f"PRAGMA synchronous={synchronous}")
        except BaseException:
            self.close()
            raise

    # -- opening ---------------------------------------------------------------------------
    def _switch_to_wal(self, timeout_s: float) -> str:
        """Set WAL mode, retrying while another process holds the file: SQLite can answer
        "database is locked" to this pragma at once, without its busy handler, while a
        second process opens a new file at the same moment. WAL then persists in the file."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _check_file(self, create: bool, create_dirs: bool = False) -> bool:
        """Refuse what is plainly not ours before SQLite touches it. True: a new file.
        Every OS error (a folder the user may not enter, say) is a one-line StoreError."""
        p = self.path
        try:
            fresh = self._check_path(p, create, create_dirs)
            self._check_companions()
            return fresh
        except OSError as exc:
            raise StoreError(f"cannot read state database {p}: {exc.strerror or exc}") from None

    def _companion(self, suffix: str) -> Path:
        """``<db>-wal`` / ``<db>-shm`` as SQLite names them: beside the file a link leads to."""
        return Path(os.path.realpath(self.path) + suffix)

    def _check_companions(self) -> None:
        """SQLite opens ``-wal`` and ``-shm`` itself, without checking what they are: a FIFO
        there made every write of a controller fail as a "disk I/O error" (taken for a
        passing fault and retried for ever) and a start with ``-shm`` fail as "damaged".
        Links are followed, as SQLite follows them."""
        for suffix, what in (("-wal", "write-ahead log"), ("-shm", "write-ahead log index")):
            companion = self._companion(suffix)
            try:
                mode = os.stat(companion).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(mode):
                raise NotAStateDatabase(
                    f"{companion} is not a regular file ({file_kind(mode)}); SQLite keeps the "
                    f"{what} of state database {self.path} there: remove it")

    def _check_path(self, p: Path, create: bool, create_dirs: bool) -> bool:
        if p.is_dir():
            raise NotAStateDatabase(f"{p} is a directory, not a state database")
        if not p.exists():
            if not create:
                raise MissingStateDatabase(f"no state database at {p}")
            missing = [d for d in [p.parent, *p.parent.parents] if not d.exists()]
            if missing and not create_dirs:
                raise StoreError(f"cannot create state database {p}: the folder {p.parent} does "
                                 "not exist (create it first, or choose another path)")
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for state database {p}: {exc}") from None
            self.created_dirs = sorted(missing)
            return True
        head = self._read_head(p)
        if not head:
            if not create:
                raise NotAStateDatabase(f"{p} is an empty file, not an initialised state database")
            return True
        if head != SQLITE_MAGIC:
            raise NotAStateDatabase(
                f"{p} is not an SQLite database (it starts with {head[:8]!r}); "
                "refusing to use or overwrite it"
            )
        return False

    @staticmethod
    def _read_head(p: Path) -> bytes:
        """The file's first bytes. Opened without blocking and checked to be a regular file:
        plain open() waits forever on a FIFO at the path (every read command hung). Symbolic
        links are followed on purpose (a database reached by a link, issue 24 item 8)."""
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise StoreError(f"cannot read state database {p}: {exc}") from None
        with os.fdopen(fd, "rb", buffering=0) as fh:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise NotAStateDatabase(f"{p} is not a regular file ({file_kind(mode)}), "
                                        "not a state database")
            try:
                return fh.read(len(SQLITE_MAGIC))
            except OSError as exc:
                raise StoreError(f"cannot read state database {p}: {exc}") from None

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        try:
            if self.readonly:
                uri = self.path.resolve().as_uri() + "?mode=ro"
                # With no -wal file no writer has the database open and everything is in the
                # main file: read it as immutable, which creates no -wal/-shm beside it
                # (mode=ro alone makes both and leaves them). The shared lock keeps a
                # controller from starting to write while we read.
                self._reader = ReaderLock(self.path)
                wal = self._companion("-wal").exists()
                if self._reader.quiet and not wal:
                    uri += "&immutable=1"
                elif wal and not self._companion("-shm").exists():
                    uri = self._private_copy().as_uri() + "?mode=ro"
                else:
                    self._reader.release()
                conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, isolation_level=None)
            else:
                conn = sqlite3.connect(str(self.path), timeout=busy_timeout_s, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open state database {self.path}: {exc}") from None
        return conn

    def _private_copy(self) -> Path:
        """A copy of the database and its -wal in a private folder, to read from there.

        A -wal without its -shm (left by a process that ended, the -shm removed or not
        copied along): SQLite must rebuild the index to read the log, and would create
        ``<db>-shm`` beside the database to do so (or, where the reader may not write, call
        the file "unable to open"). Reading the log is not optional: it may hold commits
        the main file lacks. No live writer goes without a -shm, so the two files are at
        rest; a copy taken while one changed is refused rather than read."""
        self._reader.release()
        files = [(self._companion(""), "state.db"), (self._companion("-wal"), "state.db-wal")]
        self._copy_dir = Path(tempfile.mkdtemp(prefix="cosched-read-"))
        def seen() -> list[tuple[int, int, int]]:
            return [(st.st_ino, st.st_size, st.st_mtime_ns) for st in (os.stat(f) for f, _ in files)]
        try:
            before = seen()
            for src, name in files:
                shutil.copyfile(src, self._copy_dir / name)
            if seen() != before:
                raise StoreError(f"state database {self.path} changed while it was being read "
                                 "(a writer opened it); try again")
        except OSError as exc:
            raise StoreError(f"cannot read state database {self.path}: its write-ahead log "
                             f"{files[1][0]} has no index (-shm), and copying the two to "
                             f"{self._copy_dir} to read them there failed: "
                             f"{exc.strerror or exc}") from None
        return self._copy_dir / "state.db"

    def _probe(self) -> tuple[int, set[str]]:
        """(application_id, table names), or a clear error for a damaged file."""
        assert self._conn is not None
        try:
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        except sqlite3.DatabaseError as exc:
            raise NotAStateDatabase(f"{self.path} is damaged or not an SQLite database: {exc}") from None
        return app_id, tables

    def _classify(self) -> int | None:
        """The file's schema version, or None for an empty database; errors for the rest."""
        app_id, tables = self._probe()
        if app_id != APPLICATION_ID:
            if app_id == 0 and not tables:
                return None
            shown = ", ".join(sorted(tables)[:6]) + (", ..." if len(tables) > 6 else "")
            raise ForeignDatabase(
                f"{self.path} is an SQLite database of another program (application_id "
                f"{app_id:#x}, tables: {shown or 'none'}), not a coscheduler state database; "
                "refusing to use or change it"
            )
        assert self._conn is not None
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise NotAStateDatabase(f"{self.path} is a damaged coscheduler state database "
                                    f"(its meta table cannot be read: {exc})") from None
        if meta.get("app") != APP_NAME:
            raise ForeignDatabase(f"{self.path}: meta row 'app' is {meta.get('app')!r}, "
                                  f"expected {APP_NAME!r}; refusing to use it")
        try:
            version = int(meta["schema_version"])
        except (KeyError, ValueError):
            raise NotAStateDatabase(f"{self.path} is a damaged coscheduler state database "
                                    f"(schema_version is {meta.get('schema_version')!r})") from None
        if version > self.schema_version:
            raise NewerSchema(
                f"{self.path} has schema version {version}, newer than the {self.schema_version} "
                "this coscheduler knows: upgrade coscheduler to read it (the file was not changed)"
            )
        if version == self.schema_version and not REQUIRED_TABLES <= tables:
            missing = ", ".join(sorted(REQUIRED_TABLES - tables))
            raise NotAStateDatabase(f"{self.path} is a damaged coscheduler state database "
                                    f"(missing tables: {missing})")
        return version

    def _identify_readonly(self) -> None:
        version = self._classify()
        if version is None:
            raise NotAStateDatabase(f"{self.path} is an empty SQLite database, not an initialised "
                                    "state database")
        if version < self.schema_version:
            raise OlderSchema(
                f"{self.path} has schema version {version}, older than {self.schema_version}: "
                "open it once with the controller to migrate it (reads never change the file)"
            )

    def _identify_and_migrate(self, may_initialise: bool) -> None:
        assert self._conn is not None
        # Inside one write transaction, so two processes creating the same file at once
        # cannot both initialise it, and a failed migration leaves the old version intact.
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (5, 6):   # SQLITE_BUSY, _LOCKED
                raise StoreUnavailable(f"{self.path}: another program held it for writing past "
                                       f"the busy timeout: {exc}") from None
            raise NotAStateDatabase(f"{self.path} is damaged or cannot be locked: {exc}") from None
        try:
            version = self._classify()
            if version is None:
                if not may_initialise:
                    raise NotAStateDatabase(f"{self.path} is an empty SQLite database, not an "
                                            "initialised state database")
                version = 0
            if version < self.schema_version:
                self._migrate(version)
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise

    def _migrate(self, version: int) -> None:
        assert self._conn is not None
        try:
            for step in range(version, self.schema_version):
                for statement in self._migrations[step]:
                    self._conn.execute(statement)
            self._conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            self._conn.execute(f"PRAGMA user_version={self.schema_version}")
            self._conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [("app", APP_NAME), ("schema_version", str(self.schema_version)),
                 (f"migrated_to_{self.schema_version}_at", repr(time.time()))],
            )
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: migrating the schema from version {version} to "
                             f"{self.schema_version} failed, nothing was changed: {exc}") from None

    # -- plumbing --------------------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"state database {self.path} is closed")
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            if not self.readonly and self.damaged is None and self._writes:
                self.keep_good_copy()   # a clean close: the last good copy is this state
            self._conn.close()
            self._conn = None
        if self._claim is not None:
            self._claim.release()
            self._claim = None
        if self._reader is not None:
            self._reader.release()
            self._reader = None
        if self._copy_dir is not None:
            shutil.rmtree(self._copy_dir, ignore_errors=True)
            self._copy_dir = None

    def claim_controller(self, wait_s: float = 2.0) -> None:
        """Make this store the one controller's: lock ``<db>.lock``, or raise DatabaseInUse
        naming the process that holds it. Idempotent; released by ``close()``."""
        if self.readonly:
            raise StoreError(f"state database {self.path} is open read-only; a controller "
                             "needs it writable")
        if self._claim is None:
            claim = ControllerLock(self.path, wait_s)
            claim.acquire()
            self._claim = claim

    def __enter__(self) -> "SqliteStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- damage and the last good copy --------------------------------------------------------
    @property
    def good_copy(self) -> Path:
        """Where the last good copy of the database is kept (``<db>.good``)."""
        return self.path.with_name(self.path.name + ".good")

    def vacuum(self) -> None:
        """Give the pages freed by ``prune`` back to the file system. SQLite rewrites the
        whole file: other writers (a running controller) wait until it is done."""
        if self.readonly:
            raise StoreError(f"state database {self.path} is open read-only; cannot vacuum it")
        self._check_not_damaged("vacuum")
        try:
            self.conn.execute("VACUUM")
        except sqlite3.DatabaseError as exc:
            raise self._failed("vacuum", exc) from None

    def keep_good_copy(self) -> bool:
        """Copy the database to ``good_copy`` with SQLite's online backup API, if SQLite's
        quick_check finds it sound (a damaged file never replaces the last good copy).
        Done at each clean close and every ``GOOD_COPY_EVERY`` writes. False if not made."""
        if self._conn is None or self.readonly or self.damaged is not None:
            return False
        tmp = self.good_copy.with_name(self.good_copy.name + ".tmp")
        try:
            ok = [r[0] for r in self._conn.execute("PRAGMA quick_check")] == ["ok"]
            if not ok:
                self._damage("quick_check failed", None)
                return False
            tmp.unlink(missing_ok=True)
            dest = sqlite3.connect(str(tmp))
            try:
                self._conn.backup(dest)
            finally:
                dest.close()
            tmp.replace(self.good_copy)
        except (sqlite3.DatabaseError, OSError) as exc:
            if isinstance(exc, sqlite3.DatabaseError) and _is_damage(exc):
                self._damage("the backup could not read it", exc)
            else:
                log.warning("%s: keeping a good copy in %s failed: %s", self.path,
                            self.good_copy, exc)
            # A partial copy must not hold the space the database itself needs (a full
            # disk), and the next try waits for as many writes again.
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
            self._writes_since_copy = 0
            return False
        self._writes_since_copy = 0
        return True

    def _damage(self, what: str, exc: BaseException | None) -> StoreError:
        """Mark the database damaged (no write is tried on it again) and say so in one line."""
        detail = f"{what}: {exc}" if exc is not None else what
        self.damaged = detail
        good = (f"the last good copy is {self.good_copy}; stop the controller and copy it over "
                "the damaged file to go on from there" if self.good_copy.exists()
                else "there is no good copy of it")
        return DamagedDatabase(f"state database {self.path} is damaged ({detail}); nothing more "
                               f"is written to it; {good}")

    def _check_not_damaged(self, what: str) -> None:
        if self.damaged is not None:
            raise DamagedDatabase(f"state database {self.path} is damaged ({self.damaged}); refusing "
                                  f"to {what} (nothing is written over a damaged file"
                                  + (f"; the last good copy is {self.good_copy})"
                                     if self.good_copy.exists() else ")"))

    def _failed(self, what: str, exc: sqlite3.DatabaseError) -> StoreError:
        if _is_damage(exc):
            return self._damage(f"while trying to {what}: {exc}", None)
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _TRANSIENT_CODES:
            return StoreUnavailable(f"{self.path}: cannot {what} now: {exc}")
        return StoreError(f"{self.path}: cannot {what}: {exc}")

    @staticmethod
    def _end(conn: sqlite3.Connection, statement: str) -> None:
        """COMMIT or ROLLBACK at the end of a transaction that already failed: its own error
        must not hide the first one (a damaged page fails both)."""
        if conn.in_transaction:
            try:
                conn.execute(statement)
            except sqlite3.DatabaseError:
                pass

    @contextmanager
    def writing(self, what: str) -> Iterator[sqlite3.Connection]:
        """One write transaction; SQLite errors become StoreError naming the path, and a
        damaged file becomes DamagedDatabase (and is never written again by this store).
        Inside ``batch`` it is a savepoint of the batch's transaction instead."""
        if self.readonly:
            raise StoreError(f"state database {self.path} is open read-only; cannot {what}")
        self._check_not_damaged(what)
        conn = self.conn
        if self._batch is not None:
            with self._savepoint(conn, what):
                yield conn
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise self._failed(what, exc) from None
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            self._end(conn, "ROLLBACK")
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._failed(what, exc) from None
            raise
        self._writes += 1
        self._writes_since_copy += 1
        if self._writes_since_copy >= GOOD_COPY_EVERY:
            self.keep_good_copy()

    @contextmanager
    def _savepoint(self, conn: sqlite3.Connection, what: str) -> Iterator[None]:
        """One write inside a batch: all of it or none of it, the batch goes on either way."""
        try:
            conn.execute("SAVEPOINT write")
        except sqlite3.DatabaseError as exc:
            raise self._failed(what, exc) from None
        try:
            yield
            conn.execute("RELEASE write")
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK TO write")
                conn.execute("RELEASE write")
            except sqlite3.DatabaseError:
                pass
            if isinstance(exc, sqlite3.DatabaseError):
                raise self._failed(what, exc) from None
            raise
        self._batch += 1

    @contextmanager
    def batch(self, what: str = "save a controller pass") -> Iterator[None]:
        """The writes made inside, in one transaction (one commit, one sync to disk, instead
        of one per write): the controller saves each pass's records so. Each write is still
        all or nothing (a savepoint), and one that fails does not undo the others. What was
        written is committed even if the block raises; nested batches are one. A killed
        process loses the batch in flight (without it: the write in flight)."""
        if self._batch is not None or self.readonly or self.damaged is not None:
            yield   # nested, or nothing may be written: each write says so itself
            return
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise self._failed(what, exc) from None
        self._batch = 0
        try:
            yield
        finally:
            written, self._batch = self._batch, None
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                self._end(conn, "ROLLBACK")
                raise self._failed(what, exc) from None
            self._writes += written
            self._writes_since_copy += written
            if self._writes_since_copy >= GOOD_COPY_EVERY:
                self.keep_good_copy()

    @contextmanager
    def reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same snapshot (inside a batch:
        the batch's own)."""
        conn = self.conn
        if self._batch is not None:
            try:
                yield conn
            except sqlite3.DatabaseError as exc:
                raise self._failed(what, exc) from None
            return
        try:
            conn.execute("BEGIN")
            yield conn
        except sqlite3.DatabaseError as exc:
            self._end(conn, "ROLLBACK")
            raise self._failed(what, exc) from None
        except BaseException:
            self._end(conn, "ROLLBACK")
            raise
        if conn.in_transaction:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as exc:
                raise self._failed(what, exc) from None

    def integrity_problems(self) -> list[str]:
        """SQLite's integrity_check and foreign_key_check; an empty list means sound."""
        with self.reading("check integrity") as conn:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            fk = conn.execute("PRAGMA foreign_key_check").fetchall()
        problems = [] if rows == ["ok"] else rows
        problems += [f"foreign key: {r}" for r in fk]
        return problems


__all__ = ["SqliteStore", "_DECISION_COLS"]
