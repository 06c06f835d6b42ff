"""Batsim interoperability: JSON workloads in, jobs.csv out, SWF -> Batsim JSON round trip."""

from __future__ import annotations

import csv
import re
import json

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.sim.batsim import (COLUMNS, BatsimFormatError, interval_set, parse_workload,
                                    read_workload, to_batsim)
from coscheduler.sim.replay import replay
from coscheduler.sim.swf import read_swf


def run(*args):
    return CliRunner().invoke(main, list(args))


def _csv(path):
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def test_hand_computed_schedule_and_jobs_csv(tmp_path):
    w = {"nb_res": 4, "jobs": [
        {"id": "a", "subtime": 0, "res": 3, "walltime": 100, "profile": "ten"},
        {"id": 7, "subtime": 1, "res": 2, "walltime": -1, "profile": "ph"},
        {"id": "c", "subtime": 2, "res": 1, "profile": "ten"}],
        "profiles": {"ten": {"type": "delay", "delay": 10},
                     "ph": {"type": "parallel_homogeneous", "cpu": 5e9, "com": 1e6}}}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(w))
    r = run("simulate", "swf", str(path), "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    cols, rows = _csv(tmp_path / "o" / "FCFS_jobs.csv")
    assert tuple(cols) == COLUMNS
    by = {row["job_id"]: row for row in rows}
    # FCFS: a on 0-2 at 0..10; 7 (2 res, 5e9 flop at 1 Gflop/s = 5 s) waits for a: 10..15;
    # c is behind 7 in FCFS order though it would fit: starts with 7 at 10 on the free one.
    assert (float(by["a"]["starting_time"]), float(by["a"]["finish_time"])) == (0, 10)
    assert (float(by["7"]["starting_time"]), float(by["7"]["finish_time"])) == (10, 15)
    assert float(by["7"]["requested_time"]) == 5          # no walltime: the run time
    assert float(by["c"]["starting_time"]) == 10 and float(by["c"]["waiting_time"]) == 8
    assert by["a"]["allocated_resources"] == "0-2"
    assert by["7"]["allocated_resources"] == "0-1" and by["c"]["allocated_resources"] == "2"
    assert by["a"]["profile"] == "ten" and by["a"]["workload_name"] == "w"
    assert by["a"]["final_state"] == "COMPLETED_SUCCESSFULLY" and by["a"]["success"] == "1"
    assert float(by["c"]["stretch"]) == pytest.approx((20 - 2) / 10)


def test_host_speed_rule():
    w = {"nb_res": 2, "jobs": [{"id": 1, "subtime": 0, "res": 1, "profile": "p"}],
         "profiles": {"p": {"type": "parallel_homogeneous", "cpu": 3e9, "com": 0}}}
    assert parse_workload(w, "w").trace.jobs[0].run == 3.0
    assert parse_workload(w, "w", host_speed=1e8).trace.jobs[0].run == 30.0


@pytest.mark.parametrize("start, count, backfill, policies", [
    (0, 400, "easy", "FCFS,SJF,WFP3"), (1500, 300, "none", "FCFS,F1"),
    (200, 300, "conservative", "UNICEP")])
def test_round_trip_swf_batsim_same_schedule(lublin_swf, tmp_path, start, count, backfill,
                                             policies):
    w = tmp_path / "w.json"
    r = run("workload", "batsim", "--from", str(lublin_swf), "--out", str(w),
            "--start-index", str(start), "--jobs", str(count))
    assert r.exit_code == 0, r.output
    a = run("simulate", "swf", str(lublin_swf), "--start-index", str(start), "--jobs", str(count),
            "--backfill", backfill, "--policy", policies, "--out", str(tmp_path / "swf"), "--json")
    b = run("simulate", "swf", str(w), "--backfill", backfill, "--policy", policies,
            "--out", str(tmp_path / "bat"), "--json")
    assert a.exit_code == 0 and b.exit_code == 0, (a.output, b.output)
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    ja, jb = (ja if isinstance(ja, list) else [ja]), (jb if isinstance(jb, list) else [jb])
    for x, y in zip(ja, jb):
        for k in ("avg_bsld", "avg_wait", "makespan", "utilization", "jobs"):
            assert x[k] == y[k], (k, x, y)
    for p in policies.split(","):
        _, ra = _csv(tmp_path / "swf" / f"{p}_jobs.csv")
        _, rb = _csv(tmp_path / "bat" / f"{p}_jobs.csv")
        assert len(ra) == count
        def strip(rows):
            return [{k: v for k, v in r.items() if k != "workload_name"} for r in rows]
        assert strip(ra) == strip(rb)


def test_round_trip_with_nodes_of_several_processors(tmp_path):
    swf = tmp_path / "t.swf"
    swf.write_text("; MaxNodes: 4\n; MaxProcs: 16\n" + "".join(
        f"{i} {i * 7} -1 {50 + (i * 37) % 90} {1 + (i * 5) % 16} -1 -1 -1 {200} -1 1 {i % 3}"
        " -1 -1 -1 -1 -1 -1\n" for i in range(1, 60)))
    trace = read_swf(swf)
    doc = to_batsim(trace)
    assert doc["nb_res"] == 16 and doc["procs_per_node"] == 4
    back = parse_workload(json.loads(json.dumps(doc)), "w.json").trace
    assert (back.max_nodes, back.max_procs) == (4, 16)
    for policy in ("FCFS", "SJF"):
        s1 = replay(trace, policy, "easy").schedule
        s2 = replay(back, policy, "easy").schedule
        assert (s1.start, s1.end) == (s2.start, s2.end)


def test_allocated_resources_never_overlap(lublin_swf, tmp_path):
    r = run("simulate", "swf", str(lublin_swf), "--jobs", "500", "--backfill", "easy",
            "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    _, rows = _csv(tmp_path / "FCFS_jobs.csv")

    def ids(text):
        out = set()
        for part in text.split():
            lo, _, hi = part.partition("-")
            out |= set(range(int(lo), int(hi or lo) + 1))
        return out
    spans = [(float(x["starting_time"]), float(x["finish_time"]), ids(x["allocated_resources"]),
              int(x["requested_number_of_resources"])) for x in rows]
    assert all(len(s[2]) == s[3] and max(s[2]) < 256 for s in spans)
    events = sorted(t for s in spans for t in (s[0],))
    for t in events[::7]:          # a sample of instants: running jobs hold disjoint processors
        held = [s[2] for s in spans if s[0] <= t < s[1]]
        assert sum(map(len, held)) == len(set().union(*held))


def test_interval_set():
    assert interval_set([8, 0, 1, 2, 3]) == "0-3 8"
    assert interval_set([5]) == "5" and interval_set([]) == ""


def test_detected_by_content(tmp_path):
    p = tmp_path / "workload.txt"
    p.write_text(json.dumps({"nb_res": 1, "jobs": [{"id": 1, "subtime": 0, "res": 1,
                                                   "profile": "d"}],
                             "profiles": {"d": {"type": "delay", "delay": 3}}}))
    wl = read_workload(p)
    assert wl.ids == ["1"] and wl.trace.jobs[0].run == 3


@pytest.mark.parametrize("job, profiles, message", [
    ({"id": "j1", "subtime": 0, "res": 1, "profile": "nope"}, {},
     "job 'j1': profile 'nope' is not defined"),
    ({"id": "j2", "subtime": 0, "res": -2, "profile": "d"}, None, "job 'j2': res must be an integer >= 1"),
    ({"id": "j3", "subtime": 0, "res": 1, "profile": "s"},
     {"s": {"type": "smpi", "trace": "x"}}, "job 'j3': profile 's' has type 'smpi'"),
    ({"id": "j4", "subtime": 0, "res": 9, "profile": "d"}, None, "job 'j4': res 9 is more than nb_res 4"),
    ({"id": "j5", "subtime": -1, "res": 1, "profile": "d"}, None, "job 'j5': subtime must be"),
    ({"id": "j6", "subtime": 0, "res": 1, "profile": "d", "walltime": "x"}, None,
     "job 'j6': walltime must be a number"),
    ({"subtime": 0, "res": 1, "profile": "d"}, None, "jobs[0] has no usable id"),
])
def test_bad_batsim_input_names_the_job(tmp_path, job, profiles, message):
    doc = {"nb_res": 4, "jobs": [job],
           "profiles": profiles if profiles is not None else {"d": {"type": "delay", "delay": 1}}}
    with pytest.raises(BatsimFormatError, match=re.escape(message)):
        parse_workload(doc, "w.json")
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    r = run("simulate", "swf", str(p))
    assert r.exit_code == 1 and message.split(":")[0] in r.stderr and "Traceback" not in r.output


def test_bad_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    r = run("simulate", "swf", str(p))
    assert r.exit_code == 1 and "not valid JSON" in r.stderr
    p.write_text(json.dumps({"nb_res": 0, "jobs": []}))
    r = run("simulate", "swf", str(p))
    assert r.exit_code == 1 and "nb_res must be an integer in 1.." in r.stderr
    p.write_text(json.dumps({"nb_res": 4, "jobs": [{"id": 1, "subtime": 0, "res": 1,
                                                   "profile": "d"}] * 2,
                             "profiles": {"d": {"type": "delay", "delay": 1}}}))
    with pytest.raises(BatsimFormatError, match="job 1: the id appears twice"):
        read_workload(p)
