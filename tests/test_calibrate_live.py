"""`cosched calibrate --quick`: real stage programs under real cgroup quotas (root), and the
command's plain refusals without root or with a bad file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from coscheduler.cli import main

MEASURED = Path(__file__).resolve().parents[1] / "coscheduler" / "calibration" / "measured.json"


def cosched(*args):
    return CliRunner().invoke(main, list(args))


def test_calibrate_without_root_says_what_it_needs(monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    r = cosched("calibrate", "--quick")
    assert r.exit_code != 0 and "needs root" in r.output and "Traceback" not in r.output
    r = cosched("calibrate", "--quick", "--waiting")
    assert r.exit_code != 0 and "choose one" in r.output


def test_calibrate_refits_saved_figures_without_measuring(tmp_path):
    r = cosched("calibrate", "--from", str(MEASURED), "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert set(out) >= {"mode", "measurements", "fitted", "in_use", "check_fitted",
                        "check_in_use", "max_error_fitted", "max_error_in_use",
                        "rms_log_error_fitted", "rms_log_error_in_use", "held_out"}
    assert out["fitted"] == pytest.approx(out["in_use"], abs=0.02)
    held = out["held_out"]
    assert held["method"] == "leave-one-pair-out" and held["points"] == len(held["rows"]) >= 25
    assert 0 < held["rms_log_error"] <= 0.12
    text = cosched("calibrate", "--from", str(MEASURED))
    assert text.exit_code == 0 and "cpu at 50%" in text.output and "in use" in text.output
    assert "held-out rms log error" in text.output
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = cosched("calibrate", "--from", str(bad))
    assert r.exit_code != 0 and "not a calibration file" in r.output
    bad.write_text('{"alone": {}, "quota": [{"probe": "cpu"}], "pairs": []}')
    r = cosched("calibrate", "--from", str(bad))
    assert r.exit_code != 0 and f"{bad}: quota[0] has no 'quota'" in r.output


@pytest.mark.root
@pytest.mark.live
def test_quick_calibration_measures_real_quotas_and_leaves_no_cgroup(tmp_path):
    saved = tmp_path / "raw.json"
    r = cosched("calibrate", "--quick", "--json", "--save", str(saved))
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    raw = out["measurements"]
    assert json.loads(saved.read_text()) == raw
    points = {p["point"]: p for p in out["check_fitted"]}
    # A CPU-bound program at half its CPU takes about twice as long (a shared machine
    # blurs it: generous bounds); an I/O-waiting one at half its CPU hardly slows.
    assert 1.4 <= points["cpu at 50%"]["measured"] <= 2.8, points["cpu at 50%"]
    assert points["mixed at 50%"]["measured"] <= 1.4, points["mixed at 50%"]
    assert points["mixed at 20%"]["measured"] > points["mixed at 50%"]["measured"]
    assert raw["alone"]["cpu"] and all(x["cpu_s"] > 0 for x in raw["alone"]["cpu"])
    # The one pair (the sleepy probe beside a CPU-bound one) is checked left out of the fit,
    # and the load was recorded at every round.
    assert out["held_out"]["points"] == 1 and out["held_out"]["rms_log_error"] >= 0
    assert len(raw["load"]) == raw["repeats"] + 1
    # Every calibration cgroup is gone.
    for base in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")):
        assert not list(base.glob(f"cosched-calib-{os.getpid()}-*"))


@pytest.mark.root
@pytest.mark.live
def test_shared_cpu_pairs_run_free_on_every_cpu_and_fit_spill():
    """``--spread``'s experiment, one round: a probe beside one CPU-bound loop, both free
    on every CPU of the machine, is recorded as a shared-CPUs pair that the fit reads."""
    from coscheduler.backends.interference import CALIBRATED
    from coscheduler.calibration import fit as fitting
    from coscheduler.calibration.measure import Settings, measure

    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("one CPU: nothing to spread over")
    settings = Settings(repeats=1, quotas={"mixed": (0.5,), "cpu": (0.5,)},
                        same_core=(("mixed", "cpu", 0.5),),
                        cross_core=(), shared=(("io", "cpu", 1),))
    raw = measure(settings).to_dict()
    shared = [p for p in raw["pairs"] if p["placement"] == "shared-cpus"]
    assert len(shared) == 1 and shared[0]["cpus"] == cpus and shared[0]["copies"] == 1
    assert shared[0]["elapsed_s"] > 0 and shared[0]["ref_elapsed_s"] > 0
    fitting.validate(raw, "one round")
    pool = [p for p in fitting.points(raw) if p.pool]
    assert pool and pool[0].pool == cpus
    assert 0.0 <= fitting.fit(raw, CALIBRATED, only=("spill",)).spill <= 1.0
    for base in (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")):
        assert not list(base.glob(f"cosched-calib-{os.getpid()}-*"))
