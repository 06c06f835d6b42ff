"""The Backend interface: what the controller needs from whatever runs jobs.

One controller and one set of policies drive every body: the virtual-time backend
(``coscheduler.backends.virtual``, for tests), the trace simulator, the local host (real
processes in real cgroups), Slurm and Mesos. A backend only translates; it holds no
scheduling policy. It is the controller's only door to the world, so everything here is
plain data from ``coscheduler.model``.

Conventions every backend follows:

- Time is the backend's (``now()``): wall-clock seconds for live bodies, virtual seconds
  for simulated ones.
- ``queued()`` lists jobs that may start now: submitted, not started, all dependencies
  completed. A job whose dependency failed is the backend's to report failed (never left
  waiting forever).
- ``running()`` lists every job holding cores. A guest job (started with ``host_job``)
  runs on cores inside its host's allocation and reports ``host_job``; when its host ends
  first it keeps running on those cores alone and is reported with ``host_job=None`` from
  then on (the controller then gives it its full quota). A host lists its ``guest_jobs``.
  ``quota_fraction`` is the quota last applied (the controller re-asserts what differs).
- ``start`` gang-starts a job on exactly the given allocation; ``set_quota`` sets the CPU
  quota fraction of a running job over its own allocation (1.0 = all its cores). A host
  sharing ``c`` of its ``C`` cores at fraction ``a`` has quota ``1 - a * c / C``.
- ``metrics()`` returns the latest sample per running job; a job with no valid sample is
  simply absent (a sample with NaN cannot even be built: ``MetricsSample`` refuses it).
- ``drain_finished()`` returns each finished job's ``Outcome`` exactly once.
- Failures to act raise ``BackendError`` (any exception is tolerated by the controller,
  but this one says "the request was understood and could not be carried out").
- ``fail(job_id, reason)``: the controller gives up on a queued job (for example after
  repeated start errors): the backend removes it from the queue and reports it in
  ``drain_finished()`` as ``failed`` with the reason, so a job is never silently lost.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .model import (Allocation, InvalidInput, Job, MetricsSample, Node, Outcome, RunningJob,
                    check_finite)


class BackendError(RuntimeError):
    """A backend could not carry out a request (start, set_quota, fail)."""


def check_quota_fraction(job_id: str, q: float) -> float:
    """A job's quota fraction in (0, 1] (a hair above 1 from float sums is 1), else a
    ``BackendError`` naming the job: every backend checks what it is asked to apply."""
    try:
        v = check_finite(q, f"quota fraction of job {job_id}")
    except InvalidInput as exc:
        raise BackendError(str(exc)) from None
    if v is None or not 0.0 < v <= 1.0 + 1e-12:
        raise BackendError(f"quota fraction of job {job_id} must lie in (0, 1], got {q!r}")
    return min(1.0, v)


@runtime_checkable
class Backend(Protocol):
    def now(self) -> float:
        """Current time in seconds (wall clock or virtual)."""
        ...

    def nodes(self) -> list[Node]:
        """The nodes, in first-fit order."""
        ...

    def queued(self) -> list[Job]:
        """Jobs that may start now (submitted, dependencies completed, not started)."""
        ...

    def running(self) -> list[RunningJob]:
        """Jobs holding cores now, hosts and guests."""
        ...

    def metrics(self) -> dict[str, MetricsSample]:
        """The latest valid sample per running job id (absent when unknown)."""
        ...

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        """Gang-start a queued job on ``allocation`` with ``quota_fraction`` of its cores;
        with ``host_job`` it is a guest inside that running job's allocation."""
        ...

    def set_quota(self, job_id: str, quota_fraction: float) -> None:
        """Set a running job's CPU quota fraction over its own allocation, in (0, 1]."""
        ...

    def fail(self, job_id: str, reason: str) -> None:
        """Give up on a queued job: report it failed with ``reason`` in drain_finished."""
        ...

    def drain_finished(self) -> list[Outcome]:
        """Outcomes of jobs that ended since the last call, each exactly once."""
        ...


__all__ = ["Backend", "BackendError"]
