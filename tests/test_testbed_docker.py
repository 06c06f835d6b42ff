"""The Docker Compose testbed on a real Docker engine (marker ``docker``; CI runs it as root:
`cosched testbed` installs Debian's docker.io and starts dockerd when they are missing).

Each test uses its own testbed home (instance folders) and checks afterwards that nothing
labelled with its instance is left in the engine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(os.geteuid() != 0, reason="the Docker testbed needs root")]

COSCHED = [str(Path(sys.executable).parent / "cosched")]


def run(args, home: Path, timeout: float = 900, check: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, COSCHED_TESTBED_HOME=str(home))
    proc = subprocess.run(COSCHED + ["testbed", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"cosched testbed {' '.join(args)} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def leftovers(instance: str) -> dict[str, list[str]]:
    label = f"label=cosched.testbed.instance={instance}"
    out = {}
    for kind, argv in (("containers", ["docker", "ps", "-a", "-q", "--filter", label]),
                       ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
                       ("volumes", ["docker", "volume", "ls", "-q", "--filter", label])):
        out[kind] = subprocess.run(argv, capture_output=True, text=True).stdout.split()
    out["named"] = [n for n in subprocess.run(
        ["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True
    ).stdout.split() if n.startswith(f"cosched-testbed-{instance}-")]
    return {k: v for k, v in out.items() if v}


def container_ids(instance: str) -> list[str]:
    label = f"label=cosched.testbed.instance={instance}"
    return subprocess.run(["docker", "ps", "-a", "-q", "--no-trunc", "--filter", label],
                          capture_output=True, text=True).stdout.split()


def test_smoke_end_to_end_and_nothing_left(tmp_path):
    proc = run(["smoke", "--json"], tmp_path, timeout=900)
    res = json.loads(proc.stdout)
    assert proc.returncode == 0 and res["ok"], proc.stdout + proc.stderr
    names = [s["name"] for s in res["steps"]]
    assert names[0] == "engine" and names[-1] == "down"
    assert all(s["ok"] for s in res["steps"])
    jobs = res["measured"]["jobs"]
    assert len(jobs) == 2
    # What the kernel was told and did, read inside the node container.
    host, guest = sorted(jobs.values(), key=lambda j: -j["quota_cpus"])
    assert host["quota_cpus"] == pytest.approx(0.98, abs=0.01)
    assert guest["quota_cpus"] == pytest.approx(0.02, abs=0.005)
    assert guest["throttled_periods"] > 0
    assert host["cpu_used"] > 1.8 * guest["cpu_used"]
    assert leftovers(res["instance"]) == {}
    assert not (tmp_path / res["instance"]).exists()


def test_up_status_down_twice_leaves_nothing(tmp_path):
    proc = run(["up", "--nodes", "2", "--cpus", "4", "--cpu-limit", "0.5", "--json"], tmp_path,
               check=True)
    up = json.loads(proc.stdout)
    inst = up["instance"]
    ids = container_ids(inst)
    try:
        assert len(ids) == 4
        st = json.loads(run(["status", "--json"], tmp_path, check=True).stdout)
        assert st["state"] == "up" and st["instance"] == inst
        assert [n["state"] for n in st["slurm"]["nodes"]] == ["idle", "idle"]
        assert all(a["ok"] for a in st["agents"].values())
        # Published only on loopback.
        ports = subprocess.run(["docker", "port", f"cosched-testbed-{inst}-node1"],
                               capture_output=True, text=True).stdout
        assert ports.strip() and all("127.0.0.1:" in ln for ln in ports.strip().splitlines())
        # A node's CPU capacity is its container's CFS quota.
        q = subprocess.run(["docker", "inspect", "--format", "{{.HostConfig.CpuQuota}}",
                            f"cosched-testbed-{inst}-node2"], capture_output=True, text=True)
        assert q.stdout.strip() == "50000"
        # The instance's own cgroup weighs as much as the CPUs it claims (2 x 0.5 -> 1 CPU).
        shares = Path(f"/sys/fs/cgroup/cpu/cosched-testbed-{inst}/cpu.shares").read_text()
        assert shares.strip() == "1024"
        assert all(Path(f"/sys/fs/cgroup/cpu/cosched-testbed-{inst}/{cid}").is_dir() for cid in ids)
    finally:
        first = run(["down", "--json"], tmp_path, check=True)
    removed = json.loads(first.stdout)["removed"]
    assert len(removed["containers"]) == 4 and len(removed["networks"]) == 1
    assert len(removed["volumes"]) == 1
    second = run(["down"], tmp_path, check=True)
    assert "nothing to remove" in second.stdout
    assert leftovers(inst) == {}
    # Docker removed the containers' cgroups, with what the agents and slurmd made inside.
    assert set(removed["cgroups"]) >= {f"/sys/fs/cgroup/cpu/cosched-testbed-{inst}",
                                       f"/sys/fs/cgroup/freezer/cosched-testbed-{inst}"}
    for ctrl in ("cpu", "cpuacct", "memory", "freezer", "cpuset", "pids"):
        assert not Path(f"/sys/fs/cgroup/{ctrl}/cosched-testbed-{inst}").exists()
    st = json.loads(run(["status", "--json"], tmp_path, check=True).stdout)
    assert st["state"] == "down" and st["instance"] is None


def test_a_port_in_use_is_a_clear_error_and_nothing_is_made(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        proc = run(["up", "--nodes", "1", "--port-base", str(busy)], tmp_path)
    assert proc.returncode != 0
    assert f"{busy}" in proc.stderr and "in use" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(p.is_dir() for p in tmp_path.iterdir()) if tmp_path.exists() else True


def _interruptible() -> None:
    """In the child before exec: SIGINT back to its default. A suite started in the
    background by a non-interactive shell (``nohup ... &``) inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt: the Ctrl-C tests would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_during_up_removes_what_it_made(tmp_path):
    env = dict(os.environ, COSCHED_TESTBED_HOME=str(tmp_path))
    proc = subprocess.Popen(COSCHED + ["testbed", "up", "--nodes", "1"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    seen = []
    deadline = time.monotonic() + 600
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if "starting testbed" in line or "waiting for health" in line:
            break
        if time.monotonic() > deadline:
            break
    inst = (tmp_path / "current").read_text().strip()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "interrupted" in err
    assert leftovers(inst) == {}
    assert not (tmp_path / inst).exists()
    assert not (tmp_path / "current").exists()


def agent_jobs(home: Path, inst: str) -> list[dict]:
    import urllib.request

    spec = json.loads((home / inst / "spec.json").read_text())
    out = []
    for port in spec["agent_ports"]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/jobs", timeout=5) as r:
                out += json.loads(r.read())["jobs"]
        except OSError:
            pass
    return out


def squeue(inst: str) -> list[str]:
    proc = subprocess.run(["docker", "exec", f"cosched-testbed-{inst}-controller", "squeue", "-h",
                           "-o", "%i %T"], capture_output=True, text=True)
    return proc.stdout.split("\n") if proc.stdout.strip() else []


def test_run_with_a_node_killed_mid_run_then_report_and_down(tmp_path):
    """Static with node2 killed (`docker kill`) while its jobs run: the run ends, the lost
    stages are reported failed with a reason, the controller and slurmctld keep running;
    the report prints the tables beside the simulator's and writes the plots. (Ratios to
    space sharing need a space-sharing run: test_testbed_report.py checks them.)"""
    up = json.loads(run(["up", "--nodes", "2", "--cpus", "8", "--json"], tmp_path,
                        check=True).stdout)
    inst = up["instance"]
    env = dict(os.environ, COSCHED_TESTBED_HOME=str(tmp_path))
    try:
        # stdout (the run's JSON, often over a pipe's 64 KiB) goes to a file: read through a
        # pipe only after stderr's end, it filled the pipe and both sides waited forever.
        out_path = tmp_path / "run.json"
        with open(out_path, "w") as out_file:
            proc = subprocess.Popen(COSCHED + ["testbed", "run", "--policies", "static",
                                               "--scale", "0.01", "--timeout", "400", "--json"],
                                    env=env, stdout=out_file, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        seen, killed = [], False
        for line in proc.stderr:
            seen.append(line)
            if not killed and "static: t=" in line and "running" in line and \
                    "running 0 " not in line:
                subprocess.run(["docker", "kill", f"cosched-testbed-{inst}-node2"], check=True,
                               capture_output=True)
                killed = True
        assert proc.wait(timeout=60) == 0, "".join(seen)
        out = out_path.read_text()
        assert killed, "".join(seen)
        res = json.loads(out)
        (st,) = res["runs"]
        assert st["failed"] > 0 and st["completed"] + st["failed"] == 46
        assert st["coallocations"] > 0
        full = json.loads((Path(res["results"]) / "static-r0.json").read_text())
        assert full["reasons"] and all(full["reasons"].values())
        # The controller container and slurmctld are still there and answer.
        status = json.loads(run(["status", "--json"], tmp_path, check=True).stdout)
        assert status["state"] == "degraded"
        assert status["containers"]["controller"]["health"] == "healthy"
        assert status["containers"]["slurmctld"]["health"] == "healthy"
        assert status["containers"]["node2"]["state"] == "exited"
        rep = json.loads(run(["report", "--json"], tmp_path, check=True).stdout)
        assert [r["policy"] for r in rep["testbed"]] == ["static"]
        assert [r["policy"] for r in rep["simulator"]] == ["static"]
        (tb,), (sim,) = rep["testbed"], rep["simulator"]
        assert tb["coallocations"] > 0 and sim["coallocations"] > 0
        for p in rep["plots"]:
            assert Path(p).read_bytes()[:4] == b"\x89PNG"
        text = run(["report"], tmp_path, check=True).stdout
        assert "TESTBED (real Slurm in containers)" in text and "testbed vs simulator" in text
    finally:
        down = json.loads(run(["down", "--json"], tmp_path, check=True).stdout)
    assert len(down["removed"]["containers"]) == 4
    assert down["results_kept"] and Path(down["results_kept"]).is_dir()
    assert leftovers(inst) == {}


def test_ctrl_c_during_run_cancels_the_jobs_and_gives_quotas_back(tmp_path):
    up = json.loads(run(["up", "--nodes", "1", "--cpus", "8", "--json"], tmp_path,
                        check=True).stdout)
    inst = up["instance"]
    env = dict(os.environ, COSCHED_TESTBED_HOME=str(tmp_path))
    try:
        proc = subprocess.Popen(COSCHED + ["testbed", "run", "--policies", "static",
                                           "--scale", "0.02", "--timeout", "400"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_interruptible)
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if "guests)" in line and "(0 guests)" not in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 130, "".join(seen) + err
        assert "interrupted" in err and "Traceback" not in err
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                s.split()[1] in ("PENDING", "RUNNING") for s in squeue(inst) if s.strip()):
            time.sleep(1)
        left = [s for s in squeue(inst) if s.strip() and s.split()[1] in ("PENDING", "RUNNING")]
        assert left == []
        throttled = [j for j in agent_jobs(tmp_path, inst)
                     if j["status"] == "running" and j["cpu_fraction"] < 1.0]
        assert throttled == []
        # The testbed is still up and usable.
        assert json.loads(run(["status", "--json"], tmp_path, check=True).stdout)["state"] == "up"
    finally:
        run(["down"], tmp_path, check=True)
    assert leftovers(inst) == {}
