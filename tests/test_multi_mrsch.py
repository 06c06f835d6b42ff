"""MRSch: features, Eq. (1), the network (numpy = JAX), model files, the agent in the
engine, and a short training run with the project's own trainer."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.model import InvalidInput
from coscheduler.multi import mrsch
from coscheduler.multi import workload as mw
from coscheduler.multi.report import evaluation_part, run_method
from coscheduler.multi.train import targets
from coscheduler.policies.selection import ChoiceView
from coscheduler.sim import Cluster, TraceJob, read_swf, simulate
from coscheduler.sim.resources import PoolModel



def view(**kw) -> ChoiceView:
    base = dict(kind="pick", now=1000.0, free_nodes=2, total_nodes=8, procs_per_node=1,
                jobs=np.array([0, 1]), submit=np.array([400.0, 1000.0]),
                procs=np.array([2, 4]), estimate=np.array([100.0, 300.0]),
                need=np.array([2, 4]), running_end=np.array([1100.0, 1600.0]),
                running_need=np.array([2, 4]), queue_length=2)
    base.update(kw)
    v = ChoiceView(**base)
    v.extra = {"pool_names": ("burst_buffer",), "pool_cap": np.array([100]),
               "pool_free": np.array([40]), "pool_take": np.array([[30], [50]]),
               "running_take": np.array([[20], [40]]), "queue_need": np.array([2, 4]),
               "queue_take": np.array([[30], [50]]), "queue_estimate": np.array([100.0, 300.0])}
    return v


def test_goal_vector_is_equation_1():
    v = view()
    # node demand: running 2/8*100 + 4/8*600, queued 2/8*100 + 4/8*300
    nodes = 2 / 8 * 100 + 4 / 8 * 600 + 2 / 8 * 100 + 4 / 8 * 300
    bb = 0.2 * 100 + 0.4 * 600 + 0.3 * 100 + 0.5 * 300
    g = mrsch.goal_vector(v)
    assert np.allclose(g, [nodes / (nodes + bb), bb / (nodes + bb)])
    assert np.isclose(g.sum(), 1.0)
    assert np.allclose(mrsch.measurement(v), [1 - 2 / 8, 1 - 40 / 100])


def test_state_features_shape_and_units():
    v = view()
    s = mrsch.state_features(v)
    assert s.shape == (mrsch.state_size(8, 1),)
    assert ((s >= 0) & (s <= 1)).all()
    w = mrsch.WINDOW * 4
    avail, times = s[w:w + 8], s[w + 8:w + 16]
    assert avail.tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # 2 free nodes first
    # the next two free at the first end (100 s), the last four at the second (600 s)
    assert times[2] == times[3] < times[4] == times[7]
    bb_avail = s[w + 16:w + 16 + mrsch.POOL_UNITS]
    assert bb_avail.sum() == int(40 / (100 / mrsch.POOL_UNITS))  # 40 of 100 free


def test_numpy_forward_equals_jax():
    # JAX is multi-threaded: it runs in a child process, as in the learned-scheduler tests
    rng = np.random.default_rng(0)
    params = mrsch.init_params(rng, 50, 3)
    s, m, g = rng.random((4, 50)), rng.random((4, 3)), rng.random((4, 3))
    ref = mrsch.forward({k: v.astype(np.float64) for k, v in params.items()}, s, m, g,
                        window=mrsch.WINDOW, measures=3)
    buf = io.BytesIO()
    np.savez(buf, __s=s, __m=m, __g=g, **{k.replace("/", "|"): v for k, v in params.items()})
    code = ("import io, sys, numpy as np, jax.numpy as jnp\n"
            "from coscheduler.multi import mrsch\n"
            "z = np.load(io.BytesIO(sys.stdin.buffer.read()))\n"
            "p = {k.replace('|', '/'): jnp.asarray(z[k]) for k in z.files if '__' not in k}\n"
            "a = [jnp.asarray(z[k], dtype=jnp.float32) for k in ('__s', '__m', '__g')]\n"
            "y = mrsch.forward(p, *a, window=mrsch.WINDOW, measures=3, xp=jnp)\n"
            "out = io.BytesIO(); np.save(out, np.asarray(y)); sys.stdout.buffer.write(out.getvalue())\n")
    proc = subprocess.run([sys.executable, "-c", code], input=buf.getvalue(),
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    got = np.load(io.BytesIO(proc.stdout))
    assert ref.shape == (4, mrsch.WINDOW, len(mrsch.OFFSETS), 3)
    assert np.allclose(got, ref, atol=1e-6)


def test_targets_are_future_changes_with_a_mask():
    meas = np.array([[0.1, 0.0], [0.3, 0.1], [0.6, 0.2]])
    y, v = targets(meas)
    assert np.allclose(y[0, 0], [0.2, 0.1]) and np.allclose(y[0, 1], [0.5, 0.2])
    assert v[0].tolist() == [1, 1, 0, 0, 0, 0] and v[2].sum() == 0


def train_cli(out: Path, episodes: str, lublin_swf: Path, resume: bool = False,
              extra: tuple[str, ...] = (), stderr: list | None = None) -> dict:
    """``cosched train mrsch`` in a child process (JAX must not load in the test process:
    it is multi-threaded and other tests fork)."""
    args = [sys.executable, "-m", "coscheduler.cli", "train", "mrsch", "--trace", str(lublin_swf),
            "--set", "S4", "--episodes", episodes, "--jobs-per-set", "128", "--steps", "4",
            "--batch", "16", "--out", str(out), "--json", *extra] + (["--resume"] if resume else [])
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if stderr is not None:
        stderr.append(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def smoke_model(tmp_path_factory, lublin_swf):
    """A short training run of the real command (all three phases) on lublin_256's S4."""
    out = tmp_path_factory.mktemp("models") / "mrsch-lublin_256-S4.model"
    header = train_cli(out, "1,1,1", lublin_swf)
    assert header["phases"] == {"sampled": 1, "real": 1, "synthetic": 1}
    return out, mrsch.load_model(out)


def test_training_writes_a_small_loadable_model(smoke_model):
    path, model = smoke_model
    assert path.stat().st_size < 1_000_000
    h = model.header
    assert h["kind"] == "mrsch" and h["set"] == "S4" and h["pools"] == ["burst_buffer"]
    assert h["episodes"] == 3 and h["framework"].startswith("jax")
    assert h["validation"]["jobs"] == 1000 and h["training_seconds"] > 0
    assert any(x is not None for x in h["losses"])  # gradient steps ran
    assert Path(str(path) + ".ckpt").exists()
    v = view(total_nodes=256, free_nodes=200)
    v.extra["pool_cap"] = np.array([73443])
    a = mrsch.MRSchAgent(model).scores(v)
    b = mrsch.MRSchAgent(mrsch.load_model(path)).scores(v)
    assert np.array_equal(a, b) and np.isfinite(a).all()


def test_the_window_is_cut_in_the_order_the_model_was_trained_with(smoke_model, lublin_swf):
    """MRSch's window is the W oldest jobs; a model trained with ``--window-order SJF`` (the
    project's variant) sees the W shortest estimates instead, and its header says so, as it
    says the classic orders' validation scores it is gated against."""
    from coscheduler.multi.train import HEURISTICS, TrainConfig
    from coscheduler.sim.resources import pool_model

    _, model = smoke_model
    assert model.header["window_order"] == "FCFS"
    assert set(model.header["validation_heuristics"]) == set(HEURISTICS)
    wl = evaluation_part(mw.generate(read_swf(lublin_swf), "S5", 1), 300)
    for order in ("FCFS", "SJF"):
        views = []

        class Spy(mrsch.MRSchAgent):
            def choose(self, v):
                if v.kind == "pick" and v.size > 1:
                    views.append((v.submit.copy(), v.estimate.copy()))
                return super().choose(v)

        variant = mrsch.MRSchModel(model.params, {**model.header, "window_order": order})
        simulate(wl.jobs, wl.cluster, Spy(variant), "easy",
                 pools=pool_model(wl.machine, wl.requests, wl.node_counts(), wl.max_nodes))
        assert views
        key = 0 if order == "FCFS" else 1
        assert all((np.diff(v[key]) >= 0).all() for v in views), order
        if order == "SJF":    # not the submit order: the variant really changes the window
            assert any((np.diff(v[0]) < 0).any() for v in views)
    with pytest.raises(InvalidInput, match="unknown window order 'oldest'"):
        TrainConfig(window_order="oldest")
    with pytest.raises(InvalidInput, match="unknown window order"):
        mrsch.MRSchAgent(mrsch.MRSchModel(model.params, {**model.header, "window_order": 3}))


def test_resume_continues_from_the_checkpoint(smoke_model, tmp_path, lublin_swf):
    path, model = smoke_model
    out = tmp_path / "m.model"
    ckpt = Path(str(path) + ".ckpt")
    Path(str(out) + ".ckpt").write_bytes(ckpt.read_bytes())
    # the checkpoint names its replay memory, which sits beside it
    memories = list(ckpt.parent.glob(ckpt.name + ".memory-*.npz"))
    assert [m.name for m in memories] == [ckpt.name + ".memory-3.npz"]
    copy = tmp_path / memories[0].name
    copy.write_bytes(memories[0].read_bytes()[:1000])      # truncated: named, no traceback
    args = [sys.executable, "-m", "coscheduler.cli", "train", "mrsch", "--trace",
            str(lublin_swf), "--set", "S4", "--episodes", "1,1,2", "--jobs-per-set", "128",
            "--out", str(out), "--resume"]
    bad = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert f"{copy}: the checkpoint's replay memory cannot be read" in bad.stderr
    copy.write_bytes(memories[0].read_bytes())
    header = train_cli(out, "1,1,2", lublin_swf, resume=True)
    assert header["episodes"] == 4
    # the three sets of the checkpoint are not trained again: their losses carry over
    losses = mrsch.load_model(out).header["losses"]
    assert len(losses) == 4 and losses[:3] == model.header["losses"]


def test_a_run_stopped_by_its_step_budget_and_resumed_is_the_run_never_stopped(
        smoke_model, tmp_path, lublin_swf):
    """Issue 20: resumed training continues the same run. The smoke run trained three job
    sets in one go; here a step budget stops the same command after the first set, and
    --resume finishes it. The replay memory, the random stream and Adam's moments carry
    over, so the weights and every set's loss are those of the run never stopped."""
    path, whole = smoke_model
    out = tmp_path / "mrsch-lublin_256-S4.model"
    log: list[str] = []
    first = train_cli(out, "1,1,1", lublin_swf, extra=("--max-steps", "1"), stderr=log)
    assert first["episodes"] == 1 and first["episodes_planned"] == 3
    assert first["stopped_by"] == "max_steps" and first["training_steps"] >= 1
    assert "set 1/3 (sampled)" in log[0] and "steps/s" in log[0]
    assert "stopped after job set 1 of 3 by the step budget" in log[0]
    assert mrsch.load_model(out).header["episodes"] == 1      # validated and written
    resumed = train_cli(out, "1,1,1", lublin_swf, resume=True)
    assert resumed["episodes"] == 3 and resumed["stopped_by"] is None
    assert resumed["training_steps"] == whole.header["training_steps"]
    model = mrsch.load_model(out)
    assert model.header["losses"] == whole.header["losses"]
    for k, w in whole.params.items():
        assert np.allclose(model.params[k], w, rtol=1e-6, atol=1e-7), k
    assert resumed["validation"] == whole.header["validation"]


_CRASH_AFTER_SET_2 = """
import os, sys
from coscheduler.multi import workload as mw
from coscheduler.multi.train import TrainConfig, train
from coscheduler.sim.swf import read_swf

def crash(done, total, info):
    if done == 2:
        os._exit(9)   # killed: no clean-up, no last write

wl = mw.generate(read_swf(sys.argv[1]), "S4", 1)
train(wl, sys.argv[2], TrainConfig(episodes=(1, 1, 1), jobs_per_set=128, steps_per_episode=4,
                                   batch=16, checkpoint_every_s=1e9), resume=True,
      progress=crash)
"""


def test_a_run_killed_between_checkpoints_resumes_from_the_last_one_as_never_stopped(
        smoke_model, tmp_path, lublin_swf):
    """Checkpoints are written on an interval (the replay memory is up to 170 MB), so a
    killed run loses the job sets after its last checkpoint and nothing else: resumed from
    it, it ends as the run never stopped."""
    path, whole = smoke_model
    out = tmp_path / "mrsch-lublin_256-S4.model"
    ckpt = Path(str(out) + ".ckpt")
    train_cli(out, "1,1,1", lublin_swf, extra=("--max-steps", "1"))   # checkpoint: set 1
    proc = subprocess.run([sys.executable, "-c", _CRASH_AFTER_SET_2, str(lublin_swf), str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 9, proc.stderr[-3000:]
    state = mrsch.load_model(ckpt).header["checkpoint"]
    assert state["episodes"] == 1     # set 2 ran, and was not written (within the interval)
    assert sorted(p.name for p in tmp_path.glob("*.memory-*.npz")) == [
        f"{ckpt.name}.memory-1.npz"]
    resumed = train_cli(out, "1,1,1", lublin_swf, resume=True)
    assert resumed["episodes"] == 3 and resumed["training_steps"] == whole.header["training_steps"]
    model = mrsch.load_model(out)
    assert model.header["losses"] == whole.header["losses"]
    for k, w in whole.params.items():
        assert np.allclose(model.params[k], w, rtol=1e-6, atol=1e-7), k
    # the end of a run is always written, whatever the interval
    assert mrsch.load_model(ckpt).header["checkpoint"]["episodes"] == 3


def test_budgets_of_train_mrsch_are_checked_at_parse_time(tmp_path, lublin_swf):
    from coscheduler.multi.train import TrainConfig

    base = ["train", "mrsch", "--trace", str(lublin_swf), "--set", "S4",
            "--out", str(tmp_path / "m.model")]
    for opt, bad in (("--max-steps", "0"), ("--max-steps", "x"), ("--time-limit", "0"),
                     ("--time-limit", "-2")):
        r = CliRunner().invoke(main, base + [opt, bad])
        assert r.exit_code == 2 and opt in r.output and "Traceback" not in r.output, (opt, bad)
    with pytest.raises(InvalidInput, match="max_steps must be an integer >= 1"):
        TrainConfig(max_steps=0)
    with pytest.raises(InvalidInput, match="time_limit_s must be a number > 0"):
        TrainConfig(time_limit_s=float("nan"))
    with pytest.raises(InvalidInput, match="checkpoint_every_s must be a number >= 0"):
        TrainConfig(checkpoint_every_s=float("inf"))
    r = CliRunner().invoke(main, base + ["--checkpoint-every", "-1"])
    assert r.exit_code == 2 and "--checkpoint-every" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize("mask", ["runnable", "padding"])
def test_agent_reserves_as_the_paper_and_respects_capacities(smoke_model, mask, lublin_swf):
    path, model = smoke_model
    assert model.header["mask"] == "padding" and model.header["backfill_choice"] is True
    wl = evaluation_part(mw.generate(read_swf(lublin_swf), "S4", 1), 300)
    picks = []

    class Spy(mrsch.MRSchAgent):
        def choose(self, v):
            k = super().choose(v)
            picks.append((v.kind, v.now, bool(v.runnable.any()), bool(v.runnable[k])))
            return k

    agent = Spy(model, mask=mask)
    nodes = wl.node_counts()
    from coscheduler.sim.resources import pool_model
    pools = pool_model(wl.machine, wl.requests, nodes, wl.max_nodes)
    s = simulate(wl.jobs, wl.cluster, agent, "easy", pools=pools)
    kinds = {p[0] for p in picks}
    assert kinds == {"pick", "backfill"}  # the agent chooses the backfilled jobs too
    assert all(ok for kind, _, _, ok in picks if kind == "backfill")
    if mask == "runnable":
        assert all(ok for kind, _, any_ok, ok in picks if kind == "pick" and any_ok)
    # a pick that does not fit is reserved: no further pick at that decision
    for (k1, t1, _, ok), (k2, t2, _, _) in zip(picks, picks[1:]):
        if k1 == "pick" and not ok:
            assert k2 == "backfill" or t2 > t1
    assert max(agent.timings) < 0.5
    ev = sorted([(e, 0, i) for i, e in enumerate(s.end)] + [(b, 1, i) for i, b in enumerate(s.start)])
    busy = bb = 0
    for _, is_start, i in ev:
        sign = 1 if is_start else -1
        busy += sign * nodes[i]
        bb += sign * pools.take[i][0]
        assert 0 <= busy <= 256 and 0 <= bb <= pools.capacity[0]


def test_bad_model_files_get_clear_errors(tmp_path, smoke_model):
    path, _ = smoke_model
    junk = tmp_path / "junk.model"
    junk.write_text("hello")
    with pytest.raises(mrsch.ModelError, match="junk.model: not a coscheduler model file"):
        mrsch.load_model(junk)
    other = tmp_path / "other.model"
    raw = path.read_bytes()
    other.write_bytes(raw.replace(b'"kind": "mrsch"', b'"kind": "inspector"', 1))
    with pytest.raises(mrsch.ModelError, match="other.model: is a 'inspector' model"):
        mrsch.load_model(other)
    cut = tmp_path / "cut.model"
    cut.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(mrsch.ModelError, match="cut.model: the model's weights cannot be read"):
        mrsch.load_model(cut)
    # a model trained for another machine refuses the replay, naming the file
    jobs = [TraceJob(i, i, 0.0, 10.0, 1, 10.0, 0) for i in range(2)]
    pools = PoolModel(("burst_buffer",), (10,), [(1,), (2,)])
    with pytest.raises(InvalidInput, match="trained for 256 nodes"):
        simulate(jobs, Cluster(4, 1), mrsch.MRSchAgent(mrsch.load_model(path)), "easy",
                 pools=pools)


def test_simulate_multi_cli_json_and_charts(smoke_model, tmp_path, lublin_swf):
    path, _ = smoke_model
    models = path.parent
    r = CliRunner().invoke(main, ["simulate", "multi", "--from", str(lublin_swf), "--sets", "S4",
                                  "--methods", "fcfs,sjf,optimiser,mrsch", "--jobs", "200",
                                  "--windows", "2",
                                  "--models", str(models), "--json", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    # two seed-1 windows of 200 held-out jobs (lublin_256: jobs 8,000-9,999)
    p = out["protocol"]
    assert p["kind"] == "windows" and p["jobs"] == 200 and len(p["starts"]) == 2
    assert all(8000 <= st <= 10000 - 200 for st in p["starts"])
    assert [x["method"] for x in out["results"]] == ["fcfs", "sjf", "optimiser", "mrsch"]
    by = {x["method"]: x for x in out["results"]}
    assert by["sjf"]["mean_wait_s"] != by["fcfs"]["mean_wait_s"]   # a different order ran
    for x in out["results"]:
        assert set(x) == {"set", "method", "node_util", "bb_util", "power_util",
                          "mean_wait_s", "mean_slowdown"}
        assert 0 < x["node_util"] <= 1 and 0 < x["bb_util"] <= 1 and x["power_util"] is None
    assert (tmp_path / "kiviat-S4.png").stat().st_size > 1000
    assert (tmp_path / "goal-trace-S4.png").stat().st_size > 1000
    r = CliRunner().invoke(main, ["simulate", "multi", "--from", str(lublin_swf), "--sets", "S4",
                                  "--methods", "fcfs", "--protocol", "stretch", "--jobs",
                                  "150", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["protocol"] == {"kind": "stretch", "jobs": 150}
    r = CliRunner().invoke(main, ["simulate", "multi", "--from", str(lublin_swf), "--sets", "S4",
                                  "--methods", "fcfs", "--jobs", "2000"])
    assert r.exit_code != 0 and "too few for 2000-job evaluation windows" in r.output
    r = CliRunner().invoke(main, ["simulate", "multi", "--from", str(lublin_swf), "--sets", "S4",
                                  "--methods", "scalar-rl", "--models", str(tmp_path)])
    assert r.exit_code != 0 and "no scalar-rl model for lublin_256.swf S4" in r.output
    r = CliRunner().invoke(main, ["simulate", "multi", "--from", str(lublin_swf), "--methods", "lifo"])
    assert r.exit_code != 0 and "unknown method 'lifo'" in r.output


def test_power_sets_check_the_budget(lublin_swf):
    wl = evaluation_part(mw.generate(read_swf(lublin_swf), "S9", 1), 300)
    run = run_method(wl, "fcfs")
    assert run.pool_names == ("burst_buffer", "power")
    assert 0 < run.metrics["power_util"] <= 1
    opt = run_method(wl, "optimiser")
    assert opt.decision_seconds and 0 < opt.metrics["power_util"] <= 1


def test_train_cli_refuses_bad_input(tmp_path, lublin_swf):
    r = CliRunner().invoke(main, ["train", "mrsch", "--trace", str(lublin_swf), "--set", "S4",
                                  "--episodes", "1,x,1", "--out", str(tmp_path / "m.model")])
    assert r.exit_code != 0 and "'1,x,1' is not three integers" in r.output
    r = CliRunner().invoke(main, ["train", "mrsch", "--trace", str(lublin_swf), "--set", "S4",
                                  "--episodes", "0,0,0", "--out", str(tmp_path / "m.model")])
    assert r.exit_code != 0 and "episodes per phase" in r.output
    r = CliRunner().invoke(main, ["train", "mrsch", "--trace", str(tmp_path / "none.swf"),
                                  "--set", "S4", "--out", str(tmp_path / "m.model")])
    assert r.exit_code != 0 and "none.swf" in r.output
    assert not (tmp_path / "m.model").exists()


def test_bench_multi_prints_the_decision_times(lublin_swf):
    r = CliRunner().invoke(main, ["bench", "multi", "--data-dir", str(lublin_swf.parent),
                                  "--jobs", "60", "--windows", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    ga = out["optimiser_w20_ga_worst_case"]
    assert ga["decisions"] == 1 and ga["median_ms"] > 0
    assert "median_ms" in out["mrsch"] or "skipped" in out["mrsch"]


GATED_SETS = ("S1", "S2", "S3", "S4", "S5")  # retrained under the paper's rules, chosen on validation


def test_shipped_models_under_todays_rules_score_what_their_headers_say(lublin_swf):
    """Every shipped multi-resource model trained under today's engine rules (its header
    has ``validation_score``) scores what its header says on the validation stretch, below
    0 (better than FCFS with EASY there), and the classic orders it is gated against score
    what its header says too (``report.gate_verdict``). S1-S5 are such models."""
    from coscheduler.multi.report import MODELS_DIR
    from coscheduler.multi.train import score_model

    trace = read_swf(lublin_swf)
    gated = []
    for path in sorted(MODELS_DIR.glob("*.model")):
        model = mrsch.load_model(path)
        h = model.header
        if "validation_score" not in h:
            continue
        assert h["mask"] == "padding" and h["backfill_choice"] is True, path.name
        got = score_model(mw.generate(trace, h["set"], h["workload_seed"]), model)
        assert got["score"] == pytest.approx(h["validation_score"], abs=1e-3), path.name
        assert got["score"] < 0, (path.name, got["score"])
        # The classic orders it is gated against, as its header recorded them.
        assert set(got["heuristics"]) == set(h["validation_heuristics"]), path.name
        for order, score in got["heuristics"].items():
            assert score == pytest.approx(h["validation_heuristics"][order], abs=1e-3), (path.name, order)
        gated.append((h["kind"], h["set"]))
    assert {("mrsch", s) for s in GATED_SETS} <= set(gated), gated


def test_seeds_parse_and_bad_lists_are_named():
    from coscheduler.multi.seeds import parse_seeds

    assert parse_seeds("1-3,7, 2") == [1, 2, 3, 7]
    for bad in ("x", "3-1", "-2", "1-5000", ""):
        with pytest.raises(InvalidInput, match="seeds"):
            parse_seeds(bad)


def test_training_several_seeds_keeps_the_best_on_validation(tmp_path, lublin_swf):
    """--seeds trains each seed (two processes at once) and keeps the lowest validation
    score; the other seeds' files are gone, the header lists every score."""
    out = tmp_path / "mrsch-lublin_256-S4.model"
    args = [sys.executable, "-m", "coscheduler.cli", "train", "mrsch", "--trace", str(lublin_swf),
            "--set", "S4", "--episodes", "1,0,0", "--jobs-per-set", "64", "--steps", "2",
            "--batch", "16", "--seeds", "3-4", "--workers", "2", "--out", str(out), "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    h = json.loads(proc.stdout.strip().splitlines()[-1])
    scores = {int(k): v for k, v in h["seed_scores"].items()}
    assert sorted(scores) == [3, 4]
    assert h["seed"] == min(scores, key=lambda k: (scores[k], k))
    assert h["validation_score"] == pytest.approx(scores[h["seed"]], abs=1e-4)
    assert h["name"] == "mrsch-lublin_256-S4"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        out.name, out.name + ".ckpt", out.name + ".ckpt.memory-1.npz"]
    state = mrsch.load_model(Path(str(out) + ".ckpt")).header["checkpoint"]
    assert state["memory"] == out.name + ".ckpt.memory-1.npz"   # --resume finds it
    assert "seed 3: validation score" in proc.stderr and "seed 4: validation score" in proc.stderr


def test_seeds_refuse_resume_and_bad_lists_in_one_line(tmp_path, lublin_swf):
    base = ["train", "mrsch", "--trace", str(lublin_swf), "--set", "S4",
            "--out", str(tmp_path / "m.model")]
    r = CliRunner().invoke(main, base + ["--seeds", "1-2", "--resume"])
    assert r.exit_code == 2 and "cannot be combined with --seeds" in r.output
    r = CliRunner().invoke(main, base + ["--seeds", "2-1"])
    assert r.exit_code == 1 and "seeds '2-1'" in r.output and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())
