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


def dead(pid: int) -> bool:
    """The process is gone or a zombie (init here reaps orphans slowly)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


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
        sched.update_for("t1", "TASK_FINISHED")
        ups = [e["update"]["status"] for e in sched.stream.events if e["type"] == "UPDATE"]
        states = [u["state"] for u in ups]
        for u in ups:
            assert u["uuid"] and u["source"] == "SOURCE_EXECUTOR"
            assert u["agent_id"] == offer["agent_id"]
        assert sched.acked == [u["uuid"] for u in ups]
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
    sched = RawScheduler(addr(emu), auto_ack=False)
    try:
        offer = sched.next_offers()[0]
        sched.launch(offer, [task_info("slow-ack", offer["agent_id"], "sleep 5")])
        first = sched.stream.wait_for(lambda e: e["type"] == "UPDATE")
        assert first["update"]["status"]["state"] == "TASK_STARTING"
        again = sched.stream.wait_for(lambda e: e["type"] == "UPDATE", timeout=3)
        # Resent (same uuid), and TASK_RUNNING not yet forwarded.
        assert again["update"]["status"]["uuid"] == first["update"]["status"]["uuid"]
        assert again["update"]["status"]["state"] == "TASK_STARTING"
        # The task runs, but reconciliation answers with the state last forwarded.
        assert wait_until(lambda: emu.master.frameworks[sched.fid].tasks["slow-ack"].state == "TASK_RUNNING")
        sched.call("RECONCILE", {"tasks": [{"task_id": {"value": "slow-ack"}}]})
        rec = sched.stream.wait_for(lambda e: e["type"] == "UPDATE" and
                                    e["update"]["status"].get("reason") == "REASON_RECONCILIATION")
        assert rec["update"]["status"]["state"] == "TASK_STARTING" and "uuid" not in rec["update"]["status"]
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
        assert wait_until(lambda: dead(pid))
        # Killing a task the master does not know: TASK_LOST from the master, no uuid.
        sched.call("KILL", {"task_id": {"value": "nope"}})
        lost = sched.update_for("nope", "TASK_LOST")
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
        lost = sched.update_for("on-victim", "TASK_LOST")
        st = lost["update"]["status"]
        assert st["reason"] == "REASON_AGENT_REMOVED" and "uuid" not in st
        sched.stream.wait_for(lambda e: e["type"] == "FAILURE" and
                              e["failure"]["agent_id"]["value"] == victim)
        assert "RESCIND" in sched.stream.types()
        assert wait_until(lambda: dead(pid))
        assert wait_until(lambda: not cgroup.exists())
        # Reconciling the lost task: TASK_LOST; the agent is never offered again.
        sched.call("RECONCILE", {"tasks": [{"task_id": {"value": "on-victim"},
                                            "agent_id": {"value": victim}}]})
        ev = sched.update_for("on-victim", "TASK_LOST")
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
        ev = again.update_for("keep", "TASK_RUNNING")
        assert ev["update"]["status"]["reason"] == "REASON_RECONCILIATION"
        assert psutil.pid_exists(pid)
    finally:
        again.close()
    # This time the framework stays away longer than its (new) failover timeout of 0.5 s.
    assert wait_until(lambda: fid not in emu.master.frameworks, timeout=5)
    assert wait_until(lambda: dead(pid), timeout=5)
    late = RawStream(addr_, {"type": "SUBSCRIBE", "framework_id": {"value": fid}, "subscribe": {
        "framework_info": {"user": "root", "name": "late", "id": {"value": fid}}}})
    try:
        ev = late.next_event()
        assert ev["type"] == "ERROR" and "removed" in ev["error"]["message"]
        assert late.read_until_end(2)
    finally:
        late.close()


def test_a_second_subscription_fails_the_first_over(emu):
    first = RawScheduler(addr(emu), failover_timeout=10)
    second = RawScheduler(addr(emu), framework_id=first.fid, failover_timeout=10)
    try:
        ev = first.stream.wait_for(lambda e: e["type"] == "ERROR")
        assert ev["error"]["message"] == "Framework failed over"
        assert first.stream.read_until_end(2)
        assert second.call("REVIVE", {})[0] == 202
        # The first instance's outstanding offers were rescinded on the new stream.
        old_offers = {o["id"]["value"] for e in first.stream.events if e["type"] == "OFFERS"
                      for o in e["offers"]["offers"]}
        if old_offers:
            ev = second.stream.wait_for(lambda e: e["type"] == "RESCIND")
            assert ev["rescind"]["offer_id"]["value"] in old_offers
        # Any event can be injected (the emulator never makes inverse offers itself).
        emu.master.send_event(second.fid, {"type": "INVERSE_OFFERS", "inverse_offers": {"inverse_offers": []}})
        second.stream.wait_for(lambda e: e["type"] == "INVERSE_OFFERS")
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
    assert sched.stream.read_until_end(3)   # the master closed the stream
    assert wait_until(lambda: dead(pid), timeout=5)
    assert sched.call("REVIVE", {})[0] == 403   # the framework is gone (Mesos: Forbidden)
    sched.close()


def test_http_answers_follow_the_documentation(emu):
    a = addr(emu)
    sub = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u", "name": "n"}}}
    status, _, hdrs = post(a, None, method="GET")
    assert status == 405 and hdrs.get("Allow") == "POST"
    assert post(a, sub, content_type=None)[0] == 400
    status, text, _ = post(a, sub, content_type="application/x-protobuf")
    assert status == 415 and "JSON" in text
    assert post(a, sub, content_type="text/plain")[0] == 415
    status, text, _ = post(a, b"{oops")
    assert status == 400 and "JSON" in text
    status, text, _ = post(a, {"type": "ACCEPT", "framework_id": {"value": "x"}, "accept": {"offer_ids": 3}})
    assert status == 400 and "accept.offer_ids" in text
    s = RawStream(a, sub, headers={"Accept": "application/x-protobuf"})
    assert s.status == 406
    s.close()
    s = RawStream(a, sub, headers={"Mesos-Stream-Id": "abc"})
    assert s.status == 400 and "Mesos-Stream-Id" in s.body_text()
    s.close()
    assert post(a, {"type": "UNKNOWN"})[0] == 501
    status, text, _ = post(a, {"type": "REVIVE", "framework_id": {"value": "never-seen"}},
                           stream_id="x")
    assert status == 403 and "cannot be found" in text
    assert post(a, sub, path="/api/v1/elsewhere")[0] == 404
    assert post(a, None, method="GET", path="/health", content_type=None)[0] == 200
    # Admin writes need the token; reads do not.
    assert post(a, {}, path="/admin/heartbeats")[0] == 401
    assert post(a, {}, path="/admin/heartbeats", headers={"Authorization": "Bearer wrong"})[0] == 403
    status, text, _ = post(a, None, method="GET", path="/admin/state", content_type=None)
    assert status == 200 and '"emulated": true' in text
    auth = {"Authorization": f"Bearer {emu.token}"}
    # Injected 5xx: exactly the next call, then normal service.
    assert post(a, {"status": 503, "count": 1}, path="/admin/http-faults", headers=auth)[0] == 200
    assert post(a, sub)[0] == 503
    # A fault aimed at SUBSCRIBE lets other calls through and waits for one.
    assert post(a, {"status": 503, "count": 1, "calls": ["SUBSCRIBE"]}, path="/admin/http-faults",
                headers=auth)[0] == 200
    assert post(a, {"type": "REVIVE", "framework_id": {"value": "never-seen"}}, stream_id="x")[0] == 403
    assert post(a, sub)[0] == 503
    status, text, _ = post(a, {"status": 503, "calls": "SUBSCRIBE"}, path="/admin/http-faults", headers=auth)
    assert status == 400 and "'calls'" in text
    # A non-leading master redirects with the Location it was given.
    assert post(a, {"redirect_to": "//127.0.0.1:1/api/v1/scheduler"}, path="/admin/leader",
                headers=auth)[0] == 200
    status, _, hdrs = post(a, sub)
    assert status == 307 and hdrs["Location"] == "//127.0.0.1:1/api/v1/scheduler"
    post(a, {"redirect_to": None}, path="/admin/leader", headers=auth)
    s = RawStream(a, sub)
    assert s.status == 200 and s.next_event()["type"] == "SUBSCRIBED"
    s.close()


def test_stream_faults_arrive_exactly_as_injected(emu):
    sched = RawScheduler(addr(emu), failover_timeout=30)
    try:
        m, fid, st = emu.master, sched.fid, sched.stream
        sched.call("SUPPRESS", {})
        st.wait_for(lambda e: e["type"] == "HEARTBEAT")
        m.inject(fid, "unknown_event", "SOMETHING_NEW")
        st.wait_for(lambda e: e["type"] == "SOMETHING_NEW")
        m.inject(fid, "bad_json")
        m.inject(fid, "zero_length")
        recs = []
        while b"" not in recs:
            rec = st.next_record()
            assert rec is not None
            if not rec.startswith(b'{"type":"HEARTBEAT"'):
                recs.append(rec)
        assert recs == [b'{"type": "OFFERS"', b""]   # not JSON; then a zero length
        # Heartbeats off: silence for several intervals; on again: they come back.
        m.set_heartbeats(False, fid)
        time.sleep(0.35)
        n = st.types().count("HEARTBEAT")
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            st.next_event(0.1)
        assert st.types().count("HEARTBEAT") == n
        m.set_heartbeats(True, fid)
        st.wait_for(lambda e: e["type"] == "HEARTBEAT", timeout=2)
        # Records cut into one-byte chunks still parse (chunk boundaries carry no meaning).
        emu.master.set_chunking("bytes")
        st.wait_for(lambda e: e["type"] == "HEARTBEAT", timeout=2)
        assert st.chunk_sizes[-5:] == [1] * 5
        emu.master.set_chunking("record")
        # A truncated record ends the stream; the framework is disconnected.
        m.inject(fid, "truncated")
        while st.next_record(2) is not None:
            pass
        assert st.eof and not st.ended_cleanly
        assert wait_until(lambda: not emu.master.frameworks[fid].connected)
    finally:
        sched.close()


def test_pause_holds_every_event_and_resume_delivers_them_in_order(emu):
    sched = RawScheduler(addr(emu))
    try:
        offer = sched.next_offers()[0]
        emu.master.pause_stream(sched.fid)
        sched.launch(offer, [task_info("p1", offer["agent_id"], "sleep 0.2")])
        assert sched.stream.new_events(1.0) == []    # silence: no heartbeat, no update
        emu.master.pause_stream(sched.fid, False)
        ev = sched.stream.wait_for(lambda e: e["type"] == "UPDATE")
        assert ev["update"]["status"]["state"] == "TASK_STARTING"
    finally:
        sched.close()


def test_launch_group_runs_its_tasks_and_one_failure_kills_the_others(emu):
    sched = RawScheduler(addr(emu))
    try:
        offer = sched.next_offers()[0]
        executor = {"type": "DEFAULT", "executor_id": {"value": "ex1"}, "framework_id": sched.framework_id,
                    "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                                  {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]}
        tasks = [task_info("g-long", offer["agent_id"], "sleep 60"),
                 task_info("g-bad", offer["agent_id"], "sleep 0.5; exit 7")]
        status, text = sched.call("ACCEPT", {"offer_ids": [offer["id"]], "operations": [
            {"type": "LAUNCH_GROUP", "launch_group": {"executor": executor,
                                                      "task_group": {"tasks": tasks}}}]})
        assert status == 202, text
        failed = sched.update_for("g-bad", "TASK_FAILED")
        assert failed["update"]["status"]["executor_id"]["value"] == "ex1"
        sched.update_for("g-long", "TASK_KILLED")
        ev = sched.stream.wait_for(lambda e: e["type"] == "FAILURE")
        assert ev["failure"]["executor_id"]["value"] == "ex1"
    finally:
        sched.close()


def test_invalid_offers_and_invalid_tasks_are_reported_not_launched(emu):
    sched = RawScheduler(addr(emu))
    try:
        offers = sched.next_offers()
        o1, o2 = offers[0], offers[1]
        # An offer id that does not exist: the task is lost, no process.
        sched.launch({"id": {"value": "no-such-offer"}}, [task_info("ghost", o1["agent_id"], "true")])
        ev = sched.update_for("ghost", "TASK_LOST")
        assert ev["update"]["status"]["reason"] == "REASON_INVALID_OFFERS"
        # Offers of two agents in one ACCEPT are invalid too (and both are used up).
        status, _ = sched.call("ACCEPT", {"offer_ids": [o1["id"], o2["id"]], "operations": [
            {"type": "LAUNCH", "launch": {"task_infos": [task_info("two", o1["agent_id"], "true")]}}]})
        assert status == 202
        assert sched.update_for("two", "TASK_LOST")["update"]["status"]["reason"] == \
            "REASON_INVALID_OFFERS"
        o = sched.next_offers()[0]
        too_big = task_info("big", o["agent_id"], "true", cpus=99)
        no_cmd = task_info("nocmd", o["agent_id"], "true")
        del no_cmd["command"]
        neg = task_info("neg", o["agent_id"], "true", cpus=-1)
        ok = task_info("ok", o["agent_id"], "true")
        dup = task_info("ok", o["agent_id"], "true")
        sched.launch(o, [too_big, no_cmd, neg, ok, dup])
        for tid, frag in [("big", "more resources"), ("nocmd", "command"), ("neg", ">= 0")]:
            st = sched.update_for(tid, "TASK_ERROR")["update"]["status"]
            assert st["reason"] == "REASON_TASK_INVALID" and frag in st["message"], st
            assert "uuid" not in st
        dup_ev = sched.update_for("ok", "TASK_ERROR")
        assert "duplicate" in dup_ev["update"]["status"]["message"]
        sched.update_for("ok", "TASK_FINISHED")
        # Accepting an offer twice: the second time it is no longer valid.
        sched.launch(o, [task_info("again", o["agent_id"], "true")])
        assert sched.update_for("again", "TASK_LOST")
    finally:
        sched.close()


def test_offers_are_rescinded_by_fault_and_by_offer_timeout(tmp_path):
    e = MesosEmulator([AgentSpec(cpus=1, mem_mb=256)], listen=("127.0.0.1", 0),
                      workdir=tmp_path / "emu", config=fast_config(offer_timeout_s=0.5))
    with e:
        sched = RawScheduler(addr(e))
        try:
            offer = sched.next_offers()[0]
            t0 = time.monotonic()
            ev = sched.stream.wait_for(lambda x: x["type"] == "RESCIND")
            assert ev["rescind"]["offer_id"] == offer["id"]
            assert 0.4 < time.monotonic() - t0 < 2.0
            again = sched.next_offers()[0]
            e.master.rescind_offer(again["id"]["value"], refuse_seconds=30)
            ev = sched.stream.wait_for(lambda x: x["type"] == "RESCIND")
            assert ev["rescind"]["offer_id"] == again["id"]
            # A rescinded offer cannot be used.
            sched.launch(again, [task_info("late", again["agent_id"], "true")])
            assert sched.update_for("late", "TASK_LOST")
        finally:
            sched.close()


def test_a_task_is_capped_at_its_cpus_times_the_cpu_scale(tmp_path):
    """Real CFS quota: a busy loop on an agent whose cpu is 0.2 real CPUs uses about that."""
    e = MesosEmulator([AgentSpec(cpus=1, mem_mb=256)], listen=("127.0.0.1", 0),
                      workdir=tmp_path / "emu", config=fast_config(), cpu_scale=0.2)
    with e:
        sched = RawScheduler(addr(e))
        try:
            offer = sched.next_offers()[0]
            sched.launch(offer, [task_info("burn", offer["agent_id"], "while :; do :; done", cpus=1)])
            sched.update_for("burn", "TASK_RUNNING")
            task = e.master.frameworks[sched.fid].tasks["burn"]
            acct = e.master.agents[offer["agent_id"]["value"]].runtime.node_agent.actuator.acct
            usage = Path(acct.job(task.job_id)) / "cpuacct.usage"   # the kernel's count, ns

            def cpu() -> float:
                return int(usage.read_text()) / 1e9
            time.sleep(0.2)
            c0, t0 = cpu(), time.monotonic()
            time.sleep(1.5)
            used = (cpu() - c0) / (time.monotonic() - t0)
            assert 0.05 < used < 0.35, used   # 0.2 CPUs allowed; unconstrained it would be ~1
            quota = Path(e.master.agent_views()[0]["cgroup"], task.job_id, "cpu.cfs_quota_us")
            period = Path(quota.parent, "cpu.cfs_period_us")
            assert int(quota.read_text()) / int(period.read_text()) == pytest.approx(0.2, rel=0.05)
        finally:
            sched.close()


def test_message_update_framework_and_ports(tmp_path):
    e = MesosEmulator([AgentSpec(cpus=1, mem_mb=256, ports=(31000, 31009))], listen=("127.0.0.1", 0),
                      workdir=tmp_path / "emu", config=fast_config())
    with e:
        sched = RawScheduler(addr(e), failover_timeout=5)
        try:
            offer = sched.next_offers()[0]
            ports = [r for r in offer["resources"] if r["name"] == "ports"]
            assert ports[0]["ranges"]["range"] == [{"begin": 31000, "end": 31009}]
            t = task_info("web", offer["agent_id"], "sleep 30")
            t["resources"].append({"name": "ports", "type": "RANGES",
                                   "ranges": {"range": [{"begin": 31002, "end": 31003}]}})
            sched.launch(offer, [t], refuse_seconds=0)
            sched.update_for("web", "TASK_RUNNING")
            nxt = sched.next_offers()[0]
            rng = [r for r in nxt["resources"] if r["name"] == "ports"][0]["ranges"]["range"]
            assert rng == [{"begin": 31000, "end": 31001}, {"begin": 31004, "end": 31009}]
            # MESSAGE: accepted and recorded; an executor's MESSAGE comes as an event.
            status, _ = sched.call("MESSAGE", {"agent_id": offer["agent_id"], "executor_id": {"value": "web"},
                                               "data": "aGVsbG8="})
            assert status == 202
            assert e.master.state()["frameworks"][0]["messages"][0]["data"] == "aGVsbG8="
            e.master.send_message(sched.fid, offer["agent_id"]["value"], "web", b"hi")
            ev = sched.stream.wait_for(lambda x: x["type"] == "MESSAGE")
            assert ev["message"]["data"] == "aGk="
            # UPDATE_FRAMEWORK: 200; the new failover timeout is in force; user cannot change.
            info = {"user": "root", "name": "renamed", "id": sched.framework_id, "failover_timeout": 99}
            status, _ = sched.call("UPDATE_FRAMEWORK", {"framework_info": info})
            assert status == 200
            assert e.master.frameworks[sched.fid].failover_timeout == 99
            status, text = sched.call("UPDATE_FRAMEWORK", {"framework_info": dict(info, user="other")})
            assert status == 400 and "user" in text
        finally:
            sched.close()


def test_cli_emulate_serves_until_sigterm_then_kills_its_tasks_and_removes_its_cgroups(tmp_path):
    import json
    import select
    import signal
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "from coscheduler.cli import main; main()", "mesos", "emulate",
           "--agents", "2", "--cpus", "1", "--mem", "256", "--listen", "127.0.0.1:0",
           "--heartbeat", "0.5", "--allocation-interval", "0.1", "--log-level", "WARNING"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "wb"))
    try:
        assert select.select([proc.stdout], [], [], 30)[0], (tmp_path / "err").read_text()
        ready = json.loads(proc.stdout.readline())
        assert ready["emulated"] is True and len(ready["agents"]) == 2
        host, port = ready["url"].removeprefix("http://").rsplit(":", 1)
        a = (host, int(port))
        base = Path("/sys/fs/cgroup/cpu") / ready["cgroup"]
        assert base.is_dir() and Path(ready["workdir"]).is_dir()
        token = Path(ready["admin_token_file"]).read_text().strip()
        assert oct(Path(ready["admin_token_file"]).stat().st_mode & 0o777) == "0o600"
        sched = RawScheduler(a)
        offers = sched.next_offers()
        for i, o in enumerate(offers):
            sched.launch(o, [task_info(f"cli-{i}", o["agent_id"], "sleep 60", cpus=0.5)])
        for i in range(len(offers)):
            sched.update_for(f"cli-{i}", "TASK_RUNNING")
        status, text, _ = post(a, None, method="GET", path="/admin/state", content_type=None)
        tasks = json.loads(text)["frameworks"][0]["tasks"]
        pids = [t["pid"] for t in tasks]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
        # Losing an agent through the admin API (token from the file).
        victim = offers[0]["agent_id"]["value"]
        status, _, _ = post(a, {}, path=f"/admin/agents/{victim}/lose",
                            headers={"Authorization": f"Bearer {token}"})
        assert status == 200
        sched.stream.wait_for(lambda e: e["type"] == "FAILURE")
        sched.update_for("cli-0", "TASK_LOST")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        for p in pids:
            assert dead(p)
        assert not base.exists() and not (Path("/sys/fs/cgroup/cpuacct") / ready["cgroup"]).exists()
        assert not Path(ready["workdir"]).exists()
        sched.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_tasks_die_with_an_emulator_killed_with_sigkill_and_the_next_one_cleans_up(tmp_path):
    import json
    import select
    import signal
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "from coscheduler.cli import main; main()", "mesos", "emulate",
           "--agents", "1", "--cpus", "1", "--mem", "256", "--listen", "127.0.0.1:0",
           "--allocation-interval", "0.1", "--log-level", "WARNING", "--workdir", str(tmp_path / "w")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert select.select([proc.stdout], [], [], 30)[0]
        ready = json.loads(proc.stdout.readline())
        host, port = ready["url"].removeprefix("http://").rsplit(":", 1)
        sched = RawScheduler((host, int(port)))
        o = sched.next_offers()[0]
        # A command whose shell forks: the grandchild must die too.
        sched.launch(o, [task_info("orphan", o["agent_id"], "sleep 300 & sleep 301; wait")])
        sched.update_for("orphan", "TASK_RUNNING")
        job_cg = Path(ready["agents"][0]["cgroup"]) / "orphan"
        assert wait_until(lambda: len((job_cg / "cgroup.procs").read_text().split()) >= 3)
        members = [psutil.Process(int(x)) for x in (job_cg / "cgroup.procs").read_text().split()]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sched.close()
        # The leader dies with the emulator, the forked ones by its watchdog, which then
        # removes the cgroups.
        assert wait_until(lambda: all(dead(p.pid) for p in members), timeout=6)
        base = Path("/sys/fs/cgroup/cpu") / ready["cgroup"]
        assert wait_until(lambda: not base.exists(), timeout=6)
        assert (tmp_path / "w").is_dir()   # a work folder that was given is kept
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_next_emulator_kills_and_removes_what_a_dead_one_left(tmp_path):
    """The fallback when no watchdog ran: a cgroup named after a dead owner pid."""
    import subprocess

    from testbed.mesos.runtime import CGROUP_PREFIX

    dead_pid = subprocess.Popen(["true"])
    dead_pid.wait()
    base = Path("/sys/fs/cgroup/cpu") / f"{CGROUP_PREFIX}{dead_pid.pid}-1"
    (base / "agent1" / "t").mkdir(parents=True)
    # Not our child (as a dead emulator's task is not the next one's).
    victim = int(subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True).stdout)
    (base / "agent1" / "t" / "cgroup.procs").write_text(str(victim))
    try:
        e = MesosEmulator([AgentSpec(cpus=1, mem_mb=128)], listen=("127.0.0.1", 0),
                          workdir=tmp_path / "e2")
        e.close()
        assert wait_until(lambda: dead(victim))
        assert not base.exists()
    finally:
        if not dead(victim):
            os.kill(victim, 9)
        for d in sorted(base.rglob("*"), key=lambda p: len(p.parts), reverse=True) + [base]:
            if d.is_dir():
                d.rmdir()
