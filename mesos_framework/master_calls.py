"""The Mesos backend's calls to the master (DECLINE with filters, REVIVE, RECONCILE) and its
failover state file (the framework id and its tasks, adopted by the next instance).

A mixin of ``framework.MesosBackend``; it holds no state of its own.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from coscheduler import boundedjson
from coscheduler.backend import BackendError
from coscheduler.model import Allocation, Job

from . import messages as msg
from .offers import HeldOffer
from .records import MAX_STATE_BYTES, _not_processed, _Run, _Task, job_of_task

log = logging.getLogger("mesos_framework.framework")
# Orphan tasks (reported running after a failover, their job not submitted) kept at most,
# beyond those the saved state lists: a master that reports made-up task ids of our form
# must not grow the table (nor the KILLs sent when their grace ends) without bound.
ORPHANS_KEPT = 1_000


class MasterCalls:
    """Calls to the master (DECLINE, REVIVE, RECONCILE) and the failover state file."""

    def _problem(self, text: str) -> None:
        log.warning("%s", text)
        self.problems = (self.problems + [text])[-200:]

    def _fid(self) -> str:
        fid = self._saved.get("framework_id") or getattr(self.driver, "framework_id", None)
        if not fid:
            raise BackendError("not registered with a master yet")
        return fid

    def _call(self, body: dict[str, Any]) -> None:
        if self.driver is None:
            raise BackendError("no driver attached")
        self.driver.call(body)

    def _safe_call(self, build: Callable[[str], dict[str, Any]]) -> bool:
        try:
            self._call(build(self._fid()))
            return True
        except Exception as exc:  # noqa: BLE001 - logged; state converges by reconciliation
            log.warning("call failed: %s", exc)
            return False

    def _decline(self, offers: list[HeldOffer], refuse_s: float) -> None:
        """DECLINE with a refuse filter. If the master did not take the call (5xx, no
        answer), the offers are still outstanding there: they are held again and declined
        on a later pass (else they would stay offered to nobody)."""
        ids = [h.offer_id for h in offers]
        try:
            self._call(msg.decline(self._fid(), ids, refuse_s))
        except Exception as exc:  # noqa: BLE001
            log.warning("DECLINE of %d offer(s) failed: %s", len(ids), exc)
            if _not_processed(exc):
                with self._lock:
                    self._repool(offers)
            return
        with self._lock:
            self.counters["declined"] += len(ids)

    def _repool(self, offers: Iterable[HeldOffer]) -> None:
        """Offers whose ACCEPT or DECLINE the master never processed: held again (lock held),
        unless the subscription they came with has ended."""
        if self._subscribed_at is None:
            return
        now = self.now()
        for h in offers:
            self._pool.setdefault(h.offer_id, replace(h, hold_until=min(h.hold_until, now + 1.0)))

    def _revive(self, force: bool = False) -> None:
        """REVIVE after a SUPPRESS; ``force``: also to clear the refuse filters (at most
        once a second), so that declined resources are offered again at once. A REVIVE the
        master did not get leaves the framework marked suppressed: ``after_pass`` retries."""
        with self._lock:
            now = self._clock()
            was = self._suppressed
            if not was and not (force and now - self._last_revive >= 1.0):
                return
            self._suppressed = False
            self._last_revive = now
        if not self._safe_call(lambda fid: msg.revive(fid, [self.config.role] if self.config.role else ())):
            with self._lock:
                self._suppressed = was or self._suppressed
                self._last_revive = -math.inf

    def _reconcile(self) -> None:
        with self._lock:
            known = [(t.task_id, t.agent_id) for r in self._runs.values() if r.waiting_since is None
                     for t in r.tasks.values()]
            # The set is built once: rebuilt per saved task it made this O(running x saved)
            # under the lock (20,000 tasks: 19 s with every other callback waiting).
            running = {k for k, _ in known}
            known += [(tid, aid) for tid, aid in self._saved.get("tasks", {}).items() if tid not in running]
        # Explicit for what we launched, then implicit (every task the master knows).
        if known:
            self._safe_call(lambda fid: msg.reconcile(fid, known))
        self._safe_call(lambda fid: msg.reconcile(fid))

    # -- failover state -----------------------------------------------------------------------
    def _load_state(self) -> dict[str, Any]:
        path = self.config.state_file
        if not path or not os.path.exists(path):
            return {}
        try:
            with open(path, "rb") as f:
                data = boundedjson.loads(f.read(MAX_STATE_BYTES + 1), max_bytes=MAX_STATE_BYTES,
                                         what="framework state")
            # "framework_id": null is what a framework that never registered writes: not
            # registered yet, not damage
            fid = data.get("framework_id") if isinstance(data, dict) else 0
            if not isinstance(data, dict) or not (fid is None or isinstance(fid, str)):
                raise ValueError("not a framework state object")
            tasks = data.get("tasks", {})
            if not isinstance(tasks, dict):
                raise ValueError("'tasks' is not an object")
            return {"framework_id": data.get("framework_id") or None,
                    "tasks": {str(k): str(v) for k, v in tasks.items()},
                    "runs": data.get("runs", {}) if isinstance(data.get("runs"), dict) else {}}
        except (OSError, ValueError) as exc:
            aside = f"{path}.broken-{int(time.time())}"
            log.error("framework state %s unreadable (%s): set aside as %s; subscribing as a new "
                      "framework", path, exc, aside)
            try:
                os.replace(path, aside)
            except OSError:
                pass
            return {}

    def _save_state(self) -> None:
        """The state changed (a launch, an end): written at the next ``_flush_state``."""
        self._state_stale = True

    def _flush_state(self) -> None:
        if self._state_stale:
            self._write_state()

    def _write_state(self) -> None:
        self._state_stale = False
        path = self.config.state_file
        if not path:
            return
        launched = {jid: r for jid, r in self._runs.items() if r.waiting_since is None}
        # Runs of the previous instance not adopted yet stay in the file (their job may still
        # come, here or in a next instance): writing only this instance's runs lost them, and
        # their job was launched again beside its running task.
        pending = {jid: saved for jid, saved in self._unadopted.items() if jid not in launched}
        tasks = {tid: str(where[0]) for saved in pending.values()
                 for tid, where in _saved_tasks(saved).items() if where}
        tasks.update({t.task_id: t.agent_id for r in launched.values() for t in r.tasks.values()})
        data = {"framework_id": self._saved.get("framework_id"),
                "tasks": tasks,
                "runs": {**pending,
                         **{jid: {"attempt": r.attempt, "start_wall": time.time() - (self.now() - r.start),
                                  "host": r.host, "quota": r.quota,
                                  "tasks": {t.task_id: [t.agent_id, t.hostname, t.cores]
                                            for t in r.tasks.values()}}
                            for jid, r in launched.items()}}}
        self._saved["tasks"] = data["tasks"]
        self._saved["runs"] = data["runs"]
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                f.write(json.dumps(data))   # (the C encoder; json.dump streams in Python)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            log.error("saving the framework state to %s failed: %s", path, exc)
            try:   # (a full disk: the partial copy must not hold the space the next save needs)
                os.unlink(tmp)
            except OSError:
                pass

    def _adopt(self, job: Job) -> bool:
        """After a failover: a submitted job whose tasks the saved state lists is adopted as
        running (reconciliation then confirms them, or reports them lost: requeued)."""
        saved = self._unadopted.pop(job.job_id, None)
        if not isinstance(saved, dict):
            return False
        try:
            tasks = {tid: _Task(tid, a, h, int(c)) for tid, (a, h, c) in saved["tasks"].items()}
            attempt = int(saved["attempt"])
            start = self.now() - max(0.0, time.time() - float(saved["start_wall"]))
        except (KeyError, TypeError, ValueError) as exc:
            log.error("saved run of job %s unusable (%s): it is queued again", job.job_id, exc)
            return False
        by_node: dict[str, int] = {}
        for t in tasks.values():
            if t.agent_id not in self._agents:
                self._add_agent(t.agent_id, t.hostname)
            node = self._node_of[t.agent_id]
            by_node[node] = by_node.get(node, 0) + t.cores
        host = saved.get("host")
        self._runs[job.job_id] = _Run(job, Allocation(job.job_id, tuple(by_node.items())), start,
                                      float(saved.get("quota", 1.0)),
                                      host if host in self._runs else None, attempt, tasks)
        if host in self._runs:
            self._runs[host].guests.append(job.job_id)
        self._attempts[job.job_id] = attempt
        for tid in tasks:
            self._orphan_tasks.pop(tid, None)
        log.info("job %s adopted from the previous framework instance (%d tasks)", job.job_id, len(tasks))
        # Tasks that ended before the job came: their final status, as if it came now (all
        # finished: the job completed; one lost: requeued; failed: failed, the rest killed).
        for s in [self._ended_unadopted.pop(tid) for tid in tasks if tid in self._ended_unadopted]:
            self._on_status(s)
        return True

    # -- tasks of the previous instance whose job has not come (yet) -----------------------------
    def _start_orphan_grace(self) -> None:
        """At the first (re)registration: the previous instance's runs wait for their jobs
        ``orphan_grace_s`` from now (lock held)."""
        if self._unadopted_until is None:
            self._unadopted_until = self.now() + self.config.orphan_grace_s

    def _note_orphan(self, task_id: str, agent_id: str) -> None:
        """A task of ours the master says runs, whose job is not here (lock held)."""
        if task_id in self._orphan_tasks:
            return
        if task_id not in self._saved.get("tasks", {}) and len(self._orphan_tasks) >= ORPHANS_KEPT:
            self._orphans_refused += 1
            if self._orphans_refused == 1:
                self._problem(f"more than {ORPHANS_KEPT} unknown tasks reported running after a "
                              f"failover: task {msg.printable(task_id)} and the next ones not tracked")
            return
        self._orphan_tasks[task_id] = (agent_id, self.now())
        parsed = job_of_task(task_id)
        if parsed is not None:   # a relaunch of its job must not reuse the running task's id
            self._attempts[parsed[0]] = max(self._attempts.get(parsed[0], 0), parsed[1])

    def _expire_orphans(self) -> None:
        """Kill the previous instance's tasks whose job did not come within ``orphan_grace_s``
        (reported running that long ago, or saved and not adopted by the end of the grace
        after registering), and forget their runs: else they ran for ever, or their job,
        arriving later, was launched beside them."""
        now = self.now()
        grace = self.config.orphan_grace_s
        kills: dict[str, str] = {}
        with self._lock:
            for tid, (aid, seen) in list(self._orphan_tasks.items()):
                if now - seen >= grace:
                    del self._orphan_tasks[tid]
                    kills[tid] = aid
            until = self._unadopted_until
            if until is not None and now >= until and self._unadopted:
                waiting = {p[0] for t in self._orphan_tasks if (p := job_of_task(t))}
                for jid in [j for j in self._unadopted if j not in waiting]:
                    saved = self._unadopted.pop(jid)
                    for tid, where in _saved_tasks(saved).items():
                        if self._ended_unadopted.pop(tid, None) is None:   # (ended: no kill)
                            kills.setdefault(tid, str(where[0]) if where else "")
                self._save_state()
            for tid in list(kills):
                p = job_of_task(tid)
                if p is None:
                    continue
                run = self._runs.get(p[0])
                if run is not None and tid in run.tasks:
                    del kills[tid]   # (its job came and runs it: never killed)
                else:
                    self._attempts[p[0]] = max(self._attempts.get(p[0], 0), p[1])
        for tid, aid in kills.items():
            log.warning("task %s of the previous framework instance: its job did not come within "
                        "%g s: killed", msg.printable(tid), grace)
            self._safe_call(lambda fid, tid=tid, aid=aid: msg.kill(fid, tid, aid or None))


def _saved_tasks(saved: Any) -> dict[str, list]:
    """The tasks of a saved run, {task id: [agent id, hostname, cores]}; {} if unusable."""
    tasks = saved.get("tasks") if isinstance(saved, dict) else None
    if not isinstance(tasks, dict):
        return {}
    return {str(tid): where if isinstance(where, list) else [] for tid, where in tasks.items()}
