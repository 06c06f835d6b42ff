"""The one JSON contract (slurm_plugin/contract.py): which command lists nodes and jobs on
each release, in which data_parser, and that an answer it does not know is refused at once,
naming the release, the command and the missing field. Answers are recorded real output
(tests/fixtures/slurm/<release>/, made by tests/fixtures/slurm/record.sh)."""

from __future__ import annotations

import json
import time

import pytest

from conftest import FIXTURES
from slurm_plugin import cluster
from slurm_plugin.contract import (PINNED_PARSER, Release, job_command, node_command, parse_jobs,
                                   parse_nodes, parse_release)
from slurm_plugin.parse import ParseError

SLURM = FIXTURES / "slurm"
RECORDED = sorted(p.name for p in SLURM.iterdir() if p.is_dir())


def recorded_release(version: str) -> Release:
    return parse_release((SLURM / version / "version.txt").read_text())


def test_each_release_is_recorded():
    assert {"22.05", "24.11", "26.05"} <= set(RECORDED)


@pytest.mark.parametrize("version", RECORDED)
def test_release_from_the_recorded_version_line(version):
    rel = recorded_release(version)
    assert f"{rel.major}.{rel.minor:02d}" == version


def test_commands_per_release():
    assert node_command(Release(22, 5, 8)) == ("sinfo", "--json")
    assert job_command(Release(22, 5, 8)) == ("squeue", "--json", "--states=all")
    assert node_command(Release(24, 11, 5)) == ("scontrol", "show", "node", "--json=v0.0.42")
    assert job_command(Release(24, 11, 5)) == ("squeue", "--json=v0.0.42", "--states=all")
    assert node_command(Release(26, 5, 5)) == ("scontrol", "show", "node",
                                               f"--json={PINNED_PARSER[(26, 5)]}")
    # a release not known yet: its default data_parser, parsed by field
    assert node_command(Release(27, 11, 0)) == ("scontrol", "show", "node", "--json")
    assert node_command(Release(20, 11, 9)) == ("scontrol", "show", "node", "-o")
    assert parse_release("slurm-wlm 22.05.8\n") == Release(22, 5, 8)
    assert parse_release("slurm 26.05.0-0rc1") == Release(26, 5, 0)
    with pytest.raises(ParseError, match="no Slurm release"):
        parse_release("command not found")


@pytest.mark.parametrize("version", RECORDED)
def test_nodes_and_jobs_through_the_contract(version):
    """What the release's own contract command answered (recorded) reads as the same three
    nodes and ten jobs on every release."""
    rel = recorded_release(version)
    name = {"sinfo": "sinfo.json", "scontrol": "scontrol_show_node.json"}[node_command(rel)[0]]
    nodes = parse_nodes(rel, (SLURM / version / name).read_text())
    assert [(n.name, n.cpus, n.partitions) for n in nodes] == [
        (f"rn{i}", 4, ("batch", "cosched")) for i in (1, 2, 3)]
    assert all(n.usable for n in nodes)
    jobs = {j.name: j for j in parse_jobs(rel, (SLURM / version / "squeue.json").read_text())}
    assert jobs["host"].shared is True and jobs["held"].held
    assert jobs["gang"].nodes == ("rn2", "rn3") and jobs["done-failed"].exit_code == 3


@pytest.mark.parametrize("version", [v for v in RECORDED if v != "22.05"])
def test_an_unknown_node_shape_names_release_command_and_field(version):
    rel = recorded_release(version)
    data = json.loads((SLURM / version / "scontrol_show_node.json").read_text())
    del data["nodes"][1]["cpus"]
    with pytest.raises(ParseError) as err:
        parse_nodes(rel, json.dumps(data))
    msg = str(err.value)
    assert f"Slurm {rel.text}" in msg and f"`{' '.join(node_command(rel))}`" in msg
    assert "node rn2 without the field 'cpus'" in msg
    # sinfo --json of these releases aggregates per partition: not the contract's command
    with pytest.raises(ParseError, match="field 'nodes'"):
        parse_nodes(rel, json.dumps({"sinfo": [], "meta": {}}))


def test_the_cluster_wait_gives_up_at_once_on_an_answer_it_cannot_read():
    def check():
        raise ParseError("Slurm 24.11.5: `scontrol show node --json=v0.0.42`: node n1 without the field 'cpus'")

    t0 = time.monotonic()
    with pytest.raises(cluster.ClusterError, match="without the field 'cpus'"):
        cluster._wait("nodes did not become idle", check, 60)
    assert time.monotonic() - t0 < 1.0
