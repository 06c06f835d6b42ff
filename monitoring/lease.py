"""The fail-safe lease keeper: every quota the controller sets expires unless renewed.

A controller that dies, hangs or loses the network stops renewing; when a lease lapses the
agent gives the job its full quota back and records why. Deadlines run on the monotonic
clock so that a wall-clock jump can neither shorten nor extend a lease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from coscheduler.model import InvalidInput, check_finite

DEFAULT_MAX_LEASE_S = 3600.0


@dataclass(frozen=True)
class Lease:
    job_id: str
    cpu_fraction: float
    lease_s: float
    granted_mono: float
    granted_wall: float

    @property
    def deadline_mono(self) -> float:
        return self.granted_mono + self.lease_s

    @property
    def deadline_wall(self) -> float:
        return self.granted_wall + self.lease_s

    def expiry_reason(self) -> str:
        return (f"lease expired: cpu_fraction {self.cpu_fraction:g} was granted for "
                f"{self.lease_s:g} s and not renewed; full quota restored")


class LeaseKeeper:
    """Leases by job id. Not thread-safe by itself: the agent calls it under its lock."""

    def __init__(self, max_lease_s: float = DEFAULT_MAX_LEASE_S,
                 clock=time.monotonic, wall_clock=time.time, *, min_lease_s: float = 0.0):
        if not 0 <= min_lease_s <= max_lease_s:
            raise InvalidInput(f"the shortest lease ({min_lease_s:g} s, the agent's tick) must not "
                               f"exceed the longest ({max_lease_s:g} s)")
        self.max_lease_s = max_lease_s
        # a lease shorter than the agent's tick could lapse before the agent ever saw the
        # job under it: refused rather than honoured late
        self.min_lease_s = min_lease_s
        self._clock = clock
        self._wall = wall_clock
        self._leases: dict[str, Lease] = {}

    def check_lease_s(self, value: object) -> float:
        s = check_finite(value, "lease_s")
        if s is None or not 0 < s <= self.max_lease_s or s < self.min_lease_s:
            low = f">= {self.min_lease_s:g} (the agent's tick)" if self.min_lease_s > 0 else "> 0"
            raise InvalidInput(f"lease_s must be {low} and <= {self.max_lease_s:g} seconds, "
                               f"got {str(value)[:40]}")
        return s

    def grant(self, job_id: str, cpu_fraction: float, lease_s: float) -> Lease:
        """Grant or renew (a renewal is a new grant from now)."""
        lease = Lease(job_id, cpu_fraction, self.check_lease_s(lease_s), self._clock(), self._wall())
        self._leases[job_id] = lease
        return lease

    def revoke(self, job_id: str) -> Lease | None:
        return self._leases.pop(job_id, None)

    def get(self, job_id: str) -> Lease | None:
        return self._leases.get(job_id)

    def expired(self) -> list[Lease]:
        """Remove and return the leases whose deadline has passed."""
        now = self._clock()
        gone = [lease for lease in self._leases.values() if lease.deadline_mono <= now]
        for lease in gone:
            del self._leases[lease.job_id]
        return gone

    def seconds_to_next_expiry(self) -> float | None:
        if not self._leases:
            return None
        return max(0.0, min(lease.deadline_mono for lease in self._leases.values()) - self._clock())

    def __len__(self) -> int:
        return len(self._leases)
