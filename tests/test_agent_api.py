"""Monitoring agent HTTP API and client, on a MIMIC cgroup v2 directory (runs without root;
the real-kernel API checks are in test_agent_cgroup.py)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coscheduler.progress import write_progress
from monitoring.agent import NodeAgent
from monitoring.api import AgentServer, parse_listen, read_token_file
from monitoring.client import AgentClient, AgentError
from monitoring.mimic import MimicV2FS

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def served(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "state",
                      max_lease_s=600)
    server = AgentServer(agent, "127.0.0.1:0", TOKEN).start()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    client = AgentClient(server.url, token=TOKEN)
    yield agent, server, client, sleeper, fs
    sleeper.kill()
    sleeper.wait()
    client.close()
    server.shutdown()
    agent.close()


def _raw(server, method, path, body=None, token=TOKEN):
    host, port = server.url[len("http://"):].rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    headers = {"Content-Length": str(len(body or b""))}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): (p.read_text() if p.is_file() else "<dir>")
            for p in sorted(root.rglob("*"))}


def test_contract_register_read_quota_clear(served):
    agent, server, client, sleeper, fs = served
    view = client.register_job("j1", [sleeper.pid], 2, walltime_s=600, tasks_total=100,
                               job_class="blast/blastall")
    assert view["job_id"] == "j1" and view["status"] == "running"
    assert view["progress_file"].endswith("j1.json")
    for key in ("cpu_percent", "mem_percent", "tasks_done", "tasks_per_s", "happiness", "cpu_fraction"):
        assert key in view
    assert view["cpu_fraction"] == 1.0
    assert [j["job_id"] for j in client.jobs()] == ["j1"]
    q = client.set_quota("j1", 0.25, lease_s=60)
    assert q["cpu_fraction"] == 0.25 and q["quota_us"] == 50_000 and 59 < q["lease_expires_in_s"] <= 60
    assert (fs.mount / "cosched" / "j1" / "cpu.max").read_text().strip() == "50000 100000"
    c = client.clear_quota("j1")
    assert c["cpu_fraction"] == 1.0 and c["lease_s"] is None
    assert (fs.mount / "cosched" / "j1" / "cpu.max").read_text().startswith("max")
    # registering again adds pids and updates fields, 200 instead of 201
    st, body = _raw(server, "POST", "/v1/jobs", json.dumps({"job_id": "j1", "pids": [sleeper.pid],
                                                            "cores": 2, "walltime_s": 900}).encode())
    assert st == 200 and json.loads(body)["walltime_s"] == 900
    node = client.node()
    assert node["cgroup"]["version"] == 2 and node["jobs"]["running"] == 1
    out = client.unregister("j1")
    assert out["status"] == "released"


def _job_with_progress(client, sleeper, job_id: str) -> tuple[float, str]:
    """Register a 1-core job of 100 tasks, started 20 s ago with a 120 s walltime, whose
    progress file says 0 tasks done 10 s ago: (now, the file's path)."""
    now = time.time()
    view = client.register_job(job_id, [sleeper.pid], 1, walltime_s=120, start_time=now - 20,
                               tasks_total=100)
    path = view["progress_file"]
    write_progress(0, 100, path, now=now - 10)
    return now, path


def test_progress_file_gives_rate_and_happiness(served):
    agent, server, client, sleeper, fs = served
    now, path = _job_with_progress(client, sleeper, "p1")
    agent.tick()
    write_progress(10, 100, path, now=now)
    agent.tick()
    j = client.job("p1")
    assert j["tasks_done"] == 10 and j["tasks_total"] == 100
    assert j["tasks_per_s"] == pytest.approx(1.0, rel=1e-3)
    # Hp = (walltime - elapsed) x rate / remaining = (120 - ~20) x 1 / 90
    assert j["happiness"] == pytest.approx(100 / 90, rel=0.05)
    metrics = client.metrics()
    assert 'cosched_job_tasks_done{job_id="p1",status="running"} 10.0' in metrics
    assert "cosched_job_happiness" in metrics and "cosched_agent_process_cpu_seconds_total" in metrics


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_progress_file_another_user_made_at_the_jobs_path_is_not_its_progress(served):
    """The progress folder is writable by every user (sticky): another user can make a
    job's file before the job does, and the job cannot replace it. Its figures must not
    become the job's progress and happiness (the learner's loss rests on them)."""
    agent, server, client, sleeper, fs = served
    now, path = _job_with_progress(client, sleeper, "p2")
    os.chown(path, 65534, 65534)   # (the job's processes run as root here: uid 0)
    agent.tick()
    write_progress(90, 100, path + ".squat", now=now)
    os.chown(path + ".squat", 65534, 65534)
    os.replace(path + ".squat", path)
    agent.tick()
    j = client.job("p2")
    assert j["tasks_done"] == 0 and j["tasks_per_s"] is None and j["happiness"] is None
    # the operator sees why, once, among the job's events
    said = [e["event"] for e in j["events"] if "belongs to uid 65534" in e["event"]]
    assert len(said) == 1 and "not read" in said[0]
    # the job's own file (its user's: root here) is read
    write_progress(10, 100, path, now=now)
    agent.tick()
    assert client.job("p2")["tasks_done"] == 10


def test_auth_missing_401_wrong_403_and_reads_open(served):
    agent, server, client, sleeper, fs = served
    client.register_job("j1", [sleeper.pid], 1)
    body = json.dumps({"cpu_fraction": 0.1, "lease_s": 10}).encode()
    st, _ = _raw(server, "PUT", "/v1/jobs/j1/quota", body, token=None)
    assert st == 401
    st, data = _raw(server, "PUT", "/v1/jobs/j1/quota", body, token="wrong-token-xxxxxxxxxx")
    assert st == 403 and b"wrong token" in data
    with pytest.raises(AgentError) as e:
        AgentClient(server.url, token="nope-nope-nope-nope").register_job("j2", [sleeper.pid], 1)
    assert e.value.status == 403
    assert client.job("j1")["cpu_fraction"] == 1.0  # nothing changed
    st, _ = _raw(server, "GET", "/v1/jobs/j1", token=None)
    assert st == 200


@pytest.mark.parametrize("path", ["/v1/jobs/../../x/quota", "/v1/jobs/..%2F..%2Fx/quota",
                                  "/v1/jobs/%2e%2e/quota", "/v1/jobs/a/b/quota", "/v1/jobs/.hidden"])
def test_traversal_ids_refused_400_and_nothing_written(served, path):
    agent, server, client, sleeper, fs = served
    client.register_job("j1", [sleeper.pid], 1)
    before = _tree(fs.mount), _tree(agent.state_dir)
    method = "DELETE" if path.endswith("hidden") else "PUT"
    st, data = _raw(server, method, path, json.dumps({"cpu_fraction": 0.1, "lease_s": 10}).encode())
    assert st == 400, data
    assert b"not a valid job id" in data
    st, _ = _raw(server, "POST", "/v1/jobs",
                 json.dumps({"job_id": "../../x", "pids": [sleeper.pid], "cores": 1}).encode())
    assert st == 400
    assert (_tree(fs.mount), _tree(agent.state_dir)) == before


def test_errors_name_the_problem(served):
    agent, server, client, sleeper, fs = served
    with pytest.raises(AgentError, match="no job 'ghost'") as e:
        client.job("ghost")
    assert e.value.status == 404
    client.register_job("j1", [sleeper.pid], 1)
    with pytest.raises(AgentError, match="lease_s must be") as e:
        client.set_quota("j1", 0.5, 10_000)
    assert e.value.status == 400
    with pytest.raises(AgentError, match="cpu_fraction must be <= 1"):
        client.set_quota("j1", 1.5, 10)
    with pytest.raises(AgentError, match="already belong to job j1") as e:
        client.register_job("j2", [sleeper.pid], 1)
    assert e.value.status == 409
    with pytest.raises(AgentError, match="not a running process"):
        client.register_job("j3", [2 ** 22 + 17], 1)
    st, data = _raw(server, "PUT", "/v1/jobs/j1/quota", b"{not json")
    assert st == 400 and b"not valid JSON" in data
    st, data = _raw(server, "PUT", "/v1/jobs/j1/quota", b'{"cpu_fraction": 0.5}')
    assert st == 400 and b"lease_s" in data
    st, _ = _raw(server, "GET", "/v2/nothing")
    assert st == 404


def test_listen_and_token_file_parsing(tmp_path):
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen(":9000") == ("127.0.0.1", 9000)
    assert parse_listen("[::1]:9000") == ("::1", 9000)
    f = tmp_path / "t"
    f.write_text("short\n")
    with pytest.raises(ValueError, match="at least 16"):
        read_token_file(str(f))
    f.write_text(TOKEN + "\nignored\n")
    assert read_token_file(str(f)) == TOKEN


def test_quota_role_is_optional_validated_and_shown(served):
    """PUT .../quota takes an optional "role" ("host"/"guest"; null or absent: none); a bad
    one is a 400 naming it, and nothing is written."""
    agent, server, client, sleeper, fs = served
    client.register_job("j1", [sleeper.pid], 2)
    d = fs.mount / "cosched" / "j1"
    assert client.set_quota("j1", 0.5, 60)["role"] is None          # as before the field
    assert client.set_quota("j1", 0.5, 60, role="guest")["role"] == "guest"
    assert (d / "cpu.idle").read_text().strip() == "1"
    before = _tree(fs.mount)
    for bad in (b'"Guest"', b"1", b'["host"]'):
        st, data = _raw(server, "PUT", "/v1/jobs/j1/quota",
                        b'{"cpu_fraction": 0.1, "lease_s": 60, "role": ' + bad + b"}")
        assert st == 400 and b"role must be 'host', 'guest' or null" in data
    assert _tree(fs.mount) == before and client.job("j1")["role"] == "guest"
    st, data = _raw(server, "PUT", "/v1/jobs/j1/quota",
                    b'{"cpu_fraction": 0.5, "lease_s": 60, "role": null}')
    assert st == 200 and json.loads(data)["role"] is None
    assert (d / "cpu.idle").read_text().strip() == "0"
    st, data = _raw(server, "PUT", "/v1/jobs/j1/quota", b'{"cpu_fraction": 0.5, "lease_s": 60, "weight": 5}')
    assert st == 400 and "optionally \"role\"" in json.loads(data)["error"]


def test_a_mesos_framework_reads_a_remote_agents_jobs_in_one_listing(served):
    """mesos_framework.quotas.RemoteNodeAgents against a real agent over HTTP: ``listing``
    gives every job's view by id (the framework's metrics read one listing per agent)."""
    from mesos_framework.quotas import RemoteNodeAgents

    agent, server, client, sleeper, fs = served
    client.register_job("m1", [sleeper.pid], 2, walltime_s=600)
    client.register_job("m2", [], 1, walltime_s=600)
    remote = RemoteNodeAgents({"h1": server.url}, token=TOKEN)
    try:
        views = remote.listing("agent-1", "h1")
        assert sorted(views) == ["m1", "m2"] and views["m1"]["cores"] == 2.0
        assert views["m2"]["cores"] == 1.0 and views["m1"]["job_id"] == "m1"
        with pytest.raises(Exception, match="no node agent configured"):
            remote.listing("agent-2", "h2")
    finally:
        remote.close()


def test_the_slurm_backend_reads_real_agents_at_once_and_registers_its_jobs(tmp_path):
    """The Slurm backend's metrics() with real node agents over HTTP, asked at once (its
    thread pool): each of a recorded cluster's running jobs is registered with its node's
    agent, renewals reach the right agent, and nothing is noted as failed."""
    from test_slurm_units import RecordedCluster
    from slurm_plugin.backend import SlurmBackend

    agents, servers, clients = [], [], {}
    try:
        for node in ("rn1", "rn2", "rn3"):
            fs = MimicV2FS(tmp_path / node / "cgroup2")
            fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
            agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / node / "state",
                              max_lease_s=600)
            agents.append(agent)
            servers.append(AgentServer(agent, "127.0.0.1:0", TOKEN).start())
            clients[node] = AgentClient(servers[-1].url, token=TOKEN)
        b = SlurmBackend(RecordedCluster("22.05"), partition="cosched", agents=clients, lease_s=30.0)
        b.metrics()
        assert b.errors == []
        assert sorted(v["job_id"] for v in clients["rn1"].jobs()) == ["5", "6"]   # both on rn1
        assert clients["rn2"].jobs() == [] and clients["rn3"].jobs() == []
        b.set_quota("5", 0.5)
        b._renewed.clear()                     # due again: renewed at the next pass
        b.metrics()
        assert b.errors == [] and clients["rn1"].job("5")["cpu_fraction"] == 0.5
    finally:
        for c in clients.values():
            c.close()
        for s in servers:
            s.shutdown()
        for a in agents:
            a.close()


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "0.0.0.0:0"])
def test_shutdown_wakes_the_idle_accept_loop_at_once(tmp_path, listen):
    """The accept loop sleeps IDLE_POLL_S between looks at the stop flag (a wake costs CPU
    on an idle node); shutdown() must not wait for that sleep to end."""
    from monitoring.api import IDLE_POLL_S

    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "state")
    try:
        server = AgentServer(agent, listen, TOKEN).start()
        time.sleep(0.2)   # the loop is inside select() now
        t0 = time.monotonic()
        server.shutdown()
        took = time.monotonic() - t0
        assert not server._thread.is_alive()
        assert took < IDLE_POLL_S / 2, f"shutdown waited {took:.2f} s for the poll interval"
    finally:
        agent.close()


def test_shutdown_of_a_server_never_started_returns(tmp_path):
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "state")
    try:
        server = AgentServer(agent, "127.0.0.1:0", TOKEN)
        done = []
        import threading
        t = threading.Thread(target=lambda: (server.shutdown(), done.append(True)), daemon=True)
        t.start()
        t.join(5)
        assert done, "shutdown() of a server never started hung"
    finally:
        agent.close()
