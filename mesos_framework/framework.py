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
- Failover: the framework id is saved in ``state_file`` with every launched task; a new
  instance subscribes with that id (within ``failover_timeout_s`` the master kept the
  tasks), reconciles them, and adopts those still running.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from coscheduler import boundedjson
from coscheduler.backend import BackendError, check_quota_fraction
from coscheduler.model import (Allocation, InvalidInput, Job, MetricsSample, Node, Outcome,
                               RunningJob, check_finite, validate_job_id)

from . import messages as msg
from .offers import (HeldOffer, carve, cores_by_agent, expired, hold_deadline, pick_offers,
                     remainder)
from .quotas import NodeQuotas, wrap_command

log = logging.getLogger("mesos_framework.framework")

_SEP = "~"   # task id = job id ~ attempt ~ part; job ids never hold "~"
# a framework state file lists the tasks of one framework: far below this
MAX_STATE_BYTES = 64 << 20


class _NoOffers(BackendError):
    """The held offers of an agent do not cover a task (the message says what is short)."""


def _not_processed(exc: Exception) -> bool:
    """Did a call fail before the master acted on it (5xx, no answer), as opposed to being
    refused (4xx: the master looked at it and said no)?"""
    status = getattr(exc, "status", None)
    return status is None or status >= 500


def task_id_for(job_id: str, attempt: int, part: int) -> str:
    return f"{job_id}{_SEP}{attempt}{_SEP}{part}"


def job_of_task(task_id: str) -> tuple[str, int, int] | None:
    """(job id, attempt, part) of one of our task ids, or None."""
    parts = task_id.rsplit(_SEP, 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    try:
        validate_job_id(parts[0])
    except InvalidInput:
        return None
    return parts[0], int(parts[1]), int(parts[2])


@dataclass(frozen=True)
class FrameworkConfig:
    """The framework's settings (docs/mesos.md)."""

    name: str = "coscheduler"
    user: str = "root"
    role: str | None = None
    principal: str | None = None
    failover_timeout_s: float = 7 * 86400.0
    hold_s: float = 5.0
    hold_jitter: float = 0.5
    refuse_s: float = 2.0
    idle_refuse_s: float = 5.0
    accept_refuse_s: float = 0.0
    mem_per_core_mb: float = 32.0
    min_task_mem_mb: float = 32.0
    overtime_factor: float = 1.0
    max_requeues: int = 3
    settle_s: float = 0.5
    lease_s: float = 20.0
    state_file: str | None = None
    # A guest placed inside a host whose agent has no memory offer held waits this long for
    # one (REVIVE is sent at once), then goes back to the queue.
    guest_wait_s: float = 10.0
    # Job feeds (the queue folder, Slurm) are read at most this often.
    feed_interval_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("failover_timeout_s", "hold_s", "hold_jitter", "refuse_s", "idle_refuse_s",
                     "accept_refuse_s", "mem_per_core_mb", "min_task_mem_mb", "overtime_factor",
                     "settle_s", "lease_s", "guest_wait_s", "feed_interval_s"):
            check_finite(getattr(self, name), f"mesos framework {name}", minimum=0.0)
        if not self.user or not self.name:
            raise InvalidInput("mesos framework: user and name must not be empty")
        if isinstance(self.max_requeues, bool) or not isinstance(self.max_requeues, int) or self.max_requeues < 0:
            raise InvalidInput(f"mesos framework max_requeues must be an integer >= 0, got {self.max_requeues!r}")


@dataclass
class _Task:
    task_id: str
    agent_id: str
    hostname: str
    cores: int
    state: str = "TASK_STAGING"


@dataclass
class _Run:
    job: Job
    allocation: Allocation
    start: float
    quota: float
    host: str | None
    attempt: int
    tasks: dict[str, _Task]
    guests: list[str] = field(default_factory=list)
    kill_reason: tuple[str, str] | None = None   # (outcome state, reason) once we killed it
    lease_renewed: float = 0.0
    # A guest waiting for a memory offer on its host's agent: since when, and what each of
    # its tasks needs (agent id, cores, cpus, mem) and runs (env, argv).
    waiting_since: float | None = None
    parts: list[tuple[str, int, float, float]] = field(default_factory=list)
    launch: list[tuple[dict[str, str], list[str]]] = field(default_factory=list)

    def running_job(self) -> RunningJob:
        return RunningJob(self.job, self.allocation, self.start, self.quota, self.host,
                          tuple(self.guests))


class MesosBackend:
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
        self._node_of: dict[str, str] = {}         # agent id -> node name the controller sees
        self._agent_of: dict[str, str] = {}
        self._pool: dict[str, HeldOffer] = {}
        self._pending: dict[str, dict[str, Any]] = {}        # agent id -> ACCEPT being built
        self._taken: dict[str, dict[str, float]] = {}        # offer id -> resources cut this pass
        self._last_offer: dict[str, float] = {}              # job id -> its last needed offer
        self._waiting: dict[str, Job] = {}
        self._runs: dict[str, _Run] = {}
        self._ended: dict[str, str] = {}
        self._finished: list[Outcome] = []
        self._requeues: dict[str, int] = {}
        self._attempts: dict[str, int] = {}
        self._orphan_tasks: dict[str, str] = {}    # reconciled task id -> agent id (after failover)
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
        for jid, t in runs:
            try:
                v = self.quotas.sample(t.agent_id, t.hostname, jid)
                if not v or v.get("cpu_percent") is None:
                    continue
                out[jid] = MetricsSample(jid, now, v["cpu_percent"], v.get("mem_percent") or 0.0,
                                         v.get("tasks_done") or 0, v.get("tasks_total"),
                                         v.get("tasks_per_s"))
            except Exception:  # noqa: BLE001 - unknown this pass
                continue
        return out

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        """Commit held offers to the job's tasks; the ACCEPTs go out at the end of the pass
        (``flush``), one per agent with every task placed there in this pass. A guest whose
        host's agent has no memory offer held waits for one (``guest_wait_s``)."""
        q = check_quota_fraction(job.job_id, quota_fraction)
        revive = False
        with self._lock:
            if job.job_id not in self._waiting:
                raise BackendError(f"cannot start job {job.job_id}: it is not queued")
            if allocation.cores != job.cores or len(allocation.cores_by_node) != job.nodes:
                raise BackendError(f"cannot start job {job.job_id}: allocation {allocation} does "
                                   f"not match its request of {job.cores} cores on {job.nodes} node(s)")
            host = None
            if host_job is not None:
                host = self._runs.get(host_job)
                if host is None or host.host is not None:
                    raise BackendError(f"cannot start job {job.job_id} as a guest: {host_job} is "
                                       "not a running host")
            parts = self._parts(job, allocation, host)
            try:
                plan = self._plan(job, parts)
            except _NoOffers as exc:
                if host is None:
                    raise BackendError(str(exc)) from None
                plan = None     # the guest waits for memory on its host's agent
                why = str(exc)
            attempt = self._attempts.get(job.job_id, 0) + 1
            tasks: dict[str, _Task] = {}
            launch: list[tuple[dict[str, str], list[str]]] = []
            for k, (aid, cores, _, _) in enumerate(parts):
                hostname = self._agents.get(aid, "")
                # Each task is one part of the job, told which (as MPI ranks are).
                env = {"COSCHED_JOB_ID": job.job_id, "COSCHED_CORES": str(cores),
                       "COSCHED_PART": str(k), "COSCHED_PARTS": str(len(parts))}
                argv = list(job.command)
                if self.quotas is not None:
                    try:
                        env.update(self.quotas.prepare(aid, hostname, job, cores))
                    except Exception as exc:  # noqa: BLE001
                        for t in tasks.values():
                            self._release_quota(job.job_id, t)
                        raise BackendError(f"cannot start job {job.job_id}: node agent of "
                                           f"{hostname or aid}: {exc}") from None
                    argv = wrap_command(job.command)
                tid = task_id_for(job.job_id, attempt, k)
                tasks[tid] = _Task(tid, aid, hostname, cores)
                launch.append((env, argv))
            # From here nothing can fail.
            self._attempts[job.job_id] = attempt
            del self._waiting[job.job_id]
            run = _Run(job, allocation, self.now(), q, host_job, attempt, tasks,
                       parts=parts, launch=launch)
            self._runs[job.job_id] = run
            if host is not None:
                host.guests.append(job.job_id)
            self.starts.append((run.start, job.job_id, host_job))
            if plan is None:
                run.waiting_since = self.now()
                log.info("guest %s waits for memory on its host's agent (%s): REVIVE", job.job_id, why)
                revive = True
            else:
                self._commit(run, plan)
                self._save_state()
        if revive:
            self._revive(force=True)
        if q < 1.0:
            self.set_quota(job.job_id, q)

    def _commit(self, run: _Run, plan) -> None:
        """Cut the planned offers for each task of ``run`` and queue the launches (lock held)."""
        job = run.job
        last_offer = 0.0
        for k, ((aid, _, offers, amounts), (env, argv)) in enumerate(zip(plan, run.launch)):
            tid = task_id_for(job.job_id, run.attempt, k)
            resources = carve(offers, amounts, self._taken)
            batch = self._pending.setdefault(aid, {"offers": {}, "tasks": [], "jobs": []})
            for h in offers:
                batch["offers"][h.offer_id] = h
                self._pool[h.offer_id] = remainder(h, self._taken[h.offer_id])
                last_offer = max(last_offer, h.received)
            labels = {"cosched_job": job.job_id, "cosched_walltime_s": f"{job.walltime_s:g}",
                      "cosched_tasks_total": str(job.tasks), "cosched_job_class": job.job_class}
            batch["tasks"].append(msg.command_task(
                tid, f"{job.job_id} part {k}", aid, resources, argv, env=env,
                user=job.user if job.user and job.user != self.config.user else None,
                labels=labels))
            if job.job_id not in batch["jobs"]:
                batch["jobs"].append(job.job_id)
        self._last_offer[job.job_id] = last_offer
        if run.waiting_since is not None:
            log.info("guest %s launched after waiting %.2f s for memory", job.job_id,
                     self.now() - run.waiting_since)
            run.waiting_since = None
            run.start = self.now()

    def _launch_waiting_guests(self) -> None:
        """Guests waiting for memory on their host's agent: launched once an offer there
        has it; back to the queue after ``guest_wait_s`` (or when their host ended)."""
        now = self.now()
        with self._lock:
            for jid, run in list(self._runs.items()):
                if run.waiting_since is None:
                    continue
                if run.host is None or run.host not in self._runs:
                    self._give_back(jid, "its host ended before memory was offered on its agent")
                    continue
                try:
                    plan = self._plan(run.job, run.parts)
                except _NoOffers as exc:
                    if now - run.waiting_since > self.config.guest_wait_s:
                        self._give_back(jid, f"no memory offered on its host's agent within "
                                             f"{self.config.guest_wait_s:g} s ({exc})")
                    continue
                self._commit(run, plan)
                self._save_state()

    def _give_back(self, job_id: str, reason: str) -> None:
        """A job that never launched goes back to the queue (lock held); the ``requeued``
        outcome closes the controller's decision."""
        run = self._runs.get(job_id)
        if run is None:
            return
        log.warning("job %s back to the queue: %s", job_id, reason)
        end = self._remove_run(job_id)
        self._finished.append(Outcome(job_id, run.start, end, "requeued", reason))
        self.history.append(self._finished[-1])
        self._waiting[job_id] = run.job

    def flush(self) -> None:
        """Send the ACCEPTs of this pass: one per agent, all its offers, all its tasks. A
        refused ACCEPT sends its jobs back to the queue (their other tasks killed)."""
        with self._lock:
            batches, self._pending, self._taken = self._pending, {}, {}
            for batch in batches.values():
                for oid in batch["offers"]:
                    self._pool.pop(oid, None)   # Mesos declines whatever we left unused
        failed: list[tuple[list[str], str]] = []
        sent_jobs: set[str] = set()
        unanswered: list[HeldOffer] = []
        if not batches:
            return
        issued = self.now()

        def send(aid: str, batch: dict) -> Exception | None:
            try:
                self._call(msg.accept(self._fid(), list(batch["offers"]), [msg.launch(batch["tasks"])],
                                      self.config.accept_refuse_s))
                return None
            except Exception as exc:  # noqa: BLE001
                return exc

        # A gang's ACCEPTs (one per agent) go out together, not one after the other: its
        # latency is the slowest answer, not the sum of them.
        items = list(batches.items())
        if len(items) == 1:
            results = [send(*items[0])]
        else:
            results = list(self._senders().map(lambda kv: send(*kv), items))
        for (aid, batch), exc in zip(items, results):
            if exc is None:
                sent_jobs.update(batch["jobs"])
                continue
            failed.append((batch["jobs"], f"ACCEPT on agent {self._agents.get(aid) or aid} failed: {exc}"))
            if _not_processed(exc):
                unanswered += batch["offers"].values()
        now = self.now()
        with self._lock:
            bad = {j for jobs, _ in failed for j in jobs}
            for jobs, why in failed:
                for jid in jobs:
                    self._abort_launch(jid, why)
            self._repool(unanswered)
            self.counters["accepted"] += len(batches) - len(failed)
            for jid in sent_jobs - bad:
                self.counters["launched_tasks"] += len(self._runs[jid].tasks) if jid in self._runs else 0
                if jid in self._last_offer:
                    last = self._last_offer.pop(jid)
                    self.gang_latency_s.append(max(0.0, now - last))
                    self.gang_decision_s.append(max(0.0, issued - last))
            for jid in bad:
                self._last_offer.pop(jid, None)

    def _senders(self):
        if self._pool_x is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool_x = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mesos-accept")
        return self._pool_x

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

    # -- after each controller pass: offers held too long go back -----------------------------
    def after_pass(self) -> None:
        """After each controller pass: feeds read, waiting guests launched, the ACCEPTs
        sent, offers held too long declined."""
        self._poll_feeds()
        self._launch_waiting_guests()
        self.flush()
        now = self.now()
        with self._lock:
            if not self._ready():
                return
            idle = not self._waiting and not any(r.waiting_since is not None for r in self._runs.values())
            if idle:
                give_back, refuse = list(self._pool), self.config.idle_refuse_s
            else:
                give_back, refuse = expired(self._pool.values(), now), self.config.refuse_s
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

    def idle(self) -> bool:
        """Nothing queued or running (the feeds may still bring jobs)."""
        with self._lock:
            return not self._waiting and not self._runs

    def drained(self) -> bool:
        """Idle, and no feed has jobs still to bring (``cosched run --until-idle``)."""
        if not self.idle():
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
        """Block until the driver brought something (offers, updates) or ``timeout``."""
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
                self._save_state()
        driver = self.driver
        if driver is not None and hasattr(driver, "stop"):
            try:
                driver.stop(failover=not self._teardown)
            except Exception as exc:  # noqa: BLE001 - closing anyway
                log.warning("stopping the driver: %s", exc)
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

    def _poll_feeds(self) -> None:
        """Tell the feeds the outcomes since last time, then (at most every
        ``feed_interval_s``) let them submit or cancel jobs. A feed's error is logged."""
        if not self.feeds:
            return
        with self._lock:
            news, self._told = self.history[self._told:], len(self.history)
        for o in news:
            for feed in self.feeds:
                try:
                    feed.ended(o)
                except Exception:  # noqa: BLE001 - a feed must not stop the framework
                    log.exception("job feed %s: recording the end of %s failed", feed, o.job_id)
        now = self._clock()
        if now < self._feeds_due:
            return
        self._feeds_due = now + self.config.feed_interval_s
        for feed in self.feeds:
            try:
                feed.poll(self)
            except Exception:  # noqa: BLE001
                log.exception("job feed %s failed", feed)

    # -- pymesos-style Scheduler callbacks (driver thread) -----------------------------------
    def registered(self, driver, framework_id, master_info) -> None:
        fid = framework_id.get("value") if isinstance(framework_id, Mapping) else str(framework_id)
        log.info("registered with framework id %s", fid)
        binder = getattr(self.quotas, "bind", None)
        if binder is not None and fid:
            try:   # local node agents: stable names per framework id, a predecessor recovered
                binder(fid)
            except Exception:  # noqa: BLE001 - quotas then fail per job, loudly
                log.exception("binding the node agents to framework %s failed", fid)
        with self._lock:
            self._saved["framework_id"] = fid
            self._subscribed_at = self.now()
            self._pool.clear()
            self._suppressed = False
            self._save_state()
        self._reconcile()
        self.changed.set()

    def reregistered(self, driver, master_info) -> None:
        log.info("reregistered with the master (framework id %s)", self._fid())
        with self._lock:
            self._subscribed_at = self.now()
            self._pool.clear()      # offers of the old subscription are void
            self._suppressed = False
        self._reconcile()
        self.changed.set()

    def disconnected(self, driver) -> None:
        log.warning("disconnected from the master; held offers dropped")
        with self._lock:
            self._subscribed_at = None
            self._pool.clear()

    def resourceOffers(self, driver, offers) -> None:
        now = self.now()
        useless: list[HeldOffer] = []
        with self._lock:
            for raw in offers:
                try:
                    v = msg.read_offer(raw)
                except msg.MessageError as exc:
                    self._problem(f"offer ignored: {exc}")
                    continue
                for p in v.problems:
                    self._problem(p)
                self.counters["offers"] += 1
                if v.agent_id not in self._agents:
                    self._add_agent(v.agent_id, v.hostname)
                elif v.hostname:
                    self._agents[v.agent_id] = v.hostname
                held = HeldOffer(v, now, hold_deadline(now, self.config.hold_s,
                                                       self.config.hold_jitter, self._rng))
                if v.cpus < 1.0 - 1e-6 and v.mem <= 0:
                    useless.append(held)
                    continue
                self._pool[v.offer_id] = held
        if useless:
            self._decline(useless, self.config.refuse_s)
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
                log.info("offer %s rescinded: no longer held", oid)
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
        log.info("message from executor %s on %s (%d bytes, not used)", executor_id, agent_id, len(data or ""))

    def slaveLost(self, driver, agent_id) -> None:
        aid = agent_id.get("value") if isinstance(agent_id, Mapping) else str(agent_id)
        log.warning("agent %s lost", aid)
        with self._lock:
            for oid in [o for o, h in self._pool.items() if h.agent_id == aid]:
                del self._pool[oid]
            for jid, r in list(self._runs.items()):
                if any(t.agent_id == aid for t in r.tasks.values()):
                    self._lose(jid, f"agent {self._agents.get(aid) or aid} lost")
        self.changed.set()

    def executorLost(self, driver, executor_id, agent_id, status) -> None:
        log.info("executor %s on %s ended (status %s)", executor_id, agent_id, status)

    def error(self, driver, message) -> None:
        log.error("the master reported an error: %s", message)
        self.fatal = str(message)
        self.changed.set()

    # -- status handling --------------------------------------------------------------------
    def _on_status(self, s: msg.StatusView) -> None:
        parsed = job_of_task(s.task_id)
        run = self._runs.get(parsed[0]) if parsed else None
        task = run.tasks.get(s.task_id) if run is not None else None
        if task is None:
            self._unknown_task(s, parsed)
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
        detail = f"task {s.task_id} {s.state}" + (f" ({s.reason})" if s.reason else "") + \
            (f": {s.message}" if s.message else "")
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
            # A task of ours from before a failover whose job is not submitted (yet).
            self._orphan_tasks[s.task_id] = s.agent_id or ""
            return
        if parsed is not None and s.terminal:
            return   # a late update of a job already ended or requeued
        self._problem(f"status {s.state} for unknown task {s.task_id!r} ignored")

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
        self._record(Outcome(job_id, run.start, max(end, run.start), state, reason))

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
        for t in run.tasks.values():
            self._release_quota(job_id, t)
        self._save_state()
        return self.now()

    def _release_quota(self, job_id: str, t: _Task) -> None:
        if self.quotas is None:
            return
        try:
            self.quotas.release(t.agent_id, t.hostname, job_id)
        except Exception as exc:  # noqa: BLE001
            log.debug("releasing %s on %s: %s", job_id, t.agent_id, exc)

    def _record(self, o: Outcome) -> None:
        self._ended[o.job_id] = o.state
        self._finished.append(o)
        self.history.append(o)

    # -- helpers ----------------------------------------------------------------------------
    def _parts(self, job: Job, allocation: Allocation, host: _Run | None
               ) -> list[tuple[str, int, float, float]]:
        """Per task: (agent id, cores, cpus to take, mem to take). A guest takes no cpus:
        it runs on its host's cores."""
        parts = []
        for node, cores in allocation.cores_by_node:
            aid = self._agent_of.get(node)
            if aid is None:
                raise BackendError(f"cannot start job {job.job_id}: unknown node {node!r}")
            if host is not None and not any(t.agent_id == aid for t in host.tasks.values()):
                raise BackendError(f"cannot start job {job.job_id} inside {host.job.job_id}: the host "
                                   f"has no task on agent {node}")
            # Job.mem_mb is per node the job spans.
            mem = max(self.config.min_task_mem_mb,
                      float(job.mem_mb) if job.mem_mb else self.config.mem_per_core_mb * cores)
            parts.append((aid, cores, 0.0 if host is not None else float(cores), mem))
        return parts

    def _plan(self, job: Job, parts: list[tuple[str, int, float, float]]):
        """Per part: (agent id, cores, offers to accept, resources to take); _NoOffers when
        the held offers of an agent lack what its part needs."""
        plan = []
        taken: set[str] = set()
        for aid, cores, cpus, mem in parts:
            held = [h for h in self._pool.values() if h.agent_id == aid and h.offer_id not in taken
                    and (h.view.cpus > 1e-6 or h.view.mem > 1e-6)]
            offers = pick_offers(held, cpus, mem)
            if offers is None:
                have_c = sum(h.view.cpus for h in held)
                have_m = sum(h.view.mem for h in held)
                raise _NoOffers(f"cannot start job {job.job_id}: the offers held on agent "
                                f"{self._node_of.get(aid, aid)} have {have_c:g} cpus and {have_m:g} MB, "
                                f"the task needs {cpus:g} cpus and {mem:g} MB")
            taken.update(h.offer_id for h in offers)
            plan.append((aid, cores, offers, {"cpus": cpus, "mem": mem}))
        return plan

    def _abort_launch(self, job_id: str, reason: str) -> None:
        """A launch was refused mid-gang: kill what was launched, the job goes back to the
        queue (a ``requeued`` outcome, so the controller closes its decisions)."""
        run = self._runs.get(job_id)
        if run is None:
            return
        self._kill_rest(run, ("requeued", reason))
        end = self._remove_run(job_id)
        self._finished.append(Outcome(job_id, run.start, end, "requeued", reason))
        self.history.append(self._finished[-1])
        self._waiting[job_id] = run.job

    def _add_agent(self, aid: str, hostname: str) -> None:
        self._agents[aid] = hostname
        try:
            name = validate_job_id(aid, "agent id")
        except InvalidInput:
            name = f"agent{len(self._agents)}"
        if name in self._agent_of:
            name = f"agent{len(self._agents)}"
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
        for jid, q in due:
            try:
                self.set_quota(jid, q)
            except Exception:  # noqa: BLE001 - the lease lapses: full quota, safe
                pass

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
            known += [(tid, aid) for tid, aid in self._saved.get("tasks", {}).items()
                      if tid not in {k for k, _ in known}]
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
        path = self.config.state_file
        if not path:
            return
        launched = {jid: r for jid, r in self._runs.items() if r.waiting_since is None}
        data = {"framework_id": self._saved.get("framework_id"),
                "tasks": {t.task_id: t.agent_id for r in launched.values() for t in r.tasks.values()},
                "runs": {jid: {"attempt": r.attempt, "start_wall": time.time() - (self.now() - r.start),
                               "host": r.host, "quota": r.quota,
                               "tasks": {t.task_id: [t.agent_id, t.hostname, t.cores] for t in r.tasks.values()}}
                         for jid, r in launched.items()}}
        self._saved["tasks"] = data["tasks"]
        self._saved["runs"] = data["runs"]
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            log.error("saving the framework state to %s failed: %s", path, exc)

    def _adopt(self, job: Job) -> bool:
        """After a failover: a submitted job whose tasks the saved state lists is adopted as
        running (reconciliation then confirms them, or reports them lost: requeued)."""
        saved = self._saved.get("runs", {}).get(job.job_id)
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
        log.info("job %s adopted from the previous framework instance (%d tasks)", job.job_id, len(tasks))
        return True


__all__ = ["FrameworkConfig", "MesosBackend", "job_of_task", "task_id_for"]
