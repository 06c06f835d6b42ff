"""``cosched bench simulator``: how fast the trace-replay simulator runs on real traces.

Figures (issue 3, point 10), each measured in this one run:

- lublin_256.swf (10,000 jobs, 256 nodes): jobs per second for FCFS and for FCFS + EASY
  over the whole trace (median of ``--repeat`` runs);
- 1,024-job windows of lublin_256.swf with FCFS + EASY: wall time (median and max over
  windows spread through the trace; target well under 0.1 s);
- the whole HPC2N trace (202,871 jobs, 240 nodes) with FCFS + EASY: SWF parsing time and
  simulation time reported separately (target: simulation under 10 s).

Parsing is timed apart from simulation everywhere; the simulation time covers the event
loop only, metrics are timed on their own. A trace that is not present is reported as
skipped, with the path that was looked at.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click

from ..data import swf_dir
from ..policies.queue import get_policy
from ..sim.cluster import Cluster
from ..sim.engine import simulate
from ..sim.metrics import compute_metrics
from ..sim.replay import window
from ..sim.swf import SwfTrace, read_swf

# the traces shipped in the package (coscheduler/data/swf)
DEFAULT_DATA_DIR = swf_dir()
DEFAULT_DATA_HELP = "the bundled traces, coscheduler/data/swf"
LUBLIN = "lublin_256.swf"
HPC2N = "HPC2N-2002-2.2-cln.swf.gz"
WINDOW_JOBS = 1024
WINDOW_TARGET_S = 0.1
WHOLE_TRACE_TARGET_S = 10.0


def _load(path: Path) -> tuple[SwfTrace, float]:
    t0 = time.perf_counter()
    trace = read_swf(path)
    return trace, time.perf_counter() - t0


def _time_run(trace: SwfTrace, jobs, backfill: str, progress=None) -> tuple[float, object]:
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    t0 = time.perf_counter()
    schedule = simulate(jobs, cluster, get_policy("FCFS"), backfill, progress=progress)
    return time.perf_counter() - t0, schedule


def bench_lublin(path: Path, repeat: int) -> dict:
    trace, parse_s = _load(path)
    out: dict = {"trace": str(path), "jobs": len(trace.jobs), "parse_seconds": parse_s}
    for backfill in ("none", "easy"):
        walls = []
        for _ in range(repeat):
            wall, schedule = _time_run(trace, trace.jobs, backfill)
            walls.append(wall)
        m = compute_metrics(trace.jobs, schedule.start, schedule.end, trace.max_procs)
        median = statistics.median(walls)
        out["fcfs" if backfill == "none" else "fcfs_easy"] = {
            "backfill": backfill,
            "median_seconds": median,
            "jobs_per_second": len(trace.jobs) / median,
            "avg_bsld": m.avg_bsld,
            "utilization": m.utilization,
        }
    # 1,024-job windows spread over the trace, each replayed on an empty cluster
    n = len(trace.jobs)
    starts = sorted({round(k * (n - WINDOW_JOBS) / 4) for k in range(5)}) if n >= WINDOW_JOBS else []
    walls = []
    for start in starts:
        jobs = window(trace.jobs, start, WINDOW_JOBS)
        for _ in range(repeat):
            walls.append(_time_run(trace, jobs, "easy")[0])
    if walls:
        out["window_1024"] = {
            "backfill": "easy",
            "windows": starts,
            "median_seconds": statistics.median(walls),
            "max_seconds": max(walls),
            "target_seconds": WINDOW_TARGET_S,
            "meets_target": max(walls) < WINDOW_TARGET_S,
        }
    return out


def bench_whole_trace(path: Path, show_progress: bool = False) -> dict:
    trace, parse_s = _load(path)
    progress = None
    if show_progress:
        from ..cli.progress_bar import DelayedProgress  # a stderr bar, only if the run is long

        progress = DelayedProgress(len(trace.jobs), "HPC2N, FCFS + EASY")
    try:
        sim_s, schedule = _time_run(trace, trace.jobs, "easy", progress)
    finally:
        if progress is not None:
            progress.close()
    t0 = time.perf_counter()
    m = compute_metrics(trace.jobs, schedule.start, schedule.end, trace.max_procs)
    metrics_s = time.perf_counter() - t0
    return {
        "trace": str(path),
        "jobs": len(trace.jobs),
        "backfill": "easy",
        "parse_seconds": parse_s,
        "simulate_seconds": sim_s,
        "metrics_seconds": metrics_s,
        "jobs_per_second": len(trace.jobs) / sim_s,
        "target_seconds": WHOLE_TRACE_TARGET_S,
        "meets_target": sim_s < WHOLE_TRACE_TARGET_S,
        "avg_bsld": m.avg_bsld,
        "utilization": m.utilization,
        "compiled": _compiled_figures(trace, m),
    }


def _compiled_figures(trace: SwfTrace, reference) -> dict:
    """The same replay on the compiled kernels (``learned/wholetrace.py``), after the
    Python one in the same process: the first call (loading, or once after an install
    compiling, numba's kernels) and the median of three more (replay plus metrics)."""
    from ..learned import wholetrace

    if not wholetrace.available():
        return {"skipped": "numba is not installed (pip install '.[rl]')"}
    t0 = time.perf_counter()
    first = wholetrace.replay(trace, backfill="easy")
    first_s = time.perf_counter() - t0
    walls = [wholetrace.replay(trace, backfill="easy").wall_seconds for _ in range(3)]
    return {"first_call_seconds": first_s,
            "simulate_and_metrics_seconds": statistics.median(walls),
            "same_metrics": first.metrics == reference}


def _absent(path: Path) -> dict:
    return {"skipped": f"trace not found: {path}"}


@click.command("simulator")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_DATA_DIR, show_default=DEFAULT_DATA_HELP,
              help=f"Folder holding {LUBLIN} and {HPC2N}.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs per lublin figure (the median is reported).")
@click.option("--whole/--no-whole", default=True, show_default=True,
              help="Also replay the whole HPC2N trace (about 200,000 jobs).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def simulator(data_dir: Path, repeat: int, whole: bool, as_json: bool) -> None:
    """Jobs per second of the SWF simulator (FCFS, FCFS + EASY), 1,024-job window and
    whole-trace wall times, with parsing timed apart."""
    lublin_path, hpc2n_path = data_dir / LUBLIN, data_dir / HPC2N
    out: dict = {"data_dir": str(data_dir)}
    out["lublin_256"] = bench_lublin(lublin_path, repeat) if lublin_path.is_file() else _absent(lublin_path)
    if not whole:
        out["hpc2n_whole"] = {"skipped": "not requested (--no-whole)"}
    elif hpc2n_path.is_file():
        out["hpc2n_whole"] = bench_whole_trace(hpc2n_path, show_progress=not as_json)
    else:
        out["hpc2n_whole"] = _absent(hpc2n_path)

    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    _print_human(out)


def _print_human(out: dict) -> None:
    click.echo(f"SWF simulator (data: {out['data_dir']})")
    lub = out["lublin_256"]
    if "skipped" in lub:
        click.echo(f"  {LUBLIN}: skipped ({lub['skipped']})")
    else:
        click.echo(f"  {LUBLIN}: {lub['jobs']:,} jobs, parsed in {lub['parse_seconds']:.3f} s")
        for key, label in (("fcfs", "FCFS"), ("fcfs_easy", "FCFS + EASY")):
            r = lub[key]
            click.echo(f"    {label:<12} {r['jobs_per_second']:>10,.0f} jobs/s "
                       f"({r['median_seconds']:.3f} s median; avg bsld {r['avg_bsld']:.1f}, "
                       f"util {100 * r['utilization']:.1f} %)")
        w = lub.get("window_1024")
        if w:
            verdict = "meets" if w["meets_target"] else "MISSES"
            click.echo(f"    1,024-job window, FCFS + EASY: median {1000 * w['median_seconds']:.1f} ms, "
                       f"max {1000 * w['max_seconds']:.1f} ms ({verdict} the < "
                       f"{1000 * w['target_seconds']:.0f} ms target)")
    whole = out["hpc2n_whole"]
    if "skipped" in whole:
        click.echo(f"  {HPC2N}: skipped ({whole['skipped']})")
    else:
        verdict = "meets" if whole["meets_target"] else "MISSES"
        click.echo(f"  {HPC2N}: {whole['jobs']:,} jobs, FCFS + EASY")
        click.echo(f"    parse {whole['parse_seconds']:.2f} s, simulate {whole['simulate_seconds']:.2f} s "
                   f"({whole['jobs_per_second']:,.0f} jobs/s; {verdict} the < "
                   f"{whole['target_seconds']:.0f} s target), metrics {whole['metrics_seconds']:.2f} s")
        click.echo(f"    avg bsld {whole['avg_bsld']:.1f}, util {100 * whole['utilization']:.1f} %")
        c = whole["compiled"]
        if "skipped" in c:
            click.echo(f"    compiled engine: skipped ({c['skipped']})")
        else:
            click.echo(f"    compiled engine (--engine compiled): simulate + metrics "
                       f"{c['simulate_and_metrics_seconds']:.2f} s median, first call "
                       f"{c['first_call_seconds']:.2f} s (numba's kernels loaded); "
                       f"{'the same' if c['same_metrics'] else 'DIFFERENT'} metrics")
