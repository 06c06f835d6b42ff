"""Which bodies ``cosched run --backend NAME`` can drive: name -> factory.

A body registers its factory as an entry point in the ``coscheduler.backends`` group of its
distribution's metadata (this project's own, Slurm and Mesos, in pyproject.toml):

    [project.entry-points."coscheduler.backends"]
    slurm = "slurm_plugin.connect:backend_from_options"

A factory takes the command line's options as a plain dict (every option of ``cosched run``;
each backend reads the ones it needs and ignores the rest) and returns a
``coscheduler.backend.Backend``. Factories are imported only when chosen, so a body whose
dependencies are missing does not break the others, and the core imports no body.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .. import plugins
from ..backend import Backend

GROUP = "coscheduler.backends"


def backend_names() -> list[str]:
    return plugins.names(GROUP)


def factory(name: str) -> Callable[[Mapping[str, Any]], Backend]:
    return plugins.load(GROUP, name, "backend")


def make_backend(name: str, options: Mapping[str, Any]) -> Backend:
    return factory(name)(options)


__all__ = ["GROUP", "backend_names", "factory", "make_backend"]
