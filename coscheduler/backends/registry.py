"""Which bodies ``cosched run --backend NAME`` can drive: name -> factory.

A factory takes the command line's options as a plain dict (every option of
``cosched run``; each backend reads the ones it needs and ignores the rest) and returns a
``coscheduler.backend.Backend``. Factories are imported only when chosen, so a body whose
dependencies are missing does not break the others. To add a body: one line here, and its
options in ``coscheduler/cli/run.py``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from ..backend import Backend
from ..model import InvalidInput

# name -> "module:function"
BACKENDS: dict[str, str] = {
    "slurm": "slurm_plugin.connect:backend_from_options",
    "slurmrestd": "slurm_plugin.rest:backend_from_options",
    "mesos": "mesos_framework.connect:backend_from_options",
}


def backend_names() -> list[str]:
    return sorted(BACKENDS)


def factory(name: str) -> Callable[[Mapping[str, Any]], Backend]:
    target = BACKENDS.get(name)
    if target is None:
        raise InvalidInput(f"unknown backend {name!r}; choose from {', '.join(backend_names())}")
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def make_backend(name: str, options: Mapping[str, Any]) -> Backend:
    return factory(name)(options)


__all__ = ["BACKENDS", "backend_names", "factory", "make_backend"]
