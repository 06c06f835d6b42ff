"""The framework against the emulated master's faults, over real HTTP: each fault put in
through the emulator's documented admin API (testbed/mesos/README.md, "Fault injection"),
the emulator in its own process (`cosched mesos emulate`), real task processes.

What each test checks is the issue's "Bad input and faults": logged with what was wrong,
never a crash, no job dropped, the framework keeps running.
"""

from __future__ import annotations

import logging
import os
import sys
import time

import pytest

from coscheduler.learner import LearnerConfig
from coscheduler.model import Job
from coscheduler.recorder import MemoryRecorder
from fixed_experts import ConstantExpert
from mesos_emu_proc import EmulatorProcess, wait_for
from mesos_framework.framework import FrameworkConfig, job_of_task
from mesos_framework.run import MesosRun

pytestmark = [pytest.mark.mesos, pytest.mark.root]


@pytest.fixture
def emulator():
    started: list[EmulatorProcess] = []

    def start(**kw) -> EmulatorProcess:
        e = EmulatorProcess(**kw)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


def sleeper(jid, seconds, cores=2, nodes=1, **kw) -> Job:
    return Job(jid, cores, 60.0, "test/sleep", nodes=nodes, command=("/bin/sleep", str(seconds)), **kw)


def quick(**kw) -> FrameworkConfig:
    return FrameworkConfig(**{"settle_s": 0.3, "hold_s": 1.0, "refuse_s": 0.5, "idle_refuse_s": 0.5, **kw})


def run_in_thread(mr: MesosRun, timeout_s: float):
    import threading
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", mr.run(timeout_s=timeout_s)), daemon=True)
    t.start()
    return t, out


def framework_tasks(emu: EmulatorProcess, fid: str) -> list[dict]:
    fws = [f for f in emu.state()["frameworks"] if f["id"] == fid]
    return fws[0]["tasks"] if fws else []


def test_offer_rescinded_mid_gang_is_dropped_and_the_gang_still_launches_whole(emulator):
    """The gang holds one agent's offer while the other agent is busy; that held offer is
    rescinded. Had the framework kept it, the gang's ACCEPT would name an invalid offer
    and every task would come back TASK_LOST; it must launch once, whole, and finish."""
    emu = emulator(agents=2, cpus=2)
    mr = MesosRun(emu.url, "space-sharing", config=quick(hold_s=60.0))
    mr.submit([sleeper("blocker", 2.0, cores=2), sleeper("gang", 0.5, cores=4, nodes=2, submit_time=1.0)])
    mr.start()
    try:
        held = wait_for(lambda: (mr.step(), "blocker" in {r.job_id for r in mr.backend.running()}
                                 and mr.backend.held_offers())[1], 30, 0.1,
                        "the gang to hold the free agent's offer")
        victim = held[0].offer_id
        emu.admin(f"offers/{victim}/rescind", {"refuse_seconds": 0})
        wait_for(lambda: (mr.step(), mr.backend.counters["rescinded"] >= 1)[1], 10, 0.05, "RESCIND")
        assert victim not in {h.offer_id for h in mr.backend.held_offers()}
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    states = [(o.job_id, o.state) for o in result.outcomes]
    assert sorted(states) == [("blocker", "completed"), ("gang", "completed")], result.outcomes
    assert [j for _, j, _ in mr.backend.starts].count("gang") == 1     # launched once, whole
    assert mr.backend.counters["requeued"] == 0


def test_agent_lost_requeues_the_job_which_runs_again_whole_never_dropped(emulator):
    emu = emulator(agents=2, cpus=2)
    mr = MesosRun(emu.url, "space-sharing", config=quick())
    mr.submit([sleeper("gang", 3.0, cores=4, nodes=2)])
    mr.start()
    try:
        wait_for(lambda: (mr.step(), len([t for r in mr.backend._runs.values() for t in r.tasks.values()
                                          if t.state == "TASK_RUNNING"]) == 2)[1], 30, 0.1,
                 "both tasks of the gang to run")
        first = {t.task_id: t.agent_id for t in mr.backend._runs["gang"].tasks.values()}
        lost = emu.agent_ids[0]
        emu.admin(f"agents/{lost}/lose", {"reason": "test"})
        wait_for(lambda: (mr.step(), any(o.state == "requeued" for o in mr.backend.history))[1], 20, 0.05,
                 "the job to be requeued")
        # its other task (on the surviving agent) was killed: nothing of attempt 1 runs on
        wait_for(lambda: not [t for t in framework_tasks(emu, mr.driver.framework_id)
                              if t["task_id"] in first and t["state"] in ("TASK_RUNNING", "TASK_STARTING")],
                 20, 0.1, "the surviving task of attempt 1 to be killed")
        new_agent = emu.admin("agents", {"cpus": 2, "mem": 2048})["agent_id"]
        run = wait_for(lambda: (mr.step(), mr.backend._runs.get("gang"))[1], 30, 0.1, "the gang again")
        second = {t.agent_id for t in run.tasks.values()}
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    assert [o.state for o in result.outcomes] == ["requeued", "completed"], result.outcomes
    assert "TASK_LOST" in result.outcomes[0].reason and "REASON_AGENT_REMOVED" in result.outcomes[0].reason
    assert [j for _, j, _ in mr.backend.starts] == ["gang", "gang"]
    assert lost in set(first.values()) and second == {new_agent, emu.agent_ids[1]}


def test_malformed_truncated_and_unknown_events_are_logged_and_the_framework_keeps_running(emulator, caplog):
    emu = emulator(agents=1, cpus=2, status_update_retry=0.5)
    mr = MesosRun(emu.url, "space-sharing", config=quick(),
                  driver_options={"backoff_base_s": 0.1, "backoff_max_s": 0.5})
    mr.submit([sleeper("j", 5.0, cores=1)])
    mr.start()
    caplog.set_level(logging.INFO, "mesos_framework")
    try:
        wait_for(lambda: (mr.step(), bool(mr.backend.running()))[1], 30, 0.1, "the job to start")
        fid = mr.driver.framework_id
        for kind in ("unknown_event", "bad_json", "not_an_event"):   # the stream goes on
            emu.admin(f"frameworks/{fid}/inject", {"kind": kind})
        wait_for(lambda: "unknown event type" in caplog.text and "not JSON" in caplog.text
                 and "event without a type" in caplog.text, 10, 0.05, "the three errors logged")
        assert mr.driver.disconnections == 0 and mr.driver.subscriptions == 1
        emu.admin(f"frameworks/{fid}/inject", {"kind": "bad_length"})     # unusable framing
        wait_for(lambda: mr.driver.subscriptions >= 2, 20, 0.05, "a new subscription")
        emu.admin(f"frameworks/{fid}/inject", {"kind": "truncated"})      # then the connection drops
        wait_for(lambda: mr.driver.subscriptions >= 3, 20, 0.05, "a third subscription")
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    assert [o.state for o in result.outcomes] == ["completed"]
    assert mr.driver.framework_id == fid                          # resubscribed as itself
    errors = " | ".join(mr.driver.stream_errors)
    assert "malformed event stream" in errors and "RecordIO" in errors or "size" in errors, errors
    assert any("broke" in e or "truncated" in e or "malformed" in e for e in mr.driver.stream_errors[1:])


def test_master_answering_5xx_or_closing_the_stream_is_retried_and_nothing_is_lost(emulator, caplog):
    emu = emulator(agents=1, cpus=2, status_update_retry=0.5)
    mr = MesosRun(emu.url, "space-sharing", config=quick(),
                  driver_options={"backoff_base_s": 0.1, "backoff_max_s": 0.5})
    mr.submit([sleeper("first", 0.2, cores=1)])
    mr.start()
    caplog.set_level(logging.WARNING, "mesos_framework")
    try:
        mr.run(timeout_s=30)                                   # idle now: offers suppressed
        fid = mr.driver.framework_id
        wait_for(lambda: (mr.step(), mr.backend._suppressed)[1], 10, 0.1, "SUPPRESS")
        # The REVIVE that a new job needs is answered 503: retried, the job runs.
        emu.admin("http-faults", {"status": 503, "count": 1, "body": "injected"})
        mr.backend.submit(sleeper("second", 0.2, cores=1))
        wait_for(lambda: (mr.step(), any(o.job_id == "second" for o in mr.backend.history))[1], 30, 0.1,
                 "the second job to run after a failed REVIVE")
        assert "503" in caplog.text
        # The stream closed cleanly, then dropped, then SUBSCRIBE refused twice with 503.
        emu.admin(f"frameworks/{fid}/close", {"abort": False})
        wait_for(lambda: mr.driver.subscriptions >= 2, 20, 0.05, "resubscription after a clean close")
        # Aimed at SUBSCRIBE: a retried ACKNOWLEDGE must not take one of the two (seen in CI).
        emu.admin("http-faults", {"status": 503, "count": 2, "calls": ["SUBSCRIBE"]})
        emu.admin(f"frameworks/{fid}/close", {"abort": True})
        wait_for(lambda: mr.driver.subscriptions >= 3, 30, 0.05, "resubscription through 503s")
        mr.backend.submit(sleeper("third", 0.5, cores=1))
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    assert {o.job_id: o.state for o in result.outcomes} == {"first": "completed", "second": "completed",
                                                            "third": "completed"}
    errors = mr.driver.stream_errors
    assert any("closed the event stream" in e for e in errors)
    assert sum("HTTP 503" in e for e in errors) >= 2
    assert mr.driver.framework_id == fid


def _burn(seconds: float, procs: int) -> tuple[str, ...]:
    loop = f"import time\nt=time.time()+{seconds}\nwhile time.time()<t: pass"
    script = " ".join(f"{sys.executable} -c '{loop}' &" for _ in range(procs)) + " wait"
    return ("/bin/sh", "-c", script)


def test_asax_coallocation_through_the_emulator_applies_the_quotas_it_chose(emulator, tmp_path):
    """ASA_X (its experts fixed to lend 40 %) puts a 2-core guest inside a busy 2-core host
    on the host's agent; the node agents hold both kernel quotas and the measured CPU of
    each stays within its quota."""
    from mesos_framework.quotas import LocalNodeAgents

    emu = emulator(agents=1, cpus=2)
    forty = tuple(1.0 if k == 4 else 0.0 for k in range(10))
    rec = MemoryRecorder()
    # The quota mechanics at the expert's exact fraction: the host is busy, so idle-only
    # lending (tests/test_lending.py) would lend it nothing.
    mr = MesosRun(emu.url, "asax", recorder=rec, config=quick(), learner_config=LearnerConfig(seed=1),
                  expert_factory=lambda: [ConstantExpert("lend40", forty)], idle_only=False)
    # one emulated core = one real CPU here (2 cpus offered on a machine of 2 or more)
    mr.backend.quotas = LocalNodeAgents(tmp_path, cpu_per_core=1.0)
    # Both burn long enough to outlast the waits below on a loaded machine (a CI run saw
    # the guest's 8 s end inside the measuring window: guest 0.04 CPU beside host 1.19).
    mr.submit([Job("host", 2, 60.0, "test/host", command=_burn(16, 2)),
               Job("guest", 2, 60.0, "test/guest", submit_time=0.5, command=_burn(14, 2))])
    mr.start()
    try:
        wait_for(lambda: (mr.step(), {r.job_id: r.host_job for r in mr.backend.running()}
                          .get("guest") == "host")[1], 40, 0.1, "the guest to be co-allocated")
        (d,) = [d for d in rec.decisions.values() if d[0].guest_job == "guest"]
        decision, host_q, guest_q = d
        assert decision.host_job == "host" and decision.action_fraction == pytest.approx(0.4)
        assert (host_q, guest_q) == (pytest.approx(0.6), pytest.approx(0.4))   # 1 - 0.4 x 2/2
        agent = next(iter(mr.backend.quotas.agents.values()))

        def kernel(jid):
            return int((open(f"{agent.job(jid)['cgroup']}/cpu.cfs_quota_us").read()))

        wait_for(lambda: (mr.step(), agent.job("guest").get("pids"))[1], 20, 0.1, "the guest's processes")
        assert kernel("host") == 120_000 and kernel("guest") == 80_000   # of 100 ms periods
        # the host's and guest's tasks run on the one agent, in their own cgroups
        tasks = framework_tasks(emu, mr.driver.framework_id)
        assert {job_of_task(t["task_id"])[0] for t in tasks} >= {"host", "guest"}
        t0 = time.monotonic()
        h0, g0 = agent.actuator.usage_ns("host"), agent.actuator.usage_ns("guest")
        while time.monotonic() - t0 < 4:
            mr.step()
            time.sleep(0.25)
        wall = time.monotonic() - t0
        h = (agent.actuator.usage_ns("host") - h0) / 1e9 / wall
        g = (agent.actuator.usage_ns("guest") - g0) / 1e9 / wall
        print(f"measured over {wall:.1f} s: host {h:.3f} CPU (quota 1.2), guest {g:.3f} CPU "
              f"(quota 0.8); load average {os.getloadavg()[0]:.1f}")
        assert 0 < h <= 1.2 * 1.15 and 0 < g <= 0.8 * 1.15
        both_busy = all(agent.job(j).get("status") == "running" and agent.job(j).get("nprocs")
                        for j in ("host", "guest"))
        # the machine gave the pair a fair part of its CPUs, both busy throughout: split by quota
        if h + g >= 1.0 and both_busy:
            assert 0.25 <= g / (h + g) <= 0.55
        result = mr.run(timeout_s=60)
    finally:
        mr.close()
    assert {o.job_id: o.state for o in result.outcomes} == {"host": "completed", "guest": "completed"}
    assert rec.outcomes, "the decision's loss was observed"


def test_guest_whose_hosts_agent_has_no_memory_held_gets_it_by_revive(emulator, caplog):
    """The memory left on the host's agent was declined with a long refuse filter; a guest
    placed there must not wait that long (nor fail): REVIVE brings the memory back."""
    emu = emulator(agents=1, cpus=2, mem=1024)
    cfg = quick(hold_s=0.3, hold_jitter=0.0, refuse_s=120.0, idle_refuse_s=120.0, guest_wait_s=15.0)
    mr = MesosRun(emu.url, "static", config=cfg)
    caplog.set_level(logging.INFO, "mesos_framework.framework")
    # "big" never fits (4 cores on one 2-core agent): the framework is never idle
    mr.submit([sleeper("host", 8.0, cores=2), sleeper("big", 1, cores=4, submit_time=1.0)])
    mr.start()
    try:
        try:
            wait_for(lambda: (mr.step(), "host" in {r.job_id for r in mr.backend.running()})[1],
                     30, 0.1, "the host to start")
        except AssertionError as exc:
            # failed intermittently in full CI runs (a pass begun before the framework
            # settled declined the only offer for 120 s: fixed, regression test in
            # test_mesos_framework.py); if it fails again, say what the framework held
            fws = emu.state().get("frameworks", [])
            raise AssertionError(
                f"{exc}; counters {mr.backend.counters}, held offers "
                f"{[h.offer_id for h in mr.backend.held_offers()]}, problems "
                f"{mr.backend.problems[-5:]}, last pass {mr.reports[-1] if mr.reports else None}, "
                f"master frameworks {fws}") from None
        # what is left on the agent (memory) is held, then declined with the long filter
        wait_for(lambda: (mr.step(), mr.backend.counters["declined"] >= 1 and not mr.backend.held_offers())[1],
                 20, 0.05, "the memory left on the agent to be declined")
        fw = [f for f in emu.state()["frameworks"] if f["id"] == mr.driver.framework_id][0]
        assert fw["filters"] and fw["filters"][0]["expires_in_s"] > 60
        t0 = time.monotonic()
        # ends before its host would (the waiting "big" holds the EASY reservation)
        mr.backend.submit(Job("guest", 2, 20.0, "test/sleep", command=("/bin/sleep", "0.5")))
        wait_for(lambda: (mr.step(), any(o.job_id == "guest" for o in mr.backend.history))[1], 30, 0.1,
                 "the guest to run")
        waited = time.monotonic() - t0
        mr.backend.cancel("big", "test over")
        result = mr.run(timeout_s=30)
    finally:
        mr.close()
    out = {o.job_id: o.state for o in result.outcomes}
    assert out["guest"] == "completed" and out["host"] == "completed", result.outcomes
    assert ("guest", "host") in {(j, h) for _, j, h in mr.backend.starts}
    assert "waits for memory on its host's agent" in caplog.text
    assert waited < 15.0                      # far less than the 120 s filter: REVIVE did it


def test_offer_that_arrives_during_a_pass_is_not_declined_after_it(emulator):
    """An offer received while a pass ran was not seen by it: declining it after that pass
    (refuse_s 120) hid the host's agent from its job for two minutes (a CI flake of the
    test above, when a slow first pass outlasted hold_s). It is declined only after a pass
    that could have used it."""
    emu = emulator(agents=1, cpus=2, mem=1024)
    cfg = quick(hold_s=0.0, hold_jitter=0.0, refuse_s=120.0, idle_refuse_s=120.0)
    mr = MesosRun(emu.url, "static", config=cfg)
    # never fits (4 cores on a 2-core agent): the framework is not idle, offers are only held
    mr.submit([sleeper("big", 1, cores=4)])
    mr.backend.before_pass()                 # a pass starts before any offer came
    mr.start()
    try:
        wait_for(lambda: bool(mr.backend.held_offers()), 20, 0.05, "an offer")
        time.sleep(cfg.settle_s + 0.1)       # settled: the framework may decline now
        mr.backend.after_pass()              # that pass ends: the offer is expired but unseen
        assert mr.backend.held_offers(), "an offer no pass saw was declined"
        assert mr.backend.counters["declined"] == 0
        # passes that see it: it goes back once the framework has settled (settle_s)
        wait_for(lambda: (mr.step(), not mr.backend.held_offers())[1], 20, 0.05,
                 "the seen offer to be declined")
        assert mr.backend.counters["declined"] >= 1
    finally:
        mr.backend.cancel("big", "test over")
        mr.close()
