"""The ``cosched`` command line.

Each command group lives in its own module and is loaded only when used, so that
``cosched --help`` stays fast and a part under construction cannot break the others.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from .. import __version__
from ._types import harden

# command name -> "module:attribute" (modules relative to coscheduler.cli)
COMMANDS: dict[str, str] = {
    "experts": "experts:experts",
    "decisions": "decisions:decisions",
    "bench": "bench:bench",
    "simulate": "simulate:simulate",
    "agent": "agent:agent",
    "progress": "progress:progress",
    "demo": "demo:demo",
    "run": "run:run",
    "workload": "workload:workload",
    "train": "train:train",
    "models": "models:models",
    "testbed": "testbed:testbed",
    "mesos": "mesos:mesos",
    "slurm": "slurm:slurm",
    "calibrate": "calibrate:calibrate",
    "data": "data:data",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy: dict[str, str], package: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._lazy = lazy
        self._package = package

    def _available(self) -> dict[str, str]:
        out = {}
        for name, target in self._lazy.items():
            module = target.split(":")[0]
            if importlib.util.find_spec(f"{self._package}.{module}") is not None:
                out[name] = target
        return out

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._available()))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            return cmd
        target = self._available().get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        # every numeric option bounded at parse time (_types.py)
        return harden(getattr(importlib.import_module(f"{self._package}.{module}"), attr))



@click.group(cls=LazyGroup, lazy=COMMANDS, package=__name__,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80})
@click.version_option(__version__, prog_name="cosched")
def main() -> None:
    """coscheduler: lend idle CPU quota of running HPC jobs to queued ones, learning
    online (ASA_X) which lendings hurt."""
