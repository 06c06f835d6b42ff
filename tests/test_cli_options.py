"""Issue 24, item 9: every numeric option of every command is checked at parse time. The
test walks the whole click tree (nothing is listed by hand), gives each int and float
parameter values outside its range, not finite, or too large for any integer the program
stores, and expects click's one-line usage error and exit status 2, never a traceback and
never a command that starts."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from coscheduler.cli import main


def _commands():
    ctx = click.Context(main, info_name="cosched")

    def walk(cmd, ctx, path):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is not None:
                    yield from walk(sub, click.Context(sub, parent=ctx, info_name=name), path + [name])
        else:
            yield path, cmd

    return list(walk(main, ctx, []))


INT_MAX = 2 ** 63 - 1   # the largest integer the program stores (SQLite, the kernel)


def _bad_values(t: click.ParamType) -> list[str]:
    if isinstance(t, click.IntRange):
        out = ["99999999999999999999", str(10 ** 23), "1.5"]
        if t.min is not None and t.min > -INT_MAX:
            out.append(str(t.min if t.min_open else t.min - 1))
        if t.max is not None and t.max < INT_MAX:
            out.append(str(t.max if t.max_open else t.max + 1))
        return out
    if isinstance(t, click.FloatRange):
        out = ["nan", "inf", "-inf", "1e400"]
        if t.min is not None:
            out.append(repr(float(t.min) if t.min_open else t.min - 1.0))
        if t.max is not None:
            out.append(repr(float(t.max) if t.max_open else t.max + 1.0))
        return out
    return []


def _numeric(cmd):
    for p in cmd.params:
        if isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)) \
                and not getattr(p, "is_flag", False):
            yield p


def _args(path, cmd, p, value):
    if isinstance(p, click.Argument):
        before = []
        for q in cmd.params:
            if q is p:
                break
            if isinstance(q, click.Argument):
                before.append("x")
        return path + before + [value] * max(1, p.nargs)
    return path + [p.opts[0]] + [value] * max(1, p.nargs)


CASES = [(path, cmd, p) for path, cmd in _commands() for p in _numeric(cmd)]


def test_the_walk_finds_the_commands_and_every_numeric_option_is_bounded():
    from coscheduler.cli._types import FiniteRange
    assert len(CASES) > 80, "the walk lost commands"
    loose = [f"{' '.join(path)} {p.name}: {p.type!r}" for path, cmd, p in CASES
             if not (isinstance(p.type, click.IntRange) and p.type.max is not None
                     and p.type.max <= INT_MAX and p.type.min is not None)
             and not isinstance(p.type, FiniteRange)]
    assert loose == []


def test_help_texts_give_the_options_own_ranges_not_the_machines_limits():
    """``harden``'s bounds are the machine's (INT_MAX, finite floats), not what an option
    means: click printed ``x<=None`` for an unbounded float and 19-digit limits for every
    integer. The help shows only an option's own range."""
    bad = []
    for path, cmd, p in CASES:
        if not isinstance(p, click.Option):
            continue
        with click.Context(cmd, info_name=path[-1] if path else "cosched") as ctx:
            record = p.get_help_record(ctx)
        text = " ".join(record) if record else ""
        if "None" in text or str(INT_MAX) in text:
            bad.append(f"{' '.join(path)} {p.opts[0]}: {text}")
    assert bad == []
    r = CliRunner().invoke(main, ["simulate", "paper", "--help"])
    assert "--repeat INTEGER RANGE" in r.output and "[default: 3; x>=1]" in r.output
    assert "--seed INTEGER " in r.output and "--scale FLOAT " in r.output
    assert "0.0<x<=1.0" in r.output      # --loan-min-share keeps its own range


@pytest.mark.parametrize("path,cmd,p", CASES, ids=[f"{' '.join(c[0])}:{c[2].name}" for c in CASES])
def test_out_of_range_values_are_a_one_line_usage_error(path, cmd, p):
    runner = CliRunner()
    for value in _bad_values(p.type):
        r = runner.invoke(main, _args(path, cmd, p, value))
        out = r.output
        assert r.exit_code == 2, (value, r.exit_code, out[-500:])
        assert "Traceback" not in out and isinstance(r.exception, SystemExit)
        errors = [line for line in out.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and "Invalid value" in errors[0], (value, out[-300:])


@pytest.mark.parametrize("argv", [
    ["decisions", "show", "9223372036854775808"],
    ["decisions", "list", "--last", str(10 ** 23)],
    ["run", "--backend", "slurm", "--policy", "static", "--static-fraction", "7"],
    ["run", "--backend", "slurm", "--policy", "static", "--static-fraction", "0"],
    ["run", "--backend", "slurm", "--policy", "static", "--static-fraction", "nan"],
    ["workload", "submit", "blast", "--cores", "99999999999999999999"],
    ["run", "--backend", "slurm", "--max-passes", "-1"],
])
def test_the_issues_inputs_are_refused_before_anything_runs(argv):
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2 and "Traceback" not in r.output and "Invalid value" in r.output
