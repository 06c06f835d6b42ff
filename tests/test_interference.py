"""The virtual backend's interference model: its terms by hand, its promises, its fit to the
measurements it was calibrated on (coscheduler/calibration/measured.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduler.backends import Profile, VirtualBackend
from coscheduler.backends.interference import CALIBRATED, InterferenceModel, JobDemand
from coscheduler.calibration import fit as fitting
from coscheduler.model import InvalidInput

MEASURED = Path(__file__).resolve().parents[1] / "coscheduler" / "calibration" / "measured.json"
WAITING = MEASURED.with_name("waiting.json")     # a second session, never fitted
share = st.floats(0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(u=st.floats(0.01, 1.0), extra=st.floats(0.0, 1.0), membw=share, io=share)
def test_a_quota_at_or_above_the_demand_causes_no_slowdown(u, extra, membw, io):
    d = JobDemand(cpu=u, membw=min(u, membw), io=io * (1 - u))
    for model in (InterferenceModel(), CALIBRATED):
        q = min(1.0, model.demand(d) + extra * (1.0 - model.demand(d)))
        assert model.quota_term(d, q) == 1.0
        assert model.rate(d, q) == 1.0           # alone: nothing else to pay


def test_quota_term_by_hand():
    fluid = InterferenceModel()
    cpu = JobDemand(cpu=1.0)
    assert fluid.quota_term(cpu, 0.5) == pytest.approx(0.5)
    assert fluid.quota_term(JobDemand(cpu=0.4), 0.2) == pytest.approx(0.5)
    assert fluid.demand(JobDemand(cpu=0.4)) == pytest.approx(0.4)
    # A job that cannot hide all its waiting behind throttled computing (overlap < 1):
    # u / q + (1 - overlap)(1 - u) = 0.4 / 0.2 + 0.5 x 0.6 = 2.3, x (1 + throttle).
    m = InterferenceModel(overlap=0.5, throttle=0.1)
    assert 1 / m.quota_term(JobDemand(cpu=0.4), 0.2) == pytest.approx(2.3 * 1.1)
    assert m.demand(JobDemand(cpu=0.4)) == pytest.approx(0.4 / (1 - 0.5 * 0.6))


def test_contention_terms_by_hand():
    m = InterferenceModel(timeslice=0.5, cache=0.3, bandwidth=0.2, io=0.4)
    waiting = JobDemand(cpu=0.2, io=0.6)          # computes 20 % of its time, 60 % on files
    streamer = JobDemand(cpu=0.9, membw=0.9)
    disk = JobDemand(cpu=0.1, io=0.8)
    # A streamer using 0.5 of the same cores: computing beside a busy core (0.5 x 0.2 x
    # 0.5) and losing its cached data to the streaming (0.3 x (0.2 - 0) x 0.9).
    assert m.contention(waiting, 1.0, [(streamer, 0.5, 1.0)]) == pytest.approx(
        (1 + 0.5 * 0.2 * 0.5) * (1 + 0.3 * 0.2 * 0.9))
    # On a quarter of its cores only: a quarter of the shared-core cost.
    assert m.contention(waiting, 1.0, [(streamer, 0.5, 0.25)]) == pytest.approx(
        (1 + 0.5 * 0.2 * 0.5 * 0.25) * (1 + 0.3 * 0.2 * 0.9))
    # On other cores, a disk-bound co-runner: only the shared disk counts.
    assert m.contention(waiting, 1.0, [(disk, 1.0, 0.0)]) == pytest.approx(1 + 0.4 * 0.6 * 0.8)
    # Two streamers share the bandwidth wherever they run (a streamer has no cached data
    # to lose: cpu - membw = 0).
    assert m.contention(streamer, 1.0, [(streamer, 1.0, 0.0)]) == pytest.approx(1 + 0.2 * 0.81)
    assert m.capacity_factor(0.9) == 1.0 and m.capacity_factor(1.5) == pytest.approx(1 / 2.0)
    # Under a binding quota the shared core costs only what exceeds the quota's slowdown:
    # the streamer at 0.3 is 3x slower by its quota alone, 1 + 0.5 x 0.9 x 0.7 < 3.
    assert m.rate(streamer, 0.3, [(streamer, 0.7, 1.0)]) == pytest.approx(
        m.quota_term(streamer, 0.3) / (1 + 0.2 * 0.81))


def test_bad_parameters_are_refused_with_names():
    with pytest.raises(InvalidInput, match="io"):
        InterferenceModel(io=-1.0)
    with pytest.raises(InvalidInput, match="overlap"):
        InterferenceModel(overlap=1.5)
    with pytest.raises(InvalidInput, match="membw"):
        JobDemand(cpu=0.5, membw=2.0)
    with pytest.raises(InvalidInput, match="model"):
        VirtualBackend({"n": 4}, model="fast")


def test_virtual_backend_default_is_the_plain_fluid_model_and_calibrated_adds_contention():
    def guest_runtime(model):
        b = VirtualBackend({"n": 8}, model=model)
        from coscheduler.model import Allocation, Job
        host = Job("h", 8, 1000.0, "h")
        guest = Job("g", 8, 1000.0, "g")
        b.submit(host, Profile(100.0, 0.3, 10, io_share=0.6))
        b.submit(guest, Profile(100.0, 0.3, 10, io_share=0.6))
        b.start(host, Allocation("h", (("n", 8),)), 0.5)
        b.start(guest, Allocation("g", (("n", 8),)), 0.5, host_job="h")
        b.advance(500.0)
        return {o.job_id: o.runtime_s for o in b.history}
    # Quotas at or above both jobs' CPU use: the fluid model slows neither...
    assert guest_runtime(None) == {"h": pytest.approx(100.0), "g": pytest.approx(100.0)}
    # ...the calibrated one charges two file-bound jobs sharing storage (and waking up to a
    # busy core): both run longer, alike.
    slow = guest_runtime(CALIBRATED)
    assert slow["h"] > 100.0 and slow["g"] == pytest.approx(slow["h"])


# -- the calibration -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def measured():
    return json.loads(MEASURED.read_text())


def test_the_calibrated_model_reproduces_the_measured_slowdowns(measured):
    """Every point the model was fitted on lies within 10 % of the median of its
    repetitions or inside the range its repetitions spanned (on the noisy shared machine
    four points are 11-35 % off, all inside their range); 36 of 40 within 10 %, the median
    error under 5 %, the rms log error under 0.10. docs/calibration.md lists them all."""
    rows = [r for r in fitting.check(measured, CALIBRATED) if r["fitted"]]
    assert len(rows) >= 35
    for r in rows:
        assert abs(r["error"]) <= 0.10 or r["low"] <= r["model"] <= r["high"], r
    assert sum(abs(r["error"]) <= 0.10 for r in rows) >= len(rows) - 4
    errors = sorted(abs(r["error"]) for r in rows)
    assert errors[len(errors) // 2] <= 0.05
    assert fitting.rms_log_error(rows) <= 0.10


def test_pairs_left_out_of_the_fit_are_predicted_within_the_target(measured):
    """Issue 19's target: rms log error <= 0.12 on pairs the fit did not see."""
    out = fitting.held_out(measured)
    assert out["points"] >= 25
    assert out["rms_log_error"] <= 0.12, out


def test_a_waiting_host_beside_a_cpu_guest_at_50_50_as_measured(measured):
    """The two cases the old model got wrong (issue 19): a host waiting on the disk, and a
    host waiting in sleeps (about 40 % CPU), each beside a CPU-bound guest, 50/50 on one
    core: the model within 10 % of what was measured here."""
    rows = {r["point"]: r for r in fitting.check(measured, CALIBRATED)}
    for point in ("io at 50% beside cpu at 50%, same CPU",
                  "mixed at 50% beside cpu at 50%, same CPU"):
        assert abs(rows[point]["error"]) <= 0.10, rows[point]


def test_fitting_the_saved_figures_gives_the_calibrated_parameters(measured):
    refit = fitting.fit(measured, CALIBRATED)
    for name in fitting.FITTED:
        assert getattr(refit, name) == pytest.approx(getattr(CALIBRATED, name), abs=0.02), name


def test_points_are_ratios_to_the_reference_run_just_before():
    raw = {"alone": {"cpu": [{"elapsed_s": 1.0, "cpu_s": 0.95}, {"elapsed_s": 2.0, "cpu_s": 1.9}]},
           "quota": [{"probe": "cpu", "quota": 0.5, "elapsed_s": 2.0, "ref_elapsed_s": 1.0},
                     {"probe": "cpu", "quota": 0.5, "elapsed_s": 3.8, "ref_elapsed_s": 2.0},
                     {"probe": "cpu", "quota": 0.5, "elapsed_s": 9.0, "ref_elapsed_s": 3.0}],
           "pairs": []}
    [p] = fitting.points(raw)
    assert p.slowdown == pytest.approx(2.0) and p.runs == 3     # median of 2.0, 1.9, 3.0
    assert fitting.demands(raw)["cpu"].cpu == pytest.approx(0.95)
    with pytest.raises(InvalidInput, match="shape"):
        fitting.points({"alone": {}, "quota": [{"probe": "cpu"}], "pairs": []})


def test_a_second_session_never_fitted_sees_the_sleepy_host_as_the_model_does():
    """``cosched calibrate --waiting`` at a 1-minute load of 15-28 (docs/calibration.md): the
    sleepy host beside a CPU-bound guest at 50/50 and 75/25 within 10 % of CALIBRATED; the
    disk-bound host's rounds spread too wide there (0.6-3.5x) to say more than that the
    model lies inside them."""
    raw = json.loads(WAITING.read_text())
    fitting.validate(raw, str(WAITING))
    rows = {r["point"]: r for r in fitting.check(raw, CALIBRATED)}
    for q in ("50% beside cpu at 50%", "75% beside cpu at 25%"):
        assert abs(rows[f"mixed at {q}, same CPU"]["error"]) <= 0.10, rows[f"mixed at {q}, same CPU"]
        io = rows[f"io at {q}, same CPU"]
        assert io["low"] <= io["model"] <= io["high"], io


IDLE_SESSION = MEASURED.with_name("idle.json")   # cosched calibrate --idle


def test_the_idle_class_as_measured_protects_the_host_and_starves_a_waiting_guest():
    """``cosched calibrate --idle`` (docs/calibration.md): beside a CPU-bound guest at 50/50
    on one core, a disk-waiting host measured 1.62x with the guest in the normal class and
    1.04x with it idle; a waiting guest in the idle class beside a CPU-bound host measured
    3.7-6x. The shipped idle terms are the fit of that session, and its pairs left out of
    the fit are predicted within issue 19's rms target."""
    raw = json.loads(IDLE_SESSION.read_text())
    fitting.validate(raw, str(IDLE_SESSION))
    pts = {p.label(): p.slowdown for p in fitting.points(raw)}
    assert pts["io at 50% beside cpu at 50%, same CPU, co-runner idle"] < \
        pts["io at 50% beside cpu at 50%, same CPU"] - 0.3
    assert pts["mixed at 50% beside cpu at 50%, same CPU, target idle"] > 2.0
    refit = fitting.fit(raw, CALIBRATED, only=("idle_yield", "idle_penalty"))
    assert refit.idle_yield == pytest.approx(CALIBRATED.idle_yield, abs=0.02)
    assert refit.idle_penalty == pytest.approx(CALIBRATED.idle_penalty, rel=0.05)
    assert CALIBRATED.idle_yield < 0.5
    assert fitting.held_out(raw)["rms_log_error"] <= 0.12


# -- shared cores ---------------------------------------------------------------------------------

SPREAD = MEASURED.with_name("spread.json")     # cosched calibrate --spread


@settings(max_examples=150, deadline=None)
@given(u=st.floats(0.02, 1.0), uo=st.floats(0.0, 1.0), q=st.floats(0.05, 1.0),
       io=share, idle=st.booleans())
def test_on_one_shared_core_the_pooled_model_is_the_pinned_one(u, uo, q, io, idle):
    """One process each on one core: the expected excess of busy processes is the
    co-runner's busy share, so the shared-cores model reduces to the same-CPU calibration."""
    target = JobDemand(cpu=u, io=io * (1 - u), threads=1)
    other = JobDemand(cpu=uo, threads=1, idle=idle)
    others = [(other, 1.0 - q * 0.5, 1.0)]
    assert CALIBRATED.contention(target, q, others, pool_cores=1) == pytest.approx(
        CALIBRATED.contention(target, q, others))


def test_a_free_core_spares_a_computing_job_but_not_when_every_core_is_taken():
    sleepy, loop = JobDemand(cpu=0.4, threads=1), JobDemand(cpu=1.0, threads=1)
    pinned = CALIBRATED.contention(sleepy, 1.0, [(loop, 1.0, 1.0)])
    assert pinned > 1.3
    assert CALIBRATED.contention(sleepy, 1.0, [(loop, 1.0, 1.0)], pool_cores=2) == 1.0
    two = CALIBRATED.contention(sleepy, 1.0, [(loop, 1.0, 1.0)] * 2, pool_cores=2)
    assert two == pytest.approx(pinned)
    # A sequential guest on an 8-core host whose 8 processes are 22 % busy: almost never
    # are all 8 cores taken, so the guest is barely slowed (pinned: +12 %).
    guest, host = JobDemand(cpu=0.06, wait=0.52, threads=1), JobDemand(cpu=0.22, threads=8)
    assert CALIBRATED.contention(guest, 0.16, [(host, 0.84, 1.0)]) > 1.1
    assert CALIBRATED.contention(guest, 0.16, [(host, 0.84, 1.0)], pool_cores=8) < 1.001
    # Unknown processes: the pinned model, whatever the pool.
    assert CALIBRATED.contention(JobDemand(cpu=0.4), 1.0, [(loop, 1.0, 1.0)], pool_cores=2) \
        == pytest.approx(pinned)


def test_spill_keeps_a_disk_waiting_jobs_wake_up_cost_on_a_free_core():
    disk, loop = JobDemand(cpu=0.25, io=0.75, threads=1), JobDemand(cpu=1.0, threads=1)
    none = InterferenceModel(timeslice=1.2, wakeup=2.3, spill=0.0)
    full = InterferenceModel(timeslice=1.2, wakeup=2.3, spill=1.0)
    assert none.contention(disk, 1.0, [(loop, 1.0, 1.0)], pool_cores=2) == 1.0
    assert full.contention(disk, 1.0, [(loop, 1.0, 1.0)], pool_cores=2) == pytest.approx(
        1.0 + 2.3 * 1.0 * 0.25)


def test_bad_threads_pool_or_spill_are_refused_by_name():
    with pytest.raises(InvalidInput, match="threads must be an integer >= 1"):
        JobDemand(cpu=0.5, threads=0)
    with pytest.raises(InvalidInput, match="spill must lie in"):
        InterferenceModel(spill=1.5)
    with pytest.raises(InvalidInput, match="pool_cores must be an integer >= 1"):
        CALIBRATED.pooled_busy(JobDemand(cpu=0.5, threads=1), 1.0, [], 0)


def test_the_spread_session_as_measured(measured):
    """docs/calibration.md "Shared cores": a sleepy probe beside one CPU-bound loop on two
    CPUs is barely slowed, beside two it is slowed as when pinned to one CPU; a disk-bound
    probe is slowed either way (its wake-ups land on the busy core)."""
    raw = json.loads(SPREAD.read_text())
    fitting.validate(raw, str(SPREAD))
    pts = {(p.target, p.copies): p.slowdown for p in fitting.points(raw) if p.pool}
    assert pts[("mixed", 1)] < 1.15 < 1.3 < pts[("mixed", 2)]
    assert pts[("io", 1)] > 1.5
    for p in fitting.points(raw):
        if p.pool:
            model = fitting.predict(CALIBRATED, fitting.demands(raw), p)
            assert abs(math.log(model / p.slowdown)) < 0.45, p.label()
