"""How a job reports progress: a small JSON file the monitoring agent reads.

A job (or each workflow-stage program) writes ``{"done": N, "total": M, "time": t}`` to the
file named by the environment variable ``COSCHED_PROGRESS_FILE`` (the backend that starts
the job sets it), or calls ``cosched progress --done N --total M``. Writes are atomic
(write to a temporary file, then rename), so a reader never sees half a record.
"""

from __future__ import annotations

import json
import os
import stat
import time
from typing import Any
from dataclasses import dataclass
from pathlib import Path

from . import boundedjson, outputs

ENV_VAR = "COSCHED_PROGRESS_FILE"
# a progress record is three numbers; anything longer is not one
MAX_PROGRESS_BYTES = 65536


def write_json_atomic(path: str | os.PathLike, doc: Any, prefix: str = ".tmp-") -> Path:
    """Write ``doc`` as JSON to ``path`` so a reader sees the old or the new file, never
    half of one: write a temporary file beside it, then rename it over the target."""
    # dumps, then one write: json.dump streams through the pure-Python encoder (ten times
    # slower; the agent saves its whole state at every change)
    return write_text_atomic(path, json.dumps(doc), prefix)


def write_text_atomic(path: str | os.PathLike, text: str, prefix: str = ".tmp-") -> Path:
    """``text`` to ``path``, all of it or nothing (``coscheduler.outputs.write_text``:
    never over a device node, FIFO or folder; an OSError is an ``OutputError`` naming
    the path)."""
    return outputs.write_text(path, text, prefix=prefix, make_parents=False)


@dataclass(frozen=True)
class Progress:
    done: int
    total: int | None
    time: float


def write_progress(done: int, total: int | None, path: str | os.PathLike | None = None,
                   now: float | None = None) -> Path | None:
    """Record progress atomically. Returns the path written, or None when no path is set."""
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        raise ValueError(f"progress 'done' must be an integer >= 0, got {done!r}")
    if total is not None and (isinstance(total, bool) or not isinstance(total, int) or total < 0):
        raise ValueError(f"progress 'total' must be an integer >= 0, got {total!r}")
    target = path if path is not None else os.environ.get(ENV_VAR)
    if not target:
        return None
    record = {"done": done, "total": total, "time": time.time() if now is None else now}
    return write_json_atomic(target, record, prefix=".progress-")


def check_progress_file(path: str | os.PathLike) -> Path:
    """``path`` as a Path when a progress record may be written there: absent, or a
    progress record already (a progress file may be named by anyone, and the record is
    written over it); else an ``OutputError`` naming it."""
    target = outputs.check_output(path)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise outputs.OutputError(f"cannot use progress file {path}: {e.strerror}") from None
    if (not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PROGRESS_BYTES
            or read_progress(target) is None):
        raise outputs.OutputError(
            f"{path} exists and is not a progress file (a {{\"done\": N, ...}} record); "
            "refusing to overwrite it")
    return target


def read_progress(path: str | os.PathLike) -> Progress | None:
    """Read a progress file; None when absent or unusable (a job may not report, and a
    job's own file is never trusted: bounded in size and nesting, numbers checked)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_PROGRESS_BYTES + 1)
    except OSError:
        return None
    return parse_progress(raw, f"progress file {path}")


def parse_progress(raw: bytes, what: str = "progress record") -> Progress | None:
    """A progress record from a file's bytes; None when they are not one."""
    try:
        rec = boundedjson.loads(raw, max_bytes=MAX_PROGRESS_BYTES, max_depth=4, what=what)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    done, total, t = rec.get("done"), rec.get("total"), rec.get("time", 0.0)
    if isinstance(done, bool) or not isinstance(done, int) or done < 0:
        return None
    if total is not None and (isinstance(total, bool) or not isinstance(total, int)
                              or total < 0):
        return None
    if not boundedjson.is_finite_number(t):
        return None
    return Progress(done=done, total=total, time=float(t))
