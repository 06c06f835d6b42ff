"""``cosched simulate``: replay workloads in virtual time.

``cosched simulate swf TRACE [--policy P[,P...]] [--backfill none|easy|conservative]
[--start-index I] [--jobs K] [--json] [--skip-bad-lines]``

stdout carries the result only (a table, or with ``--json`` one object per policy, a list
when several); notes (skipped lines, dropped jobs, parse time) and the progress bar go to
stderr.
"""

from __future__ import annotations

import json
import sys
import time

import click

from ..model import InvalidInput
from ..policies.queue import POLICIES, get_policy
from ..sim.engine import BACKFILL_MODES
from ..sim.replay import ReplayResult, replay, window
from ..sim.swf import read_swf

# Show a progress bar only once a run has lasted this long (short runs stay quiet).
PROGRESS_AFTER_S = 2.0


class DelayedProgress:
    """A click progress bar on stderr that appears only after ``delay`` seconds.

    Called by the engine with the number of jobs finished in the current run; ``next_run``
    moves on to the next policy, so the bar covers all policies of one command.
    """

    def __init__(self, total: int, label: str, delay: float | None = None):
        self.total = total
        self.label = label
        self.delay = PROGRESS_AFTER_S if delay is None else delay
        self.t0 = time.monotonic()
        self.offset = 0
        self.shown = 0
        self.bar = None

    def __call__(self, finished_in_run: int) -> None:
        done = self.offset + finished_in_run
        if self.bar is None:
            if time.monotonic() - self.t0 < self.delay:
                return
            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr)
            self.bar.__enter__()
        self.bar.update(done - self.shown)
        self.shown = done

    def next_run(self, jobs_in_run: int) -> None:
        self.offset += jobs_in_run

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _parse_policies(text: str) -> list[str]:
    names: list[str] = []
    for raw in text.split(","):
        if not raw.strip():
            raise click.BadParameter(
                f"empty policy name in {text!r}; valid policies: {', '.join(POLICIES)}",
                param_hint="--policy",
            )
        try:
            name = get_policy(raw).name
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--policy") from None
        if name not in names:
            names.append(name)
    return names


def _table(results: list[ReplayResult]) -> str:
    header = ("policy", "backfill", "jobs", "avg bsld", "max bsld", "worst user",
              "avg wait s", "avg turn s", "util %", "makespan s", "wall s")
    rows = [header]
    for r in results:
        m = r.metrics
        rows.append((
            r.policy, r.backfill, str(m.jobs), f"{m.avg_bsld:.2f}", f"{m.max_bsld:.1f}",
            f"{m.worst_user_bsld:.2f}", f"{m.avg_wait:.0f}", f"{m.avg_turnaround:.0f}",
            f"{100 * m.utilization:.1f}", f"{m.makespan:.0f}", f"{r.wall_seconds:.2f}",
        ))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[c].ljust(widths[c]) if c < 2 else row[c].rjust(widths[c])
                 for c in range(len(header))]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@click.group()
def simulate() -> None:
    """Replay workloads in virtual time (trace-driven simulation)."""


@simulate.command("swf")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--policy", "policy_text", default="FCFS", show_default=True,
              help=f"Queue policy, or several separated by commas: {', '.join(POLICIES)}.")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="none",
              show_default=True, help="Backfilling: none, EASY, or conservative.")
@click.option("--start-index", type=click.IntRange(min=0), default=0, show_default=True,
              help="First job of the replay window (0-based, in job-number order).")
@click.option("--jobs", "count", type=click.IntRange(min=1), default=None,
              help="Number of jobs in the window [default: to the end of the trace].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per policy).")
@click.option("--skip-bad-lines", is_flag=True,
              help="Skip malformed trace lines (counted and reported) instead of failing.")
def swf(trace: str, policy_text: str, backfill: str, start_index: int, count: int | None,
        as_json: bool, skip_bad_lines: bool) -> None:
    """Replay a Standard Workload Format TRACE (plain or .gz) on an empty cluster
    sized by its MaxNodes/MaxProcs header, and report bounded slowdown, waits,
    utilisation and makespan per policy."""
    policies = _parse_policies(policy_text)
    t0 = time.perf_counter()
    try:
        loaded = read_swf(trace, skip_bad_lines=skip_bad_lines)
        jobs = window(loaded.jobs, start_index, count)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    parse_s = time.perf_counter() - t0

    if loaded.skipped_lines:
        click.echo(f"skipped {loaded.skipped_lines} malformed line(s) in {trace}:", err=True)
        for example in loaded.bad_line_examples:
            click.echo(f"  {example}", err=True)
    for reason, n in loaded.dropped.items():
        click.echo(f"dropped {n} job(s): {reason}", err=True)
    ppn = loaded.max_procs // loaded.max_nodes
    click.echo(
        f"{trace}: {len(loaded.jobs)} jobs read in {parse_s:.2f} s; replaying jobs "
        f"{start_index}..{start_index + len(jobs) - 1} on {loaded.max_nodes} nodes x {ppn} "
        f"processors",
        err=True,
    )

    progress = DelayedProgress(len(jobs) * len(policies), "simulating")
    results = []
    try:
        for name in policies:
            results.append(replay(loaded, name, backfill, jobs=jobs, progress=progress))
            progress.next_run(len(jobs))
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        progress.close()

    if as_json:
        out = [r.as_json() for r in results]
        click.echo(json.dumps(out[0] if len(out) == 1 else out, indent=2))
    else:
        click.echo(_table(results))
