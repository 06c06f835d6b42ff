"""The paper's workload shaped for the simulator: its 15 workflows as stage jobs with the
profiles the virtual backend runs them by (from coscheduler.workloads), the cluster's nodes
and the submission order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from ..backends.virtual import Profile
from ..model import InvalidInput, Job
from ..workloads.jobs import SEQUENTIAL_CORES  # (cli/simulate.py reads it here)



@dataclass(frozen=True)
class PaperStage:
    """One stage job of the paper's mix, with the profile the virtual backend runs it by."""

    job: Job
    profile: Profile
    workflow: str     # the workflow instance, e.g. "montage-8"
    kind: str         # the workflow kind, e.g. "montage"



def paper_workload(scale: float = 1.0, tag: str | None = None,
                   sequential_cores: str = "workflow", *, copies: int = 1,
                   mix: Sequence[tuple[str, int]] | None = None,
                   core_speed: float = 1.0) -> list[PaperStage]:
    """The paper's 46 stage jobs in submission order, all submitted at t = 0.

    ``tag`` goes in front of every job id (``{tag}.montage-8.mProject``) so that runs
    sharing one state database never reuse a job id. ``sequential_cores``: "workflow" (the
    paper's: every stage is a job asking for its workflow's cores; a sequential one keeps
    one of them busy) or "one" (the testbed's jobs: a sequential stage asks for one core).
    ``copies``: the 15 workflows that many times over (``--scale-out``), copy after copy;
    copy i > 0 names its instances ``montage-8.i``. ``mix``: (workflow kind, cores) pairs
    instead of the paper's (the Docker testbed runs it at a fraction of the cores).
    ``core_speed``: what a core of the cluster that runs the jobs' commands is worth (the
    stage programs shrink their CPU work by it; the profiles, and so the simulation, do not
    change)."""
    if sequential_cores not in SEQUENTIAL_CORES:
        raise InvalidInput(f"sequential_cores must be one of {', '.join(SEQUENTIAL_CORES)}, "
                           f"got {sequential_cores!r}")
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise InvalidInput(f"copies (scale-out) must be an integer >= 1, got {copies!r}")
    from coscheduler.workloads.jobs import PAPER_MIX, workflow_jobs
    from coscheduler.workloads.profile import workflow_profiles

    base_mix = tuple(PAPER_MIX if mix is None else mix)
    profiles_of = {(kind, cores): workflow_profiles(kind, cores, scale) for kind, cores in base_mix}
    stages: list[PaperStage] = []
    for copy, (kind, cores) in ((c, m) for c in range(copies) for m in base_mix):
        name = f"{kind}-{cores}" if copy == 0 else f"{kind}-{cores}.{copy}"
        prefix = name if tag is None else f"{tag}.{name}"
        jobs = workflow_jobs(kind, cores, scale, 0.0, prefix, core_speed=core_speed)
        profiles = profiles_of[(kind, cores)]
        for job, prof in zip(jobs, profiles, strict=True):
            held, util = job.cores, prof.cpu_util
            if sequential_cores == "workflow" and job.cores < cores:
                held, util = cores, prof.cpu_util * job.cores / cores
            job = dataclasses.replace(job, job_class=f"{kind}/{prof.stage}/{cores}", cores=held)
            stages.append(PaperStage(job, Profile(
                prof.runtime_s, util, prof.mem_share * 100.0, io_share=prof.io_share,
                membw_share=prof.membw_share, io_mb_s=prof.io_mb_s,
                wait_share=1.0 - prof.cpu_util), name, kind))
    return stages


def cluster_nodes(cluster_cores: object, node_cores: object | None = None,
                  largest_job: int = 64) -> dict[str, int]:
    """The virtual cluster's nodes: one node of ``cluster_cores`` by default, else equal
    nodes of ``node_cores``. Refuses a cluster or node too small for the largest job."""
    if isinstance(cluster_cores, bool) or not isinstance(cluster_cores, int) or cluster_cores < 1:
        raise InvalidInput(f"cluster cores must be a positive integer, got {cluster_cores!r}")
    if cluster_cores < largest_job:
        raise InvalidInput(f"cluster cores {cluster_cores} cannot hold the workload's largest "
                           f"job ({largest_job} cores): give at least {largest_job}")
    if node_cores is None:
        return {"n1": cluster_cores}
    if isinstance(node_cores, bool) or not isinstance(node_cores, int) or node_cores < largest_job:
        raise InvalidInput(f"node cores must be an integer >= {largest_job} (the largest job "
                           f"runs on one node), got {node_cores!r}")
    if cluster_cores % node_cores:
        raise InvalidInput(f"cluster cores {cluster_cores} is not a multiple of node cores "
                           f"{node_cores}")
    return {f"n{i + 1}": node_cores for i in range(cluster_cores // node_cores)}


def submission_order(stages: Sequence[PaperStage]):
    """FCFS by submission position (what Slurm's increasing job ids give), not by job id."""
    position = {s.job.job_id: i for i, s in enumerate(stages)}

    def order(jobs: Sequence[Job], now: float) -> list[Job]:
        return sorted(jobs, key=lambda j: (j.submit_time, position.get(j.job_id, len(position)),
                                           j.job_id))

    return order
