"""The Slurm priority hook orders a real Slurm queue by a learned model's scores.

A real slurmctld/slurmd pair started by the project's own ``slurm_plugin.cluster.up`` (one
node, one CPU, private ports and folder): a blocker job runs, three jobs wait; the hook's
pass with a learned scorer writes priorities that follow the model's scores, and Slurm
then starts the waiting jobs in that order."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from coscheduler.learned.features import Normalisation
from coscheduler.learned.modelfile import Model
from coscheduler.learned.selectors import LearnedScorer

pytestmark = [pytest.mark.slurm, pytest.mark.root]


def longest_first() -> LearnedScorer:
    """A kernel network set by hand: score = 10 x estimate / 1 h (longest estimate first),
    the opposite of SJF, so the order cannot come from a heuristic by chance."""
    params = {"pi/0/w": np.zeros((6, 1)), "pi/0/b": np.zeros(1)}
    params["pi/0/w"][1, 0] = 10.0
    return LearnedScorer(Model("rlscheduler", params, {
        "normalisation": Normalisation(estimate_s=3600.0).as_dict(), "window": 128,
        "mask": "padding"}), name="rl:longest-first")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (real slurmd)")
    from slurm_plugin import cluster as slurm_cluster

    import shutil
    import tempfile

    # munged wants every folder above its socket searchable by all (pytest's are 0700)
    d = tempfile.mkdtemp(prefix="cosched-rl-slurm-")
    os.chmod(d, 0o755)
    try:
        state = slurm_cluster.up(d, nodes=1, cpus=1, say=lambda m: None)
        try:
            yield state
        finally:
            slurm_cluster.down(d, say=lambda m: None)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_priority_hook_orders_a_real_queue_by_learned_scores(cluster):
    from slurm_plugin.priority import apply_priorities
    from slurm_plugin.source import CommandLineSource

    cmd = cluster.commands()
    tmp_path = cluster.dir

    def submit(name: str, minutes: int, seconds: int) -> int:
        out = cmd.run("sbatch", "--parsable", f"--job-name={name}", f"--time={minutes}",
                      "-n", "1", f"--chdir={tmp_path}", f"--output={tmp_path}/{name}.out",
                      "--wrap", f"sleep {seconds}")
        return int(str(out).strip().split(";")[0])

    source = CommandLineSource(cmd)
    blocker = submit("blocker", 1, 10)
    deadline = time.time() + 30
    while not any(j.job_id == blocker and j.state == "RUNNING" for j in source.jobs()):
        assert time.time() < deadline, "the blocker job did not start"
        time.sleep(0.2)
    short, mid, long_ = submit("short", 2, 1), submit("mid", 5, 1), submit("long", 9, 1)
    rep = apply_priorities(source, longest_first())
    order = [r.job_id for r in rep.ranked]
    assert order == [long_, mid, short], rep.as_dict()
    prio = {j.job_id: j.priority for j in source.jobs() if j.job_id in order}
    assert prio[long_] > prio[mid] > prio[short]
    # Slurm starts them in that order once the blocker ends
    deadline = time.time() + 90
    starts = {}
    while time.time() < deadline and len(starts) < 3:
        for j in source.jobs():
            if j.job_id in order and j.start_time and j.state != "PENDING":
                starts.setdefault(j.job_id, j.start_time)
        time.sleep(0.5)
    assert len(starts) == 3, starts
    assert starts[long_] <= starts[mid] <= starts[short]
    assert blocker not in order


@pytest.mark.parametrize("unused", [0])
def test_rank_jobs_with_a_scorer_and_an_inspector_pure(unused):
    # no Slurm needed: rank_jobs is pure (the markers above still apply to the module)
    from coscheduler.policies.queue import get_policy
    from coscheduler.policies.selection import Inspector, InspectedRanking
    from slurm_plugin.parse import SlurmJob
    from slurm_plugin.priority import machine, rank_jobs

    jobs = [SlurmJob(job_id=i, state="PENDING", priority=1, cpus=1, time_limit_s=t,
                     submit_time=float(i)) for i, t in ((11, 120.0), (12, 300.0), (13, 540.0))]
    ranked = rank_jobs(jobs, longest_first(), 100.0, base=10, machine_state=(0, 1, []))
    assert [r.job_id for r in ranked] == [13, 12, 11]
    assert [r.priority for r in ranked] == [13, 12, 11]

    class RejectFirst(Inspector):
        def accept(self, view):
            return False

    ranking = InspectedRanking(RejectFirst("r", get_policy("FCFS"), max_rejections=1))
    ranked = rank_jobs(jobs, ranking, 100.0, base=10, machine_state=(1, 1, []))
    assert [r.job_id for r in ranked] == [12, 13, 11]
    running = [SlurmJob(job_id=5, state="RUNNING", cpus=2, time_limit_s=60.0, start_time=50.0)]

    class Node:
        cpus, usable = 4, True

    assert machine(running + jobs, [Node()], 100.0) == (2, 4, [(110.0, 2)])
