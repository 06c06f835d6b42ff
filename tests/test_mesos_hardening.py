"""Issue 24's Mesos-side faults (2, 3), each a regression test: bounded JSON everywhere a
peer talks to us, a bad event is one bad event, a dead event thread fails loudly, the
emulator answers as Mesos does, a framework state without an id is "not registered yet"."""

from __future__ import annotations

import json
import logging
import time

import pytest

from mesos_framework.driver import DRIVER_ABORTED
from mesos_framework.framework import FrameworkConfig, MesosBackend
from tests.mesos_raw import post
from tests.test_mesos_driver import SUBSCRIBED, Recorder, ScriptMaster, encode, ev, make_driver


@pytest.fixture
def master():
    m = ScriptMaster()
    yield m
    m.close()


def test_the_bounded_loader_refuses_deep_and_large_json_and_reads_strings_with_brackets():
    from coscheduler import boundedjson
    assert boundedjson.loads(b'{"a": ["[[[[", {"b": "\\"]]"}]}', max_depth=3) == \
        {"a": ["[[[[", {"b": '"]]'}]}
    with pytest.raises(ValueError, match="nested more than 64"):
        boundedjson.loads(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="more than the 10 allowed"):
        boundedjson.loads(b'"0123456789"', max_bytes=10)
    with pytest.raises(ValueError, match="not JSON"):
        boundedjson.loads(b"[NaN]", strict=True)


def test_the_emulator_answers_a_100k_deep_body_with_400_not_500(emu):
    status, text, _ = post(emu.server.address, b"[" * 100_000 + b"]" * 100_000)
    assert status == 400 and "nested" in text and "RecursionError" not in text


def test_the_emulator_forbids_calls_before_subscribe_and_from_unknown_frameworks(emu):
    status, text, _ = post(emu.server.address, {"type": "REVIVE", "framework_id": {"value": "nobody"}},
                           stream_id="x")
    assert status == 403 and "cannot be found" in text


def test_a_deeply_nested_event_is_skipped_counted_and_the_stream_goes_on(master, caplog):
    sched = Recorder()
    deep = b'{"type": "OFFERS", "offers": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    master.stream(ev(SUBSCRIBED) + encode(deep) + ev({"type": "HEARTBEAT"}))
    d = make_driver(sched, master.url)
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("heartbeat")
            assert d.bad_events == 1 and d.status != DRIVER_ABORTED and d.connected
        finally:
            d.stop(failover=True)
    assert "nested more than" in caplog.text


def test_a_dead_subscription_thread_aborts_the_driver_and_tells_the_scheduler(master, monkeypatch):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED))
    d = make_driver(sched, master.url)

    def broken(self):
        raise SystemError("simulated interpreter fault in the event loop")

    monkeypatch.setattr(type(d), "_subscribe_once", broken)
    d.start()
    try:
        sched.wait("error", timeout=5)
        assert d.status == DRIVER_ABORTED and "subscription thread died" in (d.fatal or "")
    finally:
        d.stop(failover=True)
    backend = MesosBackend(FrameworkConfig())
    backend.error(d, d.fatal)
    assert backend.fatal and "SystemError" in backend.fatal


def test_a_daemon_stops_with_an_error_when_its_backend_is_fatal():
    from coscheduler.daemon import ControllerDaemon
    from coscheduler.recorder import MemoryRecorder
    backend = MesosBackend(FrameworkConfig())
    backend.fatal = "the Mesos subscription thread died: SystemError"
    daemon = ControllerDaemon(backend, MemoryRecorder(), "space-sharing", interval_s=0.01)
    t0 = time.monotonic()
    stats = daemon.run(max_passes=1000)
    assert stats.fatal and "subscription thread died" in stats.fatal
    assert stats.passes == 1 and time.monotonic() - t0 < 5


def test_a_framework_state_without_an_id_means_not_registered_yet(tmp_path):
    path = tmp_path / "fw.json"
    path.write_text(json.dumps({"framework_id": None}))
    backend = MesosBackend(FrameworkConfig(state_file=str(path)))
    assert backend.framework_info().get("id") is None
    assert path.exists() and not list(tmp_path.glob("fw.json.broken-*"))


# -- 1: kill -9 of the framework ----------------------------------------------------------------
BURN = ("import time\nt = time.time() + {s}\nwhile time.time() < t: pass\n")


def _burn_jobs(tmp_path, count: int, seconds: int):
    """The v1 cpu mount and a queue file of ``count`` 2-core jobs burning ``seconds`` each
    (skips where the cgroup v1 cpu controller is missing)."""
    import sys
    from pathlib import Path

    cpu = Path("/sys/fs/cgroup/cpu")
    if not (cpu / "cpu.cfs_quota_us").exists():
        pytest.skip("needs the cgroup v1 cpu controller")
    jobs = tmp_path / "jobs.json"
    jobs.write_text("\n".join(json.dumps(
        {"job_id": f"kill9-{i}", "cores": 2, "walltime_s": 60, "job_class": "test/burn",
         "command": [sys.executable, "-c", BURN.format(s=seconds)]}) for i in range(count)))
    return cpu, jobs


def _quotas(base) -> dict[str, int]:
    """job -> cpu.cfs_quota_us under every agent root of a framework's cgroup base."""
    out = {}
    for f in base.glob("*/kill9-[0-9]/cpu.cfs_quota_us"):
        out[f.parent.name] = int(f.read_text())
    return out


@pytest.mark.mesos
@pytest.mark.root
def test_kill_9_of_the_framework_leaves_no_job_throttled_past_a_lease_and_a_restart_cleans_up(tmp_path):
    """`cosched run --backend mesos` (static co-allocation, local node agents, lease 3 s)
    is killed with SIGKILL while a guest runs inside a host: one lease later no job is
    throttled (the watchdog lifted the quotas), and a restart with the same state adopts
    the jobs, completes every one of them (none failed) and leaves no cgroup behind."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from mesos_emu_proc import EmulatorProcess, wait_for

    cpu, jobs = _burn_jobs(tmp_path, 3, 14)
    emu = EmulatorProcess(agents=1, cpus=2)
    db = tmp_path / "state.db"
    argv = [sys.executable, "-m", "coscheduler.cli", "run", "--backend", "mesos", "--master", emu.url,
            "--policy", "static", "--static-fraction", "0.5", "--db", str(db), "--lease", "3",
            "--interval", "0.5", "--cpu-per-core", "1", "--hold", "1", "--refuse", "0.5",
            "--until-idle", "--log-level", "INFO"]
    procs = []

    def start(*extra):
        p = subprocess.Popen(argv + list(extra), stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / f"run{len(procs)}.log", "wb"), start_new_session=True)
        procs.append(p)
        return p

    base = None
    try:
        first = start("--queue-file", str(jobs))
        fid = wait_for(lambda: json.loads((tmp_path / "state.mesos.json").read_text()).get("framework_id")
                       if (tmp_path / "state.mesos.json").exists() else None, 60, 0.2, "the framework id")
        assert fid
        # the framework's node agents' base: job cgroups named exactly kill9-N (the
        # emulator's own cosched-mesos-<pid>-<n> tree names its task cgroups kill9-N~...)
        base = wait_for(lambda: next((b for b in cpu.glob("cosched-mesos-*")
                                      if any(b.glob("*/kill9-[0-9]"))), None), 60, 0.2, "the cgroup base")
        # a guest inside a host: someone's quota is below its 2 full cores (200000 us)
        wait_for(lambda: any(0 < q < 200_000 for q in _quotas(base).values()), 60, 0.2,
                 "a lowered quota")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        time.sleep(3 + 2.5)   # one lease, and the watchdog's margin
        throttled = {j: q for j, q in _quotas(base).items() if 0 < q < 200_000}
        assert throttled == {}, f"jobs still throttled one lease after kill -9: {throttled}"
        second = start()
        assert second.wait(150) == 0, (tmp_path / "run1.log").read_text()[-3000:]
        done = {p.stem: json.loads(p.read_text())["outcome"]["state"]
                for p in (tmp_path / "state.mesos-queue" / "done").glob("*.json")}
        assert done == {f"kill9-{i}": "completed" for i in range(3)}, done
        wait_for(lambda: not base.exists(), 10, 0.2, "the cgroup base to be removed")
        assert not list(Path("/sys/fs/cgroup/cpuacct").glob(base.name))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        emu.stop()


@pytest.mark.mesos
@pytest.mark.root
def test_sighup_stops_the_framework_cleanly_and_gives_every_quota_back_at_once(tmp_path):
    """A closed terminal or a log rotator's ``kill -HUP``: SIGHUP's default action ended
    `cosched run` at once, without giving back the quotas it applied (they stayed until
    the lease lapsed). It now stops as on SIGTERM: exit 0, no quota left lowered, well
    before the 60 s lease; the jobs run on (the framework fails over, not torn down)."""
    import os
    import signal
    import subprocess
    import sys

    from mesos_emu_proc import EmulatorProcess, wait_for

    cpu, jobs = _burn_jobs(tmp_path, 2, 20)
    emu = EmulatorProcess(agents=1, cpus=2)
    argv = [sys.executable, "-m", "coscheduler.cli", "run", "--backend", "mesos", "--master", emu.url,
            "--policy", "static", "--static-fraction", "0.5", "--db", str(tmp_path / "state.db"),
            "--lease", "60", "--interval", "0.5", "--cpu-per-core", "1", "--hold", "1",
            "--refuse", "0.5", "--queue-file", str(jobs), "--log-level", "INFO"]
    # (SIGHUP not ignored, even when the tests run under nohup, as CI's runner does)
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "run.log", "wb"),
                         start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        base = wait_for(lambda: next((b for b in cpu.glob("cosched-mesos-*")
                                      if any(b.glob("*/kill9-[0-9]"))), None), 60, 0.2, "the cgroup base")
        wait_for(lambda: any(0 < q < 200_000 for q in _quotas(base).values()), 60, 0.2,
                 "a lowered quota")
        p.send_signal(signal.SIGHUP)
        assert p.wait(30) == 0, (tmp_path / "run.log").read_text()[-3000:]
        lowered = {j: q for j, q in _quotas(base).items() if 0 < q < 200_000}
        assert lowered == {}, f"quotas left lowered after SIGHUP: {lowered}"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        emu.stop()


def test_is_finite_number_answers_for_json_integers_past_a_float():
    from coscheduler.boundedjson import is_finite_number
    assert is_finite_number(3) and is_finite_number(2.5) and is_finite_number(10 ** 300)
    assert not is_finite_number(10 ** 400) and not is_finite_number(-(10 ** 400))
    assert not is_finite_number(float("nan")) and not is_finite_number(True)
    assert not is_finite_number("5") and not is_finite_number(None)
