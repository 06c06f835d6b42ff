"""A standing fuzz test of the node agent (issue 8): random requests against its HTTP API and
random state files against its recovery, with hypothesis, bounded in time (a few hundred
examples, about 10-20 s together).

On a MIMIC cgroup v2 directory (monitoring/mimic.py): every cgroup write is a file write, so
what the agent did is visible; the same code paths run on the kernel in the root tests.
Asserted for every example: no 500, an answer that is JSON (or the Prometheus text), the
agent still answers /healthz; at the end: no traceback on stderr, no error logged, nothing
written outside the agent's cgroup root, and no process moved but the test's own.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitoring.agent import NodeAgent
from monitoring.api import AgentServer
from monitoring.mimic import MimicV2FS
from monitoring.recovery import StateFile

TOKEN = "fuzz-token-0123456789abcdef"
SLEEPY = [sys.executable, "-c", "import time; time.sleep(300)"]
FUZZ = settings(max_examples=250, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# ---- strategies ------------------------------------------------------------------------------
numbers = st.one_of(
    st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 400), st.floats(),
    st.sampled_from([0, 1, -1, 0.5, 2 ** 53 + 1, 2 ** 63, 4096, 4097, 1e308]))
json_leaf = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20))
json_any = st.recursive(json_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=10), kids, max_size=4)),
    max_leaves=12)
job_ids = st.one_of(st.sampled_from(["j1", "j2", "tasks", "cgroup.procs", "cpu.max", "a\n", "..",
                                     "../../x", ".", "", "x" * 129, "%2e%2e", "a/b"]),
                    st.text(max_size=12))


def pids_strategy(live: list[int]):
    special = [1, 2, 0, -1, os.getpid(), os.getppid(), 2 ** 22 + 1, 10 ** 400]
    return st.lists(st.one_of(st.sampled_from(live + special), st.integers(), json_leaf), max_size=4)


def registration(live: list[int]):
    fields = {"job_id": job_ids, "pids": pids_strategy(live), "cores": numbers,
              "walltime_s": numbers, "start_time": numbers, "tasks_total": numbers,
              "job_class": st.one_of(st.text(max_size=10), json_leaf),
              "progress_file": st.one_of(st.sampled_from(["/etc/passwd", "../x", "p.json"]),
                                         st.text(max_size=10), json_leaf),
              "mem_mb": numbers, "extra": json_any}
    return st.fixed_dictionaries({}, optional=fields)


def requests(live: list[int]):
    body = st.one_of(
        registration(live).map(lambda d: json.dumps(d).encode()),
        st.fixed_dictionaries({}, optional={"cpu_fraction": numbers, "lease_s": numbers,
                                            "x": json_any}).map(lambda d: json.dumps(d).encode()),
        json_any.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=64),
        st.sampled_from([b"[" * 5000, b'{"a":' * 3000, b"1" * 5000, b"\xff\xfe", b""]))
    path = st.one_of(
        st.sampled_from(["/healthz", "/metrics", "/v1/node", "/v1/jobs", "/v1/jobs/", "/", "/v2/x",
                         "/v1/jobs//quota", "/v1/jobs/j1/quota/x"]),
        job_ids.map(lambda j: f"/v1/jobs/{quote(j, safe='')}"),
        job_ids.map(lambda j: f"/v1/jobs/{quote(j, safe='')}/quota"),
        st.text(alphabet="/%.a1?#&=", max_size=20).map(lambda p: "/" + p))
    return st.tuples(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD"]), path,
                     body, st.sampled_from(["good", "none", "wrong"]),
                     st.sampled_from(["exact", "missing", "huge", "junk"]))


def _outside_root(mount: Path) -> dict[str, str]:
    """Every file of the mimic hierarchy outside the agent's root 'cosched'."""
    return {str(p.relative_to(mount)): p.read_text() for p in sorted(mount.rglob("*"))
            if p.is_file() and "cosched" not in p.relative_to(mount).parts}


def _moved(mount: Path) -> set[int]:
    return {int(x) for p in mount.rglob("cgroup.procs") for x in p.read_text().split()}


@pytest.fixture
def sleepers():
    ps = [subprocess.Popen(SLEEPY) for _ in range(2)]
    yield [p.pid for p in ps]
    for p in ps:
        p.kill()
        p.wait()


def _fuzz_http(agent: NodeAgent, sleepers: list[int], capfd, caplog, examples: int) -> dict[int, int]:
    """Fuzz the agent's API; returns how often each status was answered."""
    caplog.set_level(logging.ERROR)
    server = AgentServer(agent, "127.0.0.1:0", TOKEN, read_timeout_s=2.0).start()
    host, port = server.url[len("http://"):].rsplit(":", 1)
    seen: dict[int, int] = {}
    t0 = time.monotonic()

    def send(method, path, body, auth, length) -> tuple[int, bytes, str]:
        c = http.client.HTTPConnection(host, int(port), timeout=10)
        c.putrequest(method, path, skip_accept_encoding=True)
        if auth != "none":
            c.putheader("Authorization", f"Bearer {TOKEN if auth == 'good' else 'nope-nope-nope-nope'}")
        if length != "missing":
            c.putheader("Content-Length", {"exact": str(len(body)), "huge": "9" * 30,
                                           "junk": "１２".encode()}[length])
        c.endheaders()
        if length == "exact" and method != "HEAD":
            c.send(body)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r.getheader("Content-Type", "")

    try:
        @settings(FUZZ, max_examples=examples)
        @given(requests(sleepers))
        def one(req):
            method, path, body, auth, length = req
            status, data, ctype = send(method, path, body, auth, length)
            seen[status] = seen.get(status, 0) + 1
            assert status < 500, (req, status, data[:300])
            if method != "HEAD" and ctype.startswith("application/json"):
                json.loads(data)
            assert send("GET", "/healthz", b"", "none", "missing")[0] == 200

        one()
    finally:
        server.shutdown()
        agent.close()
    elapsed = time.monotonic() - t0
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-3000:]
    assert len(seen) >= 4, seen  # the examples reached several kinds of answer
    assert elapsed < 60, f"fuzzing took {elapsed:.0f} s"
    return seen


def test_fuzz_http_api_mimic(tmp_path, sleepers, capfd, caplog):
    """Every file of the mimic hierarchy outside the agent's root is compared."""
    fs = MimicV2FS(tmp_path / "cgroup2")
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    outside = _outside_root(fs.mount)
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=tmp_path / "state",
                      max_lease_s=600, interval_s=0.2).start()
    _fuzz_http(agent, sleepers, capfd, caplog, examples=500)
    assert _outside_root(fs.mount) == outside
    assert _moved(fs.mount) <= set(sleepers)


def _cpu_cgroup(pid: int) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if "cpu" in ctrls.split(",") or ctrls == "":
                return path
    except OSError:
        return None
    return None


@pytest.mark.root
def test_fuzz_http_api_real_cgroups(tmp_path, sleepers, capfd, caplog):
    """The real kernel (cgroup v1 here): the machine is shared, so 'outside the root' is
    checked where this test alone could have written: the processes the rule protects stay
    where they were, the hierarchy's top quota is untouched, and only the test's own
    processes ever entered the agent's root."""
    import uuid

    from monitoring.cgroupfs import detect_layout

    lay = detect_layout()
    rel = f"cosched-fuzz-{uuid.uuid4().hex[:8]}"
    watched = [1, 2, os.getpid(), os.getppid()]
    before = {p: _cpu_cgroup(p) for p in watched}
    top_quota = [(lay.cpu_mount / f).read_text() for f in ("cpu.cfs_quota_us", "cpu.max")
                 if (lay.cpu_mount / f).exists()]
    agent = NodeAgent(rel, state_dir=tmp_path / "state", max_lease_s=600, interval_s=0.2).start()
    root = agent.actuator.cpu.root
    entered: set[int] = set()
    stop = False

    def watch():
        while not stop:
            try:   # (the agent makes and removes its root as jobs come and go)
                for procs in root.rglob("cgroup.procs"):
                    try:
                        entered.update(int(x) for x in procs.read_text().split())
                    except OSError:
                        pass
            except OSError:
                pass   # a folder went away mid-walk: walk again, never stop watching
            time.sleep(0.05)

    import threading

    w = threading.Thread(target=watch)
    w.start()
    try:
        _fuzz_http(agent, sleepers, capfd, caplog, examples=200)
    finally:
        stop = True
        w.join()
        _remove_tree(lay, rel)
    assert {p: _cpu_cgroup(p) for p in watched} == before
    assert [(lay.cpu_mount / f).read_text() for f in ("cpu.cfs_quota_us", "cpu.max")
            if (lay.cpu_mount / f).exists()] == top_quota
    assert entered <= set(sleepers), entered - set(sleepers)


def _remove_tree(lay, rel: str) -> None:
    """The sleepers a fuzzed registration left in a job cgroup go back to the hierarchy's
    root; then the test's cgroups are removed."""
    for mount in {lay.cpu_mount, lay.acct_mount} - {None}:
        top = Path(mount) / rel
        if not top.exists():
            continue
        for d in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                for pid in (d / "cgroup.procs").read_text().split():
                    (Path(mount) / "cgroup.procs").write_text(pid)
                d.rmdir()
            except OSError:
                pass


# ---- the state file ------------------------------------------------------------------------------
def _spec(pids, **kw):
    d = {"job_id": "j1", "cores": 1.0, "pids": pids, "walltime_s": None, "start_time": None,
         "tasks_total": None, "job_class": None, "progress_file": None, "mem_mb": None,
         "source": "pids", "batch_cgroup": None}
    d.update(kw)
    return d


def state_docs(live: list[int]):
    spec = st.fixed_dictionaries({}, optional={
        "job_id": job_ids, "pids": pids_strategy(live), "cores": numbers, "walltime_s": numbers,
        "start_time": numbers, "tasks_total": numbers, "progress_file": json_leaf,
        "mem_mb": numbers, "source": st.one_of(st.sampled_from(["pids", "slurm", "adopted"]), json_leaf),
        "batch_cgroup": st.one_of(st.sampled_from(["/etc", "/sys/fs/cgroup/../../etc"]), json_leaf)})
    job = st.one_of(st.fixed_dictionaries({"spec": spec}, optional={"status": json_leaf,
                                                                     "fraction": numbers}), json_any)
    doc = st.fixed_dictionaries(
        {"format": st.one_of(st.just("cosched-agent-state/1"), json_leaf)},
        optional={"pid": numbers, "saved_at": numbers, "cgroup_version": json_leaf,
                  "cgroup_root": st.one_of(st.just("cosched"), json_leaf), "clean_exit": json_leaf,
                  "jobs": st.one_of(st.dictionaries(st.sampled_from(["j1", "j2", "tasks"]), job,
                                                    max_size=2), json_any)})
    return st.one_of(doc.map(lambda d: json.dumps(d).encode()), st.binary(max_size=200),
                     st.sampled_from([b"[" * 100_000, b"\xff" * 10, b"", b"null"]))


def test_fuzz_state_file_recovery_never_fails_and_lifts_every_quota(tmp_path, sleepers, capfd):
    t0 = time.monotonic()
    runs = iter(range(10 ** 6))
    outside_all: list[tuple[Path, dict]] = []

    @settings(FUZZ, max_examples=120)
    @given(state_docs(sleepers))
    def one(content: bytes):
        # a previous agent left job j1 (a live process) throttled, then died
        base = tmp_path / f"run{next(runs)}"
        fs = MimicV2FS(base / "cgroup2")
        fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
        outside_all.append((fs.mount, _outside_root(fs.mount)))
        state = base / "state"
        a = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=state)
        a.register_job({"job_id": "j1", "pids": [sleepers[0]], "cores": 1})
        a.set_quota("j1", 0.1, lease_s=600)
        a.close(restore=False)
        (state / "state.json").write_bytes(content)
        StateFile(state / "state.json").load()   # never raises
        (state / "state.json").write_bytes(content)
        agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=state)
        try:
            assert (fs.mount / "cosched" / "j1" / "cpu.max").read_text().startswith("max")
            agent.tick()
            view = agent.job("j1")
            assert view["status"] in ("running", "released") and 0 < view["cores"] <= 4096
            assert _moved(fs.mount) <= set(sleepers)
        finally:
            agent.close()

    one()
    elapsed = time.monotonic() - t0
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    for mount, outside in outside_all:
        assert _outside_root(mount) == outside
    assert elapsed < 60, f"fuzzing took {elapsed:.0f} s"
