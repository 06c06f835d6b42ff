"""Garbage collection around a controller pass.

A pass makes many short-lived-looking objects that in fact stay (records, the controller's
state). Left to CPython's schedule, young-generation collections scan them again and again.
So the controller runs its pass with the collector off and then promotes everything young
to the oldest generation at once (gc.freeze then gc.unfreeze, as the gc module documents
them). Promoted objects bypass CPython's own rule for full collections, so this module
decides when to collect in full, with the same two aims CPython has: memory held by dead
reference cycles stays bounded, and the collector's cost stays a small share of the time.

A full collection is due when
- at least ``min_passes`` passes ran and the time since the last full collection is at least
  the last one's cost divided by ``max_share``, or
- the tracked objects doubled (``growth``) since the last full collection.
The first rule bounds how long a small dead cycle lives (a long-running controller at
1 pass/s collects about every minute); its cost term keeps a simulator, whose passes take
microseconds of simulated hours, from spending most of its time in full collections of a
large heap (measured: 39 collections of 31-43 ms in a 2.2 s `simulate paper` run). The
second is a safety valve against garbage piling up between them. It is looser than
CPython's own 25 % on purpose: a cold pass over 10,000 queued and 10,000 running jobs
makes about 100,000 objects, all alive (decisions, candidates), and at 25 % each such pass
paid a 170 ms full collection that found nothing.
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
    growth: float = 1.0
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    passes: int = 0
    live_after_last: int = 0
    grown: int = 0
    last_end: float | None = None
    last_cost_s: float = 0.0

    def due(self, live: int, now: float) -> bool:
        """``live``: the tracked objects now (an estimate, see ``after_pass``)."""
        if self.live_after_last and live > self.live_after_last * (1.0 + self.growth):
            return True
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
        if not self.live_after_last:
            self.live_after_last = self._tracked()
        # The youngest generation's count is the tracked objects made minus those freed
        # since it was last emptied (freeze empties it): the growth, in O(1). Counting the
        # objects themselves (gc.get_freeze_count) walks them all, which is what a full
        # collection costs, so that is done only after one.
        self.grown += gc.get_count()[0]
        gc.freeze()
        gc.unfreeze()
        self.passes += 1
        now = self.clock()
        if not self.due(self.live_after_last + self.grown, now):
            return False
        gc.collect()
        end = self.clock()
        self.passes, self.grown = 0, 0
        self.last_end, self.last_cost_s = end, end - now
        self.live_after_last = self._tracked()
        return True

    @staticmethod
    def _tracked() -> int:
        gc.freeze()
        try:
            return gc.get_freeze_count()
        finally:
            gc.unfreeze()


# One per process: the collector is the process's.
FULL_COLLECTIONS = FullCollections()


def promote_young() -> bool:
    """After a pass: ``FULL_COLLECTIONS.after_pass()``."""
    return FULL_COLLECTIONS.after_pass()
