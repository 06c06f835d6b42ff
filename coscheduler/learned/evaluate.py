"""Evaluating learned models beside the heuristics on the same windows (numpy only).

RLScheduler-style table: mean bounded slowdown over the ten seed-1 windows of 1,024 jobs
(``windows.eval_starts``) per policy, or over any other window starts (the later,
held-out windows: ``windows.heldout_starts``). Inspectors: mean bsld of the base policy alone and
inspected over the held-out windows (``windows.heldout_starts``), the relative
improvement and the rejection ratio (rejections per inspected pick), beside the hand-written
``reject-blocked`` rule over the same base (``policies.selection.RejectBlocked``).

A learned model is replayed only on a trace of the machine its header records
(``machine.py``); ``other_machine=True`` is for the cross-trace table, which runs a model on
other machines' traces on purpose.
"""

from __future__ import annotations

import statistics
import time

from ..policies.queue import QueuePolicy, get_policy
from ..policies.selection import RejectBlocked
from ..sim.cluster import Cluster
from ..sim.engine import simulate
from ..sim.metrics import Metrics, compute_metrics
from ..sim.replay import window as trace_window
from ..sim.swf import SwfTrace
from .machine import check_selector
from .modelfile import Model
from .selectors import LearnedInspector, LearnedScorer
from .windows import EVAL_JOBS, SEQUENCE_JOBS, eval_starts, heldout_starts

HEURISTICS = ("FCFS", "WFP3", "UNICEP", "SJF", "F1")


class CountingInspector:
    """Wraps an inspector to count its questions and rejections."""

    def __init__(self, inner):
        self.inner = inner
        self.model = getattr(inner, "model", None)   # the machine check sees through it
        self.name, self.kind = inner.name, inner.kind
        self.queue_policy, self.window = inner.queue_policy, inner.window
        self.max_rejections, self.retry_after = inner.max_rejections, inner.retry_after
        self.asked = self.rejected = 0

    def choose(self, view) -> bool:
        ok = self.inner.choose(view)
        self.asked += 1
        self.rejected += not ok
        return ok


def window_metrics(trace: SwfTrace, policy, backfill: str, starts: list[int],
                   jobs: int = EVAL_JOBS, other_machine: bool = False) -> list[Metrics]:
    """Each window's metrics under ``policy`` (a QueuePolicy or a selector); a learned
    selector's model must be for the trace's machine unless ``other_machine``."""
    if not other_machine:
        check_selector(policy, trace)
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    out = []
    for s in starts:
        chosen = trace_window(trace.jobs, s, jobs)
        sched = simulate(chosen, cluster, policy, backfill)
        out.append(compute_metrics(chosen, sched.start, sched.end, trace.max_procs))
    return out


def window_bsld(trace: SwfTrace, policy, backfill: str, starts: list[int],
                jobs: int = EVAL_JOBS, other_machine: bool = False) -> list[float]:
    """Mean bsld of each window under ``policy`` (a QueuePolicy or a selector);
    ``other_machine`` as in ``window_metrics``."""
    return [m.avg_bsld for m in window_metrics(trace, policy, backfill, starts, jobs,
                                               other_machine)]


def rl_table(trace: SwfTrace, scorers: dict, backfill: str,
             heuristics=HEURISTICS, starts: list[int] | None = None) -> dict:
    """{policy name: mean bsld} over ``starts`` (default: the seed-1 windows), heuristics
    then scorers, and each window's bsld per policy (``window_bsld``, in window order)."""
    for scorer in scorers.values():   # refused before the heuristics' replays, not after
        check_selector(scorer, trace)
    starts = eval_starts(len(trace.jobs)) if starts is None else starts
    per_window = {name: window_bsld(trace, get_policy(name), backfill, starts)
                  for name in heuristics}
    for name, scorer in scorers.items():
        per_window[name] = window_bsld(trace, scorer, backfill, starts)
    return {"windows": starts,
            "mean_bsld": {name: statistics.fmean(v) for name, v in per_window.items()},
            "window_bsld": per_window}


def inspector_figures(trace: SwfTrace, inspector, backfill: str,
                      sequences=(SEQUENCE_JOBS,)) -> dict:
    check_selector(inspector, trace)   # before the base policy's replays, not after
    starts = heldout_starts(len(trace.jobs), sequences=sequences)
    base: QueuePolicy = inspector.queue_policy
    counted = CountingInspector(inspector)
    t0 = time.perf_counter()
    b = window_bsld(trace, base, backfill, starts)
    i = window_bsld(trace, counted, backfill, starts)
    # the hand-written rule over the same base on the same windows: what a learned
    # inspector must beat to be worth its training
    # (at the inspector's own rejection budget and retry delay)
    r = window_bsld(trace, RejectBlocked(base, max_rejections=inspector.max_rejections,
                                         retry_after=inspector.retry_after), backfill, starts)
    base_mean, insp_mean, rule_mean = statistics.fmean(b), statistics.fmean(i), statistics.fmean(r)
    return {"windows": starts, "base": base.name, "base_bsld": base_mean,
            "inspected_bsld": insp_mean, "improvement": (base_mean - insp_mean) / base_mean,
            "rejection_ratio": counted.rejected / counted.asked if counted.asked else 0.0,
            "inspections": counted.asked, "rejections": counted.rejected,
            "rule": "reject-blocked", "rule_bsld": rule_mean,
            "max_rejections": inspector.max_rejections,
            "rule_improvement": (base_mean - rule_mean) / base_mean,
            "seconds": time.perf_counter() - t0}


def model_figures(model: Model, trace: SwfTrace, backfill: str) -> dict:
    """The figures a model file's header keeps (its own trace)."""
    if model.kind == "rlscheduler":
        table = rl_table(trace, {"model": LearnedScorer(model)}, backfill)
        heur = {k: v for k, v in table["mean_bsld"].items() if k != "model"}
        best = min(heur, key=heur.get)
        return {"seed1_windows": table["windows"], "model_bsld": table["mean_bsld"]["model"],
                "heuristics_bsld": heur, "best_heuristic": best,
                "vs_best": table["mean_bsld"]["model"] / heur[best] - 1.0}
    return inspector_figures(trace, LearnedInspector(model), backfill)
