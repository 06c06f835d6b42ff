"""SqliteStore as a Recorder: every record kind round-trips, a reopened store hands back
the learner it saved, combined writes are atomic, and bad records are refused."""

from __future__ import annotations

import logging
import math
import re
import sqlite3

import pytest

from coscheduler.learner import AsaxLearner, ClassState, HostState, LearnerConfig, RoundClosed
from coscheduler.model import InvalidInput
from coscheduler.recorder import OutcomeRecord
from coscheduler.store import SqliteStore, StoreError

from store_workload import CONFIG, drive, replay, restart

STATE = HostState("montage/mProject", 30.0, 40.0, "parallel", 0.4, 1.3)


@pytest.fixture
def store(tmp_path):
    with SqliteStore(tmp_path / "state.db", create=True, synchronous="NORMAL") as s:
        yield s


def learner(**kw) -> AsaxLearner:
    return AsaxLearner(LearnerConfig(fitted_expert=False, **kw))


def test_decision_round_trips_exactly(store):
    lrn = learner()
    d = lrn.decide(HostState("a/b", 12.5, 99.0, "sequential", 0.123456789, None), "h1", "g1", 1234.5)
    store.record_decision(d, 0.7, 0.3)
    loaded = store.load()
    assert loaded.pending == [d]          # frozen dataclass equality: every field, floats exact
    assert loaded.next_decision_id == d.decision_id + 1
    assert loaded.classes == [] and loaded.observed == []


def test_infinite_happiness_is_kept_as_very_happy(store):
    d = learner().decide(HostState("a/b", 10, 10, "parallel", 0.5, math.inf), "h", "g", 0.0)
    store.record_decision(d, 1.0, 0.0)
    assert store.load().pending[0].state.happiness == 1e9


def test_outcome_class_round_and_alone_runtime_round_trip(store):
    lrn = learner(risk_threshold=0.01)
    d = lrn.decide(STATE, "h1", "g1", 10.0)
    store.record_decision(d, 1 - d.action_fraction, d.action_fraction)
    closed = lrn.observe(d.decision_id, 0.8, 20.0)
    assert closed is not None
    out = OutcomeRecord(d.decision_id, 20.0, 0.8, "walltime", host_runtime_s=110.0,
                        host_walltime_s=100.0, guest_runtime_s=30.0, note="overran by 10 s")
    store.record_outcome(out)
    store.record_round(closed)
    store.save_class(lrn.class_state("montage/mProject"))
    store.record_alone_runtime("montage/mProject", 100.0)
    store.record_alone_runtime("montage/mProject", 300.0)
    store.record_alone_runtime("montage/mProject", 120.0)

    loaded = store.load()
    assert [c.to_dict() for c in loaded.classes] == [lrn.class_state("montage/mProject").to_dict()]
    assert loaded.pending == []
    assert loaded.observed == [(d, 0.8)]
    assert store.alone_runtime("montage/mProject") == 120.0   # the median
    assert store.alone_runtime("never/seen") is None
    from coscheduler.store import queries
    assert queries.weight_history(store, "montage/mProject") == [closed]
    detail = queries.decision_detail(store, d.decision_id)
    assert detail.outcome == out and detail.host_quota == pytest.approx(1 - d.action_fraction)


def test_reopen_after_close_rebuilds_the_same_learner(tmp_path):
    path = tmp_path / "state.db"
    with SqliteStore(path, create=True) as s:
        commits = drive(AsaxLearner(CONFIG), s, max_commits=150)
    assert commits == 150
    with SqliteStore(path) as s:                  # no create: it exists
        loaded = s.load()
        assert s.integrity_problems() == []
    uninterrupted, mem = replay(150)
    assert [c.to_dict() for c in loaded.classes] == [c.to_dict() for c in sorted(
        mem.classes.values(), key=lambda c: c.job_class)]
    assert [d.decision_id for d in loaded.pending] == sorted(uninterrupted.pending)
    assert loaded.next_decision_id == uninterrupted.next_decision_id
    mem_loaded = mem.load()
    assert sorted((d.decision_id, loss) for d, loss in loaded.observed) == \
        sorted((d.decision_id, loss) for d, loss in mem_loaded.observed)
    # The restarted learner decides exactly as the one that never stopped.
    again = restart(loaded)
    for k, job_class in enumerate(("montage/mProject", "blast/blastall")):
        probe = HostState(job_class, 20.0 + k, 30.0, "parallel", 0.5, 1.5)
        a = again.decide(probe, "hx", "gx", 2e9)
        b = uninterrupted.decide(probe, "hx", "gx", 2e9)
        assert a == b


def test_observed_keeps_observation_order_and_skips_cancelled(store):
    lrn = learner()
    ds = [lrn.decide(STATE, f"h{i}", f"g{i}", float(i)) for i in range(4)]
    for d in ds:
        store.record_decision(d, 0.5, 0.5)
    # Observed out of id order: 3, then 1; decision 2 cancelled; decision 4 still pending.
    store.record_outcome(OutcomeRecord(3, 5.0, 0.3, "walltime"))
    store.record_outcome(OutcomeRecord(1, 6.0, 0.1, "walltime"))
    store.record_outcome(OutcomeRecord(2, 7.0, 0.0, "cancelled"))
    loaded = store.load()
    assert [(d.decision_id, loss) for d, loss in loaded.observed] == [(3, 0.3), (1, 0.1)]
    assert [d.decision_id for d in loaded.pending] == [4]
    assert [d.decision_id for d, _ in store.load(observed_per_class=1).observed] == [1]


def test_record_update_is_atomic_with_the_class_state(store):
    lrn = learner(risk_threshold=0.01)
    d = lrn.decide(STATE, "h", "g", 0.0)
    store.record_decision(d, 0.5, 0.5)
    closed = lrn.observe(d.decision_id, 1.0, 1.0)
    st = lrn.class_state(STATE.job_class)
    store.record_update(closed, st)
    assert store.load().classes[0].rounds == 1
    wrong = RoundClosed(closed.job_class, closed.round + 1, 1.0, 1.0, closed.risk,
                        closed.weights_before, closed.weights_after)
    with pytest.raises(InvalidInput, match="does not match"):
        store.record_update(wrong, st)


def test_record_observation_rolls_back_entirely_on_a_bad_part(store):
    lrn = learner()
    d = lrn.decide(STATE, "h", "g", 0.0)
    store.record_decision(d, 0.5, 0.5)
    other = ClassState.fresh("other/class", lrn.expert_names)
    with pytest.raises(InvalidInput, match="is of class montage/mProject"):
        store.record_observation(OutcomeRecord(d.decision_id, 1.0, 0.5, "walltime"), other)
    loaded = store.load()
    assert [p.decision_id for p in loaded.pending] == [d.decision_id]   # outcome not kept
    assert loaded.classes == []                                          # class not saved


def test_record_decision_with_class_state_saves_both(store):
    lrn = learner()
    d = lrn.decide(STATE, "h", "g", 0.0)
    store.record_decision(d, 0.5, 0.5, class_state=lrn.class_state(STATE.job_class))
    assert store.load().classes[0].decisions == 1


@pytest.mark.parametrize("outcome, message", [
    (OutcomeRecord(99, 1.0, 0.5, "walltime"), "unknown decision id 99"),
    (OutcomeRecord(1, 1.0, float("nan"), "walltime"), "loss must be finite"),
    (OutcomeRecord(1, 1.0, 1.5, "walltime"), "loss must be <= 1"),
    (OutcomeRecord(1, -1.0, 0.5, "walltime"), "time must be >= 0"),
    (OutcomeRecord(1, 1.0, 0.5, "walltime", host_runtime_s=float("inf")), "host runtime must be finite"),
])
def test_bad_outcomes_are_refused_by_name(store, outcome, message):
    store.record_decision(learner().decide(STATE, "h", "g", 0.0), 0.5, 0.5)
    with pytest.raises(InvalidInput, match=message):
        store.record_outcome(outcome)
    assert store.load().observed == []


def test_duplicates_are_refused(store):
    d = learner().decide(STATE, "h", "g", 0.0)
    store.record_decision(d, 0.5, 0.5)
    with pytest.raises(InvalidInput, match="already recorded"):
        store.record_decision(d, 0.5, 0.5)
    store.record_outcome(OutcomeRecord(1, 1.0, 0.5, "walltime"))
    with pytest.raises(InvalidInput, match="already has an outcome"):
        store.record_outcome(OutcomeRecord(1, 2.0, 0.1, "walltime"))


@pytest.mark.parametrize("host_quota, guest_quota", [(1.5, 0.0), (0.5, -0.1), (float("nan"), 0.5)])
def test_quotas_must_be_fractions(store, host_quota, guest_quota):
    with pytest.raises(InvalidInput, match="quota"):
        store.record_decision(learner().decide(STATE, "h", "g", 0.0), host_quota, guest_quota)


def test_invalid_class_state_and_runtime_are_refused(store):
    st = ClassState.fresh("a/b", ("x", "y"))
    st.weights = [0.9, 0.9]
    with pytest.raises(InvalidInput, match="not a distribution"):
        store.save_class(st)
    with pytest.raises(InvalidInput, match="must be > 0"):
        store.record_alone_runtime("a/b", 0.0)
    with pytest.raises(InvalidInput, match="not valid"):
        store.record_alone_runtime("../etc", 10.0)
    assert store.load().classes == []


def test_a_tampered_row_is_reported_not_dropped(tmp_path, caplog):
    """Reported with a WARNING and left out of the learner, not deleted from the file; the
    controller still starts (tests/test_controller_restart_damaged_rows.py)."""
    path = tmp_path / "state.db"
    with SqliteStore(path, create=True) as s:
        s.record_decision(learner().decide(STATE, "h", "g", 0.0), 0.5, 0.5)
    con = sqlite3.connect(path)
    con.execute("UPDATE decisions SET state = '{not json' WHERE id = 1")
    con.commit()
    con.close()
    with SqliteStore(path) as s, caplog.at_level(logging.WARNING, logger="coscheduler.store"):
        loaded = s.load()
    assert loaded.pending == [] and loaded.next_decision_id == 2
    assert re.search(rf"{path}: table decisions, row id 1 is damaged .*decision 1: state", caplog.text)
    con = sqlite3.connect(path)
    assert con.execute("SELECT state FROM decisions WHERE id = 1").fetchone() == ("{not json",)
    con.close()


def test_readonly_store_refuses_writes(tmp_path):
    path = tmp_path / "state.db"
    SqliteStore(path, create=True).close()
    with SqliteStore(path, readonly=True) as s:
        with pytest.raises(StoreError, match="read-only"):
            s.record_alone_runtime("a/b", 1.0)
        assert s.load().classes == []


def test_a_reader_sees_commits_while_the_writer_stays_open(tmp_path):
    path = tmp_path / "state.db"
    lrn = learner()
    with SqliteStore(path, create=True) as writer:
        writer.record_decision(lrn.decide(STATE, "h1", "g1", 0.0), 0.5, 0.5)
        with SqliteStore(path, readonly=True) as reader:
            assert len(reader.load().pending) == 1
            writer.record_decision(lrn.decide(STATE, "h2", "g2", 1.0), 0.5, 0.5)
            assert len(reader.load().pending) == 2        # each load is a fresh snapshot
            assert reader.integrity_problems() == []
