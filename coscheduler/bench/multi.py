"""``cosched bench multi``: decision times of the multi-resource methods (issue 15's targets).

Each figure is given as wall time (what a scheduler waits) and as the CPU time of the
deciding thread (``time.thread_time``): on the shared machine a decision can be preempted
for tens of ms by other processes, which the CPU time leaves out. The target is judged on
the wall-time median and on the CPU-time maximum.

- one MRSch decision (numpy inference over the W = 10 window, features included): median,
  99th percentile and maximum over a replay of lublin_256's S4 held-out jobs with the
  shipped model (target: under 10 ms; the paper: under 2 s);
- one window-optimiser decision with w = 20: over the same replay (exhaustive below 10
  candidates, NSGA-II from 10 on) and over synthetic windows of 20 candidates that all fit
  on their own, the GA's worst case (target: under 0.5 s; the poster: under 0.6 s);
- the same replay's wall time per method.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click
import numpy as np

from ..model import InvalidInput
from ..multi import optimiser
from ..multi import workload as mw
from ..multi.report import MODELS_DIR, evaluation_part, model_path, run_method
from ..sim.swf import read_swf
from .simulator import DEFAULT_DATA_DIR, DEFAULT_DATA_HELP, LUBLIN

MRSCH_TARGET_MS = 10.0
OPTIMISER_TARGET_S = 0.5


def _summary(seconds: list[float], cpu: list[float]) -> dict:
    if not seconds:
        return {"decisions": 0}
    return {"decisions": len(seconds), "median_ms": 1000 * statistics.median(seconds),
            "p99_ms": 1000 * float(np.percentile(seconds, 99)), "max_ms": 1000 * max(seconds),
            "cpu_median_ms": 1000 * statistics.median(cpu), "cpu_max_ms": 1000 * max(cpu)}


def _meets(summary: dict, target_ms: float) -> bool:
    return summary["median_ms"] < target_ms and summary["cpu_max_ms"] < target_ms


def synthetic_windows(count: int, size: int = 20, seed: int = 0
                      ) -> tuple[list[float], list[float]]:
    """GA decisions on windows of ``size`` candidates that each fit but not all together:
    (wall seconds, CPU seconds) per decision."""
    rng = np.random.default_rng(seed)
    out, cpu = [], []
    for k in range(count):
        need = np.column_stack([rng.integers(1, 40, size), rng.integers(0, 16_000, size)])
        free = np.array([120, 60_000])
        cap = np.array([256, 73_443])
        t0, c0 = time.perf_counter(), time.thread_time()
        optimiser.choose(need, free, cap - free, cap, seed=k)
        out.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return out, cpu


@click.command("multi")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_DATA_DIR, show_default=DEFAULT_DATA_HELP)
@click.option("--set", "set_name", default="S4", show_default=True)
@click.option("--jobs", type=click.IntRange(min=10), default=1000, show_default=True,
              help="held-out jobs replayed")
@click.option("--windows", type=click.IntRange(min=1), default=20, show_default=True,
              help="synthetic 20-candidate windows for the GA's worst case")
@click.option("--json", "as_json", is_flag=True)
def multi(data_dir: Path, set_name: str, jobs: int, windows: int, as_json: bool) -> None:
    """Time one MRSch decision and one optimiser decision (w = 20) against the targets."""
    try:
        trace = read_swf(data_dir / LUBLIN)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    wl = evaluation_part(mw.generate(trace, set_name, 1), jobs)
    out: dict = {"trace": str(data_dir / LUBLIN), "set": set_name, "jobs": len(wl.jobs)}
    if model_path(MODELS_DIR, "mrsch", trace.path, wl.set_name).exists():
        run = run_method(wl, "mrsch")
        out["mrsch"] = {**_summary(run.decision_seconds, run.decision_cpu_seconds),
                        "wall_seconds": run.wall_seconds, "target_ms": MRSCH_TARGET_MS}
        out["mrsch"]["meets_target"] = _meets(out["mrsch"], MRSCH_TARGET_MS)
    else:
        out["mrsch"] = {"skipped": "no shipped model for this set"}
    run = run_method(wl, "optimiser", window=20)
    opt = _summary(run.decision_seconds, run.decision_cpu_seconds)
    opt.update(wall_seconds=run.wall_seconds, target_s=OPTIMISER_TARGET_S,
               meets_target=bool(opt["decisions"]) and _meets(opt, 1000 * OPTIMISER_TARGET_S))
    out["optimiser_w20_replay"] = opt
    ga = _summary(*synthetic_windows(windows))
    ga.update(target_s=OPTIMISER_TARGET_S, meets_target=_meets(ga, 1000 * OPTIMISER_TARGET_S))
    out["optimiser_w20_ga_worst_case"] = ga
    run = run_method(wl, "fcfs")
    out["fcfs_wall_seconds"] = run.wall_seconds
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    m = out["mrsch"]
    if "skipped" in m:
        click.echo(f"MRSch decision: skipped ({m['skipped']})")
    else:
        click.echo(f"MRSch decision ({m['decisions']} on {len(wl.jobs)} {set_name} jobs): "
                   f"median {m['median_ms']:.2f} ms, p99 {m['p99_ms']:.2f} ms, max "
                   f"{m['max_ms']:.2f} ms wall; CPU median {m['cpu_median_ms']:.2f} ms, max "
                   f"{m['cpu_max_ms']:.2f} ms (target < {MRSCH_TARGET_MS:.0f} ms: "
                   f"{'met' if m['meets_target'] else 'MISSED'}); replay {m['wall_seconds']:.1f} s")
    if opt["decisions"]:
        click.echo(f"optimiser decision w=20, replay ({opt['decisions']} windows): median "
                   f"{opt['median_ms']:.2f} ms, max {opt['max_ms']:.1f} ms wall, CPU max "
                   f"{opt['cpu_max_ms']:.1f} ms; replay {opt['wall_seconds']:.1f} s")
    click.echo(f"optimiser decision w=20, 20 candidates (NSGA-II, {ga['decisions']} windows): "
               f"median {ga['median_ms']:.0f} ms, max {ga['max_ms']:.0f} ms wall; CPU median "
               f"{ga['cpu_median_ms']:.0f} ms, max {ga['cpu_max_ms']:.0f} ms (target < "
               f"{OPTIMISER_TARGET_S} s: {'met' if ga['meets_target'] else 'MISSED'})")
    click.echo(f"FCFS + EASY replay of the same jobs: {out['fcfs_wall_seconds']:.2f} s")
