"""The jobs' progress files, as the agent reads them on every tick.

A job's user writes its progress file and the agent reads it as root, so a file is opened
without following a link or blocking (``O_NOFOLLOW | O_NONBLOCK``) and read only when the
open file itself is a small regular file: a check on the path before the open could be
raced (the file swapped for a FIFO, which would hang the tick and the lease checks with
it, or for a link to a file the user may not read).

Cheap enough for every job at 1 Hz: the progress directory is listed once per tick, so a
job that writes no progress costs no system call, and a file is read again only when it
changed (inode, size or modification time). A file modified within the last second is
read again at the next tick whatever its times say: a rewrite within the file system's
clock resolution would keep them (the way git treats "racy" index entries).
"""

from __future__ import annotations

import os
import stat
import time

from coscheduler.progress import MAX_PROGRESS_BYTES, Progress, parse_progress

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
RACY_NS = 1_000_000_000


def read_progress_file(path: str) -> tuple[tuple[int, int, int] | None, Progress | None]:
    """(the open file's identity (inode, size, mtime ns), or None when not read; its
    record, or None when it is not one). Links, FIFOs, devices, directories and files of
    more than ``MAX_PROGRESS_BYTES`` are not read."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PROGRESS_BYTES:
            return None, None
        chunks, size = [], 0
        while size <= MAX_PROGRESS_BYTES:
            b = os.read(fd, MAX_PROGRESS_BYTES + 1 - size)
            if not b:
                break
            chunks.append(b)
            size += len(b)
    except OSError:
        return None, None
    finally:
        os.close(fd)
    return (st.st_ino, st.st_size, st.st_mtime_ns), parse_progress(b"".join(chunks),
                                                                    f"progress file {path}")


class ProgressFiles:
    """The progress files of one agent's jobs, all under ``directory``. Call ``list`` once
    per tick, then ``read`` for each job (one thread: the tick's)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.path.realpath(directory)
        self._names: set[str] | None = None
        # path -> (identity when read, record, whether that identity may be trusted)
        self._seen: dict[str, tuple[tuple[int, int, int], Progress | None, bool]] = {}
        self.reads = 0   # files opened and parsed (tests, diagnostics)

    def list(self) -> None:
        """The directory's entries for this tick; if it cannot be listed, every file is
        looked at on its own."""
        try:
            with os.scandir(self.directory) as it:
                self._names = {e.name for e in it}
        except OSError:
            self._names = None

    def read(self, path: str | None) -> Progress | None:
        """The job's latest record, or None (no file, or not a record)."""
        if not path:
            return None
        parent, _, name = path.rpartition("/")   # (os.path.split costs more, per job and tick)
        if self._names is not None and parent == self.directory and name not in self._names:
            self._seen.pop(path, None)
            return None
        seen = self._seen.get(path)
        if seen is not None and seen[2]:
            try:
                st = os.lstat(path)
            except OSError:
                self._seen.pop(path, None)
                return None
            if (st.st_ino, st.st_size, st.st_mtime_ns) == seen[0]:
                return seen[1]
        ident, prog = read_progress_file(path)
        self.reads += 1
        if ident is None:
            self._seen.pop(path, None)
            return None
        trusted = time.time_ns() - ident[2] > RACY_NS
        self._seen[path] = (ident, prog, trusted)
        return prog

    def forget(self, path: str | None) -> None:
        if path:
            self._seen.pop(path, None)
