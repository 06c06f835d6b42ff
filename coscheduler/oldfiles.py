"""Old per-job files removed from a folder that would otherwise grow by a file per job for
as long as a cluster runs: the Slurm job wrapper's usage records, the node agent's progress
files, the Mesos queue's ``done/`` and ``rejected/`` records.

Several of these folders are writable by every user (mode 1777), and the caller runs as
root: an entry is removed by name inside a folder opened once (``dir_fd``), never through a
path a user could swap a directory of for a link, and a link is removed, never followed.
A flooded folder costs a bounded scan. Pure file-system work, no policy: callers say what
to keep and for how long.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Container

from . import clocks

log = logging.getLogger("coscheduler.oldfiles")

SCAN_MAX = 200_000     # entries looked at per scan
WEEK_S = 7 * 86400.0
HOUR_S = 3600.0


def prune_old_files(directory: str | os.PathLike, before: float, name: re.Pattern[str],
                    keep: Container[str] = (), max_entries: int = SCAN_MAX,
                    what: str = "file") -> int:
    """Remove the entries of ``directory`` whose name fully matches ``name``, that are not
    directories, not in ``keep`` (names), and were last modified before ``before`` (wall
    time). Looks at ``max_entries`` entries at most. Returns how many it removed; an error
    is logged (naming the folder or the file), never raised."""
    removed = 0
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        log.warning("%s folder %s not pruned: %s", what, directory, exc)
        return 0
    try:
        with os.scandir(dir_fd) as it:
            for k, entry in enumerate(it):
                if k >= max_entries:
                    break
                if not name.fullmatch(entry.name) or entry.name in keep:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if st.st_mtime >= before or stat.S_ISDIR(st.st_mode):
                        continue
                    os.unlink(entry.name, dir_fd=dir_fd)
                    removed += 1
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    log.warning("%s %s not removed: %s", what, os.path.join(directory, entry.name), exc)
    except OSError as exc:
        log.warning("%s folder %s not pruned: %s", what, directory, exc)
    finally:
        os.close(dir_fd)
    return removed


def remove_file_in(directory: str | os.PathLike, filename: str) -> bool:
    """Remove ``filename`` (a plain name, no ``/``) from ``directory`` if it is not a
    directory; a link is removed, not followed. False when it was not there or not removed
    (logged)."""
    if not filename or "/" in filename or filename in (".", ".."):
        return False
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.stat(filename, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            return False
        os.unlink(filename, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("%s not removed: %s", os.path.join(directory, filename), exc)
        return False
    finally:
        os.close(dir_fd)


@dataclass
class Retention:
    """When a long-running part prunes a folder: at most once per ``every_s``, the files
    older than ``kept_s``. ``due`` is the clock check; ``run`` prunes if due."""

    kept_s: float = WEEK_S
    every_s: float = HOUR_S
    last: float = field(default=-float("inf"))

    def due(self, now: float) -> bool:
        return clocks.due(now, self.last, self.every_s)

    def run(self, prune: Callable[[float], int], now: float | None = None) -> int | None:
        """``prune(before)`` if due (None if not), ``before`` being ``now - kept_s``."""
        now = time.time() if now is None else now
        if not self.due(now):
            return None
        self.last = now
        return prune(now - self.kept_s)


__all__ = ["HOUR_S", "Retention", "SCAN_MAX", "WEEK_S", "prune_old_files", "remove_file_in"]
