"""``cosched train``: train the learned queue schedulers (needs ``pip install .[rl]``).

``cosched train rlscheduler --trace T [--metric bsld|wait|util] [--backfill none|easy]
[--epochs N] [--trajectories K] [--seed S] [--workers N] [--out MODEL]`` and
``cosched train inspector --trace T --base sjf|f1 [...]``. Both resume from
``MODEL.ckpt`` when it exists (same settings), show a progress bar on stderr, write the
model and its training curve ``MODEL.png``, and print a summary (``--json``: one object).
"""

from __future__ import annotations

from pathlib import Path

import click

from .. import outputs
from ..model import InvalidInput
from ..policies.queue import POLICIES, get_policy
from ..policies.selection import MAX_REJECTION_TIMES, RETRY_AFTER_S
from ..learned.teachers import INSPECTOR_TEACHERS
from ..sim.engine import BACKFILL_MODES
from ._common import echo_json


def _common(f):
    opts = [
        click.option("--trace", required=True, type=click.Path(exists=True, dir_okay=False),
                     help="SWF trace to train on (plain or .gz); sequences come from its first 20 %."),
        click.option("--backfill", type=click.Choice(BACKFILL_MODES[:2]), default="none",
                     show_default=True, help="Backfilling during training and evaluation."),
        click.option("--epochs", type=click.IntRange(min=1), default=None,
                     help="PPO epochs (default: 60 for rlscheduler, 40 for inspector)."),
        click.option("--trajectories", type=click.IntRange(min=1), default=32, show_default=True,
                     help="256-job sequences per epoch."),
        click.option("--sequence", type=click.IntRange(min=8), default=256, show_default=True,
                     help="Jobs per training sequence (the reference's 256); the validation "
                          "windows are twice as long (capped by the training part)."),
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True),
        click.option("--seeds", default=None, metavar="LIST",
                     help="Train once per seed (e.g. 1-4 or 1,3,8), one after the other, and "
                          "keep the seed whose model is best against the best heuristic on "
                          "its validation windows; each seed's files stay as "
                          "NAME-seedK.*. Not with --seed."),
        click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Rollout worker processes (or Ray tasks with --executor ray)."),
        click.option("--executor", type=click.Choice(["processes", "ray"]), default="processes",
                     show_default=True, help="Where rollouts run; ray needs pip install '.[ray]'."),
        click.option("--ray-address", default=None,
                     help="Ray cluster to join (default: start a local one)."),
        click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Model file to write [default: TRACE-stem-....model here]."),
        click.option("--time-limit", type=click.FloatRange(min=1), default=None,
                     help="Stop after the epoch that passes this many minutes (resumable)."),
        click.option("--max-steps", type=click.IntRange(min=1), default=None,
                     help="Stop after the epoch that brings the run's environment steps "
                          "(decisions in rollouts, warm start included) to this many "
                          "(resumable with a larger budget)."),
        click.option("--pi-lr", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Policy learning rate (Adam) [default: 3e-4 for rlscheduler (the "
                          "reference's), 1e-3 for inspector]."),
        click.option("--init", "init", default=None, metavar="MODEL",
                     help="Start the policy from this model's weights (a shipped name or a "
                          "path; same kind), e.g. to train a shipped model further; no "
                          "imitation warm start then."),
        click.option("--env", "env", type=click.Choice(["batched", "reference"]),
                     default="batched", show_default=True,
                     help="Rollouts in the batched numpy environment, or the reference one "
                          "(the simulator engine stepped one sequence at a time)."),
        click.option("--stop-after", type=click.IntRange(min=1), default=None,
                     help="Stop after this many epochs of this session; rerun the same "
                          "command to resume (the same run as without the stop)."),
        click.option("--fresh", is_flag=True, help="Ignore an existing checkpoint."),
        click.option("--no-eval", is_flag=True,
                     help="Skip the final evaluation on the seed-1 / held-out windows."),
        click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.group()
def train() -> None:
    """Train RLScheduler or SchedInspector models on an SWF trace (pip install '.[rl]')."""


def _stem(trace: str) -> str:
    name = Path(trace).name
    for suffix in (".gz", ".swf"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _seeds(text: str | None, seed: int) -> list[int] | None:
    """--seeds parsed (None without it); refused beside a --seed other than the default."""
    if text is None:
        return None
    from ..multi.seeds import parse_seeds

    if seed != 0:
        raise click.UsageError("give --seed or --seeds, not both")
    try:
        return parse_seeds(text)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--seeds") from None


def _check_outputs(out: str) -> None:
    """The model file, its checkpoint and its release-gate report can be written (before
    the training a bad --out would lose)."""
    from ..learned.gate import report_path
    from ..learned.train import checkpoint_path

    try:
        for path in (out, checkpoint_path(out), report_path(out)):
            outputs.check_output(path)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None


def _run(cfg, fresh: bool, as_json: bool, seeds: list[int] | None = None) -> None:
    try:
        from ..learned.train import train as run_training
        import jax  # noqa: F401 - fail early with the install hint
    except ImportError as exc:
        raise click.ClickException(
            f"training needs the rl extra ({exc.name or exc} is missing): pip install '.[rl]'"
        ) from None
    _check_outputs(cfg.out)
    def progress(epoch: int, total: int, row: dict) -> None:
        # one line per epoch on stderr: throughput, losses, the validation figure
        seconds = row["rollout_s"] + row["update_s"]
        unit = "bsld" if cfg.kind == "inspector" or cfg.metric == "bsld" else cfg.metric
        text = (f"epoch {epoch}/{total}: mean {unit} {row['mean_value']:.2f}"
                + (f" (base {row['mean_base']:.2f})" if "mean_base" in row else "")
                + f", {row['steps']:,} steps in {seconds:.1f} s "
                f"({row['steps'] / max(row['rollout_s'], 1e-9):,.0f} steps/s rolling out)"
                + (f", loss pi {row['pi_loss']:.4g} v {row['v_loss']:.4g}"
                   if "pi_loss" in row else "")
                + (f", validation {unit} {row['validation']:.2f}" if "validation" in row
                   else ""))
        click.echo(text, err=True)

    seed_reports = None
    try:
        if seeds is None:
            result = run_training(cfg, resume=not fresh, progress=progress)
        else:
            from ..learned.seeds import train_seeds

            def on_seed(k: int, r) -> None:
                g = r.gate
                click.echo(f"seed {k}: validation {g.get('model_figure', float('nan')):.2f} "
                           f"vs best heuristic {g.get('best_heuristic')} "
                           f"{_signed_percent(g.get('vs_best'))} ({g.get('verdict')}); "
                           f"model {r.path}", err=True)

            click.echo(f"training seeds {','.join(map(str, seeds))} one after the other",
                       err=True)
            result, seed_reports = train_seeds(cfg, seeds, resume=not fresh,
                                               progress=progress, on_seed=on_seed)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    summary = {"model": str(result.path), "kind": cfg.kind, "trace": cfg.trace,
               "epochs": result.model.header["epochs"], "resumed_from_epoch": result.resumed_from,
               "training_steps": result.model.header["training_steps"],
               "training_seconds": round(result.seconds, 1),
               "size_bytes": result.path.stat().st_size,
               "curve_png": str(result.plot) if result.plot else None,
               "figures": result.figures, "gate": result.gate,
               **({"kept_seed": result.model.header["kept_seed"],
                   "seed_validation": result.model.header["seed_validation"]}
                  if seed_reports is not None else {})}
    if as_json:
        echo_json(summary)
        return
    click.echo(f"model {result.path} ({summary['size_bytes']} bytes), {summary['epochs']} epochs "
               f"in {summary['training_seconds']:.0f} s"
               + (f" (resumed at epoch {result.resumed_from})" if result.resumed_from else ""))
    if result.model.header["epochs"] < cfg.epochs:
        h = result.model.header
        why = (f"the step budget ({h['training_steps']:,} of {cfg.max_steps:,} steps)"
               if cfg.max_steps is not None and h["training_steps"] >= cfg.max_steps
               else "the time limit" if cfg.time_limit_s is not None
               and result.seconds >= cfg.time_limit_s else "--stop-after")
        click.echo(f"stopped after epoch {h['epochs']} of {cfg.epochs} by {why}: the same "
                   "command resumes the run from its checkpoint"
                   + (" (with a larger --max-steps)" if why.startswith("the step") else ""))
    if seed_reports is not None:
        click.echo(f"kept seed {result.model.header['kept_seed']} of "
                   f"{','.join(map(str, seeds))} (best against the best heuristic on its "
                   "validation windows)")
    if result.plot:
        click.echo(f"training curve {result.plot}")
    if result.gate:
        from ..learned.gate import report_path, summary as gate_summary

        click.echo(f"release gate: {gate_summary(result.gate)} (report "
                   f"{report_path(result.path)})")
        if result.gate["verdict"] != "pass":
            click.echo("not offered by cosched models list: it is not at or below the best "
                       "heuristic on its validation windows and on the held-out part")
    f = result.figures
    if cfg.kind == "rlscheduler" and f:
        heur = "  ".join(f"{k} {v:.1f}" for k, v in f["heuristics_bsld"].items())
        click.echo(f"mean bsld over the ten seed-1 windows: model {f['model_bsld']:.1f}; {heur}")
    elif f:
        click.echo(f"held-out windows: {f['base']} {f['base_bsld']:.1f} -> inspected "
                   f"{f['inspected_bsld']:.1f} ({100 * f['improvement']:+.1f} %), rejection "
                   f"ratio {f['rejection_ratio']:.3f}")


def _signed_percent(vs_best) -> str:
    return "?" if not isinstance(vs_best, (int, float)) else f"{100 * vs_best:+.1f} %"


def _config(kind, trace, out, epochs, default_epochs, init=None, **kw):
    from ..learned.registry import resolve
    from ..learned.train import TrainConfig

    if init is not None:
        try:
            init = str(resolve(init).resolve())
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--init") from None
    return TrainConfig(kind=kind, trace=str(trace), out=str(out),
                       epochs=epochs or default_epochs, init=init, **kw)


# The warm start's length, for both kinds (their --imitate options differ: a heuristic
# to clone for RLScheduler, a hand-written inspector for SchedInspector).
_imitate_rounds = click.option(
    "--imitate-rounds", type=click.IntRange(min=1), default=None,
    help="Rounds of cloning (each: --trajectories sequences, 150 steps) "
         "[default: min(4, epochs / 10)].")


@train.command("rlscheduler")
@_common
@click.option("--metric", type=click.Choice(["bsld", "wait", "util"]), default="bsld",
              show_default=True, help="What the sequence reward measures.")
@click.option("--mask", type=click.Choice(["runnable", "padding"]), default="runnable",
              show_default=True, help="Pick only jobs that can start now (unless none can), "
                                      "or any waiting job (the reference).")
@click.option("--imitate", default="best", show_default=True,
              help="Warm start: first clone this heuristic's picks (a queue policy name, or "
                   "'best': the heuristic that does best as a scorer on training sequences), "
                   "then PPO; 'none' starts from random weights as the reference.")
@_imitate_rounds
@click.option("--relative-reward", is_flag=True,
              help="Reward a sequence by its bsld divided by SJF's on the same sequence (so "
                   "a heavy-tailed trace's hardest sequences do not drown the others).")
def rlscheduler(trace, backfill, epochs, trajectories, sequence, seed, workers, executor, ray_address,
                seeds, out, time_limit, max_steps, pi_lr, init, env, stop_after, fresh, no_eval, as_json,
                metric, mask, imitate, imitate_rounds, relative_reward) -> None:
    """RLScheduler: PPO picks the next job from a 128-job window (kernel network)."""
    out = out or Path(f"{_stem(trace)}-{metric}-{backfill}.model")
    cfg = _config("rlscheduler", trace, out, epochs, 60, metric=metric, backfill=backfill,
                  trajectories=trajectories, sequence=sequence, seed=seed, workers=workers, executor=executor,
                  ray_address=ray_address, mask=mask, pi_lr=pi_lr or 3e-4,
                  imitate=None if imitate.lower() == "none" else
                  "best" if imitate.lower() == "best" else get_policy(imitate).name,
                  time_limit_s=time_limit * 60 if time_limit else None, max_steps=max_steps,
                  evaluate=not no_eval,
                  init=init, env=env, stop_after=stop_after, imitate_epochs=imitate_rounds,
                  relative_reward=relative_reward)
    _run(cfg, fresh, as_json, _seeds(seeds, seed))


@train.command("inspector")
@_common
@click.option("--base", required=True, type=click.Choice([p.lower() for p in POLICIES]
                                                         + list(POLICIES)),
              help="Base policy whose picks the inspector accepts or rejects (sjf, f1, ...).")
@click.option("--start-reject", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=None, help="Start from a policy that rejects with this probability "
                                 "whatever it sees (e.g. 0.05: near the base policy) instead "
                                 "of a random one (about half).")
@click.option("--imitate", type=click.Choice(["none", *INSPECTOR_TEACHERS]), default="none",
              show_default=True,
              help="Warm start: first clone a hand-written inspector's answers (reject-blocked: "
                   "reject a pick that cannot start now), then PPO; the clone is validated "
                   "and kept if training does not validate better.")
@_imitate_rounds
@click.option("--max-rejections", type=click.IntRange(0, 100_000), default=MAX_REJECTION_TIMES,
              show_default=True,
              help="Rejections of one job before it is accepted without asking "
                   "(SchedInspector's 10; `cosched simulate inspector-budget` measures "
                   "others on the trace's training part).")
@click.option("--retry-after", type=click.FloatRange(1.0, 7 * 86400.0), default=RETRY_AFTER_S,
              show_default=True, help="Seconds before a rejected job is asked again (at the "
                                      "latest; an arrival or an end asks sooner).")
def inspector(trace, backfill, epochs, trajectories, sequence, seed, workers, executor, ray_address,
              seeds, out, time_limit, max_steps, pi_lr, init, env, stop_after, fresh, no_eval, as_json,
              base, start_reject, imitate, imitate_rounds, max_rejections, retry_after) -> None:
    """SchedInspector: PPO accepts or rejects a base policy's picks."""
    base = get_policy(base).name
    out = out or Path(f"{_stem(trace)}-{base.lower()}-inspector.model")
    cfg = _config("inspector", trace, out, epochs, 40, base=base, backfill=backfill,
                  trajectories=trajectories, sequence=sequence, seed=seed, workers=workers, executor=executor,
                  ray_address=ray_address, pi_lr=pi_lr or 1e-3,
                  time_limit_s=time_limit * 60 if time_limit else None, max_steps=max_steps,
                  evaluate=not no_eval,
                  init=init, env=env, stop_after=stop_after, start_reject=start_reject,
                  imitate=None if imitate == "none" else imitate, imitate_epochs=imitate_rounds,
                  max_rejections=max_rejections, retry_after_s=retry_after)
    _run(cfg, fresh, as_json, _seeds(seeds, seed))


def _add_mrsch() -> None:
    # MRSch (multi-resource, DFP): its own module, coscheduler/cli/train_mrsch.py
    from .train_mrsch import mrsch

    train.add_command(mrsch)


_add_mrsch()
