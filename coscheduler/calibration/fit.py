"""Fit the interference model to measured slowdowns, and check it against them (pure).

Input: the raw figures of ``measure.Measurements.to_dict()`` (or the saved ones in
``coscheduler/calibration/measured.json``). Each point becomes a *measured slowdown*: the
median over rounds of (wall time of a probe under a quota or beside another probe) / (wall
time of the reference run of the same probe alone, made just before it).

A probe's demand (``JobDemand``) comes from what was measured of it alone: cpu = its CPU
seconds over wall seconds; the memory probe streams memory whenever it computes (membw =
cpu); the disk probe's time off the CPU is disk I/O (io = 1 - cpu); the other probes' waits
are the testbed's emulated waits (sleeps), which contend for nothing.

The model's parameters are fitted by least squares on log slowdowns (scipy), bounded;
``check`` returns model against measurement for every point, and ``held_out`` checks the
fit on pairs it did not see: each pair point in turn is left out, the model refitted on
the rest and asked to predict it (leave-one-pair-out). ``validate`` refuses a file that
lacks what the fit needs (the pair measurements, a probe's reference runs) or holds a
value that is not a positive finite number, naming the file and the entry.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Mapping

from ..backends.interference import InterferenceModel, JobDemand
from ..model import InvalidInput

FITTED = ("throttle", "overlap", "timeslice", "wakeup", "cache", "bandwidth", "io",
          "idle_yield", "idle_penalty", "spill")
BOUNDS = {"throttle": (-0.3, 1.0), "overlap": (0.0, 1.0), "timeslice": (0.0, 3.0),
          "wakeup": (0.0, 5.0),
          "cache": (0.0, 3.0), "bandwidth": (0.0, 3.0), "io": (0.0, 5.0),
          "idle_yield": (0.0, 1.5), "idle_penalty": (0.0, 10.0), "spill": (0.0, 1.0)}
IDLE_ROLES = ("target", "other")


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
    idle: str | None = None   # which of the two ran in the idle class ("target", "other")
    pool: int = 0             # "shared-cpus": every probe free on these many CPUs (0: pinned)
    copies: int = 1           # co-runners (copies of ``other``)

    def label(self) -> str:
        if self.kind == "quota":
            return f"{self.target} at {self.quota:.0%}"
        if self.pool:
            return f"{self.target} beside {self.copies} x {self.other}, {self.pool} CPUs shared"
        where = "same CPU" if self.same_cpu else "other CPU"
        q = f" at {self.quota:.0%}" if self.quota < 1 else ""
        oq = f" at {self.other_quota:.0%}" if self.other_quota is not None and self.other_quota < 1 else ""
        idle = "" if self.idle is None else f", {'target' if self.idle == 'target' else 'co-runner'} idle"
        return f"{self.target}{q} beside {self.other}{oq}, {where}{idle}"


_QUOTA_FIELDS = ("probe", "quota", "elapsed_s", "ref_elapsed_s")
_PAIR_FIELDS = ("target", "other", "placement", "target_quota", "other_quota", "elapsed_s",
                "ref_elapsed_s")
_NUMBERS = ("quota", "elapsed_s", "ref_elapsed_s", "target_quota", "other_quota", "cpu_s")


def validate(raw: object, source: str = "calibration data") -> None:
    """InvalidInput (naming ``source`` and the entry) unless ``raw`` holds what ``fit``
    needs: reference runs of every probe it uses, quota points, pair points on the same CPU
    (the host/guest arrangement), every number positive and finite."""
    def bad(msg: str) -> InvalidInput:
        return InvalidInput(f"{source}: {msg}")

    if not isinstance(raw, Mapping):
        raise bad("not a calibration file (expected a JSON object with 'alone', 'quota' and "
                  "'pairs')")
    for key, kind in (("alone", Mapping), ("quota", list), ("pairs", list)):
        if key not in raw:
            raise bad(f"'{key}' is missing (the {'pair' if key == 'pairs' else key} "
                      f"measurements)")
        if not isinstance(raw[key], kind):
            raise bad(f"'{key}' must be a JSON {'object' if kind is Mapping else 'list'}")

    def number(where: str, value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise bad(f"{where} must be a positive finite number, got {value!r}")

    for probe, runs in raw["alone"].items():
        if not isinstance(runs, list) or not runs:
            raise bad(f"alone.{probe} holds no reference run")
        for i, r in enumerate(runs):
            for f in ("elapsed_s", "cpu_s"):
                if not isinstance(r, Mapping) or f not in r:
                    raise bad(f"alone.{probe}[{i}] has no '{f}'")
                number(f"alone.{probe}[{i}].{f}", r[f])
    for key, fields, names in (("quota", _QUOTA_FIELDS, ("probe",)),
                               ("pairs", _PAIR_FIELDS, ("target", "other"))):
        for i, r in enumerate(raw[key]):
            if not isinstance(r, Mapping):
                raise bad(f"{key}[{i}] is not an object")
            missing = [f for f in fields if f not in r]
            if missing:
                raise bad(f"{key}[{i}] has no {', '.join(repr(f) for f in missing)}")
            for f in _NUMBERS:
                if f in r:
                    number(f"{key}[{i}].{f}", r[f])
            for n in names:
                if r[n] not in raw["alone"]:
                    raise bad(f"{key}[{i}]: probe {r[n]!r} has no reference run in 'alone'")
            if key == "pairs" and r.get("idle") not in (None,) + IDLE_ROLES:
                raise bad(f"pairs[{i}].idle must be one of {', '.join(IDLE_ROLES)} or absent, "
                          f"got {r.get('idle')!r}")
    if not raw["quota"]:
        raise bad("holds no quota point (a probe alone under a quota): the quota terms "
                  "cannot be fitted")
    if not any(isinstance(p, Mapping) and p.get("placement") == "same-cpu" for p in raw["pairs"]):
        raise bad("holds no pair on the same CPU (a host beside a guest under quotas): the "
                  "co-runner terms cannot be fitted")


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
            shared = p["placement"] == "shared-cpus"
            key = ("pair", p["target"], p["target_quota"], p["other"], p["other_quota"],
                   p["placement"] == "same-cpu", p.get("idle"),
                   _count(p, "cpus") if shared else 0, _count(p, "copies") if shared else 1)
            groups.setdefault(key, []).append(p["elapsed_s"] / p["ref_elapsed_s"])
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        raise InvalidInput(f"calibration data is not in the expected shape ({exc!r})") from None
    return [Point(kind, target, float(q), other, oq, same, len(ratios), statistics.median(ratios),
                  min(ratios), max(ratios), *rest)
            for (kind, target, q, other, oq, same, *rest), ratios in groups.items()]


def _count(p: Mapping, name: str) -> int:
    v = p.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InvalidInput(f"calibration data: a shared-cpus pair's {name!r} must be an "
                           f"integer >= 1, got {v!r}")
    return v


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
        t, o = d[p.target], d[p.other]
        if p.idle is not None:
            t = replace(t, idle=p.idle == "target")
            o = replace(o, idle=p.idle == "other")
        oq = 1.0 if p.other_quota is None else p.other_quota
        if p.pool:   # one process each, free on p.pool CPUs
            t, o = replace(t, threads=1), replace(o, threads=1)
            rate /= model.contention(t, p.quota, [(o, oq, 1.0)] * p.copies, pool_cores=p.pool)
        else:
            rate /= model.contention(t, p.quota, [(o, oq, p.same_cpu)])
    return 1.0 / rate


def fit(raw: Mapping, base: InterferenceModel | None = None,
        leave_out: Point | None = None, only: tuple[str, ...] | None = None) -> InterferenceModel:
    """The model whose slowdowns best match the measured ones (least squares on logs),
    without the point ``leave_out`` (for ``held_out``); ``only``: fit just these
    parameters, the others keep ``base``'s values (a session that measured one effect)."""
    from scipy.optimize import least_squares  # scipy comes with scikit-learn

    base = base or InterferenceModel()
    d = demands(raw)
    pts = [p for p in points(raw) if p.target in d and (p.other is None or p.other in d)
           and fitted_on(p, d) and p != leave_out]
    if not pts:
        raise InvalidInput("calibration data holds no usable point")
    # Only fit what the data can tell: a parameter no point depends on keeps its value.
    used = {"throttle", "overlap"} if any(p.kind == "quota" for p in pts) else set()
    if any(p.kind == "pair" and p.same_cpu for p in pts):
        used |= {"timeslice", "throttle", "overlap"}
    if any(p.kind == "pair" and p.same_cpu and d[p.target].io > 0 for p in pts):
        used.add("wakeup")
    if any(p.kind == "pair" and d[p.other].membw > 0 and d[p.target].cpu > d[p.target].membw
           for p in pts):
        used.add("cache")
    if any(p.kind == "pair" and d[p.target].membw > 0 and d[p.other].membw > 0 for p in pts):
        used.add("bandwidth")
    if any(p.kind == "pair" and not p.same_cpu and d[p.target].io > 0 and d[p.other].io > 0
           for p in pts):
        used.add("io")
    if any(p.kind == "pair" and p.same_cpu and p.idle == "other" for p in pts):
        used.add("idle_yield")
    if any(p.kind == "pair" and p.same_cpu and p.idle == "target" for p in pts):
        used.add("idle_penalty")
    if any(p.kind == "pair" and p.pool and d[p.target].io > 0 for p in pts):
        used.add("spill")
    names = [n for n in FITTED if n in used and (only is None or n in only)]

    def model_of(x) -> InterferenceModel:
        return replace(base, **dict(zip(names, (float(v) for v in x))))

    def residuals(x):
        m = model_of(x)
        return [math.log(predict(m, d, p)) - math.log(p.slowdown) for p in pts]

    x0 = [min(max(getattr(base, n), BOUNDS[n][0]), BOUNDS[n][1]) for n in names]
    if not names:
        return base
    lows, highs = [BOUNDS[n][0] for n in names], [BOUNDS[n][1] for n in names]
    # Also from the middle of the bounds: a slowdown that a binding quota hides is flat
    # in its term near the start (an idle guest's penalty at 1.0), and the solver stays.
    res = min((least_squares(residuals, x, bounds=(lows, highs))
               for x in (x0, [(lo + hi) / 2 for lo, hi in zip(lows, highs)])),
              key=lambda r: r.cost)
    m = model_of(res.x)
    return replace(m, **{n: round(getattr(m, n), 4) for n in names})


def held_out(raw: Mapping, base: InterferenceModel | None = None) -> dict:
    """Leave-one-pair-out: every pair point in turn is left out of the fit (all its
    rounds), the model refitted on the rest predicts it (a point ``fitted_on`` excludes is
    never in the fit: the full fit predicts it). Returns the rows (point, measured,
    predicted, log error, fitted) and the rms of log(predicted / measured) over them.

    A parameter that no remaining point tells keeps its value in ``base``, by default the
    model without interference (not ``CALIBRATED``, which was fitted on the left-out point
    too): a point that is the only one of its kind is predicted as if its term were 0."""
    base = base or InterferenceModel(memory_penalty=InterferenceModel().memory_penalty)
    d = demands(raw)
    rows = []
    for p in points(raw):
        if p.kind != "pair" or p.target not in d or p.other not in d:
            continue
        m = fit(raw, base, leave_out=p)
        pred = predict(m, d, p)
        rows.append({"point": p.label(), "measured": round(p.slowdown, 3),
                     "predicted": round(pred, 3),
                     "log_error": round(math.log(pred / p.slowdown), 4),
                     "fitted": fitted_on(p, d)})
    rms = math.sqrt(sum(r["log_error"] ** 2 for r in rows) / len(rows)) if rows else None
    return {"method": "leave-one-pair-out", "points": len(rows),
            "rms_log_error": None if rms is None else round(rms, 4), "rows": rows}


def rms_log_error(rows: list[dict]) -> float:
    """The rms of log(model / measured) over ``check`` rows."""
    logs = [math.log(r["model"] / r["measured"]) for r in rows]
    return math.sqrt(sum(x * x for x in logs) / len(logs)) if logs else 0.0


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


__all__ = ["FITTED", "Point", "check", "demands", "fit", "fitted_on", "held_out", "points",
           "predict", "rms_log_error", "validate"]
