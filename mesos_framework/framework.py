"""The Mesos framework: a Backend (coscheduler/backend.py) over resource offers.

The one Controller, with the same policies as every other body (queue order, first-fit
gang with EASY backfilling, Static, ASA_X), drives Mesos through this class; it holds no
policy of its own. It is also a pymesos-style Scheduler: the driver calls it from its
thread (offers, rescinds, status updates), the controller from its own; one lock guards
the state both touch.

How the controller's view is made from offers (first-fit gang over offers):

- ``nodes()`` lists the Mesos agents with the cores this framework can use there: the
  whole cores in the offers it holds, plus the cores its own running jobs hold. So the
  controller's free cores (nodes minus running) are exactly the held offers, and its
  first fit places a rigid job only when the held offers cover the whole request.
- Offers are held until a job uses them or until a bounded, jittered deadline
  (``hold_s``), then declined with a refuse filter (``refuse_s``) so they go to others
  (``after_pass``). A job that does not fit yet keeps the controller's EASY reservation,
  and the held offers accumulate until it fits. Nothing queued: every held offer is
  declined and offers are suppressed until a job comes (REVIVE).
- ``start`` launches a job's tasks (one per agent part, ``cpus`` = its cores) with one
  ACCEPT per agent, all sent at once: Mesos refuses an ACCEPT whose offers belong to more
  than one agent (master validation: "Aggregated offers must belong to one single
  agent"). The unused rest of an accepted offer goes back with ``accept_refuse_s``.
- A guest (ASA_X or Static co-allocation) runs on its host's agent and cores: its task
  takes only memory from an offer of that agent (no cpus: it lives on the host's cores),
  and the node agent there divides the CPU time (``quotas``).
- Task states: all tasks finished -> completed; a task failed/errored -> the job failed
  (its other tasks killed); killed at its walltime -> timeout; TASK_LOST and the other
  cluster-side losses (agent lost, dropped, gone, unknown) -> the job's remaining tasks
  are killed and the job is requeued (reported as a ``requeued`` outcome so the controller
  closes its decisions), at most ``max_requeues`` times, then failed with the reason. A
  job is never dropped silently.
- Failover: the framework id is saved in ``state_file`` with every launched task (written
  once a pass, before its ACCEPTs); a new
  instance subscribes with that id (within ``failover_timeout_s`` the master kept the
  tasks), reconciles them, and adopts those still running. A saved task the master reports
  ended before its job comes is not adopted as running: the job, when it comes, ends or is
  requeued as the task's final state says.

Files: this one holds the Backend interface, the state and the pass upkeep; its parts are
mixins of ``MesosBackend``: launching.py (start, ACCEPTs), events.py (the driver's
callbacks, status updates), master_calls.py (DECLINE/REVIVE/RECONCILE, the state file);
records.py the shared records (config, runs, tasks, task ids).
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any, Callable

from coscheduler.backend import BackendError, check_quota_fraction
from coscheduler.fanout import at_once
from coscheduler.model import InvalidInput, Job, MetricsSample, Node, Outcome, RunningJob, validate_job_id

from . import messages as msg
from .events import SchedulerEvents
from .launching import Launching
from .master_calls import MasterCalls
from .offers import HeldOffer, OfferPool, cores_by_agent, expired
from .quotas import NodeQuotas
from .records import FrameworkConfig, _Run, job_of_task, task_id_for

log = logging.getLogger("mesos_framework.framework")


class MesosBackend(Launching, SchedulerEvents, MasterCalls):
    """See the module docstring. ``driver`` is attached with ``attach`` (any object with the
    MesosSchedulerDriver's ``call``, ``connected`` and ``framework_id``)."""

    name = "mesos"

    def __init__(self, config: FrameworkConfig | None = None, quotas: NodeQuotas | None = None,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None):
        self.config = config or FrameworkConfig()
        self.quotas = quotas
        self._clock = clock
        self._t0 = clock()
        self._rng = rng or random.Random()
        self._lock = threading.RLock()
        self.changed = threading.Event()   # set by the driver's callbacks: run a pass now
        self.driver: Any = None
        self._subscribed_at: float | None = None
        self._suppressed = False
        self._agents: dict[str, str] = {}          # agent id -> hostname, first-seen order
        self._agent_cores: dict[str, int] = {}     # most cores seen usable per agent
        self._first_offer_at: float | None = None   # (clock) when the first offer came
        self._node_of: dict[str, str] = {}         # agent id -> node name the controller sees
        self._agent_of: dict[str, str] = {}
        self._pool = OfferPool()
        # Passes begun (before_pass): after a pass, only offers that arrived before it began
        # are declined. 0: no pass has announced itself (every expired offer goes).
        self._passes_begun = 0
        self._pass_settled = False                 # whether the last pass began settled
        self._pending: dict[str, dict[str, Any]] = {}        # agent id -> ACCEPT being built
        self._taken: dict[str, dict[str, float]] = {}        # offer id -> resources cut this pass
        self._last_offer: dict[str, float] = {}              # job id -> its last needed offer
        self._waiting: dict[str, Job] = {}
        self._runs: dict[str, _Run] = {}
        self._ended: dict[str, str] = {}
        self._exit_cpu: dict[str, float] = {}    # job id -> its mean CPU % over its life
        self._finished: list[Outcome] = []
        self._requeues: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        # After a failover: task id -> (agent id, when first reported running) of tasks whose
        # job is not here; killed after ``orphan_grace_s`` unless the job comes (adopted).
        self._orphan_tasks: dict[str, tuple[str, float]] = {}
        self._orphans_refused = 0                  # past ORPHANS_KEPT: not tracked (logged once)
        self.history: list[Outcome] = []
        self.fatal: str | None = None
        self.problems: list[str] = []              # bad input seen (offers, statuses), last 200
        self.counters = {"offers": 0, "rescinded": 0, "declined": 0, "accepted": 0,
                         "launched_tasks": 0, "requeued": 0, "status_updates": 0}
        self.gang_latency_s: list[float] = []      # last needed offer -> ACCEPTs answered
        self.gang_decision_s: list[float] = []     # last needed offer -> ACCEPTs issued
        self._pool_x = None
        self.starts: list[tuple[float, str, str | None]] = []
        self._last_revive = -math.inf
        self.feeds: list[Any] = []                 # where jobs come from (feeds.py)
        self._feeds_due = 0.0
        self._told = 0                             # outcomes of history told to the feeds
        self._teardown = False
        self._saved = self._load_state()
        # The previous instance's runs whose job has not been submitted yet (adopted when it
        # comes); past ``_unadopted_until`` (the grace after registering) their tasks are killed.
        self._unadopted: dict[str, Any] = dict(self._saved.get("runs", {}))
        self._unadopted_until: float | None = None
        # The final status of a task of such a run that ended before its job came (a
        # reconciliation answer, an update sent again): what its job's adoption starts from.
        self._ended_unadopted: dict[str, msg.StatusView] = {}
        # Launches and ends mark the state file stale; it is written once per pass, before
        # the pass's ACCEPTs (``flush``): one write per event was quadratic in the running
        # tasks (2,000 tasks ending: 59 s of JSON and fsync on the event thread).
        self._state_stale = False

    # -- set-up ---------------------------------------------------------------------------
    def attach(self, driver: Any) -> None:
        self.driver = driver

    def framework_info(self) -> dict[str, Any]:
        c = self.config
        return msg.framework_info(c.user, c.name, framework_id=self._saved.get("framework_id"),
                                  failover_timeout=c.failover_timeout_s,
                                  roles=[c.role] if c.role else (), principal=c.principal)

    def submit(self, job: Job) -> None:
        with self._lock:
            jid = job.job_id
            if jid in self._waiting or jid in self._runs or jid in self._ended:
                raise InvalidInput(f"mesos backend: job {jid} was already submitted")
            if not job.command:
                raise InvalidInput(f"mesos backend: job {jid} has no command to run")
            for dep in job.depends_on:
                if dep not in self._waiting and dep not in self._runs and dep not in self._ended:
                    raise InvalidInput(f"job {jid} depends on {dep}, which was not submitted")
            adopted = self._adopt(job)
            if not adopted:
                self._waiting[jid] = job
        self._revive()

    # -- Backend interface ----------------------------------------------------------------
    def now(self) -> float:
        return self._clock() - self._t0

    def nodes(self) -> list[Node]:
        with self._lock:
            held = cores_by_agent(self._pool.values())
            ours: dict[str, int] = {}
            for r in self._runs.values():
                if r.host is None or r.host not in self._runs:
                    for t in r.tasks.values():
                        ours[t.agent_id] = ours.get(t.agent_id, 0) + t.cores
            out = []
            for aid in self._agents:
                c = held.get(aid, 0) + ours.get(aid, 0)
                if c >= 1:
                    out.append(Node(self._node_of[aid], c))
                    self._agent_cores[aid] = max(self._agent_cores.get(aid, 0), c)
            return out

    def cluster_cores(self) -> int:
        """The most cores seen usable per agent, summed (what this framework knows of the
        cluster's size)."""
        self.nodes()
        with self._lock:
            return sum(self._agent_cores.values())

    def known_capacity(self) -> dict[str, int]:
        """Node name -> the most cores seen usable there (the controller's view of the
        whole cluster: a job no set of these could hold does not hold offers); {} until
        ``capacity_settle_s`` after the first offer, while agents may still be unseen."""
        self.nodes()
        with self._lock:
            first = self._first_offer_at
            if first is None or self._clock() - first < self.config.capacity_settle_s:
                return {}
            return {self._node_of[aid]: c for aid, c in self._agent_cores.items() if c >= 1}

    def agent_cores(self) -> dict[str, int]:
        """Agent id -> the most cores seen usable there."""
        self.nodes()
        with self._lock:
            return dict(self._agent_cores)

    def queued(self) -> list[Job]:
        with self._lock:
            if not self._ready():
                return []
            self._resolve_dependencies()
            return [j for j in self._waiting.values()
                    if all(self._ended.get(d) == "completed" for d in j.depends_on)]

    def running(self) -> list[RunningJob]:
        with self._lock:
            return [r.running_job() for r in self._runs.values()]

    def metrics(self) -> dict[str, MetricsSample]:
        if self.quotas is None:
            return {}
        self._renew_leases()
        out: dict[str, MetricsSample] = {}
        now = self.now()
        with self._lock:
            runs = [(jid, next(iter(r.tasks.values()))) for jid, r in self._runs.items() if r.tasks]
        # One listing per node agent, the agents asked at once: a job's view each, one
        # after the other, was a round trip per running job per pass.
        by_agent: dict[tuple[str, str], list[str]] = {}
        for jid, t in runs:
            by_agent.setdefault((t.agent_id, t.hostname), []).append(jid)

        def listing(where: tuple[str, str]) -> dict[str, dict] | None:
            try:
                return self.quotas.listing(*where)
            except Exception:  # noqa: BLE001 - that node's jobs are unknown this pass
                return None

        keys = list(by_agent)
        for key, views in zip(keys, at_once(listing, keys)):
            for jid in by_agent[key] if views is not None else ():
                v = views.get(jid)
                if not v or v.get("cpu_percent") is None:
                    continue
                try:
                    out[jid] = MetricsSample(jid, now, v["cpu_percent"], v.get("mem_percent") or 0.0,
                                             v.get("tasks_done") or 0, v.get("tasks_total"),
                                             v.get("tasks_per_s"))
                except Exception:  # noqa: BLE001 - unknown this pass
                    continue
        return out

    def set_quota(self, job_id: str, quota_fraction: float) -> None:
        q = check_quota_fraction(job_id, quota_fraction)
        with self._lock:
            run = self._runs.get(job_id)
            if run is None:
                raise BackendError(f"cannot set the quota of job {job_id}: it is not running")
            tasks = list(run.tasks.values())
        if self.quotas is not None:
            for t in tasks:
                try:
                    self.quotas.set_quota(t.agent_id, t.hostname, job_id, q, self.config.lease_s)
                except Exception as first:  # noqa: BLE001
                    # The node agent does not know the job (it restarted without its state,
                    # or this framework took over from a killed one): register it again (its
                    # processes are still in its cgroup) rather than fail the job.
                    try:
                        self.quotas.prepare(t.agent_id, t.hostname, run.job, t.cores)
                        self.quotas.set_quota(t.agent_id, t.hostname, job_id, q, self.config.lease_s)
                        log.warning("job %s registered again with the node agent of %s (%s)",
                                    job_id, t.hostname or t.agent_id, first)
                    except Exception as exc:  # noqa: BLE001
                        raise BackendError(f"cannot set the quota of job {job_id} on "
                                           f"{t.hostname or t.agent_id}: {exc}") from None
        with self._lock:
            run.quota = q
            run.lease_renewed = self._clock()

    def fail(self, job_id: str, reason: str) -> None:
        with self._lock:
            if job_id not in self._waiting:
                raise BackendError(f"cannot fail job {job_id}: it is not queued")
            del self._waiting[job_id]
            now = self.now()
            self._record(Outcome(job_id, now, now, "failed", reason))

    def drain_finished(self) -> list[Outcome]:
        self._enforce_walltimes()
        with self._lock:
            self._resolve_dependencies()
            out, self._finished = self._finished, []
            return out

    # -- around each controller pass: offers held too long go back ----------------------------
    def before_pass(self) -> None:
        """Count the pass's start. An offer that arrives while a pass runs was not seen by
        it; declining it after that pass (with ``refuse_s``) would hide the agent for the whole
        filter from a job that needs it (a slow first pass did this in CI). Counted, not
        timed: an offer stamped with the time before a pass began but pooled during it
        (its handler waited for the lock the pass held) was taken for seen, declined, and
        hid the only agent from the first job for 120 s (CI, test_mesos_faults)."""
        with self._lock:
            self._passes_begun += 1
            # A pass that begins before the framework settled sees an empty queue
            # (``queued``); it must not decline what it could not use, even if the settle
            # time passes while it runs (CI: settle_s = hold_s, 120 s refuse filter).
            self._pass_settled = self._ready()

    def after_pass(self) -> None:
        """After each controller pass: feeds read, waiting guests launched, the ACCEPTs
        sent, offers held too long declined."""
        self._poll_feeds()
        self._launch_waiting_guests()
        self._expire_orphans()
        self.flush()
        now = self.now()
        with self._lock:
            if not self._ready() or (self._passes_begun and not self._pass_settled):
                return
            idle = self._nothing_waits()
            begun = self._passes_begun
            seen = [h for h in self._pool.values() if begun == 0 or h.passes_before < begun]
            if idle:
                # every held offer, seen or not: no job needs one, and a framework whose run
                # loop has ended holds what it keeps until it closes (a CI run's second
                # framework waited 90 s for cores the finished first one still held)
                give_back, refuse = list(self._pool), self.config.idle_refuse_s
            else:
                give_back, refuse = expired(seen, now), self.config.refuse_s
            declined = [self._pool.pop(oid) for oid in give_back if oid in self._pool]
            should_suppress = idle and not self._suppressed
            if should_suppress:
                self._suppressed = True
            # A REVIVE that failed (the master was unreachable) is sent again.
            revive = not idle and self._suppressed
        if declined:
            self._decline(declined, refuse)
        if should_suppress:
            if not self._safe_call(lambda fid: msg.suppress(fid, [self.config.role] if self.config.role else ())):
                with self._lock:
                    self._suppressed = False
        if revive:
            self._revive()

    def seconds_to_next_release(self) -> float | None:
        """Time until the earliest held offer's deadline passes, or None if none is held.
        The run loops (``wait_for_change``) wake then, not at their next regular tick: two frameworks that each hold
        half of what both need (and got their offers in the same allocation pass) would
        otherwise both decline on the same tick, their jitter rounded away by the pass
        interval, and swap halves again (CI: two competing gangs swapped for 90 s)."""
        with self._lock:
            if not self._pool:
                return None
            return max(0.0, min(h.hold_until for h in self._pool.values()) - self.now())

    def _nothing_waits(self) -> bool:
        """No job queued and no guest waiting for memory (under the lock)."""
        return not self._waiting and not any(r.waiting_since is not None for r in self._runs.values())

    def idle(self) -> bool:
        """Nothing queued or running (the feeds may still bring jobs)."""
        with self._lock:
            return not self._waiting and not self._runs

    def drained(self) -> bool:
        """Idle, every outcome handed on (to the controller and to the feeds), and no feed
        has jobs still to bring (``cosched run --until-idle``). A job that ends between a
        pass and this check is not drained yet: its outcome would otherwise never reach
        the controller's decisions nor the queue's ``done/`` (a CI run saw a completed job
        left in ``active/`` that way)."""
        with self._lock:
            if self._waiting or self._runs or self._finished or (
                    self.feeds and self._told < len(self.history)):
                return False
        return not any(getattr(f, "pending", lambda: False)() for f in self.feeds)

    def held_offers(self) -> list[HeldOffer]:
        with self._lock:
            return list(self._pool.values())

    def cancel(self, job_id: str, reason: str) -> bool:
        """Withdraw a job (its submitter cancelled it): a queued one ends ``cancelled`` at
        once, a running one once its tasks are killed. False if the job is not known here."""
        with self._lock:
            if job_id in self._waiting:
                del self._waiting[job_id]
                now = self.now()
                self._record(Outcome(job_id, now, now, "cancelled", reason))
                return True
            run = self._runs.get(job_id)
            if run is None:
                return False
            log.info("cancelling job %s: %s", job_id, reason)
            self._kill_rest(run, ("cancelled", reason))
            return True

    def known(self, job_id: str) -> bool:
        """Queued, running, or ended in this framework instance."""
        with self._lock:
            return job_id in self._waiting or job_id in self._runs or job_id in self._ended

    def note_ended(self, job_id: str, state: str) -> None:
        """A job that ended before this framework instance (its queue folder says so), so
        that jobs depending on it may be submitted."""
        with self._lock:
            self._ended.setdefault(job_id, state)

    # -- what the controller daemon (coscheduler/daemon.py) calls --------------------------------
    # An offer-based backend sees only what it is offered: a job larger than that waits.
    controller_options = {"give_up_unplaceable": False}

    def wait_for_change(self, timeout: float) -> None:
        """Block until the driver brought something (offers, updates), or a held offer's
        deadline passed (a millisecond after it, so the pass finds it expired), or
        ``timeout``."""
        release = self.seconds_to_next_release()
        if release is not None:
            timeout = min(timeout, release + 0.001)
        self.changed.wait(timeout)
        self.changed.clear()

    def wake(self) -> None:
        self.changed.set()

    def restore_quotas(self) -> list[str]:
        """Every job's full CPU quota back (the controller stops)."""
        with self._lock:
            runs = [(jid, r) for jid, r in self._runs.items() if r.quota < 1.0]
        done = []
        for jid, r in runs:
            try:
                self.set_quota(jid, 1.0)
                done.append(jid)
            except BackendError as exc:
                log.warning("giving %s its full quota back: %s", jid, exc)
        return done

    def release_held(self) -> list[str]:
        """The controller stops for good: kill every task and tear the framework down at
        ``close`` (nothing runs on without a controller). Returns the jobs killed."""
        with self._lock:
            self._teardown = True
            tasks = [(jid, t.task_id, t.agent_id) for jid, r in self._runs.items()
                     if r.waiting_since is None for t in r.tasks.values()
                     if t.state not in msg.TERMINAL_STATES]
        for _, tid, aid in tasks:
            self._safe_call(lambda fid, tid=tid, aid=aid: msg.kill(fid, tid, aid))
        return sorted({jid for jid, _, _ in tasks})

    def close(self, kill: bool | None = None) -> None:
        """End this framework instance: with ``kill`` (or after ``release_held``) its tasks
        are killed and the framework torn down; otherwise both are left to a next instance
        (failover within ``failover_timeout_s``, with ``state_file``)."""
        if kill:
            self.release_held()
        if self._teardown:
            with self._lock:
                self._saved["framework_id"] = None   # a torn-down framework id is never reused
                self._unadopted.clear()              # (torn down: their tasks are killed too)
                self._write_state()
        else:
            with self._lock:
                self._flush_state()   # what a next instance adopts
        driver = self.driver
        if driver is not None and hasattr(driver, "stop"):
            try:
                driver.stop(failover=not self._teardown)
            except Exception as exc:  # noqa: BLE001 - closing anyway
                log.warning("stopping the driver: %s", exc)
        self._tell_feeds()   # outcomes since the last pass, so that none is lost on the way out
        for feed in self.feeds:
            try:
                feed.close()
            except Exception as exc:  # noqa: BLE001
                log.warning("closing job feed %s: %s", feed, exc)
        if self.quotas is not None:
            self.quotas.close()
        if self._pool_x is not None:
            self._pool_x.shutdown(wait=False)

    # -- job feeds (feeds.py) --------------------------------------------------------------------
    def add_feed(self, feed: Any) -> None:
        self.feeds.append(feed)
        self._feeds_due = 0.0

    def _tell_feeds(self) -> None:
        """Each outcome since last time, to every feed, once."""
        with self._lock:
            news, self._told = self.history[self._told:], len(self.history)
        for o in news:
            for feed in self.feeds:
                try:
                    feed.ended(o)
                except Exception:  # noqa: BLE001 - a feed must not stop the framework
                    log.exception("job feed %s: recording the end of %s failed", feed, o.job_id)

    def _poll_feeds(self) -> None:
        """Tell the feeds the outcomes since last time, then (at most every
        ``feed_interval_s``) let them submit or cancel jobs. A feed's error is logged."""
        if not self.feeds:
            return
        self._tell_feeds()
        now = self._clock()
        if now < self._feeds_due:
            return
        self._feeds_due = now + self.config.feed_interval_s
        for feed in self.feeds:
            try:
                feed.poll(self)
            except Exception:  # noqa: BLE001
                log.exception("job feed %s failed", feed)


    def _add_agent(self, aid: str, hostname: str) -> None:
        self._agents[aid] = hostname
        try:
            name = validate_job_id(aid, "agent id")
        except InvalidInput:
            name = f"agent{len(self._agents)}"
        n = len(self._agents)
        while name in self._agent_of:   # (a fallback name may be another agent's id: never two)
            name = f"agent{n}"
            n += 1
        self._node_of[aid] = name
        self._agent_of[name] = aid

    def _ready(self) -> bool:
        return self._subscribed_at is not None and self.now() - self._subscribed_at >= self.config.settle_s

    def _resolve_dependencies(self) -> None:
        changed = True
        while changed:
            changed = False
            for jid, job in list(self._waiting.items()):
                bad = [d for d in job.depends_on if self._ended.get(d, "completed") != "completed"]
                if bad:
                    del self._waiting[jid]
                    now = self.now()
                    self._record(Outcome(jid, now, now, "failed",
                                         f"dependency {bad[0]} ended {self._ended[bad[0]]}"))
                    changed = True

    def _enforce_walltimes(self) -> None:
        now = self.now()
        limit = 1.0 + self.config.overtime_factor
        with self._lock:
            for run in list(self._runs.values()):
                if run.kill_reason is None and now - run.start > run.job.walltime_s * limit:
                    log.warning("job %s passed %g x its walltime: killing it", run.job.job_id, limit)
                    self._kill_rest(run, ("timeout", f"killed at {limit:g} x its walltime"))

    def _renew_leases(self) -> None:
        now = self._clock()
        with self._lock:
            due = [(jid, r.quota) for jid, r in self._runs.items()
                   if r.quota < 1.0 and now - r.lease_renewed > self.config.lease_s / 3]
        def renew(item: tuple[str, float]) -> None:
            try:
                self.set_quota(*item)
            except Exception:  # noqa: BLE001 - the lease lapses: full quota, safe
                pass

        at_once(renew, due)   # (the agents asked at once, as for the listings)


__all__ = ["FrameworkConfig", "MesosBackend", "job_of_task", "task_id_for"]
