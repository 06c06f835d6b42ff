"""Beyond the paper: does the I/O-aware expert keep two I/O-heavy stages apart? (virtual time)

A workload made to ask the question: half of the stage jobs are Montage's mProject (waits on
files 60 % of its time, about 40 MB/s), half Statistics' partial (waits on messages, no file
I/O), all 16-core, queued at once on a 64-core cluster, so that most of them can only start
as guests. Under the calibrated interference model (``interference.CALIBRATED``: two jobs
waiting on the same storage slow each other, k_io fitted on real disk-bound probes), a
Montage guest in a Montage host costs both far more than a Statistics guest does.

ASA_X runs it ``repeat`` times, its learning carried over, once with the paper's four
experts (and the fitted one) and once with the I/O expert added; per repetition we count the
pairs of two I/O-heavy stages, the mean slowdown of the I/O-heavy stages (runtime over
alone - 1, co-located or not) and the I/O expert's weight in the Montage hosts' class.
Pure: the controller and the virtual backend, no I/O.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Sequence

from ..backends.interference import CALIBRATED, InterferenceModel
from ..backends.virtual import Profile, VirtualBackend
from ..controller import Controller, ControllerConfig
from ..controller.usage import ClassUsage
from ..learner import LearnerConfig
from ..learner.classes import class_key
from ..model import InvalidInput, Job
from ..recorder import MemoryRecorder

IO_HEAVY = 0.3
CORES = 16
CLUSTER = 64


@dataclass
class IoRun:
    """One repetition with one expert set."""

    experts: tuple[str, ...]
    repeat: int
    io_pairs: int
    other_pairs: int
    io_heavy_slowdown: float          # mean over every I/O-heavy stage (0 when not slowed)
    mean_slowdown: float              # over every co-located stage
    makespan_s: float
    io_weight: float | None           # the I/O expert's weight in the "montage" class after it

    def as_json(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v)
                for k, v in dataclasses.asdict(self).items()}


def io_workload(jobs: int = 24, scale: float = 1.0, tag: str = "io") -> list[tuple[Job, Profile]]:
    """Alternating Montage mProject and Statistics partial stage jobs on 16 cores."""
    from coscheduler.workloads.jobs import workflow_jobs
    from coscheduler.workloads.profile import stage_profile

    out = []
    kinds = (("montage", "mProject"), ("statistics", "partial"))
    for i in range(jobs):
        wf, stage = kinds[i % 2]
        prof = stage_profile(wf, stage, CORES, scale)
        [job] = [j for j in workflow_jobs(wf, CORES, scale, 0.0, f"{tag}.{wf}-{i}")
                 if j.job_id.endswith(f".{stage}")]
        job = dataclasses.replace(job, depends_on=(), job_class=f"{wf}/{stage}/{CORES}",
                                  submit_time=0.0)
        out.append((job, Profile(prof.runtime_s, prof.cpu_util, prof.mem_share * 100.0,
                                 io_share=prof.io_share, membw_share=prof.membw_share,
                                 io_mb_s=prof.io_mb_s)))
    return out


def run_io(experts: Sequence[str], repeat: int = 6, seed: int = 0, jobs: int = 24,
           scale: float = 1.0, model: InterferenceModel = CALIBRATED) -> list[IoRun]:
    """``repeat`` runs of the I/O workload under ASA_X with ``experts`` beside the paper's."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidInput(f"repeat must be an integer >= 1, got {repeat!r}")
    recorder, usage = MemoryRecorder(), ClassUsage()
    out = []
    for k in range(repeat):
        workload = io_workload(jobs, scale, tag=f"io{k}")
        backend = VirtualBackend({"n1": CLUSTER}, kill_at_walltime=False, model=model)
        for job, prof in workload:
            backend.submit(job, prof)
            if recorder.alone_runtime(job.job_class) is None:
                recorder.record_alone_runtime(job.job_class, prof.alone_runtime_s)
            if usage.expected(job.job_class) is None:
                usage.add(job.job_class, prof.cpu_util * 100.0, prof.mem_percent, prof.io_mb_s)
        position = {job.job_id: i for i, (job, _) in enumerate(workload)}
        ctl = Controller.from_recorder(
            backend, recorder, "asax",
            learner_config=LearnerConfig(seed=seed + k, extra_experts=tuple(experts)),
            queue_order=lambda js, now: sorted(js, key=lambda j: position[j.job_id]),
            config=ControllerConfig(decline_cooldown_s=30.0 * scale), class_of=class_key("prefix:1"),
            usage=usage)
        makespan = backend.run_until_idle(ctl, tick_s=10.0 * scale)
        alone = {job.job_id: prof.alone_runtime_s for job, prof in workload}
        heavy = {job.job_id for job, prof in workload if prof.io_share >= IO_HEAVY}
        runtime = {o.job_id: o.runtime_s for o in backend.history}
        pairs = [(j, h) for _, j, h in backend.starts if h is not None]
        shared = {x for p in pairs for x in p}
        slow = {j: runtime[j] / alone[j] - 1.0 for j in runtime}
        learner = ctl.learner
        weight = None
        if "io" in learner.expert_names and "montage" in learner.known_classes():
            weight = learner.weights("montage")["io"]
        out.append(IoRun(
            experts=tuple(experts), repeat=k,
            io_pairs=sum(1 for j, h in pairs if j in heavy and h in heavy),
            other_pairs=sum(1 for j, h in pairs if not (j in heavy and h in heavy)),
            io_heavy_slowdown=statistics.fmean(max(0.0, slow[j]) for j in heavy),
            mean_slowdown=statistics.fmean(slow[j] for j in shared) if shared else 0.0,
            makespan_s=makespan, io_weight=weight))
    return out


def compare(repeat: int = 6, seed: int = 0, jobs: int = 24) -> dict[str, list[IoRun]]:
    """The paper's experts alone against the same plus the I/O expert."""
    return {"paper": run_io((), repeat, seed, jobs), "paper+io": run_io(("io",), repeat, seed, jobs)}


__all__ = ["IoRun", "compare", "io_workload", "run_io"]
