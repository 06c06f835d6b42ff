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

    def summary(self) -> dict:
        d = asdict(self)
        del d["runtimes"]
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
               on_tick: Callable[[str, LocalBackend, Controller], None] | None = None) -> PolicyRun:
    """Run ``jobs`` live under ``policy`` until every job ended; returns the measurements."""
    recorder = recorder if recorder is not None else MemoryRecorder()
    workdir.mkdir(parents=True, exist_ok=True)
    with LocalBackend(nodes, workdir, cpus=cpus) as backend:
        for job in jobs:
            backend.submit(job)
        if policy in ("asax", "asa_x"):
            controller = Controller.from_recorder(backend, recorder, "asax",
                                                  learner_config=LearnerConfig(seed=seed))
        else:
            controller = Controller(backend, make_policy(policy), recorder)
        while not backend.idle():
            controller.step()
            if on_tick is not None:
                on_tick(policy, backend, controller)
            time.sleep(tick_s)
        controller.step()   # drain the last outcomes into the learner
        return _measure(policy, jobs, backend)


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
