"""What jobs of each class use when they run unthrottled: what the experts may know of a guest.

A queued job has no metrics of its own yet; jobs of its class that ran before do. Each pass
the controller feeds the latest samples of running jobs that hold their full quota (alone,
or a host lending nothing) into exponential means per class: CPU % of their cores, memory %
of their allocation and file I/O rate. A guest's expectation is its class's means, or
None for a class never seen. Pure: plain data in, plain data out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..model import InvalidInput, MetricsSample, RunningJob, check_finite


_new, _setattr = object.__new__, object.__setattr__
# File I/O no node does (a sanity bound on an agent's reading).
MAX_IO_MB_S = 1e6


@dataclass(frozen=True)
class Expected:
    """A class's usual use: CPU % of its cores, memory % of its allocation, I/O MB/s."""

    cpu_percent: float
    mem_percent: float
    io_mb_s: float | None = None


@dataclass
class ClassUsage:
    """Exponential means per job class (weight ``alpha`` on the newest sample)."""

    alpha: float = 0.3
    means: dict[str, Expected] = field(default_factory=dict)

    def __post_init__(self) -> None:
        a = check_finite(self.alpha, "class usage: alpha")
        if a is None or not 0.0 < a <= 1.0:
            raise InvalidInput(f"class usage: alpha must lie in (0, 1], got {self.alpha!r}")

    def observe(self, running: Iterable[RunningJob], samples: Mapping[str, MetricsSample]) -> None:
        """Fold in the samples of running jobs that are not throttled (full quota, not guests)."""
        for rj in running:
            if rj.host_job is not None or rj.quota_fraction < 1.0 - 1e-9:
                continue
            s = samples.get(rj.job_id)
            if s is None:
                continue
            self.add(rj.job.job_class, s.cpu_percent, s.mem_percent, getattr(s, "io_mb_s", None))

    def add(self, job_class: str, cpu_percent: float, mem_percent: float,
            io_mb_s: float | None = None) -> None:
        """One observation (also how a site seeds what its accounting knows). Readings are
        held to what a guest can use (at most all of its cores and memory, ``MAX_IO_MB_S``):
        they come from node agents, and one absurd sample (1e300 %) would otherwise stay in
        the mean for thousands of passes."""
        cpu_percent, mem_percent = min(cpu_percent, 100.0), min(mem_percent, 100.0)
        if io_mb_s is not None:
            io_mb_s = min(io_mb_s, MAX_IO_MB_S)
        old = self.means.get(job_class)
        if old is None:
            self.means[job_class] = Expected(float(cpu_percent), float(mem_percent), io_mb_s)
            return
        a = self.alpha
        io = io_mb_s if old.io_mb_s is None else (
            old.io_mb_s if io_mb_s is None else (1 - a) * old.io_mb_s + a * io_mb_s)
        # (Expected(...) with its fields set at once: one per running job and pass)
        e = _new(Expected)
        _setattr(e, "__dict__", {"cpu_percent": (1 - a) * old.cpu_percent + a * cpu_percent,
                                 "mem_percent": (1 - a) * old.mem_percent + a * mem_percent,
                                 "io_mb_s": io})
        self.means[job_class] = e

    def expected(self, job_class: str) -> Expected | None:
        return self.means.get(job_class)


__all__ = ["ClassUsage", "Expected"]
