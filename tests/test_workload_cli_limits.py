"""Issue 24: `cosched workload submit` with --cores in range but larger than the whole
cluster. Against a local cluster (`cosched slurm up`, whose size the command reads from its
cluster.json) such a job would wait at the head of the queue forever: it is refused at
submit time, with one line naming the option, the value and the cluster's size, before
anything reaches Slurm. No Slurm runs here: the cluster is its state file only, and the
submitting is replaced by a recorder that says whether the command got that far."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from slurm_plugin.cluster import ClusterState, save_state

NODES, CPUS = 2, 2   # the cluster holds 4 cores


@pytest.fixture
def cluster_dir(tmp_path) -> Path:
    """A `cosched slurm up` cluster of NODES nodes of CPUS cores, as its state file says."""
    d = tmp_path / "cluster"
    d.mkdir()
    save_state(ClusterState(
        dir=str(d), name="c1", slurm_conf=str(d / "slurm.conf"),
        nodes=[f"n{i}" for i in range(NODES)], cpus=CPUS, partition="cosched",
        default_partition="batch", agents={}, agent_tokens={}, agent_cgroup_root=str(d / "cg"),
        progress_dir=str(d / "progress"), usage_dir=str(d / "usage"), jobs_dir=str(d / "jobs"),
        cpu_per_core=1.0, controller_port=1, node_ports={}))
    return d


@pytest.fixture
def submitted(monkeypatch) -> list:
    """The jobs that reached the Slurm submitting step (none should, for a refused value)."""
    import slurm_plugin.submit

    calls: list = []

    def record(cmds, jobs, opts):
        calls.append([(j.job_id, j.cores, j.nodes) for j in jobs])
        return []

    monkeypatch.setattr(slurm_plugin.submit, "submit_jobs", record)
    return calls


@pytest.mark.parametrize("cores", [NODES * CPUS + 1, 100_000])
def test_more_cores_than_the_cluster_are_refused_in_one_line(cluster_dir, submitted, cores):
    r = CliRunner().invoke(main, ["workload", "submit", "blast", "--cores", str(cores),
                                  "--dir", str(cluster_dir)])
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, r.output
    line = errors[0]
    assert "'--cores'" in line and f"{cores} cores" in line, line
    assert f"has {NODES * CPUS} ({NODES} nodes of {CPUS})" in line and str(cluster_dir) in line, line
    assert submitted == []   # nothing reached Slurm


def test_the_whole_cluster_is_still_accepted(cluster_dir, submitted):
    """The bound is the cluster's size, not one less: a job of every core goes through,
    spread over every node."""
    r = CliRunner().invoke(main, ["workload", "submit", "blast", "--cores", str(NODES * CPUS),
                                  "--dir", str(cluster_dir), "--tag", "b1"])
    assert r.exit_code == 0, r.output
    assert ("b1.blastall", NODES * CPUS, NODES) in submitted[0]
