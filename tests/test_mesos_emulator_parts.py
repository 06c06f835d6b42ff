"""The emulated Mesos master's pure pieces: Call validation, resource arithmetic, filters'
defaults, content negotiation, RecordIO framing (testbed/mesos/)."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, strategies as st

from testbed.mesos.calls import BadCall, parse_call, refuse_seconds
from testbed.mesos.resources import (Resources, ResourceError, parse_port_range,
                                     parse_resources, scalar_milli)
from testbed.mesos.server import accepts_json
from testbed.mesos.stream import Subscription, chunks, record

pytestmark = pytest.mark.mesos

FID = {"value": "f1"}


def body(obj) -> bytes:
    return json.dumps(obj).encode()


def test_a_valid_subscribe_and_accept_parse():
    call = parse_call(body({"type": "SUBSCRIBE", "subscribe": {
        "framework_info": {"user": "u", "name": "n"}}}))
    assert call["type"] == "SUBSCRIBE"
    call = parse_call(body({"type": "ACCEPT", "framework_id": FID, "accept": {
        "offer_ids": [{"value": "o1"}], "operations": [{"type": "LAUNCH", "launch": {"task_infos": [
            {"name": "t", "task_id": {"value": "t"}, "agent_id": {"value": "a"},
             "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}}],
             "command": {"value": "true"}, "unknown_field_is_ignored": 1}]}}],
        "filters": {"refuse_seconds": 1.5}}}))
    assert call["accept"]["offer_ids"][0]["value"] == "o1"


@pytest.mark.parametrize("payload, fragment", [
    (b"{not json", "Failed to parse body into JSON"),
    (b"NaN", "Failed to parse body into JSON"),
    (b"[1]", "expected a JSON object"),
    (body({"framework_id": FID}), "Expecting 'type' to be present"),
    (body({"type": "FLY", "framework_id": FID}), "'type' has no enum value \"FLY\""),
    (body({"type": "ACCEPT", "framework_id": FID}), "Expecting 'accept' to be present"),
    (body({"type": "DECLINE", "decline": {"offer_ids": []}}), "Expecting 'framework_id'"),
    (body({"type": "DECLINE", "framework_id": FID, "decline": {"offer_ids": {"value": "o"}}}),
     "'decline.offer_ids' must be a JSON array"),
    (body({"type": "DECLINE", "framework_id": FID, "decline": {"offer_ids": [{"v": 1}]}}),
     "required field 'decline.offer_ids[0].value' is missing"),
    (body({"type": "DECLINE", "framework_id": FID, "decline": {"filters": {"refuse_seconds": "5"}}}),
     "'decline.filters.refuse_seconds' must be a number"),
    (body({"type": "SUBSCRIBE", "subscribe": {"framework_info": {"user": "u"}}}),
     "'subscribe.framework_info.name' is missing"),
    (body({"type": "SUBSCRIBE", "framework_id": FID, "subscribe": {
        "framework_info": {"user": "u", "name": "n"}}}), "'framework_id' differs"),
    (body({"type": "KILL", "framework_id": FID, "kill": {}}), "'kill.task_id' is missing"),
    (body({"type": "ACKNOWLEDGE", "framework_id": FID, "acknowledge": {
        "agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "!!"}}), "not valid Base64"),
    (body({"type": "ACKNOWLEDGE", "framework_id": FID, "acknowledge": {
        "agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": "AAAA"}}), "not a UUID"),
    (body({"type": "ACCEPT", "framework_id": FID, "accept": {"operations": [{"type": "LAUNCH", "launch": {
        "task_infos": [{"name": "t", "task_id": {"value": "t"}}]}}]}}),
     "'accept.operations[0].launch.task_infos[0].agent_id' is missing"),
])
def test_bad_calls_are_refused_naming_the_field(payload, fragment):
    with pytest.raises(BadCall) as e:
        parse_call(payload)
    assert fragment in str(e.value)


def test_the_documentations_spellings_of_revive_and_request_are_read():
    call = parse_call(body({"type": "REVIVE", "framework_id": FID, "revive": {"role": "r"}}))
    assert call["revive"]["role"] == "r"
    call = parse_call(body({"type": "REQUEST", "framework_id": FID, "requests": [{}]}))
    assert call["request"]["requests"] == [{}]
    assert parse_call(body({"type": "SUPPRESS", "framework_id": FID}))["suppress"] == {}


def test_refuse_seconds_default_negative_and_cap_follow_mesos_proto():
    assert refuse_seconds(None) == 5.0
    assert refuse_seconds({}) == 5.0
    assert refuse_seconds({"refuse_seconds": -1}) == 5.0
    assert refuse_seconds({"refuse_seconds": 0}) == 0.0
    assert refuse_seconds({"refuse_seconds": 1e12}) == 31536000.0
    assert refuse_seconds({"refuse_seconds": 2.5}) == 2.5


def test_resources_parse_and_refuse_what_the_emulator_cannot_offer():
    r = parse_resources([{"name": "cpus", "type": "SCALAR", "scalar": {"value": 1.0004}},
                         {"name": "ports", "type": "RANGES", "ranges": {"range": [
                             {"begin": 31000, "end": 31004}, {"begin": 31005, "end": 31009}]}}], "t")
    assert r.scalars["cpus"] == 1000 and r.ranges["ports"] == [(31000, 31009)]
    for bad, why in [
        ({"name": "cpus", "type": "SCALAR", "scalar": {"value": -1}}, ">= 0"),
        ({"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "role": "prod"}, "reserved"),
        ({"name": "cpus", "type": "SCALAR", "scalar": {"value": 1}, "revocable": {}}, "revocable"),
        ({"name": "x", "type": "SET", "set": {"item": ["a"]}}, "SET"),
        ({"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 5, "end": 1}]}}, "begin <= end"),
        ({"name": "cpus", "type": "SCALAR"}, "'scalar'"),
    ]:
        with pytest.raises(ResourceError, match=why):
            parse_resources([bad], "task t")
    assert parse_port_range("31000-32000") == (31000, 32000)
    with pytest.raises(ResourceError):
        parse_port_range("32000-31000")


ranges = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 30)).map(lambda t: (t[0], t[0] + t[1])),
                  max_size=5)


@given(st.dictionaries(st.sampled_from(["cpus", "mem", "disk"]), st.integers(0, 10**6)),
       st.dictionaries(st.sampled_from(["cpus", "mem", "disk"]), st.integers(0, 10**6)),
       ranges, ranges)
def test_resource_arithmetic_is_exact(a_s, b_s, a_r, b_r):
    a = Resources(dict(a_s), {"ports": a_r} if a_r else {})
    a = a + Resources()   # normalise ranges
    # ports are a set: b's are kept apart from a's (one port cannot be held twice)
    b_r = [(x + 1000, y + 1000) for x, y in b_r]
    b = Resources(dict(b_s), {"ports": b_r} if b_r else {}) + Resources()
    total = a + b
    assert total.contains(a) and total.contains(b)
    left = total - b
    assert left.contains(a)
    assert all(left.scalars.get(k, 0) == a.scalars.get(k, 0) for k in set(a.scalars) | set(left.scalars))
    if b.contains(a) and a.contains(b):
        assert (a - b).is_empty()


def test_scalars_keep_three_decimals():
    assert scalar_milli(0.1) + scalar_milli(0.2) == scalar_milli(0.3)
    r = Resources({"cpus": scalar_milli(0.1)}) + Resources({"cpus": scalar_milli(0.2)})
    assert r.contains(Resources({"cpus": scalar_milli(0.3)}))


def test_accept_header_negotiation():
    assert accepts_json(None) and accepts_json("") and accepts_json("*/*")
    assert accepts_json("application/json") and accepts_json("application/x-protobuf, application/json;q=0.5")
    assert not accepts_json("application/x-protobuf")
    assert not accepts_json("application/json;q=0")


def test_recordio_framing_and_chunking():
    data = b'{"type":"HEARTBEAT"}'
    assert record(data) == b"20\n" + data
    assert b"".join(chunks(record(data), "split")) == record(data)
    assert len(chunks(record(data), "bytes")) == len(record(data))
    sub = Subscription("s", 1.0)
    sub.pause()
    sub.send({"type": "HEARTBEAT"})
    assert sub.get(0.01) is None      # held back while paused
    sub.resume()
    item = sub.get(0.1)
    assert item is not None and item.data == b'{"type":"HEARTBEAT"}'
    sub.close()
    assert sub.get(0.1).kind == "close"
    sub.send({"type": "HEARTBEAT"})   # nothing after the end
    assert sub.get(0.01) is None


def test_base64_uuid_round_trip_matches_the_acknowledge_rule():
    import uuid
    u = base64.b64encode(uuid.uuid4().bytes).decode()
    call = parse_call(body({"type": "ACKNOWLEDGE", "framework_id": FID, "acknowledge": {
        "agent_id": {"value": "a"}, "task_id": {"value": "t"}, "uuid": u}}))
    assert call["acknowledge"]["uuid"] == u


def test_plain_process_isolation_runs_tasks_without_cgroups(tmp_path):
    from testbed.mesos import AgentSpec, MasterConfig, MesosEmulator
    from tests.mesos_raw import RawScheduler, task_info

    cfg = MasterConfig(heartbeat_interval_s=0.5, allocation_interval_s=0.1, status_update_retry_s=0.5)
    with MesosEmulator([AgentSpec(cpus=1, mem_mb=128)], listen=("127.0.0.1", 0), isolation="none",
                       workdir=tmp_path / "w", config=cfg) as emu:
        assert emu.ready_info()["cgroup"] is None
        sched = RawScheduler(emu.server.address)
        try:
            offer = sched.next_offers()[0]
            assert all(a["name"] != "cosched_agent_url" for a in offer["attributes"])
            sched.launch(offer, [task_info("plain", offer["agent_id"], "echo $MESOS_TASK_ID")])
            sched.update_for("plain", "TASK_FINISHED")
            out = next((tmp_path / "w").rglob("plain/stdout")).read_text()
            assert out.strip() == "plain"
        finally:
            sched.close()


def _res(cpus: float, mem: float) -> Resources:
    return Resources({"cpus": scalar_milli(cpus), "mem": scalar_milli(mem)})


def test_allocation_offers_each_agent_whole_to_the_framework_with_the_smallest_share():
    from testbed.mesos.allocation import Candidate, plan_offers

    total = _res(8, 8192)
    agents = [("a1", _res(4, 4096)), ("a2", _res(4, 4096))]
    rich = Candidate("f-rich", ("*",), frozenset(), _res(2, 0))
    poor = Candidate("f-poor", ("*",), frozenset(), _res(0, 0))
    grants = plan_offers(agents, [rich, poor], total)
    # The poorer framework gets the first agent; then, holding 4 cpus, it is richer.
    assert [(g.framework_id, g.agent_id) for g in grants] == [("f-poor", "a1"), ("f-rich", "a2")]
    # Too little to offer: nothing.
    assert plan_offers([("a1", _res(0.005, 16))], [poor], total) == []


def test_allocation_filters_refuse_a_subset_only_and_suppression_and_roles_apply():
    from testbed.mesos.allocation import Candidate, Refusal, plan_offers

    total = _res(4, 4096)
    refused = Refusal("a1", "*", _res(1, 512))
    fw = Candidate("f", ("*",), frozenset(), _res(0, 0), (refused,))
    assert plan_offers([("a1", _res(1, 512))], [fw], total) == []          # same resources: refused
    assert plan_offers([("a1", _res(0.5, 256))], [fw], total) == []        # a subset: refused
    assert len(plan_offers([("a1", _res(2, 512))], [fw], total)) == 1      # more cpus free: offered
    assert len(plan_offers([("a2", _res(1, 512))], [fw], total)) == 1      # another agent: offered
    sup = Candidate("f", ("*",), frozenset({"*"}), _res(0, 0))
    assert plan_offers([("a1", _res(1, 512))], [sup], total) == []
    multi = Candidate("f", ("gold", "silver"), frozenset({"gold"}), _res(0, 0),
                      (Refusal("a1", "silver", _res(4, 4096)),))
    assert plan_offers([("a1", _res(1, 512))], [multi], total) == []
    multi = Candidate("f", ("gold", "silver"), frozenset(), _res(0, 0),
                      (Refusal("a1", "gold", _res(4, 4096)),))
    assert [g.role for g in plan_offers([("a1", _res(1, 512))], [multi], total)] == ["silver"]
