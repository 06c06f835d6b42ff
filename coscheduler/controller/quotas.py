"""The quota a host should hold, given the guests it lends to (pure; stage 1 re-asserts it).

A job that is not a guest holds ``1 - lent / cores`` of its cores' CPU, where ``lent`` is
the sum over its guests of ``guest quota fraction x guest cores``; without guests, 1.0.
"""

from __future__ import annotations

from typing import Mapping

from ..model import InvalidInput, RunningJob
from ..policies.coalloc import host_quota_fraction


def wanted_quota(host: RunningJob, running_by_id: Mapping[str, RunningJob]) -> float:
    """The quota ``host`` should hold, counting only guests that are running and name it as
    their host. Guests that claim more than the host has leave it 1.0: the host comes first."""
    lent = 0.0
    for g in host.guest_jobs:
        grj = running_by_id.get(g)
        if grj is not None and grj.host_job == host.job_id:
            lent += grj.quota_fraction * grj.job.cores
    try:
        return host_quota_fraction(host.job.cores, lent)
    except InvalidInput:
        return 1.0


def quota_without_guest(host: RunningJob, gone_guest: str,
                        running_by_id: Mapping[str, RunningJob]) -> tuple[float, tuple[str, ...]]:
    """When ``gone_guest`` ends: the host's new quota and the guests it keeps (those still
    known to be running). Raises ``InvalidInput`` if those guests claim more than it has."""
    lent = 0.0
    guests = []
    for g in host.guest_jobs:
        grj = running_by_id.get(g)
        if g != gone_guest and grj is not None:
            lent += grj.quota_fraction * grj.job.cores
            guests.append(g)
    return host_quota_fraction(host.job.cores, lent), tuple(guests)
