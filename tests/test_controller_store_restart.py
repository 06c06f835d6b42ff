"""The controller on the SQLite store: a restart from the reopened file continues exactly
as an uninterrupted run with an in-memory recorder."""

from __future__ import annotations

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
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
