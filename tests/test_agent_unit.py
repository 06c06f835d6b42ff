"""Monitoring agent: the pure parts (no root, no cgroups, no sleeping)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.model import InvalidInput
from coscheduler.progress import Progress
from monitoring import collect
from monitoring.admission import Admission
from monitoring.cgroupfs import CgroupError, Confined, UnsafePath, detect_layout, parse_mountinfo, validate_root
from monitoring.client import AgentClient, AgentError
from monitoring.lease import LeaseKeeper
from monitoring.progressfiles import ProgressFiles
from monitoring.recovery import StateFile
from monitoring.state import HAPPINESS_CAP, finite_happiness, job_quota_us, node_quota_us, parse_registration

# Recorded from this project's CI machine (Debian 12 host, cgroup v1 + hybrid unified).
MOUNTINFO_V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
MOUNTINFO_COMOUNT = "25 20 0:22 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 - cgroup cgroup rw,cpu,cpuacct\n"


def test_detect_layout_v1_separate_cpuacct():
    lay = detect_layout(MOUNTINFO_V1)
    assert lay.version == 1
    assert str(lay.cpu_mount) == "/sys/fs/cgroup/cpu"
    assert str(lay.acct_mount) == "/sys/fs/cgroup/cpuacct"


def test_detect_layout_v1_comounted_and_escapes():
    lay = detect_layout(MOUNTINFO_COMOUNT)
    assert lay.cpu_mount == lay.acct_mount == Path("/sys/fs/cgroup/cpu,cpuacct")
    mi = "1 0 0:1 / /mnt/my\\040cg rw - cgroup2 cgroup2 rw\n"
    assert parse_mountinfo(mi)[0][0] == "/mnt/my cg"


def test_detect_layout_v2_needs_cpu_controller(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    mi = f"1 0 0:1 / {tmp_path} rw - cgroup2 cgroup2 rw\n"
    with pytest.raises(CgroupError, match="cgroup.controllers"):
        detect_layout(mi)
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert detect_layout(mi).version == 2
    # v1 wins when both offer cpu, unless v2 is asked for
    both = MOUNTINFO_V1 + mi
    assert detect_layout(both).version == 1
    assert detect_layout(both, prefer=2).cpu_mount == tmp_path


@pytest.mark.parametrize("bad", ["../x", "a/../../b", "", "/", "a//b", ".", "a/..", "a/b c"])
def test_cgroup_root_refuses_traversal(bad):
    with pytest.raises(UnsafePath):
        validate_root(bad)


def test_cgroup_root_is_a_cgroup_path():
    # "/cosched/n1" is how cgroup paths are written (/proc/PID/cgroup): same as "cosched/n1"
    assert validate_root("/cosched/n1") == validate_root("cosched/n1/") == "cosched/n1"


def test_confined_paths_never_leave_root():
    c = Confined(Path("/sys/fs/cgroup/cpu"), "cosched/n1")
    assert c.job("j1") == Path("/sys/fs/cgroup/cpu/cosched/n1/j1")
    for bad in ["..", "../n2", "a/b", "", ".hidden"]:
        with pytest.raises(UnsafePath):
            c.job(bad)
    with pytest.raises(UnsafePath):
        c.check(Path("/sys/fs/cgroup/cpu/cosched/n1/../n2/cpu.cfs_quota_us"))
    with pytest.raises(UnsafePath):
        c.check(Path("/sys/fs/cgroup/cpu/cosched/n1x"))
    assert c.check(Path("/sys/fs/cgroup/cpu/cosched/n1/j1/cpu.cfs_quota_us"))
    assert c.ancestors() == [Path("/sys/fs/cgroup/cpu/cosched")]


def test_job_quota_arithmetic():
    # quota = fraction x cores x cpu_per_core x period
    assert job_quota_us(0.2, 1, 1.0, 100_000, None, cap_full=False) == 20_000
    assert job_quota_us(0.5, 4, 0.25, 100_000, None, cap_full=False) == 50_000
    # full quota: no limit on a real node, the allocation on an emulated one
    assert job_quota_us(None, 4, 1.0, 100_000, None, cap_full=False) is None
    assert job_quota_us(None, 4, 0.25, 100_000, 150_000, cap_full=True) == 100_000
    # never above the node (a child above its parent is refused by the kernel)
    assert job_quota_us(1.0, 4, 1.0, 100_000, 150_000, cap_full=True) == 150_000
    # never below the kernel's 1 ms
    assert job_quota_us(0.0, 1, 1.0, 100_000, None, cap_full=False) == 1000
    assert node_quota_us(1.5, 100_000) == 150_000 and node_quota_us(None, 100_000) is None


def test_registration_validation(tmp_path):
    good = {"job_id": "j1", "pids": [os.getpid()], "cores": 2, "walltime_s": 60,
            "tasks_total": 10, "job_class": "montage/mProject"}
    spec = parse_registration(good, tmp_path, now=100.0)
    assert spec.start_time == 100.0 and spec.cores == 2.0
    assert spec.progress_file == str(Path(os.path.realpath(tmp_path)) / "j1.json")
    inside = parse_registration({**good, "progress_file": str(tmp_path / "sub.json")}, tmp_path)
    assert inside.progress_file.endswith("sub.json")
    cases = [
        ({**good, "job_id": "../../x"}, "not a valid job id"),
        ({k: v for k, v in good.items() if k != "pids"}, "pids is required"),
        ({**good, "pids": [0]}, "not a valid process id"),
        ({**good, "pids": ["12"]}, "not a valid process id"),
        ({**good, "cores": 0}, "cores"),
        ({**good, "cores": float("nan")}, "finite"),
        ({**good, "walltime_s": -1}, "walltime_s"),
        ({**good, "progress_file": "/etc/passwd"}, "outside"),
        ({**good, "progress_file": str(tmp_path / ".." / "x.json")}, "outside"),
        ({**good, "colour": "red"}, "unknown field"),
        ([1, 2], "JSON object"),
    ]
    for body, msg in cases:
        with pytest.raises(InvalidInput, match=msg):
            parse_registration(body, tmp_path)
    # with the agent's admission rule (monitoring/admission.py), which names the rule
    with pytest.raises(InvalidInput, match="agent itself"):
        parse_registration(good, tmp_path, admission=Admission())
    with pytest.raises(InvalidInput, match=r"job j1: pid 1 \(init\).*rule 'init'"):
        parse_registration({**good, "pids": [1]}, tmp_path, admission=Admission())


def test_progress_file_symlink_out_of_dir_is_refused(tmp_path):
    d = tmp_path / "progress"
    d.mkdir()
    (d / "link").symlink_to("/etc")
    with pytest.raises(InvalidInput, match="outside"):
        parse_registration({"job_id": "j", "pids": [os.getpid()], "cores": 1,
                            "progress_file": str(d / "link" / "passwd")}, d)


def test_progress_rate_from_successive_records():
    recs = [Progress(0, 100, 1000.0), Progress(10, 100, 1010.0), Progress(30, 100, 1020.0)]
    assert collect.progress_rate(recs[:1], 1020.0) is None
    assert collect.progress_rate(recs, 1020.0) == pytest.approx(1.5)
    # only the recent window (plus one record before it) counts
    assert collect.progress_rate(recs, 1020.0, window_s=5) == pytest.approx(2.0)
    # a stalled job: the rate decays once no record came for longer than the window
    assert collect.progress_rate(recs, 1020.0 + 100, window_s=60) == pytest.approx(30 / 120)


def test_cpu_accounting_helpers():
    assert collect.cpu_percent(1.0, 2.0, 1) == 50.0
    assert collect.cpu_percent(1.0, 1.0, 4) == 25.0
    assert collect.cpu_percent(1.0, 0.0, 1) is None
    prev = {1: 5.0, 2: 1.0}
    cur = {1: 5.5, 3: 0.2, 4: 9.0}
    created = {3: 101.0, 4: 50.0}
    # pid 1 +0.5; pid 3 new since t=100 counts whole; pid 4 older than the reading: not counted
    assert collect.per_process_cpu_delta(prev, cur, created, 100.0) == pytest.approx(0.7)
    assert collect.count_cpu_list("0-3,8,10-11") == 7


def test_happiness_is_json_safe():
    assert finite_happiness(float("inf")) == HAPPINESS_CAP
    assert finite_happiness(None) is None and finite_happiness(0.5) == 0.5


def test_lease_keeper_with_fake_clock():
    now = [0.0]
    k = LeaseKeeper(max_lease_s=60, clock=lambda: now[0], wall_clock=lambda: 1000 + now[0])
    with pytest.raises(InvalidInput, match="lease_s"):
        k.grant("j", 0.5, 0)
    with pytest.raises(InvalidInput, match="lease_s"):
        k.grant("j", 0.5, 61)
    k.grant("a", 0.5, 10)
    k.grant("b", 0.2, 5)
    assert k.seconds_to_next_expiry() == 5
    now[0] = 4.9
    assert k.expired() == []
    k.grant("b", 0.2, 5)  # renewal restarts the lease
    now[0] = 9.0
    assert k.expired() == []
    now[0] = 10.0
    gone = k.expired()
    assert [g.job_id for g in gone] == ["b", "a"] or sorted(g.job_id for g in gone) == ["a", "b"]
    assert "not renewed" in gone[0].expiry_reason()
    assert len(k) == 0 and k.seconds_to_next_expiry() is None


def test_state_file_round_trip_and_broken_file(tmp_path):
    sf = StateFile(tmp_path / "state.json")
    assert sf.load() is None
    sf.save(cgroup_version=1, cgroup_root="cosched", jobs={"j": {"spec": {"job_id": "j"}}})
    st = sf.load()
    assert st.pid == os.getpid() and st.jobs["j"]["spec"]["job_id"] == "j" and st.problem is None
    (tmp_path / "state.json").write_text("{not json")
    st = sf.load()
    assert st.problem and "unusable" in st.problem and not st.jobs
    assert not (tmp_path / "state.json").exists()  # set aside, not reused
    assert list(tmp_path.glob("state.json.broken-*"))


def test_discover_slurm_jobs_reads_batch_cgroups(tmp_path):
    job = tmp_path / "slurm_n1" / "uid_0" / "job_42"
    (job / "step_0").mkdir(parents=True)
    (job / "cgroup.procs").write_text("")
    (job / "step_0" / "cgroup.procs").write_text(f"{os.getpid()}\n")
    (tmp_path / "slurm_n1" / "uid_0" / "job_x").mkdir()
    found = collect.discover_slurm_jobs(tmp_path)
    assert found == {"42": job}
    assert collect.cgroup_tree_pids(job) == {os.getpid()}


def test_client_errors_are_clear():
    c = AgentClient("http://127.0.0.1:1", token="t" * 20, timeout=1)
    with pytest.raises(AgentError, match="cannot reach agent") as e:
        c.jobs()
    assert e.value.status is None
    assert c.health() is False
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        AgentClient("ftp://x")


def test_progress_command_writes_the_protocol_file(tmp_path):
    from coscheduler.cli.progress import progress

    f = tmp_path / "p.json"
    r = CliRunner().invoke(progress, ["--done", "3", "--total", "10", "--file", str(f)])
    assert r.exit_code == 0, r.output
    rec = json.loads(f.read_text())
    assert rec["done"] == 3 and rec["total"] == 10
    r = CliRunner().invoke(progress, ["--done", "3"], env={"COSCHED_PROGRESS_FILE": ""})
    assert r.exit_code != 0 and "COSCHED_PROGRESS_FILE" in r.output
    r = CliRunner().invoke(progress, ["--done", "11", "--total", "10", "--file", str(f)])
    assert r.exit_code != 0 and "larger" in r.output
    # the agent's reader refuses a symlink in place of the file
    (tmp_path / "evil.json").symlink_to(f)
    files = ProgressFiles(tmp_path)
    files.list(1)
    assert files.read(str(tmp_path / "evil.json"), os.getuid()) is None
    assert files.read(str(f), os.getuid()).done == 3


def test_resident_memory_of_a_live_process_is_read_two_ways():
    """The exact reading (smaps_rollup, the fallback when stat's approximate counter
    reads 0) and the stat reading both see this process's memory, within a few MiB."""
    me = os.getpid()
    exact = collect.proc_rss_exact(me)
    st = collect.proc_stat(me)
    assert st is not None and exact > 1 << 20
    assert abs(st.rss_bytes - exact) < 16 << 20, (st.rss_bytes, exact)
    assert collect.proc_rss_exact(2**22 + 12345) == 0  # no such pid: 0, no error


def test_an_agent_that_lets_calls_time_out_is_not_asked_again_for_a_while():
    """A frozen agent (SIGSTOP, a swapping node) accepts connections and never answers. A
    backend calls each agent several times a pass: waiting out the timeout on each call
    made every pass of a real 2-node Slurm cluster take 15-25 s with one agent stopped.
    After a timeout the client fails at once, saying why, until its quiet time is over
    (the timeout, doubling with each timeout in a row); an answer ends it."""
    import socket
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, HTTPServer

    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(16)          # the kernel accepts; no one ever answers
    port = frozen.getsockname()[1]
    now = [1000.0]
    c = AgentClient(f"http://127.0.0.1:{port}", token="t" * 20, timeout=0.3)
    c._clock = lambda: now[0]
    try:
        t0 = time.monotonic()
        with pytest.raises(AgentError, match="timed out"):
            c.jobs()
        assert time.monotonic() - t0 >= 0.25
        t0 = time.monotonic()
        with pytest.raises(AgentError, match=r"not asked: .* 1 call\(s\) in a row time out .* next try in 0.3 s"):
            c.set_quota("j1", 0.5, 30)
        assert time.monotonic() - t0 < 0.1
        now[0] += 0.31                           # quiet time over: asked, times out again
        with pytest.raises(AgentError, match="timed out"):
            c.jobs()
        with pytest.raises(AgentError, match="next try in 0.6 s"):   # doubled
            c.jobs()
        assert c.health() is False               # (health() says False, fast)
        c._timeouts = 5000                       # a frozen agent for days: no overflow
        now[0] += 61.0
        with pytest.raises(AgentError, match="timed out"):
            c.jobs()
        assert c._quiet_until - now[0] == 60.0
    finally:
        frozen.close()

    class Answers(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        c2 = AgentClient(f"http://127.0.0.1:{server.server_port}", timeout=0.3)
        c2._clock = lambda: now[0]
        c2._timeouts, c2._quiet_until = 3, now[0] + 1.0
        assert c2.health() is False              # still quiet
        now[0] += 1.01
        assert c2.health() is True               # answered: the count starts again
        assert c2._timeouts == 0
    finally:
        server.shutdown()
        server.server_close()


def test_a_state_file_past_its_cap_is_set_aside_unread(tmp_path):
    from monitoring.recovery import MAX_STATE_BYTES
    path = tmp_path / "state.json"
    with open(path, "wb") as f:
        f.truncate(MAX_STATE_BYTES + 1)      # (sparse: nothing is written)
    st = StateFile(path).load()
    assert st.problem and "unusable" in st.problem and f"more than the {MAX_STATE_BYTES}" in st.problem
    assert not path.exists() and list(tmp_path.glob("state.json.broken-*"))
