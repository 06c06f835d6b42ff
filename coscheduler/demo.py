"""The live demo's jobs and figures: the same small workflow mix under each co-allocation policy.

The runs themselves are the local testbed's (testbed/live.py: a fresh local backend per
policy, real processes on emulated nodes, quotas through the node agents), with the same
jobs, all queued at t = 0; here is what the demo runs and how its figures are summarised
(also for the Slurm experiment, slurm_plugin/experiment.py). What is reported comes from
what was measured, never from the policy's expectations:

- makespan_s: first submit to last end (backend clock);
- mean_wait_s: mean of start - the time a stage became eligible (its parents done);
- cpu_util: kernel CPU seconds of all jobs (wait4 rusage) over the CPU capacity of the
  cores they held (a guest's cores are its host's, counted once);
- mean_slowdown: mean over job classes of runtime / runtime of the same class under space
  sharing - 1 (None when space sharing was not run);
- waited_s_by_reason: why eligible jobs found no host while they waited, in job-seconds
  per rule (the controller's ``explain``): why a policy lent nothing is shown, not guessed.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .model import Job

DEMO_NODES = {"n1": 4, "n2": 4}
# The workflows' cores. Chosen by what any co-allocation could gain, not by ASA_X: in
# virtual time at the demo's scale, of the 16 mixes of 2 and 4 cores this one gives the
# oracle (true idle shares lent, no interference) the most (makespan x0.71 of space
# sharing); the mix used before (2/4/2/4, sequential stages on one core) gave it
# nothing (0 loans, x1.00). docs/simulator.md, "The demo's mix".
DEMO_MIX = {"montage": 4, "blast": 2, "statistics": 4, "synthetic": 4}
# Each stage holds its workflow's cores, as Slurm holds a workflow's allocation (the paper's).
DEMO_SEQUENTIAL_CORES = "workflow"
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
    # Job-seconds that eligible jobs waited with no host taking them, by the rule that kept
    # them out (controller.hosts.REFUSALS: "no idle CPU", "no host large enough", ...);
    # None: not measured (a run without the controller's explain), left out of the JSON.
    waited_s_by_reason: dict[str, float] | None = None
    # The run for the timeline picture (experiments.timeline.Timeline), not in the JSON.
    timeline: object | None = field(default=None, repr=False)

    def summary(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("runtimes", "timeline")}
        if d["waited_s_by_reason"] is None:
            del d["waited_s_by_reason"]
        return d


def demo_jobs(scale: float, workdir: Path, nodes: dict[str, int] = DEMO_NODES,
              cpus: float | None = None, tag: str = "demo",
              sequential_cores: str = DEMO_SEQUENTIAL_CORES,
              cores: dict[str, int] | None = None) -> list[Job]:
    """One workflow of each kind sized for the demo's emulated nodes; ``tag`` goes into the
    job ids so that runs sharing a state database never reuse one; ``sequential_cores``:
    what a sequential stage asks for (``workflow_jobs``); ``cores``: each workflow's cores
    (default ``DEMO_MIX``)."""
    from coscheduler.workloads.jobs import small_mix

    real = cpus if cpus is not None else float(len(os.sched_getaffinity(0)))
    per_core = real / sum(nodes.values())
    return small_mix(scale=scale, cores=DEMO_MIX if cores is None else cores,
                     node_cores=max(nodes.values()), workdir=workdir / "shared",
                     core_speed=min(1.0, per_core), tag=tag, sequential_cores=sequential_cores)


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
        measured = [r.waited_s_by_reason for r in per if r.waited_s_by_reason is not None]
        if measured:
            reasons = sorted({k for m in measured for k in m})
            entry["waited_s_by_reason"] = {
                k: round(statistics.median(m.get(k, 0.0) for m in measured), 2) for k in reasons}
        out.append(entry)
    return out
