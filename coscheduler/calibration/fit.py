"""Fit the interference model to measured slowdowns, and check it against them (pure).

Input: the raw figures of ``measure.Measurements.to_dict()`` (or the saved ones in
``coscheduler/calibration/measured.json``). Each point becomes a *measured slowdown*: the
median over rounds of (wall time of a probe under a quota or beside another probe) / (wall
time of the reference run of the same probe alone, made just before it).

A probe's demand (``JobDemand``) comes from what was measured of it alone: cpu = its CPU
seconds over wall seconds; the memory probe streams memory whenever it computes (membw =
cpu); the disk probe's time off the CPU is disk I/O (io = 1 - cpu); the other probes' waits
are the testbed's emulated waits (sleeps), which contend for nothing.

The model's parameters are fitted by least squares on log slowdowns (scipy), bounded, and
``check`` returns model against measurement for every point.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Mapping

from ..backends.interference import InterferenceModel, JobDemand
from ..model import InvalidInput

FITTED = ("throttle", "overlap", "timeslice", "cache", "bandwidth", "io")
BOUNDS = {"throttle": (-0.3, 1.0), "overlap": (0.0, 1.0), "timeslice": (0.0, 3.0),
          "cache": (0.0, 3.0), "bandwidth": (0.0, 3.0), "io": (0.0, 5.0)}


@dataclass(frozen=True)
class Point:
    """One measured configuration and its measured slowdown."""

    kind: str                 # "quota" or "pair"
    target: str
    quota: float
    other: str | None
    other_quota: float | None
    same_cpu: bool
    runs: int
    slowdown: float           # median over the rounds
    low: float = 0.0          # smallest and largest round
    high: float = 0.0

    def label(self) -> str:
        if self.kind == "quota":
            return f"{self.target} at {self.quota:.0%}"
        where = "same CPU" if self.same_cpu else "other CPU"
        q = f" at {self.quota:.0%}" if self.quota < 1 else ""
        oq = f" at {self.other_quota:.0%}" if self.other_quota is not None and self.other_quota < 1 else ""
        return f"{self.target}{q} beside {self.other}{oq}, {where}"


def demands(raw: Mapping) -> dict[str, JobDemand]:
    """Each probe's demand, from its reference runs (see the module docstring)."""
    out = {}
    for probe, runs in raw["alone"].items():
        if not runs:
            continue
        u = min(1.0, statistics.median(r["cpu_s"] / r["elapsed_s"] for r in runs if r["elapsed_s"] > 0))
        out[probe] = JobDemand(cpu=u, membw=u if probe == "mem" else 0.0,
                               io=1.0 - u if probe == "io" else 0.0)
    return out


def points(raw: Mapping) -> list[Point]:
    """The measured slowdowns (medians) of every configuration."""
    try:
        groups: dict[tuple, list[float]] = {}
        for q in raw["quota"]:
            groups.setdefault(("quota", q["probe"], q["quota"], None, None, False), []).append(
                q["elapsed_s"] / q["ref_elapsed_s"])
        for p in raw["pairs"]:
            key = ("pair", p["target"], p["target_quota"], p["other"], p["other_quota"],
                   p["placement"] == "same-cpu")
            groups.setdefault(key, []).append(p["elapsed_s"] / p["ref_elapsed_s"])
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise InvalidInput(f"calibration data is not in the expected shape ({exc!r})") from None
    return [Point(kind, target, float(q), other, oq, same, len(ratios), statistics.median(ratios),
                  min(ratios), max(ratios))
            for (kind, target, q, other, oq, same), ratios in groups.items()]


def fitted_on(p: Point, d: Mapping[str, JobDemand]) -> bool:
    """Whether a point is used to fit. Not a pair of disk-bound probes on the same CPU: two
    single processes time-slicing one CPU do not issue I/O at once as the simulator's
    multi-core jobs do (on the development machine that pair even ran faster than one probe
    alone); disk contention is fitted from probes on different CPUs. Reported all the same."""
    return not (p.kind == "pair" and p.same_cpu and d[p.target].io > 0 and d[p.other].io > 0)


def predict(model: InterferenceModel, d: Mapping[str, JobDemand], p: Point) -> float:
    """The model's slowdown for one point."""
    rate = model.quota_term(d[p.target], p.quota)
    if p.kind == "pair":
        o = d[p.other]
        oq = 1.0 if p.other_quota is None else p.other_quota
        rate /= model.contention(d[p.target], p.quota, [(o, oq, p.same_cpu)])
    return 1.0 / rate


def fit(raw: Mapping, base: InterferenceModel | None = None) -> InterferenceModel:
    """The model whose slowdowns best match the measured ones (least squares on logs)."""
    from scipy.optimize import least_squares  # scipy comes with scikit-learn

    base = base or InterferenceModel()
    d = demands(raw)
    pts = [p for p in points(raw) if p.target in d and (p.other is None or p.other in d)
           and fitted_on(p, d)]
    if not pts:
        raise InvalidInput("calibration data holds no usable point")
    # Only fit what the data can tell: a parameter no point depends on keeps its value.
    used = {"throttle", "overlap"} if any(p.kind == "quota" for p in pts) else set()
    if any(p.kind == "pair" and p.same_cpu for p in pts):
        used |= {"timeslice", "throttle", "overlap"}
    if any(p.kind == "pair" and d[p.other].membw > 0 and d[p.target].cpu > d[p.target].membw
           for p in pts):
        used.add("cache")
    if any(p.kind == "pair" and d[p.target].membw > 0 and d[p.other].membw > 0 for p in pts):
        used.add("bandwidth")
    if any(p.kind == "pair" and not p.same_cpu and d[p.target].io > 0 and d[p.other].io > 0
           for p in pts):
        used.add("io")
    names = [n for n in FITTED if n in used]

    def model_of(x) -> InterferenceModel:
        return replace(base, **dict(zip(names, (float(v) for v in x))))

    def residuals(x):
        m = model_of(x)
        return [math.log(predict(m, d, p)) - math.log(p.slowdown) for p in pts]

    x0 = [min(max(getattr(base, n), BOUNDS[n][0]), BOUNDS[n][1]) for n in names]
    if not names:
        return base
    res = least_squares(residuals, x0, bounds=([BOUNDS[n][0] for n in names],
                                               [BOUNDS[n][1] for n in names]))
    m = model_of(res.x)
    return replace(m, **{n: round(getattr(m, n), 4) for n in names})


def check(raw: Mapping, model: InterferenceModel) -> list[dict]:
    """Every point: measured and modelled slowdown and the relative error."""
    d = demands(raw)
    out = []
    for p in points(raw):
        if p.target not in d or (p.other is not None and p.other not in d):
            continue
        m = predict(model, d, p)
        out.append({"point": p.label(), "kind": p.kind, "runs": p.runs,
                    "measured": round(p.slowdown, 3), "low": round(p.low, 3),
                    "high": round(p.high, 3), "model": round(m, 3),
                    "error": round(m / p.slowdown - 1.0, 3), "fitted": fitted_on(p, d)})
    return out


__all__ = ["FITTED", "Point", "check", "demands", "fit", "fitted_on", "points", "predict"]
