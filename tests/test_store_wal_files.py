"""The files SQLite keeps beside the state database, ``<db>-wal`` and ``<db>-shm``, as a
crash, a copy or a hostile hand leaves them: read commands create nothing beside the file and
still see every commit, and a FIFO (or any file that is not a regular one) in their place is
refused in one line naming it, as one at the database or its lock is."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.store import SqliteStore, StoreError

from nobody import nobody  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _killed_writer(db: Path) -> int:
    """A writer that commits with checkpoints off and is killed (SIGKILL): every commit is
    in ``<db>-wal`` only. Returns the number of decisions it recorded."""
    code = f"""
import os, signal, sys
sys.path.insert(0, {str(TESTS)!r})
from coscheduler.learner import AsaxLearner
from coscheduler.store import SqliteStore
from store_workload import CONFIG, drive
store = SqliteStore({str(db)!r}, create=True)
store.conn.execute("PRAGMA wal_autocheckpoint=0")
drive(AsaxLearner(CONFIG), store, max_commits=40)
print(store.conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == -signal.SIGKILL, r.stderr
    return int(r.stdout.split()[-1])


@pytest.fixture(scope="module")
def wal_left(tmp_path_factory) -> tuple[Path, int]:
    """(a folder with state.db and state.db-wal, no -shm; the decisions the log holds)."""
    folder = tmp_path_factory.mktemp("wal-left")
    db = folder / "state.db"
    n = _killed_writer(db)
    Path(f"{db}-shm").unlink()     # removed, or never copied along with the other two
    assert Path(f"{db}-wal").stat().st_size > 0 and n > 0
    return folder, n


def _copy(wal_left: tuple[Path, int], dest: Path) -> Path:
    for f in wal_left[0].iterdir():
        shutil.copy(f, dest / f.name)
    return dest / "state.db"


def test_a_leftover_wal_without_its_shm_is_read_and_nothing_is_created(wal_left, tmp_path):
    """mode=ro made ``state.db-shm`` beside the file (and left it) to read the log."""
    db = _copy(wal_left, tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    content = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    r = CliRunner().invoke(main, ["decisions", "list", "--last", "1000", "--json", "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.output)["decisions"]) == wal_left[1]     # the commits in the log are seen
    for args in (["experts", "show"], ["decisions", "show", "1"]):
        assert CliRunner().invoke(main, [*args, "--db", str(db)]).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == content
    # a controller then opens it as ever, with every commit
    with SqliteStore(db) as store:
        store.claim_controller()
        assert len(store.load().pending) + len(store.load().observed) > 0


@pytest.mark.root
def test_a_leftover_wal_reads_for_a_user_who_may_not_write_beside_it(wal_left, nobody):
    """It was "damaged or not an SQLite database: unable to open database file"."""
    folder = nobody.scratch()     # root's, 0755: nobody may read but not create files
    db = _copy(wal_left, folder)
    for f in folder.iterdir():
        os.chmod(f, 0o644)
    r = nobody.run(["decisions", "list", "--last", "1000", "--json", "--db", str(db)])
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["decisions"]) == wal_left[1]
    assert sorted(p.name for p in folder.iterdir()) == ["state.db", "state.db-wal"]


def cli(*args: str) -> subprocess.CompletedProcess:
    """The CLI in a child process with a timeout (a FIFO can make an open wait for ever)."""
    return subprocess.run([sys.executable, "-m", "coscheduler", *args], capture_output=True,
                          text=True, timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.fixture(scope="module")
def sound(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("sound") / "state.db"
    with SqliteStore(db, create=True, synchronous="NORMAL") as store:
        store.record_alone_runtime("montage/mProject", 12.5)
    return db


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_fifo_beside_the_database_is_refused_by_read_commands(sound, tmp_path, suffix):
    """Not checked before: the reads answered from the main file as if nothing were wrong."""
    db = tmp_path / "state.db"
    shutil.copy(sound, db)
    os.mkfifo(f"{db}{suffix}")
    for command in (["decisions", "list"], ["experts", "show"]):
        r = cli(*command, "--db", str(db))
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().splitlines() == [
            f"Error: {db}{suffix} is not a regular file (a FIFO); SQLite keeps the "
            f"{'write-ahead log' if suffix == '-wal' else 'write-ahead log index'} of state "
            f"database {db} there: remove it"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_fifo_beside_the_database_is_refused_by_a_controller(sound, tmp_path, suffix):
    """-wal: it opened, and every write failed as a "disk I/O error" (a passing fault to the
    controller, retried for ever); -shm: "damaged or cannot be locked"."""
    db = tmp_path / "state.db"
    shutil.copy(sound, db)
    os.mkfifo(f"{db}{suffix}")
    with pytest.raises(StoreError, match=rf"{db}{suffix} is not a regular file \(a FIFO\)"):
        SqliteStore(db).close()
    os.unlink(f"{db}{suffix}")
    with SqliteStore(db) as store:       # removed, as the message says: all is there
        assert store.alone_runtime("montage/mProject") == 12.5
