"""Multi-resource commands: ``cosched workload multi`` and ``cosched simulate multi``.

``cosched workload multi --from TRACE --set S4 [--seed 1] --out FILE [--json]`` writes one
of MRSch's sets S1-S10 built from TRACE (format: coscheduler/multi/workload.py and
docs/multi-resource.md). The simulate command is defined in ``simulate_multi`` below.
"""

from __future__ import annotations


import click

from .. import outputs
from ..model import InvalidInput
from ..multi import workload as mw
from ..sim.swf import read_swf
from ..sweep import SweepError, Task, run_tasks
from ._common import echo_json


@click.command("multi")
@click.option("--from", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="SWF trace (plain or gzip) whose jobs get the extra requests")
@click.option("--set", "set_name", required=True,
              help=f"workload set: {', '.join(mw.SETS)}")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="file to write (SWF plus three columns)")
@click.option("--skip-bad-lines", is_flag=True, help="skip malformed trace lines")
@click.option("--json", "as_json", is_flag=True, help="print a summary as JSON")
def workload_multi(trace_path: str, set_name: str, seed: int, out: str, skip_bad_lines: bool,
                   as_json: bool) -> None:
    """Write MRSch's workload set (burst buffer, power) built from TRACE and a seed."""
    try:
        outputs.check_output(out)
        trace = read_swf(trace_path, skip_bad_lines=skip_bad_lines)
        wl = mw.generate(trace, set_name, seed)
        mw.write(wl, out)
    except InvalidInput as e:
        raise click.ClickException(str(e)) from None
    s = mw.shares(wl)
    m = wl.machine
    summary = {
        "set": wl.set_name, "seed": seed, "trace": trace_path, "out": out,
        "jobs": len(wl.jobs), "nodes": wl.max_nodes,
        "burst_buffer_gb": m.burst_buffer_gb, "power_budget_w": m.power_budget_w,
        "idle_power_w": m.idle_power_w, "bb_share": s["bb_share"],
        "bb_mean_tb": s["bb_mean_tb"], "power_capped": wl.power_capped,
    }
    if as_json:
        echo_json(summary, indent=None)
        return
    power = (f", power budget {m.power_budget_w} W (idle {m.idle_power_w} W/node, "
             f"{wl.power_capped} jobs capped)" if m.power_budget_w else "")
    click.echo(f"{wl.set_name} (seed {seed}) from {trace_path}: {len(wl.jobs)} jobs on "
               f"{wl.max_nodes} nodes, burst buffer {m.burst_buffer_gb / 1000:.1f} TB, "
               f"{100 * s['bb_share']:.1f} % of jobs ask for it (mean {s['bb_mean_tb']:.2f} TB)"
               f"{power} -> {out}")


def _replay(run, workload, method: str, models_dir, window: int):
    """One (set, method) replay: a sweep task (module level, so that it pickles)."""
    return run(workload, method, models_dir=models_dir, window=window)


def _csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise click.BadParameter(f"no {what} given", param_hint=f"--{what}")
    return items


@click.command("multi")
@click.option("--from", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="SWF trace the sets are built from")
@click.option("--sets", default="S1,S2,S3,S4,S5", show_default=True,
              help="comma-separated sets (S1-S10)")
@click.option("--methods", default="fcfs,sjf,bbsched,optimiser,scalar-rl,mrsch", show_default=True,
              help="comma-separated: fcfs, sjf, f1, wfp3, unicep, saf (queue orders with "
                   "EASY), bbsched, optimiser, scalar-rl, mrsch")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True,
              help="workload seed (requests)")
@click.option("--protocol", type=click.Choice(["windows", "stretch"]), default="windows",
              show_default=True,
              help="windows: ten seed-1 windows of held-out jobs, each from an empty machine, "
                   "figures averaged; stretch: the whole held-out part once")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="jobs per window (default 1,024); with --protocol stretch, only the first "
                   "K held-out jobs (default: all of the last 20 %)")
@click.option("--windows", "windows_count", type=click.IntRange(min=1), default=10,
              show_default=True, help="evaluation windows (--protocol windows)")
@click.option("--window", type=click.IntRange(min=1), default=10, show_default=True,
              help="window of the optimisers (MRSch's window is its model's)")
@click.option("--models", "models_dir", type=click.Path(file_okay=False), default=None,
              help="folder of MRSch/scalar models (default: the shipped ones)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="write a Kiviat chart per set and MRSch's goal trace (PNG) here")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="local processes for the independent (set, method) replays [default: this "
                   "machine's cores; 1: serial]; same figures")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="run the replays on this Dask scheduler (tcp://HOST:8786; the 'cluster' "
                   "extra) or Ray cluster (ray://HOST:PORT, ray:HOST:PORT, ray:auto; the 'ray' "
                   "extra) instead")
@click.option("--json", "as_json", is_flag=True, help="print the documented JSON object")
def simulate_multi(trace_path: str, sets: str, methods: str, seed: int, protocol: str,
                   jobs: int | None, windows_count: int, window: int,
                   models_dir: str | None, out_dir: str | None, workers: int | None,
                   cluster: str | None, as_json: bool) -> None:
    """Node, burst-buffer and power utilisation, mean wait and slowdown per method and set."""
    from pathlib import Path

    from ..multi import report

    set_names = [s.upper() for s in _csv(sets, "sets")]
    method_names = _csv(methods, "methods")
    try:
        if out_dir:   # before any replay: a bad --out would lose them
            outputs.check_output_dir(out_dir)
        for s in set_names:
            mw.get_set(s)
        for m in method_names:
            if m not in report.METHODS:
                raise InvalidInput(f"unknown method {m!r}; valid methods: "
                                   f"{', '.join(report.METHODS)}")
        trace = read_swf(trace_path)
        mdir = Path(models_dir) if models_dir else report.MODELS_DIR
        for s in set_names:  # a missing model stops the run before anything is replayed
            for m in method_names:
                report.check_model(mdir, m, trace_path, s)
    except InvalidInput as e:
        raise click.ClickException(str(e)) from None
    runs = []
    charts = []
    starts: list[int] = []
    tasks = []   # one per (set, method): independent replays, run through coscheduler.sweep
    owner: list[int] = []   # the position in set_names of each task's set
    for i, s in enumerate(set_names):
        try:
            full = mw.generate(trace, s, seed)
            if protocol == "windows":
                wjobs = jobs or report.EVAL_JOBS
                windows = report.evaluation_windows(full, wjobs, windows_count)
                starts = report.window_starts(full, wjobs, windows_count)
                tasks += [Task(f"{s} {m}", (report.run_windows, windows, m, mdir, window))
                          for m in method_names]
            else:
                wl = report.evaluation_part(full, jobs)
                tasks += [Task(f"{s} {m}", (report.run_method, wl, m, mdir, window))
                          for m in method_names]
        except InvalidInput as e:
            raise click.ClickException(str(e)) from None
        owner += [i] * (len(tasks) - len(owner))
    try:
        runs = run_tasks(_replay, tasks, workers=workers, cluster=cluster,
                         on_result=lambda t, r: click.echo(f"{t.name} done", err=True))
    except (InvalidInput, SweepError) as e:
        raise click.ClickException(str(e)) from None
    for i, s in enumerate(set_names):
        set_runs = [r for r, o in zip(runs, owner) if o == i]
        if out_dir:
            try:
                out = outputs.make_output_dir(out_dir)
                charts.append(str(report.kiviat(set_runs, out / f"kiviat-{s}.png",
                                                f"{s} ({Path(trace_path).name})")))
                for r in set_runs:
                    if r.method == "mrsch" and "burst_buffer" in r.pool_names:
                        charts.append(str(report.goal_trace_plot(r, out / f"goal-trace-{s}.png")))
            except InvalidInput as e:
                raise click.ClickException(str(e)) from None
    if protocol == "windows":
        proto = {"kind": "windows", "jobs": jobs or report.EVAL_JOBS, "starts": starts}
    else:
        proto = {"kind": "stretch", "jobs": jobs}
    if as_json:
        echo_json({"protocol": proto, "results": [r.as_json() for r in runs]}, indent=None)
    else:
        if protocol == "windows":
            click.echo(f"means over {len(starts)} windows of {proto['jobs']} held-out jobs "
                       f"(starts {', '.join(map(str, starts))})")
        click.echo(f"{'set':<4} {'method':<10} {'node_util':>9} {'bb_util':>8} {'power_util':>10} "
                   f"{'mean_wait_s':>12} {'mean_slowdown':>13} {'decision_ms':>11}")
        for r in runs:
            m = r.metrics
            d = r.decision_summary()

            def pct(v):
                return f"{100 * v:8.1f}%" if v is not None else f"{'-':>9}"
            dms = f"{d['median_ms']:.2f}" if d else "-"
            click.echo(f"{r.set_name:<4} {r.method:<10} {pct(m['node_util'])} "
                       f"{pct(m['bb_util']):>8} {pct(m['power_util']):>10} "
                       f"{m['mean_wait_s']:12.0f} {m['mean_slowdown']:13.1f} {dms:>11}")
    for c in charts:
        click.echo(f"wrote {c}", err=True)
