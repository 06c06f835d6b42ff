"""The batched RLScheduler environment (learned/batchenv.py) against the reference one
(learned/episode.py over the simulator engine): the same decisions, step by step, give
the same observations, masks, start and end times and metrics. numpy only."""

from __future__ import annotations

import numpy as np
import pytest

from coscheduler.data import swf_trace
from coscheduler.learned.batchenv import BatchSchedulingEnv
from coscheduler.learned.episode import SchedulingEpisode
from coscheduler.learned.features import Normalisation
from coscheduler.learned.nets import kernel_scores, masked_log_softmax, rl_init
from coscheduler.learned.rollout import RolloutTask, collect
from coscheduler.model import InvalidInput
from coscheduler.sim.cluster import Cluster
from coscheduler.sim.replay import window
from coscheduler.sim.swf import TraceJob, read_swf


@pytest.fixture(scope="module")
def lublin():
    trace = read_swf(swf_trace("lublin_256.swf"))
    return trace, Cluster.from_swf_header(trace.max_nodes, trace.max_procs)


def messy_jobs(seed: int, n: int = 160) -> list:
    """4 nodes of 4 processors; submits out of order with ties, estimates both above and
    below run times (jobs outlive them: estimated ends in the past)."""
    rng = np.random.default_rng(seed)
    jobs = []
    for k in range(n):
        run = float(rng.integers(1, 4000))
        jobs.append(TraceJob(k, k + 1, float(rng.integers(0, 20_000) // 50 * 50), run,
                             int(rng.integers(1, 17)), float(max(1, run * rng.uniform(0.3, 3))),
                             int(rng.integers(0, 5))))
    return jobs


def replay_both(jobs: list, cluster: Cluster, backfill: str, mask: str, seed: int,
                max_procs: int, env: BatchSchedulingEnv, slot: int) -> int:
    """Drive both with the same random allowed picks; assert equality at every step."""
    rng = np.random.default_rng(seed)
    norm = Normalisation(estimate_s=5000.0)
    ref = SchedulingEpisode(jobs, cluster, backfill, max_procs=max_procs, mask=mask, norm=norm)
    asking = ref.reset()
    assert env.load(slot, jobs) == asking
    steps = 0
    while asking:
        o = env.observe()
        i = int(np.flatnonzero(o.active == slot)[0])
        rows = slice(o.starts[i], o.starts[i] + o.counts[i])
        obs, allowed = ref.observe()
        n = int(o.counts[i])
        assert np.array_equal(obs[:n], o.rows[rows]), f"step {steps}: observations differ"
        assert np.array_equal(allowed[:n], o.allowed[rows]) and not allowed[n:].any()
        pos = int(rng.choice(np.flatnonzero(allowed)))
        ref.step(pos)
        asking = env.step(slot, pos)
        assert asking == (not ref.done)
        steps += 1
    start, end = env.schedule(slot)
    assert start == ref.schedule.start and end == ref.schedule.end
    assert env.metrics(slot) == ref.metrics
    return steps


@pytest.mark.parametrize("backfill", ["none", "easy"])
@pytest.mark.parametrize("mask", ["runnable", "padding"])
def test_same_decisions_same_schedule_on_lublin(lublin, backfill, mask):
    trace, cluster = lublin
    env = BatchSchedulingEnv(cluster, 3, 256, backfill, max_procs=trace.max_procs, mask=mask,
                             norm=Normalisation(estimate_s=5000.0))
    total = 0
    for seed, start in enumerate((0, 777, 2100)):
        # the other slots hold sequences in flight: a slot's state must stay its own
        jobs = window(trace.jobs, start, 256)
        total += replay_both(jobs, cluster, backfill, mask, seed, trace.max_procs, env, seed)
    assert total > 200


@pytest.mark.parametrize("backfill", ["none", "easy"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_same_decisions_same_schedule_on_a_messy_trace(backfill, seed):
    cluster = Cluster(nodes=4, procs_per_node=4)
    mask = "padding" if seed % 2 else "runnable"
    env = BatchSchedulingEnv(cluster, 1, 160, backfill, max_procs=16, mask=mask,
                             norm=Normalisation(estimate_s=5000.0))
    assert replay_both(messy_jobs(seed), cluster, backfill, mask, seed, 16, env, 0) > 20


def test_slots_step_together_and_refill(lublin):
    """Several slots asking at once, answered in one observation each round."""
    trace, cluster = lublin
    env = BatchSchedulingEnv(cluster, 4, 256, "easy", max_procs=trace.max_procs)
    refs = []
    for k, s in enumerate((10, 400, 900, 1600)):
        jobs = window(trace.jobs, s, 256)
        env.load(k, jobs)
        ep = SchedulingEpisode(jobs, cluster, "easy", max_procs=trace.max_procs)
        ep.reset()
        refs.append(ep)
    rounds = 0
    while env.asking.any():
        o = env.observe()
        assert len(o.active) == sum(not ep.done for ep in refs)
        for i, slot in enumerate(o.active.tolist()):
            _, allowed = refs[slot].observe()
            pos = int(np.flatnonzero(allowed)[-1])   # the last allowed job
            refs[slot].step(pos)
            env.step(slot, pos)
        rounds += 1
    assert rounds > 10
    for k, ep in enumerate(refs):
        assert env.metrics(k) == ep.metrics


def test_bad_answers_and_settings_are_clear_errors(lublin):
    trace, cluster = lublin
    with pytest.raises(InvalidInput, match="backfill"):
        BatchSchedulingEnv(cluster, 1, 10, "conservative")
    env = BatchSchedulingEnv(cluster, 1, 256)
    with pytest.raises(InvalidInput, match="not waiting"):
        env.step(0, 0)
    env.load(0, window(trace.jobs, 0, 256))
    with pytest.raises(InvalidInput, match="outside the window"):
        env.step(0, 500)
    with pytest.raises(InvalidInput, match="256-job batch"):
        env.load(0, window(trace.jobs, 0, 300))


@pytest.mark.parametrize("backfill", ["none", "easy"])
def test_batched_rollouts_are_well_formed_and_deterministic(backfill):
    """Trajectories from the batched path: per step, the stored rows, the action and its
    log-probability agree with the numpy policy; the same seed gives the same result."""
    params = rl_init(np.random.default_rng(4), 6)
    path = str(swf_trace("lublin_256.swf"))
    task = RolloutTask("rlscheduler", path, [0, 300, 600, 900, 1200], 256, backfill, params,
                       Normalisation().as_dict(), seed=3)
    a, b = collect(task), collect(task)
    ref = collect(RolloutTask(**{**task.__dict__, "env": "reference"}))
    for t, u, r in zip(a, b, ref):
        assert np.array_equal(t.actions, u.actions) and t.value == u.value
        assert len(t.actions) == len(t.counts) == len(t.pooled) == len(t.logp) > 0
        assert t.obs.shape == (int(t.counts.sum()), 6)
        assert t.pooled.shape[1] == 14 and t.reward == -t.value
        row = 0
        for k, c in enumerate(t.counts):
            lp = masked_log_softmax(kernel_scores(params, t.obs[row:row + c].astype(float)),
                                    np.ones(c, bool))
            assert 0 <= t.actions[k] < c
            assert abs(lp[t.actions[k]] - t.logp[k]) < 1e-4
            row += c
        # the same sequence on the reference path: as many steps without backfilling
        # (one per job), the same kind of outcome
        if backfill == "none":
            assert len(t.actions) == len(r.actions) == 256
        assert np.isfinite(r.value) and r.value >= 1


def test_training_on_the_batched_environment_learns_short_first(tmp_path):
    """A short training run whose rollouts and validations use the batched environment
    (the default): the kept model beats FCFS on later windows, the sampling policy moves."""
    import importlib.util
    if importlib.util.find_spec("jax") is None:
        pytest.skip("needs the rl extra: pip install '.[rl]'")
    from coscheduler.learned.modelfile import load_model
    from coscheduler.learned.selectors import LearnedScorer
    from coscheduler.policies import get_policy

    from learned_helpers import train_in_subprocess, write_stuck_shorts_trace
    from test_learned_models import replay

    trace_path = write_stuck_shorts_trace(tmp_path / "stuck.swf")
    result = train_in_subprocess(dict(
        kind="rlscheduler", trace=str(trace_path), out=str(tmp_path / "m.model"), epochs=6,
        trajectories=6, seed=7, workers=1, pi_lr=3e-3, imitate=None, pi_iters=20,
        v_iters=20, validate_every=3, validation_windows=2, evaluate=False, env="batched"))
    model = load_model(result["path"], "rlscheduler")
    trace = read_swf(trace_path)
    _, fcfs = replay(trace, get_policy("FCFS"), start=800, count=512)
    _, learned = replay(trace, LearnedScorer(model), start=800, count=512)
    assert learned.avg_bsld < 0.5 * fcfs.avg_bsld, (learned.avg_bsld, fcfs.avg_bsld)
    rows = result["curve"]
    # six sequences an epoch: the sampled mean is noisy, so the best of the last three
    assert min(r["mean_value"] for r in rows[-3:]) < 0.85 * rows[0]["mean_value"], rows
    assert result["header"]["machine"] == {"nodes": 4, "procs_per_node": 1}


@pytest.mark.parametrize("backfill", ["none", "easy"])
def test_the_bench_measures_both_environments_on_the_same_decisions(lublin, backfill):
    from coscheduler.bench.learned import _batched_steps, _reference_steps

    trace, cluster = lublin
    starts = [0, 250, 500, 750]
    ref = _reference_steps(trace, cluster, starts, backfill)
    bat = _batched_steps(trace, cluster, starts, backfill)
    assert ref == bat and ref[0] > 100


def replay_inspector_both(jobs, cluster, base: str, backfill: str, seed: int, max_procs: int,
                          env, slot: int) -> int:
    from coscheduler.learned.episode import InspectorEpisode
    from coscheduler.policies import get_policy

    rng = np.random.default_rng(seed)
    ref = InspectorEpisode(jobs, cluster, get_policy(base), backfill, max_procs=max_procs)
    asking = ref.reset()
    assert env.load(slot, jobs) == asking
    steps = 0
    while asking:
        active, rows = env.observe()
        i = int(np.flatnonzero(active == slot)[0])
        # equal to rounding: the summed queue delay adds in another order
        assert np.allclose(ref.observe(), rows[i], rtol=1e-12, atol=1e-15), steps
        accept = bool(rng.random() < 0.6)
        ref.step(0 if accept else 1)
        asking = env.step(slot, accept)
        assert asking == (not ref.done)
        steps += 1
    start, end = env.schedule(slot)
    assert start == ref.schedule.start and end == ref.schedule.end
    assert env.metrics(slot) == ref.metrics
    reward, bsld, base_bsld, rejections = env.reward(slot)
    assert (reward, base_bsld, rejections) == (ref.reward(), ref.base_bsld, ref.rejections)
    return steps


@pytest.mark.parametrize("backfill", ["none", "easy"])
@pytest.mark.parametrize("base", ["SJF", "F1"])
def test_batched_inspector_equals_the_reference(lublin, base, backfill):
    from coscheduler.learned.batchinspect import BatchInspectorEnv
    from coscheduler.policies import get_policy

    trace, cluster = lublin
    env = BatchInspectorEnv(cluster, 2, 256, get_policy(base), backfill,
                            max_procs=trace.max_procs)
    steps = sum(replay_inspector_both(window(trace.jobs, s, 256), cluster, base, backfill, k,
                                      trace.max_procs, env, k)
                for k, s in enumerate((50, 1900)))
    assert steps > 300
    messy = BatchInspectorEnv(Cluster(4, 4), 1, 160, get_policy(base), backfill, max_procs=16)
    assert replay_inspector_both(messy_jobs(5), Cluster(4, 4), base, backfill, 9, 16,
                                 messy, 0) > 20


def test_batched_inspector_refuses_a_time_dependent_base():
    from coscheduler.learned.batchinspect import BatchInspectorEnv
    from coscheduler.policies import get_policy

    with pytest.raises(InvalidInput, match="WFP3"):
        BatchInspectorEnv(Cluster(4), 1, 10, get_policy("WFP3"))


def test_batched_inspector_rollouts_are_well_formed():
    from coscheduler.learned.nets import inspector_init, mlp

    params = inspector_init(np.random.default_rng(2), 9)
    task = RolloutTask("inspector", str(swf_trace("lublin_256.swf")), [0, 500, 1000], 256,
                       "easy", params, Normalisation(estimate_s=36 * 3600.0).as_dict(), seed=5,
                       base="SJF")
    a, b = collect(task), collect(task)
    for t, u in zip(a, b):
        assert np.array_equal(t.actions, u.actions) and t.value == u.value
        assert t.obs.shape == (len(t.actions), 9) and len(t.actions) > 0
        z = mlp(params, "pi", t.obs.astype(float))
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        assert np.allclose(lp[np.arange(len(t.actions)), t.actions], t.logp, atol=1e-4)
        assert t.rejections == int((t.actions == 1).sum())
        assert t.reward == pytest.approx((t.base_value - t.value) / t.base_value)
