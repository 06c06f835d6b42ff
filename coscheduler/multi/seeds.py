"""Train MRSch once per seed and keep the model with the best validation score.

DFP training on a few hundred job sets varies a lot with its seed: six seeds of the same
S4 budget scored -0.06 to -0.40 on the validation stretch (docs/multi-resource.md). The
choice is made on validation only (``train.validation_score``: jobs 70-80 % of the trace),
never on the held-out part that ``cosched simulate multi`` reports.

Each seed trains into ``NAME.seedK.model`` beside ``out``; the best (lowest score; the
lower seed on a tie) becomes ``out`` with its checkpoint, its header listing every seed's
score (``seed_scores``), and the other seeds' files are removed. Seeds run in parallel on
``workers`` local processes (``coscheduler/sweep.py``), each training in its own process.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Sequence

from ..model import InvalidInput
from . import mrsch
from .train import TrainConfig, train
from .workload import MultiWorkload


def parse_seeds(text: str) -> list[int]:
    """``"1,2,5"`` or ``"1-6"`` (or both: ``"1-3,7"``) -> sorted distinct seeds >= 0."""
    seeds: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, dash, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if dash else a
        except ValueError:
            raise InvalidInput(f"seeds {text!r}: {part!r} is not a seed or a range A-B") from None
        if a < 0 or b < a or b - a >= 1000:
            raise InvalidInput(f"seeds {text!r}: {part!r} must be a seed >= 0 or a range A-B "
                               "with A <= B (at most 1000 seeds)")
        seeds.update(range(a, b + 1))
    return sorted(seeds)


def seed_path(out: Path, seed: int) -> Path:
    return out.with_name(f"{out.name.removesuffix('.model')}.seed{seed}.model")


def _train_one(workload: MultiWorkload, out: str, config: TrainConfig) -> float:
    # one sweep task: a process of its own (JAX is loaded here, not in the parent)
    model = train(workload, out, config)
    return float(model.header["validation_score"])


def train_seeds(workload: MultiWorkload, out: str | Path, config: TrainConfig,
                seeds: Sequence[int], workers: int = 1,
                on_seed: Callable[[int, float], None] | None = None
                ) -> tuple[mrsch.MRSchModel, dict[int, float]]:
    """Train one model per seed; write the best to ``out``; return it and every score."""
    from .. import sweep

    if not seeds:
        raise InvalidInput("no seeds to train")
    out = Path(out)
    tasks = [sweep.Task(f"seed {k}", (workload, str(seed_path(out, k)),
                                      dataclasses.replace(config, seed=k))) for k in seeds]

    def done(task: sweep.Task, score: float) -> None:
        if on_seed is not None:
            on_seed(task.args[2].seed, score)

    try:
        scores = sweep.run_tasks(_train_one, tasks, workers=workers, on_result=done)
    except sweep.TaskFailed as e:
        cause = e.cause if isinstance(e.cause, InvalidInput) else e
        raise InvalidInput(f"training {e.task} failed: {cause}") from None
    by_seed = dict(zip(seeds, scores))
    best = min(seeds, key=lambda k: (by_seed[k], k))
    model = mrsch.load_model(seed_path(out, best))
    model.header["name"] = out.name.removesuffix(".model")
    model.header["seed_scores"] = {str(k): round(v, 4) for k, v in by_seed.items()}
    mrsch.save_model(model, out)
    ckpt = Path(str(seed_path(out, best)) + ".ckpt")
    if ckpt.exists():
        _adopt_checkpoint(ckpt, Path(str(out) + ".ckpt"))
    for k in seeds:
        seed_ckpt = Path(str(seed_path(out, k)) + ".ckpt")
        for p in (seed_path(out, k), seed_ckpt,
                  *seed_ckpt.parent.glob(seed_ckpt.name + ".memory-*.npz")):
            p.unlink(missing_ok=True)
    return mrsch.load_model(out), by_seed


def _adopt_checkpoint(seed_ckpt: Path, ckpt: Path) -> None:
    """The kept seed's checkpoint becomes OUT.ckpt, its replay memory renamed with it, so
    that ``--resume`` continues that seed's run."""
    saved = mrsch.load_model(seed_ckpt)
    state = saved.header.get("checkpoint", {})
    if "memory" in state:
        memory = seed_ckpt.with_name(state["memory"])
        moved = ckpt.with_name(ckpt.name + state["memory"].removeprefix(seed_ckpt.name))
        os.replace(memory, moved)
        saved.header["checkpoint"] = {**state, "memory": moved.name}
    mrsch.save_model(saved, ckpt)
    seed_ckpt.unlink()
