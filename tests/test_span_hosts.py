"""A guest spanning two hosts (issue 19 item 4): ``policies.span``, the virtual backend's
``split`` and the controller's ``span_hosts`` (off by default), on the real controller."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from coscheduler.backend import BackendError
from coscheduler.backends import Profile, VirtualBackend
from coscheduler.cli import main
from coscheduler.controller import Controller, ControllerConfig
from coscheduler.controller.span import UNDONE_NOTE
from coscheduler.learner import AsaxLearner, LearnerConfig
from coscheduler.model import InvalidInput, Job, StageType
from coscheduler.policies.coalloc import CoallocationResult, Static, _choice
from coscheduler.policies.oracle import Oracle
from coscheduler.policies.span import can_span, parent_of, split
from coscheduler.recorder import MemoryRecorder


def stage(job_id="s", cores=8, tasks=80, **kw) -> Job:
    return Job(job_id, cores=cores, walltime_s=1000.0, job_class="stats/partial", tasks=tasks, **kw)


def test_a_stage_splits_into_two_parts_sharing_its_cores_and_tasks():
    a, b = split(stage(cores=9, tasks=10, workflow="w", depends_on=()), 5)
    assert (a.job_id, a.cores, a.tasks) == ("s.span1", 5, 6)
    assert (b.job_id, b.cores, b.tasks) == ("s.span2", 4, 4)
    assert a.walltime_s == b.walltime_s == 1000.0 and a.workflow == b.workflow == "w"
    assert parent_of("s.span2") == "s" and parent_of("s") is None
    # every part gets a task, however few the stage has
    assert [p.tasks for p in split(stage(cores=8, tasks=2), 7)] == [1, 1]


@pytest.mark.parametrize("job, why", [
    (stage(stage_type=StageType.SEQUENTIAL), "sequential"),
    (stage(cores=1), "one core"),
    (stage(tasks=1), "one task"),
    (stage(cores=8, nodes=2), "two nodes"),
    (stage("s.span1"), "already a part"),
    (stage("x" * 124), "a part's id would be too long"),
])
def test_only_a_parallel_stage_of_several_cores_and_tasks_on_one_node_spans(job, why):
    assert not can_span(job), why
    with pytest.raises(InvalidInput, match="cannot span two hosts"):
        split(job, 1)


def test_a_parts_cores_must_leave_the_other_part_some():
    for bad in (0, 8, 9, 2.5, True):
        with pytest.raises(InvalidInput, match="a part's cores must lie in 1..7"):
            split(stage(), bad)


def _backend() -> VirtualBackend:
    b = VirtualBackend({"n0": 8})
    b.submit(stage(), Profile(100.0, 1.0))
    b.submit(Job("next", cores=2, walltime_s=500.0, job_class="stats/merge", depends_on=("s",)),
             Profile(10.0))
    return b


def test_the_stage_ends_when_both_parts_have_and_only_then_releases_its_successor():
    b = _backend()
    p1, p2 = split(stage(), 4)
    b.split("s", [p1, p2])
    assert sorted(j.job_id for j in b.queued()) == ["s.span1", "s.span2"]
    from coscheduler.model import Allocation
    b.start(p1, Allocation("s.span1", (("n0", 4),)), 1.0)
    b.start(p2, Allocation("s.span2", (("n0", 4),)), 0.5)   # half speed: ends later
    b.advance(100.0)
    assert [o.job_id for o in b.drain_finished()] == ["s.span1"]
    assert [j.job_id for j in b.queued()] == []               # the successor still waits
    b.advance(100.0)
    out = {o.job_id: o for o in b.drain_finished()}
    assert set(out) == {"s.span2", "s"}
    assert (out["s"].start_time, out["s"].end_time, out["s"].state) == (0.0, 200.0, "completed")
    assert [j.job_id for j in b.queued()] == ["next"]


def test_a_failed_part_fails_its_stage_and_the_stages_successor():
    b = _backend()
    p1, p2 = split(stage(), 4)
    b.split("s", [p1, p2])
    from coscheduler.model import Allocation
    b.start(p1, Allocation("s.span1", (("n0", 4),)), 1.0)
    b.start(p2, Allocation("s.span2", (("n0", 4),)), 1.0)
    b.cancel("s.span1", "test")
    b.advance(100.0)
    out = {o.job_id: o for o in b.drain_finished()}
    assert out["s"].state == "cancelled" and "part s.span1" in out["s"].reason
    assert out["next"].state == "failed"


def test_a_split_that_does_not_add_up_or_of_a_job_not_queued_is_refused():
    b = _backend()
    p1, p2 = split(stage(), 4)
    with pytest.raises(BackendError, match="cores add up to its 8"):
        b.split("s", [p1])
    with pytest.raises(BackendError, match="cannot split job nope: it is not queued"):
        b.split("nope", [p1, p2])
    assert [j.job_id for j in b.queued()] == ["s"]             # nothing changed


def _cluster():
    """Two 4-core hosts, each using a fifth of its cores, fill the 8-core node; an 8-core
    parallel stage waits behind them, and a stage after it."""
    b = VirtualBackend({"n0": 8})
    use = {}
    for i in range(2):
        b.submit(Job(f"h{i}", cores=4, walltime_s=400.0, job_class="blast/idle", tasks=40),
                 Profile(300.0, 0.2))
        use[f"h{i}"] = 0.2
    b.submit(Job("g", cores=8, walltime_s=400.0, job_class="stats/partial", tasks=80,
                 submit_time=1.0), Profile(60.0, 0.25))
    b.submit(Job("g2", cores=2, walltime_s=400.0, job_class="stats/merge", depends_on=("g",),
                 submit_time=1.0), Profile(10.0, 1.0))
    use.update(g=0.25, g2=1.0)
    return b, use


@pytest.mark.parametrize("span", [False, True])
def test_a_stage_no_single_host_holds_runs_in_two_hosts_only_with_span_hosts(span):
    b, use = _cluster()
    c = Controller(b, Oracle(use), MemoryRecorder(), config=ControllerConfig(span_hosts=span))
    b.run_until_idle(c, tick_s=5.0)
    ends = {o.job_id: o for o in b.history}
    assert all(o.state == "completed" for o in b.history)
    if not span:
        assert b.parts == {} and ends["g"].start_time >= 299.9   # waited for cores of its own
        return
    assert set(b.parts) == {"g"}
    hosts = {j: h for _, j, h in b.starts}
    assert {hosts["g.span1"], hosts["g.span2"]} == {"h0", "h1"}
    assert ends["g"].end_time < 300.0                            # done before the hosts
    assert ends["g2"].start_time >= ends["g"].end_time          # after both parts


def test_span_hosts_is_off_by_default_and_must_be_a_flag():
    assert ControllerConfig().span_hosts is False
    with pytest.raises(InvalidInput, match="span_hosts must be true or false"):
        ControllerConfig(span_hosts="yes")


class _FirstPartOnly:
    """A policy that lends to the first part of a split stage and never to the second: the
    first part's decision must then be forgotten and closed, not left pending."""

    name = "first-part-only"
    co_allocates = True
    idle_only = False

    def __init__(self):
        self.learner = AsaxLearner(LearnerConfig(seed=0))

    def choose(self, guest, candidates, now):
        if not guest.job_id.endswith(".span1"):
            return CoallocationResult(None)
        for cand in candidates:
            d = self.learner.decide(cand.state, cand.host.job_id, guest.job_id, now)
            return CoallocationResult(_choice(guest, cand, 0.5, d), (cand.host.job_id,))
        return CoallocationResult(None)


def test_when_the_second_part_finds_no_host_the_first_parts_decision_is_closed_as_cancelled():
    b, _ = _cluster()
    rec = MemoryRecorder()
    policy = _FirstPartOnly()
    c = Controller(b, policy, rec, config=ControllerConfig(span_hosts=True))
    c.step()            # the hosts start
    b.advance(1.0)
    c.step()            # the stage is queued: its first part finds a host, its second none
    assert b.parts == {} and [j.job_id for j in b.queued()] == ["g"]   # still whole
    assert policy.learner.pending == {}
    [(did, (decision, _, _))] = rec.decisions.items()
    assert decision.guest_job == "g.span1"
    assert (rec.outcomes[did].kind, rec.outcomes[did].note) == ("cancelled", UNDONE_NOTE)


def test_static_spans_too_and_the_paper_simulation_counts_the_spans():
    b, _ = _cluster()
    c = Controller(b, Static(0.5), MemoryRecorder(), config=ControllerConfig(span_hosts=True))
    b.run_until_idle(c, tick_s=5.0)
    assert set(b.parts) == {"g"} and all(o.state == "completed" for o in b.history)
    r = CliRunner().invoke(main, ["simulate", "paper", "--cores", "64", "--repeat", "1",
                                  "--policies", "space-sharing,oracle", "--span-hosts", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["settings"]["span_hosts"] is True
    oracle = [x for x in out["runs"] if x["policy"] == "oracle"][0]
    assert oracle["spans"] >= 1 and oracle["completed"] == 46


def test_a_backend_that_cannot_split_a_job_never_sees_a_span():
    """The live bodies (local, Slurm, Mesos) have no ``split``: a part would run the whole
    stage's program. The controller then keeps the paper's rule whatever the flag."""

    class NoSplit(VirtualBackend):
        split = None

    b = NoSplit({"n0": 8})
    for i in range(2):
        b.submit(Job(f"h{i}", cores=4, walltime_s=400.0, job_class="blast/idle", tasks=40),
                 Profile(300.0, 0.2))
    b.submit(Job("g", cores=8, walltime_s=400.0, job_class="stats/partial", tasks=80,
                 submit_time=1.0), Profile(60.0, 0.25))
    c = Controller(b, Oracle({"h0": 0.2, "h1": 0.2, "g": 0.25}), MemoryRecorder(),
                   config=ControllerConfig(span_hosts=True))
    b.run_until_idle(c, tick_s=5.0)
    assert b.parts == {} and not any(j.endswith((".span1", ".span2")) for _, j, _ in b.starts)
    assert all(o.state == "completed" for o in b.history)


def test_a_policy_that_fails_on_a_part_leaves_the_stage_queued_whole_and_the_pass_going():
    class Broken(_FirstPartOnly):
        def choose(self, guest, candidates, now):
            if guest.job_id.endswith(".span2"):
                raise RuntimeError("boom")
            return super().choose(guest, candidates, now)

    b, _ = _cluster()
    policy = Broken()
    c = Controller(b, policy, MemoryRecorder(), config=ControllerConfig(span_hosts=True))
    c.step()
    b.advance(1.0)
    report = c.step()
    assert any("boom" in e and "g.span2" in e for e in report.errors)
    assert b.parts == {} and [j.job_id for j in b.queued()] == ["g"]
    assert policy.learner.pending == {}                  # the first part's decision closed


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def _workloads(draw):
    """Light 4-core hosts fill one or two 8-core nodes at t = 0; later, parallel stages of
    5-8 cores (larger than any host) and a few smaller jobs arrive, some in chains; under
    ASA_X, Static or the oracle."""
    nodes = {f"n{i}": 8 for i in range(draw(st.integers(1, 2)))}
    jobs = []
    for i in range(2 * len(nodes)):
        jobs.append((Job(f"h{i}", cores=4, walltime_s=2000.0, job_class="c/host", tasks=40),
                     Profile(float(draw(st.integers(100, 300))),
                             draw(st.sampled_from([0.1, 0.2, 0.3])))))
    for i in range(draw(st.integers(1, 5))):
        big = draw(st.booleans())
        parent = f"j{i - 1}" if i > 0 and draw(st.booleans()) else None
        jobs.append((Job(f"j{i}", cores=draw(st.integers(5, 8)) if big else draw(st.integers(1, 4)),
                         walltime_s=2000.0, job_class=f"c/{i % 3}",
                         tasks=draw(st.integers(1, 40)), submit_time=float(draw(st.integers(1, 30))),
                         depends_on=(parent,) if parent else ()),
                     Profile(float(draw(st.integers(20, 200))),
                             draw(st.sampled_from([0.1, 0.3, 0.6, 1.0])))))
    return nodes, jobs, draw(st.sampled_from(["asax", "static", "oracle"])), draw(st.integers(0, 9))


@settings(max_examples=60, deadline=None)
@given(_workloads())
def test_with_span_hosts_every_stage_ends_once_and_its_successors_only_after_it(w):
    from coscheduler.policies.coalloc import make_policy

    nodes, jobs, name, seed = w
    b = VirtualBackend(nodes)
    for job, profile in jobs:
        b.submit(job, profile)
    policy = Oracle({j.job_id: p.cpu_util for j, p in jobs}) if name == "oracle" else \
        make_policy(name, AsaxLearner(LearnerConfig(seed=seed)))
    c = Controller(b, policy, MemoryRecorder(), config=ControllerConfig(span_hosts=True))
    b.run_until_idle(c, tick_s=5.0)
    ends = [o.job_id for o in b.history]
    parts = [p for ids in b.parts.values() for p in ids]
    # every stage and every part ended exactly once, and nothing else did
    assert sorted(ends) == sorted([j.job_id for j, _ in jobs] + parts)
    out = {o.job_id: o for o in b.history}
    for job, _ in jobs:
        for parent in job.depends_on:
            if out[job.job_id].state == "completed":
                assert out[parent].state == "completed"
                assert out[job.job_id].start_time >= out[parent].end_time - 1e-6
    for stage, ids in b.parts.items():
        assert out[stage].start_time == min(out[p].start_time for p in ids)
        assert out[stage].end_time == max(out[p].end_time for p in ids)
    # no decision left open, nothing left running
    if c.learner is not None:
        assert c.learner.pending == {}
    assert b.idle()
