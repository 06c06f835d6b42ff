"""The demo's live runs: the same jobs under one co-allocation policy on the local backend.

What is measured (``coscheduler.demo.PolicyRun``; its docstring says how) comes from the
backend's own records: kernel CPU time, start and end times, quota log.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

from coscheduler.controller import Controller, ControllerConfig
from coscheduler.controller.hosts import seconds_by_refusal
from coscheduler.controller.usage import ClassUsage
from coscheduler.demo import DEMO_NODES, PolicyRun
from coscheduler.experiments import paper as paper_exp
from coscheduler.learner import LearnerConfig
from coscheduler import outputs
from coscheduler.model import Job
from coscheduler.policies.coalloc import make_policy
from coscheduler.recorder import MemoryRecorder, Recorder

from .local import LocalBackend


def run_policy(policy: str, jobs: list[Job], workdir: Path, *,
               nodes: dict[str, int] = DEMO_NODES, recorder: Recorder | None = None,
               seed: int = 0, tick_s: float = 0.5, cpus: float | None = None,
               on_tick: Callable[[str, LocalBackend, Controller], None] | None = None,
               usage: ClassUsage | None = None, scale: float = 1.0) -> PolicyRun:
    """Run ``jobs`` live under ``policy`` until every job ended; returns the measurements.
    ``usage``: what each job class uses alone, shared between runs (space sharing, which
    runs first, teaches ASA_X's lending rule its guests' demand). ``scale``: the jobs'
    work relative to the paper's workflows; the controller's decline cooldown shrinks with
    it, as in the simulator and the testbed (a whole demo lasts less than the unscaled 30 s,
    so one declined ask would keep that guest from that host for good)."""
    recorder = recorder if recorder is not None else MemoryRecorder()
    outputs.make_output_dir(workdir)
    use_log: list[tuple[float, str, float]] = []
    round_times: list[float] = []
    # explain: each pass says why each waiting job found no host (a dozen jobs: cheap)
    config = ControllerConfig(explain=True,
                              decline_cooldown_s=paper_exp.DECLINE_COOLDOWN_S * scale)
    passes: list[tuple[float, dict[str, str]]] = []
    with LocalBackend(nodes, workdir, cpus=cpus) as backend:
        for job in jobs:
            backend.submit(job)
        if policy in ("asax", "asa_x"):
            controller = Controller.from_recorder(backend, recorder, "asax",
                                                  learner_config=LearnerConfig(seed=seed),
                                                  usage=usage, config=config)
        else:
            controller = Controller(backend, make_policy(policy), recorder, usage=usage,
                                    config=config)
        learner = controller.learner

        def rounds() -> int:
            return 0 if learner is None else sum(learner.class_state(c).rounds
                                                 for c in learner.known_classes())
        seen = rounds()
        while not backend.idle():
            report = controller.step()
            passes.append((report.time, report.refused))
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
        # (space sharing hosts no one: it has nothing to explain)
        run.waited_s_by_reason = {} if policy == "space-sharing" else {
            k: round(v, 2) for k, v in seconds_by_refusal(passes).items()}
        run.timeline = _timeline(policy, jobs, backend, use_log, round_times)
        return run


def _timeline(policy: str, jobs: list[Job], backend: LocalBackend,
              use_log: list[tuple[float, str, float]], round_times: list[float]):
    """The run as plain data for the timeline picture (experiments.timeline)."""
    from coscheduler.experiments.timeline import TimelineJob, from_records

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
