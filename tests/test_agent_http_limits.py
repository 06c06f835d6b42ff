"""The agent's HTTP server under a crowd and odd input (issue 8, items 5-9), on a MIMIC cgroup
v2 directory (no root needed; the real-kernel variants are in test_agent_harden_root.py).

Each test holds the server to an answer the issue asked for: no connection reset for a crowd
of 200, idle and slow connections closed (408), a cap on connections (503), 400 (never 500)
for odd ids, overflowing numbers and deep JSON, and no traceback when a client leaves early.
"""

from __future__ import annotations

import http.client
import json
import logging
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from monitoring.agent import NodeAgent
from monitoring.api import AgentServer
from monitoring.client import AgentClient
from monitoring.mimic import MimicV2FS

TOKEN = "test-token-0123456789abcdef"
SLEEPY = [sys.executable, "-c", "import time; time.sleep(120)"]


@pytest.fixture
def served(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "state",
                      max_lease_s=600)
    sleeper = subprocess.Popen(SLEEPY)
    servers = []

    def serve(**kw) -> AgentServer:
        s = AgentServer(agent, "127.0.0.1:0", TOKEN, **kw).start()
        servers.append(s)
        return s

    yield agent, serve, sleeper, fs
    sleeper.kill()
    sleeper.wait()
    for s in servers:
        s.shutdown()
    agent.close()


def _addr(server) -> tuple[str, int]:
    host, port = server.url[len("http://"):].rsplit(":", 1)
    return host, int(port)


def _request(server, method, path, body: bytes | None = None, headers=None, timeout=10):
    c = http.client.HTTPConnection(*_addr(server), timeout=timeout)
    h = {"Authorization": f"Bearer {TOKEN}", "Content-Length": str(len(body or b""))}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (p.read_text() if p.is_file() else "<dir>")
            for p in sorted(root.rglob("*"))}


# ---- item 5: a crowd -------------------------------------------------------------------
def test_a_crowd_of_200_clients_gets_answers_not_resets(served):
    agent, serve, sleeper, fs = served
    server = serve()
    AgentClient(server.url, token=TOKEN).register_job("j1", [sleeper.pid], 1)
    clients, per_client = 200, 2   # 400 quota PUTs, each on a new connection, all at once
    barrier = threading.Barrier(clients)
    statuses: list[int] = []
    errors: list[str] = []

    def client(i: int) -> None:
        barrier.wait()
        for k in range(per_client):
            body = json.dumps({"cpu_fraction": 0.1 + 0.01 * (i % 50), "lease_s": 60}).encode()
            try:
                statuses.append(_request(server, "PUT", "/v1/jobs/j1/quota", body, timeout=30)[0])
            except OSError as e:
                errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [], f"{len(errors)} of {clients * per_client} requests failed: {errors[:3]}"
    assert statuses == [200] * (clients * per_client)


# ---- item 6: idle and slow connections, a cap --------------------------------------------
def test_idle_connections_are_closed_and_do_not_keep_threads(served):
    agent, serve, sleeper, fs = served
    server = serve(idle_timeout_s=0.5)
    before = threading.active_count()
    socks = [socket.create_connection(_addr(server)) for _ in range(20)]
    time.sleep(0.2)
    assert server.active_connections == 20
    for s in socks:
        s.settimeout(5)
        assert s.recv(1) == b"", "an idle connection was not closed by the server"
        s.close()
    deadline = time.monotonic() + 5
    while server.active_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.active_connections == 0
    assert threading.active_count() <= before + 1


def test_a_request_that_does_not_arrive_whole_in_time_gets_408(served):
    agent, serve, sleeper, fs = served
    server = serve(read_timeout_s=1.0)
    # a body shorter than its Content-Length
    s = socket.create_connection(_addr(server))
    s.sendall(b"PUT /v1/jobs/j1/quota HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
              b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n{\"cpu")
    s.settimeout(5)
    t0 = time.monotonic()
    answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert 0.8 < time.monotonic() - t0 < 3.0
    s.close()
    # headers trickling in one byte at a time (slowloris): the deadline is for the whole request
    s = socket.create_connection(_addr(server))
    s.settimeout(5)
    t0 = time.monotonic()
    got = b""
    for ch in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
        try:
            s.send(bytes([ch]))
        except OSError:
            break
        time.sleep(0.1)
        if time.monotonic() - t0 > 1.5:
            break
    got = s.recv(4096)
    assert got.startswith(b"HTTP/1.1 408"), got[:80]
    assert time.monotonic() - t0 < 3.0
    s.close()
    assert _request(server, "GET", "/healthz")[0] == 200


def test_connections_over_the_cap_make_room_or_get_503_at_once(served):
    """Idle untrusted connections are closed to make room for a newcomer (issue 24, item 4);
    only when every slot is held by a caller that presented the token is it a 503."""
    agent, serve, sleeper, fs = served
    server = serve(max_connections=4, idle_timeout_s=30)
    held = [socket.create_connection(_addr(server)) for _ in range(4)]
    time.sleep(0.2)
    assert _request(server, "GET", "/healthz")[0] == 200   # an idle one was closed for it
    for s in held:
        s.close()
    # four kept-alive connections of the controller (token given): nothing may be closed
    trusted = []
    for _ in range(4):
        c = http.client.HTTPConnection(*_addr(server), timeout=10)
        c.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
        r = c.getresponse()
        r.read()
        assert r.status == 200
        trusted.append(c)
    t0 = time.monotonic()
    status, data = _request(server, "GET", "/healthz")
    assert status == 503 and b"too many connections" in data
    assert time.monotonic() - t0 < 1.0
    for c in trusted:
        c.close()
    deadline = time.monotonic() + 5
    while server.active_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _request(server, "GET", "/healthz")[0] == 200


# ---- item 7: ids ---------------------------------------------------------------------------
@pytest.mark.parametrize("job_id", ["a\n", "tasks", "cgroup.procs", "cpu.cfs_quota_us", "cpu.max",
                                    "notify_on_release", "cpuacct.usage", "memory.limit_in_bytes"])
def test_ids_ending_in_a_newline_or_named_like_cgroup_files_are_400(served, job_id):
    agent, serve, sleeper, fs = served
    server = serve()
    before = _tree(fs.mount)
    body = json.dumps({"job_id": job_id, "pids": [sleeper.pid], "cores": 1}).encode()
    status, data = _request(server, "POST", "/v1/jobs", body)
    assert status == 400, data
    assert job_id.strip() in json.loads(data)["error"]
    from urllib.parse import quote
    for method, path in [("GET", f"/v1/jobs/{quote(job_id)}"),
                         ("PUT", f"/v1/jobs/{quote(job_id)}/quota"),
                         ("DELETE", f"/v1/jobs/{quote(job_id)}")]:
        st, data = _request(server, method, path, b'{"cpu_fraction": 0.5, "lease_s": 5}')
        assert st == 400, (method, path, data)
    assert _tree(fs.mount) == before


# ---- item 8: numbers and nesting ---------------------------------------------------------------
BIG = 10 ** 400


@pytest.mark.parametrize("field", ["cores", "walltime_s", "start_time", "mem_mb", "tasks_total", "pids"])
def test_integers_too_large_for_a_float_are_400(served, field, caplog):
    agent, serve, sleeper, fs = served
    server = serve()
    body = {"job_id": "big", "pids": [sleeper.pid], "cores": 1, field: BIG}
    if field == "pids":
        body["pids"] = [BIG]
    status, data = _request(server, "POST", "/v1/jobs", json.dumps(body).encode())
    assert status == 400, data
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    agent.tick()  # nothing half-registered breaks the next pass
    assert _request(server, "GET", "/healthz")[0] == 200


def test_quota_numbers_too_large_and_deep_json_are_400(served, caplog):
    agent, serve, sleeper, fs = served
    server = serve()
    AgentClient(server.url, token=TOKEN).register_job("j1", [sleeper.pid], 1)
    bodies = [
        json.dumps({"cpu_fraction": BIG, "lease_s": 10}).encode(),
        json.dumps({"cpu_fraction": 0.5, "lease_s": BIG}).encode(),
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b'{"cpu_fraction": 1' + b"0" * 5000 + b', "lease_s": 1}',
        b'{"cpu_fraction": 1e999, "lease_s": 10}',
        b'{"cpu_fraction": NaN, "lease_s": 10}',
        b"\xff\xfe not utf-8",
    ]
    for body in bodies:
        status, data = _request(server, "PUT", "/v1/jobs/j1/quota", body)
        assert status == 400, (body[:40], data)
        json.loads(data)
    status, _ = _request(server, "POST", "/v1/jobs", b"{}", headers={"Content-Length": "9" * 5000})
    assert status == 413
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert agent.job("j1")["cpu_fraction"] == 1.0
    assert _request(server, "GET", "/healthz")[0] == 200


# ---- item 9: clients that leave early ------------------------------------------------------------
def test_clients_that_leave_early_leave_no_traceback(served, capfd, caplog):
    agent, serve, sleeper, fs = served
    server = serve()
    AgentClient(server.url, token=TOKEN).register_job("j1", [sleeper.pid], 1)
    for i in range(60):
        s = socket.create_connection(_addr(server))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        path = ["/metrics", "/v1/jobs", "/v1/node"][i % 3]
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.close()
    time.sleep(0.5)
    assert _request(server, "GET", "/healthz")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BrokenPipe" not in err and "ConnectionReset" not in err, err[-2000:]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# ---- issue 24: a budget per peer -------------------------------------------------------------
FLOODER, NEIGHBOUR = "127.0.0.2", "127.0.0.3"   # two peers on loopback (all of 127/8 is local)


def _connect_from(server, source: str) -> socket.socket:
    """A connection whose peer address, as the agent sees it, is ``source``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(_addr(server))
    return s


def _closed_by_server(s: socket.socket) -> bool:
    """Has the agent closed this connection (end of file or reset waiting to be read)?"""
    readable, _, _ = select.select([s], [], [], 0)
    if not readable:
        return False   # nothing to read: open and idle
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _get_on(s: socket.socket, path: str) -> bytes:
    """One GET on an already open connection; the answer's status line."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return s.recv(4096).split(b"\r\n", 1)[0]


def test_a_flood_from_one_peer_uses_its_own_budget_not_another_peers(served):
    """Peer A opens far more idle connections than its budget: the agent closes A's own
    oldest ones to make room for A's newcomers, never the older idle ones of peer B, and B
    and the controller (token) still get answers at once. The cap and the untrusted share
    are set well above the budgets, so only the per-peer budget can close A's connections."""
    agent, serve, sleeper, fs = served
    budget = 3
    server = serve(max_connections=16, reserve=2, max_per_peer=budget, idle_timeout_s=30)
    AgentClient(server.url, token=TOKEN).register_job("j1", [sleeper.pid], 1)
    socks: list[socket.socket] = []
    try:
        neighbour = [_connect_from(server, NEIGHBOUR) for _ in range(2)]   # the oldest idle ones
        socks += neighbour
        time.sleep(0.2)
        flood = [_connect_from(server, FLOODER) for _ in range(4 * budget)]
        socks += flood
        deadline = time.monotonic() + 5
        while sum(not _closed_by_server(s) for s in flood) > budget and time.monotonic() < deadline:
            time.sleep(0.05)
        open_flood = [s for s in flood if not _closed_by_server(s)]
        assert len(open_flood) == budget, f"peer A holds {len(open_flood)} connections, budget {budget}"
        assert open_flood == flood[-budget:], "not A's oldest connections were closed"
        # B's idle connections, older than all of A's, were left alone and still serve B.
        for s in neighbour:
            assert not _closed_by_server(s), "peer A's flood closed peer B's connection"
            assert _get_on(s, "/healthz") == b"HTTP/1.1 200 OK"
        extra = _connect_from(server, NEIGHBOUR)   # B's budget is B's: a third one is fine
        socks.append(extra)
        assert _get_on(extra, "/v1/jobs/j1") == b"HTTP/1.1 200 OK"
        # The controller gets its quota written and read back within a second, from its own
        # address and even from the flooding one (A's own idle connection makes room).
        body = json.dumps({"cpu_fraction": 0.5, "lease_s": 60}).encode()
        for source in ("127.0.0.1", FLOODER):
            c = http.client.HTTPConnection(*_addr(server), timeout=5, source_address=(source, 0))
            t0 = time.monotonic()
            c.request("PUT", "/v1/jobs/j1/quota", body=body,
                      headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["cpu_fraction"] == 0.5
            c.request("GET", "/v1/jobs/j1", headers={"Authorization": f"Bearer {TOKEN}"})
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["cpu_fraction"] == 0.5
            assert time.monotonic() - t0 < 1.0, f"the controller from {source} waited"
            c.close()
    finally:
        for s in socks:
            s.close()
