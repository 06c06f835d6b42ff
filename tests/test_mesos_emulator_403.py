"""Issue 24: the emulated Mesos master answers 403 Forbidden, not 400, to a call from a
framework it knows but that has no open subscription (its stream closed, it is waiting
out its failover timeout), as Mesos does ("Framework is not subscribed"), and the body
says which framework and how it gets back in. No task is launched: no root needed."""

from __future__ import annotations

import time

import pytest

from testbed.mesos import MesosEmulator
from tests.mesos_raw import RawScheduler

pytestmark = pytest.mark.mesos

# One body per call type a scheduler makes on its own (not just REVIVE): each must be a
# valid Call, so that a 400 could only come from the subscription check being wrong.
CALLS = {
    "ACCEPT": {"offer_ids": [{"value": "an-old-offer"}], "operations": []},
    "DECLINE": {"offer_ids": [{"value": "an-old-offer"}]},
    "KILL": {"task_id": {"value": "some-task"}},
    "RECONCILE": {"tasks": []},
    "SUPPRESS": {},
}


def _wait_disconnected(emu: MesosEmulator, fid: str, timeout: float = 5.0) -> None:
    """The emulator notices a closed stream on its next poll, not at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fw = emu.master.frameworks.get(fid)
        if fw is not None and not fw.connected:
            return
        time.sleep(0.02)
    raise AssertionError(f"framework {fid} still connected after {timeout} s")


@pytest.fixture
def disconnected(emu):
    """A framework the master knows (subscribed once, failover timeout 60 s) whose stream
    is closed: (scheduler, the stream id it last had)."""
    sched = RawScheduler(emu.server.address, failover_timeout=60)
    sched.next_offers()       # fully subscribed: offers came
    old_sid = sched.stream.stream_id
    sched.close()
    _wait_disconnected(emu, sched.fid)
    return sched, old_sid


@pytest.mark.parametrize("ctype", sorted(CALLS))
def test_a_known_framework_without_a_subscription_gets_403_saying_why(emu, disconnected, ctype):
    sched, old_sid = disconnected
    for sid in (old_sid, None):   # its last stream id, or none: the subscription decides first
        status, text = sched.call(ctype, CALLS[ctype], stream_id=sid)
        assert status == 403, (ctype, sid, status, text)
        assert text.startswith("Framework is not subscribed"), text     # Mesos's words
        assert sched.fid in text and "SUBSCRIBE again" in text and "60 s" in text, text
    # A forbidden call changes nothing: the framework is still known and still away.
    fw = emu.master.frameworks[sched.fid]
    assert not fw.connected and fw.sub is None and sched.fid not in emu.master.removed_frameworks


def test_the_same_calls_are_accepted_once_the_framework_subscribes_again(emu, disconnected):
    """The 403 was about the subscription, not the calls: after a failover SUBSCRIBE with
    the same id they are accepted (and the old stream id stays dead: 400)."""
    sched, old_sid = disconnected
    again = RawScheduler(emu.server.address, framework_id=sched.fid, failover_timeout=60)
    try:
        assert again.fid == sched.fid
        for ctype in ("DECLINE", "KILL", "RECONCILE", "SUPPRESS"):
            status, text = again.call(ctype, CALLS[ctype])
            assert status == 202, (ctype, status, text)
        status, text = again.call("REVIVE", {}, stream_id=old_sid)
        assert status == 400 and "stream ID" in text, (status, text)
    finally:
        again.close()


def test_a_framework_that_never_subscribed_still_gets_403_cannot_be_found(emu):
    """Beside the known-but-away case: an id the master never gave out."""
    sched = RawScheduler(emu.server.address)
    try:
        sched.framework_id = {"value": "never-subscribed"}
        status, text = sched.call("DECLINE", CALLS["DECLINE"])
        assert status == 403 and "cannot be found" in text and "never-subscribed" in text
    finally:
        sched.close()
