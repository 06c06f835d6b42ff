"""Hand-written inspectors that a SchedInspector network can be warm-started from
(``cosched train inspector --imitate NAME``), read off the observation rows alone so that
the batched and the reference environments play them alike. Pure numpy.

``reject-blocked``: reject the base policy's pick when it cannot start on the free nodes
now (the ``runnable`` feature is low), so that a job behind it that fits may start; the
environment's rejection limit and retry delay still apply. The lublin_256 inspectors
found rejections of this kind by themselves (and gain more than the rule alone does
there); on HPC2N and CTC-SP2, trained from scratch, they settled on accepting (nearly)
always. ``policies.selection.RejectBlocked`` is the same rule on a ``ChoiceView``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..model import InvalidInput
from .features import INSPECTOR_FEATURES

_RUNNABLE = INSPECTOR_FEATURES.index("runnable")


def reject_blocked(rows: np.ndarray) -> np.ndarray:
    """Per observation row, 1 (reject) when the pick cannot start now, else 0 (accept)."""
    return (np.asarray(rows)[:, _RUNNABLE] < 0.5).astype(np.int64)


INSPECTOR_TEACHERS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "reject-blocked": reject_blocked,
}


def inspector_teacher(name: str) -> Callable[[np.ndarray], np.ndarray]:
    try:
        return INSPECTOR_TEACHERS[name]
    except KeyError:
        raise InvalidInput(f"unknown inspector teacher {name!r}; valid: "
                           f"{', '.join(INSPECTOR_TEACHERS)}") from None


__all__ = ["INSPECTOR_TEACHERS", "inspector_teacher", "reject_blocked"]
