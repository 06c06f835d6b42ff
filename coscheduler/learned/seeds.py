"""Train an RLScheduler or SchedInspector model once per seed and keep the best.

PPO on a trace's sequences varies with its seed (the sampled sequences, the initial
weights, the rollouts' draws), so issue 20 asks for several seeds with the best chosen on
validation windows disjoint from the reported ones. Each seed's validation windows are
its own (``gate.validation_starts`` draws them with ``[seed, 99]``), so figures of
different seeds are not compared directly: a seed is judged by its model's figure
*relative to the best heuristic on the same windows* (the gate's ``vs_best``), which takes
out how hard its windows happen to be. The lowest ``vs_best`` wins (the highest for a
higher-is-better metric such as utilisation), the lower seed on a tie. The held-out part
and the reported seed-1 windows play no part in the choice.

Each seed trains into ``NAME-seedK.model`` beside ``out`` with its own report, checkpoint
and curve, and they stay there: the same command resumes every seed's run, and an operator
can look at each. The kept model is written to ``out`` with its report; its header lists
every seed's validation (``seed_validation``). Seeds train one after the other in this
process (JAX is loaded here, and forking a process that has loaded it may deadlock); each
seed's rollouts still use ``workers``.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..model import InvalidInput
from .train import TrainConfig, TrainResult, train


def seed_path(out: str | Path, seed: int) -> Path:
    """``NAME-seedK.model`` beside ``out`` (a dash: a model's report and curve are named
    after the part of its file name before the first dot)."""
    out = Path(out)
    return out.with_name(f"{out.name.split('.')[0]}-seed{seed}.model")


def seed_rank(report: Mapping) -> float:
    """What a seed is judged by (lower is better): its gate report's ``vs_best`` on its
    validation windows, negated when the metric is higher-is-better."""
    vs_best = report.get("vs_best")
    if not isinstance(vs_best, (int, float)) or vs_best != vs_best:
        return float("inf")        # no figure (a degenerate window set): never preferred
    return -float(vs_best) if report.get("higher_is_better") else float(vs_best)


def choose_seed(reports: Mapping[int, Mapping]) -> int:
    """The seed whose model did best against the best heuristic on its own validation
    windows; the lower seed on a tie."""
    if not reports:
        raise InvalidInput("no seeds to choose from")
    return min(reports, key=lambda k: (seed_rank(reports[k]), k))


def train_seeds(cfg: TrainConfig, seeds: Sequence[int], *, resume: bool = True,
                progress: Callable[[int, int, dict], None] | None = None,
                on_seed: Callable[[int, TrainResult], None] | None = None
                ) -> tuple[TrainResult, dict[int, dict]]:
    """Train ``cfg`` once per seed (``cfg.seed`` is replaced), write the best to
    ``cfg.out`` with its report and curve; return its result and every seed's report."""
    from .gate import write_report
    from .modelfile import save_model

    if not seeds:
        raise InvalidInput("no seeds to train")
    if len(set(seeds)) != len(seeds):
        raise InvalidInput(f"seeds {list(seeds)} repeat a seed")
    out = Path(cfg.out)
    results: dict[int, TrainResult] = {}
    for k in seeds:
        results[k] = train(dataclasses.replace(cfg, seed=k, out=str(seed_path(out, k))),
                           resume=resume, progress=progress)
        if on_seed is not None:
            on_seed(k, results[k])
    reports = {k: r.gate for k, r in results.items()}
    best = choose_seed(reports)
    kept = results[best]
    model = kept.model
    model.header["name"] = out.name.split(".")[0]
    model.header["seed_validation"] = {
        str(k): {"vs_best": r.get("vs_best"), "model_figure": r.get("model_figure"),
                 "best_heuristic": r.get("best_heuristic"), "verdict": r.get("verdict")}
        for k, r in reports.items()}
    model.header["kept_seed"] = best
    # the kept seed's report is the kept model's (same weights, same seed, same windows)
    report = dict(kept.gate, model=out.name)
    write_report(report, out)
    model.path = str(out)
    path = save_model(model, out)
    plot = None
    if kept.plot is not None and Path(kept.plot).exists():
        plot = out.with_name(out.name.split(".")[0] + ".png")
        shutil.copyfile(kept.plot, plot)
    return dataclasses.replace(kept, model=model, path=path, plot=plot, gate=report), reports


__all__ = ["choose_seed", "seed_path", "seed_rank", "train_seeds"]
