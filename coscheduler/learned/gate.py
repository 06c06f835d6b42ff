"""The release gate of learned models: at or below the best heuristic, before and after training.

A model is offered (``cosched models list`` without ``--all``) only when its validation
report, a JSON file beside it (``NAME.report.json`` for ``NAME.model``), says it passed
two checks, each replayed with the backfilling the model was trained for: its figure for
its metric (mean bsld, mean wait in hours, or utilisation) is at or below the best of the
heuristics ``HEURISTICS`` (at or above for utilisation)

- on the model's *validation windows* (the fixed windows of the training part that
  training used to keep its best epoch: ``validation_starts``), and
- on the *held-out part*: every whole window of ``EVAL_JOBS`` jobs after the training part
  (``heldout_windows``), jobs that no training run, teacher or epoch choice saw.

The second check exists because the first is chosen on: training keeps the epoch that
does best on those windows, so a model can pass them and lose on the rest of its trace
(hpc2n-sjf: -33.6 % on its validation windows, +32 % on the held-out part). Mean bounded
slowdown is heavy-tailed (a few windows carry most of it), so the report also gives the
share of held-out windows the model wins and a bootstrap interval of its ratio to the best
heuristic: how far the verdict could move on another stretch of the same machine's load.
An inspector's figure is its inspected mean bsld; its base policy is one of the heuristics.

``cosched train`` writes the report with every model; ``cosched models gate`` writes it
for existing (shipped) models. Errors about a model name its file: unreadable or
truncated files (``modelfile``), a trace of another machine size than the one the model's
header records (``machine.py``, the same check as every replay of a trace with a model; a
model without ``machine`` is gated on the trace its header names unless ``--trace`` says
otherwise), NaN features.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path

import numpy as np

from .. import boundedjson, outputs
from ..model import InvalidInput
from ..policies.queue import get_policy
from ..sim.cluster import Cluster
from ..sim.engine import simulate
from ..sim.metrics import compute_metrics
from ..sim.replay import window as trace_window
from ..sim.swf import SwfTrace
from .episode import metric_value
from .machine import check_machine, machine_of
from .modelfile import Model
from .paired import ratio_interval, relative, windows_won
from .selectors import LearnedInspector, LearnedScorer
from .windows import EVAL_JOBS, SEQUENCE_JOBS, eval_starts, heldout_all_starts, train_limit

HEURISTICS = ("FCFS", "WFP3", "UNICEP", "SJF", "F1", "SAF")
VALIDATION_WINDOWS = 6
REPORT_SUFFIX = ".report.json"
VERDICTS = ("pass", "fail")


def validation_starts(total_jobs: int, seed: int, sequence: int = SEQUENCE_JOBS,
                      count: int = VALIDATION_WINDOWS) -> tuple[list[int], int]:
    """(starts, jobs per window) of a run's validation windows: ``count`` windows of
    ``2 x sequence`` jobs in the training part, drawn with ``[seed, 99]``, none sharing a
    job with the reported windows (the seed-1 windows of RLScheduler's protocol,
    ``windows.eval_starts``, which may fall in the training part): the epoch kept on
    validation must not have seen the jobs its figures are reported on. A first draw
    clear of them is kept as it was; overlapping starts are replaced by further draws."""
    limit = train_limit(total_jobs, sequence=sequence)
    jobs = min(2 * sequence, limit)
    reported = reported_starts(total_jobs)
    high = limit - jobs + 1

    def clear(s: int) -> bool:
        return all(s + jobs <= e or e + EVAL_JOBS <= s for e in reported)

    if not any(clear(s) for s in range(high)):
        raise InvalidInput(f"a trace of {total_jobs} jobs leaves no {jobs}-job validation "
                           f"window in its training part (jobs 0-{limit - 1}) clear of the "
                           "reported windows")
    rng = np.random.default_rng([seed, 99])
    starts = [int(s) for s in rng.integers(0, high, count) if clear(int(s))]
    while len(starts) < count:
        s = int(rng.integers(0, high))
        if clear(s):
            starts.append(s)
    return sorted(starts), jobs


def reported_starts(total_jobs: int) -> list[int]:
    """Starts of the windows the docs report (``windows.eval_starts``: ten seed-1 windows of
    ``EVAL_JOBS`` jobs); none on a trace too short for them."""
    try:
        return eval_starts(total_jobs)
    except InvalidInput:
        return []


def report_path(model_path: str | Path) -> Path:
    p = Path(model_path)
    return p.with_name(p.name.split(".")[0] + REPORT_SUFFIX)


def heldout_windows(total_jobs: int, sequence: int = SEQUENCE_JOBS,
                    jobs: int = EVAL_JOBS) -> tuple[list[int], int]:
    """(starts, jobs per window) of the gate's held-out check: the part after the training
    part (``windows.heldout_first``) cut into consecutive windows of ``jobs`` jobs, all of
    them (a remainder shorter than a window is left out). Empty on a trace too short."""
    return heldout_all_starts(total_jobs, jobs, (sequence,)), jobs


def _values(trace: SwfTrace, cluster: Cluster, policy, backfill: str, metric: str,
            starts: list[int], jobs: int) -> list[float]:
    values = []
    for s in starts:
        chosen = trace_window(trace.jobs, s, jobs)
        sched = simulate(chosen, cluster, policy, backfill)
        values.append(metric_value(compute_metrics(chosen, sched.start, sched.end,
                                                   trace.max_procs), metric))
    return values


def _compare(model: list[float], heuristics: dict[str, list[float]], higher: bool) -> dict:
    """The model against the best heuristic (by mean) on the same windows."""
    means = {name: statistics.fmean(v) for name, v in heuristics.items()}
    best = (max if higher else min)(means, key=means.get)
    figure = statistics.fmean(model)
    passed = figure >= means[best] if higher else figure <= means[best]
    lo, hi = ratio_interval(model, heuristics[best])
    return {"model_figure": figure, "heuristics": means, "best_heuristic": best,
            "best_figure": means[best], "vs_best": relative(figure, means[best]),
            "vs_best_interval90": [lo - 1.0, hi - 1.0] if math.isfinite(lo) else None,
            "windows_won": windows_won(model, heuristics[best], higher),
            "verdict": "pass" if passed else "fail"}


def evaluate(model: Model, trace: SwfTrace) -> dict:
    """The validation report of ``model`` on ``trace`` (its training trace)."""
    t0 = time.perf_counter()
    h = model.header
    check_machine(model, trace)
    metric = h.get("metric") or "bsld"
    backfill = h.get("backfill") or "none"
    starts, jobs = validation_starts(len(trace.jobs), int(h.get("seed", 0)),
                                     int(h.get("sequence_jobs", SEQUENCE_JOBS)))
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    selector = (LearnedScorer(model) if model.kind == "rlscheduler"
                else LearnedInspector(model))
    higher = metric == "util"

    def compare(starts: list[int], jobs: int) -> dict:
        model_values = _values(trace, cluster, selector, backfill, metric, starts, jobs)
        return _compare(model_values, {
            name: _values(trace, cluster, get_policy(name), backfill, metric, starts, jobs)
            for name in HEURISTICS}, higher)

    validation = compare(starts, jobs)
    sequence = int(h.get("sequence_jobs", SEQUENCE_JOBS))
    held_starts, held_jobs = heldout_windows(len(trace.jobs), sequence)
    heldout = None
    if held_starts:
        heldout = {"first_job": held_starts[0], "windows": len(held_starts), "jobs": held_jobs,
                   "rule": "every whole window after the training part",
                   **compare(held_starts, held_jobs)}
    passed = validation["verdict"] == "pass" and (heldout is None or heldout["verdict"] == "pass")
    report = {
        "model": Path(model.path).name if model.path else model.name,
        "kind": model.kind, "trace": Path(trace.path).name, "machine": machine_of(trace),
        "metric": metric, "higher_is_better": higher, "backfill": backfill,
        "validation_windows": {"starts": starts, "jobs": jobs, "seed": int(h.get("seed", 0)),
                               "rule": "training part, clear of the reported seed-1 windows, "
                                       "numpy default_rng([seed, 99])"},
        **{k: validation[k] for k in ("model_figure", "heuristics", "best_heuristic",
                                      "best_figure", "vs_best")},
        "validation_verdict": validation["verdict"],
        "heldout": heldout,
        "verdict": "pass" if passed else "fail",
        "evaluated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if model.kind == "inspector":
        report["base"] = selector.queue_policy.name
    return report


def write_report(report: dict, model_path: str | Path) -> Path:
    path = report_path(model_path)
    return outputs.write_text(path, json.dumps(report, indent=2, sort_keys=True) + "\n")


def read_verdict(model_path: str | Path) -> tuple[str, dict | None]:
    """(``pass``, ``fail`` or ``unevaluated``, the report) for a model file; a report
    that does not belong to the file or cannot be read counts as unevaluated."""
    path = report_path(model_path)
    try:
        report = boundedjson.load_file(path)
    except (OSError, ValueError):
        return "unevaluated", None
    if not isinstance(report, dict) or report.get("verdict") not in VERDICTS \
            or report.get("model") != Path(model_path).name:
        return "unevaluated", None
    return report["verdict"], report


def _percent(vs_best: float | None) -> str:
    return "no ratio: the best heuristic's figure is 0" if vs_best is None else \
        f"{100 * vs_best:+.1f} %"


def summary(report: dict) -> str:
    """One line: the verdict and the figures it rests on."""
    unit = {"bsld": "mean bsld", "wait": "mean wait (h)", "util": "utilisation"}[report["metric"]]
    w = report["validation_windows"]
    line = (f"{report['model']}: {report['verdict'].upper()} - {unit} {report['model_figure']:.2f} "
            f"vs best heuristic {report['best_heuristic']} {report['best_figure']:.2f} "
            f"({_percent(report['vs_best'])}) on {len(w['starts'])} validation windows of "
            f"{w['jobs']} jobs, backfill {report['backfill']}")
    held = report.get("heldout")
    if held:
        interval = held["vs_best_interval90"]
        spread = ("no interval" if interval is None else
                  f"90 % interval {100 * interval[0]:+.0f} to {100 * interval[1]:+.0f} %")
        line += (f"; held-out part: {held['model_figure']:.2f} vs {held['best_heuristic']} "
                 f"{held['best_figure']:.2f} ({_percent(held['vs_best'])}, {spread}, "
                 f"{100 * held['windows_won']:.0f} % of {held['windows']} windows won)")
    elif "heldout" in report:
        line += "; held-out part: too short for one window (validation windows only)"
    return line
