"""Issue 24, item 1: a node agent restarted without its state finds a running job's
cgroup and adopts it, but takes no quota for it until the job is registered again. The
framework's next lease renewal meets that refusal, registers the job again (its process
is still in its cgroup) and sets the quota, rather than fail the job.

Real node agents writing real cgroups and a real process; the master's side is the
recorded driver of test_mesos_framework.py (no timing: each step is called in order)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from mesos_framework.framework import FrameworkConfig, job_of_task
from test_mesos_framework import job, make, offer, status, step

pytestmark = pytest.mark.root


def test_a_job_its_restarted_node_agent_adopted_is_registered_again_not_failed(
        tmp_path, sleeper, caplog):
    if os.geteuid() != 0:
        pytest.skip("needs root for cgroup quotas")
    from monitoring.agent import NodeAgent
    from mesos_framework.quotas import LocalNodeAgents

    b, d, ctl, clock = make(FrameworkConfig(settle_s=0.0, hold_s=10.0, hold_jitter=0.0,
                                            lease_s=30.0))
    quotas = b.quotas = LocalNodeAgents(tmp_path, cpu_per_core=0.5)
    try:
        b.submit(job("host", cores=2))
        b.resourceOffers(d, [offer("O1", "A1", 2)])
        step(b, ctl)                                    # launched: registered, no pids yet
        (accept,) = d.of("ACCEPT")
        (task,) = accept["accept"]["operations"][0]["launch"]["task_infos"]
        env = {v["name"]: v["value"] for v in task["command"]["environment"]["variables"]}
        for procs in env["COSCHED_CGROUP_PROCS"].split():   # what the task's prologue does
            Path(procs).write_text(str(sleeper.pid))
        b.statusUpdate(d, status(task["task_id"]["value"], "TASK_RUNNING", "A1"))
        assert job_of_task(task["task_id"]["value"])[0] == "host"
        b.set_quota("host", 0.5)
        (aid, old), = quotas.agents.items()
        assert old.job("host")["cpu_fraction"] == 0.5

        root = old.cgroup_root
        old.close()                     # quota lifted; the cgroup stays with its process
        restarted = quotas.agents[aid] = NodeAgent(
            cgroup_root=root, interval_s=0.5, node_cpus=2.0, cpu_per_core=0.5,
            state_dir=tmp_path / "state-lost", progress_dir=tmp_path / "progress").start()
        assert "host" in restarted.recovery["adopted"], restarted.recovery
        assert restarted.job("host")["status"] != "running"   # known, not managed

        with caplog.at_level(logging.WARNING, logger="mesos_framework"):
            b.set_quota("host", 0.5)    # the renewal: refused, registered again, set
        view = restarted.job("host")
        assert view["status"] == "running" and view["cpu_fraction"] == 0.5
        assert sleeper.pid in view["pids"] or sleeper.pid in restarted.actuator.job_pids("host")
        quota_file = Path(view["cgroup"]) / "cpu.cfs_quota_us"
        assert int(quota_file.read_text()) == view["quota_us"] > 0
        assert any("job host registered again" in r.getMessage() for r in caplog.records)
        assert [rj.job_id for rj in b.running()] == ["host"]
        assert not [o for o in b.drain_finished() if o.job_id == "host"]   # not failed
    finally:
        sleeper.kill()              # first, so that closing removes the job's cgroup
        sleeper.wait()
        quotas.close()
