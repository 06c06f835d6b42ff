"""The jobs' progress files, as the agent reads them on every tick.

A job's user writes its progress file and the agent reads it as root, so a file is opened
without following a link or blocking (``O_NOFOLLOW | O_NONBLOCK``) and read only when the
open file itself is a small regular file: a check on the path before the open could be
raced (the file swapped for a FIFO, which would hang the tick and the lease checks with
it, or for a link to a file the user may not read). The file must also belong to the
job's user (the real uid of its processes) or to root: the progress folder is writable by
every user (sticky, like /tmp), so another user could otherwise create a job's file before
the job does, keep the job from replacing it, and report its progress for it.

Cheap enough for every job at 1 Hz: the progress directory is listed once per tick (up to
a bound: every user may create files there), so a job that writes no progress costs no
system call, and a file is read again only when it changed (inode, size or modification
time). A file modified within the last second is read again at the next tick whatever its
times say: a rewrite within the file system's clock resolution would keep them (the way
git treats "racy" index entries).
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time

from coscheduler.oldfiles import prune_old_files, remove_file_in
from coscheduler.progress import MAX_PROGRESS_BYTES, Progress, parse_progress

log = logging.getLogger("monitoring.agent")

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
RACY_NS = 1_000_000_000
LISTING_MIN = 256
LISTING_PER_JOB = 4
# What the hourly prune may remove: records, and the temporary files of a writer killed
# between its write and its rename (coscheduler.progress.write_text_atomic's prefix).
_PRUNABLE = re.compile(r"[^/]{1,250}\.json|\.tmp-[^/]{1,250}")


class NotTheJobs(Exception):
    """The progress file belongs to another user than the job's (and not to root)."""


def read_progress_file(path: str, owner: int
                       ) -> tuple[tuple[int, int, int] | None, Progress | None]:
    """(the open file's identity (inode, size, mtime ns), or None when not read; its
    record, or None when it is not one). Links, FIFOs, devices, directories and files of
    more than ``MAX_PROGRESS_BYTES`` are not read; NotTheJobs when the file belongs
    neither to ``owner`` (the job's uid) nor to root."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None, None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PROGRESS_BYTES:
            return None, None
        if st.st_uid != owner and st.st_uid != 0:
            raise NotTheJobs(f"progress file {path} belongs to uid {st.st_uid}, not to the "
                             f"job's user (uid {owner}) or root: not read")
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
        self.listed = False   # whether this tick's listing is complete (tests, diagnostics)
        # path -> (identity when read, record, whether that identity may be trusted, the
        # owner it was read for)
        self._seen: dict[str, tuple[tuple[int, int, int], Progress | None, bool, int]] = {}
        self.reads = 0   # files opened and parsed (tests, diagnostics)
        self.refused: dict[str, str] = {}   # path -> why its file was not read (latest)
        self._news: dict[str, str] = {}     # refusals not yet taken by ``new_refusal``

    def list(self, jobs: int) -> None:
        """The directory's entries for this tick (``jobs``: how many jobs may have a file
        there). Every user may create files in it, so the listing stops after
        ``LISTING_PER_JOB`` entries per job (at least ``LISTING_MIN``): a folder flooded
        with files costs a bounded read, and each job's file is then looked at on its own,
        as when the folder cannot be listed."""
        cap = max(LISTING_MIN, LISTING_PER_JOB * jobs)
        names: set[str] | None = set()
        try:
            with os.scandir(self.directory) as it:
                for e in it:
                    if len(names) >= cap:
                        names = None
                        break
                    names.add(e.name)
        except OSError:
            names = None
        self._names = names
        self.listed = names is not None

    def read(self, path: str | None, owner: int | None) -> Progress | None:
        """The job's latest record, or None (no file, not a record, or not the job's:
        ``owner`` is the uid of the job's processes, None while it has none)."""
        if not path or owner is None:
            return None
        parent, _, name = path.rpartition("/")   # (os.path.split costs more, per job and tick)
        if self._names is not None and parent == self.directory and name not in self._names:
            self._seen.pop(path, None)
            return None
        seen = self._seen.get(path)
        if seen is not None and seen[2] and seen[3] == owner:
            try:
                st = os.lstat(path)
            except OSError:
                self._seen.pop(path, None)
                return None
            if (st.st_ino, st.st_size, st.st_mtime_ns) == seen[0]:
                return seen[1]
        try:
            ident, prog = read_progress_file(path, owner)
        except NotTheJobs as e:
            if self.refused.get(path) != str(e):
                log.warning("%s", e)
                self._news[path] = str(e)
            self.refused[path] = str(e)
            self._seen.pop(path, None)
            return None
        self.reads += 1
        self.refused.pop(path, None)
        if ident is None:
            self._seen.pop(path, None)
            return None
        trusted = time.time_ns() - ident[2] > RACY_NS
        self._seen[path] = (ident, prog, trusted, owner)
        return prog

    def new_refusal(self, path: str | None) -> str | None:
        """Why the file at ``path`` was refused, once per new reason (for the job's events)."""
        return self._news.pop(path, None) if path else None

    def forget(self, path: str | None) -> None:
        if path:
            self._seen.pop(path, None)
            self.refused.pop(path, None)
            self._news.pop(path, None)

    def remove(self, path: str | None) -> bool:
        """Delete a retired job's file, if it lies directly in the folder (a file in a
        subfolder a user made is left: that subfolder could be swapped for a link).
        True when a file was removed."""
        self.forget(path)
        if not path:
            return False
        parent, _, name = path.rpartition("/")
        return parent == self.directory and remove_file_in(self.directory, name)

    def prune(self, before: float, keep: set[str | None]) -> int:
        """Remove the folder's records and temporary files last modified before ``before``
        (wall time), but the files at the paths in ``keep`` (the known jobs'): those of
        jobs that ended while no agent ran, which ``remove`` never saw."""
        names = {p.rpartition("/")[2] for p in keep if p and p.rpartition("/")[0] == self.directory}
        return prune_old_files(self.directory, before, _PRUNABLE, keep=names,
                               what="progress file")
