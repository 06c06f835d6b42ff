"""Numeric option types that refuse what no command can use, at parse time.

Every int and float option of the command line gets a bound when its command is loaded
(``harden``): integers at most ``INT_MAX`` (a 20-digit count overflowed into a traceback
deep in a command), floats finite (``nan`` passed every comparison-based check). Options
that mean something narrower declare their own range in their module (``FiniteRange``,
``click.IntRange``); ``harden`` keeps those bounds and adds what is missing. A bad value is
click's one-line usage error naming the option, before the command runs or connects to
anything.
"""

from __future__ import annotations

import math
from typing import Any

import click

INT_MAX = 2 ** 63 - 1   # SQLite's and the kernel's largest integer
# no job of a workflow takes more cores than this (the node agent's MAX_CORES is per node)
MAX_JOB_CORES = 1 << 20


class _OwnRange:
    """Help texts of a range without the bounds ``harden`` adds (they are the machine's
    limits, not the option's meaning): click would print ``x<=None`` for an unbounded
    float and 19-digit limits for every integer. Unbounded, the type's name drops "range"."""

    plain_name = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self._describe_range():
            self.name = self.plain_name

    def _describe_range(self) -> str:
        lo, hi = self.min, self.max
        lo = None if lo is None or lo == -INT_MAX else lo
        hi = None if hi is None or hi == INT_MAX else hi
        lo_op = "<" if self.min_open else "<="
        hi_op = "<" if self.max_open else "<="
        if lo is None and hi is None:
            return ""
        if lo is None:
            return f"x{hi_op}{hi}"
        if hi is None:
            return f"x{'>' if self.min_open else '>='}{lo}"
        return f"{lo}{lo_op}x{hi_op}{hi}"


class BoundedInt(_OwnRange, click.IntRange):
    """An integer range whose help text leaves out the machine's limits."""

    plain_name = "integer"


class FiniteRange(_OwnRange, click.FloatRange):
    """A float in a range that is also finite (click's FloatRange lets nan through)."""

    name = "float range"
    plain_name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("nan", "+nan", "-nan"):
            self.fail(f"{value!r} is not a number.", param, ctx)
        rv = super().convert(value, param, ctx)
        if isinstance(rv, float) and not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def positive(max: float | None = None) -> FiniteRange:
    """A finite float > 0 (seconds, scales, CPUs)."""
    return FiniteRange(0.0, max, min_open=True)


def _bounded(t: click.ParamType) -> click.ParamType:
    if isinstance(t, click.IntRange):
        if t.max is None or t.max > INT_MAX:
            return BoundedInt(t.min, INT_MAX, min_open=t.min_open, max_open=False, clamp=t.clamp)
        return t
    if isinstance(t, click.types.IntParamType):
        return BoundedInt(-INT_MAX, INT_MAX)
    if isinstance(t, FiniteRange):
        return t
    if isinstance(t, click.FloatRange):
        return FiniteRange(t.min, t.max, min_open=t.min_open, max_open=t.max_open, clamp=t.clamp)
    if isinstance(t, click.types.FloatParamType):
        return FiniteRange()
    return t


def harden(cmd: click.Command) -> click.Command:
    """Bound every numeric parameter of ``cmd`` and of its subcommands (in place)."""
    if getattr(cmd, "_cosched_hardened", False):
        return cmd
    for p in cmd.params:
        p.type = _bounded(p.type)
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            harden(sub)
    cmd._cosched_hardened = True
    return cmd
