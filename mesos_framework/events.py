"""The Mesos backend's side of the driver: the pymesos-style Scheduler callbacks (offers,
rescinds, status updates, lost agents, errors) and how a task's status ends its job.

A mixin of ``framework.MesosBackend``; it holds no state of its own.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Mapping

from coscheduler.model import Outcome

from . import messages as msg
from .offers import HeldOffer, hold_deadline
from .master_calls import _saved_tasks
from .records import _Run, _Task, job_of_task

log = logging.getLogger("mesos_framework.framework")
# Ended jobs remembered in memory (outcomes, starts, end states): past this many the
# oldest fifth is let go (``_forget_oldest``).
ENDED_KEPT = 50_000
# Problems logged per OFFERS event (each offer's own list is capped in messages.read_offer);
# the rest are counted in one last line, so that one crafted event is a few log lines.
MAX_EVENT_PROBLEMS = 16


class SchedulerEvents:
    """The pymesos-style Scheduler callbacks (driver thread) and how a task's status ends a job."""

    # -- pymesos-style Scheduler callbacks (driver thread) -----------------------------------
    def registered(self, driver, framework_id, master_info) -> None:
        fid = framework_id.get("value") if isinstance(framework_id, Mapping) else str(framework_id)
        log.info("registered with framework id %s", msg.printable(fid))
        binder = getattr(self.quotas, "bind", None)
        if binder is not None and fid:
            try:   # local node agents: stable names per framework id, a predecessor recovered
                binder(fid)
            except Exception:  # noqa: BLE001 - quotas then fail per job, loudly
                log.exception("binding the node agents to framework %s failed", msg.printable(fid))
        with self._lock:
            self._saved["framework_id"] = fid
            self._subscribed_at = self.now()
            self._pool.clear()
            self._suppressed = False
            self._start_orphan_grace()
            self._write_state()
        self._reconcile()
        self.changed.set()

    def reregistered(self, driver, master_info) -> None:
        log.info("reregistered with the master (framework id %s)", self._fid())
        with self._lock:
            self._subscribed_at = self.now()
            self._pool.clear()      # offers of the old subscription are void
            self._suppressed = False
            self._start_orphan_grace()
        self._reconcile()
        self.changed.set()

    def disconnected(self, driver) -> None:
        log.warning("disconnected from the master; held offers dropped")
        with self._lock:
            self._subscribed_at = None
            self._pool.clear()

    def resourceOffers(self, driver, offers) -> None:
        useless: list[HeldOffer] = []
        with self._lock:
            now = self.now()
            # Suppressed with nothing waiting: an offer the master sent before it read our
            # SUPPRESS goes straight back (no later pass may come to decline it).
            send_back = self._suppressed and self._nothing_waits()
            refuse = self.config.idle_refuse_s if send_back else self.config.refuse_s
            logged = unlogged = 0
            for raw in offers:
                try:
                    v = msg.read_offer(raw)
                    problems: tuple[str, ...] = v.problems
                except msg.MessageError as exc:
                    v, problems = None, (f"offer ignored: {exc}",)
                for p in problems:
                    if logged < MAX_EVENT_PROBLEMS:
                        self._problem(p)
                        logged += 1
                    else:
                        unlogged += 1
                if v is None:
                    continue
                self.counters["offers"] += 1
                if self._first_offer_at is None:
                    self._first_offer_at = self._clock()
                if v.agent_id not in self._agents:
                    self._add_agent(v.agent_id, v.hostname)
                elif v.hostname:
                    self._agents[v.agent_id] = v.hostname
                held = HeldOffer(v, now, hold_deadline(now, self.config.hold_s,
                                                       self.config.hold_jitter, self._rng),
                                 self._passes_begun)
                if send_back or (v.cpus < 1.0 - 1e-6 and v.mem <= 0):
                    useless.append(held)
                    continue
                self._pool[v.offer_id] = held
            if unlogged:
                self._problem(f"and {unlogged} more problems in this OFFERS event (not logged)")
        if useless:
            self._decline(useless, refuse)
        self.changed.set()

    def inverseOffers(self, driver, offers) -> None:
        ids = [o["id"]["value"] for o in offers if isinstance(o, Mapping) and isinstance(o.get("id"), Mapping)]
        log.warning("inverse offers (maintenance) for %s: declined; running jobs are not evacuated", ids)
        if ids:
            self._safe_call(lambda fid: msg.decline_inverse_offers(fid, ids))

    def offerRescinded(self, driver, offer_id) -> None:
        oid = offer_id.get("value") if isinstance(offer_id, Mapping) else str(offer_id)
        with self._lock:
            if self._pool.pop(oid, None) is not None:
                self.counters["rescinded"] += 1
                log.info("offer %s rescinded: no longer held", msg.printable(oid))
        self.changed.set()

    def statusUpdate(self, driver, status) -> None:
        try:
            s = msg.read_status(status)
        except msg.MessageError as exc:
            self._problem(f"status update ignored: {exc}")
            return
        for p in s.problems:
            self._problem(p)
        with self._lock:
            self.counters["status_updates"] += 1
            self._on_status(s)
        self.changed.set()

    def frameworkMessage(self, driver, executor_id, agent_id, data) -> None:
        log.info("message from executor %s on %s (%d bytes, not used)", msg.printable(executor_id, 120),
                 msg.printable(agent_id, 120), len(data or ""))

    def slaveLost(self, driver, agent_id) -> None:
        aid = agent_id.get("value") if isinstance(agent_id, Mapping) else str(agent_id)
        log.warning("agent %s lost", msg.printable(aid))
        with self._lock:
            for h in self._pool.of_agent(aid):
                del self._pool[h.offer_id]
            for jid, r in list(self._runs.items()):
                if any(t.agent_id == aid for t in r.tasks.values()):
                    self._lose(jid, f"agent {msg.printable(self._agents.get(aid) or aid)} lost")
        self.changed.set()

    def executorLost(self, driver, executor_id, agent_id, status) -> None:
        log.info("executor %s on %s ended (status %s)", msg.printable(executor_id, 120),
                 msg.printable(agent_id, 120), msg.printable(status, 200))

    def error(self, driver, message) -> None:
        text = msg.printable(message, 500)   # (logged, and shown by `cosched run` as its error)
        log.error("the master reported an error: %s", text)
        self.fatal = text
        self.changed.set()

    # -- status handling --------------------------------------------------------------------
    def _on_status(self, s: msg.StatusView) -> None:
        if s.state not in msg.ALL_STATES:
            return   # read_status listed it (logged); the driver still ACKs an update with a uuid
        parsed = job_of_task(s.task_id)
        run = self._runs.get(parsed[0]) if parsed else None
        task = run.tasks.get(s.task_id) if run is not None else None
        if task is None:
            self._unknown_task(s, parsed)
            return
        if task.state in msg.TERMINAL_STATES:
            # An ended task stays ended: a stale TASK_RUNNING (or a FAILED after FINISHED)
            # kept a gang from completing or turned a finished task into a failed job.
            if s.state != task.state:
                self._problem(f"status {s.state} for task {msg.printable(s.task_id)} ignored: it "
                              f"already ended {task.state}")
            return
        task.state = s.state
        jid = run.job.job_id
        if s.state == "TASK_RUNNING" and s.executor_pid and self.quotas is not None:
            try:
                self.quotas.add_pid(task.agent_id, task.hostname, jid, s.executor_pid)
            except Exception as exc:  # noqa: BLE001 - the task entered its cgroup itself
                log.debug("registering executor pid %s of %s: %s", s.executor_pid, jid, exc)
        if not s.terminal:
            return
        # (the master's words: logged and kept as the outcome's reason)
        detail = f"task {msg.printable(s.task_id)} {s.state}" + \
            (f" ({msg.printable(s.reason, 100)})" if s.reason else "") + \
            (f": {msg.printable(s.message, 500)}" if s.message else "")
        if s.state == "TASK_FINISHED":
            if all(t.state == "TASK_FINISHED" for t in run.tasks.values()):
                self._end(jid, run.kill_reason[0] if run.kill_reason else "completed",
                          run.kill_reason[1] if run.kill_reason else "")
        elif s.state == "TASK_KILLED" and run.kill_reason is not None:
            if all(t.state in msg.TERMINAL_STATES for t in run.tasks.values()):
                self._end(jid, *run.kill_reason)
        elif s.state in msg.RETRYABLE_STATES:
            self._lose(jid, detail)
        elif s.state == "TASK_KILLED":
            self._kill_rest(run, ("cancelled", f"{detail} (not by this framework)"))
            self._end(jid, "cancelled", f"{detail} (not by this framework)")
        else:   # TASK_FAILED, TASK_ERROR
            self._kill_rest(run, ("failed", detail))
            self._end(jid, "failed", detail)

    def _unknown_task(self, s: msg.StatusView, parsed) -> None:
        if parsed is not None and s.reason == "REASON_RECONCILIATION" and not s.terminal:
            # A task of ours from before a failover whose job is not submitted (yet): adopted
            # when it comes, killed if it does not within ``orphan_grace_s`` (_expire_orphans).
            self._note_orphan(s.task_id, s.agent_id or "")
            return
        if parsed is not None and s.terminal:
            saved = self._unadopted.get(parsed[0])
            if saved is not None and s.task_id in _saved_tasks(saved):
                # A task of the previous instance that ended before its job came: the job,
                # when it comes, is not adopted as running but ends or is requeued as this
                # says (_adopt); the update is not sent again.
                self._ended_unadopted[s.task_id] = s
                self._orphan_tasks.pop(s.task_id, None)
            return   # (else a late update of a job already ended or requeued)
        self._problem(f"status {s.state} for unknown task {msg.printable(repr(s.task_id))} ignored")

    def _lose(self, job_id: str, reason: str) -> None:
        """A job lost a task to the cluster: kill the rest, requeue (or fail)."""
        run = self._runs.get(job_id)
        if run is None:
            return
        self._kill_rest(run, ("requeued", reason))
        n = self._requeues.get(job_id, 0) + 1
        self._requeues[job_id] = n
        self.counters["requeued"] += 1
        end = self._remove_run(job_id)
        self._exit_cpu.pop(job_id, None)   # (a lost run's use is not the job's)
        if n > self.config.max_requeues:
            self._record(Outcome(job_id, run.start, end, "failed",
                                 f"{reason}; gave up after {n - 1} requeues"))
            return
        log.warning("job %s requeued (%d/%d): %s", job_id, n, self.config.max_requeues, reason)
        self._finished.append(Outcome(job_id, run.start, end, "requeued", reason))
        self.history.append(self._finished[-1])
        self._waiting[job_id] = run.job
        threading.Thread(target=self._revive, daemon=True).start()

    def _kill_rest(self, run: _Run, why: tuple[str, str]) -> None:
        if run.kill_reason is None:
            run.kill_reason = why
        if run.waiting_since is not None:   # nothing launched yet: it ends here
            self._end(run.job.job_id, *run.kill_reason)
            return
        for t in run.tasks.values():
            if t.state not in msg.TERMINAL_STATES:
                tid, aid = t.task_id, t.agent_id
                threading.Thread(target=self._safe_call, daemon=True,
                                 args=(lambda fid, tid=tid, aid=aid: msg.kill(fid, tid, aid),)).start()

    def _end(self, job_id: str, state: str, reason: str) -> None:
        run = self._runs.get(job_id)
        if run is None:
            return
        end = self._remove_run(job_id)
        cpu = self._exit_cpu.pop(job_id, None)
        self._record(Outcome(job_id, run.start, max(end, run.start), state, reason,
                             cpu_percent=cpu if state == "completed" else None))

    def _remove_run(self, job_id: str) -> float:
        run = self._runs.pop(job_id)
        if run.host is not None and run.host in self._runs:
            h = self._runs[run.host]
            if job_id in h.guests:
                h.guests.remove(job_id)
        for g in run.guests:   # orphaned guests hold their cores alone from now on
            gr = self._runs.get(g)
            if gr is not None:
                gr.host = None
        # Its mean CPU use over its life, from the agents that ran its tasks (core-weighted):
        # what a job too short to be sampled used (the controller learns its class from it).
        used = [u for t in run.tasks.values() if (u := self._release_quota(job_id, t)) is not None]
        cores = sum(c for _, c in used)
        self._exit_cpu.pop(job_id, None)
        if used and cores > 0:
            self._exit_cpu[job_id] = sum(p * c for p, c in used) / cores
        self._save_state()
        return self.now()

    def _release_quota(self, job_id: str, t: _Task) -> tuple[float, float] | None:
        """Unregister the task's job from its agent; (its life CPU %, its cores there) when
        the agent knew them."""
        if self.quotas is None:
            return None
        try:
            view = self.quotas.release(t.agent_id, t.hostname, job_id)
        except Exception as exc:  # noqa: BLE001
            log.debug("releasing %s on %s: %s", job_id, t.agent_id, exc)
            return None
        if not isinstance(view, dict):
            return None
        pct, cores = view.get("life_cpu_percent"), view.get("cores")
        if isinstance(pct, (int, float)) and not isinstance(pct, bool) and math.isfinite(pct) \
                and isinstance(cores, (int, float)) and not isinstance(cores, bool) and cores > 0:
            return min(max(float(pct), 0.0), 100.0), float(cores)
        return None

    def _record(self, o: Outcome) -> None:
        self._ended[o.job_id] = o.state
        self._requeues.pop(o.job_id, None)
        self._attempts.pop(o.job_id, None)
        self._finished.append(o)
        self.history.append(o)
        if len(self.history) > ENDED_KEPT:
            self._forget_oldest()

    def _forget_oldest(self) -> None:
        """A framework runs for months: past ``ENDED_KEPT`` outcomes, the oldest fifth of
        what is kept per ended job (outcomes, starts, gang latencies, end states) is let
        go; never an outcome a feed has not been told, nor the end state of a job that a
        waiting job depends on."""
        drop = ENDED_KEPT // 5
        if self.feeds:
            drop = min(drop, self._told)
        del self.history[:drop]
        self._told = max(0, self._told - drop)
        for log_list in (self.starts, self.gang_latency_s, self.gang_decision_s):
            del log_list[:max(0, len(log_list) - ENDED_KEPT + drop)]
        if len(self._ended) > ENDED_KEPT:
            needed = {d for j in self._waiting.values() for d in j.depends_on}
            old = list(self._ended)[:len(self._ended) - ENDED_KEPT + drop]
            for jid in old:
                if jid not in needed:
                    del self._ended[jid]
