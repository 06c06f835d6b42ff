"""PNG plots of ``cosched simulate paper`` (matplotlib, no display needed).

- ``makespan.png``: like the paper's Fig. 3(a): the queue's makespan per cluster size and
  policy, bars at the median over repetitions, error bars from the smallest to the largest;
- ``runtime.png``: like Fig. 3(b): each workflow kind's mean total runtime per cluster size
  and policy, same bars;
- ``weights-<cores>.png``: ASA_X's expert weights per job class after every learning round
  closed, over the repetitions of that cluster size (one panel per class);
- ``timeline-<cores>-<policy>.png``: the last repetition as a Gantt chart (jobs on cores
  over time, guests' quotas and hosts' measured use shaded, loans and rounds marked;
  ``experiments.timeline``).

The figures are drawn from the runs' plain data (``PaperRun``); nothing is recomputed.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Sequence

from .. import outputs
from .paper import ALL_POLICIES as POLICIES, WORKFLOW_KINDS, PaperRun

_COLOURS = {"space-sharing": "#4c72b0", "static": "#dd8452", "asax": "#55a868"}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")          # files only: no display on a cluster's login node
    import matplotlib.pyplot as plt
    return plt


def _groups(runs: Sequence[PaperRun]) -> tuple[list[int], list[str]]:
    sizes = list(dict.fromkeys(r.cores for r in runs))
    policies = [p for p in POLICIES if any(r.policy == p for r in runs)]
    return sizes, policies


def _bars(ax, sizes, policies, values, unit: str) -> None:
    """values[(size, policy)] -> list of figures; bars at medians, whiskers min..max."""
    width = 0.8 / max(1, len(policies))
    for k, policy in enumerate(policies):
        xs, meds, lo, hi = [], [], [], []
        for i, size in enumerate(sizes):
            v = values.get((size, policy))
            if not v:
                continue
            m = statistics.median(v)
            xs.append(i + (k - (len(policies) - 1) / 2) * width)
            meds.append(m)
            lo.append(m - min(v))
            hi.append(max(v) - m)
        ax.bar(xs, meds, width, yerr=[lo, hi], capsize=3, label=policy,
               color=_COLOURS.get(policy))
    ax.set_xticks(range(len(sizes)), [f"{s} cores" for s in sizes])
    ax.set_ylabel(unit)


def _unit(seconds: float) -> tuple[str, float]:
    if seconds >= 7200:
        return "h", 3600.0
    if seconds >= 120:
        return "min", 60.0
    return "s", 1.0


def plot_makespan(runs: Sequence[PaperRun], path: Path) -> Path:
    plt = _pyplot()
    sizes, policies = _groups(runs)
    name, div = _unit(max(r.makespan_s for r in runs))
    values: dict = {}
    for r in runs:
        values.setdefault((r.cores, r.policy), []).append(r.makespan_s / div)
    fig, ax = plt.subplots(figsize=(7, 4))
    _bars(ax, sizes, policies, values, f"makespan ({name})")
    ax.set_title("Queue makespan per cluster size and policy (median, min-max)")
    ax.legend()
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def plot_runtime(runs: Sequence[PaperRun], path: Path, kinds_of: dict[str, str]) -> Path:
    """``kinds_of``: workflow instance -> kind."""
    plt = _pyplot()
    sizes, policies = _groups(runs)
    longest = max(t for r in runs for t in r.workflow_runtime_s.values())
    name, div = _unit(longest)
    kinds = [k for k in WORKFLOW_KINDS if k in kinds_of.values()]
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.4 * len(kinds), 4), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        values: dict = {}
        for r in runs:
            mine = [t for w, t in r.workflow_runtime_s.items() if kinds_of.get(w) == kind]
            if mine:
                values.setdefault((r.cores, r.policy), []).append(statistics.fmean(mine) / div)
        _bars(ax, sizes, policies, values, f"mean total runtime ({name})")
        ax.set_title(kind)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Workflow total runtime per cluster size and policy (median, min-max)")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def plot_weights(runs: Sequence[PaperRun], cores: int, path: Path) -> Path | None:
    """ASA_X's weights per class, round by round, over the repetitions of one size."""
    history = [h for r in runs if r.policy == "asax" and r.cores == cores
               for h in (r.weight_history or [])]
    if not history:
        return None
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator
    classes = sorted({h["class"] for h in history})
    fig, axes = plt.subplots(1, len(classes), figsize=(3.6 * len(classes), 3.6),
                             squeeze=False, sharey=True)
    for ax, cls in zip(axes[0], classes):
        rows = [h for h in history if h["class"] == cls]
        names = rows[0]["experts"]
        first = rows[0]["weights_before"]
        for i, expert in enumerate(names):
            ys = [first[i]] + [h["weights_after"][i] for h in rows]
            ax.plot(range(len(ys)), ys, marker="o", ms=3, label=expert)
        ax.set_title(cls)
        ax.set_xlabel("rounds closed")
        ax.set_ylim(0, 1)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][0].set_ylabel("expert weight")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"ASA_X expert weights per class, {cores} cores, over the repetitions")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def write_plots(runs: Sequence[PaperRun], out: Path, kinds_of: dict[str, str]) -> list[Path]:
    """Every plot into the folder ``out`` (created); returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = [plot_makespan(runs, out / "makespan.png"),
             plot_runtime(runs, out / "runtime.png", kinds_of)]
    for cores in dict.fromkeys(r.cores for r in runs):
        p = plot_weights(runs, cores, out / f"weights-{cores}.png")
        if p is not None:
            files.append(p)
    last: dict[tuple[int, str], PaperRun] = {}
    for r in runs:
        last[(r.cores, r.policy)] = r
    for (cores, policy), r in last.items():
        files.append(plot_timeline(r, out / f"timeline-{cores}-{policy}.png", kinds_of))
    return files


def plot_timeline(run: PaperRun, path: Path, kinds_of: dict[str, str]) -> Path:
    """One run as a Gantt chart (``experiments.timeline``)."""
    from .timeline import TimelineJob, draw_timeline, from_records

    jobs = [TimelineJob(s.job_id, kinds_of.get(s.workflow, s.workflow.split("-", 1)[0]),
                        s.start, s.end, s.cores, s.host)
            for s in run.stages if s.eligible is not None and s.end > s.start]
    title = (f"{run.policy}, {run.cores} cores, repetition {run.repeat + 1}: makespan "
             f"{run.makespan_s:.0f} s, {run.coallocations} loans"
             + (f", {len(run.round_times)} rounds closed" if run.policy == "asax" else ""))
    tl = from_records(title, jobs, run.cores * run.scale_out, run.quota_log, run.start_quotas,
                      run.use_log, run.round_times)
    return draw_timeline(tl, path)


__all__ = ["plot_makespan", "plot_runtime", "plot_timeline", "plot_weights", "write_plots"]
