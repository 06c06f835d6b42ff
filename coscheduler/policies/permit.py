"""The Permit step: a last check of a loan ASA_X chose, before the controller carries it out.

The learner samples its lending from a mixture of experts, and with a handful of rounds per
job class its weights hardly move, so a loan that the calibrated interference model says
will slow the host badly can still be drawn (the paper's experts do not look at the guest).
The permit is the Kubernetes scheduler framework's Permit extension point applied to that:
the chosen loan is predicted with the site's calibrated model (``PairExpert.predicted_pair``,
with what the controller knows of both jobs) and vetoed when the host's predicted slowdown
exceeds ``tolerance``. A vetoed loan is not made and teaches the learner nothing; the
guest keeps waiting or asks the next host. It judges the host only, as ASA_X does: a
guest that runs slower than alone still ends sooner than one that keeps waiting. Without
knowledge of the guest's class (never seen) it permits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..backends.interference import CALIBRATED, InterferenceModel
from ..learner import HostState
from ..learner.experts import PairExpert
from ..model import InvalidInput

DEFAULT_TOLERANCE = 0.05   # the paper's co-located slowdown, about 5 %


def check_tolerance(value: object, name: str = "permit tolerance") -> float:
    """A predicted slowdown the host may bear, in [0, 10]; else a named error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or not 0.0 <= value <= 10.0:
        raise InvalidInput(f"{name} must be a slowdown share in [0, 10] (0.05: 5 %), got {value!r}")
    return float(value)


@dataclass
class HostHarmPermit:
    """Permit a loan of quota fraction a unless the host's predicted slowdown exceeds
    ``tolerance`` (see the module docstring)."""

    tolerance: float = DEFAULT_TOLERANCE
    idle_guests: bool = False
    model: InterferenceModel = CALIBRATED
    vetoed: int = 0
    _pair: PairExpert = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.tolerance = check_tolerance(self.tolerance)
        if not isinstance(self.model, InterferenceModel):
            raise InvalidInput("permit: model must be an InterferenceModel")
        self._pair = PairExpert(model=self.model, idle_guests=self.idle_guests)

    def host_slowdown(self, state: HostState, fraction: float) -> float | None:
        pair = self._pair.predicted_pair(state, fraction)
        return None if pair is None else pair[0]

    def __call__(self, state: HostState, fraction: float) -> bool:
        s = self.host_slowdown(state, fraction)
        if s is None or s <= self.tolerance:
            return True
        self.vetoed += 1
        return False


__all__ = ["DEFAULT_TOLERANCE", "HostHarmPermit", "check_tolerance"]
