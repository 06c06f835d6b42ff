"""Shipped models and how a command line names a model (numpy only).

Models shipped with coscheduler live in ``coscheduler/learned/models/*.model``. A
command takes ``rl:NAME`` or ``rl:PATH`` where it takes a queue policy, and
``--inspector NAME|PATH``; a NAME is a shipped model's file stem, anything with a path
separator or an existing file is a path.
"""

from __future__ import annotations

import stat
from pathlib import Path

from ..boundedfile import describe
from ..model import InvalidInput
from ..resources import resource_dir
from .gate import read_verdict, report_path
from .modelfile import MAGIC, ModelError, load_model
from ..policies.queue import get_policy
from ..policies.selection import MAX_REJECTION_TIMES, RejectBlocked
from .selectors import LearnedInspector, LearnedScorer

MODELS_DIR = resource_dir(__package__, "models")   # package data (pyproject.toml)
SUFFIX = ".model"
PREFIX = "rl:"


def shipped(directory: Path = MODELS_DIR) -> list[Path]:
    return sorted(directory.glob(f"*{SUFFIX}")) if directory.is_dir() else []


def list_models(directory: Path = MODELS_DIR) -> list[dict]:
    """``[{"name", "kind", "trace", "metric", "backfill", "path", "gate", ...}]`` of shipped
    models; ``gate`` is the release gate's verdict (``pass``, ``fail``, ``unevaluated``,
    ``broken``), from the validation report beside the file (``gate.py``)."""
    out = []
    for path in shipped(directory):
        try:
            m = load_model(path)
        except ModelError as exc:
            out.append({"name": path.stem, "kind": None, "trace": None, "metric": None,
                        "backfill": None, "path": str(path), "gate": "broken",
                        "error": str(exc)})
            continue
        h = m.header
        verdict, report = read_verdict(path)
        row = {"name": path.stem, "kind": m.kind, "trace": h.get("trace"),
               "gate": verdict, "gate_report": str(report_path(path)) if report else None,
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
        try:
            mode = path.stat().st_mode
        except OSError:
            raise InvalidInput(f"model file not found: {text}") from None
        if not stat.S_ISREG(mode):
            raise InvalidInput(f"model file {text}: not a regular file ({describe(mode)})")
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


HAND_INSPECTOR = "reject-blocked"
MAX_BUDGET = 100_000   # rejections per job: beyond any window a trace holds


def inspector_for(text: str, base: str | None = None,
                  directory: Path = MODELS_DIR) -> LearnedInspector | RejectBlocked:
    """``NAME|PATH`` of an inspector model (``base`` overrides the base policy it was
    trained on), or ``reject-blocked:BASE[:BUDGET]``, the hand-written inspector over a
    heuristic (``policies.selection.RejectBlocked``) with at most BUDGET rejections per
    job (default SchedInspector's 10)."""
    if isinstance(text, str) and text.lower().startswith(HAND_INSPECTOR + ":"):
        return hand_inspector(text, base)
    model = load_model(resolve(text, directory), "inspector")
    return LearnedInspector(model, base=base)


def hand_inspector(text: str, base: str | None = None) -> RejectBlocked:
    """``reject-blocked:BASE[:BUDGET]`` -> the rule (``base`` overrides BASE)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0].lower() != HAND_INSPECTOR:
        raise InvalidInput(f"the hand-written inspector is written {HAND_INSPECTOR}:BASE or "
                           f"{HAND_INSPECTOR}:BASE:BUDGET, got {text[:80]!r}")
    budget = MAX_REJECTION_TIMES
    if len(parts) == 3:
        if not (parts[2].isascii() and parts[2].isdigit()) or not 0 <= int(parts[2]) <= MAX_BUDGET:
            raise InvalidInput(f"{text[:80]!r}: the rejection budget must be an integer "
                               f"from 0 to {MAX_BUDGET}, got {parts[2][:20]!r}")
        budget = int(parts[2])
    return RejectBlocked(get_policy(base or parts[1]), max_rejections=budget)


def resolve_policy(text: str, directory: Path = MODELS_DIR):
    """What a ``--policy`` value names: a heuristic ``QueuePolicy`` (``SJF``) or a learned
    scorer (``rl:NAME|PATH``). For every command that takes a queue policy (the Slurm
    priority hook, ``cosched run``): heuristics keep their key functions, scorers go
    through ``policies.selection.order_by_scores``."""
    return scorer_for(text, directory) if is_learned_policy(text) else get_policy(text)


MANIFEST = MODELS_DIR / "manifest.json"


def manifest_rows() -> list[dict]:
    """Every model file the package ships (learned and multi-resource), one line each: its
    size and SHA-256, the trace it was trained on, the metric, and the validation figure
    behind it (the release gate's report beside a queue model; the validation run in an
    MRSch or scalar model's header). What ``manifest.json`` records (``write_manifest``
    after changing models)."""
    import hashlib

    from ..multi.report import MODELS_DIR as MULTI_DIR

    rows = []
    for package, directory in (("coscheduler.learned", MODELS_DIR),
                               ("coscheduler.multi", MULTI_DIR)):
        for path in shipped(directory):
            data = path.read_bytes()
            rows.append({"name": path.stem, "package": package, "file": f"models/{path.name}",
                         **_provenance(path, data),
                         "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return rows


def _provenance(path: Path, data: bytes) -> dict:
    """trace, metric and validation of one shipped model (None where it has none)."""
    import json

    report = report_path(path)
    if report.is_file():   # a queue model: the release gate's validation report
        r = json.loads(report.read_text())
        held = r.get("heldout") or {}
        return {"trace": r.get("trace"), "metric": r.get("metric"), "backfill": r.get("backfill"),
                "validation": {"model": r.get("model_figure"), "best_heuristic": r.get("best_heuristic"),
                               "heuristic": r.get("best_figure"), "verdict": r.get("verdict"),
                               "heldout": {"model": held.get("model_figure"),
                                           "best_heuristic": held.get("best_heuristic"),
                                           "heuristic": held.get("best_figure"),
                                           "windows": held.get("windows")} if held else None}}
    end = data.find(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):end]) if data.startswith(MAGIC) and end > 0 else {}
    v = header.get("validation") if isinstance(header.get("validation"), dict) else {}
    return {"trace": header.get("trace"), "metric": "mean_slowdown" if v else None,
            "backfill": None, "validation": {"set": header.get("set"),
                                             "model": v.get("mean_slowdown")} if v else None}


def write_manifest(path: Path = MANIFEST) -> Path:
    """``{"models": [...]}`` with one line per model, so that a change shows as one line."""
    import json

    lines = ",\n".join(" " + json.dumps(row) for row in manifest_rows())
    from .. import outputs

    outputs.write_text(path, '{"models": [\n' + lines + "\n]}\n")
    return path
