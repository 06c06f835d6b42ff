"""What a probe of the node agent found on 2026-12-03 (issue 24: holds under faults and bad
input), each held here on a MIMIC cgroup v2 directory (no root needed); the pid-reuse case on
the real kernel is in test_agent_harden_root.py.

- a registered pid whose process ended, its number given to another process, pulled that
  process into the job's cgroup (and under its quota);
- an unregister whose quota write failed marked the job released with its quota still in
  the kernel, for good (a tick re-asserts only running jobs);
- after a restart, a job unregistered before it came back as running;
- a job of 5e-324 cores was accepted and its CPU % read Infinity (not JSON);
- HTTP framing: a GET's unread body, or a body framed by Transfer-Encoding and
  Content-Length, or by two Content-Lengths, was read as a second request; a header line
  without a colon dropped the headers after it without a word; an unparsable request line
  was answered with a bare JSON body (no status line); POST /healthz was 404, not 405;
- error messages echoed a 500 KB value whole; a 408 for slow headers named the other deadline.
"""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import time

import pytest

from monitoring.agent import NodeAgent
from monitoring.api import AgentServer
from monitoring.cgroupfs import CgroupError
from monitoring.mimic import MimicV2FS

TOKEN = "test-token-0123456789abcdef"
SLEEPY = [sys.executable, "-c", "import time; time.sleep(120)"]


def _agent(fs: MimicV2FS, state) -> NodeAgent:
    return NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=state, max_lease_s=600)


@pytest.fixture
def node(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agents: list[NodeAgent] = []
    sleepers: list[subprocess.Popen] = []

    def agent() -> NodeAgent:
        a = _agent(fs, tmp_path / "state")
        agents.append(a)
        return a

    def sleeper() -> subprocess.Popen:
        p = subprocess.Popen(SLEEPY)
        sleepers.append(p)
        return p

    yield fs, agent, sleeper
    for p in sleepers:
        p.kill()
        p.wait()
    for a in agents:
        if not a.closed:
            a.close()


def _cpu_max(fs: MimicV2FS, job: str) -> str:
    return (fs.mount / "cosched" / job / "cpu.max").read_text().split()[0]


def _in_job_cgroup(fs: MimicV2FS, job: str, pid: int) -> bool:
    return str(pid) in (fs.mount / "cosched" / job / "cgroup.procs").read_text().split()


def _full_tick(agent: NodeAgent) -> None:
    agent.counters["ticks"] = 0   # (every io_every-th tick reads every process again)
    agent.tick()


# -- pid reuse --------------------------------------------------------------------------------

def test_a_registered_number_now_held_by_another_process_is_not_pulled_into_the_job(node):
    fs, agent, sleeper = node
    a = agent()
    leader, stranger = sleeper(), sleeper()
    a.register_job({"job_id": "j", "pids": [leader.pid, stranger.pid], "cores": 1})
    a.set_quota("j", 0.25, lease_s=300)
    assert _in_job_cgroup(fs, "j", stranger.pid)
    # As if ``stranger``'s number had been the job's ended process's, given to a new process
    # outside the job: the process holding it is not the one registered (another start time).
    fs.write(fs.mount / "cgroup.procs", str(stranger.pid))
    a._jobs["j"].pid_starts[stranger.pid] -= 500
    _full_tick(a)
    assert not _in_job_cgroup(fs, "j", stranger.pid), "a stranger was moved under the job's quota"
    assert stranger.pid not in a._jobs["j"].spec.pids      # forgotten for good
    assert leader.pid in a._jobs["j"].spec.pids and _in_job_cgroup(fs, "j", leader.pid)
    assert any("no longer followed" in e["event"] for e in a.job("j")["events"])
    # nor is it the job's when another job registers it
    a.register_job({"job_id": "k", "pids": [stranger.pid], "cores": 1})
    assert _in_job_cgroup(fs, "k", stranger.pid)


def test_after_a_restart_only_the_registered_processes_that_are_still_them_are_followed(node):
    fs, agent, sleeper = node
    a = agent()
    leader, other = sleeper(), sleeper()
    a.register_job({"job_id": "j", "pids": [leader.pid, other.pid], "cores": 1})
    a.set_quota("j", 0.5, lease_s=300)
    a._jobs["j"].pid_starts[other.pid] -= 500    # (its number: another process by now)
    a._save()
    fs.write(fs.mount / "cgroup.procs", str(other.pid))   # (outside the job, as a newcomer)
    a.close(restore=False)                                 # (as after kill -9)
    b = agent()
    assert b._jobs["j"].spec.pids == (leader.pid,)
    _full_tick(b)
    assert not _in_job_cgroup(fs, "j", other.pid)



def test_a_boot_time_moved_by_a_second_between_two_agents_keeps_the_registered_processes(
        node, monkeypatch):
    """/proc/stat gives the boot time in whole seconds, computed from the wall clock: when
    the clock is adjusted it moves by one, and every process's epoch start time with it.
    Seen in CI (a daemon taken for dead). The next agent still knows the registered
    processes: identity is the start in clock ticks since boot, which never moves."""
    from monitoring import collect

    fs, agent, sleeper = node
    a = agent()
    leader = sleeper()
    a.register_job({"job_id": "j", "pids": [leader.pid], "cores": 1})
    a.set_quota("j", 0.5, lease_s=300)
    a.close(restore=False)                                 # (as after kill -9)
    monkeypatch.setattr(collect, "_BOOT", collect._BOOT + 1.0)
    b = agent()
    assert b._jobs["j"].spec.pids == (leader.pid,)
    _full_tick(b)
    assert _in_job_cgroup(fs, "j", leader.pid)

# -- unregister whose write fails ------------------------------------------------------------

def test_an_unregister_whose_quota_write_fails_keeps_the_job_and_lifts_it_later(node, monkeypatch):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    a.register_job({"job_id": "j", "pids": [p.pid], "cores": 1})
    a.set_quota("j", 0.1, lease_s=300)
    assert _cpu_max(fs, "j") == "10000"
    real_write = fs.write
    read_only = {"on": True}

    def write(path, value):
        if read_only["on"] and str(path).endswith("/j/cpu.max"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_write(path, value)
    monkeypatch.setattr(fs, "write", write)
    with pytest.raises(CgroupError, match="could not be lifted"):
        a.unregister("j")
    view = a.job("j")
    assert view["status"] == "running" and view["cpu_fraction"] == 1.0
    assert _cpu_max(fs, "j") == "10000"      # (the kernel still holds it)
    read_only["on"] = False
    _full_tick(a)                              # the tick writes the wanted "no limit"
    assert _cpu_max(fs, "j") == "max"
    assert a.unregister("j")["status"] == "released"


def test_clearing_a_quota_that_cannot_be_written_says_so(node, monkeypatch):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    a.register_job({"job_id": "j", "pids": [p.pid], "cores": 1})
    a.set_quota("j", 0.1, lease_s=300)
    real_write = fs.write
    monkeypatch.setattr(fs, "write", lambda path, value: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system", str(path)))
        if str(path).endswith("/j/cpu.max") else real_write(path, value))
    with pytest.raises(CgroupError, match="written again at every tick"):
        a.clear_quota("j")
    monkeypatch.setattr(fs, "write", real_write)
    _full_tick(a)
    assert _cpu_max(fs, "j") == "max"


def test_a_failed_quota_write_leaves_the_view_at_what_the_kernel_holds(node, monkeypatch):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    a.register_job({"job_id": "j", "pids": [p.pid], "cores": 1})
    before = a.job("j")["quota_us"]
    real_write = fs.write
    monkeypatch.setattr(fs, "write", lambda path, value: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system", str(path)))
        if str(path).endswith("/j/cpu.max") else real_write(path, value))
    with pytest.raises(CgroupError):
        a.set_quota("j", 0.5, lease_s=300)
    assert a.job("j")["quota_us"] == before and a.job("j")["cpu_fraction"] == 1.0


# -- restart and released jobs ---------------------------------------------------------------

def test_a_job_unregistered_before_a_restart_stays_released_and_can_be_registered_again(node):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    a.register_job({"job_id": "rr", "pids": [p.pid], "cores": 1})
    assert a.unregister("rr")["status"] == "released"
    assert _in_job_cgroup(fs, "rr", p.pid)    # (its process runs on in its cgroup)
    a.close(restore=False)
    b = agent()
    assert b.job("rr")["status"] == "released"
    with pytest.raises(Exception, match="released"):
        b.set_quota("rr", 0.5, lease_s=60)
    # registered again by its own process: managed again, not refused for good
    view = b.register_job({"job_id": "rr", "pids": [p.pid], "cores": 1})
    assert view["status"] == "running"
    assert b.set_quota("rr", 0.5, lease_s=60)["cpu_fraction"] == 0.5


# -- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("cores", 5e-324), ("cores", 0.0001), ("mem_mb", 5e-324)])
def test_vanishing_cores_or_memory_are_refused(node, field, value):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    body = {"job_id": "tiny", "pids": [p.pid], "cores": 1, field: value}
    with pytest.raises(Exception, match=field):
        a.register_job(body)


# -- HTTP ------------------------------------------------------------------------------------

@pytest.fixture
def served(node):
    fs, agent, sleeper = node
    a = agent()
    server = AgentServer(a, "127.0.0.1:0", TOKEN, read_timeout_s=3.0).start()
    p = sleeper()
    a.register_job({"job_id": "j1", "pids": [p.pid], "cores": 1})
    a.set_quota("j1", 0.25, lease_s=300)
    host, port = server.url[len("http://"):].rsplit(":", 1)
    yield a, (host, int(port)), fs
    server.shutdown()


def _exchange(addr, data: bytes, wait: float = 1.0) -> bytes:
    s = socket.create_connection(addr)
    s.settimeout(wait)
    s.sendall(data)
    got = b""
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait + 2:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        got += chunk
    s.close()
    return got


def _smuggled() -> bytes:
    return (b"DELETE /v1/jobs/j1/quota HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + TOKEN.encode() + b"\r\nContent-Length: 0\r\n\r\n")


def test_a_gets_unread_body_is_never_read_as_a_second_request(served):
    a, addr, fs = served
    inner = _smuggled()
    got = _exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: "
                    + str(len(inner)).encode() + b"\r\n\r\n" + inner)
    assert got.count(b"HTTP/1.1 ") == 1, got
    assert a.job("j1")["cpu_fraction"] == 0.25 and _cpu_max(fs, "j1") == "25000"


_QUOTA = b'{"cpu_fraction": 0.5, "lease_s": 60}'
_LEN = str(len(_QUOTA)).encode()


@pytest.mark.parametrize("framing", [
    b"Transfer-Encoding: chunked\r\nContent-Length: " + _LEN + b"\r\n",
    b"Content-Length: " + _LEN + b"\r\nContent-Length: 2\r\n",
])
def test_a_body_framed_two_ways_is_refused_and_the_rest_not_run(served, framing):
    a, addr, fs = served
    got = _exchange(addr, b"PUT /v1/jobs/j1/quota HTTP/1.1\r\nHost: x\r\n" + framing
                    + b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n" + _QUOTA
                    + _smuggled())
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert got.count(b"HTTP/1.1 ") == 1, got
    assert _cpu_max(fs, "j1") == "25000"    # neither the PUT nor what followed it ran


def test_a_header_line_without_a_colon_is_a_400_that_says_so(served):
    a, addr, fs = served
    got = _exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nfoo bar\r\nX-A: b\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert b"malformed header line" in got



def test_a_header_folded_over_two_lines_is_a_400(served):
    a, addr, fs = served
    got = _exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert b"X-A" in got and b"folded" in got

@pytest.mark.parametrize("hosts", [b"", b"Host: a\r\nHost: b\r\n"])
def test_an_http_11_request_without_exactly_one_host_is_a_400(served, hosts):
    a, addr, fs = served
    got = _exchange(addr, b"GET /healthz HTTP/1.1\r\n" + hosts + b"\r\n")
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert b"Host" in got
    # HTTP/1.0 has no Host rule; one Host is answered
    assert _exchange(addr, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert _exchange(addr, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n").startswith(b"HTTP/1.1 200")

@pytest.mark.parametrize("line", [b"GARBAGE", b"GET / HTTP/1.x", b"GET / HTTP/1.1 extra"])
def test_an_unparsable_request_line_gets_a_whole_http_answer(served, line):
    a, addr, fs = served
    got = _exchange(addr, line + b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"Content-Type: application/json" in head and "error" in json.loads(body)


def test_fixed_endpoints_answer_405_to_other_methods(served):
    a, addr, fs = served
    for path in (b"/healthz", b"/metrics", b"/v1/node"):
        got = _exchange(addr, b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 405"), (path, got[:200])


def test_a_huge_value_is_not_echoed_back_whole(served):
    a, addr, fs = served
    body = json.dumps({"cpu_fraction": "A" * 500_000, "lease_s": 30}).encode()
    got = _exchange(addr, b"PUT /v1/jobs/j1/quota HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                    + TOKEN.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                    + b"\r\n\r\n" + body, wait=2.0)
    assert got.startswith(b"HTTP/1.1 400"), got[:200]
    assert len(got) < 2000, len(got)
    assert b"cpu_fraction" in got


def test_a_bad_content_length_is_named(served):
    a, addr, fs = served
    got = _exchange(addr, b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                    + TOKEN.encode() + b"\r\nContent-Length: 0x24\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400") and b"0x24" in got, got[:300]


def test_slow_headers_get_a_408_naming_the_header_deadline(node):
    fs, agent, sleeper = node
    a = agent()
    server = AgentServer(a, "127.0.0.1:0", TOKEN, read_timeout_s=10.0, header_timeout_s=1.0).start()
    host, port = server.url[len("http://"):].rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)))
        s.settimeout(5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: a")
        got = b""
        while chunk := s.recv(4096):     # headers and body may come in two segments
            got += chunk
        s.close()
        assert got.startswith(b"HTTP/1.1 408"), got[:80]
        assert b"within 1 s" in got, got
    finally:
        server.shutdown()


def test_a_cgroup_root_removed_by_someone_else_is_made_again_at_the_next_registration(node):
    fs, agent, sleeper = node
    a = agent()
    root = fs.mount / "cosched"
    assert root.is_dir() and not [d for d in root.iterdir() if d.is_dir()]
    fs.rmdir(root)
    assert not root.is_dir()
    p = sleeper()
    view = a.register_job({"job_id": "j", "pids": [p.pid], "cores": 1})
    assert view["status"] == "running" and _in_job_cgroup(fs, "j", p.pid)
    assert any("made again" in e["event"] for e in a.node()["events"])


def test_empty_lines_before_a_request_line_are_ignored(served):
    a, addr, fs = served
    got = _exchange(addr, b"\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200"), got[:200]


def test_a_key_given_twice_in_a_request_body_is_a_400(served):
    a, addr, fs = served
    body = b'{"cpu_fraction": 0.1, "lease_s": 60, "cpu_fraction": 1.0}'
    got = _exchange(addr, b"PUT /v1/jobs/j1/quota HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                    + TOKEN.encode() + b"\r\nContent-Length: " + str(len(body)).encode()
                    + b"\r\n\r\n" + body)
    assert got.startswith(b"HTTP/1.1 400") and b"given twice" in got, got[:300]
    assert _cpu_max(fs, "j1") == "25000"


def test_a_job_cgroup_removed_by_someone_else_is_made_again_at_the_next_tick(node):
    fs, agent, sleeper = node
    a = agent()
    p = sleeper()
    a.register_job({"job_id": "j", "pids": [p.pid], "cores": 1})
    a.set_quota("j", 0.25, lease_s=300)
    fs.write(fs.mount / "cgroup.procs", str(p.pid))      # moved out, then the empty cgroup removed
    fs.rmdir(fs.mount / "cosched" / "j")
    _full_tick(a)
    assert _in_job_cgroup(fs, "j", p.pid) and _cpu_max(fs, "j") == "25000"
    assert any("made again" in e["event"] for e in a.job("j")["events"])
    _full_tick(a)                                          # once: nothing more to make
    assert sum("made again" in e["event"] for e in a.job("j")["events"]) == 1
