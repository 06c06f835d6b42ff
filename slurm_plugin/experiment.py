"""The scaled-down workflow mix through real Slurm, once per policy (``cosched slurm run-paper-small``).

For each policy: the four workflows (Montage, BLAST, Statistics, Synthetic; one stage job
each per stage, ``afterok`` chains, all submitted at once, opted in) go to the cluster,
the controller (``ControllerDaemon``, the same as ``cosched run``) drives them until every
stage has ended, and what was measured is reported like ``cosched demo`` does
(``coscheduler.demo.PolicyRun``):

- makespan_s: first submission to last end;
- mean_wait_s: start - the time the stage became eligible (its parent done, seen by the
  backend);
- cpu_util: the jobs' kernel CPU seconds (the job wrapper's rusage) over the CPU capacity of
  the cores they held (a guest's cores are its host's and count once, until the host ends);
- mean_slowdown: per job class, mean runtime over its mean under space sharing, minus 1.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from pathlib import Path
from typing import Callable

from coscheduler.controller import ControllerConfig
from coscheduler.daemon import ControllerDaemon
from coscheduler.demo import PolicyRun, add_slowdowns
from coscheduler.experiments import paper as paper_exp
from coscheduler.learner import LearnerConfig
from coscheduler.model import InvalidInput, Job

from .cluster import ClusterState
from .connect import backend_for_cluster
from .submit import SubmitOptions, submit_jobs

log = logging.getLogger("slurm_plugin.experiment")

POLICIES = ("space-sharing", "static", "asax")


def mix_jobs(state: ClusterState, scale: float, tag: str, workflows: dict[str, int] | None = None) -> list[Job]:
    """The small mix sized for the cluster's nodes, on its emulated cores."""
    from coscheduler.workloads.jobs import small_mix

    return small_mix(scale=scale, cores=workflows, node_cores=state.cpus,
                     workdir=Path(state.dir) / "work" / tag, core_speed=min(1.0, state.cpu_per_core),
                     tag=tag)


def run_policy(state: ClusterState, policy: str, *, scale: float = 0.02, recorder=None,
               seed: int = 0, interval_s: float = 1.0, timeout_s: float = 900.0,
               tag: str | None = None, workflows: dict[str, int] | None = None,
               on_pass: Callable[[ControllerDaemon], None] | None = None,
               time_limit_factor: float = 10.0) -> PolicyRun:
    """Submit the mix, drive it with ``policy`` until every stage ended, measure.
    ``time_limit_factor``: Slurm counts time limits in minutes and the scaled stages last
    seconds, so its limit is a safety net (10 x the walltime); ASA_X's losses are measured
    against the walltime itself, which travels in the job's metadata."""
    from coscheduler.recorder import MemoryRecorder

    if policy not in POLICIES:
        raise InvalidInput(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
    tag = tag or f"{time.strftime('%H%M%S')}-{policy}"
    jobs = mix_jobs(state, scale, tag, workflows)
    backend = backend_for_cluster(state)
    t_submit = time.time()
    subs = submit_jobs(state.commands(), jobs, SubmitOptions(
        partition=state.partition, output_dir=state.jobs_dir, usage_dir=state.usage_dir,
        progress_dir=state.progress_dir, time_limit_factor=time_limit_factor))
    ids = {str(s.slurm_job_id): j for s, j in zip(subs, jobs)}
    # The decline cooldown shrinks with the work, as in the simulator and the testbed: the
    # scaled stages last seconds, and an unscaled 30 s would keep a declined guest from that
    # host for the rest of its wait.
    config = ControllerConfig(decline_cooldown_s=paper_exp.DECLINE_COOLDOWN_S * scale)
    daemon = ControllerDaemon(backend, recorder if recorder is not None else MemoryRecorder(),
                              policy, interval_s=interval_s, release_on_exit=False,
                              config=config, learner_config=LearnerConfig(seed=seed), logger=log)
    guest_of: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s

    def finished(d: ControllerDaemon) -> bool:
        for rj in d.controller._last.values():
            if rj.host_job is not None and rj.job_id in ids:
                guest_of.setdefault(rj.job_id, rj.host_job)
        if on_pass is not None:
            on_pass(d)
        done = {o.job_id for o in backend.history}
        return set(ids) <= done or time.monotonic() > deadline

    daemon.run(until=finished)
    left = set(ids) - {o.job_id for o in backend.history}
    for jid in sorted(left):   # timed out: do not leave them to the next policy's run
        try:
            backend.source.cancel(int(jid))
        except Exception:  # noqa: BLE001
            pass
    return measure(policy, ids, backend, guest_of, t_submit, state.cpu_per_core)


def measure(policy: str, ids: dict[str, Job], backend, guest_of: dict[str, str],
            t_submit: float, cpu_per_core: float) -> PolicyRun:
    outcomes = {o.job_id: o for o in backend.history if o.job_id in ids}
    runtimes: dict[str, list[float]] = {}
    cpu_s = 0.0
    for jid, job in ids.items():
        o = outcomes.get(jid)
        if o is not None and o.state == "completed":
            runtimes.setdefault(job.job_class, []).append(o.runtime_s)
        usage = backend.usage(jid, os.getuid())   # (this process submitted them)
        if usage and isinstance(usage.get("cpu_s"), (int, float)):
            cpu_s += float(usage["cpu_s"])
    held = 0.0
    for jid, o in outcomes.items():
        cores = ids[jid].cores
        host = guest_of.get(jid)
        if host is None:
            held += o.runtime_s * cores
        else:   # on its host's cores until the host ended, alone after
            h = outcomes.get(host)
            host_end = h.end_time if h is not None else o.end_time
            held += max(0.0, o.end_time - max(o.start_time, host_end)) * cores
    waits = [o.start_time - backend.eligible_at[int(jid)] for jid, o in outcomes.items()
             if int(jid) in backend.eligible_at and o.start_time >= backend.eligible_at[int(jid)] - 1]
    makespan = max((o.end_time for o in outcomes.values()), default=t_submit) - t_submit
    capacity = held * cpu_per_core
    return PolicyRun(
        policy=policy, makespan_s=round(makespan, 2),
        mean_wait_s=round(statistics.fmean(waits), 2) if waits else 0.0,
        cpu_util=round(cpu_s / capacity, 4) if capacity > 0 else 0.0, mean_slowdown=None,
        jobs=len(ids), completed=sum(1 for o in outcomes.values() if o.state == "completed"),
        coallocations=len(guest_of), runtimes=runtimes)


def run_policies(state: ClusterState, policies: list[str], *, scale: float = 0.02, recorder=None,
                 seed: int = 0, interval_s: float = 1.0, timeout_s: float = 900.0,
                 workflows: dict[str, int] | None = None, dedicated: bool = False,
                 on_pass: Callable[[str, ControllerDaemon], None] | None = None) -> list[PolicyRun]:
    """Each policy in turn on the same cluster. ``dedicated``: for the run, the cluster's
    cgroup gets the CPU weight of dedicated nodes (``cluster.set_cpu_weight``), so that other
    work on the machine cannot starve the emulated nodes below their quotas."""
    from .cluster import set_cpu_weight

    runs = []
    stamp = time.strftime("%H%M%S")
    before = set_cpu_weight(state, 262144) if dedicated else None
    try:
        for p in policies:
            runs.append(run_policy(state, p, scale=scale, recorder=recorder, seed=seed,
                                   interval_s=interval_s, timeout_s=timeout_s, tag=f"{stamp}-{p}",
                                   workflows=workflows,
                                   on_pass=(lambda d, p=p: on_pass(p, d)) if on_pass else None))
    finally:
        if dedicated:
            set_cpu_weight(state, before)
    add_slowdowns(runs)
    return runs


__all__ = ["POLICIES", "measure", "mix_jobs", "run_policies", "run_policy"]
