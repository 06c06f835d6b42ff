"""``cosched bench``: benchmarks that print figures (medians, ratios measured side by side)."""

from __future__ import annotations

import click

from . import LazyGroup

BENCHES = {
    "learner": "learner:learner",
    "simulator": "simulator:simulator",
    "agent": "agent:agent",
    "controller": "controller:controller",
    "learned": "learned:learned",
    "multi": "multi:multi",
    "mesos": "mesos:mesos",
}


@click.group(cls=LazyGroup, lazy=BENCHES, package="coscheduler.bench")
def bench() -> None:
    """Measure the hot paths against DESIGN.md's budgets."""
