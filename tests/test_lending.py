"""Idle-only lending (coscheduler.policies.lending, DESIGN.md): a guest gets only what its
host leaves idle, and gives it back first when the host's use rises."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller, ControllerConfig
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.model import InvalidInput, Job
from coscheduler.policies.coalloc import Asax
from coscheduler.policies.lending import (MIN_GUEST_QUOTA, Loan, guest_finish_s,
                                         least_paying_speed, loan, revise)
from coscheduler.recorder import MemoryRecorder


# -- hand-worked cases ---------------------------------------------------------------------------

def test_loan_is_the_idle_share_capped_by_the_guests_demand():
    # 8-core host using 2 cores, margin 10 % (0.8 core): idle 8 - 2 - 0.8 = 5.2 cores.
    # A 4-core guest that usually uses 1 core needs 1 + 0.4 (its margin) = 1.4 cores.
    assert loan(8, 0.0, 2.0, 4, 1.0, 0.1) == pytest.approx(1.4 / 4)
    # A guest that needs all of its 4 cores gets the whole idle share... capped at 4 cores.
    assert loan(8, 0.0, 2.0, 4, None, 0.1) == pytest.approx(1.0)
    # ... and with the host using 4 cores, 3.2 cores: above three quarters of 4, so lent.
    assert loan(8, 0.0, 4.0, 4, None, 0.1) == pytest.approx(3.2 / 4)
    # Host using 5 cores: 2.2 idle, under three quarters of the guest's 4: no loan.
    assert loan(8, 0.0, 5.0, 4, None, 0.1) is None
    # What is already lent counts: 2 cores lent, host uses 2: idle 8 - 2 - 2 - 0.8 = 3.2.
    assert loan(8, 2.0, 2.0, 4, None, 0.1) == pytest.approx(3.2 / 4)
    assert loan(8, 3.0, 2.0, 4, None, 0.1) is None
    # The learner's action caps it too, and a capped loan under the smallest one is none.
    assert loan(8, 0.0, 2.0, 4, None, 0.1, wanted_fraction=0.8) == pytest.approx(0.8)
    assert loan(8, 0.0, 2.0, 4, None, 0.1, wanted_fraction=0.6) is None
    assert loan(8, 0.0, 2.0, 4, None, 0.1, wanted_fraction=0.6, min_share=0.5) == pytest.approx(0.6)


def test_no_measured_use_no_loan():
    assert loan(8, 0.0, None, 4, 1.0, 0.1) is None


@pytest.mark.parametrize("bad", [-0.1, math.nan, 1.0, math.inf, "0.1", True])
def test_a_bad_margin_is_refused_by_name(bad):
    with pytest.raises(InvalidInput, match="margin"):
        loan(8, 0.0, 1.0, 4, 1.0, bad)
    with pytest.raises(InvalidInput, match="margin"):
        revise(8, 1.0, [Loan("g", 4, 0.5, 0.5)], bad)
    with pytest.raises(InvalidInput, match="lend_margin"):
        ControllerConfig(lend_margin=bad)


def test_a_nan_use_is_refused_by_name():
    with pytest.raises(InvalidInput, match="measured use"):
        revise(8, math.nan, [Loan("g", 4, 0.5, 0.5)])


def test_revise_shrinks_holds_and_grows_with_hysteresis():
    g = [Loan("g", 4, 0.5, 0.5)]            # 2 cores lent: host quota 6 cores, margin 0.8
    assert revise(8, 4.0, g) == {}          # headroom 2.0: within the band [0.8, 2.4]: hold
    # Use 5.5: headroom 0.5 < 0.8: shrink to headroom 1.6 -> lend 8 - 5.5 - 1.6 = 0.9 cores.
    assert revise(8, 5.5, g)["g"] == pytest.approx(0.9 / 4)
    small = [Loan("g", 4, 0.9 / 4, 0.5)]
    assert revise(8, 5.0, small) == {}      # headroom 8 - 0.9 - 5 = 2.1: hold (no flap)
    # Use drops to 3: headroom 4.1 > 2.4: grow back, but only to the loan's target (2 cores).
    assert revise(8, 3.0, small)["g"] == pytest.approx(0.5)
    # The host uses all 8 cores: the guest shrinks to its floor, never to 0.
    assert revise(8, 8.0, g)["g"] == pytest.approx(MIN_GUEST_QUOTA)


# -- properties over random host usage traces ------------------------------------------------------

usage_trace = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=40)


@settings(max_examples=200, deadline=None)
@given(host_cores=st.sampled_from([4, 8, 16, 64]),
       guests=st.lists(st.tuples(st.integers(1, 8), st.floats(0.05, 1.0)), min_size=1, max_size=3),
       trace=usage_trace, jump_at=st.integers(0, 39), jump=st.floats(0.0, 1.0),
       margin=st.sampled_from([0.0, 0.05, 0.1, 0.2]), hyst=st.sampled_from([0.0, 0.5, 1.0]))
def test_after_every_revision_the_host_keeps_its_use_plus_the_margin(
        host_cores, guests, trace, jump_at, jump, margin, hyst):
    """Whatever the host's use does, including a jump mid-loan, after each tick's revision
    the host's quota (its cores minus what its guests hold) is at least its measured use
    plus the margin (up to the guests' floors, when the host wants every core)."""
    loans, lent = [], 0.0
    for k, (c, want) in enumerate(guests):
        c = min(c, host_cores)
        q = loan(host_cores, lent, trace[0] * host_cores, c, want * c, margin)
        if q is not None:
            loans.append(Loan(f"g{k}", c, q, q))
            lent += q * c
    trace = [max(u, jump) if i >= jump_at else u for i, u in enumerate(trace)]
    floors = sum(MIN_GUEST_QUOTA * x.cores for x in loans)
    for u in trace:
        used = u * host_cores
        new = revise(host_cores, used, loans, margin, hyst)
        loans = [Loan(x.guest_job, x.cores, new.get(x.guest_job, x.quota), x.target) for x in loans]
        quota = host_cores - sum(x.quota * x.cores for x in loans)
        assert quota >= min(used + margin * host_cores, host_cores - floors) - 1e-9
        assert all(MIN_GUEST_QUOTA - 1e-12 <= x.quota <= x.target + 1e-9 for x in loans)


@settings(max_examples=100, deadline=None)
@given(trace=usage_trace, margin=st.sampled_from([0.05, 0.1]), hyst=st.sampled_from([0.5, 1.0]))
def test_a_steady_use_never_flaps(trace, margin, hyst):
    """Once revised for a use, the same use again changes nothing (hysteresis)."""
    loans = [Loan("g", 4, 0.5, 0.5)]
    for u in trace:
        used = u * 8
        new = revise(8, used, loans, margin, hyst)
        loans = [Loan("g", 4, new.get("g", loans[0].quota), 0.5)]
        assert revise(8, used, loans, margin, hyst) == {}


# -- in the controller: a host whose use jumps mid-loan ---------------------------------------------

def test_a_host_whose_use_jumps_mid_loan_gets_its_cpu_back_from_the_guest_first():
    """A host using 20 % lends to a guest; at 60 s its use jumps to 90 % (it is a new phase
    in the trace: its profile is swapped). At each tick the guest shrinks first, so the host's
    quota is raised to at least the use that tick measured plus the margin."""
    b = VirtualBackend({"n1": 8})
    b.submit(Job("h", 8, 1000.0, "h", tasks=100), Profile(300.0, 0.2, 10.0))
    b.submit(Job("g", 4, 1000.0, "g", tasks=100, submit_time=1.0), Profile(300.0, 0.5, 10.0))
    rec = MemoryRecorder()
    learner = AsaxLearner(LearnerConfig(seed=0, fitted_expert=False))
    ctl = Controller(b, Asax(learner), rec, config=ControllerConfig(lend_margin=0.1))
    ctl.usage.add("g", 50.0, 10.0)            # the guest's class usually uses half its cores
    # The learner's action is irrelevant to the property; force a lending one.
    learner.actions = tuple(0.9 if j else 0.0 for j in range(len(learner.actions)))
    for _ in range(40):
        ctl.step()
        b.advance(1.0)
        if any(h for _, _, h in b.starts):
            break
    assert b.quota_of("g") < 1.0 and b.quota_of("h") < 1.0, "the guest must have been lent CPU"
    lent_before = b.quota_of("g")
    b._runs["h"].data.profile = Profile(300.0, 0.9, 10.0)   # the host's use jumps
    b._dirty = True
    breaches = 0
    for _ in range(20):
        used = b.metrics()["h"].cpu_percent / 100 * 8    # what this tick's pass reads
        ctl.step()
        if b.quota_of("h") * 8 < min(used + 0.8, 8 - MIN_GUEST_QUOTA * 4) - 1e-6:
            breaches += 1
        b.advance(5.0)
    assert b.quota_of("g") < lent_before                     # the guest shrank
    assert b.quota_of("h") * 8 >= 0.9 * 8 * 0.99             # the host got its use back
    assert breaches == 0
    assert any(g == "g" and new < old for _, g, old, new in ctl.revisions)


# -- the smallest loan (a guest may rather wait for a better host) ------------------------------

def test_the_smallest_loan_is_a_share_of_the_guests_need():
    # 8-core host using 5 cores, margin 0.8: 2.2 cores idle for a 4-core guest needing all 4.
    assert loan(8, 0.0, 5.0, 4, None, 0.1) is None          # 0.55 of its need: it waits
    assert loan(8, 0.0, 5.0, 4, None, 0.1, min_share=0.5) == pytest.approx(2.2 / 4)
    assert loan(8, 0.0, 5.0, 4, None, 0.1, min_share=0.6) is None           # it waits
    assert loan(8, 0.0, 4.0, 4, None, 0.1, min_share=0.75) == pytest.approx(3.2 / 4)
    assert loan(8, 0.0, 2.0, 4, None, 0.1, min_share=1.0) == pytest.approx(1.0)
    assert loan(8, 0.0, 4.0, 4, None, 0.1, min_share=1.0) is None


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.01, math.nan, "0.5", True, None])
def test_a_bad_smallest_loan_share_is_refused_by_name(bad):
    with pytest.raises(InvalidInput, match="smallest loan share"):
        loan(8, 0.0, 1.0, 4, 1.0, 0.1, min_share=bad)
    with pytest.raises(InvalidInput, match="lend_min_share"):
        ControllerConfig(lend_min_share=bad)


def _run_lending_all_it_may(b: VirtualBackend, config: ControllerConfig) -> list[str | None]:
    """Run ASA_X on ``b`` until every job ended, its learner forced to lend all it may, the
    guest ``g``'s class known to use all its cores; the host ``g`` started in (None: alone)."""
    learner = AsaxLearner(LearnerConfig(seed=0, fitted_expert=False))
    ctl = Controller(b, Asax(learner), MemoryRecorder(), config=config)
    ctl.usage.add("g", 100.0, 10.0)
    learner.actions = tuple(1.0 if j else 0.0 for j in range(len(learner.actions)))
    for _ in range(400):
        ctl.step()
        if b.idle():
            break
        b.advance(1.0)
    return [h for _, g, h in b.starts if g == "g"]


@pytest.mark.parametrize("min_share, lent", [(0.5, True), (0.9, False)])
def test_a_guest_offered_less_than_the_smallest_loan_waits_for_its_own_cores(min_share, lent):
    """An 8-core host using 50 % leaves 8 - 4 - 0.8 = 3.2 cores idle; a 4-core guest that
    usually uses all its cores needs 4: 0.8 of its need, lent under the half rule, not under
    0.9; the guest then starts on its own cores when the host ends."""
    b = VirtualBackend({"n1": 8})
    b.submit(Job("h", 8, 200.0, "h", tasks=100), Profile(60.0, 0.5, 10.0))
    b.submit(Job("g", 4, 200.0, "g", tasks=100, submit_time=1.0), Profile(30.0, 1.0, 10.0))
    hosted = _run_lending_all_it_may(b, ControllerConfig(lend_min_share=min_share))
    assert hosted == (["h"] if lent else [None])
    assert {o.job_id: o.state for o in b.history} == {"h": "completed", "g": "completed"}


# -- the "sooner" rule: a partial loan only when it ends the guest sooner than waiting ----------

def test_a_partial_loan_pays_when_the_guest_ends_no_later_than_by_waiting():
    # R = 100 s alone, its host ends in 50 s, its own cores free in 25 s: at speed v it
    # ends at 50 + 100 - 50 v (it outlives the host), against 25 + 100 by waiting: v >= 0.5.
    assert least_paying_speed(100.0, 50.0, 25.0) == pytest.approx(0.5)
    assert guest_finish_s(100.0, 50.0, 0.5) == pytest.approx(125.0)
    # Host ends in 200 s, own cores in 50 s: a guest at v >= 2/3 ends before its host, at
    # 100 / v = 150 s = 50 + 100.
    assert least_paying_speed(100.0, 200.0, 50.0) == pytest.approx(2.0 / 3.0)
    assert guest_finish_s(100.0, 200.0, 2.0 / 3.0) == pytest.approx(150.0)
    # Nothing to wait for: only a full loan; never any cores of its own: any loan.
    assert least_paying_speed(100.0, 50.0, 0.0) == 1.0
    assert least_paying_speed(100.0, 50.0, math.inf) == 0.0
    # Its host ends now: it gets the host's cores at once, so any loan.
    assert least_paying_speed(100.0, 0.0, 10.0) == 0.0
    assert least_paying_speed(math.nan, 50.0, 10.0) == 1.0
    assert guest_finish_s(100.0, 50.0, 0.0) == math.inf


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(0.0, 1e5), st.floats(0.0, 1e5), st.floats(0.01, 1.0))
def test_the_least_paying_speed_is_exactly_where_a_loan_stops_costing_time(r, h, w, v):
    pays = least_paying_speed(r, h, w)
    assert 0.0 <= pays <= 1.0
    gap = guest_finish_s(r, h, v) - (w + r)     # < 0: the loan ends the guest sooner
    if abs(gap) <= 1e-9 * (r + h + w) or abs(v - pays) <= 1e-6:
        return   # a tie, within rounding
    assert (gap < 0 or pays == 0.0) == (v > pays)


def test_a_bad_lending_rule_is_refused_by_name():
    with pytest.raises(InvalidInput, match="lend_rule"):
        ControllerConfig(lend_rule="soon")


@pytest.mark.parametrize("rule, other_ends_at, hosted", [
    ("share", 20.0, "h"),     # three quarters of its need: lent, whatever else frees
    ("sooner", 20.0, None),   # its own cores free in ~20 s: at 0.8 speed waiting ends it sooner
    ("sooner", 150.0, "h"),   # ... in ~150 s: the loan ends it sooner
])
def test_the_sooner_rule_lends_only_when_waiting_would_end_the_guest_later(
        rule, other_ends_at, hosted):
    """An 8-core host using half its cores leaves 3.2 cores idle for a 4-core CPU-bound
    guest (0.8 of its need). A 4-core job on the other node frees cores of the guest's own
    at ``other_ends_at`` (its walltime; it ends a little earlier)."""
    b = VirtualBackend({"n1": 8, "n2": 4})
    b.submit(Job("h", 8, 200.0, "h", tasks=100), Profile(150.0, 0.5, 10.0))
    b.submit(Job("o", 4, other_ends_at, "o", tasks=100), Profile(other_ends_at - 5.0, 1.0, 10.0))
    b.submit(Job("g", 4, 100.0, "g", tasks=100, submit_time=1.0), Profile(30.0, 1.0, 10.0))
    config = ControllerConfig(lend_min_share=0.5, lend_rule=rule) if rule == "sooner" \
        else ControllerConfig()
    assert _run_lending_all_it_may(b, config) == [hosted]
    assert {o.job_id: o.state for o in b.history} == {"h": "completed", "o": "completed",
                                                      "g": "completed"}


def test_a_controller_running_for_months_keeps_only_its_latest_quota_revisions(monkeypatch):
    """Loans are revised every tick while a host's use swings; the revisions kept for
    reports are the latest ``REVISIONS_KEPT``, and the count of those let go says how many
    were made in all."""
    monkeypatch.setattr("coscheduler.controller.act.REVISIONS_KEPT", 10)
    b = VirtualBackend({"n1": 8})
    b.submit(Job("h", 8, 1e6, "h", tasks=100), Profile(1e5, 0.2, 10.0))
    b.submit(Job("g", 4, 1e6, "g", tasks=100, submit_time=1.0), Profile(1e5, 0.5, 10.0))
    learner = AsaxLearner(LearnerConfig(seed=0, fitted_expert=False))
    ctl = Controller(b, Asax(learner), MemoryRecorder(), config=ControllerConfig(lend_margin=0.1))
    ctl.usage.add("g", 50.0, 10.0)
    learner.actions = tuple(0.9 if j else 0.0 for j in range(len(learner.actions)))
    for k in range(300):
        if k % 10 == 0 and "h" in b._runs:      # the host's use swings between phases
            b._runs["h"].data.profile = Profile(1e5, 0.9 if k % 20 else 0.2, 10.0)
            b._dirty = True
        ctl.step()
        b.advance(5.0)
    assert ctl.revisions_dropped >= 10
    assert len(ctl.revisions) <= 10
    assert ctl.revisions[-1][0] >= b.now() - 60     # the latest are the ones kept
