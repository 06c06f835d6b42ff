"""The controller on the SQLite store: a restart from the reopened file continues exactly
as an uninterrupted run with an in-memory recorder."""

from __future__ import annotations

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.learner.experts import paper_experts
from coscheduler.learner.fitted import FittedTreeExpert
from coscheduler.model import Job
from coscheduler.policies.coalloc import Asax
from coscheduler.recorder import MemoryRecorder
from coscheduler.store.sqlite import SqliteStore


def _workload(b: VirtualBackend) -> None:
    # Heavy jobs have tight walltimes (1.3x alone), so lending to their guests costs losses
    # and closes rounds: the weights the restart must restore are not the uniform start.
    for i in range(80):
        cls = ("light", "heavy")[i % 2]
        alone = 100.0 + 13 * (i % 5)
        b.submit(Job(f"j{i}", cores=4 * (1 + i % 2), walltime_s=alone * (3.0 if cls == "light" else 1.3),
                     job_class=cls, tasks=50, submit_time=float(i * 3)),
                 Profile(alone, 0.3 if cls == "light" else 0.95, 15.0 + 5 * (i % 4)))


def _run(make, restart_after=None):
    b = VirtualBackend({"n1": 8, "n2": 8})
    _workload(b)
    ctl = make(b, None)
    for k in range(5000):
        if k == restart_after:
            ctl = make(b, ctl)
        ctl.step()
        if b.idle():
            break
        nxt = b.next_event()
        b.advance(10.0 if nxt is None else min(10.0, max(nxt - b.t, 1e-3)))
    return b, ctl


def test_restart_from_the_sqlite_store_continues_like_an_uninterrupted_run(tmp_path):
    # Idle-only lending is off: it reads each class's usual use (ClassUsage), which the store
    # does not keep, so a restarted controller would lend from fewer facts for a few passes.
    cfg = LearnerConfig(seed=4)
    mem = MemoryRecorder()
    b1, _ = _run(lambda b, prev: Controller(b, Asax(AsaxLearner(cfg), idle_only=False), mem))
    path = tmp_path / "state.db"

    def make(b, prev):
        if prev is None:
            return Controller(b, Asax(AsaxLearner(cfg), idle_only=False), SqliteStore(path, create=True))
        prev.recorder.close()
        return Controller.from_recorder(b, SqliteStore(path), "asax", learner_config=cfg,
                                         idle_only=False)

    b2, ctl = _run(make, restart_after=150)
    loaded = ctl.recorder.load()
    ctl.recorder.close()
    mine = [(d.decision_id, d.host_job, d.guest_job, d.action_index) for d, _ in loaded.observed]
    ref = [(d.decision_id, d.host_job, d.guest_job, d.action_index)
           for i, (d, _, _) in mem.decisions.items() if mem.outcomes[i].kind != "cancelled"]
    assert len(ref) >= 10
    assert sorted(mine) == sorted(ref)
    assert loaded.pending == []
    assert [(o.job_id, o.end_time) for o in b2.history] == [(o.job_id, o.end_time) for o in b1.history]
    assert {c.job_class: c.weights for c in loaded.classes} == {
        k: v.weights for k, v in mem.classes.items()}
    assert mem.classes["heavy"].rounds >= 1


def _small_window_experts():
    # A fitted expert with a window of 12 outcomes (recall_window 15): the restart below
    # has more outcomes per class than that, so it reads only the last ones.
    return paper_experts() + [FittedTreeExpert(min_samples=6, refit_every=3, max_samples=12)]


def test_a_restart_reads_only_the_outcomes_the_experts_need_and_continues_unchanged(tmp_path):
    cfg = LearnerConfig(seed=4)
    mem = MemoryRecorder()
    b1, _ = _run(lambda b, prev: Controller(
        b, Asax(AsaxLearner(cfg, _small_window_experts), idle_only=False), mem))
    path = tmp_path / "state.db"
    loads = []

    class Spy(SqliteStore):
        def load(self, observed_per_class=None, related_to=None):
            loaded = super().load(observed_per_class, related_to)
            loads.append((observed_per_class, loaded))
            return loaded

    def make(b, prev):
        if prev is None:
            return Controller(b, Asax(AsaxLearner(cfg, _small_window_experts), idle_only=False),
                              SqliteStore(path, create=True))
        prev.recorder.close()
        return Controller.from_recorder(b, Spy(path), "asax", learner_config=cfg,
                                        expert_factory=_small_window_experts, idle_only=False)

    b2, ctl = _run(make, restart_after=300)
    ctl.recorder.close()
    [(window, loaded)] = loads
    assert window == 15
    counts = loaded.observed_counts
    assert max(counts.values()) > 15          # more than the window was recorded ...
    per_class = {}
    for d, _ in loaded.observed:
        per_class[d.job_class] = per_class.get(d.job_class, 0) + 1
    assert per_class == {c: min(n, 15) for c, n in counts.items()}   # ... and only it read
    # ... and the run went on exactly as the uninterrupted one.
    assert [(o.job_id, o.start_time, o.end_time) for o in b2.history] == [
        (o.job_id, o.start_time, o.end_time) for o in b1.history]
    mine = SqliteStore(path, readonly=True).load()
    assert sorted((d.decision_id, d.host_job, d.guest_job, d.action_index)
                  for d, _ in mine.observed) \
        == [(d.decision_id, d.host_job, d.guest_job, d.action_index)
            for i, (d, _, _) in sorted(mem.decisions.items())
            if i in mem.outcomes and mem.outcomes[i].kind != "cancelled"]
