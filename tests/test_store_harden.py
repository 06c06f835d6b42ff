"""The state store against a careless operator (issue 8, items 10-12): one controller per
database, read-only commands that create nothing, one-line errors for unreadable paths, no
silent creation of folders. Real files, real processes; the unprivileged cases run the CLI
as user nobody with the distribution's own python3.11 (the project's interpreter may live
under /root, which nobody cannot enter).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.backends import VirtualBackend
from coscheduler.cli import main
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner
from coscheduler.policies.coalloc import SpaceSharing
from coscheduler.store import SqliteStore, StoreError

from nobody import nobody  # noqa: F401  (fixture)
from store_workload import CONFIG, drive

ROOT = Path(__file__).resolve().parents[1]
COSCHED = [sys.executable, "-c", "from coscheduler.cli import main; main()"]
HOLDER = r"""
import sys, time
from coscheduler.backends import VirtualBackend
from coscheduler.controller import Controller
from coscheduler.policies.coalloc import SpaceSharing
from coscheduler.store import SqliteStore
store = SqliteStore(sys.argv[1], create=True)
ctl = Controller(VirtualBackend({"n1": 4}), SpaceSharing(), store)
print("holding", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder():
    """Another process running a controller on a database; yields (path -> pid)."""
    started = []

    def hold(path: Path) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE,
                             text=True)
        started.append(p)
        assert p.stdout.readline().strip() == "holding"
        return p

    yield hold
    for p in started:
        p.kill()
        p.wait()


# ---- item 10 -------------------------------------------------------------------------------
def test_a_second_controller_is_refused_naming_the_first_ones_pid(tmp_path, holder):
    path = tmp_path / "state.db"
    first = holder(path)
    for make in (lambda s: Controller(VirtualBackend({"n1": 4}), SpaceSharing(), s),
                 lambda s: Controller.from_recorder(VirtualBackend({"n1": 4}), s, "asax")):
        store = SqliteStore(path)
        with pytest.raises(StoreError, match=rf"in use by another controller \(pid {first.pid}"):
            make(store)
        store.close()
    first.send_signal(signal.SIGKILL)  # the kernel drops a dead holder's lock
    first.wait()
    with SqliteStore(path) as store:
        Controller(VirtualBackend({"n1": 4}), SpaceSharing(), store)
    # a reader is never refused; a controller starting while one reads waits for it
    opened = threading.Event()

    def read_a_while() -> None:
        with SqliteStore(path, readonly=True):
            opened.set()
            time.sleep(0.5)

    threading.Thread(target=read_a_while).start()
    assert opened.wait(5)
    with SqliteStore(path) as store:
        t0 = time.monotonic()
        Controller(VirtualBackend({"n1": 4}), SpaceSharing(), store)
        assert 0.3 < time.monotonic() - t0 < 2.0


@pytest.mark.root
def test_a_second_demo_on_one_database_stops_at_once_and_says_who_holds_it(tmp_path, holder):
    db = tmp_path / "demo.db"
    first = holder(db)
    t0 = time.monotonic()
    r = subprocess.run(COSCHED + ["demo", "--policies", "asax", "--scale", "0.004", "--db", str(db),
                                  "--workdir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 1, (r.stdout, r.stderr[-2000:])
    assert f"in use by another controller (pid {first.pid}" in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30


# ---- item 11 -------------------------------------------------------------------------------
def _listing(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def test_read_commands_create_and_change_nothing(tmp_path):
    path = tmp_path / "state.db"
    learner = AsaxLearner(CONFIG)
    with SqliteStore(path, create=True, synchronous="NORMAL") as store:
        drive(learner, store, max_commits=60)
    klass = learner.known_classes()[0]
    before, content = _listing(tmp_path), path.read_bytes()
    for args in (["experts", "show"], ["experts", "show", "--json"], ["experts", "history", klass],
                 ["decisions", "list"], ["decisions", "list", "--json"], ["decisions", "show", "1"]):
        r = CliRunner().invoke(main, args + ["--db", str(path)])
        assert r.exit_code == 0, (args, r.output)
        assert _listing(tmp_path) == before, f"{args} left {sorted(_listing(tmp_path))}"
    assert path.read_bytes() == content
    # while a controller has it open (WAL in use) reads still work and see its commits
    with SqliteStore(path) as store:
        store.claim_controller()
        store.record_alone_runtime(klass, 12.5)
        assert Path(f"{path}-wal").exists()
        r = CliRunner().invoke(main, ["experts", "show", "--db", str(path), "--json"])
        assert r.exit_code == 0, r.output


# ---- item 12 -------------------------------------------------------------------------------
@pytest.mark.root
def test_an_unreadable_database_path_is_a_one_line_error(nobody):
    locked = nobody.scratch() / "private"
    locked.mkdir(mode=0o700)
    db = locked / "state.db"
    SqliteStore(db, create=True).close()
    for args, home in ((["experts", "show", "--db", str(db)], "/nonexistent"),
                       (["decisions", "list", "--db", str(db)], "/nonexistent"),
                       (["experts", "show"], str(locked))):   # the default under an unreadable HOME
        r = nobody.run(args, home)
        assert r.returncode == 1, (args, r.stdout, r.stderr[-1500:])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr[-1500:]
        assert "Permission denied" in lines[0] and "state database" in lines[0]


def test_a_store_in_a_missing_folder_is_refused_unless_asked(tmp_path):
    where = tmp_path / "no" / "such" / "dir" / "state.db"
    with pytest.raises(StoreError, match="folder .*does not exist"):
        SqliteStore(where, create=True)
    assert not (tmp_path / "no").exists()
    with SqliteStore(where, create=True, create_dirs=True) as store:
        assert store.created_dirs == [tmp_path / "no", tmp_path / "no" / "such",
                                      tmp_path / "no" / "such" / "dir"]


@pytest.mark.root
def test_demo_refuses_a_database_in_a_missing_folder(tmp_path):
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    t0 = time.monotonic()
    r = subprocess.run(COSCHED + ["demo", "--scale", "0.004", "--db", str(db),
                                  "--workdir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "does not exist" in r.stderr and str(db.parent) in r.stderr
    assert not (tmp_path / "nonexistent").exists()
    assert time.monotonic() - t0 < 30
