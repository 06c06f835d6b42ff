"""``cosched models list [--all] [--json]`` and ``cosched models gate``: the shipped
learned models (queue schedulers and inspectors in coscheduler/learned/models, MRSch and
scalar RL in coscheduler/multi/models) and their release gate (``learned/gate.py``).

``list`` offers only the models that passed the gate (their validation report beside the
file says so); ``--all`` lists every model file with its verdict (``pass``, ``fail``,
``unevaluated``: no report, as the MRSch models trained before their header held a
validation score, or ``broken``). An MRSch or scalar model's gate is its header's
validation score against FCFS and every classic order with EASY on its validation stretch
(``multi.report.gate_verdict``)."""

from __future__ import annotations

from pathlib import Path

import click
from ._common import echo_json


@click.group()
def models() -> None:
    """Learned queue-scheduler models shipped with coscheduler."""


def _rows() -> list[dict]:
    from ..learned.registry import list_models
    from ..multi.report import list_models as list_multi_models

    rows = list_models()
    for r in list_multi_models():  # their gate is in the header (multi/report.gate_verdict)
        rows.append({**r, "gate": "broken" if r.get("error") else r["gate"],
                     "gate_report": None})
    return rows


@models.command("list")
@click.option("--all", "show_all", is_flag=True,
              help="Every model file with its gate verdict, not only those that passed.")
@click.option("--json", "as_json", is_flag=True,
              help='Print [{"name", "kind", "trace", "metric", "backfill", "path", "gate", ...}].')
def list_cmd(show_all: bool, as_json: bool) -> None:
    """List the shipped models that passed the release gate (rl:NAME with --policy,
    --inspector NAME; mrsch and scalar-rl with cosched simulate multi --methods)."""
    every = _rows()
    rows = every if show_all else [r for r in every if r["gate"] == "pass"]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no models shipped" if show_all or not every else
                   "no shipped model passed the release gate")
    else:
        header = ("name", "kind", "trace", "metric/set", "backfill", "base", "epochs",
                  "train min", "KiB", "gate")
        table = [header] + [(
            r["name"], r["kind"] or "BROKEN", str(r["trace"]), str(r["metric"] or r.get("set")),
            str(r["backfill"]),
            r.get("base") or "-", str(r.get("epochs")),
            f"{r['training_seconds'] / 60:.1f}" if r.get("training_seconds") else "-",
            f"{r.get('size_bytes', 0) / 1024:.1f}", r["gate"]) for r in rows]
        widths = [max(len(row[c]) for row in table) for c in range(len(header))]
        for k, row in enumerate(table):
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if k == 0:
                click.echo("  ".join("-" * w for w in widths))
    hidden = len(every) - len(rows)
    if hidden:
        click.echo(f"{hidden} more model(s) not offered: the release gate failed or has not "
                   "evaluated them (cosched models list --all)")
    for r in rows:
        if "error" in r:
            click.echo(f"warning: {r['error']}", err=True)


@models.command("gate")
@click.argument("names", nargs=-1)
@click.option("--trace", "trace_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="Trace to gate on [default: the bundled trace each model "
                                 "names in its header].")
@click.option("--write/--no-write", default=True, show_default=True,
              help="Write NAME.report.json beside each model.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as a JSON list.")
def gate_cmd(names: tuple[str, ...], trace_path: str | None, write: bool,
             as_json: bool) -> None:
    """Evaluate models (shipped NAMEs or paths; default: every shipped queue scheduler and
    inspector) against the release gate: at or below the best heuristic on their
    validation windows and on every 1,024-job window after the training part, for their
    metric and backfilling."""
    from ..data import swf_trace
    from ..learned.gate import evaluate, report_path, summary, write_report
    from ..learned.modelfile import ModelError, load_model
    from ..learned.registry import resolve, shipped
    from ..model import InvalidInput, shown
    from ..outputs import check_output
    from ..sim.swf import read_swf

    paths = []
    try:
        paths = [resolve(n) for n in names] if names else shipped()
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    traces: dict[str, object] = {}
    if trace_path:   # read once: a bad --trace is one error, not one per model
        try:
            traces[trace_path] = read_swf(trace_path)
        except InvalidInput as exc:
            raise click.ClickException(str(exc)) from None
    reports, failed = [], 0
    for path in paths:
        try:
            model = load_model(path)
            if write:   # before the evaluation a report that cannot be written would lose
                check_output(report_path(path))
            source = trace_path or model.header.get("trace")
            if not source:
                raise ModelError(f"{path}: the header names no training trace; give --trace")
            if not trace_path:
                try:
                    bundled = swf_trace(source)
                except (OSError, InvalidInput):
                    bundled = None
                if bundled is None or not Path(bundled).is_file():
                    raise ModelError(f"{path}: its training trace {shown(source)} is not "
                                     "bundled; give --trace")
                source = str(bundled)
            if source not in traces:
                traces[source] = read_swf(source)
            report = evaluate(model, traces[source])
            if write:
                report["report"] = str(write_report(report, path))
        except InvalidInput as exc:  # ModelError and OutputError too: they name the file
            click.echo(f"error: {exc}", err=True)
            failed += 1
            continue
        reports.append(report)
        if not as_json:
            click.echo(summary(report))
    if as_json:
        echo_json(reports)
    if failed:
        raise click.ClickException(f"{failed} of {len(paths)} model(s) could not be gated")
