"""The driver's HTTP behaviour against a throw-away master that lives only in this file.

The script master below is not an emulator: each test tells it exactly which bytes to
stream, so the driver's reading of the documented protocol (RecordIO over a chunked
SUBSCRIBE answer, Mesos-Stream-Id on calls, 307 to the leader, heartbeats, resubscription)
is checked byte for byte, including streams no well-behaved master would send.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mesos_framework.driver import (MesosCallError, MesosSchedulerDriver, backoff_delays,
                                    leader_from_location, parse_master)
from mesos_framework.recordio import encode


def ev(obj) -> bytes:
    return encode(json.dumps(obj).encode())


SUBSCRIBED = {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "F1"},
                                                   "heartbeat_interval_seconds": 0.2}}


class ScriptMaster:
    """POST /api/v1/scheduler: SUBSCRIBE gets a chunked stream fed from ``streams`` (one
    queue of byte strings per subscription; None ends the stream); other calls are recorded
    and answered 202 (or what ``answer`` says)."""

    def __init__(self, redirect_to: str | None = None):
        self.calls: list[tuple[dict, dict]] = []
        self.subscribes: list[tuple[dict, dict]] = []
        self.streams: "queue.Queue[queue.Queue]" = queue.Queue()
        self.redirect_to = redirect_to
        self.answer = 202
        self.stream_ids = iter(f"stream-{i}" for i in range(100))
        master = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k: v for k, v in self.headers.items()}
                if master.redirect_to:
                    self.send_response(307)
                    self.send_header("Location", master.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if body.get("type") != "SUBSCRIBE":
                    master.calls.append((body, headers))
                    self.send_response(master.answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                master.subscribes.append((body, headers))
                try:
                    script = master.streams.get(timeout=10)
                except queue.Empty:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Mesos-Stream-Id", next(master.stream_ids))
                self.end_headers()
                while True:
                    try:
                        data = script.get(timeout=10)
                    except queue.Empty:
                        break
                    if data is None:
                        break
                    if data == b"":    # hang: no bytes at all (a partitioned master)
                        time.sleep(30)
                        break
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    except OSError:
                        return
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stream(self, *chunks: bytes) -> "queue.Queue":
        q: queue.Queue = queue.Queue()
        for c in chunks:
            q.put(c)
        self.streams.put(q)
        return q

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Recorder:
    """A pymesos-style scheduler that writes down every callback."""

    def __init__(self):
        self.seen: list[tuple] = []
        self.cond = threading.Condition()

    def _rec(self, *item):
        with self.cond:
            self.seen.append(item)
            self.cond.notify_all()

    def wait(self, name, n=1, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self.cond:
            while sum(1 for s in self.seen if s[0] == name) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {name} x{n} within {timeout} s; saw {self.seen}")
                self.cond.wait(left)
        return [s for s in self.seen if s[0] == name]

    def registered(self, driver, framework_id, master_info):
        self._rec("registered", framework_id)

    def reregistered(self, driver, master_info):
        self._rec("reregistered")

    def disconnected(self, driver):
        self._rec("disconnected")

    def processHeartBeat(self, driver):
        self._rec("heartbeat")

    def resourceOffers(self, driver, offers):
        self._rec("resourceOffers", offers)

    def offerRescinded(self, driver, offer_id):
        self._rec("offerRescinded", offer_id)

    def statusUpdate(self, driver, status):
        self._rec("statusUpdate", status)

    def frameworkMessage(self, driver, executor_id, agent_id, data):
        self._rec("frameworkMessage", executor_id, agent_id, data)

    def slaveLost(self, driver, agent_id):
        self._rec("slaveLost", agent_id)

    def executorLost(self, driver, executor_id, agent_id, status):
        self._rec("executorLost", executor_id, agent_id, status)

    def error(self, driver, message):
        self._rec("error", message)


@pytest.fixture
def master():
    m = ScriptMaster()
    yield m
    m.close()


def make_driver(sched, url, **kw):
    kw.setdefault("backoff_base_s", 0.05)
    kw.setdefault("backoff_max_s", 0.2)
    kw.setdefault("first_heartbeat_s", 1.0)
    # the script master's 0.2 s heartbeats are below the production floor (1 s)
    kw.setdefault("min_heartbeat_s", 0.1)
    return MesosSchedulerDriver(sched, {"user": "root", "name": "test", "failover_timeout": 30},
                                url, **kw)


def test_parse_master_and_location():
    assert parse_master("127.0.0.1:5050") == "http://127.0.0.1:5050"
    assert parse_master("http://m1") == "http://m1:5050"
    assert leader_from_location("//m2:5051/api/v1/scheduler", "http://m1:5050") == "http://m2:5051"
    assert leader_from_location("m2:5050", "http://m1:5050") == "http://m2:5050"
    assert leader_from_location("https://m3:1/x", "http://m1:5050") == "https://m3:1"
    with pytest.raises(ValueError, match="ZooKeeper"):
        parse_master("zk://z:2181/mesos")
    with pytest.raises(ValueError):
        parse_master("ftp://x")


def test_backoff_grows_and_is_capped():
    d = list(zip(range(8), backoff_delays(0.5, 15.0)))
    delays = [x for _, x in d]
    assert 0.25 <= delays[0] <= 0.5 and all(x <= 15.0 for x in delays)
    assert delays[6] >= 7.5   # 0.5 * 2^5 = 16 -> capped at 15, drawn from its upper half


def test_every_event_reaches_the_pymesos_callbacks_and_calls_carry_the_stream_id(master):
    sched = Recorder()
    offer = {"id": {"value": "O1"}, "framework_id": {"value": "F1"}, "agent_id": {"value": "A1"},
             "hostname": "h", "resources": []}
    status = {"task_id": {"value": "T1"}, "state": "TASK_RUNNING", "agent_id": {"value": "A1"},
              "uuid": "dXVpZA=="}
    events = [SUBSCRIBED, {"type": "HEARTBEAT"}, {"type": "OFFERS", "offers": {"offers": [offer]}},
              {"type": "RESCIND", "rescind": {"offer_id": {"value": "O1"}}},
              {"type": "UPDATE", "update": {"status": status}},
              {"type": "MESSAGE", "message": {"agent_id": {"value": "A1"},
                                              "executor_id": {"value": "E1"}, "data": "aGk="}},
              {"type": "FAILURE", "failure": {"agent_id": {"value": "A1"}}},
              {"type": "FAILURE", "failure": {"agent_id": {"value": "A1"},
                                              "executor_id": {"value": "E1"}, "status": 9}}]
    # OFFERS' body is {"offers": [...]} under "offers" (Event.offers is an Offers message).
    events[2] = {"type": "OFFERS", "offers": {"offers": [offer]}}
    # All events in ONE chunk, then a heartbeat split over two chunks.
    hb = ev({"type": "HEARTBEAT"})
    master.stream(b"".join(ev(e) for e in events), hb[:3], hb[3:])
    d = make_driver(sched, master.url)
    d.start()
    try:
        assert sched.wait("registered")[0][1] == {"value": "F1"}
        sched.wait("heartbeat", 2)
        assert sched.wait("resourceOffers")[0][1] == [offer]
        assert sched.wait("offerRescinded")[0][1] == {"value": "O1"}
        assert sched.wait("statusUpdate")[0][1]["state"] == "TASK_RUNNING"
        assert sched.wait("frameworkMessage")[0][1:] == ({"value": "E1"}, {"value": "A1"}, "aGk=")
        assert sched.wait("slaveLost")[0][1] == {"value": "A1"}
        assert sched.wait("executorLost")[0][1:] == ({"value": "E1"}, {"value": "A1"}, 9)
        # The implicit acknowledgement of the UPDATE, with the uuid as received.
        deadline = time.monotonic() + 5
        while not master.calls and time.monotonic() < deadline:
            time.sleep(0.01)
        ack, headers = master.calls[0]
        assert ack == {"framework_id": {"value": "F1"}, "type": "ACKNOWLEDGE", "acknowledge": {
            "agent_id": {"value": "A1"}, "task_id": {"value": "T1"}, "uuid": "dXVpZA=="}}
        assert headers["Mesos-Stream-Id"] == "stream-0"
        # The SUBSCRIBE itself has no stream id, and asks for JSON.
        sub, sub_headers = master.subscribes[0]
        assert "Mesos-Stream-Id" not in sub_headers and sub_headers["Accept"] == "application/json"
        assert sub["subscribe"]["framework_info"]["failover_timeout"] == 30
        # pymesos-named calls.
        d.declineOffer({"value": "O9"}, {"refuse_seconds": 3})
        d.launchTasks([{"value": "O8"}], [{"name": "t"}])
        d.killTask({"value": "T1"})
        d.reconcileTasks([])
        d.reviveOffers()
        d.suppressOffers()
        kinds = [c[0]["type"] for c in master.calls[1:]]
        assert kinds == ["DECLINE", "ACCEPT", "KILL", "RECONCILE", "REVIVE", "SUPPRESS"]
        assert master.calls[1][0]["decline"] == {"offer_ids": [{"value": "O9"}],
                                                 "filters": {"refuse_seconds": 3}}
        assert all(h["Mesos-Stream-Id"] == "stream-0" for _, h in master.calls)
        master.answer = 400
        with pytest.raises(MesosCallError, match="HTTP 400"):
            d.reviveOffers()
    finally:
        d.stop(failover=True)


def test_unknown_event_and_garbage_json_are_logged_and_the_stream_goes_on(master, caplog):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED) + ev({"type": "NEW_FANCY_EVENT", "new_fancy_event": {}})
                  + encode(b"{not json") + ev({"no": "type"}) + ev({"type": "RESCIND"})
                  + ev({"type": "HEARTBEAT"}))
    d = make_driver(sched, master.url)
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("heartbeat")
        finally:
            d.stop(failover=True)
    text = caplog.text
    assert "unknown event type 'NEW_FANCY_EVENT'" in text
    assert "event is not JSON" in text and "event without a type" in text
    assert "RESCIND event lacks rescind.offer_id" in text
    assert [s[0] for s in sched.seen].count("disconnected") == 0


def test_malformed_recordio_frame_reconnects_with_the_framework_id(master, caplog):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED) + b"12x\n{}")
    master.stream(ev(SUBSCRIBED), ev({"type": "HEARTBEAT"}))
    d = make_driver(sched, master.url)
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("reregistered")
            sched.wait("heartbeat")
        finally:
            d.stop(failover=True)
    assert "malformed event stream" in caplog.text and "b'12x'" in caplog.text
    names = [s[0] for s in sched.seen]
    assert names.index("registered") < names.index("disconnected") < names.index("reregistered")
    resub = master.subscribes[1][0]
    assert resub["framework_id"] == {"value": "F1"}
    assert resub["subscribe"]["framework_info"]["id"] == {"value": "F1"}


def test_truncated_stream_end_is_reported_and_resubscribed(master, caplog):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED) + b"40\n{\"type\":", None)
    master.stream(ev(SUBSCRIBED))
    d = make_driver(sched, master.url)
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("reregistered")
        finally:
            d.stop(failover=True)
    assert "ended inside a record: 8 of 40 bytes" in caplog.text


def test_missed_heartbeats_cut_the_stream_and_resubscribe(master, caplog):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED), b"")         # then silence: a partitioned master
    master.stream(ev(SUBSCRIBED), ev({"type": "HEARTBEAT"}))
    d = make_driver(sched, master.url, heartbeat_misses=3)
    t0 = time.monotonic()
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("registered")
            t_reg = time.monotonic()
            sched.wait("reregistered", timeout=10)
            waited = time.monotonic() - t_reg
        finally:
            d.stop(failover=True)
    # 3 x 0.2 s of silence, then the cut and a short backoff: well under the 30 s hang.
    assert 0.5 <= waited < 5.0, waited
    assert "3 heartbeats of 0.2 s missed" in caplog.text
    assert d.disconnections == 1 and time.monotonic() - t0 < 10


def test_the_heartbeat_watcher_sleeps_until_the_silence_could_pass_the_limit(master):
    """With 2 s heartbeats (6 s of silence allowed) the watcher looks about once a second,
    not 20 times a second: a framework runs for months and each wake-up costs CPU."""
    sched = Recorder()
    slow = {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": "F1"},
                                                 "heartbeat_interval_seconds": 2.0}}
    master.stream(ev(slow), ev({"type": "HEARTBEAT"}))
    d = make_driver(sched, master.url, heartbeat_misses=3)
    looks = []
    stop_wait = d._stop.wait

    def counted(timeout=None):
        if threading.current_thread().name == "mesos-heartbeat":
            looks.append(timeout)
        return stop_wait(timeout)

    d._stop.wait = counted
    d.start()
    try:
        sched.wait("registered")
        time.sleep(2.0)
        assert d.disconnections == 0
    finally:
        d.stop(failover=True)
    assert len(looks) <= 8, f"{len(looks)} looks in ~2 s: {looks}"


def test_307_sends_subscribe_and_calls_to_the_leader(master):
    follower = ScriptMaster(redirect_to="//" + master.url.split("//")[1] + "/api/v1/scheduler")
    try:
        sched = Recorder()
        master.stream(ev(SUBSCRIBED))
        d = make_driver(sched, follower.url)
        d.start()
        try:
            sched.wait("registered")
            assert d.master == master.url
            d.reviveOffers()
            assert master.calls[-1][0]["type"] == "REVIVE"
            assert not follower.calls and not follower.subscribes
        finally:
            d.stop(failover=True)
    finally:
        follower.close()


def test_error_event_aborts_the_driver(master):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED) + ev({"type": "ERROR", "error": {"message": "Framework failed over"}}))
    d = make_driver(sched, master.url)
    d.start()
    assert sched.wait("error")[0][1] == "Framework failed over"
    assert d.join(5) == 3   # DRIVER_ABORTED


def test_stop_without_failover_tears_the_framework_down(master):
    sched = Recorder()
    master.stream(ev(SUBSCRIBED))
    d = make_driver(sched, master.url)
    d.start()
    sched.wait("registered")
    assert d.stop() == 4   # DRIVER_STOPPED
    assert master.calls[-1][0] == {"framework_id": {"value": "F1"}, "type": "TEARDOWN"}


def test_subscribe_refused_is_retried_with_backoff(master, caplog):
    sched = Recorder()
    master.answer = 202
    d = make_driver(sched, "127.0.0.1:1")   # nothing listens there
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        time.sleep(0.5)
        d.stop(failover=True)
    assert caplog.text.count("event stream from http://127.0.0.1:1 broke") >= 2
    assert not d.connected
