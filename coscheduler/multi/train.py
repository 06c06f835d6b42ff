"""Training MRSch (DFP) on the simulator engine, in MRSch's three phases (JAX + optax).

Data: the first ``TRAIN_SHARE`` = 70 % of a multi-resource workload's jobs (MRSch trained
on its first 3.5 of 5 months); 70-80 % validates (figures in the model header); the last
20 % is held out for ``cosched simulate multi``. Job sets of ``jobs_per_set`` jobs, in
MRSch's order (section V-B):

1. *sampled*: jobs drawn at random from the training part, arriving as a Poisson process
   at the training part's mean inter-arrival time (the easiest, "averaged" case);
2. *real*: consecutive stretches of the training part, as they arrived;
3. *synthetic*: jobs whose (processors, run time, estimate) are drawn from the training
   part, arriving as a Poisson process whose rate follows the training part's hour-of-day
   and day-of-week pattern scaled by a random load factor in [0.8, 1.4] (lighter and
   heavier than seen), with burst-buffer and power requests drawn by the set's rules
   (unseen combinations).

Each episode replays one job set with EASY backfilling and the agent choosing, acting
epsilon-greedily. ``env="batched"`` (the default) plays ``sets_in_flight`` sets of a phase
together in ``fastenv.MultiBatchEnv`` (the engine's rules compiled, the network once per
batch of picks; the same schedules as the engine for the same decisions), with one
epsilon and then the sets' gradient steps in order; ``env="reference"`` plays one set at
a time through ``sim.engine.simulate`` with an ``MRSchAgent`` (the old path, its random
stream unchanged). Epsilon starts at 1.0, times ``epsilon_decay`` per pick (held for a
batched group), floor 0.05; the paper gives 0.995 without saying per what:
per pick it would stop exploring within the first set). Every pick's (state, measurement,
goal, action) goes to a replay memory with its target, the measurement changes at the
later picks ``OFFSETS`` (missing near the end of a set: masked out of the loss). After
each episode, ``steps_per_episode`` Adam steps on minibatches minimise the mean squared
error of the taken action's prediction (DFP's loss).

A checkpoint is written after the episode that ends ``checkpoint_every_s`` (default
60 s) after the last one, after the last episode and when a budget stops the run: the
model file ``OUT.ckpt`` (weights, Adam moments, counters, the random generator's state)
and the replay memory beside it (``OUT.ckpt.memory-N.npz``, N the episodes done).
``resume`` continues the same run from its last checkpoint: the same job sets,
explorations and minibatches as a run never stopped. Budgets: ``max_steps``
(environment steps: the agent's picks, summed over job sets) and ``time_limit_s`` stop
the run after the job set that reaches them; the model is validated and written, and a
larger budget resumes it.
"""

from __future__ import annotations

import logging
import math
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .. import boundedfile, outputs
from ..model import InvalidInput
from ..policies.queue import get_policy
from ..sim.engine import simulate
from ..sim.replay import window
from ..sim.resources import Request, pool_model
from ..sim.swf import TraceJob
from . import mrsch
from .metrics import multi_metrics
from .workload import MultiWorkload, get_set, random_requests

log = logging.getLogger(__name__)

TRAIN_SHARE = 0.7
VALID_SHARE = 0.1
# The classic queue orders a model must beat on validation to ship (report.gate_verdict).
HEURISTICS = ("SJF", "F1", "WFP3", "UNICEP", "SAF")
PHASES = ("sampled", "real", "synthetic")
SYNTHETIC_LOAD = (0.8, 1.4)
ENVS = ("batched", "reference")


@dataclass
class TrainConfig:
    goal: str = "dynamic"             # "fixed": the scalar-reward baseline
    episodes: tuple[int, int, int] = (12, 12, 12)  # per phase: sampled, real, synthetic
    jobs_per_set: int = 512
    steps_per_episode: int = 48
    batch: int = 128
    learning_rate: float = 1e-3
    epsilon_decay: float = 0.9995
    epsilon_min: float = 0.05
    memory: int = 60_000
    seed: int = 1
    mask: str = "padding"             # MRSch's reservation reading (see mrsch.MRSchAgent)
    backfill_choice: bool = True      # the agent chooses among EASY's candidates
    # The queue order the agent's window is cut from: FCFS is MRSch's (the W oldest jobs);
    # another order (e.g. SJF: the W shortest estimates) is this project's variant.
    window_order: str = "FCFS"
    # Budgets: stop after the job set that brings the run's picks (environment steps) to
    # max_steps, or its training time to time_limit_s seconds (resumable).
    max_steps: int | None = None
    time_limit_s: float | None = None
    # The checkpoint (weights, Adam's moments, the replay memory: up to 170 MB once full) is
    # written at most this often, and always after the last set and at a budget's stop; a
    # crash loses at most this much training. Written after every set, the memory took 29 %
    # of a 150-set run. 0: after every set.
    checkpoint_every_s: float = 60.0
    # Where episodes are played: "batched" (multi/fastenv.py: ``sets_in_flight`` job sets of
    # a phase at once with the same weights, the network evaluated once per batch of
    # picks) or "reference" (one set at a time through sim.engine.simulate).
    env: str = "batched"
    sets_in_flight: int = 4

    def __post_init__(self) -> None:
        if self.env not in ENVS:
            raise InvalidInput(f"unknown environment {self.env!r}; valid: {', '.join(ENVS)}")
        if isinstance(self.sets_in_flight, bool) or not isinstance(self.sets_in_flight, int) \
                or self.sets_in_flight < 1:
            raise InvalidInput(f"sets_in_flight must be an integer >= 1, got "
                               f"{self.sets_in_flight!r}")
        if self.goal not in ("dynamic", "fixed"):
            raise InvalidInput(f"goal must be dynamic or fixed, got {self.goal!r}")
        if len(self.episodes) != 3 or any(e < 0 for e in self.episodes) or sum(self.episodes) < 1:
            raise InvalidInput(f"episodes per phase must be 3 counts >= 0 (sum >= 1), "
                               f"got {self.episodes!r}")
        if self.jobs_per_set < 16:
            raise InvalidInput(f"jobs per set must be >= 16, got {self.jobs_per_set}")
        order = mrsch.window_order(self.window_order)
        self.window_order = order.name
        if self.env == "batched" and order.uses_now:
            # (the batched environment sorts each set once: a key that ages cannot be kept)
            raise InvalidInput(f"window order {order.name} ranks jobs by their wait, which the "
                               "batched environment does not recompute: train it with env "
                               "'reference' (--env reference)")
        if self.max_steps is not None and (isinstance(self.max_steps, bool)
                                           or not isinstance(self.max_steps, int)
                                           or self.max_steps < 1):
            raise InvalidInput(f"max_steps must be an integer >= 1, got {self.max_steps!r}")
        if self.time_limit_s is not None and not (
                isinstance(self.time_limit_s, (int, float)) and math.isfinite(self.time_limit_s)
                and self.time_limit_s > 0):
            raise InvalidInput(f"time_limit_s must be a number > 0, got {self.time_limit_s!r}")
        if isinstance(self.checkpoint_every_s, bool) or not isinstance(
                self.checkpoint_every_s, (int, float)) or not math.isfinite(
                self.checkpoint_every_s) or self.checkpoint_every_s < 0:
            raise InvalidInput(f"checkpoint_every_s must be a number >= 0, got "
                               f"{self.checkpoint_every_s!r}")

    def budget_spent(self, steps: int, seconds: float) -> str | None:
        """Which budget a run of ``steps`` picks and ``seconds`` of training has used up
        ("max_steps", "time_limit"), or None."""
        if self.max_steps is not None and steps >= self.max_steps:
            return "max_steps"
        if self.time_limit_s is not None and seconds >= self.time_limit_s:
            return "time_limit"
        return None


def split(workload: MultiWorkload) -> tuple[int, int, int]:
    """(end of training, end of validation, jobs): index boundaries of the three parts."""
    n = len(workload.jobs)
    a = round(n * TRAIN_SHARE)
    b = round(n * (TRAIN_SHARE + VALID_SHARE))
    return a, b, n


# --------------------------------------------------------------------------------------
# Job sets

def _renumber(jobs: list[TraceJob]) -> list[TraceJob]:
    return [j._replace(index=i) for i, j in enumerate(jobs)]


def sampled_set(train: MultiWorkload, size: int, rng: np.random.Generator
                ) -> tuple[list[TraceJob], list[Request]]:
    jobs = train.jobs
    gaps = np.diff([j.submit for j in jobs])
    mean_gap = float(np.mean(gaps)) if len(gaps) else 60.0
    pick = rng.choice(len(jobs), size=min(size, len(jobs)), replace=False)
    arrivals = np.cumsum(rng.exponential(mean_gap, size=len(pick)))
    out = [jobs[i]._replace(submit=float(t)) for i, t in zip(pick, arrivals)]
    return _renumber(out), [train.requests[i] for i in pick]


def real_set(train: MultiWorkload, size: int, rng: np.random.Generator
             ) -> tuple[list[TraceJob], list[Request]]:
    size = min(size, len(train.jobs))
    first = int(rng.integers(0, len(train.jobs) - size + 1))
    return _renumber(window(train.jobs, first, size)), train.requests[first:first + size]


def synthetic_set(train: MultiWorkload, size: int, rng: np.random.Generator
                  ) -> tuple[list[TraceJob], list[Request]]:
    jobs = train.jobs
    submit = np.array([j.submit for j in jobs])
    span = max(submit.max() - submit.min(), 1.0)
    hour = ((submit // 3600) % 24).astype(int)
    day = ((submit // 86400) % 7).astype(int)
    counts = np.bincount(day * 24 + hour, minlength=168).astype(float) + 0.5
    load = rng.uniform(*SYNTHETIC_LOAD)
    rate = counts / counts.sum() * (len(jobs) / span) * 168 * load  # jobs/s per week-hour
    peak = rate.max()
    times: list[float] = []
    t = 0.0
    while len(times) < size:  # thinning of a non-homogeneous Poisson process
        t += rng.exponential(1.0 / peak)
        if rng.random() < rate[int((t // 3600) % 168)] / peak:
            times.append(t)
    src = rng.integers(0, len(jobs), size=size)
    out = [jobs[i]._replace(submit=float(tt)) for i, tt in zip(src, times)]
    requests = random_requests(get_set(train.set_name), [j.procs for j in out],
                               train.max_nodes, train.max_procs, rng)
    return _renumber(out), requests


MAKERS = {"sampled": sampled_set, "real": real_set, "synthetic": synthetic_set}


# --------------------------------------------------------------------------------------
# Targets and the JAX update

def targets(meas: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Measurement changes at each offset ([steps, T, R]) and which exist ([steps, T])."""
    n, r = meas.shape
    out = np.zeros((n, len(mrsch.OFFSETS), r))
    valid = np.zeros((n, len(mrsch.OFFSETS)))
    for k, off in enumerate(mrsch.OFFSETS):
        if off < n:
            out[:n - off, k] = meas[off:] - meas[:n - off]
            valid[:n - off, k] = 1.0
    return out, valid


class _Memory:
    def __init__(self, size: int, state_len: int, measures: int):
        t = len(mrsch.OFFSETS)
        self.s = np.zeros((size, state_len), np.float32)
        self.m = np.zeros((size, measures), np.float32)
        self.g = np.zeros((size, measures), np.float32)
        self.a = np.zeros(size, np.int32)
        self.y = np.zeros((size, t, measures), np.float32)
        self.v = np.zeros((size, t), np.float32)
        self.size, self.count, self.pos = size, 0, 0

    def add(self, record: list, y: np.ndarray, v: np.ndarray) -> None:
        for (s, m, g, a), yy, vv in zip(record, y, v):
            k = self.pos
            self.s[k], self.m[k], self.g[k], self.a[k], self.y[k], self.v[k] = s, m, g, a, yy, vv
            self.pos = (k + 1) % self.size
            self.count = min(self.count + 1, self.size)

    def add_rows(self, s: np.ndarray, m: np.ndarray, g: np.ndarray, a: np.ndarray,
                 y: np.ndarray, v: np.ndarray) -> None:
        """``add`` of a whole set's rows at once (the same ring-buffer positions)."""
        n = len(a)
        skip = max(0, n - self.size)  # rows a full turn of the ring overwrites anyway
        idx = (self.pos + skip + np.arange(n - skip)) % self.size
        for name, rows in zip(self._FIELDS, (s, m, g, a, y, v)):
            getattr(self, name)[idx] = rows[skip:]
        self.pos = (self.pos + n) % self.size
        self.count = min(self.count + n, self.size)

    def sample(self, rng: np.random.Generator, batch: int):
        idx = rng.integers(0, self.count, size=min(batch, self.count))
        return self.s[idx], self.m[idx], self.g[idx], self.a[idx], self.y[idx], self.v[idx]

    _FIELDS = ("s", "m", "g", "a", "y", "v")

    def save(self, path: Path) -> None:
        """The filled rows and the write position, atomically (a crash keeps the old file)."""
        with outputs.open_output(path, "wb") as f:
            np.savez(f, pos=np.int64(self.pos),
                     **{k: getattr(self, k)[:self.count] for k in self._FIELDS})

    def load(self, path: Path) -> None:
        """Refill from ``save``'s file; InvalidInput naming it when unreadable or of
        another shape (another workload set's memory)."""
        try:
            with boundedfile.open_regular(path) as f, np.load(f, allow_pickle=False) as z:
                rows = {k: z[k] for k in self._FIELDS}
                pos = int(z["pos"])
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise InvalidInput(f"{path}: the checkpoint's replay memory cannot be read ({e}); "
                               "delete the checkpoint to train afresh") from None
        count = len(rows["a"])
        if count > self.size or not 0 <= pos < self.size or any(
                len(v) != count or v.shape[1:] != getattr(self, k).shape[1:]
                for k, v in rows.items()):
            raise InvalidInput(f"{path}: the replay memory does not fit this run (another "
                               "set or memory size?); delete the checkpoint to train afresh")
        for k, v in rows.items():
            getattr(self, k)[:count] = v
        self.count, self.pos = count, pos


def _make_update(window_: int, measures: int, learning_rate: float):
    import jax
    import jax.numpy as jnp
    import optax

    opt = optax.adam(learning_rate)

    def loss_fn(params, s, m, g, a, y, v):
        pred = mrsch.forward(params, s, m, g, window=window_, measures=measures, xp=jnp)
        taken = jnp.take_along_axis(pred, a[:, None, None, None], axis=1)[:, 0]
        err = ((taken - y) ** 2) * v[..., None]
        return err.sum() / jnp.maximum(v.sum() * measures, 1.0)

    @jax.jit
    def update(params, opt_state, s, m, g, a, y, v):
        loss, grads = jax.value_and_grad(loss_fn)(params, s, m, g, a, y, v)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return opt, update


# --------------------------------------------------------------------------------------

def _chunk(cfg: TrainConfig, episode: int) -> range:
    """The job sets played together from ``episode`` on: one set on the reference path;
    batched, up to the next multiple of ``sets_in_flight`` counted from the start of the
    phase (never across phases, so every run, stopped and resumed or not, groups the same
    sets)."""
    if cfg.env != "batched":
        return range(episode, episode + 1)
    first = 0
    for count in cfg.episodes:
        if episode < first + count:
            end = first + ((episode - first) // cfg.sets_in_flight + 1) * cfg.sets_in_flight
            return range(episode, min(end, first + count))
        first += count
    raise ValueError(f"episode {episode} beyond the run")  # pragma: no cover


def _stack(record: list) -> tuple[np.ndarray, ...]:
    """An agent's record (state, measurement, goal, action per pick) as arrays."""
    if not record:
        return (np.zeros((0, 0), np.float32), np.zeros((0, 0)), np.zeros((0, 0)),
                np.zeros(0, np.int64))
    s, m, g, a = zip(*record)
    return np.array(s), np.array(m), np.array(g), np.array(a)


def _updates(cfg: TrainConfig, memory: "_Memory", rng: np.random.Generator, update,
             params, opt_state) -> tuple:
    """One set's ``steps_per_episode`` Adam steps (when the memory holds a minibatch):
    the new weights and optimiser state, and the mean loss (None: no step)."""
    import jax.numpy as jnp

    losses = []
    for _ in range(cfg.steps_per_episode if memory.count >= cfg.batch else 0):
        batch = [jnp.asarray(x) for x in memory.sample(rng, cfg.batch)]
        params, opt_state, loss = update(params, opt_state, *batch)
        losses.append(float(loss))
    return params, opt_state, (float(np.mean(losses)) if losses else None)


def _checkpoint_path(out: Path) -> Path:
    return out.with_name(out.name + ".ckpt")


def evaluate_agent(agent: mrsch.MRSchAgent, wl: MultiWorkload) -> dict:
    """Greedy replay of ``wl`` (EASY; the window in the agent's order) with the agent: the
    report's metrics."""
    nodes = wl.node_counts()
    pools = pool_model(wl.machine, wl.requests, nodes, wl.max_nodes)
    s = simulate(wl.jobs, wl.cluster, agent, "easy", pools=pools)
    return multi_metrics(wl.jobs, nodes, wl.max_nodes, pools, s.start, s.end).as_dict()


def train(workload: MultiWorkload, out: str | Path, config: TrainConfig | None = None, *,
          resume: bool = False, progress: Callable[[int, int, dict], None] | None = None
          ) -> mrsch.MRSchModel:
    """Train an MRSch model on ``workload``'s training part; write it to ``out``."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        raise InvalidInput("training needs JAX and optax: pip install '.[rl]'") from None
    cfg = config or TrainConfig()
    out = Path(out)
    a, b, n = split(workload)
    if a < cfg.jobs_per_set:
        raise InvalidInput(f"{workload.source}: the training part has {a} jobs, fewer than "
                           f"one job set of {cfg.jobs_per_set}")
    train_wl = workload.select(0, a)
    valid_wl = workload.select(a, b - a)
    nodes = workload.node_counts()
    pools_all = pool_model(workload.machine, workload.requests, nodes, workload.max_nodes)
    state_len = mrsch.state_size(workload.max_nodes, len(pools_all.names))
    measures = 1 + len(pools_all.names)
    rng = np.random.default_rng(cfg.seed)
    header = {
        "name": out.name.removesuffix(".model"), "trace": Path(workload.source).name,
        "set": workload.set_name, "workload_seed": workload.seed, "seed": cfg.seed,
        "goal": cfg.goal, "window": mrsch.WINDOW, "pools": list(pools_all.names),
        "nodes": workload.max_nodes, "state_size": state_len, "offsets": list(mrsch.OFFSETS),
        "temporal": list(mrsch.TEMPORAL), "pool_units": mrsch.POOL_UNITS,
        "phases": dict(zip(PHASES, cfg.episodes)), "jobs_per_set": cfg.jobs_per_set,
        "steps_per_episode": cfg.steps_per_episode, "batch": cfg.batch,
        "learning_rate": cfg.learning_rate, "framework": f"jax {jax.__version__}",
        "mask": cfg.mask, "backfill_choice": cfg.backfill_choice,
        "window_order": cfg.window_order, "env": cfg.env,
        "sets_in_flight": cfg.sets_in_flight if cfg.env == "batched" else 1,
    }
    params = mrsch.init_params(rng, state_len, measures)
    opt, update = _make_update(mrsch.WINDOW, measures, cfg.learning_rate)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    opt_state = opt.init(jparams)
    done, epsilon, elapsed, losses, steps = 0, 1.0, 0.0, [], 0
    memory = _Memory(cfg.memory, state_len, measures)
    ckpt = _checkpoint_path(out)
    if resume and ckpt.exists():
        try:
            saved = mrsch.load_model(ckpt)
        except mrsch.ModelError as exc:
            raise InvalidInput(f"{exc}: the checkpoint cannot be resumed; delete it to train "
                               "afresh") from None
        state = saved.header.get("checkpoint", {})
        jparams = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in saved.params.items()
                   if not k.startswith("opt/")}
        leaves, tree = jax.tree_util.tree_flatten(opt.init(jparams))
        restored = [jnp.asarray(saved.params[f"opt/{i}"], dtype=leaf.dtype).reshape(leaf.shape)
                    if f"opt/{i}" in saved.params else leaf for i, leaf in enumerate(leaves)]
        opt_state = jax.tree_util.tree_unflatten(tree, restored)
        done, epsilon = int(state.get("episodes", 0)), float(state.get("epsilon", 1.0))
        elapsed, losses = float(state.get("seconds", 0.0)), list(state.get("losses", []))
        steps = int(state.get("steps", 0))
        if "rng" in state and "memory" in state:
            rng.bit_generator.state = state["rng"]
            memory.load(ckpt.with_name(state["memory"]))
        else:   # a checkpoint of an older version: what it kept, and a new stream
            log.warning("%s: an older checkpoint without its replay memory; the run goes on "
                        "with an empty memory", ckpt)
            rng = np.random.default_rng([cfg.seed, done])
    total = sum(cfg.episodes)
    schedule = [p for p, e in zip(PHASES, cfg.episodes) for _ in range(e)]
    cluster = workload.cluster
    t_start = time.perf_counter() - elapsed
    saved_at = time.perf_counter()
    stopped_by = None
    env = None
    if cfg.env == "batched":
        from .fastenv import MultiBatchEnv

        env = MultiBatchEnv(cluster, pools_all.names, pools_all.capacity, cfg.sets_in_flight,
                            cfg.jobs_per_set, mask=cfg.mask, goal=cfg.goal,
                            backfill_choice=cfg.backfill_choice, window_order=cfg.window_order)
    episode = done
    while episode < total:
        stopped_by = cfg.budget_spent(steps, time.perf_counter() - t_start)
        if stopped_by:
            break
        phase = schedule[episode]
        chunk = _chunk(cfg, episode)
        np_params = {k: np.asarray(v, dtype=np.float64) for k, v in jparams.items()}
        sets = []
        for _ in chunk:
            jobs, requests = MAKERS[phase](train_wl, cfg.jobs_per_set, rng)
            pools = pool_model(workload.machine, requests,
                               [cluster.nodes_for(j.procs) for j in jobs], workload.max_nodes,
                               force=pools_all.names)
            if env is not None:
                sets.append((jobs, pools.take))
                continue
            model = mrsch.MRSchModel(np_params, header)
            agent = mrsch.MRSchAgent(model, goal=cfg.goal, epsilon=epsilon,
                                     seed=int(rng.integers(1 << 31)), record=True)
            simulate(jobs, cluster, agent, "easy", pools=pools)
            sets.append(agent.record)
        if env is not None:   # the sets of the chunk in flight together, one epsilon
            from .fastenv import collect

            explorer = np.random.default_rng(int(rng.integers(1 << 31)))
            records = [(r.state, r.meas, r.goal, r.action)
                       for r in collect(env, sets, np_params, epsilon, explorer)]
        else:
            records = [_stack(record) for record in sets]
        infos = []
        for episode, (s, m, g, a) in zip(chunk, records):
            picks = len(a)
            steps += picks
            epsilon = max(cfg.epsilon_min, epsilon * cfg.epsilon_decay ** picks)
            if picks > 1:
                y, v = targets(m)
                memory.add_rows(s, m, g, a, y, v)
            if env is None:   # the reference path: each set's updates before the next set
                jparams, opt_state, loss = _updates(cfg, memory, rng, update, jparams,
                                                    opt_state)
                losses.append(loss)
            infos.append({"phase": phase, "picks": picks, "steps": steps,
                          "epsilon": epsilon})
        if env is not None:   # steps_per_episode updates per set of the chunk, in its order
            for _ in chunk:
                jparams, opt_state, loss = _updates(cfg, memory, rng, update, jparams,
                                                    opt_state)
                losses.append(loss)
        now = time.perf_counter()
        for info, loss in zip(infos, losses[-len(infos):]):
            info.update(loss=loss, seconds=now - t_start)
        episode = chunk[-1]
        # (the run stops here when the next set would find a budget spent: save then too)
        if episode + 1 == total or now - saved_at >= cfg.checkpoint_every_s \
                or cfg.budget_spent(steps, now - t_start):
            _save_checkpoint(ckpt, memory, jparams, opt_state, header, {
                "episodes": episode + 1, "epsilon": epsilon, "seconds": now - t_start,
                "losses": losses, "steps": steps, "rng": rng.bit_generator.state})
            saved_at = time.perf_counter()
        if progress is not None:
            for k, info in zip(chunk, infos):
                progress(k + 1, total, info)
        episode += 1
    final = {k: np.asarray(v, dtype=np.float64) for k, v in jparams.items()}
    seconds = time.perf_counter() - t_start
    trained = len(losses)
    model = mrsch.MRSchModel(final, dict(header))
    valid = evaluate_agent(mrsch.MRSchAgent(model, goal=cfg.goal), valid_wl)
    fcfs = fcfs_metrics(valid_wl)
    model.header.update({
        "validation_fcfs": {k: (round(v, 4) if isinstance(v, float) else v)
                            for k, v in fcfs.items()},
        "validation_score": round(validation_score(valid, fcfs), 4),
        "validation_heuristics": heuristic_scores(valid_wl, fcfs),
        "episodes": trained, "episodes_planned": total, "training_steps": steps,
        "budget": {"max_steps": cfg.max_steps, "time_limit_s": cfg.time_limit_s},
        "stopped_by": stopped_by, "training_seconds": round(seconds, 1),
        "final_loss": next((x for x in reversed(losses) if x is not None), None),
        "losses": [None if x is None else round(x, 6) for x in losses],
        "validation": {k: (round(v, 4) if isinstance(v, float) else v)
                       for k, v in valid.items()},
    })
    mrsch.save_model(model, out)
    return model


def _save_checkpoint(ckpt: Path, memory: _Memory, jparams, opt_state, header: dict,
                     state: dict) -> None:
    """Everything a resumed run needs after ``state["episodes"]`` job sets: the replay
    memory first, under a name of its own (a crash between the two writes leaves the
    previous checkpoint whole), then ``ckpt``, then older memories go."""
    mem = ckpt.with_name(f"{ckpt.name}.memory-{state['episodes']}.npz")
    memory.save(mem)
    _save(ckpt, jparams, opt_state, header, {**state, "memory": mem.name})
    for old in ckpt.parent.glob(f"{ckpt.name}.memory-*.npz"):
        if old != mem:
            old.unlink(missing_ok=True)


def _save(path: Path, jparams, opt_state, header: dict, state: dict) -> None:
    import jax

    params = {k: np.asarray(v) for k, v in jparams.items()}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(opt_state)):
        params[f"opt/{i}"] = np.asarray(leaf, dtype=np.float32)
    h = dict(header)
    h["checkpoint"] = state
    mrsch.save_model(mrsch.MRSchModel(params, h), path)


def order_metrics(wl: MultiWorkload, order: str) -> dict:
    """A classic queue order (``policies.queue``) with EASY on ``wl``: the report's metrics."""
    nodes = wl.node_counts()
    pools = pool_model(wl.machine, wl.requests, nodes, wl.max_nodes)
    s = simulate(wl.jobs, wl.cluster, get_policy(order), "easy", pools=pools)
    return multi_metrics(wl.jobs, nodes, wl.max_nodes, pools, s.start, s.end).as_dict()


def fcfs_metrics(wl: MultiWorkload) -> dict:
    """FCFS with EASY on ``wl``: the reference every method is compared with."""
    return order_metrics(wl, "FCFS")


def heuristic_scores(wl: MultiWorkload, fcfs: dict | None = None) -> dict[str, float]:
    """Each classic order's ``validation_score`` on ``wl`` (rounded as the header keeps
    them): what a model has to beat to ship, since a site can set any of these orders in
    its batch system's priorities without training anything."""
    fcfs = fcfs if fcfs is not None else fcfs_metrics(wl)
    return {o: round(validation_score(order_metrics(wl, o), fcfs), 4) for o in HEURISTICS}


def validation_score(metrics: dict, fcfs: dict) -> float:
    """The figure that chooses between models (docs/multi-resource.md, protocol point 3):
    the mean of the relative changes of mean wait and mean slowdown against FCFS with EASY
    on the validation stretch; lower is better."""
    wait = (metrics["mean_wait_s"] - fcfs["mean_wait_s"]) / max(fcfs["mean_wait_s"], 1e-9)
    sld = (metrics["mean_slowdown"] - fcfs["mean_slowdown"]) / max(fcfs["mean_slowdown"], 1e-9)
    return float((wait + sld) / 2)


def score_model(workload: MultiWorkload, model: mrsch.MRSchModel) -> dict:
    """A model's validation figures under today's engine rules (to compare a shipped model
    with a new one): its metrics, FCFS's and the score."""
    a, b, _ = split(workload)
    valid_wl = workload.select(a, b - a)
    m = evaluate_agent(mrsch.MRSchAgent(model), valid_wl)
    f = fcfs_metrics(valid_wl)
    return {"metrics": m, "fcfs": f, "score": validation_score(m, f),
            "heuristics": heuristic_scores(valid_wl, f)}
