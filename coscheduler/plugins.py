"""What the bodies add to the core, found through entry points (as pytest finds its plugins).

The core never imports a body. A body's distribution declares, in its packaging metadata,
an entry point in one of these groups, and the core loads it by name when it is used:

    coscheduler.backends    name -> factory(options: Mapping) -> Backend    (cosched run --backend)
    coscheduler.commands    name -> click command or group                  (cosched NAME)
    coscheduler.bench       name -> click command                           (cosched bench NAME)
    coscheduler.submitters  name -> click-free submit function              (cosched workload submit)

This project's own bodies declare theirs in pyproject.toml; a site's body does the same in
its own distribution, with no change to the core. A checkout run without being installed
(``python -m coscheduler`` with the checkout on the path, as the cgroup v2 VM does) has no
packaging metadata: then the project's own entry points are read from its pyproject.toml.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Any

from .model import InvalidInput

GROUPS = ("coscheduler.backends", "coscheduler.commands", "coscheduler.bench",
          "coscheduler.submitters")


@lru_cache(maxsize=None)
def _points(group: str) -> dict[str, EntryPoint]:
    # Metadata is read once per process; the first distribution found wins a name
    # (importlib.metadata lists them in sys.path order, as imports resolve).
    out: dict[str, EntryPoint] = {}
    for ep in [*entry_points(group=group), *_source_tree_points(group)]:
        out.setdefault(ep.name, ep)
    return out


def _source_tree_points(group: str, pyproject: Path | None = None) -> list[EntryPoint]:
    """The project's own entry points from the checkout's pyproject.toml, only when no
    installed distribution named coscheduler carries them ([] otherwise)."""
    try:
        distribution("coscheduler")
        return []
    except PackageNotFoundError:
        pass
    pyproject = pyproject or Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        import tomllib

        table = tomllib.loads(pyproject.read_text())["project"]["entry-points"].get(group, {})
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [EntryPoint(name=str(n), value=str(v), group=group) for n, v in table.items()]


def names(group: str) -> list[str]:
    """The names registered in ``group``, sorted."""
    return sorted(_points(group))


def targets(group: str) -> dict[str, str]:
    """name -> "module:attribute" of every entry point in ``group`` (nothing imported)."""
    return {name: ep.value for name, ep in _points(group).items()}


def load(group: str, name: str, what: str = "plug-in") -> Any:
    """Import and return the object registered as ``name`` in ``group``."""
    ep = _points(group).get(name)
    if ep is None:
        known = ", ".join(names(group)) or "none is installed"
        raise InvalidInput(f"unknown {what} {name!r}; choose from {known}")
    return ep.load()


def forget() -> None:
    """Read the metadata again on the next lookup (after installing a body in this process)."""
    _points.cache_clear()


__all__ = ["GROUPS", "forget", "load", "names", "targets"]
