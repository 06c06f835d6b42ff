"""Files the package ships (models, templates, traces) as real paths, through importlib.resources.

Installed from a wheel or a checkout, a package's files are plain files and ``files()`` hands
back a path to them. From a zipped install they are copied out once to a temporary folder
that lives as long as the process (``as_file``), so callers can always open a ``Path``.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from contextlib import ExitStack
from importlib.resources import as_file, files
from importlib.resources.abc import Traversable
from pathlib import Path

_KEEP = ExitStack()
atexit.register(_KEEP.close)


def resource(package: str, *parts: str) -> Traversable:
    """The shipped file or folder ``parts`` of ``package`` (it may not exist)."""
    node = files(package)
    for p in parts:
        node = node.joinpath(p)
    return node


def resource_path(package: str, *parts: str) -> Path:
    """A shipped file as a real ``Path`` (kept for the life of the process)."""
    node = resource(package, *parts)
    if isinstance(node, Path):
        return node
    return _KEEP.enter_context(as_file(node))


def resource_dir(package: str, *parts: str) -> Path:
    """A shipped folder as a real ``Path``; from a zipped install its files are copied out
    (``as_file`` takes folders only from Python 3.12)."""
    node = resource(package, *parts)
    if isinstance(node, Path):
        return node
    out = Path(_KEEP.enter_context(tempfile.TemporaryDirectory(prefix="cosched-res-")))
    if node.is_dir():
        for child in node.iterdir():
            if child.is_file():
                with as_file(child) as p:
                    shutil.copy2(p, out / child.name)
    return out
