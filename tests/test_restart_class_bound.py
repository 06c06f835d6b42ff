"""A restart with more saved job classes than the learner holds (``LearnerConfig.max_classes``):
the store reads only the classes the learner would keep, and the classes it forgets get no
experts rebuilt (a site with classes past the bound would otherwise rebuild, and hold, the
experts of every class it ever saw)."""

from __future__ import annotations

import pytest

from coscheduler.backends import VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.recorder import MemoryRecorder, classes_kept
from coscheduler.store.sqlite import SqliteStore

from class_bound_store import BOUND, CLASSES, PENDING, fill


@pytest.fixture(params=["memory", "sqlite"])
def recorder(request, tmp_path):
    rec = MemoryRecorder() if request.param == "memory" else SqliteStore(tmp_path / "s.db", create=True)
    fill(rec)
    yield rec
    if request.param == "sqlite":
        rec.close()


def test_load_reads_only_the_classes_a_bounded_learner_holds(recorder):
    whole = recorder.load()
    cfg = LearnerConfig(seed=3, max_classes=BOUND)
    expect = AsaxLearner(cfg, classes=whole.classes, pending=whole.pending).known_classes()
    part = recorder.load(observed_per_class=100, related_to=(set(), 0.0), max_classes=BOUND)
    read = sorted(st.job_class for st in part.classes)
    # the pending ones, and the newest by last update (ties: the later in the list)
    assert PENDING <= set(read)
    assert set(expect) <= set(read) and len(read) <= BOUND + len(PENDING)
    again = AsaxLearner(cfg, classes=part.classes, pending=part.pending)
    assert again.known_classes() == expect
    # the outcomes of the classes not read are not read either
    assert {d.job_class for d, _ in part.observed} == set(read)
    assert [st.job_class for st in classes_kept(whole.classes, PENDING, len(CLASSES))] == \
        [st.job_class for st in whole.classes]


def test_a_restart_rebuilds_the_experts_of_held_classes_only(recorder):
    """Through a recorder that can only load whole (no ``max_classes``): the learner drops
    the classes past its bound, and their outcomes must not rebuild their experts."""

    class WholeOnly:
        def __init__(self, inner):
            self.inner = inner

        def load(self, observed_per_class=None, related_to=None):
            return self.inner.load(observed_per_class, related_to)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    backend = VirtualBackend({"n0": 8}, start_time=10_000.0)
    cfg = LearnerConfig(seed=3, max_classes=BOUND)
    ctl = Controller.from_recorder(backend, WholeOnly(recorder), "asax", cfg)
    learner = ctl.policy.learner
    assert len(learner.known_classes()) <= BOUND + len(PENDING)
    assert set(learner._experts) <= set(learner.known_classes())
    # the held classes were recalled: their fitted experts fitted again
    for c in learner.known_classes():
        fitted = [e for e in learner.experts_for(c) if hasattr(e, "fitted")]
        assert fitted and all(e.fitted for e in fitted), c


def test_a_bounded_restart_holds_what_a_whole_one_holds(recorder):
    backend = VirtualBackend({"n0": 8}, start_time=10_000.0)
    cfg = LearnerConfig(seed=3, max_classes=BOUND)
    bounded = Controller.from_recorder(backend, recorder, "asax", cfg).policy.learner
    whole = AsaxLearner(cfg, classes=recorder.load().classes, pending=recorder.load().pending)
    assert bounded.known_classes() == whole.known_classes()
    for c in bounded.known_classes():
        assert bounded.class_state(c).to_dict() == whole.class_state(c).to_dict()
