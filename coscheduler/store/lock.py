"""One controller per state database: an advisory lock beside the file.

Two controllers on one database each rebuild the learner and number their decisions from
the same next id; the second one's decisions collide with the first's ("decision id 21 is
already recorded") and are lost. SQLite itself cannot tell: both are valid writers. So a
controller takes ``<db>.lock`` exclusively (``flock``) for as long as it holds the store,
and writes its pid and command there; a second controller is refused with a message
naming that pid. The kernel drops the lock when the holder dies (even by SIGKILL), so a
stale lock cannot block a restart.

The lock file is never removed (removing it would let two processes lock two different
files of the same name). Readers (the operator CLI) take the same lock shared, only to
know that no controller is writing while they read the file as immutable; a controller
waits a moment for such readers rather than failing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time
from pathlib import Path

from .errors import StoreError


class DatabaseInUse(StoreError):
    """Another controller holds the state database."""


def lock_path(db: Path) -> Path:
    """``<db>.lock`` beside the file the path leads to: symbolic links are resolved first,
    so that two controllers reaching one database by two names take one lock."""
    real = Path(os.path.realpath(db))
    return real.with_name(real.name + ".lock")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for an error message."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return f"file type {stat.S_IFMT(mode):#o}"


def _holder(path: Path) -> str:
    try:
        text = path.read_text(errors="replace").split("\n")
    except OSError:
        return "another process"
    pid = text[0].strip() if text else ""
    if not pid.isdigit():
        return "another process (readers of the file, or one that left no pid)"
    alive = os.path.exists(f"/proc/{pid}")
    since = ""
    if len(text) > 1 and text[1].strip():
        try:
            since = time.strftime(", since %Y-%m-%d %H:%M:%S", time.localtime(float(text[1])))
        except ValueError:
            pass
    cmd = f", `{text[2].strip()[:120]}`" if len(text) > 2 and text[2].strip() else ""
    if not alive:
        return f"a reader (the last controller, pid {pid}, has ended)"
    return f"pid {pid}{cmd}{since}"


class ControllerLock:
    """The exclusive claim of one controller on a database file."""

    def __init__(self, db: Path, wait_s: float = 2.0):
        self.db = Path(db)
        self.path = lock_path(self.db)
        self.wait_s = wait_s
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            # (O_NONBLOCK: never wait on a FIFO put at the path; refused below)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(f"cannot create the controller lock {self.path} for state database "
                             f"{self.db}: {exc.strerror}") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise StoreError(f"controller lock {self.path} is not a regular file "
                             f"({file_kind(mode)}); remove it (a controller makes a new one)")
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise StoreError(f"cannot lock {self.path}: {exc.strerror}") from None
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise DatabaseInUse(
                        f"state database {self.db} is in use by another controller "
                        f"({_holder(self.path)}); one controller per database: stop that one "
                        "or give this one another --db") from None
                time.sleep(0.05)
        record = f"{os.getpid()}\n{time.time():.3f}\n{' '.join(sys.argv)[:500]}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # no pid left behind for the next refusal to name
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None


class ReaderLock:
    """A reader's shared lock, taken only if the lock file exists (readers create nothing):
    ``quiet`` tells whether no controller holds the database right now."""

    def __init__(self, db: Path):
        self.path = lock_path(Path(db))
        self._fd: int | None = None
        self.quiet = False
        try:
            # O_NONBLOCK: a FIFO here would block a plain open forever (every read command
            # hung). Links are followed, as ControllerLock follows them: the shared lock
            # must land on the file the controller locks.
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            self.quiet = True  # no controller ever claimed this file
            return
        except OSError:
            return
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise StoreError(f"controller lock {self.path} is not a regular file "
                             f"({file_kind(mode)}); remove it (a controller makes a new one)")
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        self._fd = fd
        self.quiet = True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
