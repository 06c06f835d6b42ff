"""The controller pass's shortcuts (issue 24) give what the plain constructors and calls give.

The replay test (test_controller_replay.py) shows whole passes unchanged; these pin the
pieces: host states built once per host and joined with a guest's part, the experts read
together in one call, and the pass's objects promoted past the young generation of the
garbage collector without leaving anything frozen.
"""

from __future__ import annotations

import gc
import math
import random

import pytest

from coscheduler.bench.controller import _BenchBackend
from coscheduler.controller import Controller
from coscheduler.learner import AsaxLearner, FittedTreeExpert, HostState, IoExpert, LearnerConfig
from coscheduler.learner.experts import paper_experts
from coscheduler.learner.keyed import keyed_answers
from coscheduler.model import InvalidInput, StageType
from coscheduler.policies.coalloc import Asax


def _random_states(n: int, seed: int = 1) -> list[HostState]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        hp = rng.choice([None, math.inf, 0.0, rng.uniform(0.0, 2.0), 1.0, 1.1])
        out.append(HostState.of_host(
            rng.choice(["a/x", "b/y"]), rng.uniform(0, 120), rng.uniform(0, 100),
            rng.choice(list(StageType)), rng.uniform(0, 1.5), hp,
            rng.choice([None, rng.uniform(0, 40)]), rng.choice([None, rng.uniform(0, 1)])))
    return out


def test_host_state_of_host_and_with_guest_equal_the_constructor():
    for st in _random_states(200):
        full = HostState(st.job_class, st.cpu_percent, st.mem_percent, st.stage_type,
                         st.elapsed_fraction, st.happiness, st.io_mb_s,
                         wait_share=st.wait_share)
        assert st == full
        joined = st.with_guest(42.0, 7.5, 0.25, None, 0.3)
        assert joined == HostState(st.job_class, st.cpu_percent, st.mem_percent, st.stage_type,
                                   st.elapsed_fraction, st.happiness, st.io_mb_s, 42.0, 7.5,
                                   0.25, None, wait_share=st.wait_share, guest_wait_share=0.3)
        assert joined.to_dict() == HostState.from_dict(joined.to_dict()).to_dict()
        assert st.guest_cpu_percent is None   # the host's own state is left as it was


@pytest.mark.parametrize("bad", [
    dict(cpu_percent=math.nan), dict(mem_percent=-1.0), dict(elapsed_fraction=math.inf),
    dict(happiness=math.nan), dict(wait_share=1.5), dict(io_mb_s=-2.0),
])
def test_host_state_of_host_checks_what_is_not_plain(bad):
    args = dict(job_class="a/x", cpu_percent=50.0, mem_percent=10.0,
                stage_type=StageType.PARALLEL, elapsed_fraction=0.5, happiness=1.0,
                io_mb_s=None, wait_share=0.5)
    args.update(bad)
    with pytest.raises(InvalidInput):
        HostState.of_host(**args)


@pytest.mark.parametrize("bad", [(math.nan, 1.0, 0.5, None, 0.1), (1.0, -3.0, 0.5, None, 0.1),
                                 (1.0, 1.0, 0.5, math.inf, 0.1), (1.0, 1.0, 0.5, None, 1.2)])
def test_with_guest_checks_what_is_not_plain(bad):
    st = _random_states(1)[0]
    with pytest.raises(InvalidInput):
        st.with_guest(*bad)


def test_with_guest_takes_ints_through_the_constructor():
    st = _random_states(1)[0]
    joined = st.with_guest(40, 10, 0.5, 3, 0.2)   # ints are valid numbers, kept as given
    assert (joined.guest_cpu_percent, joined.guest_mem_percent, joined.guest_io_mb_s) == (40, 10, 3)


def _fitted(seed: int = 0) -> FittedTreeExpert:
    rng = random.Random(seed)
    e = FittedTreeExpert(10, min_samples=20, seed=seed)
    for st in _random_states(60, seed):
        e.learn(st, rng.choice([0.1, 0.3, 0.5]), rng.random())
    assert e.fitted
    return e


def test_keyed_answers_are_each_experts_keyed_distribution():
    experts = paper_experts(10) + [IoExpert(10), _fitted()]
    answers = keyed_answers(experts)
    for st in _random_states(300, seed=5):
        st = st.with_guest(30.0, 20.0, 0.5, 12.0, 0.4)   # the io expert reads the guest's I/O
        keys, dists = answers(st)
        want = [e.keyed_distribution(st) for e in experts]
        assert keys == tuple(w[0] for w in want)
        assert dists == [w[1] for w in want]


def test_keyed_answers_need_every_expert_keyed():
    class Plain:
        name = "plain"

        def distribution(self, state):
            return (0.1,) * 10

    assert keyed_answers(paper_experts(10) + [Plain()]) is None


def test_a_pass_leaves_the_collector_on_and_nothing_frozen():
    backend = _BenchBackend(200, 200, 3)
    ctl = Controller(backend, Asax(AsaxLearner(LearnerConfig(seed=3))))
    assert gc.isenabled()
    report = ctl.step()
    assert report.coallocated > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_pass_keeps_what_someone_else_froze():
    backend = _BenchBackend(100, 100, 4)
    ctl = Controller(backend, Asax(AsaxLearner(LearnerConfig(seed=4))))
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        ctl.step()
        # Not thawed by the pass (frozen objects that died meanwhile are gone from the count).
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_cycles_left_by_passes_are_collected_within_a_full_collection_period(monkeypatch):
    """Promoting the pass's objects skips the collector's own schedule for full collections,
    so the controller collects in full itself (controller/collect.py): a reference cycle
    that died is gone once ``min_passes`` passes ran and the time rule allows it."""
    import weakref

    from coscheduler.controller import collect

    ticks = iter(range(10**6))
    schedule = collect.FullCollections(clock=lambda: float(next(ticks)))
    monkeypatch.setattr(collect, "FULL_COLLECTIONS", schedule)

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    dead = weakref.ref(a)
    backend = _BenchBackend(10, 10, 5)
    ctl = Controller(backend, Asax(AsaxLearner(LearnerConfig(seed=5))))
    ctl.step()                   # the cycle is promoted with the pass's objects
    del a, b
    assert dead() is not None    # only a full collection can free it now
    for _ in range(schedule.min_passes):
        backend.t += 1.0
        ctl.step()
    assert dead() is None
    assert schedule.last_end is not None and schedule.passes < schedule.min_passes


def test_full_collections_wait_for_enough_passes_and_are_spaced_by_their_cost():
    """The schedule on plain numbers: never before min_passes passes; the first once they
    ran; after a full collection of 0.03 s, with max_share 0.02, the next waits 1.5 s
    however many passes ran."""
    from coscheduler.controller.collect import FullCollections

    s = FullCollections(min_passes=4, max_share=0.02)
    s.passes = 3
    assert not s.due(now=0.0)                    # too few passes
    s.passes = 4
    assert s.due(now=0.0)                        # never collected: the passes suffice
    s.last_end, s.last_cost_s = 10.0, 0.03
    s.passes = 500
    assert not s.due(now=11.0)                   # 1 s < 0.03 / 0.02 s
    assert s.due(now=11.5)
    s.passes = 3
    assert not s.due(now=1000.0)                 # time alone is not enough
