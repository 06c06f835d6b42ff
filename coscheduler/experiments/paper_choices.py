"""The choices ``cosched simulate paper`` offers on its command line, apart from the
experiment itself (``paper.py`` imports the controller, the backends and the interference
model): the CLI declares its options from here and imports the experiment only when the
command runs, so ``cosched simulate swf`` does not pay for it.
"""

from __future__ import annotations

from ..workloads.jobs import SEQUENTIAL_CORES  # noqa: F401 - re-exported for the CLI

# Interference models by name (``paper.MODELS`` holds them): fitted to real measurements,
# or quotas and memory only.
MODEL_NAMES: tuple[str, ...] = ("calibrated", "fluid")

# ASA_X's optional experts beyond the paper's four (coscheduler.learner.experts).
DEFAULT_EXPERTS: tuple[str, ...] = ("pair",)

# ASA_X's class granularity (coscheduler.learner.classes) over the job classes
# ``{kind}/{stage}/{cores}``: one class per workflow kind, per stage, or per stage and size.
CLASSES: dict[str, str] = {"kind": "prefix:1", "stage": "prefix:2", "size": "job"}
