"""Real processes: two writers on one file at once, and a writer killed with SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.recorder import OutcomeRecord
from coscheduler.store import SqliteStore

from store_workload import replay, restart

WORKLOAD = Path(__file__).with_name("store_workload.py")
PER_WRITER = 300


def writer(path: str, k: int, barrier, spans) -> None:
    """Decisions with ids k*100000+1..., an outcome for every other one, class states,
    rounds and exclusive runtimes; all through the public store API."""
    lrn = AsaxLearner(LearnerConfig(fitted_expert=False, risk_threshold=0.2),
                      next_decision_id=k * 100_000 + 1)
    barrier.wait()                       # both processes create/open the file at once
    start = time.monotonic()
    with SqliteStore(path, create=True) as store:
        for i in range(PER_WRITER):
            job_class = f"writer{k}/class{i % 3}"
            d = lrn.decide(HostState(job_class, i % 100, 50, "parallel", 0.5, 1.2),
                           f"h{k}-{i}", f"g{k}-{i}", float(i))
            store.record_decision(d, 1 - d.action_fraction, d.action_fraction,
                                  class_state=lrn.class_state(job_class))
            if i % 2 == 0:
                closed = lrn.observe(d.decision_id, 0.5, float(i))
                store.record_observation(OutcomeRecord(d.decision_id, float(i), 0.5, "walltime"),
                                         lrn.class_state(job_class), closed)
            if i % 10 == 0:
                store.record_alone_runtime(job_class, 100.0 + i)
        spans.put((start, time.monotonic()))


def test_two_processes_writing_at_once_do_not_corrupt_the_file(tmp_path):
    path = str(tmp_path / "state.db")
    ctx = multiprocessing.get_context("fork")
    barrier, spans = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(path, k, barrier, spans)) for k in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    (s1, e1), (s2, e2) = spans.get(timeout=5), spans.get(timeout=5)
    assert max(s1, s2) < min(e1, e2), "the two writers did not overlap in time"
    with SqliteStore(path) as store:
        assert store.integrity_problems() == []
        loaded = store.load()
        counts = store.conn.execute(
            "SELECT (SELECT COUNT(*) FROM decisions), (SELECT COUNT(*) FROM outcomes), "
            "(SELECT COUNT(*) FROM alone_runtimes), (SELECT COUNT(*) FROM classes)").fetchone()
        ids = {r[0] for r in store.conn.execute("SELECT id FROM decisions")}
    assert counts == (2 * PER_WRITER, PER_WRITER, 2 * (PER_WRITER // 10), 6)
    assert ids == {k * 100_000 + i for k in (1, 2) for i in range(1, PER_WRITER + 1)}
    assert len(loaded.pending) == PER_WRITER
    for st in loaded.classes:           # each class state agrees with the rows it counts
        assert st.decisions == PER_WRITER // 3
        assert st.observations == PER_WRITER // 6


def committed_rows(store: SqliteStore) -> int:
    return store.conn.execute(
        "SELECT (SELECT COUNT(*) FROM decisions) + (SELECT COUNT(*) FROM outcomes) "
        "+ (SELECT COUNT(*) FROM alone_runtimes)").fetchone()[0]


@pytest.mark.parametrize("kill_after", [150, 400])
def test_state_survives_kill_9(tmp_path, kill_after):
    """Write, SIGKILL mid-stream, reopen: the file is sound, every commit the writer
    reported is there, and the rebuilt learner is the one that was never killed."""
    path = tmp_path / "state.db"
    child = subprocess.Popen([sys.executable, str(WORKLOAD), str(path)], stdout=subprocess.PIPE,
                             text=True, cwd=WORKLOAD.parent)
    reported = 0
    deadline = time.monotonic() + 60
    try:
        assert child.stdout.readline().strip() == "ready"
        while reported < kill_after and time.monotonic() < deadline:
            line = child.stdout.readline()
            assert line.startswith("committed "), f"writer said {line!r}"
            reported = int(line.split()[1])
        os.kill(child.pid, signal.SIGKILL)     # most likely in the middle of a transaction
    finally:
        child.kill()
        child.wait(10)
        rest = child.stdout.read().split()
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    reported = max([reported] + [int(x) for x in rest if x.isdigit()])
    assert reported >= kill_after

    with SqliteStore(path) as store:                     # reopen as the controller would
        assert store.integrity_problems() == []
        commits = committed_rows(store)
        loaded = store.load()
    # Nothing committed is lost (the writer may have committed one more than it printed).
    assert commits in (reported, reported + 1)

    uninterrupted, mem = replay(commits)
    assert [c.to_dict() for c in loaded.classes] == [
        c.to_dict() for c in sorted(mem.classes.values(), key=lambda c: c.job_class)]
    assert [d.decision_id for d in loaded.pending] == sorted(uninterrupted.pending)
    assert loaded.pending == [uninterrupted.pending[i] for i in sorted(uninterrupted.pending)]
    assert loaded.next_decision_id == uninterrupted.next_decision_id
    # Each class state agrees with the rows it counts (the combined writes are atomic).
    for st in loaded.classes:
        assert st.decisions == sum(1 for d, *_ in mem.decisions.values() if d.job_class == st.job_class)

    again = restart(loaded)
    for job_class in sorted(mem.classes):
        probe = HostState(job_class, 15.0, 20.0, "sequential", 0.6, 1.4)
        assert again.decide(probe, "hx", "gx", 2e9) == uninterrupted.decide(probe, "hx", "gx", 2e9)
    if loaded.pending:
        did = loaded.pending[0].decision_id
        assert again.observe(did, 0.9, 2e9) == uninterrupted.observe(did, 0.9, 2e9)
