"""A Gantt-style timeline of one run: jobs as bars on cores over time (pure data -> PNG).

What a scheduler's user looks at first: which job held which cores when, which guests ran
inside which hosts, at what quota, and how busy each host really was. Every bar is a job
(its cores tall, from its start to its end); a guest is drawn hatched inside its host's
rows. Within each bar, the shaded part is, over time, the job's measured CPU use (a host)
or its CPU quota (a guest), in cores; a triangle marks each loan (a guest's start), and
dotted vertical lines the learner's rounds closing.

``Timeline`` is plain data; ``from_paper_run`` and ``from_records`` build it from what a
run recorded, ``lay_out`` places bars on core rows and ``draw_timeline`` writes the PNG.
Core rows are a drawing's choice (the backends count cores per node, they do not number
them): each job that is not a guest takes the lowest rows free for its whole run, in
pieces where they are not consecutive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .. import outputs
from ..model import InvalidInput

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
            "#8c8c8c", "#ccb974", "#64b5cd")


@dataclass(frozen=True)
class TimelineJob:
    """One job's bar: ``group`` picks its colour (e.g. the workflow kind); ``host`` the job it
    ran inside as a guest, else None."""

    job_id: str
    group: str
    start: float
    end: float
    cores: int
    host: str | None = None


@dataclass(frozen=True)
class Timeline:
    """A run to draw. ``quotas``: job -> [(time, quota fraction)] from each change on (a
    job with none held 1.0); ``use``: job -> [(time, CPU use as a share of its cores)];
    ``rounds``: times a learning round closed; ``total_cores``: the cluster's size."""

    title: str
    jobs: tuple[TimelineJob, ...]
    total_cores: int
    quotas: Mapping[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    use: Mapping[str, Sequence[tuple[float, float]]] = field(default_factory=dict)
    rounds: Sequence[float] = ()


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Sorted rows as (first row, count) runs of consecutive rows."""
    out: list[tuple[int, int]] = []
    for r in rows:
        if out and out[-1][0] + out[-1][1] == r:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((r, 1))
    return out


def lay_out(jobs: Sequence[TimelineJob]) -> dict[str, list[tuple[int, int]]]:
    """The core rows of each job as (first row, count) pieces. A job that is not a guest
    takes the lowest rows no job running at the same time holds (in start order; like the
    backends, which count cores per node and do not number them, its rows need not be
    consecutive); a guest takes its host's rows after those of the host's other guests
    that overlap it. Pure."""
    rows: dict[str, list[int]] = {}
    placed: list[tuple[set[int], float, float]] = []
    ids = {j.job_id for j in jobs}
    by_id = {j.job_id: j for j in jobs}
    ordered = sorted(jobs, key=lambda j: (j.start, j.job_id))
    for j in ordered:
        if j.host is not None and j.host in ids:
            continue
        busy: set[int] = set()
        for taken, a, b in placed:
            if a < j.end and j.start < b:
                busy |= taken
        mine, r = [], 0
        while len(mine) < j.cores:
            if r not in busy:
                mine.append(r)
            r += 1
        rows[j.job_id] = mine
        placed.append((set(mine), j.start, j.end))
    inside: dict[str, list[TimelineJob]] = {}
    for j in ordered:
        if j.host is None or j.host not in ids:
            continue
        host_rows = rows.get(j.host) or list(range(by_id[j.host].cores))
        used: set[int] = set()
        for g in inside.get(j.host, []):
            if g.start < j.end and j.start < g.end:
                used |= set(rows[g.job_id])
        free = [r for r in host_rows if r not in used]
        rows[j.job_id] = (free if len(free) >= j.cores else host_rows)[:j.cores]
        inside.setdefault(j.host, []).append(j)
    return {jid: _runs(sorted(r)) for jid, r in rows.items()}


def _steps(points: Sequence[tuple[float, float]], start: float, end: float,
           first: float) -> tuple[list[float], list[float]]:
    """A step function over [start, end] from (time, value) changes, ``first`` before any."""
    xs, ys = [start], [first]
    for t, v in sorted(points):
        if t <= start:
            ys[0] = v
            continue
        if t >= end:
            break
        xs.append(t)
        ys.append(v)
    xs.append(end)
    ys.append(ys[-1])
    return xs, ys


def draw_timeline(tl: Timeline, path: Path | str) -> Path:
    """Write ``tl`` as a PNG at ``path``; returns the path."""
    if not tl.jobs:
        raise InvalidInput(f"timeline {tl.title!r}: no jobs to draw")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    pieces = lay_out(tl.jobs)
    groups = list(dict.fromkeys(j.group for j in tl.jobs))
    colour = {g: _PALETTE[i % len(_PALETTE)] for i, g in enumerate(groups)}
    t0 = min(j.start for j in tl.jobs)
    t1 = max(j.end for j in tl.jobs)
    top = max([tl.total_cores] + [r + n for p in pieces.values() for r, n in p])
    fig, ax = plt.subplots(figsize=(12, max(4.0, min(12.0, 2.0 + top / 12))))
    for j in sorted(tl.jobs, key=lambda j: j.host is not None):
        c = colour[j.group]
        guest = j.host is not None
        # Shaded: a guest's quota, a host's (or lone job's) measured use, as a share of
        # each of its pieces of rows.
        series = tl.quotas.get(j.job_id) if guest else tl.use.get(j.job_id)
        steps = _steps(series, j.start, j.end, 1.0 if not guest else series[0][1]) \
            if series else None
        for y, n in pieces[j.job_id]:
            ax.add_patch(Rectangle((j.start, y), j.end - j.start, n, facecolor=c,
                                   alpha=0.18 if not guest else 0.10, edgecolor=c,
                                   linewidth=0.8, linestyle="--" if guest else "-",
                                   hatch="///" if guest else None))
            if steps is not None:
                xs, ys = steps
                ax.fill_between(xs, y, [y + n * min(1.0, max(0.0, v)) for v in ys],
                                step="post", color=c, alpha=0.55 if not guest else 0.45,
                                linewidth=0, hatch="///" if guest else None)
        y, n = max(pieces[j.job_id], key=lambda p: p[1])
        if guest:
            ax.plot([j.start], [y + n], marker="v", color="black", markersize=5)
        if n >= max(2, top // 40) and (j.end - j.start) > (t1 - t0) / 40:
            ax.text(j.start + (j.end - j.start) * 0.02, y + n / 2, j.job_id.split(".")[-1],
                    fontsize=6, va="center", clip_on=True)
    for t in tl.rounds:
        ax.axvline(t, color="grey", linestyle=":", linewidth=0.8)
    ax.axhline(tl.total_cores, color="black", linewidth=0.6)
    ax.set_xlim(t0, t1 + (t1 - t0) * 0.01)
    ax.set_ylim(0, top + 1)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("cores")
    ax.set_title(tl.title, fontsize=10)
    handles = [Patch(facecolor=colour[g], alpha=0.5, label=g) for g in groups]
    handles += [Patch(facecolor="white", edgecolor="black", hatch="///",
                      label="guest (shaded: its quota)"),
                Patch(facecolor="grey", alpha=0.55, label="host/alone: measured CPU use"),
                plt.Line2D([], [], marker="v", color="black", linestyle="", label="loan"),
                plt.Line2D([], [], color="grey", linestyle=":", label="learning round closed")]
    ax.legend(handles=handles, fontsize=7, loc="upper right", ncol=2)
    fig.tight_layout()
    path = Path(path)
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def from_records(title: str, jobs: Sequence[TimelineJob], total_cores: int,
                 quota_log: Sequence[tuple[float, str, float]] = (),
                 start_quotas: Mapping[str, float] | None = None,
                 use_log: Sequence[tuple[float, str, float]] = (),
                 rounds: Sequence[float] = ()) -> Timeline:
    """A timeline from what a backend records: quota changes (time, job, quota), the
    quotas at start, and CPU use samples (time, job, share of its cores)."""
    starts = {j.job_id: j.start for j in jobs}
    quotas: dict[str, list[tuple[float, float]]] = {}
    for jid, q in (start_quotas or {}).items():
        if jid in starts:
            quotas.setdefault(jid, []).append((starts[jid], q))
    for t, jid, q in quota_log:
        quotas.setdefault(jid, []).append((t, q))
    use: dict[str, list[tuple[float, float]]] = {}
    for t, jid, u in use_log:
        use.setdefault(jid, []).append((t, u))
    return Timeline(title, tuple(jobs), total_cores, quotas, use, tuple(rounds))


__all__ = ["Timeline", "TimelineJob", "draw_timeline", "from_records", "lay_out"]
