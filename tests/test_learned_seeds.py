"""Several seeds for RLScheduler and SchedInspector training (issue 20): one model per
seed, the best kept by its figure against the best heuristic on its own validation
windows. The training runs in a child process (JAX must not load in the test process)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from coscheduler.learned.seeds import choose_seed, seed_path, seed_rank
from coscheduler.model import InvalidInput


def test_the_seed_best_against_the_best_heuristic_is_kept():
    reports = {1: {"vs_best": 0.04}, 2: {"vs_best": -0.03}, 3: {"vs_best": -0.03},
               4: {"vs_best": float("nan")}}
    assert choose_seed(reports) == 2                      # lowest; the lower seed on a tie
    util = {1: {"vs_best": 0.04, "higher_is_better": True},
            2: {"vs_best": -0.03, "higher_is_better": True}}
    assert choose_seed(util) == 1                         # utilisation: higher is better
    assert seed_rank({"vs_best": None}) == float("inf")
    with pytest.raises(InvalidInput, match="no seeds"):
        choose_seed({})
    assert seed_path("/x/hpc2n-easy.model", 3).name == "hpc2n-easy-seed3.model"


@pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                    reason="needs the rl extra: pip install '.[rl]'")
def test_train_seeds_writes_each_seed_and_keeps_the_chosen_one(tmp_path):
    from coscheduler.learned.gate import read_verdict
    from coscheduler.learned.modelfile import load_model
    from learned_helpers import write_stuck_shorts_trace

    trace = write_stuck_shorts_trace(tmp_path / "stuck.swf")
    out = tmp_path / "m.model"
    base = [sys.executable, "-m", "coscheduler.cli", "train", "rlscheduler", "--trace",
            str(trace), "--epochs", "1", "--trajectories", "2", "--sequence", "64",
            "--imitate", "none", "--no-eval", "--out", str(out)]
    r = subprocess.run(base + ["--seeds", "1-2", "--json"], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    reports = {k: json.loads((tmp_path / f"m-seed{k}.report.json").read_text()) for k in (1, 2)}
    assert reports[1]["validation_windows"]["starts"] != reports[2]["validation_windows"]["starts"]
    kept = choose_seed(reports)
    assert summary["kept_seed"] == kept and set(summary["seed_validation"]) == {"1", "2"}
    model, chosen = load_model(out), load_model(seed_path(out, kept))
    assert model.header["seed"] == kept and model.header["kept_seed"] == kept
    for k in chosen.params:
        assert np.array_equal(model.params[k], chosen.params[k]), k
    verdict, report = read_verdict(out)
    assert verdict in ("pass", "fail") and report["vs_best"] == reports[kept]["vs_best"]
    assert "seed 1: validation" in r.stderr and "seed 2: validation" in r.stderr
    # --seed beside --seeds, and a bad list: one-line usage errors
    r = subprocess.run(base + ["--seeds", "1-2", "--seed", "3"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2 and "give --seed or --seeds" in r.stderr
    r = subprocess.run(base + ["--seeds", "2-1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--seeds" in r.stderr and "Traceback" not in r.stderr
