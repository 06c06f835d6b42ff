"""``cosched train``: train learned schedulers with the project's own simulator.

Each trainer lives in its own module (loaded on first use); ``pip install '.[rl]'`` brings
the training framework (JAX + optax); a trained model needs numpy only.
"""

from __future__ import annotations

import click

from . import LazyGroup

TRAINERS = {
    "mrsch": "train_mrsch:mrsch",
}


@click.group(cls=LazyGroup, lazy=TRAINERS, package="coscheduler.cli")
def train() -> None:
    """Train learned schedulers (models are files: weights plus a JSON header)."""
