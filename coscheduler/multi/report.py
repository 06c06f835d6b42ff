"""``cosched simulate multi``: every method on MRSch's sets, as MRSch's Figs. 5-8 report them.

Methods (all with EASY backfilling and the same reservation rule, window W = 10 in FCFS
order for the window methods, as MRSch compared them):

- ``fcfs``: FCFS with EASY, every resource checked (the paper's "Heuristic");
- ``sjf``, ``f1``, ``wfp3``, ``unicep``, ``saf``: the classic queue orders with EASY, every
  resource checked (not in MRSch's comparison: here because a learned scheduler should
  beat what a site can set in its batch system's priorities, not only FCFS);
- ``bbsched``: the window optimiser maximising node and burst-buffer utilisation only
  (BBSched-like; power, when present, is still a constraint);
- ``optimiser``: the MultiSched/ROME optimiser over every resource;
- ``scalar-rl``: the DFP agent trained and run with a fixed goal (equal weights, so
  0.5 x node + 0.5 x burst-buffer utilisation with two resources);
- ``mrsch``: the DFP agent with Eq. (1)'s goal at every pick.

Evaluation jobs (docs/multi-resource.md, "Evaluation protocol"): the held-out last 20 % of
the trace (``train.split``), with the set's requests drawn from the whole trace for the
given seed; by default ten 1,024-job windows of it drawn with seed 1 as the learned
schedulers' held-out windows (``evaluation_windows``), each replayed from an empty machine,
figures averaged over the windows; or the whole held-out stretch once (``evaluation_part``).
Models come from ``--models`` (default: the shipped ``coscheduler/multi/models``), named ``mrsch-<trace>-<set>.model``
and ``scalar-<trace>-<set>.model``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import outputs
from ..learned.modelfile import ModelError
from ..learned.windows import eval_starts
from ..model import InvalidInput
from ..policies.queue import get_policy
from ..resources import resource_dir
from ..sim.engine import simulate
from ..sim.resources import pool_model
from .metrics import multi_metrics
from .mrsch import MRSchAgent, check_model_for, load_model
from .selectors import WindowOptimiser
from .train import HEURISTICS, split
from .workload import MultiWorkload

# The classic queue orders beside FCFS, by method name (each runs with EASY).
CLASSIC = {order.lower(): order for order in HEURISTICS}
METHODS = ("fcfs", *CLASSIC, "bbsched", "optimiser", "scalar-rl", "mrsch")
PROTOCOLS = ("windows", "stretch")
EVAL_JOBS = 1024
EVAL_WINDOWS = 10
EVAL_SEED = 1
MODELS_DIR = resource_dir(__package__, "models")   # package data (pyproject.toml)
WINDOW = 10


def model_path(models_dir: Path, kind: str, trace: str, set_name: str) -> Path:
    stem = Path(trace).name.split(".")[0]
    return Path(models_dir) / f"{kind}-{stem}-{set_name}.model"


def list_models(models_dir: Path = MODELS_DIR) -> list[dict]:
    """The shipped MRSch and scalar-RL models, as rows like the learned registry's
    (``kind``: the ``--methods`` name that uses it; ``set``: MRSch's workload set)."""
    rows = []
    for path in sorted(Path(models_dir).glob("*.model")):
        row = {"name": path.stem, "kind": None, "trace": None, "metric": None, "backfill": "easy",
               "path": str(path), "size_bytes": path.stat().st_size}
        try:
            h = load_model(path).header
        except ModelError as exc:
            rows.append({**row, "backfill": None, "error": str(exc)})
            continue
        rows.append({**row, "kind": "scalar-rl" if h.get("goal") == "fixed" else "mrsch",
                     "trace": h.get("trace"), "set": h.get("set"), "goal": h.get("goal"),
                     "base": None, "epochs": h.get("episodes"),
                     "training_seconds": h.get("training_seconds"),
                     "gate": gate_verdict(h), "validation_score": h.get("validation_score"),
                     "best_heuristic": best_heuristic(h),
                     "window_order": h.get("window_order", "FCFS")})
    return rows


def gate_verdict(header: dict) -> str:
    """An MRSch or scalar model's release gate, from its header (issue 20: the same gate
    as the queue schedulers'): ``pass`` when its validation score (train.validation_score,
    measured when it was trained, under today's engine rules) is at or below 0 (FCFS with
    EASY) and at or below every classic order's with EASY on the same validation stretch
    (``validation_heuristics``); ``fail`` above either; ``unevaluated`` for models whose
    header lacks either figure (tests/test_multi_mrsch.py re-measures every shipped
    model's)."""
    score = header.get("validation_score")
    heuristics = header.get("validation_heuristics")
    if not isinstance(score, (int, float)) or score != score or not isinstance(heuristics, dict) \
            or not heuristics:
        return "unevaluated"
    return "pass" if score <= min(0.0, *heuristics.values()) else "fail"


def best_heuristic(header: dict) -> tuple[str, float] | None:
    """The classic order with the lowest validation score in a model's header, or None."""
    h = header.get("validation_heuristics")
    if not isinstance(h, dict) or not h:
        return None
    name = min(h, key=h.get)
    return name, h[name]


def check_model(models_dir: Path, method: str, trace: str, set_name: str) -> Path | None:
    """The model file ``method`` needs on ``set_name`` (None for methods without one);
    a missing file is an error that says how to make it."""
    if method not in ("mrsch", "scalar-rl"):
        return None
    kind = "mrsch" if method == "mrsch" else "scalar"
    path = model_path(models_dir, kind, trace, set_name)
    if not path.exists():
        raise InvalidInput(
            f"no {method} model for {Path(trace).name} {set_name}: {path} is missing "
            f"(make it with: cosched train mrsch --trace {trace} --set {set_name}"
            f"{' --goal fixed' if kind == 'scalar' else ''} --out {path})")
    return path


@dataclass
class MethodRun:
    set_name: str
    method: str
    metrics: dict
    wall_seconds: float
    decision_seconds: list[float] = field(default_factory=list)
    decision_cpu_seconds: list[float] = field(default_factory=list)
    goal_trace: list[tuple[float, np.ndarray]] = field(default_factory=list)
    pool_names: tuple[str, ...] = ()
    per_window: list[dict] = field(default_factory=list)  # "windows" protocol: each window

    def as_json(self) -> dict:
        m = self.metrics
        return {"set": self.set_name, "method": self.method, "node_util": m["node_util"],
                "bb_util": m["bb_util"], "power_util": m["power_util"],
                "mean_wait_s": m["mean_wait_s"], "mean_slowdown": m["mean_slowdown"]}

    def decision_summary(self) -> dict | None:
        d = self.decision_seconds
        if not d:
            return None
        return {"decisions": len(d), "median_ms": 1000 * statistics.median(d),
                "p99_ms": 1000 * float(np.percentile(d, 99)), "max_ms": 1000 * max(d)}


def evaluation_part(wl: MultiWorkload, jobs: int | None = None) -> MultiWorkload:
    _, b, n = split(wl)
    count = n - b if jobs is None else min(jobs, n - b)
    if count < 1:
        raise InvalidInput(f"{wl.source}: no held-out jobs to evaluate")
    return wl.select(b, count)


def evaluation_windows(wl: MultiWorkload, jobs: int = EVAL_JOBS, count: int = EVAL_WINDOWS,
                       seed: int = EVAL_SEED) -> list[MultiWorkload]:
    """``count`` windows of ``jobs`` consecutive held-out jobs, their starts drawn as the
    learned schedulers draw held-out windows (``learned.windows.eval_starts``, gym's legacy
    seeding of ``seed``, from the first held-out job on)."""
    _, b, n = split(wl)
    if n - jobs <= b:
        raise InvalidInput(f"{wl.source}: the held-out part has {n - b} jobs, too few for "
                           f"{jobs}-job evaluation windows (use --protocol stretch or a "
                           f"smaller --jobs)")
    return [wl.select(start, jobs) for start in eval_starts(n, jobs, count, seed, first=b)]


def window_starts(wl: MultiWorkload, jobs: int = EVAL_JOBS, count: int = EVAL_WINDOWS,
                  seed: int = EVAL_SEED) -> list[int]:
    _, b, n = split(wl)
    return eval_starts(n, jobs, count, seed, first=b)


def run_windows(windows: list[MultiWorkload], method: str, **kwargs) -> MethodRun:
    """``run_method`` on every window; the figures are the means over the windows (the
    goal trace is the first window's; decision times are pooled)."""
    runs = [run_method(w, method, **kwargs) for w in windows]
    first = runs[0]
    metrics: dict = {}
    for key, value in first.metrics.items():
        values = [r.metrics[key] for r in runs]
        if value is None:
            metrics[key] = None
        elif key == "jobs":
            metrics[key] = int(sum(values))
        else:
            metrics[key] = float(np.mean(values))
    out = MethodRun(first.set_name, method, metrics, sum(r.wall_seconds for r in runs),
                    [d for r in runs for d in r.decision_seconds],
                    [d for r in runs for d in r.decision_cpu_seconds],
                    first.goal_trace, first.pool_names)
    out.per_window = [r.metrics for r in runs]
    return out


def run_method(wl: MultiWorkload, method: str, *, models_dir: Path = MODELS_DIR,
               window: int = WINDOW, seed: int = 0) -> MethodRun:
    """Replay ``wl`` (already the evaluated jobs) under ``method``."""
    nodes = wl.node_counts()
    pools = pool_model(wl.machine, wl.requests, nodes, wl.max_nodes)
    if pools.empty:
        raise InvalidInput(f"{wl.source}: no job asks for burst buffer or power")
    decision_seconds: list[float] = []
    decision_cpu: list[float] = []
    goal_trace: list = []
    if method == "fcfs" or method in CLASSIC:
        policy = get_policy(CLASSIC.get(method, "FCFS"))
    elif method in ("bbsched", "optimiser"):
        objectives = ("nodes", "burst_buffer") if method == "bbsched" else None
        policy = WindowOptimiser(window, objectives, name=method, seed=seed)
    elif method in ("mrsch", "scalar-rl"):
        kind = "mrsch" if method == "mrsch" else "scalar"
        path = check_model(models_dir, method, wl.source, wl.set_name)
        goal = "dynamic" if kind == "mrsch" else "fixed"
        model = load_model(path)
        check_model_for(model, wl.set_name, goal)
        policy = MRSchAgent(model, goal=goal, goal_trace=(method == "mrsch"), name=method)
    else:
        raise InvalidInput(f"unknown method {method!r}; valid methods: {', '.join(METHODS)}")
    t0 = time.perf_counter()
    s = simulate(wl.jobs, wl.cluster, policy, "easy", pools=pools)
    wall = time.perf_counter() - t0
    if isinstance(policy, (WindowOptimiser, MRSchAgent)):
        decision_seconds, decision_cpu = policy.timings, policy.cpu_timings
    if isinstance(policy, MRSchAgent):
        goal_trace = policy.goal_trace or []
    metrics = multi_metrics(wl.jobs, nodes, wl.max_nodes, pools, s.start, s.end).as_dict()
    return MethodRun(wl.set_name, method, metrics, wall, decision_seconds, decision_cpu,
                     goal_trace, pools.names)


# --------------------------------------------------------------------------------------
# Charts (matplotlib, headless)

AXES = (("node_util", "node util", True), ("bb_util", "BB util", True),
        ("power_util", "power util", True), ("mean_wait_s", "1 / wait", False),
        ("mean_slowdown", "1 / slowdown", False))


def kiviat(runs: list[MethodRun], path: Path, title: str) -> Path:
    """MRSch Fig. 7: each axis normalised so the best method is 1 (reciprocals for wait
    and slowdown); a larger area is better."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = [(k, label, up) for k, label, up in AXES
            if all(r.metrics.get(k) is not None for r in runs)]
    values = []
    for r in runs:
        row = []
        for k, _, up in axes:
            v = r.metrics[k]
            row.append(v if up else (1.0 / v if v > 0 else float("inf")))
        values.append(row)
    arr = np.array(values, dtype=float)
    best = arr.max(axis=0)
    norm = np.where(best > 0, arr / np.where(best > 0, best, 1), 0.0)
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False).tolist()
    fig = plt.figure(figsize=(5.2, 5.2))
    ax = fig.add_subplot(111, polar=True)
    for r, row in zip(runs, norm):
        pts = row.tolist() + [row[0]]
        ax.plot(angles + [angles[0]], pts, label=r.method, linewidth=1.6)
        ax.fill(angles + [angles[0]], pts, alpha=0.08)
    ax.set_xticks(angles)
    ax.set_xticklabels([label for _, label, _ in axes])
    ax.set_ylim(0, 1.05)
    ax.set_title(title)
    ax.legend(loc="lower right", bbox_to_anchor=(1.25, -0.1), fontsize=8)
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def goal_trace_plot(run: MethodRun, path: Path, hours: float = 12.0) -> Path:
    """MRSch Fig. 8: the burst buffer's goal weight r_BB over a stretch of ``hours``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if "burst_buffer" not in run.pool_names or not run.goal_trace:
        raise InvalidInput(f"{run.set_name}: no burst-buffer goal trace to plot")
    k = 1 + run.pool_names.index("burst_buffer")
    t = np.array([x[0] for x in run.goal_trace])
    r = np.array([x[1][k] for x in run.goal_trace])
    t0 = t[0] + (t[-1] - t[0]) / 2 - hours * 1800  # a stretch from the middle of the run
    sel = (t >= t0) & (t <= t0 + hours * 3600)
    if sel.sum() < 2:
        sel = np.ones(len(t), dtype=bool)
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.step((t[sel] - t[sel][0]) / 3600, r[sel], where="post")
    ax.set_xlabel("hours")
    ax.set_ylabel("r_BB (Eq. 1)")
    ax.set_title(f"MRSch goal weight of the burst buffer, {run.set_name}")
    fig.tight_layout()
    outputs.save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
