"""The live controller takes a selector where it takes a queue policy: a learned model's
scores order the real controller's queue (virtual backend)."""

from __future__ import annotations

import numpy as np

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.controller import Controller, order_by
from coscheduler.learned.features import Normalisation
from coscheduler.learned.modelfile import Model
from coscheduler.learned.selectors import LearnedScorer
from coscheduler.model import Job
from coscheduler.policies.coalloc import SpaceSharing


def long_job_first_model() -> Model:
    """A hand-set kernel network: score = 10 x normalised estimate (longest first)."""
    params = {"pi/0/w": np.zeros((6, 1)), "pi/0/b": np.zeros(1)}
    params["pi/0/w"][1, 0] = 10.0
    return Model("rlscheduler", params, {"normalisation": Normalisation(estimate_s=1000.0)
                                         .as_dict(), "window": 128, "mask": "padding"})


def job(jid, walltime, submit):
    return Job(jid, cores=4, walltime_s=walltime, job_class="c", submit_time=submit)


def test_controller_orders_its_queue_by_a_learned_models_scores():
    b = VirtualBackend({"n1": 4})
    b.submit(job("blocker", 10.0, 0.0), Profile(10.0))
    b.submit(job("short", 20.0, 1.0), Profile(10.0))
    b.submit(job("long", 500.0, 2.0), Profile(10.0))
    b.submit(job("mid", 100.0, 3.0), Profile(10.0))
    scorer = LearnedScorer(long_job_first_model())
    c = Controller(b, SpaceSharing(), queue_order=order_by(scorer))
    b.run_until_idle(c)
    # the model prefers long estimates: the opposite of FCFS and of SJF
    assert [jid for _, jid, _ in b.starts] == ["blocker", "long", "mid", "short"]


def test_inspected_ranking_demotes_a_rejected_top_for_its_retry_delay():
    from coscheduler.policies.queue import get_policy
    from coscheduler.policies.selection import Inspector, InspectedRanking

    class RejectLong(Inspector):
        def accept(self, view):
            return view.estimate[0] < 100

    ranking = InspectedRanking(RejectLong("reject-long", get_policy("FCFS"), max_rejections=2,
                                          retry_after=600.0))
    jobs = [(0, 1, 500), (1, 1, 50), (2, 1, 80)]
    ids = ["a", "b", "c"]
    assert ranking.rank(10.0, jobs, ids, 1, 4) == [1, 2, 0]   # a rejected: last
    assert ranking.rank(300.0, jobs, ids, 1, 4) == [1, 2, 0]  # still resting, not asked
    assert ranking.times == {"a": 1}
    assert ranking.rank(700.0, jobs, ids, 1, 4) == [1, 2, 0]  # asked again, rejected again
    assert ranking.rank(1400.0, jobs, ids, 1, 4) == [0, 1, 2]  # max rejections: accepted
    assert ranking.times == {"a": 2}


def test_the_hand_written_inspector_ranks_a_live_queue_by_what_fits_now():
    # reject-blocked:FCFS as the Slurm priority hook and the controller take it: a top job
    # wider than the free nodes goes last for the retry delay, one that fits stays first
    from coscheduler.learned.registry import inspector_for
    from coscheduler.policies.selection import InspectedRanking

    ranking = InspectedRanking(inspector_for("reject-blocked:FCFS"))
    assert ranking.name == "FCFS+reject-blocked"
    jobs = [(0, 4, 500), (1, 1, 50), (2, 2, 80)]   # (submit, processors, estimate)
    ids = ["wide", "b", "c"]
    assert ranking.rank(10.0, jobs, ids, 2, 4) == [1, 2, 0]   # 4 wanted, 2 free: last
    assert ranking.times == {"wide": 1}
    fresh = InspectedRanking(inspector_for("reject-blocked:FCFS"))
    assert fresh.rank(10.0, jobs, ids, 4, 4) == [0, 1, 2]     # it fits: first, not asked again
    assert fresh.times == {}


def test_controller_takes_an_inspector_order():
    from coscheduler.learned.selectors import LearnedInspector
    from test_learned_models import inspector_model

    b = VirtualBackend({"n1": 4})
    b.submit(job("blocker", 10.0, 0.0), Profile(10.0))
    b.submit(job("first", 20.0, 1.0), Profile(10.0))
    b.submit(job("second", 20.0, 2.0), Profile(10.0))
    never = LearnedInspector(inspector_model(50.0, "FCFS"))   # accepts always
    c = Controller(b, SpaceSharing(), queue_order=order_by(never))
    b.run_until_idle(c)
    assert [jid for _, jid, _ in b.starts] == ["blocker", "first", "second"]
