"""Saved job classes past a learner's class bound (``LearnerConfig.max_classes``), for the
restart and prune tests: eight classes, three of them the newest, two with a decision
pending."""

from __future__ import annotations

from coscheduler.learner import AsaxLearner, ClassState, HostState, LearnerConfig
from coscheduler.recorder import OutcomeRecord

# name -> last update (None: no round closed yet; ties broken by name, the later kept)
CLASSES = {"u/a": 50.0, "u/b": None, "u/c": 50.0, "u/d": 10.0, "u/e": None, "u/f": 70.0,
           "u/g": 5.0, "u/h": 50.0}
PENDING = {"u/g", "u/b"}      # a decision without an outcome: never forgotten
BOUND = 3


def state(job_class: str, cpu: float) -> HostState:
    return HostState(job_class=job_class, cpu_percent=cpu, mem_percent=30.0,
                     stage_type="parallel", elapsed_fraction=0.4, happiness=1.0)


def fill(recorder) -> None:
    """Every class saved, with 25 observed outcomes each (enough to fit the fitted
    expert) at times 1, 2, ... (u/d's at 76-100), a closed round and (a recorder that keeps
    them) a walltime credit; a decision left pending for the classes of PENDING."""
    learner = AsaxLearner(LearnerConfig(seed=3))
    credits = getattr(recorder, "record_walltime_credit", None)
    t = 1.0
    for c in CLASSES:
        for k in range(25):
            d = learner.decide(state(c, 10.0 + 3 * k), f"h{c[-1]}{k}", f"g{c[-1]}{k}", t,
                               job_class=c)
            recorder.record_decision(d, 0.9, d.action_fraction)
            if k == 4 and credits is not None:
                credits({"job_id": f"h{c[-1]}{k}", "time": t, "minutes": 5, "limit_s": 600.0,
                         "projected_end": 900.0})
            loss = 0.0 if d.action_index == 0 else 0.1 * (k % 3)
            closed = learner.observe(d.decision_id, loss, t)
            if closed is not None:
                recorder.record_round(closed)
            recorder.record_outcome(OutcomeRecord(d.decision_id, t, loss,
                                                  "declined" if d.action_index == 0 else "degradation"))
            t += 1.0
        closed = learner.end_round(c, t)
        if closed is not None:
            recorder.record_round(closed)
        if c in PENDING:
            d = learner.decide(state(c, 50.0), f"hp{c[-1]}", f"gp{c[-1]}", t, job_class=c)
            recorder.record_decision(d, 0.9, d.action_fraction)
            t += 1.0
    names = learner.expert_names
    for c, last in CLASSES.items():
        st = ClassState.fresh(c, names)
        st.last_update = last
        st.decisions = 7
        recorder.save_class(st)
