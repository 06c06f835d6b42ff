"""``cosched bench``: benchmarks that print figures (medians, ratios measured side by side)."""

from __future__ import annotations

import click

from . import LazyGroup

BENCHES = {
    "learner": "learner:learner",
    "simulator": "simulator:simulator",
    "controller": "controller:controller",
    "learned": "learned:learned",
    "multi": "multi:multi",
    "json": "jsonread:jsonread",
    "restart": "restart:restart",
}


# the node agent's and the Mesos framework's benches are theirs (``coscheduler.bench`` entry points)
@click.group(cls=LazyGroup, lazy=BENCHES, package="coscheduler.bench", entry_group="coscheduler.bench")
def bench() -> None:
    """Measure the hot paths against DESIGN.md's budgets."""
