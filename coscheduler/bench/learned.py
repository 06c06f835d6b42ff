"""``cosched bench learned``: how fast learned selectors decide (numpy inference).

- one RLScheduler decision over a full 128-job window (features + kernel network + masked
  argmax), median and p99 over ``--repeat`` decisions taken from a real replay state;
- one SchedInspector decision (features + MLP), the same way;
- a whole trace (HPC2N, 202,871 jobs) replayed with a learned scorer, EASY and none
  (wall time, which the target is about, and this process's CPU time, which a shared
  machine's load does not inflate).

The model is the shipped one for the trace if there is one, else random weights of the
same shape (the cost does not depend on the weights).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import click
import numpy as np

from ..learned.features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation
from ..learned.modelfile import Model, load_model
from ..learned.nets import inspector_init, rl_init
from ..learned.registry import MODELS_DIR
from ..learned.selectors import LearnedInspector, LearnedScorer
from ..sim.cluster import Cluster
from ..sim.engine import replay_steps, simulate
from ..sim.metrics import compute_metrics
from ..sim.replay import window
from ..sim.swf import read_swf
from .simulator import DEFAULT_DATA_DIR, DEFAULT_DATA_HELP, HPC2N, LUBLIN

DECISION_TARGET_S = 1e-3
WHOLE_TARGET_S = 60.0


def _random_model(kind: str) -> Model:
    rng = np.random.default_rng(0)
    if kind == "rlscheduler":
        params = rl_init(rng, len(RL_FEATURES))
        header = {"normalisation": Normalisation(estimate_s=3600.0 * 36).as_dict(),
                  "window": 128, "mask": "runnable"}
    else:
        params = inspector_init(rng, len(INSPECTOR_FEATURES))
        header = {"normalisation": Normalisation(estimate_s=3600.0 * 36).as_dict(),
                  "base": "SJF"}
    return Model(kind, {k: v.astype(np.float64) for k, v in params.items()
                        if k.startswith("pi/")}, header, path=f"random-{kind}")


def _model(name: str, kind: str) -> Model:
    path = MODELS_DIR / f"{name}.model"
    return load_model(path, kind) if path.is_file() else _random_model(kind)


def _views(trace, selector, count: int, min_size: int) -> list:
    """Views from a real replay whose window holds at least ``min_size`` jobs."""
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    jobs = window(trace.jobs, 0, min(len(trace.jobs), 20_000))
    steps = replay_steps(jobs, cluster, selector, "none")
    views = []
    try:
        view = next(steps)
        while len(views) < count:
            if view.size >= min_size:
                views.append(view)
            view = steps.send(selector.choose(view))
    except StopIteration:
        pass
    return views


def _time_decisions(selector, views, repeat: int) -> dict:
    times = []
    for k in range(repeat):
        view = views[k % len(views)]
        t0 = time.perf_counter()
        selector.choose(view)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"decisions": repeat, "window_jobs": int(statistics.median(v.size for v in views)),
            "median_seconds": statistics.median(times),
            "p99_seconds": times[int(0.99 * (len(times) - 1))],
            "target_seconds": DECISION_TARGET_S,
            "meets_target": statistics.median(times) < DECISION_TARGET_S}


@click.command("learned")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_DATA_DIR, show_default=DEFAULT_DATA_HELP)
@click.option("--repeat", type=click.IntRange(min=10), default=2000, show_default=True,
              help="Decisions timed per selector.")
@click.option("--whole/--no-whole", default=True, show_default=True,
              help="Also replay the whole HPC2N trace with a learned scorer.")
@click.option("--json", "as_json", is_flag=True)
def learned(data_dir: Path, repeat: int, whole: bool, as_json: bool) -> None:
    """Median time of one learned decision (128-job window) and a whole-trace replay."""
    out: dict = {}
    lublin = data_dir / LUBLIN
    if lublin.is_file():
        trace = read_swf(lublin)
        scorer = LearnedScorer(_model("lublin256", "rlscheduler"))
        views = _views(trace, scorer, 200, 128)
        if views:
            out["rlscheduler_decision"] = {"model": scorer.model.path,
                                           **_time_decisions(scorer, views, repeat)}
        inspector = LearnedInspector(_model("lublin256-sjf", "inspector"))
        iviews = _views(trace, inspector, 200, 64)
        if iviews:
            out["inspector_decision"] = {"model": inspector.model.path,
                                         **_time_decisions(inspector, iviews, repeat)}
    else:
        out["rlscheduler_decision"] = {"skipped": f"trace not found: {lublin}"}
    hpc2n = data_dir / HPC2N
    if whole and hpc2n.is_file():
        trace = read_swf(hpc2n)
        cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
        rows = {}
        for backfill, name in (("none", "hpc2n"), ("easy", "hpc2n-easy")):
            scorer = LearnedScorer(_model(name, "rlscheduler"))
            t0, c0 = time.perf_counter(), time.process_time()
            sched = simulate(trace.jobs, cluster, scorer, backfill)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            m = compute_metrics(trace.jobs, sched.start, sched.end, trace.max_procs)
            rows[backfill] = {"model": scorer.model.path, "jobs": len(trace.jobs),
                              "decisions": sched.decisions, "simulate_seconds": wall,
                              "cpu_seconds": cpu,
                              "avg_bsld": m.avg_bsld, "target_seconds": WHOLE_TARGET_S,
                              "meets_target": wall < WHOLE_TARGET_S}
        out["hpc2n_whole"] = rows
    elif whole:
        out["hpc2n_whole"] = {"skipped": f"trace not found: {hpc2n}"}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for key in ("rlscheduler_decision", "inspector_decision"):
        r = out.get(key)
        if not r:
            continue
        if "skipped" in r:
            click.echo(f"{key}: skipped ({r['skipped']})")
            continue
        verdict = "meets" if r["meets_target"] else "MISSES"
        click.echo(f"{key.replace('_', ' ')} ({r['model']}): median {1e6 * r['median_seconds']:.0f} us, "
                   f"p99 {1e6 * r['p99_seconds']:.0f} us over {r['decisions']} decisions, "
                   f"window {r['window_jobs']} jobs ({verdict} the < 1 ms target)")
    whole_rows = out.get("hpc2n_whole", {})
    if "skipped" in whole_rows:
        click.echo(f"whole HPC2N: skipped ({whole_rows['skipped']})")
    for backfill, r in whole_rows.items() if "skipped" not in whole_rows else ():
        verdict = "meets" if r["meets_target"] else "MISSES"
        click.echo(f"whole HPC2N ({r['jobs']:,} jobs), backfill {backfill}, {r['model']}: "
                   f"{r['simulate_seconds']:.1f} s wall, {r['cpu_seconds']:.1f} s CPU ({verdict} "
                   f"the < 60 s target), "
                   f"avg bsld {r['avg_bsld']:.1f}")
