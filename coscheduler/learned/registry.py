"""Shipped models and how a command line names a model (numpy only).

Models shipped with coscheduler live in ``coscheduler/learned/models/*.model``. A
command takes ``rl:NAME`` or ``rl:PATH`` where it takes a queue policy, and
``--inspector NAME|PATH``; a NAME is a shipped model's file stem, anything with a path
separator or an existing file is a path.
"""

from __future__ import annotations

from pathlib import Path

from ..model import InvalidInput
from ..resources import resource_dir
from .modelfile import ModelError, load_model
from .selectors import LearnedInspector, LearnedScorer

MODELS_DIR = resource_dir(__package__, "models")   # package data (pyproject.toml)
SUFFIX = ".model"
PREFIX = "rl:"


def shipped(directory: Path = MODELS_DIR) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []


def list_models(directory: Path = MODELS_DIR) -> list[dict]:
    """``[{"name", "kind", "trace", "metric", "backfill", "path", ...}]`` of shipped models."""
    out = []
    for path in shipped(directory):
        try:
            m = load_model(path)
        except ModelError as exc:
            out.append({"name": path.stem, "kind": None, "trace": None, "metric": None,
                        "backfill": None, "path": str(path), "error": str(exc)})
            continue
        h = m.header
        row = {"name": path.stem, "kind": m.kind, "trace": h.get("trace"),
               "metric": h.get("metric"), "backfill": h.get("backfill"), "path": str(path),
               "base": h.get("base"), "epochs": h.get("epochs"),
               "training_seconds": h.get("training_seconds"),
               "size_bytes": path.stat().st_size}
        out.append(row)
    return out


def resolve(name_or_path: str, directory: Path = MODELS_DIR) -> Path:
    """The model file that ``name_or_path`` names; a clear error lists shipped names."""
    text = name_or_path.strip()
    if not text:
        raise InvalidInput("empty model name")
    path = Path(text)
    if "/" in text or path.suffix == SUFFIX or path.exists():
        if not path.is_file():
            raise InvalidInput(f"model file not found: {text}")
        return path
    candidate = directory / f"{text}{SUFFIX}"
    if candidate.is_file():
        return candidate
    names = ", ".join(p.stem for p in shipped(directory)) or "(none shipped)"
    raise InvalidInput(f"unknown model {text!r}; shipped models: {names}; or give a path")


def is_learned_policy(text: str) -> bool:
    return text.strip().lower().startswith(PREFIX)


def scorer_for(text: str, directory: Path = MODELS_DIR) -> LearnedScorer:
    """``rl:NAME|PATH`` -> a scorer named exactly as given (``rl:NAME``)."""
    spec = text.strip()
    if not is_learned_policy(spec):
        raise InvalidInput(f"a learned policy is written rl:NAME or rl:PATH, got {text!r}")
    return LearnedScorer(load_model(resolve(spec[len(PREFIX):], directory), "rlscheduler"),
                         name=PREFIX + spec[len(PREFIX):])


def inspector_for(text: str, base: str | None = None,
                  directory: Path = MODELS_DIR) -> LearnedInspector:
    """``NAME|PATH`` of an inspector model; ``base`` overrides the base policy it was
    trained on."""
    model = load_model(resolve(text, directory), "inspector")
    return LearnedInspector(model, base=base)


def resolve_policy(text: str, directory: Path = MODELS_DIR):
    """What a ``--policy`` value names: a heuristic ``QueuePolicy`` (``SJF``) or a learned
    scorer (``rl:NAME|PATH``). For every command that takes a queue policy (the Slurm
    priority hook, ``cosched run``): heuristics keep their key functions, scorers go
    through ``policies.selection.order_by_scores``."""
    from ..policies.queue import get_policy

    return scorer_for(text, directory) if is_learned_policy(text) else get_policy(text)
