"""A controller that runs ASA_X loads its fitted experts' library (scikit-learn's trees,
1-2 s) when it starts, not at the first refit inside a pass, where it made the first
10k-job pass three times as long (coscheduler/daemon.py, AsaxLearner.prepare)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_RUN = """
import sys
from coscheduler.bench.controller import _BenchBackend
from coscheduler.daemon import ControllerDaemon
from coscheduler.learner import LearnerConfig
from coscheduler.recorder import MemoryRecorder
before = 'sklearn.tree' in sys.modules
ControllerDaemon(_BenchBackend(0, 1, 0), MemoryRecorder(), sys.argv[1], release_on_exit=False,
                 learner_config=LearnerConfig(fitted_expert=sys.argv[2] == 'fitted'))
print(before, 'sklearn.tree' in sys.modules)
"""


@pytest.mark.parametrize("policy, experts, loaded", [
    ("asax", "fitted", True),          # the default learner has a fitted expert per class
    ("asax", "paper", False),          # the paper's four trees alone need no library
    ("static", "fitted", False),       # nothing learns
])
def test_a_controller_loads_its_experts_library_when_it_starts(policy, experts, loaded):
    out = subprocess.run([sys.executable, "-c", _RUN, policy, experts], capture_output=True,
                         text=True, check=True)
    assert out.stdout.split() == ["False", str(loaded)], out
