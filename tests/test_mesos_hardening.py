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
from testbed.mesos import AgentSpec, MasterConfig, MesosEmulator
from tests.mesos_raw import post
from tests.test_mesos_driver import SUBSCRIBED, Recorder, ScriptMaster, encode, ev, make_driver


@pytest.fixture
def emu(tmp_path):
    e = MesosEmulator([AgentSpec(cpus=2, mem_mb=1024)], listen=("127.0.0.1", 0),
                      workdir=tmp_path / "emu",
                      config=MasterConfig(heartbeat_interval_s=0.3, allocation_interval_s=0.1))
    e.start()
    yield e
    e.close()


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
