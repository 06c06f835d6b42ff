"""The emulated Mesos master (testbed/mesos/) against raw HTTP: the documented v1 scheduler
API, real processes in real cgroups. No framework code is used here (see mesos_raw.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from testbed.mesos import AgentSpec, MasterConfig, MesosEmulator
from tests.mesos_raw import RawScheduler, RawStream, post, scalar, task_info

pytestmark = [pytest.mark.mesos, pytest.mark.root]


def fast_config(**kw) -> MasterConfig:
    base = dict(heartbeat_interval_s=0.3, allocation_interval_s=0.1, status_update_retry_s=0.4,
                kill_grace_s=1.0)
    base.update(kw)
    return MasterConfig(**base)


@pytest.fixture
def emu(tmp_path):
    e = MesosEmulator([AgentSpec(cpus=2, mem_mb=1024), AgentSpec(cpus=2, mem_mb=1024)],
                      listen=("127.0.0.1", 0), workdir=tmp_path / "emu", config=fast_config())
    e.start()
    yield e
    e.close()


def addr(e: MesosEmulator) -> tuple[str, int]:
    return e.server.address


def wait_until(pred, timeout=5.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return False


def test_subscribe_opens_a_recordio_stream_with_subscribed_heartbeats_and_offers(emu):
    s = RawStream(addr(emu), {"type": "SUBSCRIBE", "subscribe": {
        "framework_info": {"user": "root", "name": "t"}}})
    try:
        assert s.status == 200
        assert s.header("Transfer-Encoding") == "chunked"
        assert s.header("Content-Type") == "application/json"
        assert s.header("Content-Length") is None
        assert s.stream_id and len(s.stream_id) <= 128
        first = s.next_event()
        assert first["type"] == "SUBSCRIBED"
        assert first["subscribed"]["framework_id"]["value"]
        assert first["subscribed"]["heartbeat_interval_seconds"] == pytest.approx(0.3)
        offers_ev = s.wait_for(lambda e: e["type"] == "OFFERS")
        offers = offers_ev["offers"]["offers"]
        assert {o["agent_id"]["value"] for o in offers} == set(emu.agent_ids)
        for o in offers:
            assert o["framework_id"] == first["subscribed"]["framework_id"]
            assert scalar(o, "cpus") == 2 and scalar(o, "mem") == 1024
            assert o["hostname"] and o["id"]["value"]
        # Heartbeats keep coming at about the announced interval.
        t0 = time.monotonic()
        s.wait_for(lambda e: e["type"] == "HEARTBEAT")
        s.wait_for(lambda e: e["type"] == "HEARTBEAT")
        assert time.monotonic() - t0 < 3 * 0.3 + 0.5
        # The raw bytes are RecordIO: "<decimal length>\n<that many bytes>" and never 0.
        raw, i, n = s.raw, 0, 0
        while b"\n" in raw[i:]:
            j = raw.index(b"\n", i)
            length = int(raw[i:j])
            if j + 1 + length > len(raw):
                break
            assert length > 0
            i, n = j + 1 + length, n + 1
        assert n >= 4
    finally:
        s.close()


def test_launch_runs_a_real_process_in_the_agents_cgroup_with_the_real_state_sequence(emu, tmp_path):
    sched = RawScheduler(addr(emu))
    try:
        offer = sched.next_offers()[0]
        out = tmp_path / "proof"
        sched.launch(offer, [task_info("t1", offer["agent_id"],
                                       f"echo $$ > {out}; cat /proc/self/cgroup >> {out}; sleep 0.3")])
        states = []

        def on(ev):
            if ev["type"] == "UPDATE":
                st = ev["update"]["status"]
                states.append(st["state"])
                assert st["uuid"] and st["source"] == "SOURCE_EXECUTOR"
                assert st["agent_id"] == offer["agent_id"]
                sched.ack(ev)
        sched.stream.wait_for(lambda e: e["type"] == "UPDATE" and
                              e["update"]["status"]["state"] == "TASK_FINISHED", 10, on)
        assert states == ["TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED"]
        text = out.read_text()
        agent = next(a for a in emu.master.agent_views() if a["id"] == offer["agent_id"]["value"])
        cg = agent["cgroup"].split("/sys/fs/cgroup/cpu", 1)[1]
        assert f"{cg}/t1" in text, text   # the task ran inside its agent's cgroup
        # A failing command is TASK_FAILED with its exit status.
        offer = sched.next_offers()[0]
        sched.launch(offer, [task_info("t2", offer["agent_id"], "exit 3")])
        ev = sched.update_for("t2", "TASK_FAILED")
        assert "status 3" in ev["update"]["status"]["message"]
    finally:
        sched.close()


def test_an_unacknowledged_update_is_resent_with_its_uuid_and_holds_the_next_one(emu):
    sched = RawScheduler(addr(emu))
    try:
        offer = sched.next_offers()[0]
        sched.launch(offer, [task_info("slow-ack", offer["agent_id"], "sleep 5")])
        first = sched.stream.wait_for(lambda e: e["type"] == "UPDATE")
        assert first["update"]["status"]["state"] == "TASK_STARTING"
        again = sched.stream.wait_for(lambda e: e["type"] == "UPDATE", timeout=3)
        # Resent (same uuid), and TASK_RUNNING not yet forwarded.
        assert again["update"]["status"]["uuid"] == first["update"]["status"]["uuid"]
        assert again["update"]["status"]["state"] == "TASK_STARTING"
        sched.ack(again)
        running = sched.stream.wait_for(lambda e: e["type"] == "UPDATE")
        assert running["update"]["status"]["state"] == "TASK_RUNNING"
        # An acknowledgement with a uuid that matches nothing is accepted and ignored.
        st = running["update"]["status"]
        status, _ = sched.call("ACKNOWLEDGE", {"agent_id": st["agent_id"], "task_id": st["task_id"],
                                               "uuid": "AAAAAAAAAAAAAAAAAAAAAA=="})
        assert status == 202
    finally:
        sched.close()


def test_kill_terminates_the_process_and_reports_killing_then_killed(emu):
    sched = RawScheduler(addr(emu), capabilities=["TASK_KILLING_STATE"])
    try:
        offer = sched.next_offers()[0]
        sched.launch(offer, [task_info("k1", offer["agent_id"], "sleep 60")])
        sched.update_for("k1", "TASK_RUNNING")
        pid = emu.master.frameworks[sched.fid].tasks["k1"].popen.pid
        assert psutil.pid_exists(pid)
        status, _ = sched.call("KILL", {"task_id": {"value": "k1"}, "agent_id": offer["agent_id"]})
        assert status == 202
        sched.update_for("k1", "TASK_KILLING")
        killed = sched.update_for("k1", "TASK_KILLED")
        assert killed["update"]["status"]["uuid"]
        assert wait_until(lambda: not psutil.pid_exists(pid) or
                          psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        # Killing a task the master does not know: TASK_LOST from the master, no uuid.
        sched.call("KILL", {"task_id": {"value": "nope"}})
        lost = sched.update_for("nope", "TASK_LOST", ack=False)
        assert "uuid" not in lost["update"]["status"]
        assert lost["update"]["status"]["source"] == "SOURCE_MASTER"
    finally:
        sched.close()


def test_decline_filter_holds_an_agent_back_until_revive_and_suppress_stops_offers(emu):
    sched = RawScheduler(addr(emu))
    try:
        offers = sched.next_offers()
        a, b = offers[0], offers[1]
        status, _ = sched.call("DECLINE", {"offer_ids": [a["id"]], "filters": {"refuse_seconds": 60}})
        assert status == 202
        status, _ = sched.call("DECLINE", {"offer_ids": [b["id"]], "filters": {"refuse_seconds": 0}})
        assert status == 202
        # b comes back at once; a does not (filtered for 60 s).
        seen = []
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            ev = sched.stream.next_event(0.2)
            if ev and ev["type"] == "OFFERS":
                for o in ev["offers"]["offers"]:
                    seen.append(o["agent_id"]["value"])
                    sched.call("DECLINE", {"offer_ids": [o["id"]], "filters": {"refuse_seconds": 0.3}})
        assert b["agent_id"]["value"] in seen
        assert a["agent_id"]["value"] not in seen
        sched.call("REVIVE", {})
        ev = sched.stream.wait_for(lambda e: e["type"] == "OFFERS" and any(
            o["agent_id"] == a["agent_id"] for o in e["offers"]["offers"]), timeout=2)
        # SUPPRESS: no offers at all, even with every filter gone.
        def decline_all(ev):
            if ev and ev["type"] == "OFFERS":
                sched.call("DECLINE", {"offer_ids": [o["id"] for o in ev["offers"]["offers"]],
                                       "filters": {"refuse_seconds": 0}})
        decline_all(ev)
        sched.call("SUPPRESS", {})
        t_end = time.monotonic() + 0.3   # offers already in flight may still arrive
        while time.monotonic() < t_end:
            decline_all(sched.stream.next_event(0.1))
        n_before = sched.stream.types().count("OFFERS")
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            sched.stream.next_event(0.2)
        assert sched.stream.types().count("OFFERS") == n_before
        sched.call("REVIVE", {"roles": ["*"]})
        sched.next_offers(timeout=2)
    finally:
        sched.close()


def test_losing_an_agent_kills_its_tasks_for_real_and_sends_lost_rescind_and_failure(emu):
    sched = RawScheduler(addr(emu))
    try:
        offers = {o["agent_id"]["value"]: o for o in sched.next_offers()}
        victim = emu.agent_ids[0]
        sched.launch(offers[victim], [task_info("on-victim", {"value": victim}, "sleep 60", cpus=1)],
                     refuse_seconds=0)
        sched.update_for("on-victim", "TASK_RUNNING")
        pid = emu.master.frameworks[sched.fid].tasks["on-victim"].popen.pid
        # The victim's remaining resources are offered (refuse_seconds 0) and held.
        assert wait_until(lambda: any(o["agent_id"] == victim for o in emu.master.state()["offers"]))
        cgroup = Path(next(a["cgroup"] for a in emu.master.agent_views() if a["id"] == victim))
        assert cgroup.is_dir()
        res = emu.master.lose_agent(victim)
        assert res["lost_tasks"] == ["on-victim"]
        lost = sched.update_for("on-victim", "TASK_LOST", ack=False)
        st = lost["update"]["status"]
        assert st["reason"] == "REASON_AGENT_REMOVED" and "uuid" not in st
        sched.stream.wait_for(lambda e: e["type"] == "FAILURE" and
                              e["failure"]["agent_id"]["value"] == victim)
        assert "RESCIND" in sched.stream.types()
        assert wait_until(lambda: not psutil.pid_exists(pid) or
                          psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        assert wait_until(lambda: not cgroup.exists())
        # Reconciling the lost task: TASK_LOST; the agent is never offered again.
        sched.call("RECONCILE", {"tasks": [{"task_id": {"value": "on-victim"},
                                            "agent_id": {"value": victim}}]})
        ev = sched.update_for("on-victim", "TASK_LOST", ack=False)
        assert ev["update"]["status"]["reason"] == "REASON_RECONCILIATION"
        assert victim not in emu.master.agents
    finally:
        sched.close()


def test_failover_within_the_timeout_keeps_tasks_and_after_it_they_are_killed(emu):
    addr_ = addr(emu)
    sched = RawScheduler(addr_, failover_timeout=30)
    offer = sched.next_offers()[0]
    sched.launch(offer, [task_info("keep", offer["agent_id"], "sleep 60")])
    sched.update_for("keep", "TASK_RUNNING")
    pid = emu.master.frameworks[sched.fid].tasks["keep"].popen.pid
    old_sid, fid = sched.stream.stream_id, sched.fid
    sched.close()
    assert wait_until(lambda: not emu.master.frameworks[fid].connected)
    # Disconnected: calls are forbidden until the framework subscribes again.
    status, _ = sched.call("REVIVE", {})
    assert status == 403
    again = RawScheduler(addr_, framework_id=fid, failover_timeout=0.5)
    try:
        assert again.fid == fid and again.stream.stream_id != old_sid
        assert again.call("REVIVE", {}, stream_id=old_sid)[0] == 400   # the old stream id is dead
        assert again.call("REVIVE", {}, stream_id=None)[0] == 400      # and one is required
        again.call("RECONCILE", {"tasks": []})
        ev = again.update_for("keep", "TASK_RUNNING", ack=False)
        assert ev["update"]["status"]["reason"] == "REASON_RECONCILIATION"
        assert psutil.pid_exists(pid)
    finally:
        again.close()
    # This time the framework stays away longer than its (new) failover timeout of 0.5 s.
    assert wait_until(lambda: fid not in emu.master.frameworks, timeout=5)
    assert wait_until(lambda: not psutil.pid_exists(pid) or
                      psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, timeout=5)
    late = RawStream(addr_, {"type": "SUBSCRIBE", "framework_id": {"value": fid}, "subscribe": {
        "framework_info": {"user": "root", "name": "late", "id": {"value": fid}}}})
    try:
        ev = late.next_event()
        assert ev["type"] == "ERROR" and "removed" in ev["error"]["message"]
        assert late.next_event(2) is None and late.eof
    finally:
        late.close()


def test_a_second_subscription_fails_the_first_over(emu):
    first = RawScheduler(addr(emu), failover_timeout=10)
    second = RawScheduler(addr(emu), framework_id=first.fid, failover_timeout=10)
    try:
        ev = first.stream.wait_for(lambda e: e["type"] == "ERROR")
        assert ev["error"]["message"] == "Framework failed over"
        assert first.stream.next_event(2) is None and first.stream.eof
        assert second.call("REVIVE", {})[0] == 202
    finally:
        first.close()
        second.close()


def test_teardown_kills_tasks_and_removes_the_framework(emu):
    sched = RawScheduler(addr(emu), failover_timeout=60)
    offer = sched.next_offers()[0]
    sched.launch(offer, [task_info("td", offer["agent_id"], "sleep 60")])
    sched.update_for("td", "TASK_RUNNING")
    pid = emu.master.frameworks[sched.fid].tasks["td"].popen.pid
    assert sched.call("TEARDOWN")[0] == 202
    assert sched.stream.next_event(3) is None and sched.stream.eof   # the master closed the stream
    assert wait_until(lambda: not psutil.pid_exists(pid) or
                      psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, timeout=5)
    assert sched.call("REVIVE", {})[0] == 400   # the framework is gone
    sched.close()
