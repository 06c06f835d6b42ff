"""Garbage collection around a controller pass.

A pass makes many short-lived-looking objects that in fact stay (records, the controller's
state). Left to CPython's schedule, young-generation collections scan them again and again.
So the controller runs its pass with the collector off and then promotes everything young
to the oldest generation at once (gc.freeze then gc.unfreeze, as the gc module documents
them). Promoted objects bypass CPython's own rule for full collections, so this module
decides when to collect in full: after at least ``min_passes`` passes, and only once the
time since the last full collection is at least its cost divided by ``max_share``.

For a long-running controller at 1 pass/s that is every 64 passes, as before this rule
existed: a dead reference cycle lives about a minute. The cost term is for the simulator,
whose passes take microseconds of simulated hours: every 64 passes meant 39 full
collections of 31-43 ms of a heap holding scikit-learn in one default `simulate paper`
(36 runs, 2.2 s), most of its time. Now it makes 1-2.

Not done: a memory-growth trigger like CPython's (its oldest generation at 25 % growth).
The cheap estimate, the youngest generation's count summed over passes, counts objects
freed while that count is at zero as alive, so it fired on long-gone garbage (seen: every
second cold pass of `cosched bench controller` at 10k x 10k, 205-247 ms each); an exact
count (gc.get_freeze_count) walks every object, 14 ms a pass at that size.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class FullCollections:
    """When to collect in full after promoting a pass's objects (module docstring)."""

    min_passes: int = 64
    max_share: float = 0.02
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    passes: int = 0
    last_end: float | None = None
    last_cost_s: float = 0.0

    def due(self, now: float) -> bool:
        if self.passes < self.min_passes:
            return False
        if self.last_end is None:
            return True
        return now - self.last_end >= self.last_cost_s / self.max_share

    def after_pass(self) -> bool:
        """Promote what is young; collect in full when due. True when it collected. Nothing
        is done when something else froze objects on purpose (a pre-fork server's
        gc.freeze)."""
        if gc.get_freeze_count() != 0:
            return False
        gc.freeze()
        gc.unfreeze()
        self.passes += 1
        now = self.clock()
        if not self.due(now):
            return False
        gc.collect()
        end = self.clock()
        self.passes = 0
        self.last_end, self.last_cost_s = end, end - now
        return True


# One per process: the collector is the process's.
FULL_COLLECTIONS = FullCollections()


def promote_young() -> bool:
    """After a pass: ``FULL_COLLECTIONS.after_pass()``."""
    return FULL_COLLECTIONS.after_pass()
