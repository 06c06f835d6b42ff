"""The live demo: the same small workflow mix run for real under each co-allocation policy.

Each policy gets a fresh local backend (real processes on emulated nodes, quotas through
the node agents) and the same jobs, all queued at t = 0. What is reported comes from what
was measured, never from the policy's expectations:

- makespan_s: first submit to last end (backend clock);
- mean_wait_s: mean of start - the time a stage became eligible (its parents done);
- cpu_util: kernel CPU seconds of all jobs (wait4 rusage) over the CPU capacity of the
  cores they held (a guest's cores are its host's, counted once);
- mean_slowdown: mean over job classes of runtime / runtime of the same class under space
  sharing - 1 (None when space sharing was not run).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .backends.local import LocalBackend
from .controller import Controller
from .controller.usage import ClassUsage
from .learner import LearnerConfig
from .model import Job
from .policies.coalloc import make_policy
from .recorder import MemoryRecorder, Recorder

DEMO_NODES = {"n1": 4, "n2": 4}
DEMO_POLICIES = ("space-sharing", "static", "asax")


@dataclass
class PolicyRun:
    """What one live run measured."""

    policy: str
    makespan_s: float
    mean_wait_s: float
    cpu_util: float
    mean_slowdown: float | None
    jobs: int
    completed: int
    coallocations: int
    # Completed jobs' runtimes by job class (job ids differ between runs; classes repeat).
    runtimes: dict[str, list[float]] = field(default_factory=dict)
    # The run for the timeline picture (experiments.timeline.Timeline), not in the JSON.
    timeline: object | None = field(default=None, repr=False)

    def summary(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("runtimes", "timeline")}
        return d


def demo_jobs(scale: float, workdir: Path, nodes: dict[str, int] = DEMO_NODES,
              cpus: float | None = None, tag: str = "demo") -> list[Job]:
    """One workflow of each kind sized for the demo's emulated nodes; ``tag`` goes into the
    job ids so that runs sharing a state database never reuse one."""
    from testbed.workloads.jobs import small_mix  # workloads live in the testbed

    real = cpus if cpus is not None else float(len(os.sched_getaffinity(0)))
    per_core = real / sum(nodes.values())
    return small_mix(scale=scale, node_cores=max(nodes.values()), workdir=workdir / "shared",
                     core_speed=min(1.0, per_core), tag=tag)


def run_policy(policy: str, jobs: list[Job], workdir: Path, *,
               nodes: dict[str, int] = DEMO_NODES, recorder: Recorder | None = None,
               seed: int = 0, tick_s: float = 0.5, cpus: float | None = None,
               on_tick: Callable[[str, LocalBackend, Controller], None] | None = None,
               usage: ClassUsage | None = None) -> PolicyRun:
    """Run ``jobs`` live under ``policy`` until every job ended; returns the measurements.
    ``usage``: what each job class uses alone, shared between runs (space sharing, which
    runs first, teaches ASA_X's lending rule its guests' demand)."""
    recorder = recorder if recorder is not None else MemoryRecorder()
    workdir.mkdir(parents=True, exist_ok=True)
    use_log: list[tuple[float, str, float]] = []
    round_times: list[float] = []
    with LocalBackend(nodes, workdir, cpus=cpus) as backend:
        for job in jobs:
            backend.submit(job)
        if policy in ("asax", "asa_x"):
            controller = Controller.from_recorder(backend, recorder, "asax",
                                                  learner_config=LearnerConfig(seed=seed),
                                                  usage=usage)
        else:
            controller = Controller(backend, make_policy(policy), recorder, usage=usage)
        learner = controller.learner

        def rounds() -> int:
            return 0 if learner is None else sum(learner.class_state(c).rounds
                                                 for c in learner.known_classes())
        seen = rounds()
        while not backend.idle():
            controller.step()
            for jid, smp in controller.last_samples.items():
                use_log.append((smp.time, jid, smp.cpu_percent / 100.0))
            if rounds() > seen:
                seen = rounds()
                round_times.append(backend.now())
            if on_tick is not None:
                on_tick(policy, backend, controller)
            time.sleep(tick_s)
        controller.step()   # drain the last outcomes into the learner
        if rounds() > seen:
            round_times.append(backend.now())
        run = _measure(policy, jobs, backend)
        run.timeline = _timeline(policy, jobs, backend, use_log, round_times)
        return run


def _timeline(policy: str, jobs: list[Job], backend: LocalBackend,
              use_log: list[tuple[float, str, float]], round_times: list[float]):
    """The run as plain data for the timeline picture (experiments.timeline)."""
    from .experiments.timeline import TimelineJob, from_records

    outcomes = {o.job_id: o for o in backend.history}
    hosts = {jid: host for _, jid, host in backend.starts}
    tl_jobs = [TimelineJob(j.job_id, j.job_class.split("/", 1)[0], outcomes[j.job_id].start_time,
                           outcomes[j.job_id].end_time, j.cores, hosts.get(j.job_id))
               for j in jobs if j.job_id in outcomes and j.job_id in hosts
               and outcomes[j.job_id].end_time > outcomes[j.job_id].start_time]
    # The local backend logs each job's quota at its start too (quota_log).
    return from_records(f"demo, {policy}", tl_jobs, sum(n.cores for n in backend.nodes()),
                        backend.quota_log, None, use_log, round_times)


def _measure(policy: str, jobs: list[Job], backend: LocalBackend) -> PolicyRun:
    outcomes = {o.job_id: o for o in backend.history}
    runtimes: dict[str, list[float]] = {}
    for j in jobs:
        o = outcomes.get(j.job_id)
        if o is not None and o.state == "completed":
            runtimes.setdefault(j.job_class, []).append(o.runtime_s)
    first_submit = min(j.submit_time for j in jobs)
    makespan = max((o.end_time for o in outcomes.values()), default=0.0) - first_submit
    waits = []
    for j in jobs:   # jobs that never became eligible (a parent failed) did not wait
        o, eligible = outcomes.get(j.job_id), backend.usage[j.job_id].eligible_at
        if o is not None and eligible is not None:
            waits.append(o.start_time - eligible)
    capacity = backend.held_core_seconds() * backend.cpu_per_core
    guests = sum(1 for _, _, host in backend.starts if host is not None)
    return PolicyRun(
        policy=policy, makespan_s=round(makespan, 2),
        mean_wait_s=round(statistics.fmean(waits), 2) if waits else 0.0,
        cpu_util=round(backend.cpu_seconds() / capacity, 4) if capacity > 0 else 0.0,
        mean_slowdown=None, jobs=len(jobs),
        completed=sum(1 for o in outcomes.values() if o.state == "completed"),
        coallocations=guests,
        runtimes=runtimes,
    )


def add_slowdowns(runs: list[PolicyRun], baseline: str = "space-sharing") -> None:
    """Fill mean_slowdown: a job class's mean runtime over its mean runtime under
    ``baseline``, minus 1, averaged over the classes that completed in both runs."""
    base = next((r for r in runs if r.policy == baseline), None)
    if base is None:
        return
    for r in runs:
        ratios = [statistics.fmean(rts) / statistics.fmean(base.runtimes[c]) - 1
                  for c, rts in r.runtimes.items() if c in base.runtimes]
        r.mean_slowdown = round(statistics.fmean(ratios), 4) if ratios else None



_FIGURES = ("makespan_s", "mean_wait_s", "cpu_util", "mean_slowdown", "completed", "coallocations")


def summarise_rounds(rounds: list[list[PolicyRun]]) -> list[dict]:
    """One entry per policy (in the order run): the median of each figure over the rounds
    (each round's slowdown against that round's space sharing), and every round's own
    figures in ``runs``, so that the spread between rounds is shown, not hidden."""
    out = []
    for i, first in enumerate(rounds[0]):
        per = [rnd[i] for rnd in rounds]
        entry = {**first.summary(), "runs": [{k: getattr(r, k) for k in _FIGURES} for r in per]}
        for k in _FIGURES:
            vals = [getattr(r, k) for r in per if getattr(r, k) is not None]
            entry[k] = None if not vals else round(statistics.median(vals), 4)
        out.append(entry)
    return out
