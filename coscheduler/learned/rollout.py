"""Collecting trajectories: the sampling policy in numpy, in worker processes or on Ray.

A ``RolloutTask`` names a trace file, the sequences to replay (start indices), the policy
weights and the episode settings; ``collect`` plays them and returns ``Trajectory``
objects (observations trimmed to the longest window seen, actions, their log-probability
under the sampling policy, the final reward). Workers load each trace once and keep it.

Executors (``make_executor``): ``serial`` (in this process), ``processes`` (a
multiprocessing pool; spawned, not forked, because the trainer's JAX runtime is
multi-threaded) and ``ray`` (the same function as a Ray task; ``pip install .[ray]``).
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..model import InvalidInput
from ..policies.queue import get_policy
from ..policies.selection import KeyScorer
from ..sim.cluster import Cluster
from ..sim.replay import window as trace_window
from ..sim.swf import read_swf
from .batchenv import BACKFILLS, BatchSchedulingEnv
from .batchinspect import BatchInspectorEnv
from .fastsim import kernel
from .episode import InspectorEpisode, SchedulingEpisode, metric_value
from .features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation
from .nets import kernel_scores, masked_log_softmax, mlp, rl_pooled
from .teachers import inspector_teacher

EXECUTORS = ("serial", "processes", "ray")
ENVS = ("batched", "reference")
BATCH_SLOTS = 64  # sequences stepped together by the batched environment


@dataclass
class RolloutTask:
    kind: str                   # "rlscheduler" or "inspector"
    trace: str
    starts: list[int]
    sequence: int
    backfill: str
    params: dict
    norm: dict
    seed: int
    metric: str = "bsld"
    window: int = 128
    mask: str = "runnable"
    base: str = "SJF"
    greedy: bool = False
    # play this teacher's actions (imitation warm start): RL, a heuristic's picks;
    # inspector, a hand-written inspector (teachers.INSPECTOR_TEACHERS)
    teacher: str | None = None
    env: str = "batched"        # RL: "batched" (batchenv.py) or "reference" (episode.py)


@dataclass
class Trajectory:
    """One played sequence. RLScheduler keeps only the rows the policy could pick (the
    softmax is over them alone): ``obs`` holds them for all steps, ``counts`` how many
    each step had, ``actions`` the chosen one's position among them; ``pooled`` is the
    value network's input per step. The inspector keeps one row per step."""

    start: int
    obs: np.ndarray             # (rows, F) float32 (RL) or (T, F) (inspector)
    counts: np.ndarray          # (T,) allowed rows per step (RL); 2 for the inspector
    pooled: np.ndarray          # (T, P) value input (RL); = obs (inspector)
    actions: np.ndarray         # (T,) int
    logp: np.ndarray            # (T,) float64
    reward: float               # at the last step
    value: float                # the episode's metric (bsld, ...) or inspector bsld
    base_value: float = float("nan")   # inspector: the base policy's bsld
    rejections: int = 0
    extra: dict = field(default_factory=dict)


_TRACES: dict[str, tuple] = {}


def _trace(path: str):
    hit = _TRACES.get(path)
    if hit is None:
        trace = read_swf(path)
        hit = (trace, Cluster.from_swf_header(trace.max_nodes, trace.max_procs))
        _TRACES[path] = hit
    return hit


def _pick(rng: np.random.Generator, logp: np.ndarray, greedy: bool) -> int:
    if greedy:
        return int(np.argmax(logp))
    p = np.exp(logp - logp.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def collect(task: RolloutTask) -> list[Trajectory]:
    """Play every sequence of ``task``; deterministic for a given task seed."""
    trace, cluster = _trace(task.trace)
    rng = np.random.default_rng(task.seed)
    norm = Normalisation(**task.norm)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in task.params.items()}
    if task.env not in ENVS:
        raise InvalidInput(f"unknown environment {task.env!r}; valid: {', '.join(ENVS)}")
    if (task.kind == "rlscheduler" and task.env == "batched" and task.teacher is None
            and task.backfill in BACKFILLS):
        # one BLAS thread: the batch's forward passes are small matmuls that OpenBLAS
        # would spread over threads that only contend on a shared machine
        from threadpoolctl import threadpool_limits  # with scikit-learn

        with threadpool_limits(1):
            return _rl_batched(trace, cluster, task, norm, params, rng)
    if (task.kind == "inspector" and task.env == "batched" and task.backfill in BACKFILLS
            and not get_policy(task.base).uses_now):
        return _inspector_batched(trace, cluster, task, norm, params, rng)
    out = []
    for start in task.starts:
        jobs = trace_window(trace.jobs, start, task.sequence)
        if task.kind == "rlscheduler":
            out.append(_rl_episode(jobs, cluster, trace.max_procs, task, norm, params, rng, start))
        else:
            out.append(_inspector_episode(jobs, cluster, trace.max_procs, task, norm, params,
                                          rng, start))
    return out


def _rl_episode(jobs, cluster, max_procs, task, norm, params, rng, start) -> Trajectory:
    ep = SchedulingEpisode(jobs, cluster, task.backfill, max_procs=max_procs,
                           metric=task.metric, window=task.window, mask=task.mask, norm=norm)
    rows_l, count_l, pooled_l, act_l, logp_l = [], [], [], [], []
    reward = 0.0
    teacher = KeyScorer(get_policy(task.teacher)) if task.teacher else None
    if ep.reset():
        while True:
            obs, mask = ep.observe()
            n = int(min(ep.view.size, task.window))
            allowed = np.flatnonzero(mask[:n])
            rows = obs[allowed]
            lp = masked_log_softmax(kernel_scores(params, rows), np.ones(len(rows), bool))
            if teacher is None:
                k = _pick(rng, lp, task.greedy)
            else:
                k = int(np.argmax(teacher.scores(ep.view)[allowed]))
            rows_l.append(rows.astype(np.float32))
            count_l.append(len(rows))
            pooled_l.append(rl_pooled(obs, n, len(rows), task.window))
            act_l.append(k)
            logp_l.append(lp[k])
            reward = ep.step(int(allowed[k]))
            if ep.done:
                break
    F = len(RL_FEATURES)
    return Trajectory(start, np.concatenate(rows_l) if rows_l else np.zeros((0, F), np.float32),
                      np.array(count_l, dtype=np.int32),
                      np.array(pooled_l, dtype=np.float32).reshape(len(act_l), 2 * F + 2),
                      np.array(act_l, dtype=np.int32), np.array(logp_l), reward,
                      metric_value(ep.metrics, task.metric))


def _slot_filler(env, jobs, starts: list[int], sequence: int, episode: list[int],
                 results: dict) -> Callable[[int], None]:
    """``fill(slot)``: load the next sequence that asks a question into ``slot`` of a batched
    environment (``episode[slot]`` = its index in ``starts``; -1 when none is left); a
    sequence that ends without a question is scored at once into ``results``."""
    following = 0

    def fill(slot: int) -> None:
        nonlocal following
        while following < len(starts):
            e = following
            following += 1
            if env.load(slot, trace_window(jobs, starts[e], sequence)):
                episode[slot] = e
                return
            results[e] = env.reward(slot)   # finished without a question
        episode[slot] = -1

    return fill


@kernel
def _sample(z, noise, rows, allowed, starts, counts, window, acount, k, position, logp,
            pooled):
    """Per asking sequence (window rows ``starts[i]``.. ``+counts[i]``, scores ``z`` of its
    allowed rows in order): the log-softmax over the allowed rows, the pick (the largest
    log-probability plus ``noise``: a Gumbel draw samples the softmax), its rank among
    the allowed rows, its window position and log-probability; the value network's
    pooled input (``nets.rl_pooled``: mean and max of each feature, n / window and
    allowed / window)."""
    features = rows.shape[1]
    a0 = 0
    for i in range(len(starts)):
        r0 = starts[i]
        n = counts[i]
        m = -np.inf
        a = 0
        for r in range(r0, r0 + n):
            if allowed[r]:
                if z[a0 + a] > m:
                    m = z[a0 + a]
                a += 1
        total = 0.0
        for j in range(a0, a0 + a):
            total += np.exp(z[j] - m)
        lse = np.log(total)
        best = -np.inf
        pick = 0
        for j in range(a):
            v = z[a0 + j] - m - lse + noise[a0 + j]
            if v > best:
                best = v
                pick = j
        acount[i] = a
        k[i] = pick
        logp[i] = z[a0 + pick] - m - lse
        seen = 0
        for r in range(r0, r0 + n):
            if allowed[r]:
                if seen == pick:
                    position[i] = r - r0
                    break
                seen += 1
        for f in range(features):
            acc = 0.0
            top = -np.inf
            for r in range(r0, r0 + n):
                acc += rows[r, f]
                if rows[r, f] > top:
                    top = rows[r, f]
            pooled[i, f] = acc / n
            pooled[i, features + f] = top
        pooled[i, 2 * features] = n / window
        pooled[i, 2 * features + 1] = a / window
        a0 += a


def _rl_batched(trace, cluster, task, norm, params, rng) -> list[Trajectory]:
    """``_rl_episode`` for all of ``task.starts`` at once in ``BatchSchedulingEnv``:
    up to ``BATCH_SLOTS`` sequences step together (a finished one's slot takes the next
    start); one forward pass (float32) per step of the batch. Sampling draws Gumbel noise
    per row (the reference draws per step), so trajectories differ from the reference
    path's for the same seed, while the environment gives the same outcome for the same
    picks."""
    starts = list(task.starts)
    slots = min(BATCH_SLOTS, len(starts))
    env = BatchSchedulingEnv(cluster, slots, task.sequence, task.backfill,
                             max_procs=trace.max_procs, metric=task.metric, window=task.window,
                             mask=task.mask, norm=norm)
    episode = [-1] * slots     # which start each slot plays
    results: dict[int, tuple[float, float]] = {}
    fill = _slot_filler(env, trace.jobs, starts, task.sequence, episode, results)

    for slot in range(slots):
        fill(slot)
    F = len(RL_FEATURES)
    # the kernel network in float32 (JAX's precision in training; 3x faster than float64
    # on ~1,000 rows, measured); the softmax over its scores in float64
    params32 = {k: v.astype(np.float32) for k, v in params.items()}
    log_rows, log_row_ep, log_ep, log_count, log_pooled, log_act, log_logp = \
        [], [], [], [], [], [], []
    while env.asking.any():
        o = env.observe()
        ep = np.asarray([episode[s] for s in o.active])
        allowed = o.allowed
        rows = o.rows[allowed].astype(np.float32)  # as stored, and as the trainer computes
        z = kernel_scores(params32, rows).astype(np.float64)
        noise = np.zeros(len(z)) if task.greedy else rng.gumbel(size=len(z))
        acount = np.empty(len(o.active), dtype=np.int64)
        k = np.empty(len(o.active), dtype=np.int64)
        position = np.empty(len(o.active), dtype=np.int64)
        logp = np.empty(len(o.active))
        pooled = np.empty((len(o.active), 2 * F + 2))
        _sample(z, noise, o.rows, allowed, o.starts, o.counts, task.window, acount, k,
                position, logp, pooled)
        aseq = np.repeat(np.arange(len(o.active)), acount)
        log_rows.append(rows)
        log_row_ep.append(ep[aseq])
        log_ep.append(ep)
        log_count.append(acount)
        log_pooled.append(pooled.astype(np.float32))
        log_act.append(k)
        log_logp.append(logp)
        going = env.step_many(o.active, position)
        for slot in o.active[~going].tolist():
            results[episode[slot]] = env.reward(slot)
            fill(slot)
    # regroup the logged steps by episode (a stable sort keeps each one's step order)
    if log_ep:
        ep_of_step = np.concatenate(log_ep)
        by_step = np.argsort(ep_of_step, kind="stable")
        row_ep = np.concatenate(log_row_ep)
        by_row = np.argsort(row_ep, kind="stable")
        rows_all = np.concatenate(log_rows)[by_row]
        counts = np.concatenate(log_count)[by_step]
        pooled_all = np.concatenate(log_pooled)[by_step]
        acts = np.concatenate(log_act)[by_step]
        logps = np.concatenate(log_logp)[by_step]
        step_bounds = np.searchsorted(ep_of_step[by_step], np.arange(len(starts) + 1))
        row_bounds = np.searchsorted(row_ep[by_row], np.arange(len(starts) + 1))
    out = []
    for e, start in enumerate(starts):
        reward, value = results[e]
        if log_ep and step_bounds[e] < step_bounds[e + 1]:
            a, b = step_bounds[e], step_bounds[e + 1]
            r0, r1 = row_bounds[e], row_bounds[e + 1]
            out.append(Trajectory(start, rows_all[r0:r1], counts[a:b].astype(np.int32),
                                  pooled_all[a:b], acts[a:b].astype(np.int32),
                                  logps[a:b].astype(np.float64), reward, value))
        else:
            out.append(Trajectory(start, np.zeros((0, F), np.float32),
                                  np.zeros(0, np.int32), np.zeros((0, 2 * F + 2), np.float32),
                                  np.zeros(0, np.int32), np.zeros(0), reward, value))
    return out


def _inspector_batched(trace, cluster, task, norm, params, rng) -> list[Trajectory]:
    """``_inspector_episode`` for all of ``task.starts`` in ``BatchInspectorEnv`` (up to
    ``BATCH_SLOTS`` at once; Gumbel noise per action when sampling)."""
    starts = list(task.starts)
    slots = min(BATCH_SLOTS, len(starts))
    env = BatchInspectorEnv(cluster, slots, task.sequence, get_policy(task.base),
                            task.backfill, max_procs=trace.max_procs, norm=norm)
    episode = [-1] * slots
    results: dict[int, tuple] = {}
    logged: dict[int, list] = {e: [] for e in range(len(starts))}
    fill = _slot_filler(env, trace.jobs, starts, task.sequence, episode, results)
    teacher = inspector_teacher(task.teacher) if task.teacher else None

    for slot in range(slots):
        fill(slot)
    while env.asking.any():
        active, rows = env.observe()
        z = mlp(params, "pi", rows)
        lp = z - z.max(axis=1, keepdims=True)
        lp = lp - np.log(np.exp(lp).sum(axis=1, keepdims=True))
        if teacher is not None:
            act = teacher(rows)
        else:
            v = lp if task.greedy else lp + rng.gumbel(size=lp.shape)
            act = np.argmax(v, axis=1)
        obs32 = rows.astype(np.float32)
        picked = lp[np.arange(len(act)), act]
        for i, slot in enumerate(active.tolist()):
            logged[episode[slot]].append((obs32[i], int(act[i]), picked[i]))
        going = env.step_many(active, act == 0)
        for slot in active[~going].tolist():
            results[episode[slot]] = env.reward(slot)
            fill(slot)
    out = []
    F = len(INSPECTOR_FEATURES)
    for e, start in enumerate(starts):
        reward, bsld, base, rejections = results[e]
        steps = logged[e]
        T = len(steps)
        obs = (np.array([o for o, _, _ in steps], dtype=np.float32) if T
               else np.zeros((0, F), np.float32))
        out.append(Trajectory(start, obs, np.full(T, 2, dtype=np.int32), obs,
                              np.array([a for _, a, _ in steps], dtype=np.int32),
                              np.array([p for _, _, p in steps], dtype=np.float64), reward,
                              bsld, base, rejections))
    return out


def _inspector_episode(jobs, cluster, max_procs, task, norm, params, rng, start) -> Trajectory:
    ep = InspectorEpisode(jobs, cluster, get_policy(task.base), task.backfill,
                          max_procs=max_procs, norm=norm)
    obs_l, act_l, logp_l = [], [], []
    reward = 0.0
    teacher = inspector_teacher(task.teacher) if task.teacher else None
    if ep.reset():
        while True:
            obs = ep.observe()
            z = mlp(params, "pi", obs)
            lp = z - z.max()
            lp = lp - np.log(np.exp(lp).sum())
            a = _pick(rng, lp, task.greedy) if teacher is None \
                else int(teacher(obs[None, :])[0])
            obs_l.append(obs.astype(np.float32))
            act_l.append(a)
            logp_l.append(lp[a])
            reward = ep.step(a)
            if ep.done:
                break
    else:
        reward = ep.reward()
    T = len(act_l)
    obs_a = np.array(obs_l, dtype=np.float32).reshape(T, len(INSPECTOR_FEATURES))
    return Trajectory(start, obs_a, np.full(T, 2, dtype=np.int32), obs_a,
                      np.array(act_l, dtype=np.int32), np.array(logp_l), reward,
                      ep.metrics.avg_bsld, ep.base_bsld, ep.rejections)


class SerialExecutor:
    workers = 1

    def map(self, tasks: list[RolloutTask]) -> list[list[Trajectory]]:
        return [collect(t) for t in tasks]

    def close(self) -> None:
        pass


class ProcessExecutor:
    def __init__(self, workers: int):
        self.workers = workers
        self._pool = multiprocessing.get_context("spawn").Pool(workers)

    def map(self, tasks):
        return self._pool.map(collect, tasks, chunksize=1)

    def close(self) -> None:
        self._pool.close()
        self._pool.join()


class RayExecutor:
    """The same ``collect`` as Ray tasks; ``address`` None starts a local Ray."""

    def __init__(self, workers: int, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise InvalidInput("the ray executor needs Ray: pip install '.[ray]'") from None
        self._ray = ray
        self._own = not ray.is_initialized()
        if self._own:
            ray.init(address=address, num_cpus=None if address else workers,
                     include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
        self._remote = ray.remote(collect)
        self.workers = workers

    def map(self, tasks):
        return self._ray.get([self._remote.remote(t) for t in tasks])

    def close(self) -> None:
        if self._own:
            self._ray.shutdown()


def make_executor(name: str, workers: int, address: str | None = None):
    if name not in EXECUTORS:
        raise InvalidInput(f"unknown executor {name!r}; valid: {', '.join(EXECUTORS)}")
    if workers < 1:
        raise InvalidInput(f"workers must be >= 1, got {workers}")
    if name == "ray":
        return RayExecutor(workers, address)
    if name == "serial" or workers == 1:
        return SerialExecutor()
    return ProcessExecutor(min(workers, os.cpu_count() or workers))


def split(items: list, parts: int) -> list[list]:
    parts = max(1, min(parts, len(items)))
    return [items[k::parts] for k in range(parts)]
