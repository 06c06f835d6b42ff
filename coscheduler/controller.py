"""The controller: one loop that drives any backend with any co-allocation policy.

A pass (``Controller.step``) is a fixed pipeline of small stages, like a scheduling cycle
of the Kubernetes scheduler framework:

1. drain: collect finished jobs; a finished host's pending decisions get their loss
   (``happiness.host_loss`` against its class's alone runtime when known) and go to the
   learner and the recorder; a guest's end gives its host its quota back; a host's end
   gives its guests full quota; a job that ran alone records its class's alone runtime;
   a failed or cancelled host or guest resolves its decisions as ``cancelled`` with the
   reason (never lost, never silently dropped).
   Then the running jobs are read and quotas reconciled: every job that is not a guest
   should hold ``1 - lent / cores`` (1.0 without guests); where the backend reports
   otherwise (a failed write, a restart that missed an end) it is set again.
2. metrics: the latest sample per job; a missing or invalid one is "unknown" (Hp None).
   A host whose Hp already shows it cannot finish in time gets its loss early
   (``projected``), as DESIGN.md allows.
3. order: the queue-ordering callable (default FCFS by submit time, then job id).
4. place: for each queued job in order, first-fit gang allocation on free cores with
   EASY backfilling (the first job that does not fit gets a reservation at the earliest
   time enough cores free up, from running jobs' start + walltime; later jobs start only
   if they do not delay it); if it does not fit, the co-allocation policy is asked over
   the candidate hosts in first-fit order.
5. act: start jobs and set quotas through the backend, and record every decision. A
   backend error never crashes the pass: the guest goes back to the queue (reported
   failed with the reason after ``max_start_attempts``) and the host gets its quota back.

A host is asked at most once per pass; a host that declined a guest is not asked again
for that guest for ``decline_cooldown_s``; at most ``max_candidates_per_guest`` hosts are
asked per guest per pass. Hosts are indexed by their spare room, so a pass over 1,000
queued x 1,000 running jobs stays well under DESIGN.md's 100 ms budget.

The controller keeps little state of its own, and all of it can be rebuilt: the learner
from ``recorder.load()`` and the host/guest relations from ``backend.running()``
(``Controller.from_recorder``).
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass, field
from itertools import islice
from typing import Callable, Iterator, Sequence

from . import happiness as hp
from .backend import Backend
from .learner import AsaxLearner, Decision, HostState, LearnerConfig
from .model import Allocation, InvalidInput, Job, MetricsSample, Outcome, RunningJob, check_finite
from .policies.coalloc import (NO_COALLOCATION, Choice, CoallocationPolicy, HostCandidate,
                               SpaceSharing, host_quota_fraction, make_policy)
from .policies.gang import first_fit, guest_placement
from .recorder import MemoryRecorder, OutcomeRecord, Recorder

log = logging.getLogger(__name__)

QueueOrder = Callable[[Sequence[Job], float], list[Job]]


def fcfs(jobs: Sequence[Job], now: float) -> list[Job]:
    """First come, first served: by submit time, then job id."""
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def order_by(policy) -> QueueOrder:
    """Adapt a queue policy with ``key(now, submit, procs, estimate)`` (for example
    ``coscheduler.policies.queue.get_policy("SJF")``) to a queue-ordering callable.
    Ties: submit time, then job id."""
    key = policy.key

    def order(jobs: Sequence[Job], now: float) -> list[Job]:
        return sorted(jobs, key=lambda j: (key(now, j.submit_time, j.cores, j.walltime_s),
                                           j.submit_time, j.job_id))

    return order


@dataclass(frozen=True)
class ControllerConfig:
    """Knobs of the controller loop (the learner has its own ``LearnerConfig``)."""

    max_guests_per_host: int = 1
    max_candidates_per_guest: int = 4
    decline_cooldown_s: float = 30.0
    max_start_attempts: int = 3
    backfill: bool = True
    # Observe a host's loss as soon as its Hp projects an overrun, once this share of its
    # walltime has passed (early progress rates are noisy).
    early_loss: bool = True
    early_loss_min_elapsed: float = 0.25

    def __post_init__(self) -> None:
        for name in ("max_guests_per_host", "max_candidates_per_guest", "max_start_attempts"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(f"controller {name} must be an integer >= 1, got {v!r}")
        check_finite(self.decline_cooldown_s, "controller decline_cooldown_s", minimum=0.0)
        check_finite(self.early_loss_min_elapsed, "controller early_loss_min_elapsed", minimum=0.0)


@dataclass
class PassReport:
    """What one pass did (for logs, tests and the benchmark)."""

    time: float
    duration_s: float = 0.0
    finished: int = 0
    started: int = 0           # space-shared starts
    coallocated: int = 0       # guests started inside a host
    declined: int = 0          # ASA_X a_0 decisions
    observed: int = 0          # losses fed to the learner
    cancelled: int = 0         # decisions resolved as cancelled
    failed: list[str] = field(default_factory=list)   # jobs reported failed by the controller
    reservation: tuple[str, float] | None = None      # (job id, shadow time) under EASY
    errors: list[str] = field(default_factory=list)


# -- plan items (stage 4 -> stage 5) ---------------------------------------------------------

@dataclass(frozen=True)
class _Start:
    job: Job
    allocation: Allocation


@dataclass(frozen=True)
class _CoStart:
    job: Job
    choice: Choice
    host_quota_before: float


class _FreeCores:
    """Free cores per node with a running total and a lazily refreshed maximum, so a job
    that cannot fit is rejected without walking the nodes."""

    __slots__ = ("cores", "total", "_max")

    def __init__(self, cores: dict[str, int]):
        self.cores = cores
        self.total = sum(cores.values())
        self._max: int | None = None

    @property
    def max(self) -> int:
        if self._max is None:
            self._max = max(self.cores.values(), default=0)
        return self._max

    def fit(self, job: Job) -> Allocation | None:
        if job.cores > self.total or -(-job.cores // job.nodes) > self.max:
            return None
        return first_fit(job, self.cores)

    def take(self, allocation: Allocation) -> None:
        for node, c in allocation.cores_by_node:
            self.cores[node] -= c
            self.total -= c
        self._max = None


class Controller:
    """Drives one backend with one co-allocation policy; see the module docstring."""

    def __init__(self, backend: Backend, policy: CoallocationPolicy | None = None,
                 recorder: Recorder | None = None, queue_order: QueueOrder = fcfs,
                 config: ControllerConfig | None = None):
        self.backend = backend
        self.policy = policy or SpaceSharing()
        self.recorder: Recorder = recorder if recorder is not None else MemoryRecorder()
        self.queue_order = queue_order
        self.config = config or ControllerConfig()
        self.learner: AsaxLearner | None = getattr(self.policy, "learner", None)
        # Last known running jobs (refreshed each pass, patched with this pass's starts):
        # what a finished job was (its Job, host, guests, quota) when its outcome arrives.
        self._last: dict[str, RunningJob] = {}
        # Pending (carried-out) decisions per host, and each guest's decision.
        self._by_host: dict[str, set[int]] = {}
        self._by_guest: dict[str, int] = {}
        self._shared: set[str] = set()        # hosted or was a guest: not an alone run
        self._was_guest: set[str] = set()     # guests never host (even after their host ends)
        self._cooldown: dict[tuple[str, str], float] = {}   # (guest, host) -> until
        self._attempts: dict[str, int] = {}
        self._unplaceable: set[str] = set()
        self._dirty_classes: set[str] = set()
        self.passes = 0
        self._adopt_running()
        if self.learner is not None:
            for d in self.learner.pending.values():
                self._by_host.setdefault(d.host_job, set()).add(d.decision_id)
                self._by_guest[d.guest_job] = d.decision_id
                self._shared.update((d.host_job, d.guest_job))
                self._was_guest.add(d.guest_job)

    # -- construction from persistent state ---------------------------------------------------
    @classmethod
    def from_recorder(cls, backend: Backend, recorder: Recorder, policy: str = "asax",
                      learner_config: LearnerConfig | None = None,
                      queue_order: QueueOrder = fcfs, config: ControllerConfig | None = None,
                      static_fraction: float = 0.5,
                      expert_factory: Callable[[], list] | None = None) -> "Controller":
        """Rebuild a controller after a restart: the learner from ``recorder.load()``
        (classes, pending decisions, next id; observed outcomes re-taught to fitted
        experts), declines still in cooldown, and host/guest relations from the backend."""
        learner = None
        loaded = recorder.load()
        if policy.strip().lower() in ("asax", "asa_x"):
            learner = AsaxLearner(learner_config or LearnerConfig(), expert_factory,
                                  classes=loaded.classes, pending=loaded.pending,
                                  next_decision_id=loaded.next_decision_id)
            for decision, loss in loaded.observed:
                learner.teach(decision, loss)
        ctl = cls(backend, make_policy(policy, learner, static_fraction), recorder, queue_order,
                  config)
        now = backend.now()
        running = set(ctl._last)
        for decision, _ in loaded.observed:
            if decision.action_index == 0:
                until = decision.time + ctl.config.decline_cooldown_s
                if until > now:
                    ctl._cooldown[(decision.guest_job, decision.host_job)] = until
            else:
                ctl._shared.update({decision.host_job, decision.guest_job} & running)
                if decision.guest_job in running:
                    ctl._was_guest.add(decision.guest_job)
        return ctl

    def _adopt_running(self) -> None:
        try:
            running = self.backend.running()
        except Exception as exc:  # noqa: BLE001 - a backend may fail in any way
            log.warning("backend.running() failed while starting the controller: %s", exc)
            return
        self._last = {rj.job_id: rj for rj in running}
        for rj in running:
            if rj.host_job is not None:
                self._shared.update((rj.job_id, rj.host_job))
                self._was_guest.add(rj.job_id)
            if rj.guest_jobs:
                self._shared.add(rj.job_id)

    # -- the pass -----------------------------------------------------------------------------
    def step(self) -> PassReport:
        """One pass of the pipeline. Never raises for backend errors (they are reported)."""
        t0 = time.perf_counter()
        try:
            now = float(self.backend.now())
        except Exception as exc:  # noqa: BLE001
            return PassReport(time=math.nan, errors=[f"backend.now() failed: {exc}"])
        report = PassReport(time=now)
        self.passes += 1
        self._drain(now, report)
        try:
            running = self.backend.running()
            nodes = self.backend.nodes()
            queued = self.backend.queued()
        except Exception as exc:  # noqa: BLE001 - cannot schedule blind: skip placement
            report.errors.append(f"reading the backend's state failed: {exc}")
            self._save_dirty()
            report.duration_s = time.perf_counter() - t0
            return report
        self._last = {rj.job_id: rj for rj in running}
        self._resolve_vanished_hosts(now, report)
        self._reconcile_quotas(running, report)
        samples = self._read_metrics(report)
        self._early_losses(samples, now, report)
        ordered = self.queue_order([j for j in queued if j.job_id not in self._last], now)
        plan, declined = self._place(ordered, running, nodes, samples, now, report)
        self._act(plan, declined, now, report)
        self._save_dirty()
        self._expire_cooldowns(now)
        report.duration_s = time.perf_counter() - t0
        return report

    # -- stage 1: drain -----------------------------------------------------------------------
    def _drain(self, now: float, report: PassReport) -> None:
        try:
            outcomes = self.backend.drain_finished()
        except Exception as exc:  # noqa: BLE001
            report.errors.append(f"backend.drain_finished() failed: {exc}")
            return
        done = {o.job_id for o in outcomes}
        report.finished += len(outcomes)
        for o in outcomes:
            try:
                self._finish(o, done, now, report)
            except Exception as exc:  # noqa: BLE001 - one bad outcome must not stop the rest
                log.exception("handling the outcome of job %s failed", o.job_id)
                report.errors.append(f"outcome of job {o.job_id}: {exc}")

    def _finish(self, o: Outcome, done: set[str], now: float, report: PassReport) -> None:
        rj = self._last.pop(o.job_id, None)
        job = rj.job if rj is not None else None
        when = max(now, o.end_time)
        # As a host: every pending decision of this host gets its loss now.
        for did in sorted(self._by_host.pop(o.job_id, ())):
            d = self.learner.pending.get(did) if self.learner else None
            if d is None:
                continue
            self._by_guest.pop(d.guest_job, None)
            if job is None:
                self._finish_unknown_host(d, o, when, report)
            elif o.state == "completed":
                alone = self.recorder.alone_runtime(job.job_class)
                loss = hp.host_loss(o.runtime_s, job.walltime_s, alone)
                kind = "degradation" if alone is not None and alone > 0 else "walltime"
                self._observe(d, loss, kind, when, report, host_runtime_s=o.runtime_s,
                              host_walltime_s=job.walltime_s)
            elif o.state == "timeout":
                self._observe(d, 1.0, "walltime", when, report, host_runtime_s=o.runtime_s,
                              host_walltime_s=job.walltime_s, note="host hit its walltime")
            else:
                self._cancel(did, when, f"host {o.job_id} {o.state}: {o.reason}".rstrip(": "), report)
        if rj is not None and rj.guest_jobs:
            # The host ended first: its guests get full quota on the cores they hold.
            for g in rj.guest_jobs:
                if g not in done and g in self._last:
                    self._set_quota(g, 1.0, report)
        # As a guest: its decision stays pending (the host's loss decides) unless it failed.
        did = self._by_guest.pop(o.job_id, None)
        if did is not None and o.state not in ("completed", "timeout"):
            host = self.learner.pending[did].host_job if self.learner and did in self.learner.pending else None
            if host is not None:
                self._by_host.get(host, set()).discard(did)
            self._cancel(did, when, f"guest {o.job_id} {o.state}: {o.reason}".rstrip(": "), report)
        if rj is not None and rj.host_job is not None and rj.host_job not in done:
            self._restore_host_quota(rj.host_job, o.job_id, report)
        # A job that ran alone teaches its class's exclusive runtime.
        if job is not None and o.state == "completed" and o.job_id not in self._shared:
            try:
                self.recorder.record_alone_runtime(job.job_class, o.runtime_s)
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"recording the alone runtime of {o.job_id}: {exc}")
        self._shared.discard(o.job_id)
        self._was_guest.discard(o.job_id)
        self._unplaceable.discard(o.job_id)
        self._attempts.pop(o.job_id, None)

    def _finish_unknown_host(self, d: Decision, o: Outcome, when: float,
                             report: PassReport) -> None:
        """A host ended before this (restarted) controller saw it run: its Job is not at
        hand, but the decision knows its class and its elapsed share of walltime when the
        decision was made, which give the walltime back: (t_d - start) / elapsed_fraction."""
        if o.state not in ("completed", "timeout"):
            self._cancel(d.decision_id, when, f"host {o.job_id} {o.state}: {o.reason}".rstrip(": "), report)
            return
        ef = d.state.elapsed_fraction
        walltime = (d.time - o.start_time) / ef if ef > 0 and d.time > o.start_time else None
        alone = self.recorder.alone_runtime(d.job_class)
        if o.state == "timeout":
            self._observe(d, 1.0, "walltime", when, report, host_runtime_s=o.runtime_s,
                          host_walltime_s=walltime, note="host hit its walltime")
        elif alone is not None and alone > 0:
            self._observe(d, hp.host_loss(o.runtime_s, walltime or 1.0, alone), "degradation", when,
                          report, host_runtime_s=o.runtime_s, host_walltime_s=walltime)
        elif walltime is not None:
            self._observe(d, hp.host_loss(o.runtime_s, walltime), "walltime", when, report,
                          host_runtime_s=o.runtime_s, host_walltime_s=walltime,
                          note="walltime recovered from the decision's elapsed share")
        else:
            self._cancel(d.decision_id, when, f"host {o.job_id} ended before this controller "
                         "saw it run; its walltime is unknown", report)

    def _resolve_vanished_hosts(self, now: float, report: PassReport) -> None:
        """A host with pending decisions that is neither running nor reported finished (it
        ended while no controller was watching, and the backend forgot it): its decisions
        are closed as cancelled, so none waits forever."""
        for host_id in [h for h in self._by_host if h not in self._last]:
            for did in sorted(self._by_host.pop(host_id)):
                d = self.learner.pending.get(did) if self.learner else None
                if d is not None:
                    self._by_guest.pop(d.guest_job, None)
                self._cancel(did, now, f"host {host_id} is no longer known to the backend", report)

    def _restore_host_quota(self, host_id: str, gone_guest: str, report: PassReport) -> None:
        host = self._last.get(host_id)
        if host is None:
            return
        lent = 0.0
        guests = []
        for g in host.guest_jobs:
            grj = self._last.get(g)
            if g != gone_guest and grj is not None:
                lent += grj.quota_fraction * grj.job.cores
                guests.append(g)
        q = host_quota_fraction(host.job.cores, lent)
        self._last[host_id] = _replace(host, quota_fraction=q, guest_jobs=tuple(guests))
        self._set_quota(host_id, q, report)

    # -- stage 2: metrics ---------------------------------------------------------------------
    def _read_metrics(self, report: PassReport) -> dict[str, MetricsSample]:
        try:
            raw = self.backend.metrics()
        except Exception as exc:  # noqa: BLE001 - no metrics: every host is "unknown"
            report.errors.append(f"backend.metrics() failed: {exc}")
            return {}
        if not isinstance(raw, dict):
            report.errors.append(f"backend.metrics() returned {type(raw).__name__}, not a dict")
            return {}
        samples = {}
        for job_id, s in raw.items():
            if isinstance(s, MetricsSample) and s.job_id == job_id:
                samples[job_id] = s
        return samples

    def _early_losses(self, samples: dict[str, MetricsSample], now: float,
                      report: PassReport) -> None:
        if not self.config.early_loss or self.learner is None:
            return
        for host_id in list(self._by_host):
            rj, s = self._last.get(host_id), samples.get(host_id)
            if rj is None or s is None or s.tasks_per_s is None:
                continue
            elapsed = max(0.0, now - rj.start_time)
            if elapsed < self.config.early_loss_min_elapsed * rj.job.walltime_s:
                continue
            total = s.tasks_total if s.tasks_total is not None else rj.job.tasks
            loss = hp.projected_overrun_loss(elapsed, rj.job.walltime_s, s.tasks_done, total,
                                             s.tasks_per_s)
            if loss is None:
                continue
            for did in sorted(self._by_host.pop(host_id)):
                d = self.learner.pending.get(did)
                if d is None:
                    continue
                self._by_guest.pop(d.guest_job, None)
                self._observe(d, loss, "projected", now, report,
                              host_walltime_s=rj.job.walltime_s,
                              note=f"Hp projects an overrun at {elapsed:.0f} s")

    # -- stage 4: place -----------------------------------------------------------------------
    def _place(self, ordered: list[Job], running: list[RunningJob], nodes, samples, now: float,
               report: PassReport) -> tuple[list, list[Decision]]:
        capacity = {n.name: n.cores for n in nodes}
        by_id = self._last
        free_map = dict(capacity)
        for rj in running:
            if rj.host_job is not None and rj.host_job in by_id:
                continue  # a guest runs on its host's cores
            for node, c in rj.allocation.cores_by_node:
                if node in free_map:
                    free_map[node] -= c
        free = _FreeCores({n: max(0, c) for n, c in free_map.items()})
        index = _HostIndex(self, running, capacity, samples, now) if self.policy.co_allocates else None
        plan: list = []
        declined: list[Decision] = []
        reservation: tuple[float, dict[str, int]] | None = None
        window: _FreeCores | None = None   # cores a job may use past the shadow time
        fits_empty: dict[tuple[int, int], bool] = {}
        for job in ordered:
            shape = (job.cores, job.nodes)
            if shape not in fits_empty:
                fits_empty[shape] = first_fit(job, capacity) is not None
            if not fits_empty[shape]:
                if job.job_id not in self._unplaceable:
                    self._unplaceable.add(job.job_id)
                    self._give_up(job.job_id, f"needs {job.cores} cores on {job.nodes} node(s); "
                                  "no set of this cluster's nodes can hold it", report)
                continue
            alloc = None
            if reservation is None:
                alloc = free.fit(job)
                if alloc is not None:
                    free.take(alloc)
            else:
                shadow = reservation[0]
                if now + job.walltime_s <= shadow:
                    alloc = free.fit(job)
                    if alloc is not None:
                        free.take(alloc)
                        for node, _ in alloc.cores_by_node:  # the window never exceeds free
                            if window.cores[node] > free.cores[node]:
                                window.total -= window.cores[node] - free.cores[node]
                                window.cores[node] = free.cores[node]
                                window._max = None
                else:
                    alloc = window.fit(job)
                    if alloc is not None:
                        free.take(alloc)
                        window.take(alloc)
            if alloc is not None:
                plan.append(_Start(job, alloc))
                continue
            if index is not None:
                shadow = reservation[0] if reservation is not None else None
                try:
                    result = self.policy.choose(job, index.candidates(job, shadow), now)
                except Exception as exc:  # noqa: BLE001 - a policy bug must not stop the pass
                    log.exception("co-allocation policy %s failed for job %s", self.policy.name, job.job_id)
                    report.errors.append(f"policy {self.policy.name} failed for job {job.job_id}: {exc}")
                    result = NO_COALLOCATION
                index.mark_asked(result.asked)
                declined.extend(result.declined)
                for d in result.declined:
                    self._cooldown[(job.job_id, d.host_job)] = now + self.config.decline_cooldown_s
                if result.choice is not None:
                    host = by_id[result.choice.host_job]
                    plan.append(_CoStart(job, result.choice, host.quota_fraction))
                    continue
            if reservation is None:
                if not self.config.backfill:
                    break  # strict order: nothing passes the first job that waits
                reservation = self._reservation(job, free.cores, running, plan, now)
                if reservation is None:
                    continue
                report.reservation = (job.job_id, reservation[0])
                extra = reservation[1]
                window = _FreeCores({n: min(free.cores[n], extra.get(n, 0)) for n in free.cores})
        return plan, declined

    def _reservation(self, job: Job, free: dict[str, int], running: list[RunningJob],
                     plan: list, now: float) -> tuple[float, dict[str, int]] | None:
        """EASY: the earliest time (by start + walltime of running jobs and of the jobs
        this pass plans to start) the job fits, and the cores left over at that time
        beyond its reserved allocation. A guest that outlives its host keeps its cores
        until its own end."""
        by_id = self._last
        guests: dict[str, list[tuple[Allocation, float]]] = {}
        for rj in running:
            if rj.host_job is not None and rj.host_job in by_id:
                guests.setdefault(rj.host_job, []).append(
                    (rj.allocation, max(now, rj.start_time + rj.job.walltime_s)))
        holders: list[tuple[Allocation, float]] = []
        for rj in running:
            if rj.host_job is None or rj.host_job not in by_id:
                holders.append((rj.allocation, max(now, rj.start_time + rj.job.walltime_s)))
        for item in plan:
            if isinstance(item, _Start):
                holders.append((item.allocation, now + item.job.walltime_s))
            else:
                guests.setdefault(item.choice.host_job, []).append(
                    (item.choice.placement, now + item.job.walltime_s))
        events: list[tuple[float, list[tuple[str, int]]]] = []
        for alloc, end in holders:
            cores = alloc.as_dict()
            for g_alloc, g_end in guests.get(alloc.job_id, ()):
                if g_end > end:
                    for node, c in g_alloc.cores_by_node:
                        cores[node] = cores.get(node, 0) - c
                    events.append((g_end, list(g_alloc.cores_by_node)))
            events.append((end, list(cores.items())))
        events.sort(key=lambda e: e[0])
        proj = dict(free)
        total = sum(proj.values())
        part = -(-job.cores // job.nodes)
        for end, cores in events:
            grew = False
            for node, c in cores:
                if node in proj:
                    proj[node] += c
                    total += c
                    grew = grew or proj[node] >= part
            if total < job.cores or not grew:
                continue
            alloc = first_fit(job, proj)
            if alloc is not None:
                for node, c in alloc.cores_by_node:
                    proj[node] -= c
                return end, proj
        return None

    # -- stage 5: act -------------------------------------------------------------------------
    def _act(self, plan: list, declined: list[Decision], now: float, report: PassReport) -> None:
        for d in declined:
            report.declined += 1
            host = self._last.get(d.host_job)
            hq = host.quota_fraction if host is not None else 1.0
            self._record(lambda: self.recorder.record_decision(d, hq, 0.0), report)
            self._record(lambda: self.recorder.record_outcome(OutcomeRecord(
                d.decision_id, now, 0.0, "declined", note="a_0: not on this host")), report)
            self._dirty_classes.add(d.job_class)
        for item in plan:
            if isinstance(item, _Start):
                self._start(item, now, report)
            else:
                self._co_start(item, now, report)

    def _start(self, item: _Start, now: float, report: PassReport) -> None:
        job = item.job
        try:
            self.backend.start(job, item.allocation, 1.0)
        except Exception as exc:  # noqa: BLE001
            self._start_failed(job.job_id, f"start failed: {exc}", report)
            return
        report.started += 1
        self._last[job.job_id] = RunningJob(job, item.allocation, now)

    def _co_start(self, item: _CoStart, now: float, report: PassReport) -> None:
        job, ch = item.job, item.choice
        d = ch.decision
        try:
            self.backend.set_quota(ch.host_job, ch.host_quota)
        except Exception as exc:  # noqa: BLE001
            self._set_quota(ch.host_job, item.host_quota_before, report)
            self._co_start_failed(job.job_id, d, f"setting host {ch.host_job}'s quota failed: {exc}",
                                  ch, now, report)
            return
        try:
            self.backend.start(job, ch.placement, ch.guest_quota, host_job=ch.host_job)
        except Exception as exc:  # noqa: BLE001
            self._set_quota(ch.host_job, item.host_quota_before, report)
            self._co_start_failed(job.job_id, d, f"start as a guest of {ch.host_job} failed: {exc}",
                                  ch, now, report)
            return
        report.coallocated += 1
        self._shared.update((job.job_id, ch.host_job))
        self._was_guest.add(job.job_id)
        host = self._last.get(ch.host_job)
        if host is not None:
            self._last[ch.host_job] = _replace(host, quota_fraction=ch.host_quota,
                                               guest_jobs=host.guest_jobs + (job.job_id,))
        self._last[job.job_id] = RunningJob(job, ch.placement, now, ch.guest_quota, ch.host_job,
                                            decision_id=d.decision_id if d else None)
        if d is not None:
            self._by_host.setdefault(ch.host_job, set()).add(d.decision_id)
            self._by_guest[job.job_id] = d.decision_id
            self._record(lambda: self.recorder.record_decision(d, ch.host_quota, ch.guest_quota), report)
            self._dirty_classes.add(d.job_class)

    def _co_start_failed(self, job_id: str, d: Decision | None, reason: str, ch: Choice,
                         now: float, report: PassReport) -> None:
        if d is not None and self.learner is not None:
            # The decision happened (its id is spent): record it and close it as cancelled.
            self.learner.forget(d.decision_id)
            self._record(lambda: self.recorder.record_decision(d, ch.host_quota, ch.guest_quota), report)
            self._record(lambda: self.recorder.record_outcome(OutcomeRecord(
                d.decision_id, now, 0.0, "cancelled", note=reason)), report)
            report.cancelled += 1
            self._dirty_classes.add(d.job_class)
        self._start_failed(job_id, reason, report)

    def _start_failed(self, job_id: str, reason: str, report: PassReport) -> None:
        n = self._attempts.get(job_id, 0) + 1
        self._attempts[job_id] = n
        report.errors.append(f"job {job_id}: {reason} (attempt {n})")
        if n >= self.config.max_start_attempts:
            self._give_up(job_id, f"{reason}; gave up after {n} attempts", report)

    def _give_up(self, job_id: str, reason: str, report: PassReport) -> None:
        try:
            self.backend.fail(job_id, reason)
        except Exception as exc:  # noqa: BLE001 - it stays queued; try again next pass
            report.errors.append(f"reporting job {job_id} failed did not work: {exc}")
            self._unplaceable.discard(job_id)
            return
        report.failed.append(job_id)
        self._attempts.pop(job_id, None)

    # -- learner feedback -----------------------------------------------------------------------
    def _observe(self, d: Decision, loss: float, kind: str, now: float, report: PassReport,
                 **extra) -> None:
        closed = self.learner.observe(d.decision_id, loss, now)
        report.observed += 1
        record = OutcomeRecord(d.decision_id, now, loss, kind, **extra)
        combined = getattr(self.recorder, "record_observation", None)
        if combined is not None:
            # A store that can: outcome, class state and closed round in one transaction.
            self._dirty_classes.discard(d.job_class)
            state = self.learner.class_state(d.job_class)
            self._record(lambda: combined(record, state, closed), report)
            return
        self._record(lambda: self.recorder.record_outcome(record), report)
        if closed is not None:
            self._record(lambda: self.recorder.record_round(closed), report)
        self._save_class(d.job_class, report)

    def _cancel(self, did: int, now: float, reason: str, report: PassReport) -> None:
        d = self.learner.forget(did) if self.learner else None
        if d is None:
            return
        report.cancelled += 1
        self._record(lambda: self.recorder.record_outcome(
            OutcomeRecord(did, now, 0.0, "cancelled", note=reason)), report)

    def _save_class(self, job_class: str, report: PassReport) -> None:
        self._dirty_classes.discard(job_class)
        self._record(lambda: self.recorder.save_class(self.learner.class_state(job_class)), report)

    def _save_dirty(self) -> None:
        if self.learner is None:
            self._dirty_classes.clear()
            return
        for c in sorted(self._dirty_classes):
            try:
                self.recorder.save_class(self.learner.class_state(c))
            except Exception as exc:  # noqa: BLE001
                log.error("saving class %s failed: %s", c, exc)
        self._dirty_classes.clear()

    @staticmethod
    def _record(call: Callable[[], object], report: PassReport) -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a store error is loud but not fatal
            log.error("recorder failed: %s", exc)
            report.errors.append(f"recorder: {exc}")

    # -- quotas ---------------------------------------------------------------------------------
    def _set_quota(self, job_id: str, q: float, report: PassReport) -> None:
        try:
            self.backend.set_quota(job_id, q)
        except Exception as exc:  # noqa: BLE001 - _reconcile_quotas retries next pass
            report.errors.append(f"set_quota({job_id}, {q:.3f}) failed: {exc}")

    def _reconcile_quotas(self, running: list[RunningJob], report: PassReport) -> None:
        """Every job that is not a guest should hold ``1 - lent / cores`` (1.0 without
        guests): re-assert it where the backend reports otherwise. This retries quota
        writes that failed, and after a restart gives full quota back to hosts whose guests
        ended and to guests whose host ended while no controller was watching."""
        by_id = self._last
        for rj in running:
            if rj.host_job is not None and rj.host_job in by_id:
                continue
            lent = 0.0
            for g in rj.guest_jobs:
                grj = by_id.get(g)
                if grj is not None and grj.host_job == rj.job_id:
                    lent += grj.quota_fraction * grj.job.cores
            try:
                want = host_quota_fraction(rj.job.cores, lent)
            except InvalidInput:
                want = 1.0  # guests claim more than the host has: the host comes first
            if abs(rj.quota_fraction - want) > 1e-9:
                self._set_quota(rj.job_id, want, report)
                self._last[rj.job_id] = _replace(rj, quota_fraction=want)

    def _expire_cooldowns(self, now: float) -> None:
        if len(self._cooldown) > 4096 or self.passes % 64 == 0:
            self._cooldown = {k: t for k, t in self._cooldown.items() if t > now}

    # -- host state for the experts -------------------------------------------------------------
    def host_state(self, rj: RunningJob, sample: MetricsSample | None, now: float) -> HostState:
        """HostState of a host from its latest sample. Unknown metrics are read as a busy
        host (100 % CPU and memory, Hp None): with nothing known, lend little."""
        job = rj.job
        elapsed = max(0.0, now - rj.start_time)
        happiness = None
        cpu = mem = 100.0
        if sample is not None:
            cpu, mem = sample.cpu_percent, sample.mem_percent
            total = sample.tasks_total if sample.tasks_total is not None else job.tasks
            try:
                happiness = hp.happiness(elapsed, job.walltime_s, sample.tasks_done, total,
                                         sample.tasks_per_s)
            except InvalidInput:
                happiness = None
        return HostState(job.job_class, cpu, mem, job.stage_type, elapsed / job.walltime_s,
                         happiness)


class _MaxTree:
    """A max segment tree over a fixed list of values: the first index >= i whose value is
    >= x in O(log n), and removal (value -> -inf). Lets the host index skip hosts already
    asked, and hosts that end too early to take a guest past an EASY reservation, without
    walking them one by one for every guest."""

    __slots__ = ("size", "tree")

    def __init__(self, values: list[float]):
        size = 1
        while size < max(1, len(values)):
            size *= 2
        tree = [-math.inf] * (2 * size)
        tree[size:size + len(values)] = values
        for k in range(size - 1, 0, -1):
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
        self.size, self.tree = size, tree

    def remove(self, i: int) -> None:
        tree = self.tree
        k = i + self.size
        tree[k] = -math.inf
        k //= 2
        while k:
            tree[k] = max(tree[2 * k], tree[2 * k + 1])
            k //= 2

    def first_at_least(self, i: int, x: float) -> int:
        """Smallest index >= i with value >= x, or -1."""
        tree, size = self.tree, self.size
        if i >= size or tree[1] < x:
            return -1
        k = i + size
        if tree[k] >= x:
            return i
        # Climb until a right sibling holds a value >= x, then descend to its leftmost such leaf.
        while True:
            if k & 1 == 0 and tree[k + 1] >= x:
                k += 1
                break
            k //= 2
            if k <= 1:
                return -1
        while k < size:
            k = 2 * k if tree[2 * k] >= x else 2 * k + 1
        return k - size


class _HostIndex:
    """Candidate hosts for one pass, bucketed by spare room (cores not used by guests) and
    ranked in first-fit order (first node of the allocation, then job id).

    ``candidates(guest)`` merges the buckets with room >= guest cores in rank order,
    skipping hosts already asked this pass, hosts in cooldown for this guest, hosts the
    guest's node layout does not fit and, under an EASY reservation, hosts that would
    leave the guest holding their cores past the shadow time; it yields
    ``HostCandidate``s lazily, at most ``max_candidates_per_guest``. Each bucket keeps a
    max tree of its hosts' estimated ends, so both skips cost O(log n), not a walk.
    """

    def __init__(self, ctl: Controller, running: list[RunningJob], capacity: dict[str, int],
                 samples: dict[str, MetricsSample], now: float):
        self.ctl = ctl
        self.samples = samples
        self.now = now
        by_id = ctl._last
        node_rank = {n: i for i, n in enumerate(capacity)}
        max_guests = ctl.config.max_guests_per_host
        buckets: dict[int, list[tuple[tuple, RunningJob, dict[str, int], float]]] = {}
        for rj in running:
            if rj.host_job is not None or rj.job_id in ctl._was_guest:
                continue
            if len(rj.guest_jobs) >= max_guests:
                continue
            used: dict[str, int] = {}
            lent = 0.0
            for g in rj.guest_jobs:
                grj = by_id.get(g)
                if grj is None:
                    continue
                lent += grj.quota_fraction * grj.job.cores
                for node, c in grj.allocation.cores_by_node:
                    used[node] = used.get(node, 0) + c
            room = rj.allocation.cores - sum(used.values())
            if room < 1:
                continue
            first = rj.allocation.cores_by_node[0][0] if rj.allocation.cores_by_node else ""
            rank = (node_rank.get(first, len(node_rank)), rj.job_id)
            buckets.setdefault(room, []).append((rank, rj, used, lent))
        self.rooms = sorted(buckets)
        self.buckets = [sorted(buckets[r], key=lambda e: e[0]) for r in self.rooms]
        self.trees = [_MaxTree([e[1].start_time + e[1].job.walltime_s for e in b])
                      for b in self.buckets]
        self.where = {e[1].job_id: (b, i) for b, entries in enumerate(self.buckets)
                      for i, e in enumerate(entries)}
        self.asked: set[str] = set()

    def mark_asked(self, host_ids) -> None:
        for h in host_ids:
            if h not in self.asked:
                self.asked.add(h)
                pos = self.where.get(h)
                if pos is not None:
                    self.trees[pos[0]].remove(pos[1])

    def _bucket_iter(self, b: int, min_end: float):
        bucket, tree = self.buckets[b], self.trees[b]
        i = tree.first_at_least(0, min_end)
        while i != -1:
            yield bucket[i]
            i = tree.first_at_least(i + 1, min_end)

    def candidates(self, guest: Job, shadow: float | None) -> Iterator[HostCandidate]:
        if not self.rooms or self.rooms[-1] < guest.cores:
            return iter(())
        first = next(i for i, r in enumerate(self.rooms) if r >= guest.cores)
        guest_end = self.now + guest.walltime_s
        # Under a reservation a guest that outlives its host past the shadow time could hold
        # reserved cores: only hosts that end after the guest qualify then.
        # (-1e308, not -inf: removed hosts hold -inf and must never match.)
        min_end = guest_end if shadow is not None and guest_end > shadow else -1e308
        iters = [self._bucket_iter(b, min_end) for b in range(first, len(self.rooms))]
        merged = iters[0] if len(iters) == 1 else heapq.merge(*iters, key=lambda e: e[0])
        return islice(self._filter(guest, merged), self.ctl.config.max_candidates_per_guest)

    def _filter(self, guest: Job, entries) -> Iterator[HostCandidate]:
        ctl, now = self.ctl, self.now
        cooldown = ctl._cooldown
        gid = guest.job_id
        for _, rj, used, lent in entries:
            host_id = rj.job.job_id
            until = cooldown.get((gid, host_id))
            if until is not None and until > now:
                continue
            placement = guest_placement(guest, rj.allocation, used)
            if placement is None:
                continue
            sample = self.samples.get(host_id)
            yield HostCandidate(rj, placement, lent, sample, ctl.host_state(rj, sample, now))


def _replace(rj: RunningJob, **changes) -> RunningJob:
    from dataclasses import replace
    return replace(rj, **changes)


__all__ = ["Controller", "ControllerConfig", "PassReport", "QueueOrder", "fcfs", "order_by"]
