"""Model files: a JSON header and the policy's weights, loaded with numpy alone.

Layout (one file)::

    COSCHED-MODEL 1\\n
    {"kind": "rlscheduler", "features": [...], ...}\\n      <- one line of JSON
    <numpy .npz archive of the weights>

so ``head -2 MODEL`` shows what a model is. The header holds what scoring needs (kind,
features, normalisation, window, mask rule, base policy for an inspector) and what a
reader wants to know (trace, metric, backfill, seed, epochs, training time, the figures
reached). Anything that is not such a file, a model of another kind than the caller
expects, or a feature list this code does not compute gets a ``ModelError`` naming the
file and what differs.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import boundedfile, boundedjson, outputs
from ..model import InvalidInput
from .features import INSPECTOR_FEATURES, RL_FEATURES, Normalisation

MAGIC = b"COSCHED-MODEL 1\n"
KINDS = {"rlscheduler": RL_FEATURES, "inspector": INSPECTOR_FEATURES}
MAX_HEADER = 1 << 20
# A shipped model is about 0.5 MB: a model file, or its weights unpacked, past this is not one.
MAX_MODEL_BYTES = 256 << 20


class ModelError(InvalidInput):
    """A model file that cannot be used; the message names the file."""


@dataclass
class Model:
    """A loaded (or freshly trained) model: header fields and the policy weights."""

    kind: str
    params: dict[str, np.ndarray]
    header: dict = field(default_factory=dict)
    path: str | None = None

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.header["features"])

    @property
    def norm(self) -> Normalisation:
        return Normalisation(**self.header["normalisation"])

    @property
    def name(self) -> str:
        return self.header.get("name") or (Path(self.path).stem if self.path else self.kind)


def write_model_file(header: dict, params: dict[str, np.ndarray], path: str | Path) -> Path:
    """Write a header and weights atomically in the model-file layout (every kind of model,
    MRSch's too, uses it); the header gets the weights' shapes."""
    path = Path(path)
    header = dict(header)
    header["weights"] = {k: list(v.shape) for k, v in sorted(params.items())}
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v, dtype=np.float32) for k, v in params.items()})
    data = MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + buf.getvalue()
    outputs.write_bytes(path, data)
    return path


def read_model_file(path: str | Path) -> tuple[str, dict, dict[str, np.ndarray]]:
    """The file's name, header and weights, the layout checked (magic line, a JSON object
    header, readable weights of the shapes it lists); what the header means is the
    caller's to check. Anything else is a ``ModelError`` naming the file."""
    path = Path(path)
    name = str(path)
    try:   # (a regular file: a FIFO is refused, not waited on; /dev/zero is not read)
        raw = boundedfile.read_regular(path, MAX_MODEL_BYTES, f"{name}: model file")
    except boundedfile.FileUnusable as exc:
        raise ModelError(str(exc)) from None
    except OSError as exc:
        raise ModelError(f"{name}: cannot read model file ({exc.strerror or exc})") from None
    if not raw.startswith(MAGIC):
        raise ModelError(f"{name}: not a coscheduler model file (it does not start with "
                         f"{MAGIC.strip().decode()!r})")
    end = raw.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER)
    if end < 0:
        raise ModelError(f"{name}: the model header line is missing or longer than 1 MiB")
    try:
        header = boundedjson.loads(raw[len(MAGIC):end], max_bytes=MAX_HEADER, what="JSON")
    except ValueError as exc:
        raise ModelError(f"{name}: the model header is not usable ({exc})") from None
    if not isinstance(header, dict):
        raise ModelError(f"{name}: the model header must be a JSON object")
    body = raw[end + 1:]
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as z:   # (its sizes bound the reads)
            unpacked = sum(i.file_size for i in z.infolist())
        if unpacked > MAX_MODEL_BYTES:
            raise ModelError(f"{name}: the weights unpack to {unpacked} bytes, more than the "
                             f"{MAX_MODEL_BYTES} allowed")
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            params = {k: np.asarray(npz[k], dtype=np.float64) for k in npz.files}
    except ModelError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(f"{name}: the model's weights cannot be read ({exc})") from None
    shapes = header.get("weights")
    if not isinstance(shapes, dict) or {k: list(v.shape) for k, v in params.items()} != shapes:
        raise ModelError(f"{name}: the weights do not match the shapes its header lists")
    return name, header, params


def save_model(model: Model, path: str | Path) -> Path:
    """Write ``model`` (policy weights only) atomically to ``path``."""
    header = dict(model.header)
    header["kind"] = model.kind
    header.setdefault("features", list(KINDS[model.kind]))
    return write_model_file(header, model.params, path)


def load_model(path: str | Path, kind: str | None = None) -> Model:
    """Read a model file; ``kind`` (``rlscheduler`` or ``inspector``) if the caller needs one."""
    name, header, params = read_model_file(path)
    found = header.get("kind")
    if found not in KINDS:
        raise ModelError(f"{name}: unknown model kind {found!r}; known kinds: {', '.join(KINDS)}")
    if kind is not None and found != kind:
        raise ModelError(f"{name}: is a {found} model, but a {kind} model is needed here")
    expected = list(KINDS[found])
    features = header.get("features")
    if features != expected:
        raise ModelError(f"{name}: its features {features} differ from the ones this "
                         f"coscheduler computes for a {found} model: {expected}")
    try:
        norm = Normalisation(**header.get("normalisation", {}))
    except TypeError as exc:
        raise ModelError(f"{name}: bad normalisation in the header ({exc})") from None
    for key in ("wait_s", "estimate_s", "retry_after_s", "window"):
        value = getattr(norm, key)
        # features are divided by these: anything else would make them NaN or infinite
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not np.isfinite(value) or value <= 0:
            raise ModelError(f"{name}: normalisation {key} must be a finite number > 0, "
                             f"got {value!r} (the features would be NaN)")
    _check_layers(name, params, len(expected), found)
    return Model(found, params, header, name)


def _check_layers(name: str, params: dict, features: int, kind: str) -> None:
    k, width = 0, features
    while f"pi/{k}/w" in params:
        w, b = params[f"pi/{k}/w"], params.get(f"pi/{k}/b")
        if w.ndim != 2 or w.shape[0] != width or b is None or b.shape != (w.shape[1],):
            raise ModelError(f"{name}: policy layer {k} has shape {w.shape}, expected "
                             f"({width}, n) with a bias of n")
        if not np.all(np.isfinite(w)) or not np.all(np.isfinite(b)):
            raise ModelError(f"{name}: policy layer {k} holds NaN or infinite weights")
        width = w.shape[1]
        k += 1
    outputs = 1 if kind == "rlscheduler" else 2
    if k == 0 or width != outputs:
        raise ModelError(f"{name}: the policy network must end in {outputs} output(s), "
                         f"found {k} layers ending in {width}")
