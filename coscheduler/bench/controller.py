"""``cosched bench controller``: one controller pass over 1,000 pending x 1,000 running jobs.

DESIGN.md's budget: under 100 ms per pass. The cluster (running / 4 nodes x 32 cores:
250 nodes for the default) is full of 1,000 running 8-core jobs with varied metrics; 1,000
jobs of 1-32 cores (some on two nodes) wait. Nothing fits on free cores, so every pass computes an EASY reservation and,
for the co-allocating policies, searches candidate hosts for every waiting job.

Two figures per policy, medians over ``--repeat`` runs measured side by side:
``cold``: the first pass of a fresh controller (every host may be asked: for ASA_X up to
one learner decision per host); ``steady``: the next pass a second later (hosts now hold
guests or declined and are in cooldown), which is what a running controller mostly does.
The backend is an in-memory stand-in whose calls cost next to nothing, so the figure is the
controller's own work.
"""

from __future__ import annotations

import json
import random
import statistics
import time

import click

from ..controller import Controller
from ..learner import AsaxLearner, LearnerConfig
from ..model import Allocation, Job, MetricsSample, Node, Outcome, RunningJob, StageType
from ..policies.coalloc import Asax, SpaceSharing, Static

CORES_PER_NODE = 32
JOBS_PER_NODE = CORES_PER_NODE // 8


class _BenchBackend:
    """Plain dicts behind the Backend interface: starts and quotas are bookkeeping only."""

    def __init__(self, pending: int, running: int, seed: int):
        rng = random.Random(seed)
        self.t = 10_000.0
        nodes = max(1, -(-running // JOBS_PER_NODE))
        self._nodes = [Node(f"n{i:04d}", CORES_PER_NODE) for i in range(nodes)]
        self._running: dict[str, RunningJob] = {}
        self._metrics: dict[str, MetricsSample] = {}
        classes = ["montage/mProject", "blast/blastall", "stats/summary", "synthetic/burn"]
        slots = [(n.name, k) for n in self._nodes for k in range(JOBS_PER_NODE)]
        for i in range(running):
            node = slots[i % len(slots)][0]
            wt = rng.choice([1800.0, 3600.0, 7200.0])
            job = Job(f"run{i:05d}", cores=8, walltime_s=wt, job_class=classes[i % 4],
                      tasks=rng.randint(10, 500),
                      stage_type=StageType.SEQUENTIAL if i % 3 == 0 else StageType.PARALLEL)
            start = self.t - rng.uniform(0.0, 0.9) * wt
            self._running[job.job_id] = RunningJob(job, Allocation(job.job_id, ((node, 8),)), start)
            self._metrics[job.job_id] = MetricsSample(
                job.job_id, self.t, cpu_percent=rng.uniform(5, 99), mem_percent=rng.uniform(5, 90),
                tasks_done=rng.randint(0, job.tasks - 1), tasks_total=job.tasks,
                tasks_per_s=rng.uniform(0.01, 1.0))
        self._queued: dict[str, Job] = {}
        for i in range(pending):
            cores = rng.choice([1, 2, 4, 4, 8, 8, 16, 32])
            nodes = 2 if cores >= 16 and i % 4 == 0 else 1
            job = Job(f"q{i:05d}", cores=cores, walltime_s=rng.choice([600.0, 1800.0, 3600.0]),
                      job_class=classes[(i * 7) % 4], submit_time=rng.uniform(0, self.t),
                      nodes=nodes, tasks=rng.randint(1, 200))
            self._queued[job.job_id] = job

    def now(self) -> float:
        return self.t

    def nodes(self) -> list[Node]:
        return self._nodes

    def queued(self) -> list[Job]:
        return list(self._queued.values())

    def running(self) -> list[RunningJob]:
        return list(self._running.values())

    def metrics(self) -> dict[str, MetricsSample]:
        return self._metrics

    def start(self, job, allocation, quota_fraction, host_job=None) -> None:
        del self._queued[job.job_id]
        self._running[job.job_id] = RunningJob(job, allocation, self.t, quota_fraction, host_job)
        if host_job is not None:
            h = self._running[host_job]
            self._running[host_job] = RunningJob(h.job, h.allocation, h.start_time,
                                                 h.quota_fraction, None, h.guest_jobs + (job.job_id,))

    def set_quota(self, job_id, quota_fraction) -> None:
        r = self._running[job_id]
        self._running[job_id] = RunningJob(r.job, r.allocation, r.start_time, quota_fraction,
                                           r.host_job, r.guest_jobs)

    def fail(self, job_id, reason) -> None:
        self._queued.pop(job_id, None)

    def drain_finished(self) -> list[Outcome]:
        return []


def _policy(name: str, seed: int):
    if name == "space-sharing":
        return SpaceSharing()
    if name == "static":
        return Static(0.5)
    return Asax(AsaxLearner(LearnerConfig(seed=seed)))


def measure(pending: int = 1000, running: int = 1000, repeat: int = 7, seed: int = 0) -> dict:
    out: dict = {"pending": pending, "running": running,
                 "nodes": max(1, -(-running // JOBS_PER_NODE)),
                 "cores_per_node": CORES_PER_NODE, "repeat": repeat, "target_ms": 100.0,
                 "policies": {}}
    for name in ("space-sharing", "static", "asax"):
        cold, cold_cpu, steady, last = [], [], [], None
        for r in range(repeat):
            backend = _BenchBackend(pending, running, seed)
            ctl = Controller(backend, _policy(name, seed + r))
            t0, c0 = time.perf_counter(), time.process_time()
            first = ctl.step()
            cold.append((time.perf_counter() - t0) * 1e3)
            cold_cpu.append((time.process_time() - c0) * 1e3)
            backend.t += 1.0
            t0 = time.perf_counter()
            second = ctl.step()
            steady.append((time.perf_counter() - t0) * 1e3)
            last = (first, second)
        first, second = last
        out["policies"][name] = {
            "cold_pass_median_ms": round(statistics.median(cold), 2),
            "cold_pass_max_ms": round(max(cold), 2),
            # CPU time of this process: less inflated than wall time on a busy machine.
            "cold_pass_cpu_median_ms": round(statistics.median(cold_cpu), 2),
            "steady_pass_median_ms": round(statistics.median(steady), 2),
            "cold_coallocated": first.coallocated, "cold_declined": first.declined,
            "steady_coallocated": second.coallocated, "steady_declined": second.declined,
            "errors": len(first.errors) + len(second.errors),
        }
    return out


@click.command("controller")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--pending", type=click.IntRange(min=0), default=1000, show_default=True,
              help="Waiting jobs.")
@click.option("--running", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Running jobs.")
@click.option("--repeat", type=click.IntRange(min=1), default=7, show_default=True,
              help="Runs per policy (median).")
@click.option("--seed", default=0, show_default=True)
def controller(as_json: bool, pending: int, running: int, repeat: int, seed: int) -> None:
    """One controller pass over PENDING x RUNNING jobs (budget: 100 ms).

    JSON: {"pending", "running", "nodes", "cores_per_node", "repeat", "target_ms",
    "policies": {name: {"cold_pass_median_ms", "cold_pass_max_ms",
    "cold_pass_cpu_median_ms", "steady_pass_median_ms", "cold_coallocated", "cold_declined",
    "steady_coallocated", "steady_declined", "errors"}}}
    """
    res = measure(pending, running, repeat, seed)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(f"controller pass: {pending} pending x {running} running jobs, "
               f"{res['nodes']} nodes x {CORES_PER_NODE} cores, median of {repeat} "
               f"(budget {res['target_ms']:.0f} ms)")
    for name, r in res["policies"].items():
        click.echo(f"  {name:<14} cold {r['cold_pass_median_ms']:7.2f} ms "
                   f"(cpu {r['cold_pass_cpu_median_ms']:.2f}, max {r['cold_pass_max_ms']:.2f}; "
                   f"{r['cold_coallocated']} guests, {r['cold_declined']} declined)  "
                   f"steady {r['steady_pass_median_ms']:6.2f} ms")
