"""The slurmrestd backend against Debian's real slurmrestd, started here next to a cluster
of `cosched slurm up` with AuthAltTypes=auth/jwt: the same reads and changes as the command
line (hold, release, NodeList, AdminComment, TimeLimit, Priority, cancel), a guest
co-allocated by the shared policy code through REST, `cosched run --backend slurmrestd`,
and slurmrestd going away and coming back under a running controller. Runs on 22.05 here
and on 24.11 / 26.05 in the release containers (testbed/slurm_releases.sh).

COSCHED_RECORD_REST=DIR: also write the answers as fixtures (rest_*.json) into DIR."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from coscheduler.controller import Controller
from coscheduler.recorder import MemoryRecorder
from slurm_plugin import cluster as cl
from slurm_plugin.contract import release as slurm_release
from slurm_plugin.rest import RestClient, RestSource, backend_from_options, read_token
from slurm_plugin.rest_contract import path, restd_plugins
from slurm_plugin.rest_daemon import sign_jwt, start_slurmrestd, stop_slurmrestd
from slurm_plugin.source import CommandLineSource
from test_slurm_live import busy_job, job, sbatch, step_until, submit, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.root]


class Restd:
    def __init__(self, state):
        self.state = state
        self.rel = slurm_release(state.commands())
        self.port = cl.free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(state.dir) / "log" / "slurmrestd.log"
        self.proc = None

    def start(self):
        self.proc = start_slurmrestd(self.state.slurm_conf, self.port, self.log, restd_plugins(self.rel))

        def up():
            try:
                urllib.request.urlopen(self.url + "/openapi/v3", timeout=2).close()
                return True
            except urllib.error.HTTPError:
                return True                  # it answers (401: no token)
            except OSError:
                assert self.proc.poll() is None, self.log.read_text()[-500:]
                return False
        wait_until(up, 20, 0.2, "slurmrestd to listen")

    def stop(self):
        if self.proc is not None:
            stop_slurmrestd(self.proc)
            self.proc = None


@pytest.fixture(scope="module")
def state():
    if os.geteuid() != 0:
        pytest.skip("a real Slurm cluster needs root")
    if not shutil.which("slurmrestd"):
        pytest.fail("slurmrestd is not installed (Debian: apt-get install slurmrestd slurm-wlm-jwt-plugin)")
    d = Path(tempfile.mkdtemp(prefix="cosched-rest-test-"))
    os.chmod(d, 0o755)
    try:
        st = cl.up(d, nodes=2, cpus=4, jwt=True, say=lambda m: None)
    except cl.ClusterError as exc:
        pytest.fail(f"cosched slurm up failed: {exc}")
    yield st
    report = cl.down(d, say=lambda m: None)
    assert not report["cgroups_left"], report
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def restd(state):
    r = Restd(state)
    r.start()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def token_file(state):
    """A token from `scontrol token` (as a site makes one), mode 0600."""
    out = state.commands().run("scontrol", "token", "username=root", "lifespan=3600")
    f = Path(state.dir) / "rest.token"
    f.write_text(out)
    f.chmod(0o600)
    return f


@pytest.fixture
def slurm(state):
    cmds = state.commands()
    yield cmds
    ids = cmds.run("squeue", "-h", "-o", "%i").split()
    if ids:
        cmds.run("scancel", *ids)
    wait_until(lambda: not cmds.run("squeue", "-h", "-o", "%i").split(), 30, 0.3, "jobs to end")


def record(restd, token_file, name, p):
    out = os.environ.get("COSCHED_RECORD_REST")
    if not out:
        return
    req = urllib.request.Request(restd.url + p, headers={"X-SLURM-USER-TOKEN": read_token(token_file),
                                                         "X-SLURM-USER-NAME": "root"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / name).write_bytes(body)


def test_reads_and_changes_like_the_command_line(state, restd, token_file, slurm):
    t0 = time.monotonic()
    src = RestSource(RestClient(restd.url, str(token_file)), marks_file=Path(state.dir) / "marks.json")
    cli = CommandLineSource(slurm)
    rel, parser = src.contract()
    assert (rel.major, rel.minor) == (restd.rel.major, restd.rel.minor)
    n1, n2 = state.nodes
    rc, held, err = sbatch(state, "-p", state.partition, "-t", "5", "-n", "4", script="#!/bin/sh\nsleep 60\n")
    assert rc == 0, err
    held = int(held)
    # reads: the same jobs and nodes as squeue/scontrol
    view = lambda jobs: {j.job_id: (j.state, j.nodes, j.held, j.partition, j.time_limit_s, j.cpus)  # noqa: E731
                         for j in jobs}
    assert view(src.jobs())[held] == view(cli.jobs())[held] == ("PENDING", (), True, state.partition, 300.0, 4)
    assert {(n.name, n.cpus, n.state) for n in src.nodes()} == {(n.name, n.cpus, n.state) for n in cli.nodes()}
    assert src.partition_max_time(state.partition) is None and cli.partition_max_time(state.partition) is None
    # the changes the backend makes when it starts a job: NodeList, AdminComment, release
    src.update(held, NodeList=n2, AdminComment="cosched:v=1;quota=0.5000")
    info = job(slurm, held)
    assert info["ReqNodeList"] == n2 and info["JobState"] == "PENDING"
    if parser != "v0.0.38":          # 22.05 cannot write it; the source keeps it (unit tests)
        assert "cosched:v=1;quota=0.5000" in slurm.run("scontrol", "show", "job", str(held))
    assert next(j for j in src.jobs() if j.job_id == held).admin_comment == "cosched:v=1;quota=0.5000"
    src.release(held)
    wait_until(lambda: job(slurm, held)["JobState"] == "RUNNING", 30, 0.3, "the released job to run")
    assert job(slurm, held)["NodeList"] == n2
    assert src.layout(held) == ((n2, 4),)
    # a walltime credit: TimeLimit=+M on a running job
    src.update(held, TimeLimit="+2")
    assert job(slurm, held)["TimeLimit"] == "00:07:00"
    # Priority on a pending job, hold and release (a job of the default partition that
    # waits behind a full node)
    rc, blocker, _ = sbatch(state, "-p", state.default_partition, "-t", "5", "-n", "4", f"-w{n1}",
                            script="#!/bin/sh\nsleep 60\n")
    rc, waiting, _ = sbatch(state, "-p", state.default_partition, "-t", "5", "-n", "4", f"-w{n1}",
                            script="#!/bin/sh\nsleep 1\n")
    wait_until(lambda: job(slurm, blocker)["JobState"] == "RUNNING", 30, 0.3, "the blocker to run")
    src.update(int(waiting), Priority="4242")
    assert job(slurm, waiting)["Priority"] == "4242"
    src.hold(int(waiting))
    assert job(slurm, waiting)["Priority"] == "0"
    assert next(j for j in src.jobs() if j.job_id == int(waiting)).held
    src.release(int(waiting))
    assert job(slurm, waiting)["Priority"] != "0"
    for name, p in [("rest_ping.json", path(parser, "ping")), ("rest_jobs.json", path(parser, "jobs")),
                    ("rest_nodes.json", path(parser, "nodes")),
                    ("rest_partition.json", path(parser, "partition", state.partition)),
                    ("rest_job.json", path(parser, "job", held)),
                    ("rest_job_unknown.json", path(parser, "job", 999999))]:
        record(restd, token_file, name, p)
    src.cancel(held)
    wait_until(lambda: job(slurm, held)["JobState"] == "CANCELLED", 30, 0.3, "the job to be cancelled")
    assert src.job(999999) is None
    print(f"Slurm {rel.text} via slurmrestd {parser}: reads and changes in {time.monotonic() - t0:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


def test_a_key_signed_token_works_and_a_foreign_one_is_one_line(state, restd, tmp_path):
    good = tmp_path / "good"
    good.write_text(sign_jwt(state.jwt_key, "root", 600))
    good.chmod(0o600)
    assert RestSource(RestClient(restd.url, str(good))).nodes()
    other = tmp_path / "key"
    other.write_bytes(os.urandom(32))
    bad = tmp_path / "bad"
    bad.write_text(sign_jwt(other, "root", 600))
    bad.chmod(0o600)
    src = RestSource(RestClient(restd.url, str(bad), retries=0))
    with pytest.raises(Exception) as e:
        src.nodes()
    msg = str(e.value)
    assert "\n" not in msg and restd.url in msg and bad.read_text() not in msg
    # 22.05: HTTP 500 "slurmctld config is unable to load"; 24.11: HTTP 511
    assert str(bad) in msg and ("refused the token" in msg or "rejects the token" in msg), msg


def test_a_guest_coallocated_through_slurmrestd_and_restd_down_under_the_controller(
        state, restd, token_file, slurm):
    """The backend's policy code over REST: Static lends half of a busy host to a guest; then
    slurmrestd stops: each pass notes one line and the controller carries on; it comes back:
    the passes read the cluster again."""
    from coscheduler.policies.coalloc import Static

    t0 = time.monotonic()
    b = backend_from_options({"url": restd.url, "token_file": str(token_file), "slurm_dir": state.dir,
                              "lease_s": 30})
    assert b.source.name == "slurmrestd"
    # two hosts fill both nodes, so the guest can only join one of them
    hosts = submit(state, [busy_job("rhost", 4, 90, walltime=300), busy_job("rhost2", 4, 90, walltime=300)])
    (guest,) = submit(state, [busy_job("rguest", 2, 30, walltime=300, cls="test/guest")])
    ctl = Controller(b, Static(0.5), MemoryRecorder())
    g = step_until(ctl, lambda: next((r for r in b.running() if r.job_id == guest and r.host_job), None),
                   45, "the guest to be co-allocated through slurmrestd")
    assert g.host_job in hosts and abs(g.quota_fraction - 0.5) < 1e-6
    node = g.allocation.nodes[0]
    assert b.agents[node].job(guest) is not None            # the agent holds its quota
    restd.stop()
    try:
        report = ctl.step()
        assert report.errors and all("\n" not in e for e in report.errors), report.errors
        assert any("slurmrestd" in e and restd.url in e and "no answer" in e for e in report.errors), report.errors
        assert read_token(token_file) not in " ".join(report.errors)
    finally:
        restd.start()
    step_until(ctl, lambda: any(r.job_id == guest for r in b.running()), 20, "passes to read again")
    assert not ctl.step().errors
    print(f"co-allocated through slurmrestd and survived it going away in {time.monotonic() - t0:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


def test_cosched_run_backend_slurmrestd(state, restd, token_file, slurm, tmp_path):
    argv = [sys.executable, "-m", "coscheduler", "run", "--backend", "slurmrestd", "--url", restd.url,
            "--token-file", str(token_file), "--slurm-dir", state.dir, "--policy", "static",
            "--db", str(tmp_path / "c.db"), "--interval", "0.5", "--lease", "5", "--max-passes", "3"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "static on slurmrestd" in p.stderr and "0 errors" in p.stderr, p.stderr[-2000:]
    assert read_token(token_file) not in p.stderr
    bad = tmp_path / "t"
    bad.write_text(read_token(token_file))
    bad.chmod(0o644)
    p = subprocess.run(argv[:argv.index("--token-file") + 1] + [str(bad)] + argv[argv.index("--token-file") + 2:],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "chmod 600" in p.stderr and "Traceback" not in p.stderr, p.stderr
