"""Slurm host lists (coscheduler/hostlist.py), as the Slurm backend reads them from Slurm and
the node agent reads them from the environment of a job's processes (which its user sets)."""

from __future__ import annotations

import time

import pytest

from coscheduler.hostlist import MAX_HOSTS, HostListError, expand
from monitoring.collect import cpus_of_node


def test_one_and_several_bracket_groups_expand_with_their_padding():
    assert expand("rn[1-3,5],gpu01") == ["rn1", "rn2", "rn3", "rn5", "gpu01"]
    assert expand("x[01-02]-ib") == ["x01-ib", "x02-ib"]
    # two groups in one name (the agent expanded only the first: r1n[01-02], r2n[01-02])
    assert expand("r[1-2]n[01-02],login") == ["r1n01", "r1n02", "r2n01", "r2n02", "login"]


@pytest.mark.parametrize("text", ["n[1-", "n[a-b]", "n]1[", "n[3-1]", "n[1-2", "n[1234567890]",
                                  "a[1]" * 50_000])   # (one level of recursion per group)
def test_malformed_lists_are_refused(text):
    with pytest.raises(HostListError, match="malformed"):
        expand(text)


@pytest.mark.parametrize("text", ["n[0-999999999]", "r[1-100000]n[1-100000]",
                                  ",".join(["a"] * (MAX_HOSTS + 1))])
def test_a_list_past_any_clusters_size_is_refused_before_it_is_built(text):
    t0 = time.perf_counter()
    with pytest.raises(HostListError, match=f"more than {MAX_HOSTS} hosts"):
        expand(text)
    assert time.perf_counter() - t0 < 1.0


def test_the_agent_reads_a_nodes_cpus_from_a_jobs_environment_and_refuses_a_huge_one():
    assert cpus_of_node("4(x2),2", "n[1-2],gpu1", "n2") == 4
    assert cpus_of_node("4(x2),2", "n[1-2],gpu1", "gpu1") == 2
    assert cpus_of_node("4(x2)", "r[1-2]n01", "r2n01") == 4
    assert cpus_of_node("4(x2)", "n[1-3]", "n1") is None            # lengths differ
    # Set by the job's user: building these took the root agent's memory (a list of a
    # billion node names, or of a billion counts) before it compared anything.
    t0 = time.perf_counter()
    assert cpus_of_node("4(x999999999)", "n1", "n1") is None
    assert cpus_of_node("4", "n[0-999999999]", "n1") is None
    assert time.perf_counter() - t0 < 1.0
