"""What the master sends is a peer's words: a huge number, a made-up state, an odd
heartbeat interval, a changed framework id, control characters. Each is logged and the
framework goes on; nothing runs on resources that do not exist, no job is lost or started
twice. The backend is driven as in test_mesos_framework.py (a recording fake driver and
the real Controller); the driver against the script master of test_mesos_driver.py."""

from __future__ import annotations

import json
import logging
import time

import pytest

from mesos_framework import messages as msg
from mesos_framework.driver import MesosSchedulerDriver
from mesos_framework.framework import FrameworkConfig, MesosBackend
from mesos_framework import master_calls
from mesos_framework.offers import HeldOffer, cores_by_agent
from test_mesos_driver import Recorder, ScriptMaster, ev, make_driver
from test_mesos_framework import FakeDriver, job, make, offer, status, step

from coscheduler.controller import Controller, ControllerConfig
from coscheduler.policies.coalloc import make_policy
from mesos_framework.recordio import encode

EVIL = "x\nCRITICAL mesos_framework.framework: forged line\x1b[2J\r"


def tasks_of(d):
    return [t for a in d.of("ACCEPT") for t in a["accept"]["operations"][0]["launch"]["task_infos"]]


@pytest.fixture
def master():
    m = ScriptMaster()
    yield m
    m.close()


# -- D1, D2: scalars -----------------------------------------------------------------------

def test_an_integer_too_large_for_a_float_skips_that_resource_not_the_offers_event(caplog):
    b, d, ctl, clock = make()
    b.submit(job("j", cores=2))
    huge = offer("O1", "A1", 10 ** 400)
    huge["resources"].append({"name": "cpus", "type": "SCALAR", "scalar": {"value": 2}, "role": "hpc"})
    with caplog.at_level(logging.WARNING, "mesos_framework.framework"):
        b.resourceOffers(d, [huge, offer("O2", "A2", 0.5, 0)])
    assert sorted(h.offer_id for h in b.held_offers()) == ["O1"]   # O2 useless: declined
    assert [o["value"] for c in d.of("DECLINE") for o in c["decline"]["offer_ids"]] == ["O2"]
    assert b.held_offers()[0].view.cpus == 2.0
    assert "offer O1: resource 'cpus': scalar.value 1000" in caplog.text and "ignored" in caplog.text
    step(b, ctl)
    (t,) = tasks_of(d)
    # the task takes the 2 usable cpus, never a piece of the unreadable one
    assert sorted((r["name"], r["scalar"]["value"], r["role"]) for r in t["resources"]) == \
        [("cpus", 2.0, "hpc"), ("mem", 64.0, "*")]


def test_cpus_beyond_any_machine_are_refused_and_a_pass_still_starts_jobs():
    b, d, ctl, clock = make()
    b.submit(job("j", cores=2))
    b.resourceOffers(d, [offer("O1", "A1", 1e308), offer("O2", "A1", 1e308), offer("O3", "A2", 4)])
    assert any("O1" in p and "above 1e+06" in p for p in b.problems)
    r = step(b, ctl)
    assert r.errors == [] and r.started
    assert [t["agent_id"]["value"] for t in tasks_of(d)] == ["A2"]


def test_cores_per_agent_are_capped_even_when_many_offers_sum_past_the_float_range():
    views = [HeldOffer(msg.OfferView(f"O{i}", "A1", "h", {"cpus": 1e308}), 0.0, 1.0) for i in range(3)]
    assert cores_by_agent(views) == {"A1": 1_000_000}


# -- D3: task states -------------------------------------------------------------------------

@pytest.mark.parametrize("second", ["TASK_BOGUS", None, "TASK_RUNNING", "TASK_FAILED"])
def test_an_unknown_state_or_a_change_after_the_end_leaves_a_finished_task_finished(second):
    b, d, ctl, clock = make()
    b.submit(job("g", cores=4, nodes=2))
    b.resourceOffers(d, [offer("O1", "A1", 2), offer("O2", "A2", 2)])
    step(b, ctl)
    (t0, a0), (t1, a1) = sorted((t["task_id"]["value"], t["agent_id"]["value"]) for t in tasks_of(d))
    b.statusUpdate(d, status(t0, "TASK_FINISHED", a0))
    b.statusUpdate(d, status(t0, second, a0))
    assert [r.job_id for r in b.running()] == ["g"]
    b.statusUpdate(d, status(t1, "TASK_FINISHED", a1))
    assert [(o.job_id, o.state) for o in b.drain_finished()] == [("g", "completed")]
    assert not d.of("KILL")


def test_an_unknown_state_of_a_running_task_changes_nothing():
    b, d, ctl, clock = make()
    b.submit(job("j"))
    b.resourceOffers(d, [offer("O1", "A1", 2)])
    step(b, ctl)
    tid = tasks_of(d)[0]["task_id"]["value"]
    b.statusUpdate(d, status(tid, "TASK_RUNNING"))
    b.statusUpdate(d, status(tid, "TASK_EXPLODED"))
    assert b._runs["j"].tasks[tid].state == "TASK_RUNNING"
    assert any("unknown state 'TASK_EXPLODED'" in p for p in b.problems)


# -- D4: tasks of a previous instance --------------------------------------------------------

GRACE = getattr(FrameworkConfig(), "orphan_grace_s", 120.0)   # (the default)


def _failover(tmp_path):
    cfg = FrameworkConfig(settle_s=0.0, hold_s=10.0, hold_jitter=0.0, state_file=str(tmp_path / "fw.json"))
    b, d, ctl, clock = make(cfg)
    b.submit(job("old"))
    b.resourceOffers(d, [offer("O1", "A1", 2)])
    step(b, ctl)
    tid = tasks_of(d)[0]["task_id"]["value"]
    b2 = MesosBackend(cfg, clock=clock)
    d2 = FakeDriver()
    b2.attach(d2)
    ctl2 = Controller(b2, make_policy("space-sharing"), config=ControllerConfig(give_up_unplaceable=False))
    b2.reregistered(d2, {})
    b2.statusUpdate(d2, status(tid, "TASK_RUNNING", "A1", reason="REASON_RECONCILIATION", uuid=None))
    return cfg, b2, d2, ctl2, clock, tid


def test_a_job_that_comes_after_a_state_write_is_adopted_not_started_beside_its_task(tmp_path):
    cfg, b2, d2, ctl2, clock, tid = _failover(tmp_path)
    b2.submit(job("other"))
    b2.resourceOffers(d2, [offer("O2", "A2", 2)])
    step(b2, ctl2)                  # 'other' starts: the state file is written
    saved = json.loads((tmp_path / "fw.json").read_text())
    assert set(saved["runs"]) == {"old", "other"} and tid in saved["tasks"]
    b2.submit(job("old"))           # its feed brings the old job late
    b2.resourceOffers(d2, [offer("O3", "A1", 2)])
    step(b2, ctl2)
    assert [t["task_id"]["value"] for t in tasks_of(d2)] == ["other~1~0"]
    assert sorted(r.job_id for r in b2.running()) == ["old", "other"]
    assert not d2.of("KILL")
    b2.statusUpdate(d2, status(tid, "TASK_FINISHED", "A1"))
    assert [(o.job_id, o.state) for o in b2.drain_finished()] == [("old", "completed")]


def test_a_task_whose_job_never_comes_is_killed_after_the_grace_and_its_id_not_reused(tmp_path, caplog):
    cfg, b2, d2, ctl2, clock, tid = _failover(tmp_path)
    clock.t += GRACE / 2
    step(b2, ctl2)
    assert not d2.of("KILL")
    clock.t += GRACE / 2 + 1
    with caplog.at_level(logging.WARNING, "mesos_framework.framework"):
        step(b2, ctl2)
    assert [(k["kill"]["task_id"]["value"], k["kill"]["agent_id"]["value"]) for k in d2.of("KILL")] == \
        [(tid, "A1")]
    assert f"task {tid} of the previous framework instance" in caplog.text
    assert b2._orphan_tasks == {}
    assert "old" not in json.loads((tmp_path / "fw.json").read_text())["runs"]
    # the job, coming after all, runs anew under another task id than the killed one
    b2.submit(job("old"))
    b2.resourceOffers(d2, [offer("O3", "A1", 2)])
    step(b2, ctl2)
    assert [t["task_id"]["value"] for t in tasks_of(d2)] == ["old~2~0"]
    step(b2, ctl2)
    assert len(d2.of("KILL")) == 1


@pytest.mark.parametrize("final,outcome,queued", [
    ("TASK_FINISHED", "completed", False),
    ("TASK_LOST", "requeued", True),
    ("TASK_FAILED", "failed", False),
])
@pytest.mark.parametrize("reason", ["REASON_RECONCILIATION", None])
def test_a_saved_task_that_ended_before_its_job_came_is_not_adopted_as_running(
        tmp_path, final, outcome, queued, reason):
    """The terminal update (a reconciliation answer, or an update the agent sent again) was
    dropped as "late", and the job, coming after it, was adopted as running a task that had
    ended: it stayed running for ever (no update for that task comes again)."""
    cfg, b2, d2, ctl2, clock, tid = _failover(tmp_path)
    extra = {"reason": reason} if reason else {}
    b2.statusUpdate(d2, status(tid, final, "A1", **extra))
    b2.submit(job("old"))
    assert [r.job_id for r in b2.running()] == []
    assert [(o.job_id, o.state) for o in b2.drain_finished()] == [("old", outcome)]
    assert [j.job_id for j in b2.queued()] == (["old"] if queued else [])
    step(b2, ctl2)
    assert not d2.of("KILL")          # (an ended task is not killed after the grace either)
    if queued:                        # requeued: it runs again, under a new task id
        b2.resourceOffers(d2, [offer("O3", "A1", 2)])
        step(b2, ctl2)
        assert [t["task_id"]["value"] for t in tasks_of(d2)] == ["old~2~0"]


def test_a_saved_task_that_ended_is_not_killed_when_its_job_never_comes(tmp_path):
    cfg, b2, d2, ctl2, clock, tid = _failover(tmp_path)
    b2.statusUpdate(d2, status(tid, "TASK_FINISHED", "A1"))
    clock.t += GRACE + 1
    step(b2, ctl2)
    assert not d2.of("KILL") and b2._ended_unadopted == {}


def test_made_up_running_tasks_do_not_grow_the_orphan_table_without_bound(caplog):
    ORPHANS_KEPT = getattr(master_calls, "ORPHANS_KEPT", 1000)   # (1000 before the bound came)
    b, d, ctl, clock = make()
    with caplog.at_level(logging.WARNING, "mesos_framework.framework"):
        for i in range(ORPHANS_KEPT + 3000):
            b.statusUpdate(d, status(f"made-up-{i}~1~0", "TASK_RUNNING", reason="REASON_RECONCILIATION"))
    assert len(b._orphan_tasks) == ORPHANS_KEPT
    assert caplog.text.count("unknown tasks reported running after a failover") == 1


# -- D5, D6, D7: SUBSCRIBED ------------------------------------------------------------------

def _subscribed(fid="F1", **fields) -> dict:
    return {"type": "SUBSCRIBED", "subscribed": {"framework_id": {"value": fid}, **fields}}


def test_a_heartbeat_interval_too_large_for_a_float_means_the_default_and_registers(master, caplog):
    sub = b'{"type":"SUBSCRIBED","subscribed":{"framework_id":{"value":"F1"},' \
          b'"heartbeat_interval_seconds":1' + b"0" * 400 + b"}}"
    master.stream(encode(sub), ev({"type": "HEARTBEAT"}))
    sched = Recorder()
    d = make_driver(sched, master.url)
    with caplog.at_level(logging.WARNING, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("registered", timeout=5)
        finally:
            d.stop(failover=True)
    assert d.bad_events == 0 and d.heartbeat_interval_s is None
    assert "heartbeat_interval_seconds 1000" in caplog.text and "the default" in caplog.text


def test_a_tiny_heartbeat_interval_is_raised_to_the_floor_not_a_reconnect_storm(master, caplog):
    master.stream(ev(_subscribed(heartbeat_interval_seconds=1e-9)), ev({"type": "HEARTBEAT"}))
    sched = Recorder()
    d = make_driver(sched, master.url)
    d.min_heartbeat_s = 1.0    # the production floor (make_driver lowers it for 0.2 s heartbeats)
    with caplog.at_level(logging.WARNING, "mesos_framework.driver"):
        d.start()
        try:
            sched.wait("registered", timeout=5)
            time.sleep(1.5)
            assert len(master.subscribes) == 1 and d.disconnections == 0
            assert d.heartbeat_interval_s == 1.0
        finally:
            d.stop(failover=True)
    assert caplog.text.count("heartbeat_interval_seconds 1e-09") == 1


@pytest.mark.parametrize("value, expected", [(15, 15.0), (1e300, 3600.0), (0.001, 1.0), (-1, None),
                                             (True, None), ("15", None), (float("nan"), None)])
def test_the_heartbeat_interval_is_clamped_or_the_default(value, expected):
    d = MesosSchedulerDriver(object(), {"user": "u", "name": "n"}, "http://127.0.0.1:9")
    assert d._heartbeat_interval(value) == expected


def test_a_subscribed_with_another_framework_id_is_a_new_registration(master, tmp_path, caplog):
    master.stream(ev(_subscribed("F1", heartbeat_interval_seconds=5)), None)
    master.stream(ev(_subscribed("F2", heartbeat_interval_seconds=5)),
                  ev({"type": "OFFERS", "offers": {"offers": [offer("O1", "A1", 2)]}}))
    state = tmp_path / "fw.json"
    b = MesosBackend(FrameworkConfig(settle_s=0.0, hold_s=0.2, hold_jitter=0.0, state_file=str(state)))
    d = make_driver(b, master.url)
    b.attach(d)
    with caplog.at_level(logging.ERROR, "mesos_framework.driver"):
        d.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (d.subscriptions == 2 and b.held_offers()):
                time.sleep(0.05)
            b.before_pass()
            b.after_pass()
            time.sleep(0.3)
            b.before_pass()
            b.after_pass()     # nothing queued: the offer is declined, with the new id
        finally:
            d.stop(failover=True)
    assert d.framework_id == "F2" and b._saved["framework_id"] == "F2"
    assert json.loads(state.read_text())["framework_id"] == "F2"
    assert "framework id F2, not F1" in caplog.text
    after = [c for c, _ in master.calls][-1]
    assert after["type"] in ("DECLINE", "SUPPRESS") and after["framework_id"] == {"value": "F2"}


# -- D8: node names --------------------------------------------------------------------------

def test_a_fallback_agent_name_never_takes_another_agents_name():
    b, d, ctl, clock = make()
    b.submit(job("j", cores=4))
    b.resourceOffers(d, [offer("O1", "agent2", 4), offer("O2", "S1 x", 1)])
    names = [n.name for n in b.nodes()]
    assert len(names) == len(set(names)) == 2
    step(b, ctl)
    assert [t["agent_id"]["value"] for t in tasks_of(d)] == ["agent2"]


# -- D9: control characters ------------------------------------------------------------------

class _Answer:
    def __init__(self, status, body):
        self.status, self.data, self.headers = status, body, {}
        self.chunked = False

    def read(self, n=-1):
        return self.data

    def close(self):
        pass


class _Http:
    def __init__(self, status, body):
        self.answer = _Answer(status, body)

    def request(self, *a, **kw):
        return self.answer


def test_control_characters_from_the_master_never_reach_a_log_line_or_a_reason():
    seen: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record)

    root = logging.getLogger()
    handler, level = Catch(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        b, d, ctl, clock = make()
        b.resourceOffers(d, [offer(EVIL, "A1", -1)])
        b.submit(job("j"))
        b.resourceOffers(d, [offer("O3", "A1", 2)])
        step(b, ctl)
        t = tasks_of(d)[0]["task_id"]["value"]
        b.statusUpdate(d, status(t, "TASK_LOST", "A1", message=EVIL, reason=EVIL))
        b.statusUpdate(d, status(EVIL, "TASK_RUNNING", "A1"))
        b.offerRescinded(d, {"value": "O3"})
        b.slaveLost(d, {"value": EVIL})
        b.error(d, EVIL)
        b.registered(d, {"value": EVIL}, {})
        drv = MesosSchedulerDriver(object(), {"user": "u", "name": "n"}, "http://127.0.0.1:9")
        drv._dispatch("ERROR", {"type": "ERROR", "error": {"message": EVIL}}, "s")
        drv.stream_id = "s"
        drv._http = _Http(403, EVIL.encode())
        with pytest.raises(Exception) as exc:
            drv._post({"type": "REVIVE"})
        assert "\n" not in str(exc.value) and "\x1b" not in str(exc.value)
        drv._stop.clear()
        drv._http = _Http(500, EVIL.encode())
        drv._subscribe_once()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    lines = [r.getMessage() for r in seen]
    assert any("forged line" in line for line in lines)
    assert [line for line in lines if any(c in line for c in "\n\r\x1b")] == []
    reasons = [o.reason for o in b.history]
    assert reasons and not any(c in r for r in reasons for c in "\n\r\x1b")
    assert "\n" not in (b.fatal or "")


def test_printable_escapes_and_bounds():
    assert msg.printable("a\nb\x1b\u2028") == "a\\nb\\x1b\\u2028"
    assert msg.printable("y" * 1000, 10) == "yyyyyyyyyy... (1000 characters)"


# -- D10: many offers on one agent -----------------------------------------------------------

def test_a_pass_over_many_offers_of_one_agent_reads_each_offer_a_bounded_number_of_times(monkeypatch):
    """Each start walked (and sorted) every offer of the agent, used-up remainders included:
    a pass was quadratic in the offers (8,000: 12 s). Counted, not timed: the reads of an
    offer's cpus and mem in one pass."""
    n = 1000
    b, d, ctl, clock = make()
    for i in range(n // 2):
        b.submit(job(f"j{i}", cores=1))
    b.resourceOffers(d, [offer(f"O{i}", "A1", 1, 64) for i in range(n)])
    reads = [0]

    def counted(name):
        def get(self):
            reads[0] += 1
            return self.scalars.get(name, 0.0)
        return property(get)

    monkeypatch.setattr(msg.OfferView, "cpus", counted("cpus"))
    monkeypatch.setattr(msg.OfferView, "mem", counted("mem"))
    ctl.step()
    assert len(b.running()) == n // 2
    assert reads[0] < 20 * n, reads[0]
    # the used-up remainders left the agent's cpus index; their memory is still offered
    assert len(b._pool.offering("A1", "cpus")) == n // 2
    assert len(b._pool.offering("A1", "mem")) == n
    b.after_pass()
    assert len(tasks_of(d)) == n // 2


# -- one crafted OFFERS event: a few log lines, not one per byte -----------------------------

def _offers_event(payload) -> bytes:
    return json.dumps({"type": "OFFERS", "offers": {"offers": payload}}).encode()


def test_an_offers_event_whose_offers_is_not_a_list_is_one_bad_event(caplog):
    # Regression: list() of a 400,000-character string read each character as an offer,
    # and each was logged ("offer ignored: an offer must be an object").
    b, d, ctl, clock = make()
    b.submit(job("j", cores=2))
    drv = MesosSchedulerDriver(b, {"user": "root", "name": "test"}, "http://127.0.0.1:1")
    with caplog.at_level(logging.WARNING):
        drv._event(_offers_event("a" * 400_000), "sid")
        drv._event(_offers_event({"O1": offer("O1", "A1", 4)}), "sid")
    assert len(caplog.records) <= 20, len(caplog.records)
    assert drv.bad_events == 2 and "offers.offers must be a list, got str" in caplog.text
    assert b.counters["offers"] == 0 and b.held_offers() == []
    drv._event(_offers_event([offer("O2", "A2", 4)]), "sid")   # the framework goes on
    step(b, ctl)
    assert [t["agent_id"]["value"] for t in tasks_of(d)] == ["A2"]


def test_offers_with_many_bad_resources_or_many_bad_offers_log_a_bounded_number_of_lines(caplog):
    b, d, ctl, clock = make()
    b.submit(job("j", cores=2))
    drv = MesosSchedulerDriver(b, {"user": "root", "name": "test"}, "http://127.0.0.1:1")
    bad_resources = offer("O1", "A1", 4)
    bad_resources["resources"] = [0] * 400_000 + bad_resources["resources"]
    with caplog.at_level(logging.WARNING):
        drv._event(_offers_event([bad_resources]), "sid")
        one_offer = len(caplog.records)
        drv._event(_offers_event([0] * 100_000 + [offer("O2", "A2", 4)]), "sid")
    assert one_offer <= 20 and len(caplog.records) - one_offer <= 20, (one_offer, len(caplog.records))
    assert "and 399992 more problems (not listed)" in caplog.text
    assert "more problems in this OFFERS event (not logged)" in caplog.text
    assert len(b.problems) <= 40 and drv.bad_events == 0
    # The good resources of the first offer and the good offer of the second are kept.
    assert sorted(h.offer_id for h in b.held_offers()) == ["O1", "O2"]
    assert b.held_offers()[0].view.cpus == 4.0
    step(b, ctl)
    assert len(tasks_of(d)) == 1


def test_made_up_event_types_share_one_counter(caplog):
    # Regression: driver.events kept a key per distinct type the master sent, without bound
    # (200,000 made-up types: 200,000 keys).
    drv = MesosSchedulerDriver(object(), {"user": "root", "name": "test"}, "http://127.0.0.1:1")
    with caplog.at_level(logging.CRITICAL, "mesos_framework.driver"):
        for i in range(1000):
            drv._event(json.dumps({"type": f"T{i:060d}"}).encode(), "sid")
        drv._event(b'{"type": "HEARTBEAT"}', "sid")
    assert drv.events == {"unknown": 1000, "HEARTBEAT": 1}
