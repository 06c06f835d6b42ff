"""The oracle: what any co-allocation policy could reach on a workload (a yardstick, not a
scheduler). It knows every job's true CPU use (the share u of its cores it keeps busy
alone) and lends a guest exactly the host's true idle share, at most what the guest uses,
and no loan under a quarter of that; run it on a backend without interference between
co-located jobs (``cosched simulate paper`` does) and a guest costs its host nothing.
ASA_X's share of the oracle's gain over space sharing says how much of what co-allocation
can give on this workload ASA_X takes.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from ..model import InvalidInput, Job, check_finite
from .coalloc import NO_COALLOCATION, CoallocationResult, HostCandidate, _choice
from .span import parent_of


class Oracle:
    """Lends each guest its true need from the first host whose true idle share holds at
    least a quarter of it (first-fit order, every host asked)."""

    name = "oracle"
    co_allocates = True
    learner = None
    idle_only = False   # it knows the true use: no revisions needed

    def __init__(self, true_use: Mapping[str, float], min_share: float = 0.25,
                 alone_runtime: Mapping[str, float] | None = None):
        # Each job's true runtime alone: a loan below the guest's need is made only if the
        # guest still ends within its walltime (slowed until its host ends, then at full
        # speed). Without it, any loan of at least ``min_share`` of the need.
        self.alone = dict(alone_runtime or {})
        # The smallest loan, as a share of the guest's true need: a quarter, below ASA_X's
        # half, so the yardstick also takes the slow-but-early loans ASA_X refuses.
        self.min_share = check_finite(min_share, "oracle: min_share", minimum=0.0, maximum=1.0)
        self.true_use: dict[str, float] = {}
        for job_id, u in true_use.items():
            v = check_finite(u, f"oracle: true CPU use of job {job_id}")
            if v is None or not 0.0 < v <= 1.0:
                raise InvalidInput(f"oracle: true CPU use of job {job_id} must lie in (0, 1], "
                                   f"got {u!r}")
            self.true_use[job_id] = v

    def _use(self, job_id: str) -> float:
        """A job's true use; a part of a split stage (policies.span) uses what its stage does."""
        u = self.true_use.get(job_id)
        if u is None:
            stage = parent_of(job_id)
            u = self.true_use.get(stage, 1.0) if stage is not None else 1.0
        return u

    def _alone(self, job_id: str) -> float | None:
        t = self.alone.get(job_id)
        if t is None and (stage := parent_of(job_id)) is not None:
            t = self.alone.get(stage)
        return t

    def choose(self, guest: Job, candidates: Iterable[HostCandidate], now: float) -> CoallocationResult:
        need = self._use(guest.job_id) * guest.cores
        asked = []
        for cand in candidates:
            host = cand.host.job
            asked.append(host.job_id)
            idle = (1.0 - self._use(host.job_id)) * host.cores - cand.lent
            give = min(idle, need)
            if give >= self.min_share * need and give > 0 and self._in_time(guest, cand, give / need):
                return CoallocationResult(_choice(guest, cand, give / guest.cores, None),
                                          tuple(asked))
        return CoallocationResult(None, tuple(asked)) if asked else NO_COALLOCATION

    def _in_time(self, guest: Job, cand: HostCandidate, speed: float) -> bool:
        """Whether the guest, at ``speed`` (share of its speed alone) until its host ends and
        at full speed after, ends within its walltime (True when the runtimes are unknown)."""
        if speed >= 1.0 - 1e-12:
            return True
        t_guest = self._alone(guest.job_id)
        t_host = self._alone(cand.host.job_id)
        if t_guest is None or t_host is None:
            return True
        s = cand.sample
        done = 0.0 if s is None or not s.tasks_total else s.tasks_done / s.tasks_total
        host_left = (1.0 - done) * t_host
        runtime = (t_guest / speed if speed * host_left >= t_guest
                   else host_left + (t_guest - speed * host_left))
        return runtime <= guest.walltime_s


__all__ = ["Oracle"]
