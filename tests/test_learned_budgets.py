"""Training budgets (issue 20): environment steps (``--max-steps``), wall time
(``--time-limit``) and epochs, whichever ends first, each over the whole run and its
resumptions; and the progress line per epoch. JAX runs in child processes only
(``learned_helpers``)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

if importlib.util.find_spec("jax") is None:
    pytest.skip("needs the rl extra: pip install '.[rl]'", allow_module_level=True)

from coscheduler.learned.modelfile import load_model  # noqa: E402
from coscheduler.learned.train import TrainConfig  # noqa: E402
from coscheduler.model import InvalidInput  # noqa: E402
from learned_helpers import train_in_subprocess, write_stuck_shorts_trace  # noqa: E402

PROGRESS = re.compile(r"^epoch (\d+)/(\d+): mean bsld [\d.]+, ([\d,]+) steps in [\d.]+ s "
                      r"\(([\d,]+) steps/s rolling out\), loss pi \S+ v \S+", re.M)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    return write_stuck_shorts_trace(tmp_path_factory.mktemp("swf") / "stuck.swf")


def _train_cli(trace, out, *extra):
    args = [sys.executable, "-m", "coscheduler.cli", "train", "rlscheduler", "--trace",
            str(trace), "--epochs", "3", "--trajectories", "2", "--sequence", "64",
            "--imitate", "none", "--no-eval", "--out", str(out), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def test_a_step_budget_stops_the_run_and_a_larger_one_resumes_it(tmp_path, trace_path):
    out = tmp_path / "m.model"
    r = _train_cli(trace_path, out, "--max-steps", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    lines = PROGRESS.findall(r.stderr)
    assert [(e, t) for e, t, _, _ in lines] == [("1", "3")], r.stderr   # one epoch, then stop
    first_steps = int(lines[0][2].replace(",", ""))
    assert first_steps > 1
    assert f"stopped after epoch 1 of 3 by the step budget ({first_steps:,} of 1 steps)" \
        in r.stdout, r.stdout
    header = load_model(out).header
    assert header["epochs"] == 1 and header["training_steps"] == first_steps
    assert header["budget"] == {"epochs": 3, "max_steps": 1, "time_limit_s": None}
    # a larger budget resumes the same run from its checkpoint, to its last epoch
    r = _train_cli(trace_path, out, "--max-steps", "1000000", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    later = PROGRESS.findall(r.stderr)
    assert [e for e, *_ in later] == ["2", "3"], r.stderr
    assert summary["resumed_from_epoch"] == 1 and summary["epochs"] == 3
    assert summary["training_steps"] == first_steps + sum(int(s.replace(",", ""))
                                                          for _, _, s, _ in later)


def test_a_time_limit_stops_after_the_epoch_that_passes_it_and_the_run_resumes(
        tmp_path, trace_path):
    cfg = dict(kind="rlscheduler", trace=str(trace_path), out=str(tmp_path / "t.model"),
               epochs=4, trajectories=2, sequence=64, seed=3, imitate=None, pi_iters=5,
               v_iters=5, validate_every=2, validation_windows=1, evaluate=False)
    stopped = train_in_subprocess({**cfg, "time_limit_s": 1e-3})
    assert stopped["header"]["epochs"] == 1
    assert stopped["header"]["budget"]["time_limit_s"] == 1e-3
    assert "validation" in stopped["curve"][-1], "the last epoch of a session is validated"
    resumed = train_in_subprocess(cfg, resume=True)
    assert resumed["resumed_from"] == 1 and resumed["header"]["epochs"] == 4


def test_bad_budgets_are_refused_by_name(tmp_path, trace_path):
    for bad in (0, -5, 2.5, True):
        with pytest.raises(InvalidInput, match=f"max_steps must be an integer >= 1, got {bad!r}"):
            TrainConfig(kind="rlscheduler", trace=str(trace_path),
                        out=str(tmp_path / "x.model"), max_steps=bad)
    r = _train_cli(trace_path, tmp_path / "y.model", "--max-steps", "0")
    assert r.returncode == 2 and "--max-steps" in r.stderr and "Traceback" not in r.stderr
