"""The calibration fit (coscheduler/calibration/fit.py): it recovers known parameters from
measurements the model itself generated, checks itself on pairs left out, and refuses a
calibration file that lacks what it needs, naming the file and the entry."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from click.testing import CliRunner

from coscheduler.backends.interference import InterferenceModel, JobDemand
from coscheduler.calibration import fit as fitting
from coscheduler.calibration.measure import Settings
from coscheduler.cli import main
from coscheduler.model import InvalidInput

# Probes as the development machine measures them alone (CPU use u): the fit derives
# membw (mem) and io (io) from u and the probe's name.
PROBE_CPU = {"cpu": 0.97, "mem": 0.98, "io": 0.21, "mixed": 0.40}
TRUE = InterferenceModel(throttle=0.03, overlap=0.75, timeslice=0.45, wakeup=1.3, cache=0.12,
                         bandwidth=0.08, io=0.9, memory_penalty=2.0)


def synthetic(model: InterferenceModel, settings: Settings, noise: float = 0.0,
              seed: int = 1) -> dict:
    """Raw figures in ``measure``'s shape whose slowdowns are the model's (times a log-normal
    noise of ``noise``), over the experiments of ``settings``."""
    rnd = random.Random(seed)
    alone = {p: [{"elapsed_s": 1.0, "cpu_s": u}] for p, u in PROBE_CPU.items()}
    d = fitting.demands({"alone": alone})
    raw: dict = {"alone": alone, "quota": [], "pairs": []}

    def wall(p: fitting.Point) -> float:
        return fitting.predict(model, d, p) * math.exp(rnd.gauss(0.0, noise))

    for k in range(settings.repeats):
        for probe, quotas in settings.quotas.items():
            for q in quotas:
                p = fitting.Point("quota", probe, q, None, None, False, 1, 0.0)
                raw["quota"].append({"probe": probe, "quota": q, "elapsed_s": wall(p),
                                     "cpu_s": 1.0, "ref_elapsed_s": 1.0, "round": k})
        pairs = [(t, o, q, 1.0 - q, True, None) for t, o, q in settings.same_core]
        pairs += [(t, o, 1.0, 1.0, False, None) for t, o in settings.cross_core]
        pairs += [(t, o, q, 1.0 - q, True, idle) for t, o, q, idle in settings.same_core_idle]
        for t, o, q, oq, same, idle in pairs:
            p = fitting.Point("pair", t, q, o, oq, same, 1, 0.0, idle=idle)
            raw["pairs"].append({"target": t, "other": o,
                                 "placement": "same-cpu" if same else "other-cpu",
                                 "target_quota": q, "other_quota": oq, "elapsed_s": wall(p),
                                 "cpu_s": 1.0, "ref_elapsed_s": 1.0, "round": k,
                                 **({} if idle is None else {"idle": idle})})
        for t, o, copies in settings.shared:
            p = fitting.Point("pair", t, 1.0, o, 1.0, False, 1, 0.0, pool=2, copies=copies)
            raw["pairs"].append({"target": t, "other": o, "placement": "shared-cpus",
                                 "cpus": 2, "copies": copies, "target_quota": 1.0,
                                 "other_quota": 1.0, "elapsed_s": wall(p), "cpu_s": 1.0,
                                 "ref_elapsed_s": 1.0, "round": k})
    return raw


def test_the_fit_recovers_known_parameters_from_the_models_own_measurements():
    raw = synthetic(TRUE, Settings.full())
    fitting.validate(raw, "synthetic")
    got = fitting.fit(raw, InterferenceModel())      # started far away: no interference
    for name in fitting.FITTED:
        assert getattr(got, name) == pytest.approx(getattr(TRUE, name), abs=0.01), name
    # ...and with 5 % noise per round, medians of five rounds still land close.
    noisy = fitting.fit(synthetic(TRUE, Settings.full(), noise=0.05, seed=3), InterferenceModel())
    assert noisy.timeslice == pytest.approx(TRUE.timeslice, abs=0.15)
    assert noisy.overlap == pytest.approx(TRUE.overlap, abs=0.1)
    assert noisy.io == pytest.approx(TRUE.io, abs=0.3)


def test_an_idle_session_recovers_the_idle_terms_and_leaves_the_rest_as_calibrated():
    """``cosched calibrate --idle``: pairs with the guest (or the target) in the idle class
    tell how much an idle guest still costs a host and what the host costs it; the fit
    takes just those two terms from such a session."""
    true = dataclasses.replace(TRUE, idle_yield=0.15, idle_penalty=2.5)
    raw = synthetic(true, Settings.idle())
    fitting.validate(raw, "synthetic idle session")
    got = fitting.fit(raw, TRUE, only=("idle_yield", "idle_penalty"))
    assert got.idle_yield == pytest.approx(0.15, abs=0.01)
    assert got.idle_penalty == pytest.approx(2.5, abs=0.05)
    assert got.timeslice == TRUE.timeslice and got.wakeup == TRUE.wakeup
    # An idle guest at 50 % costs a disk-waiting host little; the same guest in the normal
    # class costs it much more (what the session's normal pairs show side by side).
    pts = {(p.target, p.quota, p.idle): p.slowdown for p in fitting.points(raw)
           if p.kind == "pair"}
    assert pts[("io", 0.5, "other")] < pts[("io", 0.5, None)]
    assert pts[("io", 0.5, "other")] < 1.1


def test_a_spread_session_recovers_spill_and_leaves_the_rest_as_calibrated():
    """``cosched calibrate --spread``: probes free on every CPU tell how much of its wake-up
    cost a disk-waiting job keeps when a core is free; the fit takes just that term."""
    true = dataclasses.replace(TRUE, spill=0.3)
    settings = dataclasses.replace(Settings.spread(), shared=(
        ("mixed", "cpu", 1), ("mixed", "cpu", 2), ("io", "cpu", 1), ("io", "cpu", 2)))
    raw = synthetic(true, settings)
    fitting.validate(raw, "synthetic spread session")
    got = fitting.fit(raw, TRUE, only=("spill",))
    assert got.spill == pytest.approx(0.3, abs=0.01)
    assert got.timeslice == TRUE.timeslice and got.wakeup == TRUE.wakeup
    pts = {(p.target, p.copies): p.slowdown for p in fitting.points(raw) if p.pool}
    # A sleepy probe beside one CPU-bound loop on two CPUs is not slowed (a core is free);
    # beside two it is, as on one pinned CPU.
    assert pts[("mixed", 1)] == pytest.approx(1.0)
    assert pts[("mixed", 2)] > 1.1
    assert 1.0 < pts[("io", 1)] < pts[("io", 2)]


def test_a_shared_pair_without_its_cpu_count_is_refused_by_name():
    raw = synthetic(TRUE, dataclasses.replace(Settings.spread(), shared=(("mixed", "cpu", 1),)))
    del raw["pairs"][-1]["cpus"]
    with pytest.raises(InvalidInput, match=r"shared-cpus pair's 'cpus' must be an integer"):
        fitting.points(raw)


def test_a_pair_with_an_unknown_idle_role_is_refused_by_name():
    raw = synthetic(TRUE, Settings.idle())
    raw["pairs"][-1]["idle"] = "both"
    with pytest.raises(InvalidInput, match=r"pairs\[\d+\]\.idle must be one of target, other"):
        fitting.validate(raw, "f.json")


def test_held_out_pairs_are_predicted_exactly_when_the_model_is_true_and_worse_when_not():
    exact = fitting.held_out(synthetic(TRUE, Settings.full()))
    assert exact["method"] == "leave-one-pair-out" and exact["points"] >= 20
    # io beside io on the other CPU is the only point of its kind (disk contention): left
    # out, nothing tells the disk term, which then predicts 1.0.
    only = [r for r in exact["rows"] if r["point"] == "io beside io, other CPU"]
    assert only and only[0]["predicted"] == pytest.approx(1.0)
    others = [r for r in exact["rows"] if r["point"] != "io beside io, other CPU"]
    assert max(abs(r["log_error"]) for r in others) < 0.01
    # Measurements the model cannot produce (a waiting probe slowed 1.5x beside a busy one
    # whatever the quotas) give a held-out error the in-sample fit does not show.
    raw = synthetic(TRUE, Settings.full())
    for r in raw["pairs"]:
        if r["target"] == "mixed" and r["other"] == "cpu" and r["target_quota"] == 0.75:
            r["elapsed_s"] *= 1.5
    worse = fitting.held_out(raw)
    assert worse["rms_log_error"] > exact["rms_log_error"] + 0.02


def test_a_waiting_host_pays_for_its_computing_not_its_waiting_and_a_quota_bound_one_its_quota():
    m = InterferenceModel(timeslice=0.45, wakeup=1.0)
    sleepy_20, sleepy, cpu = JobDemand(cpu=0.2), JobDemand(cpu=0.43), JobDemand(cpu=1.0)
    # 50/50 on one core: the guest busy 0.5 of the time; the host computes 20 % (43 %) of it.
    assert 1 / m.rate(sleepy_20, 0.5, [(cpu, 0.5, 1.0)]) == pytest.approx(1 + 0.45 * 0.2 * 0.5)
    assert 1 / m.rate(sleepy, 0.5, [(cpu, 0.5, 1.0)]) == pytest.approx(1 + 0.45 * 0.43 * 0.5)
    # Waiting on the disk instead (all its waits): each short I/O ends behind the guest's
    # turn, a cost per wake-up, so also per unit of its computing (k_wake x io / wait = 1).
    disk = JobDemand(cpu=0.2, io=0.8)
    assert 1 / m.rate(disk, 0.5, [(cpu, 0.5, 1.0)]) == pytest.approx(1 + (0.45 + 1.0) * 0.2 * 0.5)
    # Half its waits on the disk: half the wake-up cost.
    half = JobDemand(cpu=0.2, io=0.4)
    assert 1 / m.rate(half, 0.5, [(cpu, 0.5, 1.0)]) == pytest.approx(1 + (0.45 + 0.5) * 0.2 * 0.5)
    # A CPU-bound job under a binding quota: the quota's 2x, not 2x times the shared core.
    assert 1 / m.rate(cpu, 0.5, [(cpu, 0.5, 1.0)]) == pytest.approx(2.0)
    # A job holding more cores than busy processes (a sequential stage: wait 0) pays for
    # its one busy process, on the share of its cores the guest fills.
    seq = JobDemand(cpu=0.125, wait=0.0)
    assert 1 / m.rate(seq, 1.0, [(cpu, 0.5, 0.5)]) == pytest.approx(1 + 0.45 * 1.0 * 0.25)


def _good() -> dict:
    return synthetic(TRUE, Settings.quick())


@pytest.mark.parametrize("breaking, message", [
    (lambda r: r.pop("pairs"), "'pairs' is missing"),
    (lambda r: r.update(pairs=[]), "no pair on the same CPU"),
    (lambda r: r.update(quota=[]), "no quota point"),
    (lambda r: r["alone"].pop("mixed"), "probe 'mixed' has no reference run"),
    (lambda r: r["pairs"][0].update(elapsed_s=float("nan")), "pairs[0].elapsed_s must be a positive finite"),
    (lambda r: r["quota"][1].update(ref_elapsed_s=0), "quota[1].ref_elapsed_s must be a positive"),
    (lambda r: r["alone"]["cpu"][0].update(cpu_s=float("nan")), "alone.cpu[0].cpu_s"),
    (lambda r: r["pairs"][0].pop("other_quota"), "pairs[0] has no 'other_quota'"),
])
def test_a_calibration_file_missing_pairs_or_holding_nan_is_refused_by_name(tmp_path, breaking, message):
    raw = _good()
    fitting.validate(raw, "ok")
    breaking(raw)
    with pytest.raises(InvalidInput) as exc:
        fitting.validate(raw, "some.json")
    assert str(exc.value).startswith("some.json: ") and message in str(exc.value)
    # The command line says the same in one line, naming the file, with no traceback.
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(raw))          # NaN is written as JSON NaN
    r = CliRunner().invoke(main, ["calibrate", "--from", str(bad)])
    assert r.exit_code != 0 and str(bad) in r.output and message in r.output
    assert "Traceback" not in r.output


def test_quick_settings_are_a_subset_the_fit_and_held_out_check_can_use():
    raw = synthetic(TRUE, Settings.quick())
    fitting.validate(raw, "quick")
    out = fitting.held_out(raw)
    assert out["points"] == 1 and out["rms_log_error"] is not None
