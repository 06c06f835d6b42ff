"""SqliteStore: the learner's persistent state in one SQLite file (the embedded default).

Implements ``coscheduler.recorder.Recorder``. Every write is its own small transaction
(``BEGIN IMMEDIATE`` ... ``COMMIT``), so a killed process loses at most the call in flight;
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
creates no ``-wal``/``-shm`` beside it; otherwise it reads through the writer's WAL.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ..learner import ClassState, Decision, RoundClosed
from ..learner.experts import HostState
from ..model import InvalidInput, check_finite, validate_job_class, validate_job_id
from ..recorder import LOSS_KINDS, LoadedState, OutcomeRecord
from .errors import (DamagedDatabase, ForeignDatabase, MissingStateDatabase, NewerSchema,
                     NotAStateDatabase, OlderSchema, StoreError)
from .lock import ControllerLock, ReaderLock
from .schema import APP_NAME, APPLICATION_ID, MIGRATIONS, REQUIRED_TABLES

SQLITE_MAGIC = b"SQLite format 3\x00"
# a good copy every this many write transactions (besides each clean close); a pass
# writes a few, so this is every few minutes of a busy controller
GOOD_COPY_EVERY = 500
_DAMAGE_CODES = (11, 26)   # SQLITE_CORRUPT, SQLITE_NOTADB

log = logging.getLogger("coscheduler.store")


def _is_damage(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _DAMAGE_CODES:
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text
SYNCHRONOUS_MODES = ("FULL", "NORMAL")


def _dumps(value: object, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except ValueError:
        raise InvalidInput(f"{what} holds a NaN or infinite number: {value!r}") from None


def _loads(text: str, what: str, path: Path) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{path}: {what} is not valid JSON ({exc})") from None


def _quota(value: float, name: str) -> float:
    v = check_finite(value, name, minimum=0.0, maximum=1.0)
    assert v is not None
    return v


class SqliteStore:
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
        self.path = Path(path).expanduser()
        self.readonly = readonly
        self._migrations = tuple(tuple(m) for m in _migrations)
        self.schema_version = len(self._migrations)
        self._conn: sqlite3.Connection | None = None
        self._claim: ControllerLock | None = None
        self._reader: ReaderLock | None = None
        self.created_dirs: list[Path] = []
        self.damaged: str | None = None   # why the file is known damaged (then never written)
        self._writes = 0
        self._writes_since_copy = 0
        fresh = self._check_file(create, create_dirs)
        self._conn = self._connect(busy_timeout_s)
        try:
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
            return self._check_path(p, create, create_dirs)
        except OSError as exc:
            raise StoreError(f"cannot read state database {p}: {exc.strerror or exc}") from None

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
        try:
            with open(p, "rb") as fh:
                head = fh.read(len(SQLITE_MAGIC))
        except OSError as exc:
            raise StoreError(f"cannot read state database {p}: {exc}") from None
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

    def _connect(self, busy_timeout_s: float) -> sqlite3.Connection:
        try:
            if self.readonly:
                uri = self.path.resolve().as_uri() + "?mode=ro"
                # With no -wal file no writer has the database open and everything is in the
                # main file: read it as immutable, which creates no -wal/-shm beside it
                # (mode=ro alone makes both and leaves them). The shared lock keeps a
                # controller from starting to write while we read.
                self._reader = ReaderLock(self.path)
                if self._reader.quiet and not Path(f"{self.path}-wal").exists():
                    uri += "&immutable=1"
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
        except sqlite3.DatabaseError as exc:
            if _is_damage(exc):
                self._damage("the backup could not read it", exc)
            else:
                log.warning("%s: keeping a good copy failed: %s", self.path, exc)
            return False
        except OSError as exc:
            log.warning("%s: keeping a good copy in %s failed: %s", self.path, self.good_copy, exc)
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
        damaged file becomes DamagedDatabase (and is never written again by this store)."""
        if self.readonly:
            raise StoreError(f"state database {self.path} is open read-only; cannot {what}")
        self._check_not_damaged(what)
        conn = self.conn
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
    def reading(self, what: str) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same snapshot."""
        conn = self.conn
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

    # -- the Recorder methods -----------------------------------------------------------------
    def record_decision(self, decision: Decision, host_quota: float, guest_quota: float,
                        class_state: ClassState | None = None) -> None:
        """Save a decision and the quotas applied: CPU quota fractions in [0, 1] (what the
        host keeps of its cores, what the guest gets of its cores). With ``class_state``,
        the class's decision count is saved in the same transaction."""
        row = self._decision_row(decision, host_quota, guest_quota)
        state_row = self._class_row(class_state) if class_state is not None else None
        with self.writing(f"record decision {decision.decision_id}") as conn:
            if conn.execute("SELECT 1 FROM decisions WHERE id = ?", (decision.decision_id,)).fetchone():
                raise InvalidInput(f"decision id {decision.decision_id} is already recorded in {self.path}")
            conn.execute("INSERT INTO decisions VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", row)
            if state_row is not None:
                self._upsert_class(conn, state_row)

    def record_outcome(self, outcome: OutcomeRecord) -> None:
        row = self._outcome_row(outcome)
        with self.writing(f"record the outcome of decision {outcome.decision_id}") as conn:
            self._insert_outcome(conn, outcome, row)

    def record_walltime_credit(self, credit: Mapping) -> int | None:
        """Save walltime given back to a host (``slurm_plugin.walltime.WalltimeCredit.as_dict``)
        with the host's latest decision; returns that decision's id (None: it had none)."""
        job_id = str(credit["job_id"])
        vals = [check_finite(credit[k], f"walltime credit {k}") for k in ("time", "limit_s", "projected_end")]
        minutes = int(credit["minutes"])
        if minutes < 1 or any(v is None for v in vals):
            raise InvalidInput(f"walltime credit of job {job_id}: {dict(credit)} is not a credit")
        with self.writing(f"record a walltime credit of job {job_id}") as conn:
            row = conn.execute("SELECT id FROM decisions WHERE host_job = ? ORDER BY id DESC LIMIT 1",
                               (job_id,)).fetchone()
            did = row[0] if row else None
            conn.execute("INSERT INTO walltime_credits (decision_id, job_id, time, minutes, limit_s, "
                         "projected_end, capped) VALUES (?,?,?,?,?,?,?)",
                         (did, job_id, vals[0], minutes, vals[1], vals[2], int(bool(credit.get("capped")))))
        return did

    def walltime_credits(self, decision_id: int) -> list[dict]:
        with self.reading(f"read the walltime credits of decision {decision_id}") as conn:
            rows = conn.execute("SELECT job_id, time, minutes, limit_s, projected_end, capped FROM "
                                "walltime_credits WHERE decision_id = ? ORDER BY id", (decision_id,)).fetchall()
        return [{"job_id": r[0], "time": r[1], "minutes": r[2], "limit_s": r[3],
                 "projected_end": r[4], "capped": bool(r[5])} for r in rows]

    def record_round(self, closed: RoundClosed) -> None:
        row = self._round_row(closed)
        with self.writing(f"record round {closed.round} of class {closed.job_class}") as conn:
            self._insert_round(conn, row)

    def save_class(self, state: ClassState) -> None:
        row = self._class_row(state)
        with self.writing(f"save class {state.job_class}") as conn:
            self._upsert_class(conn, row)

    def record_alone_runtime(self, job_class: str, runtime_s: float) -> None:
        validate_job_class(job_class)
        rt = check_finite(runtime_s, f"exclusive runtime of class {job_class}")
        if rt is None or rt <= 0:
            raise InvalidInput(f"exclusive runtime of class {job_class} must be > 0, got {runtime_s!r}")
        with self.writing(f"record an exclusive runtime of class {job_class}") as conn:
            conn.execute("INSERT INTO alone_runtimes (job_class, runtime_s, time) VALUES (?, ?, ?)",
                         (job_class, rt, time.time()))

    def alone_runtime(self, job_class: str) -> float | None:
        """Median of the recorded exclusive runtimes of the class, None if none."""
        with self.reading(f"read exclusive runtimes of class {job_class}") as conn:
            runs = [r[0] for r in conn.execute(
                "SELECT runtime_s FROM alone_runtimes WHERE job_class = ?", (job_class,))]
        return statistics.median(runs) if runs else None

    # -- combined writes (one transaction each) ---------------------------------------------
    def record_update(self, closed: RoundClosed, state: ClassState) -> None:
        """A closed round and the class state after it, atomically."""
        if closed.job_class != state.job_class or closed.round != state.rounds:
            raise InvalidInput(
                f"round {closed.round} of class {closed.job_class} does not match the class state "
                f"({state.job_class}, {state.rounds} rounds)"
            )
        round_row = self._round_row(closed)
        class_row = self._class_row(state)
        with self.writing(f"record round {closed.round} of class {closed.job_class}") as conn:
            self._insert_round(conn, round_row)
            self._upsert_class(conn, class_row)

    def record_observation(self, outcome: OutcomeRecord, state: ClassState,
                           closed: RoundClosed | None = None) -> None:
        """What ``AsaxLearner.observe`` changed, atomically: the outcome, the class state
        (its risk moved) and, if the observation closed a round, that round."""
        if closed is not None and (closed.job_class != state.job_class or closed.round != state.rounds):
            raise InvalidInput(f"round {closed.round} of class {closed.job_class} does not match "
                               f"the class state ({state.job_class}, {state.rounds} rounds)")
        out_row = self._outcome_row(outcome)
        class_row = self._class_row(state)
        round_row = self._round_row(closed) if closed is not None else None
        with self.writing(f"record the outcome of decision {outcome.decision_id}") as conn:
            job_class = self._insert_outcome(conn, outcome, out_row)
            if job_class != state.job_class:
                raise InvalidInput(f"decision {outcome.decision_id} is of class {job_class}, "
                                   f"not of {state.job_class}")
            if round_row is not None:
                self._insert_round(conn, round_row)
            self._upsert_class(conn, class_row)

    # -- loading -----------------------------------------------------------------------------
    def load(self, observed_per_class: int | None = None) -> LoadedState:
        """Everything needed to rebuild the learner, from one consistent snapshot.

        ``observed`` lists (decision, loss) of non-cancelled outcomes in the order they were
        recorded; ``observed_per_class`` keeps only each class's most recent ones (a fitted
        expert keeps a bounded window anyway).
        """
        with self.reading("load the learner state") as conn:
            classes = [self._class_from_row(job_class, text)
                       for job_class, text in conn.execute("SELECT job_class, state FROM classes ORDER BY job_class")]
            pending = [self._decision_from_row(r) for r in conn.execute(
                f"SELECT {_DECISION_COLS} FROM decisions d "
                "WHERE NOT EXISTS (SELECT 1 FROM outcomes o WHERE o.decision_id = d.id) ORDER BY d.id")]
            if observed_per_class is None:
                rows = conn.execute(
                    f"SELECT {_DECISION_COLS}, o.loss FROM outcomes o JOIN decisions d ON d.id = o.decision_id "
                    "WHERE o.kind != 'cancelled' ORDER BY o.seq").fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {_DECISION_COLS}, loss FROM (SELECT d.*, o.loss, o.seq, ROW_NUMBER() OVER "
                    "(PARTITION BY d.job_class ORDER BY o.seq DESC) AS recent FROM outcomes o "
                    "JOIN decisions d ON d.id = o.decision_id WHERE o.kind != 'cancelled') d "
                    "WHERE recent <= ? ORDER BY seq", (int(observed_per_class),)).fetchall()
            observed = [(self._decision_from_row(r[:-1]), float(r[-1])) for r in rows]
            top = conn.execute("SELECT MAX(id) FROM decisions").fetchone()[0]
        return LoadedState(classes, pending, (top or 0) + 1, observed)

    # -- rows <-> records ----------------------------------------------------------------------
    def _decision_row(self, d: Decision, host_quota: float, guest_quota: float) -> tuple:
        if not isinstance(d, Decision):
            raise InvalidInput(f"expected a Decision, got {type(d).__name__}")
        if isinstance(d.decision_id, bool) or not isinstance(d.decision_id, int) or d.decision_id < 1:
            raise InvalidInput(f"decision id must be an integer >= 1, got {d.decision_id!r}")
        where = f"decision {d.decision_id}"
        validate_job_id(d.host_job, f"{where}: host_job")
        validate_job_id(d.guest_job, f"{where}: guest_job")
        validate_job_class(d.job_class)
        check_finite(d.time, f"{where}: time", minimum=0.0)
        n, m = len(d.expert_names), len(d.mixture)
        if len(d.expert_dists) != n or len(d.weights) != n or any(len(p) != m for p in d.expert_dists):
            raise InvalidInput(f"{where}: {n} experts, {len(d.weights)} weights and "
                               f"{len(d.expert_dists)} distributions do not line up")
        if not 0 <= d.action_index < m:
            raise InvalidInput(f"{where}: action index {d.action_index} outside 0..{m - 1}")
        return (
            d.decision_id, float(d.time), d.host_job, d.guest_job, d.job_class, d.policy,
            _dumps(d.state.to_dict(), f"{where}: host state"), _dumps(list(d.expert_names), where),
            _dumps([list(p) for p in d.expert_dists], f"{where}: expert distributions"),
            _dumps(list(d.weights), f"{where}: weights"), _dumps(list(d.mixture), f"{where}: mixture"),
            int(d.action_index), check_finite(d.action_fraction, f"{where}: action fraction", minimum=0.0, maximum=1.0),
            _quota(host_quota, f"{where}: host quota"), _quota(guest_quota, f"{where}: guest quota"),
        )

    def _decision_from_row(self, r: Sequence) -> Decision:
        what = f"decision {r[0]}"
        try:
            return Decision(
                decision_id=r[0], time=r[1], host_job=r[2], guest_job=r[3], job_class=r[4], policy=r[5],
                state=HostState.from_dict(_loads(r[6], f"{what}: state", self.path)),
                expert_names=tuple(_loads(r[7], what, self.path)),
                expert_dists=tuple(tuple(float(x) for x in p) for p in _loads(r[8], what, self.path)),
                weights=tuple(float(w) for w in _loads(r[9], what, self.path)),
                mixture=tuple(float(x) for x in _loads(r[10], what, self.path)),
                action_index=r[11], action_fraction=r[12],
            )
        except StoreError:
            raise
        except (InvalidInput, TypeError, ValueError) as exc:
            raise StoreError(f"{self.path}: {what} is not a valid record: {exc}") from None

    def _outcome_row(self, o: OutcomeRecord) -> tuple:
        if not isinstance(o, OutcomeRecord):
            raise InvalidInput(f"expected an OutcomeRecord, got {type(o).__name__}")
        where = f"outcome of decision {o.decision_id}"
        if o.kind not in LOSS_KINDS:
            raise InvalidInput(f"{where}: kind must be one of {LOSS_KINDS}, got {o.kind!r}")
        return (
            int(o.decision_id), check_finite(o.time, f"{where}: time", minimum=0.0),
            check_finite(o.loss, f"{where}: loss", minimum=0.0, maximum=1.0), o.kind,
            check_finite(o.host_runtime_s, f"{where}: host runtime", minimum=0.0, allow_none=True),
            check_finite(o.host_walltime_s, f"{where}: host walltime", minimum=0.0, allow_none=True),
            check_finite(o.guest_runtime_s, f"{where}: guest runtime", minimum=0.0, allow_none=True),
            str(o.note),
        )

    def _insert_outcome(self, conn: sqlite3.Connection, o: OutcomeRecord, row: tuple) -> str:
        """Insert an outcome row; returns the decision's class."""
        found = conn.execute("SELECT job_class FROM decisions WHERE id = ?", (o.decision_id,)).fetchone()
        if found is None:
            raise InvalidInput(f"outcome for unknown decision id {o.decision_id} (not in {self.path})")
        if conn.execute("SELECT 1 FROM outcomes WHERE decision_id = ?", (o.decision_id,)).fetchone():
            raise InvalidInput(f"decision {o.decision_id} already has an outcome in {self.path}")
        conn.execute("INSERT INTO outcomes (decision_id, time, loss, kind, host_runtime_s, "
                     "host_walltime_s, guest_runtime_s, note) VALUES (?,?,?,?,?,?,?,?)", row)
        return found[0]

    def _round_row(self, c: RoundClosed) -> tuple:
        where = f"round {c.round} of class {c.job_class}"
        validate_job_class(c.job_class)
        if isinstance(c.round, bool) or not isinstance(c.round, int) or c.round < 1:
            raise InvalidInput(f"{where}: round must be an integer >= 1")
        return (c.job_class, c.round, check_finite(c.time, f"{where}: time", minimum=0.0),
                check_finite(c.gamma, f"{where}: gamma", minimum=0.0),
                _dumps(list(c.risk), f"{where}: risk"),
                _dumps(list(c.weights_before), f"{where}: weights before"),
                _dumps(list(c.weights_after), f"{where}: weights after"))

    @staticmethod
    def _insert_round(conn: sqlite3.Connection, row: tuple) -> None:
        # REPLACE: a round recorded without its class state (two separate calls, killed in
        # between) is closed again after the restart; the class state is the truth.
        conn.execute("INSERT OR REPLACE INTO weight_history VALUES (?,?,?,?,?,?,?)", row)

    def _class_row(self, state: ClassState) -> tuple:
        if not isinstance(state, ClassState):
            raise InvalidInput(f"expected a ClassState, got {type(state).__name__}")
        d = state.to_dict()
        ClassState.from_dict(d)  # the same checks a load will make: refuse now, not at restart
        last = check_finite(state.last_update, f"class {state.job_class}: last update", allow_none=True)
        return (state.job_class, _dumps(d, f"class {state.job_class}"), int(state.rounds), last, time.time())

    @staticmethod
    def _upsert_class(conn: sqlite3.Connection, row: tuple) -> None:
        conn.execute(
            "INSERT INTO classes (job_class, state, rounds, last_update, saved_at) VALUES (?,?,?,?,?) "
            "ON CONFLICT (job_class) DO UPDATE SET state = excluded.state, rounds = excluded.rounds, "
            "last_update = excluded.last_update, saved_at = excluded.saved_at", row)

    def _class_from_row(self, job_class: str, text: str) -> ClassState:
        d = _loads(text, f"class {job_class}", self.path)
        try:
            if not isinstance(d, dict):
                raise InvalidInput("not an object")
            return ClassState.from_dict(d)
        except InvalidInput as exc:
            raise StoreError(f"{self.path}: saved state of class {job_class!r} is not valid: {exc}") from None


_DECISION_COLS = ("d.id, d.time, d.host_job, d.guest_job, d.job_class, d.policy, d.state, d.expert_names, "
                  "d.expert_dists, d.weights, d.mixture, d.action_index, d.action_fraction")
