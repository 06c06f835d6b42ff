"""Training the learned schedulers (needs the rl extra: JAX, optax, gymnasium).

Real training on a small synthetic trace where one order is clearly best, the gymnasium
environments under gymnasium's own checker, numpy inference against JAX's forward pass,
and determinism for a seed. JAX runs in child processes only (``learned_helpers``): it is
multi-threaded, and other tests fork."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium", reason="needs the rl extra: pip install '.[rl]'")
if importlib.util.find_spec("jax") is None:
    pytest.skip("needs the rl extra: pip install '.[rl]'", allow_module_level=True)

from gymnasium.utils.env_checker import check_env  # noqa: E402

from coscheduler.learned import envs  # noqa: E402 - registers the environments
from coscheduler.learned.modelfile import load_model  # noqa: E402
from coscheduler.learned.nets import (inspector_init, inspector_start, kernel_scores,  # noqa: E402
                                      mlp, rl_init)
from coscheduler.learned.selectors import LearnedScorer  # noqa: E402
from coscheduler.learned.train import checkpoint_path  # noqa: E402
from coscheduler.policies import get_policy  # noqa: E402
from coscheduler.sim import read_swf  # noqa: E402

from learned_helpers import (jax_forward_in_subprocess, train_in_subprocess,  # noqa: E402
                             write_stuck_shorts_trace)
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
                pi_iters=20, v_iters=20, validate_every=3, validation_windows=2,
                evaluate=False)
    base.update(kw)
    return base


def test_a_few_epochs_learn_short_first_and_beat_fcfs(tmp_path, trace_path):
    # the reference environment here (its sampling stream); the batched one is trained in
    # tests/test_learned_batchenv.py
    result = train_in_subprocess(_config(tmp_path, trace_path, env="reference"))
    model = load_model(result["path"], "rlscheduler")   # numpy alone
    trace = read_swf(trace_path)
    _, fcfs = replay(trace, get_policy("FCFS"), start=800, count=512)
    _, learned = replay(trace, LearnedScorer(model), start=800, count=512)
    _, sjf = replay(trace, get_policy("SJF"), start=800, count=512)
    assert learned.avg_bsld < 0.5 * fcfs.avg_bsld, (learned.avg_bsld, fcfs.avg_bsld)
    assert learned.avg_bsld < 2 * sjf.avg_bsld
    # the sampling policy itself moved towards short-first during these epochs
    rows = result["curve"]
    assert rows[-1]["mean_value"] < 0.85 * rows[0]["mean_value"], rows
    assert model.header["epochs"] == 6
    from pathlib import Path

    assert Path(result["path"]).stat().st_size < 1_000_000
    assert result["plot"] and Path(result["plot"]).stat().st_size > 1000


def test_training_is_deterministic_for_a_seed_and_resumes(tmp_path, trace_path):
    a = train_in_subprocess(_config(tmp_path / "a", trace_path, epochs=3))
    b = train_in_subprocess(_config(tmp_path / "b", trace_path, epochs=3))
    ma, mb = load_model(a["path"]), load_model(b["path"])
    for k in ma.params:
        assert np.array_equal(ma.params[k], mb.params[k]), k
    # resuming the 3-epoch run to 4 epochs equals a fresh 4-epoch run
    c = train_in_subprocess(_config(tmp_path / "b", trace_path, epochs=4), resume=True)
    d = train_in_subprocess(_config(tmp_path / "d", trace_path, epochs=4))
    assert c["resumed_from"] == 3 and checkpoint_path(c["path"]).exists()
    assert [r.get("mean_value") for r in c["curve"]] == [r.get("mean_value") for r in d["curve"]]


def test_numpy_inference_equals_jax_forward():
    rng = np.random.default_rng(4)
    params = rl_init(rng, 6)
    rows = rng.random((128, 6))
    ours = kernel_scores({k: v.astype(np.float64) for k, v in params.items()}, rows)
    theirs = jax_forward_in_subprocess(params, "rlscheduler", rows)
    assert np.max(np.abs(ours - theirs)) < 1e-6
    ip = inspector_init(rng, 9)
    x = rng.random((64, 9))
    ours = mlp({k: v.astype(np.float64) for k, v in ip.items()}, "pi", x)
    assert np.max(np.abs(ours - jax_forward_in_subprocess(ip, "inspector", x))) < 1e-6


def test_inspector_training_runs_and_keeps_a_validated_model(tmp_path, trace_path):
    result = train_in_subprocess(_config(tmp_path, trace_path, kind="inspector", base="FCFS",
                                         epochs=3, evaluate=True))
    f = result["figures"]
    assert f["base"] == "FCFS" and 0 <= f["rejection_ratio"] <= 1
    # the kept weights are the best validated ones (the accept-always start included)
    checked = [r["validation"] for r in result["curve"] if r.get("validation") is not None]
    assert result["header"]["validation"] <= min(checked) + 1e-9


def test_training_from_a_model_starts_at_its_weights(tmp_path, trace_path):
    first = train_in_subprocess(_config(tmp_path / "a", trace_path, epochs=3))
    # one more epoch from the trained model: its weights are the start (validated at
    # epoch 0, kept unless the new epoch validates better), no imitation warm start
    more = train_in_subprocess(_config(tmp_path / "b", trace_path, epochs=1,
                                       validate_every=1, imitate="F1",
                                       init=first["path"]))
    header = more["header"]
    assert header["init"]["model"] == "m.model" and header["init"]["epochs"] == 3
    assert header["imitate"] is None and not any("imitation" in r for r in more["curve"])
    start = more["curve"][0]
    assert start["epoch"] == 0 and start["init"] == "m.model"
    assert header["validation"] <= start["mean_value"] + 1e-9
    if header["kept_epoch"] == 0:
        kept, init = load_model(more["path"]), load_model(first["path"])
        for k in init.params:
            assert np.array_equal(kept.params[k], init.params[k]), k
    with pytest.raises(AssertionError, match="inspector model is needed"):
        train_in_subprocess(_config(tmp_path / "c", trace_path, kind="inspector",
                                    base="FCFS", epochs=1, init=first["path"]))


def test_an_inspector_trained_further_from_its_model_draws_its_curve(tmp_path, trace_path):
    """--init on an inspector puts a row without the base policy's mean (the starting
    model's validation) into the curve; drawing the curve once raised KeyError 'mean_base'
    after the model was saved, so `cosched train inspector --init` ended in a traceback."""
    first = train_in_subprocess(_config(tmp_path / "a", trace_path, kind="inspector",
                                        base="FCFS", epochs=2))
    more = train_in_subprocess(_config(tmp_path / "b", trace_path, kind="inspector",
                                       base="FCFS", epochs=1, validate_every=1,
                                       init=first["path"]))
    assert any("init" in r for r in more["curve"])
    assert more["plot"] is not None and Path(more["plot"]).stat().st_size > 0


def test_a_stopped_run_resumed_is_the_same_run(tmp_path, trace_path):
    """2 epochs, stop (--stop-after 2), resume for the 3rd: the same curve (sampled means,
    validations, losses) and bit-identical kept weights as 3 straight epochs."""
    cfg = _config(tmp_path / "r", trace_path, epochs=3, validate_every=1)
    first = train_in_subprocess({**cfg, "stop_after": 2})
    assert first["header"]["epochs"] == 2
    resumed = train_in_subprocess(cfg, resume=True)
    straight = train_in_subprocess(_config(tmp_path / "s", trace_path, epochs=3,
                                           validate_every=1))
    assert resumed["resumed_from"] == 2 and straight["resumed_from"] == 0
    keys = ("epoch", "mean_value", "validation", "steps", "pi_loss", "v_loss", "kl")
    assert [{k: r.get(k) for k in keys} for r in resumed["curve"]] == \
        [{k: r.get(k) for k in keys} for r in straight["curve"]]
    a, b = load_model(resumed["path"]), load_model(straight["path"])
    assert a.header["kept_epoch"] == b.header["kept_epoch"]
    for k in a.params:
        assert np.array_equal(a.params[k], b.params[k]), k
    # the gate report is written beside every model, the stopped run's too
    assert Path(resumed["path"]).with_name("m.report.json").is_file()


def test_an_inspector_start_rejects_with_the_given_probability():
    rng = np.random.default_rng(3)
    params = inspector_init(rng, 9)
    x = rng.random((2000, 9))

    def reject_share(p):
        z = mlp(p, "pi", x)
        z = z - z.max(axis=1, keepdims=True)
        return (np.exp(z[:, 1]) / np.exp(z).sum(axis=1)).mean()

    assert 0.2 < reject_share(params) < 0.8          # a random start: about half
    assert 0.04 < reject_share(inspector_start(params, 0.05)) < 0.06
    # only the last layer changes: the features still reach the logits
    start = inspector_start(params, 0.05)
    assert np.array_equal(start["pi/0/w"], params["pi/0/w"])
    assert np.ptp(mlp(start, "pi", x)[:, 1]) > 0
    with pytest.raises(ValueError, match="must lie in"):
        inspector_start(params, 1.0)


def test_an_inspector_trained_from_a_low_rejection_start_rejects_little(tmp_path, trace_path):
    cfg = dict(kind="inspector", base="FCFS", epochs=1, validate_every=1)
    low = train_in_subprocess(_config(tmp_path / "low", trace_path, start_reject=0.02, **cfg))
    rand = train_in_subprocess(_config(tmp_path / "rand", trace_path, **cfg))
    first_low = next(r for r in low["curve"] if r["epoch"] == 1)
    first_rand = next(r for r in rand["curve"] if r["epoch"] == 1)
    # rejections per sequence in the first epoch's rollouts
    assert first_low["rejections"] < first_rand["rejections"] / 4, (first_low, first_rand)
    assert low["header"]["start_reject"] == 0.02
    with pytest.raises(AssertionError, match="inspector trained from scratch"):
        train_in_subprocess(_config(tmp_path / "rl", trace_path, epochs=1, start_reject=0.1))


def test_a_long_run_keeps_a_small_curve_in_the_header():
    from coscheduler.learned.train import header_curve

    curve = [{"epoch": 0, "imitation": 1, "mean_value": 50.0}]
    curve += [{"epoch": e, "mean_value": 40.0 + e % 7, "steps": 1000, "pi_loss": 0.1,
               **({"validation": 45.0} if e % 5 == 0 else {})} for e in range(1, 2001)]
    rows = header_curve(curve)
    assert len(rows) <= 120 and rows[0] == {"epoch": 0, "imitation": 1, "mean_value": 50.0}
    assert rows[-1]["epoch"] == 2000 and "steps" not in rows[-1]
    assert [r["epoch"] for r in rows] == sorted(r["epoch"] for r in rows)
    short = curve[:31]   # a short run keeps every row
    assert [r["epoch"] for r in header_curve(short)] == list(range(31))


def test_an_inspector_warm_started_from_reject_blocked_answers_as_it_does(tmp_path, trace_path):
    """--imitate reject-blocked: the cloned network gives the teacher's answer (reject a
    pick that cannot start now) on the cloning rollouts' steps; the clone is validated at
    epoch 0 beside the accept-always network, and the kept model is the better of all."""
    from coscheduler.learned.teachers import reject_blocked

    result = train_in_subprocess(_config(tmp_path, trace_path, kind="inspector", base="SJF",
                                         epochs=1, validate_every=1, imitate="reject-blocked",
                                         imitate_epochs=2, pi_lr=1e-2, max_rejections=50))
    # the rejection budget it trained under is the model's (LearnedInspector reads it)
    assert result["header"]["normalisation"]["max_rejections"] == 50
    rows = [r for r in result["curve"] if "imitation" in r]
    assert [r["imitation"] for r in rows] == [1, 2]
    assert all(r["teacher"] == "reject-blocked" for r in rows)
    assert rows[-1]["agreement"] >= 0.95, rows
    # sure of the teacher's answer, not certain: PPO still samples the other one
    assert 0.75 < rows[-1]["teacher_probability"] < 0.97, rows
    start = next(r for r in result["curve"] if r.get("init") == "imitated reject-blocked")
    assert result["header"]["imitate"] == "reject-blocked"
    assert result["header"]["validation"] <= min(start["mean_value"], start["base_validation"]) + 1e-9
    # the teacher itself, on rows built by hand: only the runnable feature decides
    x = np.full((4, 9), 0.5)
    x[:, 5] = [1 - 1e-5, 1e-5, 1 - 1e-5, 1e-5]
    assert reject_blocked(x).tolist() == [0, 1, 0, 1]


def test_an_unknown_or_conflicting_inspector_warm_start_is_refused(tmp_path, trace_path):
    with pytest.raises(AssertionError, match="unknown inspector teacher 'always-no'"):
        train_in_subprocess(_config(tmp_path / "a", trace_path, kind="inspector", base="SJF",
                                    epochs=1, imitate="always-no"))
    with pytest.raises(AssertionError, match="not with --init or --start-reject"):
        train_in_subprocess(_config(tmp_path / "b", trace_path, kind="inspector", base="SJF",
                                    epochs=1, imitate="reject-blocked", start_reject=0.05))
