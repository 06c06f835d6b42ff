"""A guest spanning two hosts (issue #19, item 4; ``ControllerConfig.span_hosts``, off by default).

The paper's rule places a guest inside one host, so a guest larger than every host's spare
room waits ("no host large enough": 68-75 % of the waiting at 64 cores in ``cosched
simulate paper``). A parallel stage is a bag of independent tasks, so it can run as two
parts, each a guest of its own host: ``split`` cuts the stage into two jobs that share its
tasks in proportion to their cores. Each part is an ordinary guest (its own quota, its own
learner decision, its loss observed at its host's end); the stage is done when both parts
are (the backend reports the stage's outcome then: ``VirtualBackend.split``).

The split is static: a part that runs slower does not hand tasks to the other, so the stage
ends with its slower part (a task farm spanning both hosts would balance; this is the
cautious version of the rule). Pure: plain jobs in, plain jobs out.
"""

from __future__ import annotations

from dataclasses import replace

from ..model import InvalidInput, Job, StageType

PART_SUFFIXES = (".span1", ".span2")


def can_span(job: Job) -> bool:
    """Whether ``job`` may run as two parts: a parallel stage of at least two cores and two
    tasks, on one node (a part is placed inside one host's cores on one node)."""
    return (job.stage_type is StageType.PARALLEL and job.cores >= 2 and job.tasks >= 2
            and job.nodes == 1 and not job.job_id.endswith(PART_SUFFIXES)
            and len(job.job_id) + len(PART_SUFFIXES[0]) <= 128)   # (a part's id is valid)


def split(job: Job, first_cores: int) -> tuple[Job, Job]:
    """The two parts of ``job``: ``first_cores`` cores and the rest, its tasks shared in
    proportion (at least one each), the same walltime, class, workflow and parents."""
    if not can_span(job):
        raise InvalidInput(f"job {job.job_id} cannot span two hosts: only a parallel stage of "
                           ">= 2 cores and >= 2 tasks on one node can")
    if isinstance(first_cores, bool) or not isinstance(first_cores, int) \
            or not 1 <= first_cores < job.cores:
        raise InvalidInput(f"job {job.job_id}: a part's cores must lie in 1..{job.cores - 1}, "
                           f"got {first_cores!r}")
    tasks1 = min(job.tasks - 1, max(1, round(job.tasks * first_cores / job.cores)))
    return (replace(job, job_id=job.job_id + PART_SUFFIXES[0], cores=first_cores,
                    tasks=tasks1),
            replace(job, job_id=job.job_id + PART_SUFFIXES[1], cores=job.cores - first_cores,
                    tasks=job.tasks - tasks1))


def parent_of(job_id: str) -> str | None:
    """The stage a part belongs to, or None when ``job_id`` is not a part."""
    for suffix in PART_SUFFIXES:
        if job_id.endswith(suffix):
            return job_id[:-len(suffix)]
    return None


__all__ = ["PART_SUFFIXES", "can_span", "parent_of", "split"]
