"""``cosched simulate learned``: the learned models beside the heuristics (numpy only).

For every trace: RLScheduler's table (mean bounded slowdown over the ten seed-1 windows of
1,024 jobs, or with ``windows="later"`` over the ten held-out windows after every
evaluated model's training part, ``windows.heldout_starts``, or with ``windows="heldout"``
over every whole window of that part, ``windows.heldout_all_starts``; without and with EASY,
FCFS / WFP3 / UNICEP / SJF / F1 and each learned model trained on that trace with that
backfilling); the cross-trace table (the model of trace X
on trace Y's windows); each inspector's mean bsld over its base on the held-out windows,
with the relative improvement and the rejection ratio; and the training curves (PNG,
drawn from the curves the model files keep, when matplotlib is present).

A model in a trace's own table or an inspector on its trace must be for that trace's
machine (``machine.py``: one line naming the file otherwise); the cross-trace table runs
models on other machines' traces on purpose and is not checked.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path

from .. import outputs
from ..model import InvalidInput
from ..sim.swf import SwfTrace, read_swf
from .evaluate import HEURISTICS, inspector_figures, rl_table, window_bsld
from .modelfile import load_model
from .paired import ratio_interval, windows_won
from .registry import list_models
from .selectors import LearnedInspector, LearnedScorer
from .windows import SEQUENCE_JOBS, eval_starts, heldout_all_starts, heldout_first, heldout_starts

BACKFILLS = ("none", "easy")
WINDOW_SETS = ("seed1", "later", "heldout")
SET_TEXT = {"seed1": "seed-1 windows", "later": "later (held-out) windows",
            "heldout": "held-out windows"}
PER_WINDOW = {"seed1": "seed-1 window", "later": "later (held-out) window",
              "heldout": "held-out window"}
HELDOUT_SETS = ("later", "heldout")   # (jobs no evaluated model trained or was validated on)


def trace_key(name: str) -> str:
    """A trace file's short name: lublin_256.swf -> lublin_256."""
    for suffix in (".gz", ".swf"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _sequences(models: list[dict], trace_name: str) -> list[int]:
    """The training sequence lengths of the models trained on ``trace_name`` (they set
    where its training part ends on a short trace)."""
    return sorted({int(load_model(m["path"]).header.get("sequence_jobs", SEQUENCE_JOBS))
                   for m in models if m.get("trace") == trace_name} | {SEQUENCE_JOBS})


def window_starts(spec: tuple, total_jobs: int) -> list[int]:
    """The RL tables' windows: ``("seed1",)``, ``("later", sequences)`` or
    ``("heldout", sequences)``."""
    if spec[0] == "later":
        return heldout_starts(total_jobs, sequences=spec[1])
    if spec[0] == "heldout":
        return heldout_all_starts(total_jobs, sequences=spec[1])
    return eval_starts(total_jobs)


def build_report(traces: list[Path], models: list[dict] | None = None,
                 progress=None, workers: int | None = 1, cluster: str | None = None,
                 windows: str = "seed1") -> dict:
    """Evaluate every shipped model (``list_models`` rows) on ``traces``; plain data out.

    The evaluations are independent (a trace's table per backfilling, a model on another
    trace's windows, an inspector on its trace), so they run as one sweep
    (``coscheduler/sweep.py``): ``workers`` local processes (None: every core) or a Dask
    ``cluster``; the report is the same as a serial one. ``progress(what)`` is called as
    each evaluation is done, in order. ``windows``: the RL tables' windows, "seed1"
    (RLScheduler's), "later" (ten windows drawn from the held-out part: jobs no evaluated
    model trained or was validated on) or "heldout" (every whole window of that part);
    inspectors always use the held-out part's ten windows."""
    from .. import sweep

    if windows not in WINDOW_SETS:
        raise InvalidInput(f"unknown window set {windows!r}; one of {', '.join(WINDOW_SETS)}")
    models = list_models() if models is None else models
    t0 = time.perf_counter()
    paths = {p.name: str(p) for p in traces}
    if len(paths) < len(traces):
        raise InvalidInput("two traces share a file name: "
                           f"{', '.join(sorted(str(p) for p in traces))}")
    rl = [m for m in models if m.get("kind") == "rlscheduler"]
    insp = [m for m in models if m.get("kind") == "inspector" and m["trace"] in paths]
    seqs = {name: _sequences(models, name) for name in paths}
    spec = {name: (windows, seqs[name]) if windows in HELDOUT_SETS else ("seed1",)
            for name in paths}
    tasks = [sweep.Task(f"{name}, backfill {backfill}",
                        ("table", path, backfill,
                         [m for m in rl if m["trace"] == name and m["backfill"] == backfill],
                         spec[name], seqs[name]))
             for name, path in paths.items() for backfill in BACKFILLS]
    tasks += [sweep.Task(f"rl:{m['name']} on {name}", ("cross", path, m["backfill"], [m],
                                                       spec[name], seqs[name]))
              for m in rl for name, path in paths.items() if m["trace"] != name]
    tasks += [sweep.Task(f"inspector {m['name']}", ("inspector", paths[m["trace"]],
                                                    m["backfill"], [m], spec[m["trace"]],
                                                    seqs[m["trace"]])) for m in insp]
    on_result = (lambda task, _r: progress(task.name)) if progress else None
    try:
        results = dict(zip((t.name for t in tasks),
                           sweep.run_tasks(_evaluate, tasks, workers=workers, cluster=cluster,
                                           on_result=on_result)))
    except sweep.TaskFailed as exc:
        if isinstance(exc.cause, InvalidInput):
            raise exc.cause from None
        raise
    out: dict = {"window_set": windows, "traces": {},
                 "cross_trace": {b: {} for b in BACKFILLS}, "inspectors": []}
    for name in paths:
        jobs = results[f"{name}, backfill {BACKFILLS[0]}"]["jobs"]
        entry = {"jobs": jobs, "first_heldout_job": heldout_first(jobs, seqs[name]),
                 "windows": None, "mean_bsld": {}, "window_bsld": {}, "models": {}}
        for backfill in BACKFILLS:
            r = results[f"{name}, backfill {backfill}"]
            entry["windows"] = r["windows"]
            table = r["table"]
            entry["mean_bsld"][backfill] = table["mean_bsld"]
            entry["window_bsld"][backfill] = table["window_bsld"]
            heur = {k: v for k, v in table["mean_bsld"].items() if k in HEURISTICS}
            best = min(heur, key=heur.get)
            for label in r["labels"]:
                mine, theirs = table["window_bsld"][label], table["window_bsld"][best]
                lo, hi = ratio_interval(mine, theirs)
                entry["models"][label] = {
                    "backfill": backfill, "mean_bsld": table["mean_bsld"][label],
                    "best_heuristic": best, "best_heuristic_bsld": heur[best],
                    "vs_best": table["mean_bsld"][label] / heur[best] - 1.0,
                    "vs_best_interval90": [lo - 1.0, hi - 1.0],
                    "windows_won": windows_won(mine, theirs)}
        out["traces"][name] = entry
    for m in rl:
        label, row = f"rl:{m['name']}", {}
        for name in paths:
            if m["trace"] == name:
                row[name] = out["traces"][name]["mean_bsld"][m["backfill"]][label]
            else:
                row[name] = results[f"{label} on {name}"]
        out["cross_trace"].setdefault(m["backfill"], {})[label] = row
    for m in insp:
        f = results[f"inspector {m['name']}"]
        out["inspectors"].append({"model": m["name"], "trace": m["trace"], "base": f["base"],
                                  "backfill": m["backfill"], "base_bsld": f["base_bsld"],
                                  "inspected_bsld": f["inspected_bsld"],
                                  "improvement": f["improvement"],
                                  "rejection_ratio": f["rejection_ratio"],
                                  "rule_bsld": f["rule_bsld"],
                                  "rule_improvement": f["rule_improvement"],
                                  "max_rejections": f["max_rejections"],
                                  "windows": f["windows"]})
    out["seconds"] = time.perf_counter() - t0
    return out


@lru_cache(maxsize=4)
def _trace(path: str) -> SwfTrace:
    # a worker evaluates several things on one trace: read it once per process
    return read_swf(Path(path))


def _evaluate(what: str, path: str, backfill: str, models: list[dict], spec: tuple,
              sequences: list[int]):
    """One evaluation of a report (a sweep task: plain arguments, a plain result)."""
    trace = _trace(path)
    starts = window_starts(tuple(spec), len(trace.jobs))
    if what == "table":
        own = {f"rl:{m['name']}": LearnedScorer(load_model(m["path"], "rlscheduler"),
                                                name=f"rl:{m['name']}") for m in models}
        return {"jobs": len(trace.jobs), "windows": starts,
                "labels": list(own), "table": rl_table(trace, own, backfill, starts=starts)}
    (m,) = models
    if what == "cross":
        scorer = LearnedScorer(load_model(m["path"], "rlscheduler"), name=f"rl:{m['name']}")
        # the cross-trace table: a model on another trace, another machine, on purpose
        values = window_bsld(trace, scorer, backfill, starts, other_machine=True)
        return sum(values) / len(values)
    return inspector_figures(trace, LearnedInspector(load_model(m["path"], "inspector")),
                             backfill, sequences=sequences)


def draw_windows(report: dict, directory: Path) -> list[str]:
    """One PNG per trace and backfilling: each window's bsld per policy (the heuristics
    and the learned models side by side); [] without matplotlib."""
    try:
        from .plots import plot_windows
    except ImportError:
        return []
    outputs.make_output_dir(directory)
    which = report.get("window_set", "seed1")
    suffix = "" if which == "seed1" else f"-{which}"
    paths = []
    for name, entry in report["traces"].items():
        for backfill, per_policy in entry.get("window_bsld", {}).items():
            path = directory / f"windows-{trace_key(name)}-{backfill}{suffix}.png"
            plot_windows(entry["windows"], per_policy, path,
                         title=f"{name}, backfill {backfill}: bounded slowdown per "
                               f"{PER_WINDOW[which]}")
            paths.append(str(path))
    return paths


def draw_curves(models: list[dict], directory: Path) -> list[str]:
    """One PNG per model from the curve in its header; [] without matplotlib."""
    try:
        from .plots import plot_curve
    except ImportError:
        return []
    outputs.make_output_dir(directory)
    paths = []
    for m in models:
        if not m.get("kind"):
            continue
        model = load_model(m["path"])
        curve = [r for r in model.header.get("curve", []) if "imitation" not in r]
        if not curve:
            continue
        path = plot_curve(curve, model.kind, directory / f"{m['name']}.png",
                          title=f"{m['name']} ({model.kind}, {m['trace']}, backfill "
                                f"{m['backfill']})")
        paths.append(str(path))
    return paths


def render(report: dict) -> str:
    """The report as text tables."""
    lines = []
    which = SET_TEXT[report.get("window_set", "seed1")]
    for name, entry in report["traces"].items():
        count = "every one of the" if report.get("window_set") == "heldout" else "the ten"
        lines.append(f"{name}: mean bounded slowdown over {count} {which} of 1,024 jobs"
                     + (f" ({len(entry['windows'])})" if count != "the ten" else ""))
        if report.get("window_set") in HELDOUT_SETS:
            lines.append(f"  (windows from job {entry['first_heldout_job']} of {entry['jobs']}: "
                         "after every evaluated model's training part; starts "
                         f"{', '.join(map(str, entry['windows']))})")
        rows = sorted({k for b in BACKFILLS for k in entry["mean_bsld"].get(b, {})},
                      key=lambda k: (k.startswith("rl:"), list(HEURISTICS).index(k)
                                     if k in HEURISTICS else 0, k))
        lines.append(f"  {'policy':<24}{'no backfilling':>16}{'EASY':>12}")
        for k in rows:
            cells = []
            for b in BACKFILLS:
                v = entry["mean_bsld"].get(b, {}).get(k)
                cells.append(f"{v:.1f}" if v is not None else "-")
            lines.append(f"  {k:<24}{cells[0]:>16}{cells[1]:>12}")
        for label, m in entry["models"].items():
            target = ""
            if report.get("window_set") in HELDOUT_SETS:  # issue 20: within 5 % of it, or better
                target = f"; within 5 %: {'yes' if m['vs_best'] <= 0.05 else 'no'}"
            lo, hi = m["vs_best_interval90"]
            won = round(m["windows_won"] * len(entry["windows"]))
            lines.append(f"  {label} ({m['backfill']}): {100 * m['vs_best']:+.1f} % against the "
                         f"best heuristic ({m['best_heuristic']} {m['best_heuristic_bsld']:.1f}; "
                         f"90 % interval {100 * lo:+.0f} to {100 * hi:+.0f} %, {won} of "
                         f"{len(entry['windows'])} windows won){target}")
        lines.append("")
    for backfill, table in report["cross_trace"].items():
        if not table:
            continue
        names = list(report["traces"])
        lines.append(f"Cross-trace (backfill {backfill}): model of trace X (rows) on trace Y's "
                     f"{which} (columns), mean bsld")
        lines.append("  " + f"{'model':<24}" + "".join(f"{trace_key(n)[:14]:>16}" for n in names))
        for label, row in table.items():
            lines.append("  " + f"{label:<24}" + "".join(
                f"{row[n]:>16.1f}" if n in row else f"{'-':>16}" for n in names))
        lines.append("")
    if report["inspectors"]:
        lines.append("SchedInspector on the held-out windows (after the training part): mean bsld")
        lines.append(f"  {'model':<22}{'trace':<16}{'base':<6}{'base':>10}{'inspected':>11}"
                     f"{'improvement':>13}{'rejections':>12}{'budget':>8}{'reject-blocked':>16}")
        for r in report["inspectors"]:
            lines.append(f"  {r['model']:<22}{trace_key(r['trace'])[:15]:<16}{r['base']:<6}"
                         f"{r['base_bsld']:>10.1f}{r['inspected_bsld']:>11.1f}"
                         f"{100 * r['improvement']:>12.1f}%{r['rejection_ratio']:>12.3f}"
                         f"{r['max_rejections']:>8}{100 * r['rule_improvement']:>15.1f}%")
        lines.append("  budget: rejections of one job before it is accepted unasked (the model's);")
        lines.append("  reject-blocked: the hand-written rule over the same base (reject a pick "
                     "that cannot start now) at that budget, its improvement on the same windows")
    return "\n".join(lines).rstrip() + "\n"
