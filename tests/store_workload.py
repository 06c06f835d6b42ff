"""A deterministic learner run that persists through a Recorder, for the store and CLI tests.

``drive`` makes seeded decisions over a few job classes, observes each loss a few decisions
later, cancels an occasional decision and records exclusive runtimes; every recorder call it
makes is one commit, and it stops after ``max_commits`` of them. Replaying it with the same
seed to the same commit count gives the same learner, which is what the kill -9 test uses.

Run as a script (``python store_workload.py DB``) it writes to a SqliteStore until killed,
printing ``committed N`` after each commit.
"""

from __future__ import annotations

import random
import sys
from typing import Callable

from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.model import StageType
from coscheduler.recorder import MemoryRecorder, OutcomeRecord

CLASSES = ("montage/mProject", "blast/blastall", "stats/aggregate")
CONFIG = LearnerConfig(m=10, seed=7, fitted_expert=True)


def host_state(rng: random.Random) -> HostState:
    return HostState(
        job_class=rng.choice(CLASSES), cpu_percent=rng.uniform(0, 100),
        mem_percent=rng.uniform(0, 100),
        stage_type=StageType.PARALLEL if rng.random() < 0.6 else StageType.SEQUENTIAL,
        elapsed_fraction=rng.uniform(0, 1), happiness=None if rng.random() < 0.05 else rng.uniform(0.3, 2.5))


def drive(learner: AsaxLearner, recorder, max_commits: int | None = None, seed: int = 1,
          t0: float = 1.7e9, on_commit: Callable[[int], None] | None = None) -> int:
    """Run the workload; returns the number of commits made. ``recorder`` is a SqliteStore
    (combined writes) or a MemoryRecorder (the same records, call by call)."""
    rng = random.Random(seed)
    combined = hasattr(recorder, "record_observation")
    commits = 0
    due: dict[int, list[int]] = {}

    def committed() -> bool:
        nonlocal commits
        commits += 1
        if on_commit is not None:
            on_commit(commits)
        return max_commits is not None and commits >= max_commits

    step = 0
    while True:
        if max_commits is not None and commits >= max_commits:
            return commits
        now = t0 + step
        state = host_state(rng)
        d = learner.decide(state, f"host{step}", f"guest{step}", now)
        cs = learner.class_state(d.job_class)
        if combined:
            recorder.record_decision(d, 1 - d.action_fraction, d.action_fraction, class_state=cs)
        else:
            recorder.record_decision(d, 1 - d.action_fraction, d.action_fraction)
            recorder.save_class(cs)
        if committed():
            return commits
        delay = rng.randint(1, 6)
        due.setdefault(step + delay, []).append(d.decision_id)
        cancel = rng.random() < 0.05
        noise = rng.uniform(-0.1, 0.1)
        alone = rng.uniform(50, 500) if rng.random() < 0.05 else None
        for did in due.pop(step, []):
            dec = learner.pending[did]
            if cancel:
                # The guest never started: the decision earns no loss.
                learner.forget(did)
                recorder.record_outcome(OutcomeRecord(did, now, 0.0, "cancelled", note="guest did not start"))
                cancel = False
            else:
                loss = min(1.0, max(0.0, dec.action_fraction * dec.state.cpu_percent / 70 + noise))
                closed = learner.observe(did, loss, now)
                outcome = OutcomeRecord(did, now, loss, "degradation", host_runtime_s=100.0 + step,
                                        host_walltime_s=400.0, guest_runtime_s=50.0)
                st = learner.class_state(dec.job_class)
                if combined:
                    recorder.record_observation(outcome, st, closed)
                else:
                    recorder.record_outcome(outcome)
                    if closed is not None:
                        recorder.record_round(closed)
                    recorder.save_class(st)
            if committed():
                return commits
        if alone is not None:
            recorder.record_alone_runtime(d.job_class, alone)
            if committed():
                return commits
        step += 1


def replay(max_commits: int, seed: int = 1) -> tuple[AsaxLearner, MemoryRecorder]:
    """The uninterrupted run, in memory, up to ``max_commits`` commits."""
    learner = AsaxLearner(CONFIG)
    mem = MemoryRecorder()
    drive(learner, mem, max_commits, seed=seed)
    return learner, mem


def restart(loaded) -> AsaxLearner:
    """A learner rebuilt from a LoadedState, as the controller does on start."""
    learner = AsaxLearner(CONFIG, classes=loaded.classes, pending=loaded.pending,
                          next_decision_id=loaded.next_decision_id)
    for decision, loss in loaded.observed:
        learner.teach(decision, loss)
    return learner


if __name__ == "__main__":
    from coscheduler.store import SqliteStore

    store = SqliteStore(sys.argv[1], create=True)
    print("ready", flush=True)
    drive(AsaxLearner(CONFIG), store, on_commit=lambda n: print(f"committed {n}", flush=True))
