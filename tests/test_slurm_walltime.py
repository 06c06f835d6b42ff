"""Walltime credit (slurm_plugin/walltime.py and the Slurm backend's hook): a host that
lends and whose measured progress projects an end past its time limit gets the time back
(`scontrol update JobId=N TimeLimit=+M`), within the partition's MaxTime, once; the
credit is stored with the host's latest decision. The live test is in test_slurm_live.py."""

from __future__ import annotations

import pytest

from coscheduler.model import MetricsSample
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.walltime import credit_minutes, projected_end
from test_slurm_units import RecordedCluster


def test_projection_and_minutes():
    # 2 of 8 tasks done at 0.05 tasks/s: 120 s more
    assert projected_end(1000.0, 1240.0, 2, 8, 0.05) == pytest.approx(1360.0)
    # no rate measured: the average since start (2 tasks in 240 s)
    assert projected_end(1000.0, 1240.0, 2, 8, None) == pytest.approx(1960.0)
    assert projected_end(1000.0, 1240.0, 0, 8, None) is None       # nothing known yet
    assert projected_end(1000.0, 1240.0, 8, 8, 0.1) is None         # done
    assert projected_end(1000.0, 1240.0, 2, None, 0.1) is None      # no total
    # limit 300 s from 1000: an end at 1360 (+30 s margin) needs 90 s: 2 minutes
    assert credit_minutes(1000.0, 300.0, 1360.0, None) == (2, False)
    assert credit_minutes(1000.0, 300.0, 1200.0, None) == (0, False)
    assert credit_minutes(1000.0, 300.0, 1360.0, 360.0) == (1, True)   # MaxTime 6 min
    assert credit_minutes(1000.0, 300.0, 1360.0, 300.0) == (0, True)   # no room at all


def _sample(done, total, rate, now):
    return MetricsSample(job_id="5", time=now, cpu_percent=60.0, mem_percent=1.0,
                         tasks_done=done, tasks_total=total, tasks_per_s=rate)


@pytest.mark.parametrize("max_time, expect", [(None, ("+2", 2, False)), (360.0, ("+1", 1, True)),
                                              (300.0, None)])
def test_backend_credits_a_lending_host_once(tmp_path, max_time, expect):
    """Recorded 24.11 cluster: host 5 (quota 0.6, lending to guest 6), limit 5 min."""
    src = RecordedCluster("24.11")
    src.partition_max_time = lambda name: max_time
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json")
    b.running()
    host = b._jobs[5]
    now = host.start_time + 240.0
    b._credit_walltime({"5": _sample(2, 8, 0.05, now), "6": _sample(1, 8, 0.01, now)}, now)
    updates = [w for w in src.writes if w[0] == "update"]
    if expect is None:
        assert updates == [] and b.drain_walltime_credits() == []
        return
    # only the host: the guest (6) lends nothing, however slow it is
    assert updates == [("update", 5, {"TimeLimit": expect[0]})]
    (c,) = b.drain_walltime_credits()
    assert (c["job_id"], c["minutes"], c["capped"], c["limit_s"]) == ("5", expect[1], expect[2], 300.0)
    assert b.drain_walltime_credits() == []


def test_a_host_on_time_or_not_lending_gets_nothing(tmp_path):
    src = RecordedCluster("24.11")
    src.partition_max_time = lambda name: None
    b = SlurmBackend(src, partition="cosched", state_file=tmp_path / "s.json")
    b.running()
    now = b._jobs[5].start_time + 60.0
    b._credit_walltime({"5": _sample(4, 8, 0.5, now)}, now)          # ends well in time
    b._quotas[5] = (1.0, ("rn1",))                                    # lends nothing
    b._credit_walltime({"5": _sample(1, 80, 0.01, now)}, now)
    assert [w for w in src.writes if w[0] == "update"] == []


def test_credit_is_stored_with_the_hosts_latest_decision_and_shown(tmp_path):
    import json

    from click.testing import CliRunner

    from coscheduler.cli import main
    from coscheduler.learner import AsaxLearner, HostState, LearnerConfig
    from coscheduler.store import SqliteStore

    db = tmp_path / "state.db"
    lrn = AsaxLearner(LearnerConfig(fitted_expert=False))
    with SqliteStore(db, create=True) as store:
        for guest in ("6", "7"):
            d = lrn.decide(HostState("demo/host", 90.0, 10.0, "parallel", 0.5, None), "5", guest, 100.0)
            store.record_decision(d, 0.6, 0.4)
        credit = {"job_id": "5", "minutes": 2, "time": 200.0, "limit_s": 300.0,
                  "projected_end": 330.0, "capped": False}
        assert store.record_walltime_credit(credit) == d.decision_id      # the latest
        assert store.record_walltime_credit({**credit, "job_id": "99"}) is None
        with pytest.raises(Exception, match="not a credit"):
            store.record_walltime_credit({**credit, "minutes": 0})
    out = CliRunner().invoke(main, ["decisions", "show", str(d.decision_id), "--db", str(db), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["decision"]["walltime_credits"] == [credit]
    out = CliRunner().invoke(main, ["decisions", "show", str(d.decision_id), "--db", str(db)])
    assert "walltime    +2 min to job 5" in out.output
    out = CliRunner().invoke(main, ["decisions", "show", str(d.decision_id - 1), "--db", str(db), "--json"])
    assert json.loads(out.output)["decision"]["walltime_credits"] == []
