"""Learned schedulers without training: the seam, features, model files, selectors.

numpy only (no JAX, no gymnasium): these run without the rl extra."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coscheduler.data import swf_dir
from coscheduler.model import InvalidInput

from coscheduler.learned.features import RL_FEATURES, Normalisation, rl_observation
from coscheduler.learned.modelfile import MAGIC, Model, ModelError, load_model, save_model
from coscheduler.learned.nets import inspector_init, rl_init
from coscheduler.learned.selectors import LearnedInspector, LearnedScorer
from coscheduler.learned.windows import eval_starts, legacy_rng
from coscheduler.policies import get_policy
from coscheduler.policies.selection import (AcceptAll, KeyScorer, action_mask, machine_view,
                                            order_by_scores)
from coscheduler.sim import Cluster, read_swf, simulate
from coscheduler.sim.metrics import compute_metrics
from coscheduler.sim.replay import window

from learned_helpers import write_stuck_shorts_trace

SWF = swf_dir()   # the bundled traces (coscheduler/data/swf)


def rl_model(seed: int = 0, **header) -> Model:
    norm = Normalisation(estimate_s=3000.0)
    params = {k: v for k, v in rl_init(np.random.default_rng(seed), len(RL_FEATURES)).items()
              if k.startswith("pi/")}
    return Model("rlscheduler", params, {"normalisation": norm.as_dict(), "window": 128,
                                         "mask": "runnable", **header})


def inspector_model(accept_bias: float = 0.0, base: str = "SJF") -> Model:
    params = {k: v for k, v in inspector_init(np.random.default_rng(1), 9).items()
              if k.startswith("pi/")}
    params["pi/3/b"] = np.array([accept_bias, -accept_bias], dtype=np.float32)
    return Model("inspector", params, {"normalisation": Normalisation().as_dict(), "base": base})


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    return read_swf(write_stuck_shorts_trace(tmp_path_factory.mktemp("swf") / "stuck.swf"))


def replay(trace, policy, backfill="none", start=0, count=256):
    jobs = window(trace.jobs, start, count)
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    sched = simulate(jobs, cluster, policy, backfill)
    return sched, compute_metrics(jobs, sched.start, sched.end, trace.max_procs)


# ------------------------------------------------------------------ the seam
@pytest.mark.parametrize("name", ["FCFS", "SJF", "F1", "SAF"])
def test_key_scorer_replays_its_key_policy_without_backfilling(stuck, name):
    a, _ = replay(stuck, get_policy(name))
    b, _ = replay(stuck, KeyScorer(get_policy(name)))
    assert a.start == b.start


@pytest.mark.parametrize("backfill", ["none", "easy"])
@pytest.mark.parametrize("name", ["SJF", "F1", "WFP3"])
def test_an_inspector_that_never_rejects_equals_its_base(name, backfill):
    trace = read_swf(Path(__file__).parent / "fixtures" / "swf" / "small.swf")
    a, ma = replay(trace, get_policy(name), backfill, count=len(trace.jobs))
    b, mb = replay(trace, AcceptAll(get_policy(name)), backfill, count=len(trace.jobs))
    assert a.start == b.start and b.rejections == 0
    # a learned inspector whose output always accepts does the same
    c, _ = replay(trace, LearnedInspector(inspector_model(50.0, name)), backfill,
                  count=len(trace.jobs))
    assert c.start == a.start and c.rejections == 0


def test_reject_blocked_rejects_exactly_the_picks_that_cannot_start_now(stuck):
    """The hand-written inspector, and the teacher a network is warm-started from
    (learned/teachers.py, which reads the same rule off the observation row), answer
    alike on every question of a replay; only blocked picks are rejected, and on a
    stretch of lublin_256 rejecting them lowers SJF's mean bounded slowdown."""
    from coscheduler.learned.features import inspector_observation
    from coscheduler.learned.teachers import reject_blocked
    from coscheduler.policies.selection import RejectBlocked

    rule = RejectBlocked(get_policy("SJF"))
    asked: list[tuple[bool, bool, int]] = []

    class Watching(RejectBlocked):
        def accept(self, view):
            ok = rule.accept(view)
            row = inspector_observation(view, Normalisation())[None, :]
            asked.append((ok, bool(view.need[0] <= view.free_nodes),
                          int(reject_blocked(row)[0])))
            return ok

    sched, m = replay(stuck, Watching(get_policy("SJF")))
    assert asked and sched.finished == 256
    assert all(ok == fits for ok, fits, _ in asked)
    assert all(teacher == (0 if ok else 1) for ok, _, teacher in asked)
    assert any(not ok for ok, _, _ in asked) and sched.rejections > 0
    lublin = read_swf(SWF / "lublin_256.swf")
    _, base = replay(lublin, get_policy("SJF"), start=3000, count=512)
    _, inspected = replay(lublin, rule, start=3000, count=512)
    assert inspected.avg_bsld < 0.9 * base.avg_bsld, (inspected.avg_bsld, base.avg_bsld)


def test_the_rejection_budget_bounds_what_the_rule_changes(stuck):
    """Budget 0: the rule is never asked and the schedule is the base policy's; a larger
    budget rejects more, each job at most the budget's times; on a lublin_256 stretch a
    large budget lowers SJF's bsld further than SchedInspector's 10."""
    from coscheduler.learned.budget import choose_budget
    from coscheduler.learned.registry import hand_inspector
    from coscheduler.policies.selection import RejectBlocked

    base, mb = replay(stuck, get_policy("SJF"))
    none, m0 = replay(stuck, RejectBlocked(get_policy("SJF"), max_rejections=0))
    assert none.rejections == 0 and m0.avg_bsld == mb.avg_bsld
    assert list(none.start) == list(base.start)
    ten, _ = replay(stuck, RejectBlocked(get_policy("SJF")))
    many, _ = replay(stuck, hand_inspector("reject-blocked:SJF:1000"))
    assert 0 < ten.rejections <= 256 * 10 and many.rejections >= ten.rejections
    lublin = read_swf(SWF / "lublin_256.swf")
    s10, small = replay(lublin, hand_inspector("reject-blocked:sjf"), start=3000, count=512)
    s1000, large = replay(lublin, hand_inspector("reject-blocked:SJF:1000"), start=3000, count=512)
    assert s1000.rejections > s10.rejections
    assert large.avg_bsld < small.avg_bsld, (large.avg_bsld, small.avg_bsld)
    # the choice: the lowest validation figure, the smaller budget on a tie
    assert choose_budget({10: 5.0, 200: 3.0, 1000: 3.0}) == 200
    assert choose_budget({10: 5.0, 200: 3.001, 1000: 3.0}) == 200
    assert choose_budget({10: 2.0, 1000: 3.0}) == 10
    for bad, what in (("reject-blocked:SJF:x", "integer from 0 to 100000"),
                      ("reject-blocked:SJF:100001", "integer from 0 to 100000"),
                      ("reject-blocked:SJF:\u00b2", "integer from 0 to 100000"),
                      ("reject-blocked:SJF:1:2", "reject-blocked:BASE:BUDGET"),
                      ("reject-blocked:nosuch", "nosuch")):
        with pytest.raises(InvalidInput, match=what):
            hand_inspector(bad)


def test_rejections_delay_and_are_bounded(stuck):
    reject = LearnedInspector(inspector_model(-50.0))   # always rejects
    sched, m = replay(stuck, reject)
    base, mb = replay(stuck, get_policy("SJF"))
    assert sched.finished == 256
    # every job is asked until max_rejections, then accepted without asking
    assert sched.rejections == 256 * reject.max_rejections
    assert m.avg_wait > mb.avg_wait


def test_choice_view_earliest_start():
    view = machine_view(100.0, [(0, 2, 50), (10, 4, 50), (20, 8, 50)], free_nodes=2,
                        total_nodes=8, running=[(130.0, 2), (400.0, 4)])
    # 2 nodes fit now; 4 need the job ending at 130; 8 need both
    assert view.earliest_start().tolist() == [0.0, 30.0, 300.0]
    assert view.runnable.tolist() == [True, False, False]
    assert action_mask(view, "runnable").tolist() == [True, False, False]
    assert action_mask(view, "padding").tolist() == [True, True, True]


def test_order_by_scores_ranks_window_then_fcfs():
    class ByEstimate(KeyScorer):
        pass

    scorer = KeyScorer(get_policy("SJF"), window=2)
    jobs = [(0, 1, 300), (1, 1, 100), (2, 1, 50)]  # the third is outside a 2-job window
    order, scores = order_by_scores(scorer, 10.0, jobs, free_nodes=1, total_nodes=4)
    assert order == [1, 0, 2]
    assert scores[0] > scores[1]


# ------------------------------------------------------------------ windows
def test_legacy_seeding_draws_the_reference_windows():
    # gym's old seeding.np_random(1): the reference's compare-pick-jobs.py windows
    rng = legacy_rng(1)
    assert 0 <= rng.randint(1024, 10_000 - 1025) < 10_000
    starts = eval_starts(10_000)
    assert starts == eval_starts(10_000) and len(starts) == 10


def test_seed_one_fcfs_column_on_lublin():
    trace = read_swf(SWF / "lublin_256.swf")
    starts = eval_starts(len(trace.jobs))
    assert starts == [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]
    cluster = Cluster.from_swf_header(trace.max_nodes, trace.max_procs)
    values = []
    for s in starts:
        jobs = window(trace.jobs, s, 1024)
        sched = simulate(jobs, cluster, get_policy("FCFS"), "none")
        values.append(compute_metrics(jobs, sched.start, sched.end, trace.max_procs).avg_bsld)
    # RLScheduler's published FCFS figure for Lublin-1 without backfilling: 7273.8
    assert abs(np.mean(values) - 7273.8) < 0.05


# ------------------------------------------------------------------ model files
def test_save_load_gives_identical_scores(tmp_path, stuck):
    model = rl_model(3, trace="stuck.swf")
    path = save_model(model, tmp_path / "m.model")
    loaded = load_model(path, "rlscheduler")
    assert loaded.header["trace"] == "stuck.swf" and loaded.features == RL_FEATURES
    a, b = LearnedScorer(model), LearnedScorer(loaded)
    view = machine_view(5000.0, [(0, 1, 20), (10, 4, 2000), (20, 2, 25)], 2, 4,
                        running=[(5100.0, 2)])
    # float32 on disk: the in-memory model was float32 too
    assert np.array_equal(a.scores(view), b.scores(view))
    sa, _ = replay(stuck, a)
    sb, _ = replay(stuck, b)
    assert sa.start == sb.start


def test_bad_model_files_get_clear_errors(tmp_path):
    junk = tmp_path / "junk.model"
    junk.write_text("hello\n")
    with pytest.raises(ModelError, match=r"junk.model: not a coscheduler model file"):
        load_model(junk)
    good = save_model(rl_model(), tmp_path / "good.model")
    with pytest.raises(ModelError, match=r"good.model: is a rlscheduler model, but a inspector"):
        load_model(good, "inspector")
    raw = good.read_bytes()
    head_end = raw.index(b"\n", len(MAGIC))
    header = json.loads(raw[len(MAGIC):head_end])
    header["features"] = ["wait", "estimate", "user_id"]
    other = tmp_path / "other.model"
    other.write_bytes(MAGIC + json.dumps(header).encode() + raw[head_end:])
    with pytest.raises(ModelError, match=r"other.model: its features \['wait', 'estimate', "
                                         r"'user_id'\] differ"):
        load_model(other)
    cut = tmp_path / "cut.model"
    cut.write_bytes(raw[:head_end + 20])
    with pytest.raises(ModelError, match=r"cut.model: the model's weights cannot be read"):
        load_model(cut)
    kind = tmp_path / "kind.model"
    header = json.loads(raw[len(MAGIC):head_end])
    header["kind"] = "mystery"
    kind.write_bytes(MAGIC + json.dumps(header).encode() + raw[head_end:])
    with pytest.raises(ModelError, match=r"kind.model: unknown model kind 'mystery'"):
        load_model(kind)
    with pytest.raises(ModelError, match=r"absent.model: cannot read model file"):
        load_model(tmp_path / "absent.model")


def test_scorer_never_picks_a_masked_job(stuck):
    scorer = LearnedScorer(rl_model(5))
    jobs = window(stuck.jobs, 0, 256)
    cluster = Cluster.from_swf_header(stuck.max_nodes, stuck.max_procs)
    from coscheduler.sim.engine import replay_steps

    steps = replay_steps(jobs, cluster, scorer, "none")
    picks = 0
    try:
        view = next(steps)
        while True:
            pos = scorer.choose(view)
            assert action_mask(view, "runnable")[pos]
            picks += 1
            view = steps.send(pos)
    except StopIteration:
        pass
    assert picks > 100


def test_rl_observation_is_normalised():
    view = machine_view(50_000.0, [(0, 3, 100_000), (49_000, 1, 60)], free_nodes=1,
                        total_nodes=4, running=[(60_000.0, 3)])
    obs, n = rl_observation(view, Normalisation(estimate_s=3600.0), 4)
    assert n == 2 and obs.shape == (4, len(RL_FEATURES))
    assert np.all((obs >= 0) & (obs < 1))
    assert not obs[2:].any()  # padding rows are zero


def test_ray_executor_without_ray_says_how_to_install(monkeypatch):
    import builtins

    from coscheduler.learned.rollout import make_executor
    from coscheduler.model import InvalidInput

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(InvalidInput, match=r"pip install '\.\[ray\]'"):
        make_executor("ray", 2)
    with pytest.raises(InvalidInput, match="unknown executor 'dask'"):
        make_executor("dask", 2)


def test_rollouts_in_worker_processes_equal_serial_ones(stuck):
    from coscheduler.learned.rollout import RolloutTask, collect, make_executor

    model = rl_model(9)
    tasks = [RolloutTask("rlscheduler", stuck.path, [s], 256, "none", model.params,
                         Normalisation(estimate_s=3000.0).as_dict(), seed=s) for s in (0, 300)]
    pool = make_executor("processes", 2)
    try:
        parallel = pool.map(tasks)
    finally:
        pool.close()
    serial = [collect(t) for t in tasks]
    for a, b in zip(parallel, serial):
        assert np.array_equal(a[0].actions, b[0].actions) and a[0].reward == b[0].reward
