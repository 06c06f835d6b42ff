"""``cosched bench learned``: how fast learned selectors decide (numpy inference).

- one RLScheduler decision over a full 128-job window (features + kernel network + masked
  argmax), median and p99 over ``--repeat`` decisions taken from a real replay state;
- one SchedInspector decision (features + MLP), the same way;
- a whole trace (HPC2N, 202,871 jobs) replayed with a learned scorer, EASY and none
  (wall time, which the target is about, and this process's CPU time, which a shared
  machine's load does not inflate).

- the training environment, reference (``learned/episode.py`` over the engine) and batched
  (``learned/batchenv.py``), side by side in one run: environment steps per CPU second
  on the same 64 lublin_256 training sequences of 256 jobs, every step answered "the first
  allowed window job" in both (so both take the same decisions, and the bench checks that
  they end with the same mean bsld), medians over ``--env-repeat`` alternating rounds;
  SchedInspector's environments the same way (base SJF, every pick accepted only if it can
  start now); then whole RLScheduler rollouts (the policy network sampling, as training
  collects them); MRSch's environments (``sim.engine.simulate`` with pools, EASY with the
  agent's backfill choice and MRSch's observation at every pick, against
  ``multi/fastenv.py``) on 64 stretches of 256 jobs of lublin_256's S4, every pick
  answered by one hashed rule in both (``_mrsch_rule``; the bench checks equal mean
  waits). The batched environments' compiled code (numba, ``learned/fastsim.py``)
  is compiled or loaded from numba's cache once per process, before the timed rounds:
  ``warmup_seconds`` reports that one-off cost, ``compiled`` whether numba is there.

The model is the shipped one for the trace if there is one, else random weights of the
same shape (the cost does not depend on the weights).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import click
import numpy as np

from ..learned.features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation
from ..learned.modelfile import Model, load_model
from ..learned.nets import inspector_init, rl_init
from ..learned.registry import MODELS_DIR
from ..learned.selectors import LearnedInspector, LearnedScorer
from ..sim.cluster import Cluster
from ..sim.engine import replay_steps, simulate
from ..sim.metrics import compute_metrics
from ..sim.replay import window
from ..sim.swf import read_swf
from .simulator import DEFAULT_DATA_DIR, DEFAULT_DATA_HELP, HPC2N, LUBLIN

DECISION_TARGET_S = 1e-3
WHOLE_TARGET_S = 60.0


def _random_model(kind: str) -> Model:
    rng = np.random.default_rng(0)
    if kind == "rlscheduler":
        params = rl_init(rng, len(RL_FEATURES))
        header = {"normalisation": Normalisation(estimate_s=3600.0 * 36).as_dict(),
                  "window": 128, "mask": "runnable"}
    else:
        params = inspector_init(rng, len(INSPECTOR_FEATURES))
        header = {"normalisation": Normalisation(estimate_s=3600.0 * 36).as_dict(),
                  "base": "SJF"}
    return Model(kind, {k: v.astype(np.float64) for k, v in params.items()
                        if k.startswith("pi/")}, header, path=f"random-{kind}")


def _model(name: str, kind: str) -> Model:
    path = MODELS_DIR / f"{name}.model"
    return load_model(path, kind) if path.is_file() else _random_model(kind)


def _views(trace, selector, count: int, min_size: int) -> list:
    """Views from a real replay whose window holds at least ``min_size`` jobs."""
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    jobs = window(trace.jobs, 0, min(len(trace.jobs), 20_000))
    steps = replay_steps(jobs, cluster, selector, "none")
    views = []
    try:
        view = next(steps)
        while len(views) < count:
            if view.size >= min_size:
                views.append(view)
            view = steps.send(selector.choose(view))
    except StopIteration:
        pass
    return views


ENV_SEQUENCES = 64
ENV_TARGET_RATIO = 10.0


def _reference_steps(trace, cluster, starts: list[int], backfill: str) -> tuple[int, float]:
    from ..learned.episode import SchedulingEpisode

    steps, bsld = 0, []
    for s in starts:
        ep = SchedulingEpisode(window(trace.jobs, s, 256), cluster, backfill,
                               max_procs=trace.max_procs)
        if ep.reset():
            while True:
                _, mask = ep.observe()
                ep.step(int(np.argmax(mask)))
                steps += 1
                if ep.done:
                    break
        bsld.append(ep.metrics.avg_bsld)
    return steps, statistics.fmean(bsld)


def _batched_steps(trace, cluster, starts: list[int], backfill: str) -> tuple[int, float]:
    from ..learned.batchenv import BatchSchedulingEnv

    env = BatchSchedulingEnv(cluster, len(starts), 256, backfill, max_procs=trace.max_procs)
    for k, s in enumerate(starts):
        env.load(k, window(trace.jobs, s, 256))
    steps = 0
    while env.asking.any():
        o = env.observe()
        rows = np.arange(len(o.allowed))
        first = np.minimum.reduceat(np.where(o.allowed, rows, len(rows)), o.starts) - o.starts
        env.step_many(o.active, first)
        steps += len(first)
    return steps, statistics.fmean(env.metrics(k).avg_bsld for k in range(len(starts)))


def _inspector_reference(trace, cluster, starts: list[int], backfill: str) -> tuple[int, float]:
    """SchedInspector over SJF, answering "accept a pick only if it can start now"."""
    from ..learned.episode import InspectorEpisode
    from ..policies.queue import get_policy

    steps, bsld = 0, []
    for s in starts:
        ep = InspectorEpisode(window(trace.jobs, s, 256), cluster, get_policy("SJF"),
                              backfill, max_procs=trace.max_procs)
        if ep.reset():
            while True:
                ep.step(0 if ep.observe()[5] > 0.5 else 1)
                steps += 1
                if ep.done:
                    break
        bsld.append(ep.metrics.avg_bsld)
    return steps, statistics.fmean(bsld)


def _inspector_batched(trace, cluster, starts: list[int], backfill: str) -> tuple[int, float]:
    from ..learned.batchinspect import BatchInspectorEnv
    from ..policies.queue import get_policy

    env = BatchInspectorEnv(cluster, len(starts), 256, get_policy("SJF"), backfill,
                            max_procs=trace.max_procs)
    for k, s in enumerate(starts):
        env.load(k, window(trace.jobs, s, 256))
    steps = 0
    while env.asking.any():
        active, rows = env.observe()
        env.step_many(active, rows[:, 5] > 0.5)
        steps += len(active)
    return steps, statistics.fmean(env.metrics(k).avg_bsld for k in range(len(starts)))


def _rollout_steps(path: str, starts: list[int], backfill: str, env: str) -> tuple[int, float]:
    from ..learned.rollout import RolloutTask, collect

    params = _random_model("rlscheduler").params
    task = RolloutTask("rlscheduler", path, starts, 256, backfill, params,
                       Normalisation().as_dict(), seed=1, env=env)
    trajs = collect(task)
    return sum(len(t.actions) for t in trajs), statistics.fmean(t.value for t in trajs)


MRSCH_SET = "S4"


def _mrsch_rule(k: int, size: int) -> int:
    """The decision both MRSch environments take at a set's ``k``-th pick: a position
    spread over the window by a multiplicative hash (heads that fit and heads that wait
    for their reservation, and backfill choices, alike)."""
    return ((k + 1) * 2654435761 % 2**32) * size >> 32


def _mrsch_sets(trace_path: Path, set_name: str, count: int, jobs: int) -> tuple:
    """``count`` consecutive stretches of ``jobs`` jobs of the set's training part (as
    ``train.real_set`` draws them), with their pools (every set sees the same pools)."""
    from ..multi import workload as mw
    from ..multi.train import split
    from ..sim.resources import pool_model

    wl = mw.generate(read_swf(trace_path), set_name, 1)
    a, _, _ = split(wl)
    names = pool_model(wl.machine, wl.requests, wl.node_counts(), wl.max_nodes).names
    sets = []
    for s in np.linspace(0, a - jobs, count).astype(int):
        part = wl.select(int(s), jobs)
        pools = pool_model(wl.machine, part.requests, part.node_counts(), wl.max_nodes,
                           force=names)
        sets.append((part.jobs, pools, part.node_counts()))
    return wl, sets


def _mrsch_reference(wl, sets) -> tuple[int, float]:
    """The engine with a selector computing MRSch's observation (state features,
    measurement, Eq. (1)) at every pick and answering ``_mrsch_rule``."""
    from ..multi import mrsch
    from ..multi.metrics import multi_metrics
    from ..policies.selection import Scorer

    class Rule(Scorer):
        backfill_choice = True

        def __init__(self):
            super().__init__("rule", mrsch.WINDOW, "padding")
            self.k = 0

        def choose(self, view):
            mrsch.state_features(view), mrsch.measurement(view), mrsch.goal_vector(view)
            pos = _mrsch_rule(self.k, view.size)
            self.k += 1
            return pos

    steps, waits = 0, []
    for jobs, pools, nodes in sets:
        rule = Rule()
        s = simulate(jobs, wl.cluster, rule, "easy", pools=pools)
        steps += rule.k
        waits.append(multi_metrics(jobs, nodes, wl.max_nodes, pools, s.start, s.end).mean_wait_s)
    return steps, statistics.fmean(waits)


def _mrsch_batched(wl, sets) -> tuple[int, float]:
    """``multi/fastenv.py``, every set in flight, the same rule."""
    from ..multi.fastenv import MultiBatchEnv
    from ..multi.metrics import multi_metrics

    pools = sets[0][1]
    env = MultiBatchEnv(wl.cluster, pools.names, pools.capacity, len(sets),
                        max(len(s[0]) for s in sets))
    for k, (jobs, p, _) in enumerate(sets):
        env.load(k, jobs, p.take)
    steps = 0
    while env.asking.any():
        o = env.observe()
        k = env.sim.steps[o.active]
        picks = ((k + 1) * 2654435761 % 2**32) * o.size >> 32  # _mrsch_rule, vectorised
        env.step_many(o.active, picks)
        steps += len(picks)
    waits = []
    for k, (jobs, p, nodes) in enumerate(sets):
        start, end = env.schedule(k)
        waits.append(multi_metrics(jobs, nodes, wl.max_nodes, p, start, end).mean_wait_s)
    return steps, statistics.fmean(waits)


def env_rates(trace_path: Path, repeat: int) -> dict:
    """Steps per CPU second of both environments (see the module docstring)."""
    trace = read_swf(trace_path)
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    limit = int(len(trace.jobs) * 0.2) - 256
    starts = [int(s) for s in np.linspace(0, limit, ENV_SEQUENCES)]
    from ..learned.fastsim import COMPILED

    out = {"sequences": len(starts), "jobs_per_sequence": 256, "repeats": repeat,
           "load_average_1min": os.getloadavg()[0], "compiled": COMPILED}
    runs = {
        "env": {"reference": lambda b: _reference_steps(trace, cluster, starts, b),
                "batched": lambda b: _batched_steps(trace, cluster, starts, b)},
        "inspector": {"reference": lambda b: _inspector_reference(trace, cluster, starts, b),
                      "batched": lambda b: _inspector_batched(trace, cluster, starts, b)},
        "rollout": {"reference": lambda b: _rollout_steps(str(trace_path), starts[:32], b,
                                                         "reference"),
                    "batched": lambda b: _rollout_steps(str(trace_path), starts[:32], b,
                                                        "batched")},
    }
    mr_wl, mr_sets = _mrsch_sets(trace_path, MRSCH_SET, ENV_SEQUENCES, 256)
    runs["mrsch"] = {"reference": lambda b: _mrsch_reference(mr_wl, mr_sets),
                     "batched": lambda b: _mrsch_batched(mr_wl, mr_sets)}
    c0 = time.process_time()  # compile (or load from numba's cache) once per process
    _mrsch_batched(mr_wl, mr_sets[:2])
    for backfill in ("none", "easy"):
        _batched_steps(trace, cluster, starts[:2], backfill)
        _inspector_batched(trace, cluster, starts[:2], backfill)
        _rollout_steps(str(trace_path), starts[:2], backfill, "batched")
    out["warmup_seconds"] = time.process_time() - c0
    for what, pair in runs.items():
        for backfill in ("none", "easy") if what != "mrsch" else ("easy",):
            rates: dict[str, list[float]] = {"reference": [], "batched": []}
            figures: dict[str, tuple] = {}
            for _ in range(repeat):
                for name, fn in pair.items():  # alternating rounds
                    c0 = time.process_time()
                    steps, value = fn(backfill)
                    rates[name].append(steps / (time.process_time() - c0))
                    figures[name] = (steps, value)
            ref, bat = statistics.median(rates["reference"]), statistics.median(rates["batched"])
            row = {"reference_steps_per_s": ref, "batched_steps_per_s": bat,
                   "ratio": bat / ref, "steps": figures["batched"][0],
                   "reference_mean_value": figures["reference"][1],
                   "batched_mean_value": figures["batched"][1]}
            if what in ("env", "inspector", "mrsch"):
                row["same_outcome"] = figures["reference"] == figures["batched"]
            out[f"{what}_{backfill}"] = row
    out["load_average_1min_after"] = os.getloadavg()[0]
    return out


def _time_decisions(selector, views, repeat: int) -> dict:
    times = []
    for k in range(repeat):
        view = views[k % len(views)]
        t0 = time.perf_counter()
        selector.choose(view)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"decisions": repeat, "window_jobs": int(statistics.median(v.size for v in views)),
            "median_seconds": statistics.median(times),
            "p99_seconds": times[int(0.99 * (len(times) - 1))],
            "target_seconds": DECISION_TARGET_S,
            "meets_target": statistics.median(times) < DECISION_TARGET_S}


@click.command("learned")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_DATA_DIR, show_default=DEFAULT_DATA_HELP)
@click.option("--repeat", type=click.IntRange(min=10), default=2000, show_default=True,
              help="Decisions timed per selector.")
@click.option("--whole/--no-whole", default=True, show_default=True,
              help="Also replay the whole HPC2N trace with a learned scorer.")
@click.option("--env/--no-env", "env", default=True, show_default=True,
              help="Also measure the training environments, reference and batched.")
@click.option("--env-repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Alternating rounds of the environment measurement (medians).")
@click.option("--only-env", is_flag=True, help="Measure the environments only.")
@click.option("--json", "as_json", is_flag=True)
def learned(data_dir: Path, repeat: int, whole: bool, env: bool, env_repeat: int,
            only_env: bool, as_json: bool) -> None:
    """Median time of one learned decision (128-job window), a whole-trace replay, and
    the training environments' steps per second (reference and batched)."""
    out: dict = {}
    lublin = data_dir / LUBLIN
    if (env or only_env) and lublin.is_file():
        out["environment"] = env_rates(lublin, env_repeat)
    if only_env:
        whole = False
    elif lublin.is_file():
        trace = read_swf(lublin)
        scorer = LearnedScorer(_model("lublin256", "rlscheduler"))
        views = _views(trace, scorer, 200, 128)
        if views:
            out["rlscheduler_decision"] = {"model": scorer.model.path,
                                           **_time_decisions(scorer, views, repeat)}
        inspector = LearnedInspector(_model("lublin256-sjf", "inspector"))
        iviews = _views(trace, inspector, 200, 64)
        if iviews:
            out["inspector_decision"] = {"model": inspector.model.path,
                                         **_time_decisions(inspector, iviews, repeat)}
    elif not only_env:
        out["rlscheduler_decision"] = {"skipped": f"trace not found: {lublin}"}
    hpc2n = data_dir / HPC2N
    if whole and hpc2n.is_file():
        trace = read_swf(hpc2n)
        cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
        rows = {}
        for backfill, name in (("none", "hpc2n"), ("easy", "hpc2n-easy")):
            scorer = LearnedScorer(_model(name, "rlscheduler"))
            t0, c0 = time.perf_counter(), time.process_time()
            sched = simulate(trace.jobs, cluster, scorer, backfill)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            m = compute_metrics(trace.jobs, sched.start, sched.end, trace.max_procs)
            rows[backfill] = {"model": scorer.model.path, "jobs": len(trace.jobs),
                              "decisions": sched.decisions, "simulate_seconds": wall,
                              "cpu_seconds": cpu,
                              "avg_bsld": m.avg_bsld, "target_seconds": WHOLE_TARGET_S,
                              "meets_target": wall < WHOLE_TARGET_S}
        out["hpc2n_whole"] = rows
    elif whole:
        out["hpc2n_whole"] = {"skipped": f"trace not found: {hpc2n}"}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    e = out.get("environment")
    if e:
        click.echo(f"training environment, {e['sequences']} lublin_256 sequences of 256 jobs, "
                   f"CPU time, medians of {e['repeats']} alternating rounds (load average "
                   f"{e['load_average_1min']:.1f} before, {e['load_average_1min_after']:.1f} "
                   f"after; batched code {'compiled' if e['compiled'] else 'NOT compiled'}"
                   f", warm-up {e['warmup_seconds']:.1f} s CPU):")
        for key in ("env_none", "env_easy", "inspector_none", "inspector_easy",
                    "rollout_none", "rollout_easy", "mrsch_easy"):
            r = e[key]
            what, backfill = key.split("_")
            label = {"env": "RLScheduler environment steps (first allowed job)",
                     "inspector": "SchedInspector environment steps (SJF, accept what runs)",
                     "rollout": "RLScheduler rollout steps (policy sampling)",
                     "mrsch": f"MRSch environment steps ({MRSCH_SET}, pools, the agent's "
                              "backfill choice; a hashed rule)"}[what]
            same = ""
            if "same_outcome" in r:
                same = ", same outcome" if r["same_outcome"] else ", OUTCOMES DIFFER"
            verdict = "meets" if r["ratio"] >= ENV_TARGET_RATIO else "MISSES"
            click.echo(f"  {label}, backfill {backfill}: reference "
                       f"{r['reference_steps_per_s']:,.0f}/s, batched "
                       f"{r['batched_steps_per_s']:,.0f}/s, ratio {r['ratio']:.1f}x "
                       f"({verdict} the >= 10x target){same}")
    for key in ("rlscheduler_decision", "inspector_decision"):
        r = out.get(key)
        if not r:
            continue
        if "skipped" in r:
            click.echo(f"{key}: skipped ({r['skipped']})")
            continue
        verdict = "meets" if r["meets_target"] else "MISSES"
        click.echo(f"{key.replace('_', ' ')} ({r['model']}): median {1e6 * r['median_seconds']:.0f} us, "
                   f"p99 {1e6 * r['p99_seconds']:.0f} us over {r['decisions']} decisions, "
                   f"window {r['window_jobs']} jobs ({verdict} the < 1 ms target)")
    whole_rows = out.get("hpc2n_whole", {})
    if "skipped" in whole_rows:
        click.echo(f"whole HPC2N: skipped ({whole_rows['skipped']})")
    for backfill, r in whole_rows.items() if "skipped" not in whole_rows else ():
        verdict = "meets" if r["meets_target"] else "MISSES"
        click.echo(f"whole HPC2N ({r['jobs']:,} jobs), backfill {backfill}, {r['model']}: "
                   f"{r['simulate_seconds']:.1f} s wall, {r['cpu_seconds']:.1f} s CPU ({verdict} "
                   f"the < 60 s target), "
                   f"avg bsld {r['avg_bsld']:.1f}")
