"""The Mesos framework's queue folder (mesos_framework/queue.py) and its feed: what any
program may write, what a restarted framework takes back, what is refused and why."""

from __future__ import annotations

import json

from coscheduler.model import Job, Outcome
from mesos_framework.feeds import QueueFeed
from mesos_framework.framework import FrameworkConfig, MesosBackend
from mesos_framework.queue import JobQueue, read_queue_file


def _job(jid, deps=()):
    return Job(jid, 2, 60.0, "t/x", depends_on=deps, command=("/bin/true",))


def test_jobs_go_new_then_active_then_done_with_their_outcome(tmp_path):
    q = JobQueue(tmp_path / "q")
    q.submit([_job("a"), _job("b", ("a",))])
    (q.new / "junk.json").write_text("{not json")
    (q.new / "bad.json").write_text(json.dumps({"job_id": "x", "cores": 2}))
    taken = q.take()
    assert [j.job_id for j in taken] == ["a", "b"] and taken[1].depends_on == ("a",)
    assert sorted(p.name for p in q.rejected.iterdir()) == ["bad.json", "bad.json.error",
                                                            "junk.json", "junk.json.error"]
    assert "command" in (q.rejected / "bad.json.error").read_text()
    assert "not valid JSON" in (q.rejected / "junk.json.error").read_text()
    q.finish(Outcome("a", 1.0, 5.0, "requeued", "agent lost"))      # not final: stays active
    assert len(list(q.active.iterdir())) == 2
    q.finish(Outcome("a", 6.0, 9.0, "completed"))
    done = json.loads((q.done / "a.json").read_text())
    assert done["job"]["job_id"] == "a" and done["outcome"]["state"] == "completed"
    # a restarted framework takes b back, and knows a ended (b depends on it)
    b = MesosBackend(FrameworkConfig())
    feed = QueueFeed(JobQueue(tmp_path / "q"))
    feed.poll(b)
    assert b.known("b") and b.known("a")
    assert not feed.pending()


def test_a_duplicate_job_id_is_refused_with_the_reason(tmp_path):
    q = JobQueue(tmp_path / "q")
    q.submit([_job("a")])
    b = MesosBackend(FrameworkConfig())
    feed = QueueFeed(q)
    feed.poll(b)
    q.submit([_job("a")])
    feed.poll(b)
    errors = [p.read_text() for p in q.rejected.glob("*.error")]
    assert len(errors) == 1 and "already queued or running" in errors[0]


def test_queue_file_as_list_or_json_lines(tmp_path):
    f = tmp_path / "jobs.json"
    d = {"job_id": "a", "cores": 1, "walltime_s": 5, "job_class": "t/x", "command": ["true"]}
    f.write_text(json.dumps([d]))
    assert [j.job_id for j in read_queue_file(f)] == ["a"]
    f.write_text(json.dumps(d) + "\n" + json.dumps({**d, "job_id": "b"}) + "\n")
    assert [j.job_id for j in read_queue_file(f)] == ["a", "b"]


def test_done_and_rejected_records_go_after_a_week_but_those_a_waiting_job_needs(tmp_path):
    """``done/`` and ``rejected/`` grew by a file per job for as long as the framework
    ran. A week after they were written they go, about hourly, except the record of a job
    that a job still in ``active/`` depends on (a restart reads it to know the dependency
    ended)."""
    import os
    import time

    q = JobQueue(tmp_path / "q")
    q.submit([_job("a"), _job("b"), _job("c", ("a",))])
    (q.new / "junk.json").write_text("{not json")
    q.take()
    q.finish(Outcome("a", 1.0, 5.0, "completed"))
    q.finish(Outcome("b", 1.0, 5.0, "failed", "exit 1"))
    (q.done / ".x.tmp-123").write_text("{")          # a writer killed before its rename
    old = time.time() - 8 * 86400
    for p in list(q.done.iterdir()) + list(q.rejected.iterdir()):
        os.utime(p, (old, old))
    (q.done / "fresh.json").write_text("{}")
    # a restarted framework's queue: c (active, needs a) was taken back by the feed
    q2 = JobQueue(tmp_path / "q")
    feed = QueueFeed(q2)
    feed.poll(MesosBackend(FrameworkConfig()))
    assert sorted(p.name for p in q2.done.iterdir()) == ["a.json", "fresh.json"]
    assert list(q2.rejected.iterdir()) == []
    assert q2.prune() is None            # not due again within the hour
    q2.finish(Outcome("c", 6.0, 9.0, "completed"))
    assert q2.prune(time.time() + 3600) == 1   # a is needed by no one now
    assert sorted(p.name for p in q2.done.iterdir()) == ["c.json", "fresh.json"]
