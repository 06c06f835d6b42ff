"""What the operator commands share: the --db option, opening the state read-only, and
formatting for an 80-column terminal."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterator

import click

from ..model import InvalidInput
from ..store import MissingStateDatabase, SqliteStore, StoreError, default_db_path
from ..store.paths import expand_user

WIDTH = 80


def db_option(fn: Callable) -> Callable:
    return click.option(
        "--db", "db", type=click.Path(dir_okay=False, path_type=Path), default=None,
        help="State database (default: $COSCHED_DB, else /var/lib/coscheduler/state.db as "
             "root, else ~/.local/state/coscheduler/state.db).",
    )(fn)


def resolve_db(db: Path | None) -> Path:
    try:
        return expand_user(db, "--db") if db is not None else default_db_path()
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def open_readonly(db: Path | None) -> Iterator[SqliteStore]:
    """The state database opened for reading (never creates or changes a file), closed at
    the end of the ``with``; a damaged record read inside it (StoreError, which names the
    file and the record) is the command's one-line error, not a traceback."""
    with open_store(db, readonly=True) as store:
        yield store


@contextmanager
def open_store(db: Path | None, readonly: bool) -> Iterator[SqliteStore]:
    """``open_readonly``, or (``readonly`` False) opened for writing an existing file."""
    path = resolve_db(db)
    try:
        store = SqliteStore(path, readonly=readonly)
    except MissingStateDatabase:
        raise click.ClickException(
            f"no state database at {path} (give --db PATH or set COSCHED_DB)") from None
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    with store:
        try:
            yield store
        except StoreError as exc:
            raise click.ClickException(str(exc)) from None


def echo_json(obj: object, indent: int | None = 2) -> None:
    """``obj`` printed as strict JSON (``indent`` None: on one line). The readers and the
    store check the values they hand out; this is the last guard, so that a value that
    still slips through (NaN, Infinity, which JSON has not) is one line and nothing half
    printed, not a traceback or a JSON no strict parser reads."""
    try:
        text = json.dumps(obj, indent=indent, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise click.ClickException(f"cannot print the answer as JSON: {exc}") from None
    click.echo(text)


def fmt_time(t: float | None) -> str:
    """Unix times as UTC date and time; small numbers (simulated clocks) as seconds."""
    if t is None:
        return "-"
    if t >= 1e8:
        try:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
        except (OverflowError, OSError, ValueError):
            # a finite time past what time_t holds (1e300 is a valid write): shown as is
            return f"t={t:.6g} s"
    return f"t={t:,.1f} s"


def pct(x: float | None, width: int = 6, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-".rjust(width)
    return f"{100 * x:{width - 2}.{digits}f} %"


def bar(x: float, width: int = 30) -> str:
    """An ASCII bar for a share in [0, 1] (ASCII: operators' terminals vary)."""
    full = round(max(0.0, min(1.0, x)) * width)
    return "#" * full + "." * (width - full)


def clip(text: str, width: int) -> str:
    """Fit text into a column, keeping its end (class names differ in their last part)."""
    return text if len(text) <= width else ".." + text[-(width - 2):]


def fmt_loss(loss: float | None) -> str:
    return "pending" if loss is None else f"{loss:.3f}"
