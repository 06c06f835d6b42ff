"""Parsing Slurm's answers: recorded real output of Slurm 22.05 (Debian 12, this machine)
and 24.11 (Debian 13) and 26.05 (Debian sid), both in containers, the same scenario in each
(tests/fixtures/slurm/record.sh):
3 finished jobs (completed, failed with exit 3, cancelled), a 2-node job, a co-scheduled
host and guest on one node, a held job, a held job waiting on it, a job whose dependency
failed, and a job waiting for resources."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES
from slurm_plugin.jobcomp import find_in_jobcomp, lines_from_end, parse_jobcomp, parse_jobcomp_line
from slurm_plugin.parse import (ParseError, dependency_state, duration_s, expand_hostlist,
                                parse_jobs_json, parse_nodes_json, parse_scontrol_jobs,
                                parse_scontrol_nodes)

SLURM = FIXTURES / "slurm"
VERSIONS = ("22.05", "24.11", "26.05")


def by_name(jobs):
    return {j.name: j for j in jobs}


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_json_of_both_releases_reads_the_same(version):
    jobs = by_name(parse_jobs_json((SLURM / version / "squeue.json").read_text()))
    assert set(jobs) == {"done-ok", "done-failed", "cancelled", "gang", "host", "guest", "held",
                         "dep", "depfailed", "waiting"}
    assert jobs["done-ok"].state == "COMPLETED" and jobs["done-ok"].exit_code == 0
    assert jobs["done-failed"].state == "FAILED" and jobs["done-failed"].exit_code == 3
    assert jobs["cancelled"].state == "CANCELLED" and jobs["cancelled"].exit_signal == 15
    gang = jobs["gang"]
    assert gang.state == "RUNNING" and gang.nodes == ("rn2", "rn3") and gang.cpus == 4
    assert gang.time_limit_s == 300.0 and gang.start_time and gang.start_time > 1.7e9
    host, guest = jobs["host"], jobs["guest"]
    assert host.partition == guest.partition == "cosched"
    assert host.shared is True and guest.shared is True and gang.shared is not True
    assert host.admin_comment == "cosched:v=1;quota=0.6"
    assert guest.admin_comment == "cosched:v=1;host=5;quota=0.4"
    assert host.nodes == guest.nodes == ("rn1",) and (host.cpus, guest.cpus) == (3, 1)
    held, dep = jobs["held"], jobs["dep"]
    assert held.held and dep.held and not host.held
    assert held.time_limit_s == 180.0 and held.cpus == 2 and held.max_nodes == 1
    assert dep.dependency == "afterok:7(unfulfilled)"
    assert jobs["depfailed"].dependency == "afterok:2(failed)"
    assert jobs["depfailed"].reason == "DependencyNeverSatisfied"
    assert jobs["waiting"].state == "PENDING" and not jobs["waiting"].held


def test_every_release_gives_the_per_node_layout_22_05_as_a_map_of_cores():
    new = by_name(parse_jobs_json((SLURM / "24.11" / "squeue.json").read_text()))
    old = by_name(parse_jobs_json((SLURM / "22.05" / "squeue.json").read_text()))
    assert new["gang"].cpus_by_node == (("rn2", 2), ("rn3", 2))
    assert old["gang"].cpus_by_node == (("rn2", 2), ("rn3", 2))   # its allocated cores
    assert old["host"].cpus_by_node == (("rn1", 3),) and old["waiting"].cpus_by_node is None


def test_a_22_05_core_map_is_scaled_to_the_jobs_cpus_or_not_used():
    from slurm_plugin.parse import job_from_json

    def rec(cpus, cores_per_node):
        return {"job_id": 9, "job_state": "RUNNING", "cpus": cpus, "job_resources": {
            "allocated_nodes": [{"nodename": n, "sockets": {"0": {"cores": {
                str(c): "allocated" for c in range(k)} | {"99": "unallocated"}}}}
                for n, k in cores_per_node]}}
    # two hardware threads per core: 4 cores hold 8 CPUs
    assert job_from_json(rec(8, [("a", 1), ("b", 3)])).cpus_by_node == (("a", 2), ("b", 6))
    # CPUs that do not divide over the cores: not known, never guessed
    assert job_from_json(rec(5, [("a", 1), ("b", 3)])).cpus_by_node is None
    assert job_from_json(rec(4, [("a", 0), ("b", 4)])).cpus_by_node is None


def test_a_name_written_as_scontrol_fields_forges_nothing():
    """Recorded on real Slurm 22.05.8 here: user nobody ran ``sbatch -p cosched -N 2 -n 2 -J
    "x Nodes=<node 1> CPU_IDs=0-3 NumCPUs=1 Partition=cosched AdminComment=cosched:v=1;quota=0.1"
    --comment "y UserId=root(0)"`` (the AdminComment then set for real by root).
    ``scontrol show job -o -d`` prints the name as typed; read first-key-wins, the job had
    1 CPU, 4 more on node 1 and root's quota mark. The JSON holds the truth; the text
    is refused, naming the job."""
    js = parse_jobs_json((SLURM / "22.05" / "squeue_forged_name.json").read_text())
    (j,) = [x for x in js if x.job_id == 1]
    assert j.name.startswith("x Nodes=") and j.user == "nobody" and j.cpus == 2
    assert j.cpus_by_node == (("c30052n1", 1), ("c30052n2", 1))
    assert j.admin_comment == "cosched:v=1;quota=0.6" and j.comment == "y UserId=root(0)"
    text = (SLURM / "22.05" / "scontrol_show_job_forged_name.txt").read_text()
    with pytest.raises(ParseError, match="job 1's line does not begin JobId, JobName, UserId"):
        parse_scontrol_jobs(text)
    # a forgery that starts with UserId= repeats a key Slurm prints once
    line = next(x for x in (SLURM / "22.05" / "scontrol_show_job.txt").read_text().splitlines()
                if "JobName=gang " in x)
    forged = line.replace("JobName=gang ", "JobName=gang UserId=root(0) NumCPUs=64 ", 1)
    with pytest.raises(ParseError, match="UserId= twice"):
        parse_scontrol_jobs(forged)
    # a comment holding a field Slurm prints once
    forged = line.replace(" StdErr=", " Comment=x Partition=cosched StdErr=", 1)
    with pytest.raises(ParseError, match="Partition= twice"):
        parse_scontrol_jobs(forged)


@pytest.mark.parametrize("version", VERSIONS)
def test_scontrol_text_agrees_with_the_json(version):
    text = by_name(parse_scontrol_jobs((SLURM / version / "scontrol_show_job.txt").read_text()))
    js = by_name(parse_jobs_json((SLURM / version / "squeue.json").read_text()))
    for name, j in js.items():
        t = text[name]
        assert (t.job_id, t.state, t.nodes, t.cpus, t.time_limit_s, t.priority) == \
               (j.job_id, j.state, j.nodes, j.cpus, j.time_limit_s, j.priority), name
        assert t.admin_comment == j.admin_comment
        if j.start_time and j.state != "PENDING":
            assert abs(t.start_time - j.start_time) < 1.0   # text is local time, JSON epoch
    assert text["gang"].cpus_by_node == (("rn2", 2), ("rn3", 2))   # from -d: CPU_IDs per node
    assert text["host"].comment == "cosched:class=demo/host,type=parallel,tasks=8"


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_from_every_form(version):
    d = SLURM / version
    text = parse_scontrol_nodes((d / "scontrol_show_node.txt").read_text())
    assert [(n.name, n.cpus, n.partitions) for n in text] == [
        (f"rn{i}", 4, ("batch", "cosched")) for i in (1, 2, 3)]
    assert all(n.usable for n in text)
    if version == "22.05":
        nodes = parse_nodes_json((d / "sinfo.json").read_text())
    else:
        # 24.11 aggregates sinfo --json: no per-node records, the reader says where to look
        with pytest.raises(ParseError, match="scontrol show node --json"):
            parse_nodes_json((d / "sinfo.json").read_text())
        nodes = parse_nodes_json((d / "scontrol_show_node.json").read_text())
    assert [(n.name, n.cpus, n.state) for n in nodes] == [(n.name, n.cpus, n.state) for n in text]


@pytest.mark.parametrize("version", VERSIONS)
def test_jobcomp_lines(version):
    jobs = parse_jobcomp((SLURM / version / "jobcomp.txt").read_text())
    states = {j.name: (j.state, j.exit_code) for j in jobs.values()}
    assert states == {"done-ok": ("COMPLETED", 0), "done-failed": ("FAILED", 3),
                      "cancelled": ("CANCELLED", 0)}
    assert all(j.end_time >= j.start_time > 1.7e9 for j in jobs.values())


def test_a_jobcomp_line_forged_by_a_name_or_folder_is_left_out(caplog):
    """jobcomp/filetxt prints Name= and WorkDir= as typed: ``sbatch -J "x JobState=COMPLETED
    ExitCode=0:0"`` made a failed job read as completed (first key wins). Every line has
    each key once, so such a line is left out, logged, and the other jobs are read."""
    text = (SLURM / "22.05" / "jobcomp.txt").read_text()
    lines = text.splitlines()
    failed = next(x for x in lines if "Name=done-failed " in x)
    by_name = failed.replace("Name=done-failed ", "Name=x JobState=COMPLETED ExitCode=0:0 ", 1)
    by_dir = re.sub(r"WorkDir=\S+ ", "WorkDir=/tmp/a ExitCode=0:0 ", failed, count=1)
    assert by_dir != failed
    for forged in (by_name, by_dir):
        jobs = parse_jobcomp("\n".join(x if x != failed else forged for x in lines))
        assert 2 not in jobs and {j.name for j in jobs.values()} == {"done-ok", "cancelled"}
        with pytest.raises(ParseError, match="job 2's line has .*= twice"):
            parse_jobcomp_line(forged)
    assert "job 2's line has" in caplog.text


@pytest.mark.parametrize("version", VERSIONS)
def test_a_vanished_job_is_found_from_the_jobcomp_logs_end_as_a_whole_parse_finds_it(
        version, tmp_path, caplog):
    """The backend looks up only the jobs that vanished, newest line first, and stops once
    each is found: the log grows by a line per job for as long as the cluster runs, and
    parsing all of it cost 15 s per 100,000 lines inside the controller's pass."""
    lines = (SLURM / version / "jobcomp.txt").read_text().splitlines()
    whole = parse_jobcomp("\n".join(lines))
    # A long log: the real lines at its end, many other jobs before them, CRLF endings.
    filler = [re.sub(r"^JobId=\d+", f"JobId={1000 + i}", lines[0]) for i in range(3000)]
    path = tmp_path / "jobcomp.txt"
    path.write_bytes("\r\n".join(filler + lines).encode() + b"\r\n")
    for block in (64, 1 << 20):
        assert list(lines_from_end(path, block)) == list(reversed(filler + lines))
    wanted = sorted(whole)
    found = find_in_jobcomp(lines_from_end(path), wanted + [999_999])
    assert {k: (j.name, j.state, j.exit_code, j.end_time) for k, j in found.items()} == {
        k: (j.name, j.state, j.exit_code, j.end_time) for k, j in whole.items()}
    read = []

    def counted():
        for line in lines_from_end(path):
            read.append(line)
            yield line
    find_in_jobcomp(counted(), wanted)
    assert len(read) <= len(lines)          # found at the end: the filler is never read
    # A requeued job has two lines: the newest answers; a forged newest line is left out
    # (logged) and the older genuine one answers, as in a whole parse.
    failed = next(x for x in lines if "Name=done-failed " in x)
    jid = int(failed.split()[0][6:])
    again = failed.replace("JobState=FAILED", "JobState=COMPLETED").replace("ExitCode=3:0", "ExitCode=0:0")
    forged = failed.replace("Name=done-failed ", "Name=x JobState=COMPLETED ", 1)
    path.write_text("\n".join(lines + [again]) + "\n")
    assert find_in_jobcomp(lines_from_end(path), [jid])[jid].state == "COMPLETED"
    path.write_text("\n".join(lines + [forged]) + "\n")
    assert find_in_jobcomp(lines_from_end(path), [jid])[jid].state == "FAILED"
    assert f"job {jid}'s line has" in caplog.text


def test_hostlists_durations_dependencies():
    assert expand_hostlist("rn[1-3,5],gpu01") == ("rn1", "rn2", "rn3", "rn5", "gpu01")
    assert expand_hostlist("n[08-10]") == ("n08", "n09", "n10")
    assert expand_hostlist("") == () and expand_hostlist("(null)") == ()
    with pytest.raises(ParseError, match="host list"):
        expand_hostlist("n[1-")
    assert duration_s("5") == 300 and duration_s("00:01:00") == 60 and duration_s("1-02:00:00") == 93600
    assert duration_s("UNLIMITED") is None and duration_s("1:30") == 90
    with pytest.raises(ParseError):
        duration_s("soon")
    states = {7: "COMPLETED", 8: "RUNNING", 9: "FAILED"}
    assert dependency_state("") == "none"
    assert dependency_state("afterok:7(unfulfilled)") == "waiting"            # no snapshot
    assert dependency_state("afterok:7(unfulfilled)", states) == "satisfied"
    assert dependency_state("afterok:8(unfulfilled)", states) == "waiting"
    assert dependency_state("afterok:9(unfulfilled)", states) == "failed"
    assert dependency_state("afterany:9(unfulfilled)", states) == "satisfied"
    assert dependency_state("afternotok:7(unfulfilled)", states) == "failed"
    assert dependency_state("afterok:8(unfulfilled)?afterok:7(unfulfilled)", states) == "satisfied"
    assert dependency_state("afterok:2(failed)", states) == "failed"
    assert dependency_state("singleton(unfulfilled)", states) == "waiting"


@pytest.mark.parametrize("text, match", [
    ("not json", "did not answer JSON"),
    ("[1, 2]", "not an object"),
    ('{"meta": {}}', "without the field 'jobs'"),
    ('{"jobs": [{"name": "x"}]}', "without the field 'job_id'"),
    ('{"jobs": [{"job_id": 3}]}', "job 3 without the field 'job_state'"),
    ('{"jobs": [{"job_id": {"set": true, "number": "x"}}]}', "expected a number"),
    ('{"jobs": [], "errors": [{"error": "Unable to contact slurm controller"}]}', "Unable to contact"),
])
def test_odd_answers_are_refused_with_what_was_wrong(text, match):
    with pytest.raises(ParseError, match=match):
        parse_jobs_json(text)


def test_a_job_missing_optional_fields_still_parses():
    (j,) = parse_jobs_json(json.dumps({"jobs": [{"job_id": 42, "job_state": "PENDING"}]}))
    assert j.job_id == 42 and j.state == "PENDING" and j.nodes == () and j.cpus is None
