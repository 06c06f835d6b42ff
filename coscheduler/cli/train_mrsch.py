"""``cosched train mrsch``: train an MRSch (or scalar-reward) model on one workload set.

``cosched train mrsch --trace T --set S4 [--workload-seed 1] [--goal dynamic|fixed]
[--episodes 12,12,12] [--jobs-per-set 512] [--steps 48] [--batch 128] [--seed 1 | --seeds 1-6
[--workers 2]] [--window-order FCFS|SJF|...] [--max-steps N] [--time-limit MIN]
[--checkpoint-every SECONDS] [--env batched|reference] [--sets-in-flight 4] [--out MODEL]
[--resume] [--json]``; see coscheduler/multi/train.py and
coscheduler/multi/seeds.py.
"""

from __future__ import annotations

from pathlib import Path

import click

from .. import outputs
from ..model import InvalidInput
from ..multi import workload as mw
from ..sim.swf import read_swf
from ._common import echo_json


@click.command("mrsch")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="SWF trace the set is built from")
@click.option("--set", "set_name", required=True, help="workload set S1-S10")
@click.option("--workload-seed", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--goal", type=click.Choice(["dynamic", "fixed"]), default="dynamic",
              show_default=True, help="dynamic: Eq. (1) (MRSch); fixed: scalar-reward baseline")
@click.option("--episodes", default="12,12,12", show_default=True,
              help="job sets per phase: sampled,real,synthetic")
@click.option("--jobs-per-set", type=click.IntRange(min=16), default=512, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=48, show_default=True,
              help="gradient steps after each job set")
@click.option("--batch", type=click.IntRange(min=1), default=128, show_default=True,
              help="minibatch size of the gradient steps")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--seeds", default=None, metavar="LIST",
              help="train once per seed (e.g. 1-6 or 1,3,5) and keep the model with the best "
                   "validation score (jobs 70-80 %%); overrides --seed")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="local processes training seeds at once (with --seeds)")
@click.option("--window-order", type=click.Choice(["FCFS", "SJF", "F1", "WFP3", "UNICEP", "SAF"],
                                                 case_sensitive=False),
              default="FCFS", show_default=True,
              help="the queue order the agent's window of 10 is cut from: FCFS (MRSch's) or "
                   "a classic order (this project's variant; recorded in the model)")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="model file (default: <mrsch|scalar>-<trace>-<set>.model here)")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="stop after the job set that brings the run's environment steps (the "
                   "agent's picks) to this many; resumable with a larger budget")
@click.option("--time-limit", type=click.FloatRange(min=0, min_open=True), default=None,
              help="stop after the job set that passes this many minutes (resumable)")
@click.option("--checkpoint-every", type=click.FloatRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="write OUT.ckpt (weights and replay memory) after the job set that ends "
                   "this long after the last write, and always at the end or a budget's "
                   "stop; a crash loses at most this much (0: after every set)")
@click.option("--env", "env", type=click.Choice(["batched", "reference"]), default="batched",
              show_default=True,
              help="play job sets in the batched environment (several at once, "
                   "coscheduler/multi/fastenv.py) or one at a time through the engine")
@click.option("--sets-in-flight", type=click.IntRange(min=1), default=4, show_default=True,
              help="batched: job sets of a phase played together with the same weights")
@click.option("--resume", is_flag=True, help="continue the run from OUT.ckpt if it exists")
@click.option("--json", "as_json", is_flag=True, help="print the model header as JSON")
def mrsch(trace_path: str, set_name: str, workload_seed: int, goal: str, episodes: str,
          jobs_per_set: int, steps: int, batch: int, seed: int, seeds: str | None,
          workers: int, window_order: str, max_steps: int | None, time_limit: float | None,
          checkpoint_every: float, env: str, sets_in_flight: int, out: str | None,
          resume: bool, as_json: bool) -> None:
    """Train MRSch (DFP) in its three phases on TRACE's set, with the simulator engine."""
    from ..multi.train import TrainConfig, train as run_train

    try:
        counts = tuple(int(x) for x in episodes.split(","))
    except ValueError:
        raise click.BadParameter(f"{episodes!r} is not three integers", param_hint="--episodes")
    try:
        config = TrainConfig(goal=goal, episodes=counts, jobs_per_set=jobs_per_set,
                             steps_per_episode=steps, batch=batch, seed=seed,
                             window_order=window_order.upper(), max_steps=max_steps,
                             time_limit_s=None if time_limit is None else 60.0 * time_limit,
                             checkpoint_every_s=checkpoint_every, env=env,
                             sets_in_flight=sets_in_flight)
        wl = mw.generate(read_swf(trace_path), set_name, workload_seed)
        kind = "mrsch" if goal == "dynamic" else "scalar"
        path = Path(out) if out else Path(f"{kind}-{Path(trace_path).name.split('.')[0]}-"
                                          f"{wl.set_name}.model")
        for target in (path, path.with_name(path.name + ".ckpt")):   # before the training
            outputs.check_output(target)
        if seeds is not None:
            from ..multi.seeds import parse_seeds, train_seeds

            if resume:
                raise click.UsageError("--resume continues one run; it cannot be combined "
                                       "with --seeds")
            chosen = parse_seeds(seeds)
            click.echo(f"training {path.name}: seeds {','.join(map(str, chosen))}, "
                       f"{workers} at a time", err=True)
            model, _ = train_seeds(wl, path, config, chosen, workers=workers,
                                   on_seed=lambda k, score: click.echo(
                                       f"  seed {k}: validation score {score:+.4f}", err=True))
        else:
            def progress(done: int, total: int, info: dict) -> None:
                rate = info["steps"] / info["seconds"] if info["seconds"] > 0 else 0.0
                loss = "-" if info["loss"] is None else f"{info['loss']:.5f}"
                click.echo(f"{path.name}: set {done}/{total} ({info['phase']}): "
                           f"{info['picks']} picks, {info['steps']:,} steps, "
                           f"{rate:.0f} steps/s, loss {loss}, epsilon {info['epsilon']:.3f}",
                           err=True)
            model = run_train(wl, path, config, resume=resume, progress=progress)
    except InvalidInput as e:
        raise click.ClickException(str(e)) from None
    h = {k: v for k, v in model.header.items() if k not in ("weights", "losses")}
    if h.get("stopped_by"):
        why = (f"the step budget ({h['training_steps']:,} of {max_steps:,} steps)"
               if h["stopped_by"] == "max_steps" else "the time limit")
        click.echo(f"stopped after job set {h['episodes']} of {h['episodes_planned']} by {why}: "
                   "the same command with --resume and a larger "
                   f"{'--max-steps' if h['stopped_by'] == 'max_steps' else '--time-limit'} "
                   "continues the run (budgets count the whole run)", err=True)
    if as_json:
        echo_json(h, indent=None)
        return
    v = h["validation"]
    click.echo(f"{path}: {h['episodes']} job sets in {h['training_seconds']} s, final loss "
               f"{h['final_loss']:.5f}; validation: node {100 * v['node_util']:.1f} %, "
               f"wait {v['mean_wait_s']:.0f} s, slowdown {v['mean_slowdown']:.1f}"
               + (f"; seed {h['seed']}, the best of {len(h['seed_scores'])} seeds"
                  if "seed_scores" in h else ""))
