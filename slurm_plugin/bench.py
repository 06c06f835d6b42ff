"""``cosched bench slurm``: the Slurm backend's calls to the node agents in one pass, over
many nodes: every agent's job views (``metrics``) and the lease renewals due.

The agents are stand-ins in this process that answer after a fixed round trip
(``--rtt-ms``, a sleep: the wait a real agent's HTTP answer costs over the network), and
Slurm's view is given (no squeue): the figure is the backend's own work and its waits on
the agents. Two runs side by side, medians: the agents asked one after the other
(``agent_threads`` 1, as before) and at once (the default, 16 at a time).
"""

from __future__ import annotations

import json
import statistics
import time

import click

from coscheduler.model import Allocation, Job, RunningJob

from .backend import SlurmBackend


class _NoSlurm:
    """A SlurmSource with nothing to say: the bench gives the backend its view of Slurm."""

    name = "bench"

    def jobs(self):
        return []

    def nodes(self):
        return []

    def layout(self, job_id):
        return None


class _Agent:
    """A node agent that answers after ``rtt_s``: its jobs' views, and quota renewals."""

    def __init__(self, views: list[dict], rtt_s: float):
        self.views, self.rtt_s = views, rtt_s

    def jobs(self) -> list[dict]:
        time.sleep(self.rtt_s)
        return self.views

    def set_quota(self, job_id, cpu_fraction, lease_s, role=None) -> dict:
        time.sleep(self.rtt_s)
        return {}

    def register_job(self, *args, **kwargs):
        raise AssertionError("the bench's jobs are registered already")

    def clear_quota(self, job_id) -> dict:
        return {}


def _backend(nodes: int, jobs: int, lending: int, rtt_s: float, threads: int) -> SlurmBackend:
    names = [f"n{i:05d}" for i in range(nodes)]
    running: list[RunningJob] = []
    views: dict[str, list[dict]] = {n: [] for n in names}
    for i in range(jobs):
        node, jid = names[i % nodes], str(1000 + i)
        running.append(RunningJob(Job(jid, 8, 3600.0, "bench/job", tasks=100),
                                  Allocation(jid, ((node, 8),)), 100.0))
        views[node].append({"job_id": jid, "status": "running", "cores": 8.0,
                            "cpu_percent": 50.0, "mem_percent": 5.0, "tasks_done": 10,
                            "tasks_total": 100, "tasks_per_s": 0.5, "start_time": 100.0,
                            "cpu_fraction": 1.0})
    now = [10_000.0]
    b = SlurmBackend(_NoSlurm(), partition="cosched", lease_s=30.0, clock=lambda: now[0],
                     agents={n: _Agent(views[n], rtt_s) for n in names}, agent_threads=threads)
    b._refresh = lambda force=False: None            # (Slurm's view is the bench's)
    b.running = lambda: running
    b._ours_running = {rj.job_id for rj in running}
    # the first ``lending`` jobs lend under a lease, all due for renewal
    b._quotas = {int(rj.job_id): (0.5, rj.allocation.nodes) for rj in running[:lending]}
    b._roles = {jid: "host" for jid in b._quotas}
    return b


def measure(nodes: int = 250, jobs: int = 1000, lending: int = 200, rtt_ms: float = 1.0,
            repeat: int = 5) -> dict:
    out: dict = {"nodes": nodes, "jobs": jobs, "lending": lending, "rtt_ms": rtt_ms,
                 "repeat": repeat, "runs": {}}
    runs: dict[str, list[tuple[float, float]]] = {"one after the other": [], "at once": []}
    for _ in range(repeat):
        for name, threads in (("one after the other", 1), ("at once", 16)):
            b = _backend(nodes, jobs, lending, rtt_ms / 1e3, threads)
            t0, c0 = time.perf_counter(), time.process_time()
            samples = b.metrics()
            runs[name].append((time.perf_counter() - t0, time.process_time() - c0))
            if len(samples) != jobs or len(b._renewed) != lending:
                raise click.ClickException(f"{name}: {len(samples)} samples of {jobs} jobs, "
                                           f"{len(b._renewed)} renewals of {lending}")
    for name, rs in runs.items():
        out["runs"][name] = {"wall_median_ms": round(statistics.median(w for w, _ in rs) * 1e3, 1),
                             "cpu_median_ms": round(statistics.median(c for _, c in rs) * 1e3, 1)}
    serial, par = (out["runs"][k]["wall_median_ms"] for k in ("one after the other", "at once"))
    out["ratio"] = round(par / serial, 3) if serial else None
    return out


@click.command("slurm")
@click.option("--nodes", type=click.IntRange(1, 100_000), default=250, show_default=True)
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=1000, show_default=True,
              help="Running jobs (8 cores each), spread over the nodes.")
@click.option("--lending", type=click.IntRange(min=0), default=200, show_default=True,
              help="Jobs under a lease, all due for renewal.")
@click.option("--rtt-ms", type=click.FloatRange(0, 1000), default=1.0, show_default=True,
              help="What one call to an agent waits (network round trip and answer).")
@click.option("--repeat", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def slurm(nodes: int, jobs: int, lending: int, rtt_ms: float, repeat: int, as_json: bool) -> None:
    """One pass's calls from the Slurm backend to the node agents (job views and lease
    renewals), the agents asked one after the other and at once, side by side.

    JSON: {"nodes", "jobs", "lending", "rtt_ms", "repeat", "ratio",
    "runs": {"one after the other" | "at once": {"wall_median_ms", "cpu_median_ms"}}}
    """
    if lending > jobs:
        raise click.BadParameter(f"{lending} lending jobs but only {jobs} jobs", param_hint="--lending")
    res = measure(nodes, jobs, lending, rtt_ms, repeat)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(f"Slurm backend, agent calls of one pass: {nodes} nodes, {jobs} jobs, {lending} "
               f"leases renewed, {rtt_ms:g} ms a call; median of {repeat}")
    for name, r in res["runs"].items():
        click.echo(f"  {name:<20} {r['wall_median_ms']:9.1f} ms wall  {r['cpu_median_ms']:8.1f} ms CPU")
    click.echo(f"  at once / one after the other: {res['ratio']}")
