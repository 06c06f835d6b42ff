"""The virtual-time backend: fluid model, quotas, memory interference, dependencies, errors."""

from __future__ import annotations

import pytest

from coscheduler.backend import Backend, BackendError
from coscheduler.backends import Profile, VirtualBackend
from coscheduler.model import Allocation, InvalidInput, Job


def job(jid, cores=4, walltime=1000.0, tasks=100, deps=(), submit=0.0):
    return Job(jid, cores=cores, walltime_s=walltime, job_class="c", tasks=tasks,
               depends_on=deps, submit_time=submit)


def alloc(jid, node, cores):
    return Allocation(jid, ((node, cores),))


def test_it_is_a_backend():
    assert isinstance(VirtualBackend({"n1": 4}), Backend)


def test_alone_job_runs_its_alone_runtime_and_reports_metrics():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(100.0, cpu_util=0.5, mem_percent=30))
    b.start(b.queued()[0], alloc("a", "n1", 4), 1.0)
    b.advance(40.0)
    s = b.metrics()["a"]
    assert s.cpu_percent == pytest.approx(50.0)
    assert s.mem_percent == 30 and s.tasks_done == 40 and s.tasks_total == 100
    assert s.tasks_per_s == pytest.approx(1.0)
    b.advance(60.0)
    [o] = b.drain_finished()
    assert (o.job_id, o.state, o.runtime_s) == ("a", "completed", pytest.approx(100.0))
    assert b.drain_finished() == []
    assert b.idle()


def test_quota_below_cpu_use_slows_the_job():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(100.0, cpu_util=0.8))
    b.start(b.queued()[0], alloc("a", "n1", 4), 0.4)     # rate = 0.4 / 0.8 = 0.5
    assert b.metrics()["a"].cpu_percent == pytest.approx(40.0)
    b.advance(50.0)
    b.set_quota("a", 1.0)                                 # from here full speed
    b.advance(1000.0)
    [o] = b.drain_finished()
    assert o.end_time == pytest.approx(50.0 + 75.0)


def test_guest_inside_host_and_memory_interference():
    b = VirtualBackend({"n1": 8}, memory_penalty=2.0)
    b.submit(job("h", cores=8), Profile(100.0, cpu_util=0.3, mem_percent=80))
    b.submit(job("g", cores=4), Profile(100.0, cpu_util=0.3, mem_percent=80))
    b.start(job("h", cores=8), alloc("h", "n1", 8), 1.0)
    # The guest may not take free cores that are not there ...
    with pytest.raises(BackendError, match="free cores"):
        b.start(job("g", cores=4), alloc("g", "n1", 4), 1.0)
    # ... but may run inside the host.
    b.set_quota("h", 0.75)
    b.start(job("g", cores=4), alloc("g", "n1", 4), 0.5, host_job="h")
    # Memory: S = 0.8 + 0.8 * 4/8 = 1.2 -> factor 1 / (1 + 2 * 0.2) = 1/1.4.
    m = b.metrics()
    assert m["h"].cpu_percent == pytest.approx(30.0 / 1.4)
    assert m["g"].cpu_percent == pytest.approx(30.0 / 1.4)
    rj = {r.job_id: r for r in b.running()}
    assert rj["g"].host_job == "h" and rj["h"].guest_jobs == ("g",)


def test_no_interference_when_memory_fits():
    b = VirtualBackend({"n1": 8})
    b.submit(job("h", cores=8), Profile(100.0, cpu_util=0.3, mem_percent=40))
    b.submit(job("g", cores=8), Profile(100.0, cpu_util=0.3, mem_percent=40))
    b.start(job("h", cores=8), alloc("h", "n1", 8), 1.0)
    b.set_quota("h", 0.5)
    b.start(job("g", cores=8), alloc("g", "n1", 8), 0.5, host_job="h")
    assert b.metrics()["h"].cpu_percent == pytest.approx(30.0)


def test_orphaned_guest_keeps_its_cores_and_loses_its_host():
    b = VirtualBackend({"n1": 8})
    b.submit(job("h", cores=8), Profile(10.0, cpu_util=0.3))
    b.submit(job("g", cores=4), Profile(100.0, cpu_util=0.3))
    b.submit(job("x", cores=8), Profile(10.0))
    b.start(job("h", cores=8), alloc("h", "n1", 8), 0.75)
    b.start(job("g", cores=4), alloc("g", "n1", 4), 0.5, host_job="h")
    b.advance(20.0)
    assert [o.job_id for o in b.drain_finished()] == ["h"]
    [g] = b.running()
    assert g.host_job is None and g.quota_fraction == 0.5
    # The orphan holds 4 of the 8 cores: an 8-core job cannot start.
    with pytest.raises(BackendError, match="free cores"):
        b.start(job("x", cores=8), alloc("x", "n1", 8), 1.0)


def test_dependencies_gate_the_queue_and_failures_propagate():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(10.0, fail_after_s=5.0))
    b.submit(job("b", deps=("a",)), Profile(10.0))
    b.submit(job("c", deps=("b",)), Profile(10.0))
    assert [j.job_id for j in b.queued()] == ["a"]
    with pytest.raises(BackendError, match="not queued"):
        b.start(job("b", deps=("a",)), alloc("b", "n1", 4), 1.0)
    b.start(b.queued()[0], alloc("a", "n1", 4), 1.0)
    b.advance(100.0)
    outs = {o.job_id: o for o in b.drain_finished()}
    assert outs["a"].state == "failed"
    assert outs["b"].state == "failed" and "dependency a" in outs["b"].reason
    assert outs["c"].state == "failed" and "dependency b" in outs["c"].reason
    assert b.idle()


def test_dependency_completed_releases_the_child_and_submit_time_gates():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(10.0))
    b.submit(job("b", deps=("a",)), Profile(10.0))
    b.submit(job("late", submit=50.0), Profile(10.0))
    b.start(b.queued()[0], alloc("a", "n1", 4), 1.0)
    assert b.next_event() == pytest.approx(10.0)
    b.advance(10.0)
    assert [j.job_id for j in b.queued()] == ["b"]
    b.advance(40.0)
    assert {j.job_id for j in b.queued()} == {"b", "late"}


def test_walltime_kill_and_cancel():
    b = VirtualBackend({"n1": 8})
    b.submit(job("a", walltime=50.0), Profile(100.0))
    b.submit(job("c"), Profile(100.0))
    b.start(b.queued()[0], alloc("a", "n1", 4), 1.0)
    b.start(job("c"), alloc("c", "n1", 4), 1.0)
    b.cancel("c")
    b.advance(60.0)
    outs = {o.job_id: o for o in b.drain_finished()}
    assert outs["a"].state == "timeout" and outs["a"].end_time == pytest.approx(50.0)
    assert outs["c"].state == "cancelled"


def test_injected_errors_and_bad_requests():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(10.0))
    b.inject_start_errors("a")
    with pytest.raises(BackendError, match="injected"):
        b.start(job("a"), alloc("a", "n1", 4), 1.0)
    with pytest.raises(BackendError, match="quota fraction"):
        b.start(job("a"), alloc("a", "n1", 4), 0.0)
    with pytest.raises(BackendError, match="does not match"):
        b.start(job("a"), alloc("a", "n1", 2), 1.0)
    b.start(job("a"), alloc("a", "n1", 4), 1.0)
    b.inject_quota_errors("a")
    with pytest.raises(BackendError, match="injected"):
        b.set_quota("a", 0.5)
    with pytest.raises(BackendError, match="not running"):
        b.set_quota("zz", 0.5)
    b.hide_metrics("a")
    assert b.metrics() == {}


def test_fail_reports_a_queued_job_with_its_reason():
    b = VirtualBackend({"n1": 4})
    b.submit(job("a"), Profile(10.0))
    b.fail("a", "too big")
    [o] = b.drain_finished()
    assert (o.state, o.reason) == ("failed", "too big")
    with pytest.raises(BackendError):
        b.fail("a", "again")


def test_bad_input_is_refused_with_names():
    with pytest.raises(InvalidInput, match="cpu_util"):
        Profile(10.0, cpu_util=0.0)
    with pytest.raises(InvalidInput, match="alone_runtime_s"):
        Profile(float("nan"))
    b = VirtualBackend({"n1": 4})
    with pytest.raises(InvalidInput, match="depends on zz"):
        b.submit(job("a", deps=("zz",)), Profile(1.0))
    b.submit(job("a"), Profile(1.0))
    with pytest.raises(InvalidInput, match="already submitted"):
        b.submit(job("a"), Profile(1.0))
