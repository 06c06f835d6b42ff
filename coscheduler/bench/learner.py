"""``cosched bench learner``: how long one ASA_X decision and one loss update take.

A seeded stream of varied host states over several job classes goes through
``AsaxLearner.decide``; each decision's loss arrives late (1-20 decisions later) through
``observe``. Every call is timed on its own with ``time.perf_counter_ns``. The headline
figures use the paper's four experts and m = 10 (DESIGN.md budget: median decision < 1 ms);
the same stream is then run with the fitted scikit-learn expert on, and a shorter run times
the state store's writes (what the controller adds per decision when it persists).
"""

from __future__ import annotations

import math
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from ..learner import AsaxLearner, HostState, LearnerConfig
from ..model import StageType
from ..recorder import OutcomeRecord

CLASSES = ("montage/mProject", "montage/mDiff", "blast/blastall", "blast/split",
           "statistics/aggregate", "statistics/extract", "synthetic/cpu", "synthetic/mem")


@dataclass(frozen=True)
class Step:
    state: HostState
    delay: int        # the loss arrives this many decisions later
    noise: float


def host_stream(n: int, seed: int) -> list[Step]:
    """n varied host states (all metric bins and Hp bins are visited), seeded."""
    rng = random.Random(seed)
    steps = []
    for _ in range(n):
        hp = None if rng.random() < 0.05 else rng.lognormvariate(0.0, 0.4)
        state = HostState(
            job_class=rng.choice(CLASSES), cpu_percent=rng.uniform(0, 110),
            mem_percent=rng.uniform(0, 100),
            stage_type=StageType.PARALLEL if rng.random() < 0.6 else StageType.SEQUENTIAL,
            elapsed_fraction=rng.uniform(0, 1.1), happiness=hp)
        steps.append(Step(state, rng.randint(1, 20), rng.uniform(-0.1, 0.1)))
    return steps


def synthetic_loss(state: HostState, action_fraction: float, noise: float) -> float:
    """A loss that grows with what is lent, with the host's CPU use and when Hp < 1."""
    hp = 1.0 if state.happiness is None else state.happiness
    pressure = state.cpu_percent / 100 + (0.5 if hp < 1 else 0.0)
    return min(1.0, max(0.0, action_fraction * pressure + noise))


def _us(samples_ns: list[int]) -> tuple[float, float]:
    """(median, p99 by nearest rank) in microseconds."""
    s = sorted(samples_ns)
    p99 = s[max(0, math.ceil(0.99 * len(s)) - 1)]
    return statistics.median(s) / 1000, p99 / 1000


def time_learner(steps: list[Step], config: LearnerConfig) -> dict:
    learner = AsaxLearner(config)
    learner.decide(steps[0].state, "warmup", "warmup", 0.0)   # build experts, import sklearn
    learner.forget(1)
    decide_ns: list[int] = []
    observe_ns: list[int] = []
    due: dict[int, list[tuple[int, float]]] = {}
    rounds = 0
    clock = time.perf_counter_ns
    for i, step in enumerate(steps):
        t0 = clock()
        d = learner.decide(step.state, "host", "guest", float(i))
        decide_ns.append(clock() - t0)
        loss = synthetic_loss(step.state, d.action_fraction, step.noise)
        due.setdefault(i + step.delay, []).append((d.decision_id, loss))
        for did, lv in due.pop(i, ()):
            t0 = clock()
            closed = learner.observe(did, lv, float(i))
            observe_ns.append(clock() - t0)
            rounds += closed is not None
    dm, dp = _us(decide_ns)
    um, up = _us(observe_ns)
    return {"decisions": len(decide_ns), "updates": len(observe_ns), "rounds_closed": rounds,
            "experts": list(learner.expert_names), "decision_median_us": dm, "decision_p99_us": dp,
            "update_median_us": um, "update_p99_us": up}


def time_store(steps: list[Step], synchronous: str) -> dict:
    """Median cost of persisting one decision and one observation (temp file, real disk)."""
    from ..store import SqliteStore

    learner = AsaxLearner(LearnerConfig(fitted_expert=False))
    dec_ns: list[int] = []
    obs_ns: list[int] = []
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory(prefix="cosched-bench-") as tmp:
        with SqliteStore(Path(tmp) / "state.db", create=True, synchronous=synchronous) as store:
            for i, step in enumerate(steps):
                d = learner.decide(step.state, "host", "guest", float(i))
                st = learner.class_state(d.job_class)
                t0 = clock()
                store.record_decision(d, 1 - d.action_fraction, d.action_fraction, class_state=st)
                dec_ns.append(clock() - t0)
                loss = synthetic_loss(step.state, d.action_fraction, step.noise)
                closed = learner.observe(d.decision_id, loss, float(i))
                outcome = OutcomeRecord(d.decision_id, float(i), loss, "degradation")
                t0 = clock()
                store.record_observation(outcome, st, closed)
                obs_ns.append(clock() - t0)
    dm, _ = _us(dec_ns)
    om, _ = _us(obs_ns)
    return {"writes": len(dec_ns), "decision_write_median_us": dm, "observation_write_median_us": om}


@click.command("learner")
@click.option("--decisions", "n", type=click.IntRange(min=100), default=10_000, show_default=True,
              help="Decisions to time (the headline figure needs >= 10,000).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fitted/--no-fitted", default=True, show_default=True,
              help="Also time a run with the fitted scikit-learn expert in the mixture.")
@click.option("--store-writes", type=click.IntRange(min=0), default=500, show_default=True,
              help="Also time this many state-store writes of each kind (0: skip).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def learner(n: int, seed: int, fitted: bool, store_writes: int, as_json: bool) -> None:
    """Time ASA_X decide() and observe() with the paper's four experts and m = 10."""
    import json

    steps = host_stream(n, seed)
    base = time_learner(steps, LearnerConfig(m=10, seed=seed, fitted_expert=False))
    out = {"decisions": base["decisions"], "decision_median_us": base["decision_median_us"],
           "decision_p99_us": base["decision_p99_us"], "update_median_us": base["update_median_us"],
           "update_p99_us": base["update_p99_us"], "updates": base["updates"],
           "rounds_closed": base["rounds_closed"], "m": 10, "experts": base["experts"], "seed": seed}
    if fitted:
        out["fitted"] = time_learner(steps, LearnerConfig(m=10, seed=seed, fitted_expert=True))
    if store_writes:
        few = steps[:store_writes]
        out["store"] = {mode: time_store(few, mode) for mode in ("FULL", "NORMAL")}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"ASA_X learner: {out['decisions']:,} decisions, m = 10, seed {seed}, "
               f"{len(CLASSES)} job classes")
    click.echo(f"(losses arrive 1-20 decisions late; {base['rounds_closed']} rounds closed)")
    click.echo(f"  {'experts':<24} {'decide median':>13} {'p99':>10} {'update median':>14} {'p99':>10}")

    def row(label: str, r: dict) -> None:
        click.echo(f"  {label:<24} {r['decision_median_us']:>10.1f} us {r['decision_p99_us']:>7.1f} us "
                   f"{r['update_median_us']:>11.1f} us {r['update_p99_us']:>7.1f} us")

    row("paper's four trees", base)
    if fitted:
        row("four + fitted sklearn", out["fitted"])
    verdict = "within" if base["decision_median_us"] < 1000 else "OVER"
    click.echo(f"  budget: decision median < 1000 us -> {verdict}")
    if store_writes:
        click.echo("  state store, median per write (decision / observation):")
        for mode, r in out["store"].items():
            click.echo(f"    synchronous={mode:<6} {r['writes']:>6} writes: "
                       f"{r['decision_write_median_us']:>8,.0f} us / "
                       f"{r['observation_write_median_us']:>8,.0f} us")
