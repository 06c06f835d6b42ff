"""The docs say what the program does (issue 8, "Docs that disagree with the program"): each
check reads the program (its click commands, its constants) and the docs, and compares."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.happiness import HAPPINESS_DONE

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CLI_JSON = (ROOT / "docs" / "cli-json.md").read_text()
AGENT_README = (ROOT / "monitoring" / "README.md").read_text()


def _commands(group: click.Group, ctx: click.Context, prefix: str = ""):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None:
            continue
        path = f"{prefix} {name}".strip()
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, ctx, path)
        else:
            yield path, cmd


def _with_option(opt: str) -> set[str]:
    ctx = click.Context(main)
    return {path for path, cmd in _commands(main, ctx)
            if any(opt in p.opts for p in cmd.params if isinstance(p, click.Option))}


def test_every_json_output_is_listed_in_cli_json_md():
    missing = [p for p in sorted(_with_option("--json")) if f"cosched {p}" not in CLI_JSON]
    assert not missing, f"--json shapes not in docs/cli-json.md: {missing}"


def test_readme_names_exactly_the_commands_that_take_db():
    m = re.search(r"take `--db PATH`:(.*?)\.\s", README, re.S)
    assert m, "README no longer says which commands take --db"
    named = set(re.findall(r"`([a-z][a-z -]*)`", m.group(1)))
    assert named == _with_option("--db")


def test_readme_budgets_are_the_targets_the_benchmarks_check():
    from coscheduler.bench import simulator

    rows = {line.split("|")[1].strip(): line.split("|")[3] for line in README.splitlines()
            if line.startswith("| ") and "(`bench" in line or "HPC2N trace" in line}
    budgets = " ".join(rows.values())
    assert f"< {simulator.WINDOW_TARGET_S:g} s" in budgets
    assert f"< {simulator.WHOLE_TRACE_TARGET_S:g} s" in budgets
    from monitoring.bench import BUDGET_PERCENT

    for target in ("< 1 ms", "< 100 ms", f"< {BUDGET_PERCENT:g} %"):  # learner, controller, agent
        assert target in budgets


def test_happiness_done_marker_is_one_value_everywhere():
    from monitoring.state import HAPPINESS_CAP, finite_happiness

    assert HAPPINESS_CAP == HAPPINESS_DONE == finite_happiness(float("inf"))
    shown = "1e9"
    assert float(shown) == HAPPINESS_DONE
    assert f"{shown} when every task is done" in AGENT_README
    assert f"stored as `{shown}`" in CLI_JSON
    assert "1e6" not in AGENT_README


def test_demo_help_and_not_root_message_say_what_is_true(monkeypatch):
    help_text = CliRunner().invoke(main, ["demo", "--help"]).output
    assert "about a minute" in help_text and "few minutes" not in help_text
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    out = CliRunner().invoke(main, ["demo"]).output
    assert "simulate paper" in out and "simulate swf" not in out


def test_cli_json_says_the_demo_records_seconds_from_the_run_start():
    assert "Unix time on a live\n  system" not in CLI_JSON
    assert "seconds since the run started for `cosched demo`" in CLI_JSON
@pytest.mark.parametrize("phrase", ["by several\npercent", "move by several percent"])
def test_readme_states_the_measured_spread_of_the_demo(phrase):
    assert phrase not in README
    assert re.search(r"spread", README[README.index("cosched demo"):README.index("## Architecture")])
