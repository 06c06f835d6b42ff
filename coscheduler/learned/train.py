"""The training loop of both learned schedulers: sample, collect, update, checkpoint.

Per epoch: draw ``trajectories`` training sequences (256 jobs from the first 20 % of the
trace), play them with the current policy in the rollout executor, run one PPO update,
append a row to the training curve, and write the checkpoint (``MODEL.ckpt``: parameters,
both Adam states, the curve and the settings) so that a cut-off run resumes where it
stopped (same seed, same settings: the same epochs follow). At the end the model is
evaluated on the trace's ten seed-1 windows, written (``MODEL``), and its curve drawn
(``MODEL.png``, if matplotlib is present).

Budgets: ``epochs``, wall time (``time_limit_s``) and environment steps (``max_steps``,
every decision taken in a rollout, the warm start's included), whichever ends first; each
counts over the whole run, resumptions included, and the model's header records the budget
and the steps and seconds used (``budget``, ``training_steps``, ``training_seconds``).

Trajectory filtering (RLScheduler): for the first ``filter_epochs`` epochs only sequences
whose SJF mean bounded slowdown lies in ``filter_range`` are drawn (the reference's
10..150), then all.

Relative reward (``relative_reward``, RLScheduler, bsld): a sequence's reward is its
bsld divided by SJF's on the same sequence (the figure filtering uses), so that on a
heavy-tailed trace (HPC2N) the few sequences whose figures are 10x the others' do not
drown every other sequence's signal. The optimum per sequence is the same.
"""

from __future__ import annotations

import io
import zipfile
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .. import boundedfile, outputs
from ..model import InvalidInput
from ..policies.queue import get_policy
from ..policies.selection import MAX_REJECTION_TIMES, RETRY_AFTER_S
from ..sim.cluster import Cluster
from ..sim.engine import simulate
from ..sim.metrics import compute_metrics
from ..sim.replay import window as trace_window
from ..sim.swf import read_swf
from .features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation
from .modelfile import Model, save_model
from .nets import inspector_init, inspector_start, mlp, rl_init
from .rollout import RolloutTask, make_executor, split
from .teachers import inspector_teacher
from .windows import SEQUENCE_JOBS, train_limit

CKPT_MAGIC = "coscheduler-checkpoint-1"
POOL_SIZE = 600


@dataclass
class TrainConfig:
    kind: str                       # "rlscheduler" or "inspector"
    trace: str
    out: str
    metric: str = "bsld"
    backfill: str = "none"
    base: str = "SJF"               # inspector only
    epochs: int = 50
    trajectories: int = 40
    seed: int = 0
    workers: int = 1
    executor: str = "processes"
    ray_address: str | None = None
    sequence: int = SEQUENCE_JOBS
    window: int = 128
    mask: str = "runnable"
    filter_epochs: int | None = None
    filter_low: float = 10.0
    filter_high: float = 150.0
    pi_iters: int = 40
    v_iters: int = 40
    pi_lr: float = 3e-4
    vf_lr: float = 1e-3
    imitate: str | None = None       # warm start: imitate this heuristic (RL) or hand-written
    #                                  inspector (teachers.INSPECTOR_TEACHERS)
    imitate_epochs: int | None = None  # default: min(4, max(1, epochs // 10)) rounds
    imitate_steps: int = 150
    init: str | None = None          # start the policy from this model file's weights
    start_reject: float | None = None  # inspector: start rejecting with this probability
    validate_every: int = 5
    validation_windows: int = 6
    time_limit_s: float | None = None
    # a budget in environment steps (decisions), over the whole run and its resumptions:
    # training stops after the epoch that reaches it (resumable with a larger budget)
    max_steps: int | None = None
    stop_after: int | None = None    # epochs of this session, then stop (resumable)
    evaluate: bool = True
    env: str = "batched"             # RL rollouts: "batched" (batchenv.py) or "reference"
    relative_reward: bool = False    # RL: reward / SJF's figure on the same sequence
    # inspector: rejections per job before it is accepted unasked, and the retry delay
    # (SchedInspector's 10 and 600 s); stored in the model's normalisation
    max_rejections: int = MAX_REJECTION_TIMES
    retry_after_s: float = RETRY_AFTER_S

    def __post_init__(self) -> None:
        if self.max_steps is not None and (isinstance(self.max_steps, bool)
                                           or not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise InvalidInput(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if self.imitate_epochs is None:
            self.imitate_epochs = min(4, max(1, self.epochs // 10))

    def settings(self) -> dict:
        """What must agree for a checkpoint to be resumed."""
        d = asdict(self)
        for k in ("out", "workers", "executor", "ray_address", "epochs", "time_limit_s",
                  "max_steps", "stop_after", "evaluate"):
            d.pop(k)
        return d


# What a setting added after a checkpoint was written meant before it existed.
_DEFAULT_SETTINGS = {"max_rejections": MAX_REJECTION_TIMES, "retry_after_s": RETRY_AFTER_S,
                     "relative_reward": False}


@dataclass
class TrainResult:
    model: Model
    path: Path
    curve: list[dict]
    resumed_from: int
    seconds: float
    plot: Path | None = None
    figures: dict = field(default_factory=dict)
    gate: dict = field(default_factory=dict)   # the validation report (gate.evaluate)


def checkpoint_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


def _best_arrays(best) -> dict:
    return {f"best:{k}": v for k, v in best[2].items()}


def _save_checkpoint(path: Path, cfg: TrainConfig, epoch: int, curve: list, elapsed: float,
                     arrays: dict, norm: Normalisation, best) -> None:
    meta = {"magic": CKPT_MAGIC, "settings": cfg.settings(), "epoch": epoch, "curve": curve,
            "elapsed_s": elapsed, "normalisation": norm.as_dict(),
            "best_validation": best[0], "best_epoch": best[1]}
    arrays = {**arrays, **_best_arrays(best)}
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    outputs.write_bytes(path, buf.getvalue())


def _load_checkpoint(path: Path) -> tuple[dict, dict]:
    try:   # (a FIFO is refused, not waited on; an empty or cut file is EOFError, BadZipFile)
        with boundedfile.open_regular(path) as f, np.load(f, allow_pickle=False) as npz:
            meta = json.loads(bytes(npz["__meta__"]).decode())
            arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise InvalidInput(f"{path}: not a readable training checkpoint ({exc}); remove it "
                           "or pass --fresh") from None
    if meta.get("magic") != CKPT_MAGIC:
        raise InvalidInput(f"{path}: not a coscheduler training checkpoint")
    return meta, arrays


def _pool(trace, cluster, cfg: TrainConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Candidate sequence starts in the training part and their SJF mean bsld."""
    limit = train_limit(len(trace.jobs), sequence=cfg.sequence)
    last = limit - cfg.sequence
    starts = np.arange(0, last + 1)
    if len(starts) > POOL_SIZE:
        starts = np.sort(rng.choice(starts, POOL_SIZE, replace=False))
    sjf = get_policy("SJF")
    scores = np.empty(len(starts))
    for i, s in enumerate(starts):
        jobs = trace_window(trace.jobs, int(s), cfg.sequence)
        sched = simulate(jobs, cluster, sjf, cfg.backfill)
        scores[i] = compute_metrics(jobs, sched.start, sched.end, trace.max_procs).avg_bsld
    return starts, scores


def filtered_starts(starts: np.ndarray, scores: np.ndarray, low: float,
                    high: float) -> np.ndarray:
    """Trajectory filtering's pool: the starts whose SJF figure lies strictly between
    ``low`` and ``high``; all of them when none does (a trace without such sequences
    still trains)."""
    keep = (scores > low) & (scores < high)
    return starts[keep] if keep.any() else starts


def epoch_starts(rng: np.random.Generator, filtered: np.ndarray | None, span: int,
                 count: int) -> list[int]:
    """An epoch's ``count`` sequence starts: drawn from the filtered pool during the
    filtering epochs, else uniformly from ``[0, span)`` (the training part)."""
    if filtered is not None:
        return rng.choice(filtered, count).tolist()
    return rng.integers(0, span, count).tolist()


def _sjf_figure(cache: dict, trace, cluster, cfg: TrainConfig, start: int) -> float:
    """SJF's mean bsld (the run's backfilling) on the sequence at ``start`` (>= 1)."""
    if start not in cache:
        jobs = trace_window(trace.jobs, int(start), cfg.sequence)
        sched = simulate(jobs, cluster, get_policy("SJF"), cfg.backfill)
        cache[start] = compute_metrics(jobs, sched.start, sched.end, trace.max_procs).avg_bsld
    return max(1.0, float(cache[start]))


def steps_before(curve: list[dict]) -> int:
    """Environment steps taken so far by the run whose rows are ``curve``: its PPO epochs'
    rollouts and its warm start's (imitation) rollouts."""
    return sum(int(r["steps"]) for r in curve if "steps" in r)


def train(cfg: TrainConfig, *, resume: bool = True,
          progress: Callable[[int, int, dict], None] | None = None) -> TrainResult:
    """Train (or resume) and write the model; see the module docstring."""
    from .ppo import PPO, PPOConfig  # needs the rl extra

    if cfg.kind not in ("rlscheduler", "inspector"):
        raise InvalidInput(f"unknown model kind {cfg.kind!r}")
    if cfg.epochs < 1 or cfg.trajectories < 1:
        raise InvalidInput("epochs and trajectories must be >= 1")
    t_start = time.perf_counter()
    trace = read_swf(cfg.trace)
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    n_jobs = len(trace.jobs)
    limit = train_limit(n_jobs, sequence=cfg.sequence)
    longest = max(j.run for j in trace.jobs[:limit])
    if isinstance(cfg.max_rejections, bool) or not isinstance(cfg.max_rejections, int) \
            or cfg.max_rejections < 0:
        raise InvalidInput(f"max_rejections must be an integer >= 0, got {cfg.max_rejections!r}")
    if isinstance(cfg.retry_after_s, bool) or not isinstance(cfg.retry_after_s, (int, float)) \
            or not 0 < cfg.retry_after_s < float("inf"):
        raise InvalidInput(f"retry_after_s must be a positive number of seconds, "
                           f"got {cfg.retry_after_s!r}")
    norm = Normalisation(estimate_s=float(max(longest, 1.0)), window=cfg.window,
                         retry_after_s=float(cfg.retry_after_s),
                         max_rejections=int(cfg.max_rejections))
    if cfg.kind == "inspector":
        get_policy(cfg.base)
    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ckpt = checkpoint_path(out)
    init_rng = np.random.default_rng(cfg.seed)
    features = len(RL_FEATURES if cfg.kind == "rlscheduler" else INSPECTOR_FEATURES)
    params = (rl_init if cfg.kind == "rlscheduler" else inspector_init)(init_rng, features)
    if cfg.kind == "inspector" and cfg.imitate:
        inspector_teacher(cfg.imitate)   # a clear error for an unknown name, before any work
        if cfg.init or cfg.start_reject is not None:
            raise InvalidInput("an inspector's warm start (--imitate) is for one trained from "
                               "scratch: not with --init or --start-reject")
    if cfg.start_reject is not None:
        if cfg.kind != "inspector" or cfg.init:
            raise InvalidInput("a starting rejection probability is for an inspector trained "
                               "from scratch (not with --init)")
        try:
            params = inspector_start(params, cfg.start_reject)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
    init_model = None
    if cfg.init:
        from .modelfile import load_model

        init_model = load_model(cfg.init, cfg.kind)
        for k, v in init_model.params.items():
            if k not in params or params[k].shape != v.shape:
                raise InvalidInput(f"{cfg.init}: weights {k} do not match this policy network")
            params[k] = np.asarray(v, dtype=np.float32)
    agent = PPO(cfg.kind, params, PPOConfig(pi_iters=cfg.pi_iters, v_iters=cfg.v_iters,
                                            pi_lr=cfg.pi_lr, vf_lr=cfg.vf_lr))
    curve: list[dict] = []
    best = None  # (validation figure, epoch, policy weights): the weights that are kept
    first_epoch = 0
    elapsed_before = 0.0
    if resume and ckpt.exists():
        meta, arrays = _load_checkpoint(ckpt)
        # a setting added later (absent from an older checkpoint) counts as its default
        saved = {k: meta["settings"].get(k, _DEFAULT_SETTINGS.get(k)) for k in cfg.settings()}
        if saved != cfg.settings():
            differ = sorted(k for k in cfg.settings() if saved[k] != cfg.settings()[k])
            raise InvalidInput(f"{ckpt}: a checkpoint with other settings ({', '.join(differ)}); "
                               "remove it or pass --fresh")
        agent.load_state_arrays({k: v for k, v in arrays.items() if not k.startswith("best:")})
        best = (meta["best_validation"], meta["best_epoch"],
                {k[5:]: v for k, v in arrays.items() if k.startswith("best:")})
        curve = meta["curve"]
        first_epoch = meta["epoch"]
        elapsed_before = meta["elapsed_s"]
        norm = Normalisation(**meta["normalisation"])
    pool_rng = np.random.default_rng([cfg.seed, 7])
    pool_starts, pool_scores = (None, None)
    filter_epochs = cfg.filter_epochs
    if filter_epochs is None:
        filter_epochs = cfg.epochs // 2 if cfg.kind == "rlscheduler" else 0
    if cfg.kind == "rlscheduler" or filter_epochs > first_epoch:
        pool_starts, pool_scores = _pool(trace, cluster, cfg, pool_rng)
        filtered = filtered_starts(pool_starts, pool_scores, cfg.filter_low, cfg.filter_high)
    if cfg.relative_reward and (cfg.kind != "rlscheduler" or cfg.metric != "bsld"):
        raise InvalidInput("a relative reward is for RLScheduler with the bsld metric")
    # sequence start -> SJF's bsld on it (relative reward): the pool's, others as needed
    sjf_of = dict(zip(pool_starts.tolist(), pool_scores.tolist())) if cfg.relative_reward \
        else {}
    if cfg.kind == "rlscheduler" and cfg.metric != "util" and not cfg.relative_reward:
        # a constant scale: the same optimum, but returns of order 1 for the value network
        agent.reward_scale = 1.0 / max(1.0, float(np.median(pool_scores))) \
            if pool_scores is not None else 1.0 / 100.0
    executor = make_executor(cfg.executor, cfg.workers, cfg.ray_address)
    epoch = first_epoch
    try:
        imitated = bool(cfg.imitate) and first_epoch == 0 and not cfg.init
        if imitated and cfg.kind == "inspector":
            _imitate(cfg, cfg.imitate, agent, executor, limit, norm, curve)
        elif imitated:
            teacher = cfg.imitate
            if teacher == "best":
                teacher_scores = _teacher_scores(trace, cluster, cfg, limit)
                teacher = min(teacher_scores, key=teacher_scores.get)
                curve.append({"epoch": 0, "teachers": teacher_scores, "teacher": teacher,
                              "mean_value": teacher_scores[teacher]})
            _imitate(cfg, teacher, agent, executor, limit, norm, curve)
        if best is None:
            start = agent.policy_params()
            if cfg.kind == "inspector":
                # the fallback kept unless training validates better: the same network
                # made to accept always, i.e. the base policy itself
                accept = dict(start)
                accept["pi/3/b"] = np.array([8.0, -8.0], dtype=np.float32)
                best = (_validate(cfg, executor, n_jobs, norm, accept), first_epoch, accept)
                if cfg.init or imitated:
                    # the starting model (or the imitated teacher) too: kept if it
                    # validates better
                    value = _validate(cfg, executor, n_jobs, norm, start)
                    curve.append({"epoch": 0, "init": Path(cfg.init).name if cfg.init
                                  else f"imitated {cfg.imitate}",
                                  "mean_value": value, "base_validation": best[0]})
                    if value < best[0]:
                        best = (value, first_epoch, start)
            else:
                best = (_validate(cfg, executor, n_jobs, norm, start), first_epoch, start)
                if cfg.init:
                    curve.append({"epoch": 0, "init": Path(cfg.init).name,
                                  "mean_value": best[0]})
        for epoch in range(first_epoch, cfg.epochs):
            t0 = time.perf_counter()
            rng = np.random.default_rng([cfg.seed, epoch])
            starts = epoch_starts(rng, filtered if epoch < filter_epochs else None,
                                  limit - cfg.sequence + 1, cfg.trajectories)
            policy = agent.policy_params()
            tasks = [RolloutTask(cfg.kind, str(Path(cfg.trace).resolve()), [int(s) for s in part],
                                 cfg.sequence, cfg.backfill, policy, norm.as_dict(),
                                 seed=int(rng.integers(2 ** 31)), metric=cfg.metric,
                                 window=cfg.window, mask=cfg.mask, base=cfg.base, env=cfg.env)
                     for part in split(starts, executor.workers)]
            trajs = [t for batch in executor.map(tasks) for t in batch]
            if cfg.relative_reward:
                for t in trajs:
                    t.reward /= _sjf_figure(sjf_of, trace, cluster, cfg, t.start)
            t_roll = time.perf_counter() - t0
            stats = agent.update(agent.make_batch(trajs))
            row = {"epoch": epoch + 1, "mean_value": float(np.mean([t.value for t in trajs])),
                   "mean_reward": float(np.mean([t.reward for t in trajs])),
                   "filtered": epoch < filter_epochs, "steps": sum(len(t.actions) for t in trajs),
                   "rollout_s": t_roll, "update_s": time.perf_counter() - t0 - t_roll, **stats}
            if cfg.kind == "inspector":
                row["mean_base"] = float(np.mean([t.base_value for t in trajs]))
                row["rejections"] = float(np.mean([t.rejections for t in trajs]))
            steps_done = row["steps"] + steps_before(curve)
            over_budget = cfg.max_steps is not None and steps_done >= cfg.max_steps
            last = epoch + 1 == cfg.epochs or over_budget or (
                cfg.time_limit_s is not None
                and elapsed_before + time.perf_counter() - t_start >= cfg.time_limit_s)
            if (epoch + 1) % cfg.validate_every == 0 or last:
                row["validation"] = _validate(cfg, executor, n_jobs, norm, agent.policy_params())
                if row["validation"] < best[0]:
                    best = (row["validation"], epoch + 1, agent.policy_params())
            curve.append(row)
            elapsed = elapsed_before + time.perf_counter() - t_start
            _save_checkpoint(ckpt, cfg, epoch + 1, curve, elapsed, agent.state_arrays(), norm,
                             best)
            if progress is not None:
                progress(epoch + 1, cfg.epochs, row)
            if over_budget or (cfg.time_limit_s is not None and elapsed >= cfg.time_limit_s):
                epoch += 1
                break
            # a stop without an extra validation: resumed, the run goes on exactly as an
            # uninterrupted one (the same epochs, validations and kept weights)
            if cfg.stop_after is not None and epoch + 1 - first_epoch >= cfg.stop_after:
                epoch += 1
                break
        else:
            epoch = cfg.epochs
    finally:
        executor.close()
    seconds = elapsed_before + time.perf_counter() - t_start
    header = {
        "name": out.name.split(".")[0],
        "window": cfg.window, "mask": cfg.mask if cfg.kind == "rlscheduler" else None,
        "normalisation": norm.as_dict(), "trace": Path(cfg.trace).name,
        "metric": cfg.metric if cfg.kind == "rlscheduler" else "bsld",
        "backfill": cfg.backfill, "seed": cfg.seed, "epochs": epoch,
        "machine": {"nodes": cluster.nodes, "procs_per_node": cluster.procs_per_node},
        "trajectories": cfg.trajectories, "sequence_jobs": cfg.sequence,
        **({"relative_reward": True} if cfg.relative_reward else {}),
        "filter_epochs": min(filter_epochs, epoch),
        "filter_range": [cfg.filter_low, cfg.filter_high],
        "training_seconds": round(seconds, 1),
        "training_steps": steps_before(curve),
        "budget": {"epochs": cfg.epochs, "max_steps": cfg.max_steps,
                   "time_limit_s": cfg.time_limit_s},
        "framework": _framework(), "python": platform.python_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "last_epoch": curve[-1] if curve else None,
        "curve": header_curve(curve),
        "kept_epoch": best[1] if best else None,
        "validation": best[0] if best else None,
        "imitate": cfg.imitate if not cfg.init else None,
        "init": ({"model": Path(cfg.init).name, "trace": init_model.header.get("trace"),
                  "epochs": init_model.header.get("epochs")} if init_model else None),
        "start_reject": cfg.start_reject,
        "imitated": next((r["teacher"] for r in curve if "teacher" in r), None),
        "teachers": next((r["teachers"] for r in curve if "teachers" in r), None),
    }
    if cfg.kind == "inspector":
        header["base"] = get_policy(cfg.base).name
    # the weights of the best validated epoch (epoch 0: after the warm start, if any)
    model = Model(cfg.kind, best[2] if best else agent.policy_params(), header)
    figures = {}
    if cfg.evaluate:
        from .evaluate import model_figures

        figures = model_figures(model, trace, cfg.backfill)
        model.header["figures"] = figures
    # the release gate: the model is written only beside its validation report
    from .gate import evaluate as gate_evaluate, write_report

    model.path = str(out)
    report = gate_evaluate(model, trace)
    write_report(report, out)
    path = save_model(model, out)
    model.path = str(path)
    plot = None
    try:
        from .plots import plot_curve

        plot = plot_curve(curve, cfg.kind, out.with_name(out.name.split(".")[0] + ".png"),
                          title=f"{header['name']} ({cfg.kind}, {header['trace']}, "
                                f"backfill {cfg.backfill})")
    except ImportError:
        plot = None
    return TrainResult(model, path, curve, first_epoch, seconds, plot, figures, report)


HEADER_CURVE_ROWS = 120


def header_curve(curve: list[dict], limit: int = HEADER_CURVE_ROWS) -> list[dict]:
    """The training curve for a model's header, kept small (a few KiB) however long the
    run: the warm-start rows (epoch 0), the validated epochs, and the other epochs thinned
    to about ``limit`` rows in all; validations too when there are more than that (the
    last and the best kept). The checkpoint keeps every row."""
    keys = ("epoch", "imitation", "agreement", "teacher_probability", "mean_value",
            "mean_base", "validation", "rejections", "filtered")

    def thin(rows: list[dict], room: int) -> list[dict]:
        if len(rows) <= room:
            return rows
        stride = -(-len(rows) // max(1, room))
        return rows[::-1][::stride][::-1]  # the last row always kept

    head = [r for r in curve if r.get("epoch", 0) == 0]
    checked = [r for r in curve if r.get("epoch", 0) > 0 and "validation" in r]
    plain = [r for r in curve if r.get("epoch", 0) > 0 and "validation" not in r]
    room = max(2, limit - len(head))
    kept = thin(checked, room - 1)
    if checked:
        best = min(checked, key=lambda r: r["validation"])
        if all(r is not best for r in kept):
            kept.append(best)
    kept += thin(plain, room - len(kept))
    order = {id(r): i for i, r in enumerate(curve)}
    rows = head + sorted(kept, key=lambda r: order[id(r)])
    return [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items() if k in keys}
            for r in rows]


def _validation_tasks(cfg: TrainConfig, total_jobs: int, norm: Normalisation, params: dict,
                      workers: int) -> list[RolloutTask]:
    """Greedy replays of fixed 512-job windows of the training part: which epoch's weights
    to keep (the evaluation windows never choose)."""
    from .gate import validation_starts  # the gate's validation windows are these

    starts, jobs = validation_starts(total_jobs, cfg.seed, cfg.sequence, cfg.validation_windows)
    return [RolloutTask(cfg.kind, str(Path(cfg.trace).resolve()), part, jobs, cfg.backfill,
                        params, norm.as_dict(), seed=0, metric=cfg.metric, window=cfg.window,
                        mask=cfg.mask, base=cfg.base, greedy=True, env=cfg.env)
            for part in split(starts, workers)]


def _validate(cfg, executor, total_jobs, norm, params) -> float:
    trajs = [t for b in executor.map(_validation_tasks(cfg, total_jobs, norm, params,
                                                         executor.workers)) for t in b]
    value = float(np.mean([t.value for t in trajs]))
    return -value if cfg.metric == "util" and cfg.kind == "rlscheduler" else value


TEACHERS = ("FCFS", "WFP3", "UNICEP", "SJF", "F1", "SAF")


def _teacher_scores(trace, cluster, cfg: TrainConfig, limit: int, count: int = 24) -> dict:
    """Mean metric of each heuristic *as a scorer under this run's mask rule* on training
    sequences (never the evaluation windows): ``--imitate best`` clones the best."""
    from ..policies.selection import KeyScorer
    from .episode import metric_value

    rng = np.random.default_rng([cfg.seed, 5])
    starts = rng.integers(0, limit - cfg.sequence + 1, count).tolist()
    out = {}
    for name in TEACHERS:
        scorer = KeyScorer(get_policy(name), cfg.window)
        scorer.mask = cfg.mask
        values = []
        for s in starts:
            jobs = trace_window(trace.jobs, int(s), cfg.sequence)
            sched = simulate(jobs, cluster, scorer, cfg.backfill)
            m = compute_metrics(jobs, sched.start, sched.end, trace.max_procs)
            values.append(metric_value(m, cfg.metric))
        value = float(np.mean(values))
        out[name] = -value if cfg.metric == "util" else value
    return out


def _imitate(cfg: TrainConfig, teacher: str, agent, executor, limit: int, norm: Normalisation,
             curve: list) -> None:
    """Warm start: clone ``teacher``'s picks on training sequences (epoch 0 rows)."""
    for k in range(cfg.imitate_epochs):
        rng = np.random.default_rng([cfg.seed, 10_000 + k])
        starts = rng.integers(0, limit - cfg.sequence + 1, cfg.trajectories).tolist()
        tasks = [RolloutTask(cfg.kind, str(Path(cfg.trace).resolve()), [int(s) for s in part],
                             cfg.sequence, cfg.backfill, agent.policy_params(), norm.as_dict(),
                             seed=k, metric=cfg.metric, window=cfg.window, mask=cfg.mask,
                             base=cfg.base, teacher=teacher, env=cfg.env)
                 for part in split(starts, executor.workers)]
        trajs = [t for batch in executor.map(tasks) for t in batch]
        loss = agent.imitate(agent.make_batch(trajs), cfg.imitate_steps)
        row = {"epoch": 0, "imitation": k + 1, "teacher": teacher,
               "mean_value": float(np.mean([t.value for t in trajs])), "bc_loss": loss,
               "steps": sum(len(t.actions) for t in trajs)}
        if cfg.kind == "inspector":
            # how often the network's greedy answer is now the teacher's, on these steps
            obs = np.concatenate([t.obs for t in trajs if len(t.actions)] or
                                 [np.zeros((0, len(INSPECTOR_FEATURES)), np.float32)])
            acts = np.concatenate([t.actions for t in trajs] or [np.zeros(0, np.int32)])
            if len(acts):
                z = mlp({k2: np.asarray(v, np.float64) for k2, v in agent.policy_params().items()},
                        "pi", obs.astype(np.float64))
                row["agreement"] = float(np.mean(np.argmax(z, axis=1) == acts))
                # and the probability it gives that answer (ppo.BC_SMOOTHING keeps it < 1)
                p = np.exp(z - z.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                row["teacher_probability"] = float(np.mean(p[np.arange(len(acts)), acts]))
        curve.append(row)


def _framework() -> str:
    try:
        import jax
        import optax

        return f"jax {jax.__version__}, optax {optax.__version__}"
    except ImportError:  # pragma: no cover
        return "unknown"
