"""Which jobs share the learner's weights: the class granularity (pure).

Algorithm 1 keeps expert weights per class, and a class learns only from its own
decisions: a fine class (one per job size and stage) may see too few outcomes to close a
round; a coarse one pools jobs that behave alike. The experts already see the host's
state (CPU, memory, stage type, elapsed time, Hp), so a class only has to group jobs
whose *best expert* is the same, not jobs in the same state.

Job classes are paths (``montage/mProject``, ``user/executable``); the granularities
below cut them:

- ``job``: the job's own class (the default everywhere; a Slurm site's user/executable);
- ``prefix:N``: the first N segments of the class (``montage/mProject`` -> ``montage`` with
  N = 1: one class per workflow kind).
"""

from __future__ import annotations

from typing import Callable

from ..model import InvalidInput, Job

GRANULARITIES = ("job", "prefix:N")


def job_class_of(job: Job) -> str:
    """The job's own class."""
    return job.job_class


def class_prefix(job_class: str, segments: int) -> str:
    """The first ``segments`` path segments of a class (all of it if it has fewer)."""
    return "/".join(job_class.split("/")[:segments])


def class_key(granularity: str) -> Callable[[Job], str]:
    """The learner's class of a host job under ``granularity`` (see the module docstring)."""
    g = granularity.strip() if isinstance(granularity, str) else granularity
    if g == "job":
        return job_class_of
    if isinstance(g, str) and g.startswith("prefix:"):
        try:
            n = int(g.split(":", 1)[1])
        except ValueError:
            n = 0
        if n >= 1:
            return lambda job: class_prefix(job.job_class, n)
    raise InvalidInput(f"class granularity must be 'job' or 'prefix:N' with N >= 1, "
                       f"got {granularity!r}")


__all__ = ["GRANULARITIES", "class_key", "class_prefix", "job_class_of"]
