"""What Slurm prints, and what node agents answer, read as a peer's words, never trusted.

A probe of main (issue 24, "faults and floods") fed the readers odd but possible input:
numbers JSON allows and Slurm never prints (NaN, 5,000 digits), a time limit of -1 (22.05's
openapi writes UNLIMITED so), a list where 22.05's core map has an object, an ``errors``
field that is not a list, digits that are not ASCII ('²', '٣') in a user's job name or
environment, Unicode line separators in a comment, a progress count past float's range, a
node list in another shape, an agent listing one entry of the wrong shape or an absurd CPU
reading. Each test below failed on that main (a bare Python error, one job stopping every
pass, a forged record read, a field read one character at a time, or a wrong value kept).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coscheduler import hostlist
from coscheduler.controller.usage import ClassUsage
from monitoring.collect import cpus_of_node
from slurm_plugin.agent_calls import number, views_by_job
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.jobcomp import MAX_LINE_BYTES, find_in_jobcomp, lines_from_end
from slurm_plugin.metadata import MetadataError, parse_comment
from slurm_plugin.parse import (ParseError, ReportedErrors, SlurmNode, duration_s,
                                job_from_json, lines_of, parse_jobs_json, parse_nodes_json,
                                parse_scontrol_jobs, printable)
from slurm_plugin.rest import _errors_text
from slurm_plugin.walltime import credit_minutes, projected_end

SLURM = Path(__file__).resolve().parent / "fixtures" / "slurm"


def _jobs(*records) -> str:
    return json.dumps({"jobs": list(records)})


# -- numbers -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, field", [
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","cpus":NaN}]}', "cpus"),
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","cpus":-Infinity}]}', "cpus"),
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","time_limit":"%s"}]}' % ("9" * 5000), "time_limit"),
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","node_count":1e400}]}', "node_count"),
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","submit_time":NaN}]}', "submit_time"),
    ('{"jobs":[{"job_id":7,"job_state":"PENDING","nodes":{"a":1}}]}', "nodes"),
])
def test_a_number_slurm_never_prints_is_a_parse_error_naming_the_job_and_field(text, field):
    with pytest.raises(ParseError, match=f"job 7, field '{field}'"):
        parse_jobs_json(text)


def test_a_fractional_job_id_is_refused_not_truncated():
    with pytest.raises(ParseError, match="job_id '1.5'"):
        parse_jobs_json(_jobs({"job_id": 1.5, "job_state": "RUNNING"}))


@pytest.mark.parametrize("minutes, expected", [
    (-1, None),                         # 22.05's openapi: UNLIMITED
    (0, None),                          # --time=0: no limit
    (10 ** 12, None),                   # past any real limit
    ({"set": True, "infinite": True, "number": 0}, None),
    (30, 1800.0),
])
def test_time_limits_out_of_range_read_as_unlimited(minutes, expected):
    (j,) = parse_jobs_json(_jobs({"job_id": 3, "job_state": "RUNNING", "time_limit": minutes}))
    assert j.time_limit_s == expected


class _OneForeignJob:
    """A SlurmSource with one running job of another partition on a node we share."""

    name = "stand-in"

    def __init__(self, record: dict, nodes: list[SlurmNode]):
        self.record, self.node_list = record, nodes

    def jobs(self):
        return parse_jobs_json(_jobs(self.record))

    def nodes(self):
        return list(self.node_list)

    def layout(self, job_id):
        return None


def test_one_odd_job_of_another_partition_holds_its_cores_and_stops_nothing():
    """On the probed main a job of another partition with time_limit -1 made running()
    raise on every pass (its fallback raised again), so nothing was ever placed."""
    record = {"job_id": 11, "job_state": "RUNNING", "partition": "b a/..\u00e9", "nodes": "n1",
              "cpus": 2, "time_limit": -1, "submit_time": 5}
    src = _OneForeignJob(record, [SlurmNode("n1", 8, "IDLE", partitions=("cosched", "batch")),
                                  SlurmNode("n2", 0, "IDLE", partitions=("cosched",))])
    b = SlurmBackend(src, partition="cosched")
    (rj,) = [r for r in b.running() if r.job_id == "11"]
    assert rj.allocation.cores_by_node == (("n1", 2),) and not rj.lendable
    assert rj.job.job_class == "foreign/b_a" and rj.job.walltime_s == 365 * 86400.0
    # a node reported with no CPUs is left out rather than failing every pass
    assert [n.name for n in b.nodes()] == ["n1"]


def test_a_list_where_2205_has_a_map_of_cores_leaves_the_layout_unknown():
    j = job_from_json({"job_id": 9, "job_state": "RUNNING", "cpus": 2, "job_resources": {
        "allocated_nodes": [{"nodename": "a", "sockets": {"0": {"cores": ["allocated"]}}}]}})
    assert j.cpus_by_node is None


def test_node_fields_of_the_wrong_type_are_read_as_names_or_refused():
    (n,) = parse_nodes_json(json.dumps({"nodes": [{"name": "n1", "state": "idle", "cpus": 4,
                                                   "state_flags": "DRAIN",
                                                   "partitions": "cosched"}]}))
    # read on the probed main as the flags D, R, A, I, N (a usable node) and partitions c, o, ...
    assert n.flags == ("DRAIN",) and not n.usable and n.partitions == ("cosched",)
    with pytest.raises(ParseError, match="node n1, field 'partitions'"):
        parse_nodes_json(json.dumps({"nodes": [{"name": "n1", "state": "idle", "cpus": 4,
                                                "partitions": {"cosched": 1}}]}))


# -- errors and control characters ----------------------------------------------------------

def test_an_errors_field_that_is_not_a_list_is_one_message():
    with pytest.raises(ReportedErrors, match="reported errors: 5$"):
        parse_jobs_json('{"jobs": [], "errors": 5}')
    assert _errors_text(b'{"errors": "boom"}') == "boom"      # was 'b; o; o; m'
    assert _errors_text(b'{"errors": true}') == "True"        # was a TypeError


def test_control_characters_from_slurm_reach_no_log_line_raw():
    with pytest.raises(ReportedErrors) as err:
        parse_jobs_json(json.dumps({"jobs": [], "errors": [{"error": "\x1b[2Jred\rX\u2028Y"}]}))
    msg = str(err.value)
    assert "\x1b" not in msg and "\r" not in msg and "\u2028" not in msg
    assert "\\x1b[2Jred\\rX\\u2028Y" in msg
    assert printable("a" * 600, 10) == "a" * 10 + "..."


# -- digits that are not ASCII --------------------------------------------------------------

def test_digits_that_are_not_ascii_are_not_numbers():
    with pytest.raises(hostlist.HostListError):
        hostlist.expand("n[\u00b9]")                    # '¹': isdigit() but int() refuses
    # the node agent reads SLURM_JOB_NODELIST from the job's (user-set) environment
    assert cpus_of_node("4", "n[\u00b9]", "n1") is None
    assert cpus_of_node("\u0664", "n1", "n1") is None  # Arabic-Indic 4
    assert find_in_jobcomp(["JobId=\u00b2 Name=x"], [2]) == {}
    with pytest.raises(ParseError, match="not a Slurm time"):
        duration_s("\u0663")                           # was read as 3 minutes


# -- line separators -------------------------------------------------------------------------

def test_a_unicode_line_separator_in_a_comment_forges_no_job_record():
    """``str.splitlines`` splits at U+2028 (and \\x85, \\x0b, ...), which Slurm prints as
    typed: on the probed main this comment became a second record of job 4, COMPLETED in
    partition cosched, which replaced the real one."""
    line = next(x for x in (SLURM / "22.05" / "scontrol_show_job.txt").read_text().split("\n")
                if "JobName=gang " in x)
    i = line.index(" StdErr=")
    forged = (line[:i] + " Comment=x\u2028JobId=4 JobName=y UserId=root(0) JobState=COMPLETED "
              "Partition=cosched" + line[i:])
    with pytest.raises(ParseError, match="JobId= twice"):
        parse_scontrol_jobs(forged)
    assert lines_of("a\u2028b\x85c\x0bd\r\ne") == ["a\u2028b\x85c\x0bd", "e"]


# -- walltime credit from a job's own progress counts --------------------------------------

def test_progress_counts_past_any_range_give_no_credit_and_no_error():
    assert projected_end(0.0, 10.0, 1, 10 ** 400, None) is None      # was OverflowError
    assert projected_end(0.0, 10.0, 1, 8, float("nan")) is not None   # (the mean rate instead)
    end = projected_end(0.0, 10.0, 1, 8, 1e-300)
    assert end is not None and end > 1e300
    # a limit of 600 s lent at quota 0.5 stretches to at most 1,200 s: a credit of 10 min,
    # not the 300-digit number of minutes the probed main sent to scontrol
    assert credit_minutes(0.0, 600.0, end, None, most_s=600.0) == (10, True)
    assert credit_minutes(0.0, 600.0, 2000.0, float("nan")) == (0, False)
    assert credit_minutes(0.0, 600.0, math.inf, None) == (0, False)


# -- the jobcomp log read backwards ---------------------------------------------------------

@pytest.mark.parametrize("block", [1, 2, 3, 7, 64])
def test_reading_the_log_backwards_gives_every_line_whatever_the_block(tmp_path, block):
    lines = ["JobId=1 a", "", "JobId=22 bb\r", "x" * 50, "JobId=333 ccc", "  ", "last"]
    path = tmp_path / "jobcomp.log"
    path.write_text("\n".join(lines) + "\n")
    want = [x.rstrip("\r") for x in reversed(lines) if x.strip()]
    assert list(lines_from_end(path, block=block)) == want


def test_a_line_past_the_cap_is_left_out_and_its_neighbours_kept(tmp_path):
    """A crash can leave a NUL-filled tail with no newline: on the probed main reading it
    cost time quadratic in its length (9 s for 128 MB); it is now skipped as it is read."""
    path = tmp_path / "jobcomp.log"
    with open(path, "wb") as f:
        f.write(b"JobId=1 first\n")
        f.write(b"\0" * (MAX_LINE_BYTES + 10) + b"\n")
        f.write(b"JobId=2 last\n")
    assert list(lines_from_end(path, block=1 << 16)) == ["JobId=2 last", "JobId=1 first"]


# -- job metadata ---------------------------------------------------------------------------

def test_a_trailing_newline_in_metadata_is_refused_as_the_submit_hook_refuses_it():
    with pytest.raises(MetadataError, match="workflow"):
        parse_comment("cosched:workflow=m1\n")


# -- node agents' answers -------------------------------------------------------------------

def test_an_agent_listing_with_entries_of_the_wrong_shape_keeps_the_good_ones():
    views, dropped = views_by_job([{"job_id": "5", "cpu_percent": 40.0}, {"job_id": 77},
                                   ["5"], "x", {"job_id": "6"}])
    assert sorted(views) == ["5", "6"] and dropped == 3
    assert views_by_job({"jobs": []}) == ({}, 1)
    assert [number(v) for v in (1, 2.5, "3", True, None, math.nan, math.inf, 10 ** 400)] == \
        [1.0, 2.5, None, None, None, None, None, None]


class _Agent:
    """A node agent's client answering ``views`` (a peer that misbehaves); keeps the calls."""

    def __init__(self, views):
        self.views, self.calls = views, []

    def register_job(self, job_id, pids, cores, **kw):
        return {"job_id": job_id, "status": "running", "cores": float(cores)}

    def jobs(self):
        return self.views

    def set_quota(self, job_id, cpu_fraction, lease_s, role=None):
        self.calls.append(("quota", job_id))
        return {}

    def clear_quota(self, job_id):
        self.calls.append(("clear", job_id))
        return {}


def test_one_agent_answering_nonsense_costs_no_other_node_its_metrics_or_renewals():
    """On the probed main one entry ``{"job_id": 77}`` (an int) in one agent's list raised
    in the loop over every agent: no job anywhere had metrics, no lease was renewed."""
    from test_slurm_units import RecordedCluster

    now = [1000.0]
    good = _Agent([])
    bad = _Agent([{"job_id": 77, "status": "running", "cpu_fraction": 0.5},
                  {"job_id": "x", "status": "running", "cpu_fraction": "0.5"}])
    src = RecordedCluster("22.05")
    b = SlurmBackend(src, partition="cosched", agents={"rn1": good, "rn2": bad}, lease_s=6.0,
                     clock=lambda: now[0])
    b.set_quota("5", 0.5)
    good.calls.clear()
    good.views = [{"job_id": j, "status": "running", "cores": float(c), "cpu_percent": 40.0,
                   "mem_percent": 5.0} for j, c in (("5", 3), ("6", 1))]
    now[0] += 10.0
    samples = b.metrics()
    assert {"5", "6"} <= set(samples)
    assert ("quota", "5") in good.calls            # the lease on the good node was renewed
    # an absurd reading is set aside rather than taught to the class means
    good.views[0]["cpu_percent"] = 1e300
    now[0] += 10.0
    assert "5" not in b.metrics()


def test_class_means_hold_readings_to_what_a_guest_can_use():
    usage = ClassUsage()
    usage.add("c", 1e300, 1e300, 1e300)
    e = usage.expected("c")
    assert (e.cpu_percent, e.mem_percent, e.io_mb_s) == (100.0, 100.0, 1e6)
    for _ in range(10):
        usage.add("c", 40.0, 10.0)
    assert usage.expected("c").cpu_percent < 42.0
