"""The crash-recovery state file: what this agent has put into the kernel.

Written atomically (temporary file, then rename) whenever a job or quota changes, so that
after a ``kill -9`` the next start knows which job cgroups and quotas it left behind and can
give every job its full quota back. A broken file is reported and set aside, never fatal:
the agent also scans its own cgroup root, which finds leftovers without the file.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coscheduler import boundedfile, boundedjson
from coscheduler.progress import write_json_atomic, write_text_atomic

FORMAT = "cosched-agent-state/1"
# {"jobs": {id: {"spec": {...}}}} is four levels deep
MAX_STATE_DEPTH = 16
# A state file lists the jobs of one node: far below this; anything larger is not ours.
MAX_STATE_BYTES = 16 << 20


def _check_document(doc: Any) -> SavedState:
    """The file's top level, type-checked (jobs are checked one by one by the agent, with
    the same validation as a registration)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} document")
    jobs = doc.get("jobs") or {}
    if not isinstance(jobs, dict):
        raise ValueError("'jobs' is not an object")
    pid, saved_at = doc.get("pid"), doc.get("saved_at")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 22):
        raise ValueError(f"'pid' is not a process id: {str(pid)[:40]}")
    if saved_at is not None and not boundedjson.is_finite_number(saved_at):
        shown = repr(saved_at)[:40] if not isinstance(saved_at, int) else "an integer too large"
        raise ValueError(f"'saved_at' is not a finite time: {shown}")
    version, root = doc.get("cgroup_version"), doc.get("cgroup_root")
    if version not in (None, 1, 2) or isinstance(version, bool):
        raise ValueError(f"'cgroup_version' is not 1 or 2: {str(version)[:40]}")
    if root is not None and not isinstance(root, str):
        raise ValueError("'cgroup_root' is not a string")
    return SavedState(pid=pid, saved_at=saved_at, cgroup_version=version, cgroup_root=root,
                      clean_exit=doc.get("clean_exit") is True, jobs=jobs)


@dataclass
class SavedState:
    pid: int | None = None
    saved_at: float | None = None
    cgroup_version: int | None = None
    cgroup_root: str | None = None
    clean_exit: bool = False
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    problem: str | None = None  # why the file could not be used, when it could not


class StateFile:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def save(self, *, cgroup_version: int, cgroup_root: str,
             jobs: dict[str, dict[str, Any]] | None = None, clean_exit: bool = False,
             jobs_json: str | None = None) -> None:
        """The state; ``jobs``, or ``jobs_json``: the same object already encoded (the
        agent keeps each job's entry encoded until it changes: a save is then a join, not
        an encoding of every job)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"format": FORMAT, "pid": os.getpid(), "saved_at": time.time(),
               "cgroup_version": cgroup_version, "cgroup_root": cgroup_root,
               "clean_exit": clean_exit}
        if jobs_json is None:
            write_json_atomic(self.path, {**doc, "jobs": jobs or {}}, prefix=".state-")
            return
        head = json.dumps(doc)
        write_text_atomic(self.path, f'{head[:-1]}, "jobs": {jobs_json}}}', prefix=".state-")

    def load(self) -> SavedState | None:
        """The saved state, None when there is no file; a file that cannot be used (not
        UTF-8, not JSON, nested too deep, numbers out of range, wrong types, too large) is
        renamed aside and reported in ``problem``. Never raises: a broken file must not
        stop the agent that is about to lift the quotas it left."""
        try:
            # (no link followed, no FIFO waited on: a start must never hang here)
            raw = boundedfile.read_regular(self.path, MAX_STATE_BYTES, str(self.path),
                                           follow=False)
            doc = boundedjson.loads(raw, max_bytes=MAX_STATE_BYTES, max_depth=MAX_STATE_DEPTH,
                                    what="state file")
            return _check_document(doc)
        except FileNotFoundError:
            return None
        except boundedfile.FileUnusable as e:
            if not isinstance(e, boundedfile.FileTooLarge):
                # not set aside: a link or a FIFO someone put there is theirs to look at
                return SavedState(problem=f"cannot read state file {e}; not used")
            why = str(e).removeprefix(f"{self.path}: ")
        except (ValueError, TypeError, MemoryError) as e:
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        aside = self.path.with_name(self.path.name + f".broken-{int(time.time())}")
        try:
            os.replace(self.path, aside)
        except OSError:
            aside = self.path
        return SavedState(problem=f"state file {self.path} is unusable ({why[:300]}); "
                                  f"kept as {aside}")

    def remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


def remove_orphaned_roots(prefix: str, layout=None) -> list[str]:
    """Remove the empty cgroup trees ``<mount>/<prefix><pid>[-<n>]`` left by a process that died
    without cleaning up (kill -9), when that pid is gone.

    The local backend names its agents' roots ``cosched-local-<pid>-<n>``; its jobs die with it
    (parent-death signal), so what such a process leaves is empty cgroups. A tree that
    still holds processes is left alone (rmdir refuses it). Returns the roots removed.
    """

    import psutil

    from .cgroupfs import detect_layout

    layout = layout or detect_layout()
    mounts = {layout.cpu_mount} | ({layout.acct_mount} if layout.acct_mount else set())
    removed = []
    for mount in mounts:
        for root in mount.glob(f"{prefix}*"):
            pid = root.name[len(prefix):].split("-")[0]   # <pid> or <pid>-<n>
            if not root.is_dir() or not pid.isdigit() or psutil.pid_exists(int(pid)):
                continue
            dirs = sorted((d for d in root.rglob("*") if d.is_dir()),
                          key=lambda d: len(d.parts), reverse=True) + [root]
            try:
                for d in dirs:
                    os.rmdir(d)
                removed.append(str(root))
            except OSError as e:
                if e.errno not in (errno.EBUSY, errno.ENOTEMPTY, errno.ENOENT):
                    raise
    return removed
