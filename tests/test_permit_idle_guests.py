"""Issue 19: what the experts know of both jobs' waiting, the idle scheduling class for
guests, and ASA_X's Permit step (coscheduler/policies/permit.py)."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from coscheduler.backends.interference import CALIBRATED, InterferenceModel, JobDemand
from coscheduler.backends.virtual import Profile, VirtualBackend
from coscheduler.cli import main
from coscheduler.controller.hoststate import wait_share
from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
from coscheduler.learner.experts import PairExpert
from coscheduler.model import Allocation, InvalidInput, Job, RunningJob, StageType
from coscheduler.policies.coalloc import Asax, HostCandidate
from coscheduler.policies.permit import HostHarmPermit
from fixed_experts import OneActionPerClass

# A model whose idle class matters (the shape cosched calibrate --idle measures).
IDLE = dataclasses.replace(CALIBRATED, idle_yield=0.1, idle_penalty=2.0)


def test_a_sequential_stage_computes_on_one_of_its_cores():
    # 4 % of 16 cores is one process busy 64 % of the time: it waits 36 %, not 96 %.
    assert wait_share(StageType.SEQUENTIAL, 16, 4.0) == pytest.approx(0.36)
    assert wait_share(StageType.PARALLEL, 16, 4.0) == pytest.approx(0.96)
    assert wait_share(StageType.SEQUENTIAL, 1, 250.0) == 0.0


def state(guest_cpu=50.0, guest_wait=None, host_cpu=40.0, host_wait=0.6, host_io=20.0,
          guest_io=0.0, hp=2.0):
    return HostState("montage/mProject", host_cpu, 10.0, StageType.PARALLEL, 0.3, hp, host_io,
                     guest_cpu, 10.0, 1.0, guest_io, wait_share=host_wait,
                     guest_wait_share=guest_wait)


def test_the_pair_expert_charges_a_guest_for_the_computing_it_really_does():
    pair = PairExpert()
    # The same 6 % CPU over its cores: a parallel guest that mostly sleeps, or a sequential
    # one whose single process computes half of the time.
    sleepy = pair.predicted_pair(state(guest_cpu=6.0, guest_wait=0.94, guest_io=5.0), 0.5)
    busy = pair.predicted_pair(state(guest_cpu=6.0, guest_wait=0.5, guest_io=5.0), 0.5)
    assert busy[1] > sleepy[1] + 0.2


def test_an_idle_guest_costs_the_host_less_and_pays_more_itself():
    st = state(guest_cpu=100.0, guest_wait=0.0)
    normal = PairExpert(model=IDLE).predicted_pair(st, 0.5)
    idle = PairExpert(model=IDLE, idle_guests=True).predicted_pair(st, 0.5)
    assert idle[0] < normal[0] / 3          # the host: 0.1 of the guest's busy share
    assert idle[1] >= normal[1]


def test_the_permit_vetoes_what_would_slow_the_host_and_permits_the_unknown():
    # A host using 30 % of its cores, whose quota of 50 % does not bind.
    st = state(guest_cpu=100.0, guest_wait=0.0, host_cpu=30.0, host_wait=0.7)
    permit = HostHarmPermit(0.05)
    assert permit.host_slowdown(st, 0.5) > 0.3     # a disk-waiting host beside a busy guest
    assert permit(st, 0.5) is False and permit.vetoed == 1
    unknown = dataclasses.replace(st, guest_cpu_percent=None)
    assert permit(unknown, 0.5) is True
    # In the idle class the same guest leaves the host within the tolerance.
    assert HostHarmPermit(0.1, idle_guests=True, model=IDLE)(st, 0.5) is True
    assert HostHarmPermit(0.1)(st, 0.5) is False


@pytest.mark.parametrize("bad", [-0.1, float("nan"), 11.0, True, "x"])
def test_a_bad_tolerance_is_refused_by_name(bad):
    with pytest.raises(InvalidInput, match="permit tolerance"):
        HostHarmPermit(bad)


def test_a_vetoed_loan_is_not_made_and_teaches_nothing():
    learner = AsaxLearner(LearnerConfig(seed=1),
                          expert_factory=lambda: [OneActionPerClass({"montage/mProject": 5})])
    policy = Asax(learner, permit=HostHarmPermit(0.05))
    job = Job("h1", cores=8, walltime_s=100, job_class="montage/mProject")
    rj = RunningJob(job, Allocation("h1", (("n1", 8),)), start_time=0.0)
    cand = HostCandidate(rj, Allocation("g", (("n1", 8),)), 0.0, None,
                         state(guest_cpu=100.0, guest_wait=0.0))
    guest = Job("g", cores=8, walltime_s=50, job_class="blast/blastall")
    r = policy.choose(guest, iter([cand]), now=1.0)
    assert r.choice is None and r.asked == ("h1",)
    assert [d.action_index for d in r.declined] == [5]
    assert learner.pending == {}       # forgotten: no loss will ever arrive for it
    # Without the permit the same learner lends.
    assert Asax(learner).choose(guest, iter([cand]), now=2.0).choice is not None


def _pair_rates(idle_guests: bool) -> tuple[float, float]:
    b = VirtualBackend({"n1": 8}, model=IDLE, idle_guests=idle_guests)
    host = Job("h", cores=8, walltime_s=1000, job_class="h")
    guest = Job("g", cores=8, walltime_s=1000, job_class="g")
    b.submit(host, Profile(100.0, cpu_util=0.4, io_share=0.5, wait_share=0.6))
    b.submit(guest, Profile(100.0, cpu_util=1.0))
    b.start(host, Allocation("h", (("n1", 8),)), 0.5)
    b.start(guest, Allocation("g", (("n1", 8),)), 0.5, host_job="h")
    b._update_rates()
    return b._runs["h"].data.rate, b._runs["g"].data.rate


def test_the_virtual_backend_runs_guests_in_the_idle_class_when_asked():
    host_normal, guest_normal = _pair_rates(False)
    host_idle, guest_idle = _pair_rates(True)
    assert host_idle > host_normal + 0.1
    assert guest_idle <= guest_normal


def test_a_job_demand_idle_flag_must_be_a_boolean():
    with pytest.raises(InvalidInput, match="idle must be true or false"):
        JobDemand(cpu=0.5, idle="yes")
    assert InterferenceModel().idle_yield == 1.0     # unmeasured: no difference


@pytest.mark.parametrize("value", ["7x", "11", "-1"])
def test_simulate_paper_refuses_a_bad_permit_in_one_line(value):
    r = CliRunner().invoke(main, ["simulate", "paper", "--cores", "64", "--repeat", "1",
                                  "--permit", value])
    assert r.exit_code == 2
    assert "--permit" in r.output and "Traceback" not in r.output
