"""End to end on the virtual backend: the same controller and policies, whole workloads.

- CPU-light hosts (u = 0.3): ASA_X co-allocates and empties the queue sooner than space
  sharing (lending idle quota costs the hosts nothing).
- CPU-heavy jobs (u = 0.95): lending hurts host or guest; over repeated runs the class's
  weights move toward the experts that decline.
Seeded; the assertions compare measured outcomes, not hard-coded figures.
"""

from __future__ import annotations

import pytest

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.policies.coalloc import Asax, SpaceSharing
from coscheduler.recorder import MemoryRecorder


def run_workload(policy, u: float, recorder=None, run: int = 0, jobs: int = 24):
    """4 nodes x 8 cores; 8-core jobs of 100-130 s alone, walltime 1.5x, all queued at once."""
    from coscheduler.model import Job

    b = VirtualBackend({f"n{i}": 8 for i in range(4)})
    for i in range(jobs):
        rt = 100.0 + 10 * (i % 4)
        b.submit(Job(f"r{run}-j{i}", cores=8, walltime_s=1.5 * rt, job_class="w", tasks=100,
                     submit_time=float(i)), Profile(rt, u, 20.0))
    c = Controller(b, policy, recorder if recorder is not None else MemoryRecorder())
    makespan = b.run_until_idle(c)
    assert len(b.history) == jobs and all(o.state in ("completed", "timeout") for o in b.history)
    return makespan, b


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_asax_finishes_a_cpu_light_queue_sooner_than_space_sharing(seed):
    base, b_space = run_workload(SpaceSharing(), u=0.3)
    asax, b_asax = run_workload(Asax(AsaxLearner(LearnerConfig(seed=seed))), u=0.3)
    guests = [jid for _, jid, host in b_asax.starts if host is not None]
    assert not any(host for _, _, host in b_space.starts)
    assert len(guests) >= 4
    assert asax < 0.85 * base
    # Light hosts are rarely hurt (only a lending above their idle share, 70 % or more,
    # slows them enough to hit the walltime).
    assert sum(o.state == "timeout" for o in b_asax.history) <= 2


def decline_probability(learner: AsaxLearner, job_class: str, states, weights) -> float:
    """Mean over states of the mixture's probability of a_0 (do not co-allocate) under
    ``weights``."""
    experts = learner.experts_for(job_class)
    return sum(sum(w * e.distribution(s)[0] for w, e in zip(weights, experts))
               for s in states) / len(states)


@pytest.mark.parametrize("seed", [0, 1])
def test_asax_learns_to_decline_cpu_heavy_pairs_over_repeated_runs(seed):
    """Every lending between two CPU-heavy jobs slows one of them (a small quota the guest, a
    large one the host), so with pair losses the weight goes to the experts that decline.
    (The paper's four hand-made experts only: their distributions stay fixed, so "declines
    most" is a property of the expert, not of when it is looked at.)"""
    learner = AsaxLearner(LearnerConfig(seed=seed, fitted_expert=False))
    # The idle-only rule would lend these hosts nothing (see the next test): switched off
    # here so that lending happens and the learner has losses to learn from.
    policy, rec = Asax(learner, idle_only=False), MemoryRecorder()
    rounds, reference = [], None
    for run in range(6):
        run_workload(policy, u=0.95, recorder=rec, run=run)
        if reference is None:
            reference = [d.state for d, _, _ in rec.decisions.values()]
        rounds.append(learner.class_state("w").rounds)
    assert rounds == sorted(rounds) and rounds[-1] >= 2, rounds
    st = learner.class_state("w")
    n = len(st.weights)
    uniform = [1.0 / n] * n
    # Each expert's own a_0 probability on the host states of the first run.
    own = [decline_probability(learner, "w", reference, [1.0 if k == i else 0.0 for k in range(n)])
           for i in range(n)]
    most_cautious, least_cautious = own.index(max(own)), own.index(min(own))
    assert st.weights[most_cautious] > 1.0 / n
    assert st.weights[least_cautious] < 1.0 / n
    learned = decline_probability(learner, "w", reference, st.weights)
    assert learned > 1.05 * decline_probability(learner, "w", reference, uniform)
    # The losses that drove this were real: lending slowed heavy jobs.
    kinds = {o.kind for o in rec.outcomes.values()}
    assert {"declined"} < kinds and max(o.loss for o in rec.outcomes.values()) > 0.3


def test_idle_only_lending_lends_nothing_from_cpu_heavy_hosts():
    """Hosts busy 95 % of their cores have no idle share above the margin: ASA_X (idle-only
    by default) makes no loan, and so slows no host."""
    _, b = run_workload(Asax(AsaxLearner(LearnerConfig(seed=0))), u=0.95)
    assert not [jid for _, jid, host in b.starts if host is not None]


@pytest.mark.parametrize("u", [0.5, 0.95])
def test_theorem1_bound_holds_on_real_controller_runs(u):
    """DESIGN: the excess risk after t rounds, on the losses the controller really fed the
    learner, stays within (ln n + 0.5 sum gamma_s^2) / gamma_t."""
    learner = AsaxLearner(LearnerConfig(seed=3))
    # Idle-only lending off: the bound is about learning from real losses, so lend.
    policy, rec = Asax(learner, idle_only=False), MemoryRecorder()
    # Every job shares, so none teaches the class's runtime alone: give it, as a site's
    # accounting of earlier exclusive runs would (the jobs take 100-130 s alone).
    rec.record_alone_runtime("w", 100.0)
    for run in range(4):
        run_workload(policy, u=u, recorder=rec, run=run)
    st = learner.class_state("w")
    assert st.observations > 20 and st.rounds >= 1
    # Theorem 1 as printed (the proof's division by gamma_t can fail for a decreasing gamma on
    # adversarial losses, see coscheduler/learner/asax.py; not on these), and its eq. 11.
    assert learner.excess_risk("w") <= learner.theorem1_bound("w")
    assert learner.weighted_excess_risk("w") <= learner.weighted_bound("w") + 1e-9
    # The bookkeeping matches the recorded rounds.
    assert len(rec.rounds) == st.rounds
