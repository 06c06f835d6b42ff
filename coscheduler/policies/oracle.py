"""The oracle: what any co-allocation policy could reach on a workload (a yardstick, not a
scheduler). It knows every job's true CPU use (the share u of its cores it keeps busy
alone) and lends a guest exactly the host's true idle share, at most what the guest uses,
and no loan under half of that; run it on a backend without interference between
co-located jobs (``cosched simulate paper`` does) and a guest costs its host nothing.
ASA_X's share of the oracle's gain over space sharing says how much of what co-allocation
can give on this workload ASA_X takes.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..model import InvalidInput, Job, check_finite
from .coalloc import NO_COALLOCATION, CoallocationResult, HostCandidate, _choice


class Oracle:
    """Lends each guest its true need from the first host whose true idle share holds at
    least half of it (first-fit order, every host asked)."""

    name = "oracle"
    co_allocates = True
    learner = None
    idle_only = False   # it knows the true use: no revisions needed

    def __init__(self, true_use: Mapping[str, float]):
        self.true_use: dict[str, float] = {}
        for job_id, u in true_use.items():
            v = check_finite(u, f"oracle: true CPU use of job {job_id}")
            if v is None or not 0.0 < v <= 1.0:
                raise InvalidInput(f"oracle: true CPU use of job {job_id} must lie in (0, 1], "
                                   f"got {u!r}")
            self.true_use[job_id] = v

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        need = self.true_use.get(guest.job_id, 1.0) * guest.cores
        asked = []
        for cand in candidates:
            host = cand.host.job
            asked.append(host.job_id)
            idle = (1.0 - self.true_use.get(host.job_id, 1.0)) * host.cores - cand.lent
            give = min(idle, need)
            if give >= 0.5 * need and give > 0:
                return CoallocationResult(_choice(guest, cand, give / guest.cores, None),
                                          tuple(asked))
        return CoallocationResult(None, tuple(asked)) if asked else NO_COALLOCATION


__all__ = ["Oracle"]
