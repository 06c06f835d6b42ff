"""The ``cosched`` command line.

Each command group lives in its own module and is loaded only when used, so that
``cosched --help`` stays fast and a part under construction cannot break the others.
The core's own groups are listed in COMMANDS; a body's groups (``cosched slurm``,
``mesos``, ``testbed``, ``agent``, ``demo``) come from the ``coscheduler.commands`` entry
points of the installed distributions (coscheduler/plugins.py), so the core imports no body.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from .. import __version__, plugins
from ._types import harden

# command name -> "module:attribute" (modules relative to coscheduler.cli)
COMMANDS: dict[str, str] = {
    "experts": "experts:experts",
    "decisions": "decisions:decisions",
    "bench": "bench:bench",
    "simulate": "simulate:simulate",
    "progress": "progress:progress",
    "run": "run:run",
    "workload": "workload:workload",
    "train": "train:train",
    "models": "models:models",
    "calibrate": "calibrate:calibrate",
    "data": "data:data",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use: the core's own
    (``lazy``: name -> "module:attribute" relative to ``package``) and those that bodies
    register in the entry-point group ``entry_group`` (absolute "module:attribute")."""

    def __init__(self, *args, lazy: dict[str, str], package: str, entry_group: str | None = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self._lazy = lazy
        self._package = package
        self._entry_group = entry_group

    def _available(self) -> dict[str, str]:
        # a body's entry point never shadows a core command of the same name
        out = plugins.targets(self._entry_group) if self._entry_group else {}
        for name, target in self._lazy.items():
            module = target.split(":")[0]
            if importlib.util.find_spec(f"{self._package}.{module}") is not None:
                out[name] = f"{self._package}.{target}"
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
        return harden(getattr(importlib.import_module(module), attr))



@click.group(cls=LazyGroup, lazy=COMMANDS, package=__name__, entry_group="coscheduler.commands",
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 80})
@click.version_option(__version__, prog_name="cosched")
def main() -> None:
    """coscheduler: lend idle CPU quota of running HPC jobs to queued ones, learning
    online (ASA_X) which lendings hurt."""
