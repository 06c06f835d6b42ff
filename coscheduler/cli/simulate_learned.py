"""``cosched simulate learned [--traces T,...] [--windows seed1|later|heldout] [--workers N]
[--cluster ADDRESS] [--json] [--out DIR]``: the shipped learned
models beside the heuristics (tables of ``coscheduler/learned/report.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import outputs
from ..model import InvalidInput
from ..sweep import SweepError
from ._common import echo_json

BUNDLED = ("lublin_256.swf", "HPC2N-2002-2.2-cln.swf.gz", "CTC-SP2-1996-3.1-cln.swf.gz")


def _default_data_dir() -> Path:
    from ..data import swf_dir

    return swf_dir()


@click.command("learned")
@click.option("--traces", "traces_text", default=None,
              help="Traces (paths, or bundled names) separated by commas [default: the bundled "
                   "lublin_256, HPC2N and CTC-SP2 found in --data-dir].")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of the traces [default: the bundled ones, coscheduler/data/swf].")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("learned-report"), show_default=True,
              help="Folder for the training-curve PNGs and report.json.")
@click.option("--models", "models_text", default=None,
              help="Only these shipped models (names separated by commas) [default: all].")
@click.option("--windows", "window_set", type=click.Choice(["seed1", "later", "heldout"]),
              default="seed1", show_default=True,
              help="The RL tables' 1,024-job windows: RLScheduler's ten seed-1 windows (they "
                   "may overlap the training part); 'later': ten drawn the same way from the "
                   "jobs after every evaluated model's training part (never trained or "
                   "validated on; the inspectors' held-out windows); 'heldout': every whole "
                   "window of that part, back to back (7 on lublin_256, 60 on CTC-SP2, about "
                   "158 on HPC2N: the release gate's held-out check, slower).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local processes for the independent evaluations (a trace's table per "
                   "backfilling, a model on another trace, an inspector) [default: this "
                   "machine's cores; 1: serial]. Same report.")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Run the evaluations on this Dask scheduler (tcp://HOST:8786; the "
                   "'cluster' extra) or Ray cluster (ray://HOST:PORT, ray:HOST:PORT, ray:auto; "
                   "the 'ray' extra) instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def learned(traces_text: str | None, data_dir: Path | None, out_dir: Path,
            models_text: str | None, window_set: str, workers: int | None,
            cluster: str | None, as_json: bool) -> None:
    """RLScheduler's table per trace (mean bsld over the ten seed-1 windows, the ten later
    ones, or every held-out one, with and without EASY), the cross-trace table, each inspector's improvement and
    rejection ratio over its base, and PNG training curves, for the shipped models."""
    from ..learned.registry import list_models
    from ..learned.report import build_report, draw_curves, draw_windows, render

    try:   # before any replay: a bad --out would lose them
        outputs.check_output_dir(out_dir)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    data_dir = data_dir or _default_data_dir()
    names = [t.strip() for t in traces_text.split(",")] if traces_text else list(BUNDLED)
    paths = []
    for name in names:
        path = Path(name)
        if not path.is_file():
            path = data_dir / name
        if not path.is_file():
            if traces_text:
                raise click.BadParameter(f"trace not found: {name} (looked in {data_dir})",
                                         param_hint="--traces")
            click.echo(f"skipping {name}: not found in {data_dir}", err=True)
            continue
        paths.append(path)
    if not paths:
        raise click.ClickException(f"no trace to evaluate on (looked in {data_dir})")
    models = list_models()
    if models_text:
        wanted = [m.strip() for m in models_text.split(",") if m.strip()]
        unknown = sorted(set(wanted) - {m["name"] for m in models})
        if unknown:
            raise click.BadParameter(f"unknown model(s) {', '.join(unknown)}; shipped: "
                                     f"{', '.join(m['name'] for m in models)}",
                                     param_hint="--models")
        models = [m for m in models if m["name"] in wanted]
    if not models:
        click.echo("no learned models are shipped: only the heuristics are shown", err=True)

    def progress(what: str) -> None:
        click.echo(f"evaluated {what}", err=True)

    try:
        report = build_report(paths, models, progress=None if as_json else progress,
                              workers=workers, cluster=cluster, windows=window_set)
    except (InvalidInput, SweepError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        outputs.make_output_dir(out_dir)
        report["curves"] = draw_curves(models, out_dir)
        report["window_plots"] = draw_windows(report, out_dir)
        outputs.write_text(out_dir / "report.json", json.dumps(report, indent=2))
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json(report)
        return
    click.echo(render(report))
    click.echo(f"training curves, per-window plots and report.json in {out_dir}/ "
               f"({len(report['curves'])} + {len(report['window_plots'])} PNG); "
               f"{report['seconds']:.0f} s", err=False)


@click.command("inspector-budget")
@click.option("--trace", required=True, type=click.Path(exists=True, dir_okay=False),
              help="SWF trace (plain or .gz); validation windows come from its first 20 %.")
@click.option("--base", "bases", default="SJF,F1", show_default=True,
              help="Base policies, separated by commas.")
@click.option("--budgets", "budgets_text", default=",".join(map(str, (10, 20, 50, 100, 200, 1000))),
              show_default=True, help="Rejection budgets to measure, separated by commas.")
@click.option("--backfill", type=click.Choice(["none", "easy"]), default="none", show_default=True)
@click.option("--skip-bad-lines", is_flag=True, help="Skip malformed SWF lines (counted) "
                                                     "instead of stopping at the first.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def inspector_budget(trace: str, bases: str, budgets_text: str, backfill: str,
                     skip_bad_lines: bool, as_json: bool) -> None:
    """The hand-written inspector (reject-blocked) at each rejection budget: mean bounded
    slowdown on 24 windows of the training part (the choice is made on these: the lowest,
    the smaller budget on a tie) and on the held-out windows of `simulate learned`
    (reported, never used to choose). Use the chosen budget as
    `--inspector reject-blocked:BASE:BUDGET` or `cosched train inspector --max-rejections`.

    JSON: {"tables": [{"trace", "base", "backfill", "chosen", "base_validation",
    "base_heldout", "budgets": [{"budget", "validation", "heldout",
    "validation_improvement", "heldout_improvement", "validation_windows_worse",
    "heldout_windows_worse"}], "validation_windows", "heldout_windows"}]}
    (validation/heldout: {"bsld", "wait_s", "max_bsld", "per_window_bsld"})."""
    from ..learned.budget import budget_table
    from ..policies.queue import get_policy
    from ..sim.swf import read_swf

    try:
        budgets = [int(x) for x in budgets_text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"integers separated by commas, got {budgets_text[:80]!r}",
                                 param_hint="--budgets") from None
    names = [b.strip() for b in bases.split(",") if b.strip()]
    try:
        for b in names:
            get_policy(b)
        tr = read_swf(trace, skip_bad_lines=skip_bad_lines)
        tables = [budget_table(tr, b, budgets, backfill) for b in names]
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        echo_json({"tables": tables}, indent=None)
        return
    for t in tables:
        bv, bh = t["base_validation"], t["base_heldout"]
        click.echo(f"{t['trace']} {t['base']} (backfill {t['backfill']}): base bsld "
                   f"{bv['bsld']:.2f} validation, {bh['bsld']:.2f} held-out")
        click.echo(f"  {'budget':>7} {'validation':>10} {'vs base':>8} {'worse':>6} "
                   f"{'held-out':>9} {'vs base':>8} {'worse':>6} {'max bsld':>9}")
        for r in t["budgets"]:
            mark = "  <- chosen" if r["budget"] == t["chosen"] else ""
            click.echo(f"  {r['budget']:>7} {r['validation']['bsld']:>10.2f} "
                       f"{-100 * r['validation_improvement']:>+7.1f}% "
                       f"{r['validation_windows_worse']:>6} {r['heldout']['bsld']:>9.2f} "
                       f"{-100 * r['heldout_improvement']:>+7.1f}% "
                       f"{r['heldout_windows_worse']:>6} {r['heldout']['max_bsld']:>9.1f}{mark}")
