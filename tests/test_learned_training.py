"""Training the learned schedulers (needs the rl extra: JAX, optax, gymnasium).

Real training on a small synthetic trace where one order is clearly best, the gymnasium
environments under gymnasium's own checker, numpy inference against JAX's forward pass,
and determinism for a seed."""

from __future__ import annotations

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="needs the rl extra: pip install '.[rl]'")
jax = pytest.importorskip("jax", reason="needs the rl extra: pip install '.[rl]'")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from coscheduler.learned import envs  # noqa: E402,F401 - registers the environments
from coscheduler.learned.modelfile import load_model  # noqa: E402
from coscheduler.learned.nets import inspector_init, kernel_scores, mlp, rl_init  # noqa: E402
from coscheduler.learned.ppo import _mlp, rl_row_scores  # noqa: E402
from coscheduler.learned.selectors import LearnedScorer  # noqa: E402
from coscheduler.learned.train import TrainConfig, checkpoint_path, train  # noqa: E402
from coscheduler.policies import get_policy  # noqa: E402
from coscheduler.sim import read_swf  # noqa: E402

from learned_helpers import write_stuck_shorts_trace  # noqa: E402
from test_learned_models import replay  # noqa: E402


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return write_stuck_shorts_trace(tmp_path_factory.mktemp("swf") / "stuck.swf")


def test_scheduling_env_passes_gymnasium_checker(trace_path):
    env = gym.make(envs.SCHEDULING_ID, trace=str(trace_path))
    check_env(env.unwrapped, skip_render_check=True)
    env = gym.make("coscheduler.learned.envs:coscheduler/Scheduling-v0", trace=str(trace_path),
                   backfill="easy", mask="padding")
    check_env(env.unwrapped, skip_render_check=True)


def test_inspector_env_passes_gymnasium_checker(trace_path):
    env = gym.make(envs.INSPECTOR_ID, trace=str(trace_path), base="F1")
    check_env(env.unwrapped, skip_render_check=True)


def test_env_never_takes_a_masked_action(trace_path):
    env = envs.SchedulingEnv(str(trace_path))
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    done, steps, refused = False, 0, 0
    while not done:
        mask = info["action_mask"]
        masked = np.flatnonzero(~mask)
        if len(masked) and rng.random() < 0.3:
            before = env.episode.steps
            obs2, r, done, _, info2 = env.step(int(rng.choice(masked)))
            assert info2["invalid_action"] and env.episode.steps == before and r == 0.0
            assert np.array_equal(obs2, obs)
            refused += 1
            continue
        obs, r, done, _, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        steps += 1
    assert refused > 0 and steps > 100 and r < 0
    assert info["metrics"]["jobs"] == 256


def _config(tmp_path, trace, **kw):
    base = dict(kind="rlscheduler", trace=str(trace), out=str(tmp_path / "m.model"),
                epochs=6, trajectories=6, seed=7, workers=1, pi_lr=3e-3, imitate=None,
                pi_iters=20, v_iters=20, validate_every=3, validation_windows=2)
    base.update(kw)
    return TrainConfig(**base)


def test_a_few_epochs_learn_short_first_and_beat_fcfs(tmp_path, trace_path):
    result = train(_config(tmp_path, trace_path, evaluate=False), resume=False)
    trace = read_swf(trace_path)
    _, fcfs = replay(trace, get_policy("FCFS"), start=800, count=512)
    _, learned = replay(trace, LearnedScorer(result.model), start=800, count=512)
    _, sjf = replay(trace, get_policy("SJF"), start=800, count=512)
    assert learned.avg_bsld < 0.5 * fcfs.avg_bsld, (learned.avg_bsld, fcfs.avg_bsld)
    assert learned.avg_bsld < 2 * sjf.avg_bsld
    # the sampling policy itself moved towards short-first during these epochs
    ppo_rows = [r for r in result.curve if "imitation" not in r]
    assert ppo_rows[-1]["mean_value"] < 0.85 * ppo_rows[0]["mean_value"], ppo_rows
    assert result.path.stat().st_size < 1_000_000
    assert result.plot is not None and result.plot.stat().st_size > 1000
    # the file loads with numpy alone and scores as the trained weights do
    assert load_model(result.path).header["epochs"] == 6


def test_training_is_deterministic_for_a_seed_and_resumes(tmp_path, trace_path):
    a = train(_config(tmp_path / "a", trace_path, epochs=3, evaluate=False), resume=False)
    b = train(_config(tmp_path / "b", trace_path, epochs=3, evaluate=False), resume=False)
    for k in a.model.params:
        assert np.array_equal(a.model.params[k], b.model.params[k]), k
    # resuming a 3-epoch run to 4 epochs equals a fresh 4-epoch run
    c = train(_config(tmp_path / "b", trace_path, epochs=4, evaluate=False), resume=True)
    d = train(_config(tmp_path / "d", trace_path, epochs=4, evaluate=False), resume=False)
    assert c.resumed_from == 3 and checkpoint_path(c.path).exists()
    assert [r.get("mean_value") for r in c.curve] == [r.get("mean_value") for r in d.curve]


def test_numpy_inference_equals_jax_forward():
    rng = np.random.default_rng(4)
    params = rl_init(rng, 6)
    rows = rng.random((128, 6))
    ours = kernel_scores({k: v.astype(np.float64) for k, v in params.items()}, rows)
    theirs = np.asarray(rl_row_scores({k: jax.numpy.asarray(v) for k, v in params.items()},
                                      jax.numpy.asarray(rows, dtype=jax.numpy.float32)))
    assert np.max(np.abs(ours - theirs)) < 1e-6
    ip = inspector_init(rng, 9)
    x = rng.random((64, 9))
    ours = mlp({k: v.astype(np.float64) for k, v in ip.items()}, "pi", x)
    theirs = np.asarray(_mlp({k: jax.numpy.asarray(v) for k, v in ip.items()}, "pi",
                             jax.numpy.asarray(x, dtype=jax.numpy.float32)))
    assert np.max(np.abs(ours - theirs)) < 1e-6


def test_inspector_training_runs_and_keeps_a_validated_model(tmp_path, trace_path):
    cfg = _config(tmp_path, trace_path, kind="inspector", base="FCFS", epochs=3, evaluate=True)
    result = train(cfg, resume=False)
    f = result.figures
    assert f["base"] == "FCFS" and 0 <= f["rejection_ratio"] <= 1
    # the kept weights are the best validated ones: never worse there than the start
    assert result.model.header["validation"] <= result.curve[-1].get("validation", np.inf) + 1e-9
