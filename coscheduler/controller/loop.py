"""The Controller: the loop that runs the pipeline (see the package docstring).

Read ``step`` first: it calls the stages in order, and the methods below follow them
(drain, metrics, place, act), then the learner feedback and quota helpers they share.
The pure pieces live beside this module: ``order`` (stage 3), ``placement`` (free cores and
the EASY reservation), ``hosts`` (candidate hosts for a guest), ``quotas``.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from .. import happiness as hp
from ..backend import Backend
from ..learner import AsaxLearner, ClassState, Decision, HostState, LearnerConfig
from ..model import Job, MetricsSample, Outcome, RunningJob
from ..policies.coalloc import (NO_COALLOCATION, Choice, CoallocationPolicy, SpaceSharing,
                                make_policy)
from ..policies.gang import first_fit
from ..recorder import MemoryRecorder, OutcomeRecord, Recorder
from .config import ControllerConfig, PassReport
from .hosts import HostIndex, host_state, why_not_hosted
from .order import QueueOrder, fcfs
from .placement import CoStart, EasyBackfill, Start, easy_reservation, free_cores
from ..policies.lending import Loan, revise
from .quotas import quota_without_guest, wanted_quota
from .usage import ClassUsage

# The package's name, as before the controller became a package, so log filters still match.
log = logging.getLogger("coscheduler.controller")


@dataclass(frozen=True)
class _LossPart:
    """One side (host or guest) of a co-location's loss, with what it was measured from."""

    role: str
    loss: float
    kind: str            # "degradation" or "walltime"
    runtime_s: float     # measured, or projected for a side still running
    walltime_s: float
    projected: bool = False


def _claim(recorder: Recorder | None) -> None:
    """One controller per persistent store (store/lock.py): recorders that can be shared
    between processes say so with ``claim_controller``; a second controller is refused."""
    claim = getattr(recorder, "claim_controller", None)
    if callable(claim):
        claim()


class Controller:
    """Drives one backend with one co-allocation policy; see the package docstring."""

    def __init__(self, backend: Backend, policy: CoallocationPolicy | None = None,
                 recorder: Recorder | None = None, queue_order: QueueOrder = fcfs,
                 config: ControllerConfig | None = None, usage: ClassUsage | None = None):
        _claim(recorder)
        self.backend = backend
        # What jobs of each class use unthrottled (what the experts may know of a guest).
        self.usage = usage if usage is not None else ClassUsage()
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
        self._ended_jobs: dict[str, Job] = {}            # jobs of the outcomes being drained
        self._drain_samples: dict[str, MetricsSample] | None = None   # read when needed
        self._shared: set[str] = set()        # hosted or was a guest: not an alone run
        self._was_guest: set[str] = set()     # guests never host (even after their host ends)
        self._cooldown: dict[tuple[str, str], float] = {}   # (guest, host) -> until
        self._attempts: dict[str, int] = {}
        self._unplaceable: set[str] = set()
        self._dirty_classes: set[str] = set()
        # Idle-only lending: each guest's quota at its start (what a revision may grow
        # it back to), and the quota revisions made (time, guest, old, new) for reports.
        self._loan_target: dict[str, float] = {}
        # Hosts that lent under a learner's decision -> the class whose round closes when
        # the host ends (ControllerConfig.round_per_host).
        self._host_round: dict[str, str] = {}
        self.revisions: list[tuple[float, str, float, float]] = []
        self.last_samples: dict[str, MetricsSample] = {}
        self.passes = 0
        # During a pass, with a recorder that can batch: the writes to make at its end.
        self._writes: list[tuple[PassReport, Callable[..., object], tuple]] | None = None
        self._adopt_running()
        if self.learner is not None:
            for d in self.learner.pending.values():
                self._by_host.setdefault(d.host_job, set()).add(d.decision_id)
                self._by_guest[d.guest_job] = d.decision_id
                # A restarted controller knows a guest's loan only as its decision's action.
                self._loan_target[d.guest_job] = d.action_fraction
                self._host_round[d.host_job] = d.job_class
                self._shared.update((d.host_job, d.guest_job))
                self._was_guest.add(d.guest_job)

    # -- construction from persistent state ---------------------------------------------------
    @classmethod
    def from_recorder(cls, backend: Backend, recorder: Recorder, policy: str = "asax",
                      learner_config: LearnerConfig | None = None,
                      queue_order: QueueOrder = fcfs, config: ControllerConfig | None = None,
                      static_fraction: float = 0.5,
                      expert_factory: Callable[[], list] | None = None,
                      class_of: Callable[[Job], str] | None = None,
                      usage: ClassUsage | None = None,
                      idle_only: bool = True) -> "Controller":
        """Rebuild a controller after a restart: the learner from ``recorder.load()``
        (classes, pending decisions, next id; observed outcomes re-taught to fitted
        experts), declines still in cooldown, and host/guest relations from the backend."""
        learner = None
        _claim(recorder)  # before load(): a second controller must not even read the state
        loaded = recorder.load()
        if policy.strip().lower() in ("asax", "asa_x"):
            learner = AsaxLearner(learner_config or LearnerConfig(), expert_factory,
                                  classes=loaded.classes, pending=loaded.pending,
                                  next_decision_id=loaded.next_decision_id)
            for decision, loss in loaded.observed:
                learner.teach(decision, loss)
        ctl = cls(backend, make_policy(policy, learner, static_fraction, class_of, idle_only), recorder,
                  queue_order, config, usage)
        now = backend.now()
        running = set(ctl._last)
        for decision, _ in loaded.observed:
            if decision.action_index == 0:
                until = decision.time + ctl.config.decline_cooldown_s
                if until > now:
                    ctl._cooldown[(decision.guest_job, decision.host_job)] = until
            else:
                ctl._shared.update({decision.host_job, decision.guest_job} & running)
                if decision.host_job in running:
                    # Its losses came early (Hp): its round still closes when it ends.
                    ctl._host_round[decision.host_job] = decision.job_class
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
        # A recorder that can batch gets the pass's writes at its end, in one transaction.
        self._writes = [] if callable(getattr(self.recorder, "batch", None)) else None
        try:
            self._pass(now, report)
        finally:
            self._flush_writes(report)
        self._expire_cooldowns(now)
        report.duration_s = time.perf_counter() - t0
        return report

    def _pass(self, now: float, report: PassReport) -> None:
        self._drain(now, report)
        try:
            running = self.backend.running()
            nodes = self.backend.nodes()
            queued = self.backend.queued()
        except Exception as exc:  # noqa: BLE001 - cannot schedule blind: skip placement
            report.errors.append(f"reading the backend's state failed: {exc}")
            return
        self._last = {rj.job_id: rj for rj in running}
        self._resolve_vanished_hosts(now, report)
        self._reconcile_quotas(running, report)
        samples = self._read_metrics(report)
        self.last_samples = samples     # what this pass saw (reports, the timeline picture)
        self.usage.observe(running, samples)
        if getattr(self.policy, "idle_only", False):
            self._revise_loans(samples, report)
        self._early_losses(samples, now, report)
        waiting = [j for j in queued if j.job_id not in self._last]
        if getattr(self.queue_order, "wants_machine", False):  # a selector's order
            ordered = self.queue_order(waiting, now, machine=self._machine(nodes, running))
        else:
            ordered = self.queue_order(waiting, now)
        plan, declined = self._place(ordered, running, nodes, samples, now, report)
        self._act(plan, declined, now, report)

    @staticmethod
    def _machine(nodes, running) -> tuple[int, int, list[tuple[float, int]]]:
        """(free cores, total cores, [(estimated end, cores)]) for a selector's order."""
        by_id = {rj.job_id: rj for rj in running}
        free = free_cores({n.name: n.cores for n in nodes}, running, by_id)
        ends = [(rj.start_time + rj.job.walltime_s, rj.job.cores) for rj in running
                if rj.host_job is None]
        return sum(free.values()), sum(n.cores for n in nodes), ends

    # -- stage 1: drain -----------------------------------------------------------------------
    def _drain(self, now: float, report: PassReport) -> None:
        try:
            outcomes = self.backend.drain_finished()
        except Exception as exc:  # noqa: BLE001
            report.errors.append(f"backend.drain_finished() failed: {exc}")
            return
        done = {o.job_id: o for o in outcomes}
        self._ended_jobs = {o.job_id: self._last[o.job_id].job for o in outcomes
                            if o.job_id in self._last}
        self._drain_samples = None
        report.finished += len(outcomes)
        for o in outcomes:
            try:
                self._finish(o, done, now, report)
            except Exception as exc:  # noqa: BLE001 - one bad outcome must not stop the rest
                log.exception("handling the outcome of job %s failed", o.job_id)
                report.errors.append(f"outcome of job {o.job_id}: {exc}")

    def _finish(self, o: Outcome, done: dict[str, Outcome], now: float,
                report: PassReport) -> None:
        rj = self._last.pop(o.job_id, None)
        job = rj.job if rj is not None else None
        when = max(now, o.end_time)
        # As a host: every pending decision of this host gets its loss now: the host's, or
        # with ``config.pair_loss`` the worse of the host's and its guest's (the guest's
        # projected from its progress if it still runs: from now on it runs alone).
        round_class = self._host_round.pop(o.job_id, None)
        for did in sorted(self._by_host.pop(o.job_id, ())):
            d = self.learner.pending.get(did) if self.learner else None
            if d is None:
                continue
            self._by_guest.pop(d.guest_job, None)
            if job is None:
                self._finish_unknown_host(d, o, when, report)
            elif o.state in ("completed", "timeout"):
                guest = self._other_part(d.guest_job, done, when, "guest") \
                    if self.config.pair_loss else None
                self._observe_parts(d, self._loss_part(job, o, "host"), guest, when, report)
            else:
                self._cancel(did, when, f"host {o.job_id} {o.state}: {o.reason}".rstrip(": "), report)
        if round_class is not None and self.config.round_per_host and self.learner is not None:
            # Its co-allocations' losses are in: the round of its class closes.
            closed = self.learner.end_round(round_class, when)
            if closed is not None:
                self._record(report, self.recorder.record_round, closed)
                self._save_class(round_class, report)
        if rj is not None and rj.guest_jobs:
            # The host ended first: its guests get full quota on the cores they hold.
            for g in rj.guest_jobs:
                if g not in done and g in self._last:
                    self._set_quota(g, 1.0, report)
        # As a guest whose host still runs: a failed guest cancels its decision; with
        # ``config.pair_loss`` a finished one gets it observed now (the host's part
        # projected from its progress); else it stays pending: the host's loss decides.
        did = self._by_guest.pop(o.job_id, None)
        if did is not None:
            d = self.learner.pending.get(did) if self.learner else None
            if d is None:
                pass
            elif o.state not in ("completed", "timeout"):
                self._by_host.get(d.host_job, set()).discard(did)
                self._cancel(did, when, f"guest {o.job_id} {o.state}: {o.reason}".rstrip(": "), report)
            elif self.config.pair_loss and job is not None:
                self._by_host.get(d.host_job, set()).discard(did)
                host = self._other_part(d.host_job, done, when, "host")
                self._observe_parts(d, host, self._loss_part(job, o, "guest"), when, report)
        if rj is not None and rj.host_job is not None and rj.host_job not in done:
            self._restore_host_quota(rj.host_job, o.job_id, report)
        # A job that ran alone teaches its class's exclusive runtime.
        if job is not None and o.state == "completed" and o.job_id not in self._shared:
            try:
                self.recorder.record_alone_runtime(job.job_class, o.runtime_s)
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"recording the alone runtime of {o.job_id}: {exc}")
        self._shared.discard(o.job_id)
        self._loan_target.pop(o.job_id, None)
        self._was_guest.discard(o.job_id)
        self._unplaceable.discard(o.job_id)
        self._attempts.pop(o.job_id, None)

    def _loss_part(self, job: Job, o: Outcome, role: str) -> "_LossPart":
        """One side's loss of a co-location: degradation against its class's runtime alone
        when known, else the walltime loss; a job killed at its walltime loses 1."""
        if o.state == "timeout":
            return _LossPart(role, 1.0, "walltime", o.runtime_s, job.walltime_s)
        alone = self.recorder.alone_runtime(job.job_class)
        loss = hp.host_loss(o.runtime_s, job.walltime_s, alone)
        kind = "degradation" if alone is not None and alone > 0 else "walltime"
        return _LossPart(role, loss, kind, o.runtime_s, job.walltime_s)

    def _other_part(self, job_id: str, done: dict[str, Outcome], now: float,
                    role: str) -> "_LossPart | None":
        """The other side of a pair when one side ends: its real loss if it ended in the same
        drain, else its projected degradation if it still runs (elapsed time plus what is
        left of its work at its speed alone: from now on the pair no longer shares), else
        unknown (None)."""
        o = done.get(job_id)
        if o is not None:
            job = self._ended_jobs.get(job_id)
            if job is None or o.state not in ("completed", "timeout"):
                return None
            return self._loss_part(job, o, role)
        rj = self._last.get(job_id)
        if rj is None:
            return None
        if self._drain_samples is None:
            # Fresh metrics (not the last pass's): the same projection after a restart.
            self._drain_samples = self._read_metrics(PassReport(time=now))
        s = self._drain_samples.get(job_id)
        if s is None:
            return None
        alone = self.recorder.alone_runtime(rj.job.job_class)
        total = s.tasks_total if s.tasks_total is not None else rj.job.tasks
        if alone is None or alone <= 0 or not total:
            return None
        left = max(0.0, 1.0 - s.tasks_done / total)
        projected = max(0.0, s.time - rj.start_time) + left * alone + max(0.0, now - s.time)
        loss = hp.degradation_loss(projected, alone)
        return _LossPart(role, loss, "degradation", projected, rj.job.walltime_s, True)

    def _observe_parts(self, d: Decision, host: "_LossPart | None", guest: "_LossPart | None",
                       when: float, report: PassReport) -> None:
        """A decision's loss: the larger of its host's and its guest's (a co-location is as
        bad as what it did to either job), from the parts that are known."""
        parts = [p for p in (host, guest) if p is not None]
        if not parts:
            self._cancel(d.decision_id, when, "neither side's loss could be measured", report)
            return
        worst = max(parts, key=lambda p: p.loss)
        note = ", ".join(f"{p.role} {p.loss:.3f} ({p.kind}{', projected' if p.projected else ''})"
                         for p in parts)
        if worst.kind == "walltime" and worst.loss >= 1.0:
            note += f"; {worst.role} hit its walltime"
        self._observe(d, worst.loss, worst.kind, when, report,
                      host_runtime_s=host.runtime_s if host else None,
                      host_walltime_s=host.walltime_s if host else None,
                      guest_runtime_s=guest.runtime_s if guest else None, note=note)

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
        q, guests = quota_without_guest(host, gone_guest, self._last)
        self._last[host_id] = replace(host, quota_fraction=q, guest_jobs=guests)
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
            # The verdict is final for these decisions, so it must not be milder than what
            # the projection says of the host's slowdown (its runtime alone known) nor, with
            # pair losses, of its guest's.
            projected = elapsed + max(0, total - s.tasks_done) / s.tasks_per_s \
                if s.tasks_per_s > 0 else math.inf
            alone = self.recorder.alone_runtime(rj.job.job_class)
            if alone is not None and alone > 0 and math.isfinite(projected):
                loss = max(loss, hp.degradation_loss(projected, alone))
            self._drain_samples = samples
            for did in sorted(self._by_host.pop(host_id)):
                d = self.learner.pending.get(did)
                if d is None:
                    continue
                self._by_guest.pop(d.guest_job, None)
                guest = self._other_part(d.guest_job, {}, now, "guest") \
                    if self.config.pair_loss else None
                worst = max(loss, guest.loss if guest is not None else 0.0)
                note = f"Hp projects an overrun at {elapsed:.0f} s: host {loss:.3f}"
                if guest is not None:
                    note += f", guest {guest.loss:.3f} (projected)"
                self._observe(d, worst, "projected", now, report,
                              host_walltime_s=rj.job.walltime_s,
                              host_runtime_s=projected if math.isfinite(projected) else None,
                              guest_runtime_s=guest.runtime_s if guest is not None else None,
                              note=note)

    # -- stage 4: place -----------------------------------------------------------------------
    def _place(self, ordered: list[Job], running: list[RunningJob], nodes, samples, now: float,
               report: PassReport) -> tuple[list, list[Decision]]:
        capacity = {n.name: n.cores for n in nodes}
        by_id = self._last
        cores = EasyBackfill(free_cores(capacity, running, by_id))
        index = None
        if self.policy.co_allocates:
            index = HostIndex(running, capacity, samples, now, running_by_id=by_id,
                              was_guest=self._was_guest, cooldown=self._cooldown,
                              config=self.config, usage=self.usage,
                              idle_only=getattr(self.policy, "idle_only", False),
                              alone_runtime=self.recorder.alone_runtime)
        plan: list[Start | CoStart] = []
        declined: list[Decision] = []
        host_quota: dict[str, float] = {}   # hosts' quotas after this pass's co-starts
        fits_empty: dict[tuple[int, int], bool] = {}
        for job in ordered:
            shape = (job.cores, job.nodes)
            if shape not in fits_empty:
                fits_empty[shape] = first_fit(job, capacity) is not None
            if not fits_empty[shape]:
                if self.config.give_up_unplaceable:
                    if job.job_id not in self._unplaceable:
                        self._unplaceable.add(job.job_id)
                        self._give_up(job.job_id, f"needs {job.cores} cores on {job.nodes} node(s); "
                                      "no set of this cluster's nodes can hold it", report)
                    continue
                # Offer-based: more may be offered. The free cores (held offers) are kept
                # for this job: nothing later starts on them (guests inside hosts still may).
                if cores.shadow is None:
                    if not self.config.backfill:
                        break
                    report.reservation = (job.job_id, now)
                    cores.reserve(now, {})
                continue
            # On free cores, without delaying the EASY reservation if there is one.
            alloc = cores.start(job, now)
            if alloc is not None:
                plan.append(Start(job, alloc))
                continue
            # Else inside a running host, if the policy co-allocates.
            if index is not None:
                try:
                    result = self.policy.choose(job, index.candidates(job, cores.shadow), now)
                except Exception as exc:  # noqa: BLE001 - a policy bug must not stop the pass
                    log.exception("co-allocation policy %s failed for job %s", self.policy.name, job.job_id)
                    report.errors.append(f"policy {self.policy.name} failed for job {job.job_id}: {exc}")
                    result = NO_COALLOCATION
                chosen = result.choice.host_job if result.choice is not None else None
                index.mark_asked([h for h in result.asked if h != chosen])
                declined.extend(result.declined)
                for d in result.declined:
                    self._cooldown[(job.job_id, d.host_job)] = now + self.config.decline_cooldown_s
                if result.choice is not None:
                    ch = result.choice
                    # The host may take more guests on its other cores in this pass; if this
                    # start fails it gets back the quota it held before it.
                    before = host_quota.get(chosen, by_id[chosen].quota_fraction)
                    host_quota[chosen] = ch.host_quota
                    index.took(chosen, ch.placement, ch.guest_quota * job.cores)
                    plan.append(CoStart(job, ch, before))
                    continue
                if self.config.explain:
                    report.refused[job.job_id] = "declined" if result.asked else why_not_hosted(
                        job, running, running_by_id=by_id, was_guest=self._was_guest,
                        cooldown=self._cooldown, index=index, shadow=cores.shadow,
                        now=now, config=self.config)
            # Else the first waiting job that can get a reservation (EASY) gets it.
            if cores.shadow is None:
                if not self.config.backfill:
                    break  # strict order: nothing passes the first job that waits
                reservation = easy_reservation(job, cores.free.cores, running, plan, now, by_id)
                if reservation is None:
                    continue
                shadow, left_over = reservation
                report.reservation = (job.job_id, shadow)
                cores.reserve(shadow, left_over)
        return plan, declined

    # -- stage 5: act -------------------------------------------------------------------------
    def _act(self, plan: list, declined: list[Decision], now: float, report: PassReport) -> None:
        for d in declined:
            report.declined += 1
            host = self._last.get(d.host_job)
            hq = host.quota_fraction if host is not None else 1.0
            self._record(report, self.recorder.record_decision, d, hq, 0.0)
            if d.action_index == 0:
                kind, note = "declined", "a_0: not on this host"
            else:   # forgotten by the learner: closed like a decision never carried out
                kind, note = "cancelled", "action under half the guest's need: no loan"
            self._record(report, self.recorder.record_outcome, OutcomeRecord(
                d.decision_id, now, 0.0, kind, note=note))
            self._dirty_classes.add(d.job_class)
        for item in plan:
            if isinstance(item, Start):
                self._start(item, now, report)
            else:
                self._co_start(item, now, report)

    def _start(self, item: Start, now: float, report: PassReport) -> None:
        job = item.job
        try:
            self.backend.start(job, item.allocation, 1.0)
        except Exception as exc:  # noqa: BLE001
            self._start_failed(job.job_id, f"start failed: {exc}", report)
            return
        report.started += 1
        self._last[job.job_id] = RunningJob(job, item.allocation, now)

    def _co_start(self, item: CoStart, now: float, report: PassReport) -> None:
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
        if host is not None:   # (dataclasses.replace, without its per-call field walk)
            self._last[ch.host_job] = RunningJob(
                host.job, host.allocation, host.start_time, ch.host_quota, host.host_job,
                host.guest_jobs + (job.job_id,), host.decision_id, host.lendable)
        self._last[job.job_id] = RunningJob(job, ch.placement, now, ch.guest_quota, ch.host_job,
                                            decision_id=d.decision_id if d else None)
        self._loan_target[job.job_id] = ch.guest_quota
        if d is not None:
            self._host_round[ch.host_job] = d.job_class
            self._by_host.setdefault(ch.host_job, set()).add(d.decision_id)
            self._by_guest[job.job_id] = d.decision_id
            self._record(report, self.recorder.record_decision, d, ch.host_quota, ch.guest_quota)
            self._dirty_classes.add(d.job_class)

    def _co_start_failed(self, job_id: str, d: Decision | None, reason: str, ch: Choice,
                         now: float, report: PassReport) -> None:
        if d is not None and self.learner is not None:
            # The decision happened (its id is spent): record it and close it as cancelled.
            self.learner.forget(d.decision_id)
            self._record(report, self.recorder.record_decision, d, ch.host_quota, ch.guest_quota)
            self._record(report, self.recorder.record_outcome, OutcomeRecord(
                d.decision_id, now, 0.0, "cancelled", note=reason))
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
            state = self._class_copy(d.job_class)
            self._record(report, combined, record, state, closed)
            return
        self._record(report, self.recorder.record_outcome, record)
        if closed is not None:
            self._record(report, self.recorder.record_round, closed)
        self._save_class(d.job_class, report)

    def _cancel(self, did: int, now: float, reason: str, report: PassReport) -> None:
        d = self.learner.forget(did) if self.learner else None
        if d is None:
            return
        report.cancelled += 1
        self._record(report, self.recorder.record_outcome,
                     OutcomeRecord(did, now, 0.0, "cancelled", note=reason))

    def _save_class(self, job_class: str, report: PassReport) -> None:
        self._dirty_classes.discard(job_class)
        self._record(report, self.recorder.save_class, self._class_copy(job_class))

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

    def _class_copy(self, job_class: str) -> ClassState:
        """The class's state as it is now (a write may be made at the end of the pass)."""
        st = self.learner.class_state(job_class)
        if self._writes is None:
            return st
        return replace(st, weights=list(st.weights), risk=list(st.risk),
                       cum_expert_risk=list(st.cum_expert_risk),
                       cum_weighted_expert_risk=list(st.cum_weighted_expert_risk))

    def _record(self, report: PassReport, write: Callable[..., object], *args) -> None:
        """A write to the recorder: now, or (a recorder with ``batch``, during a pass) at the
        end of the pass, in order, in one transaction (``_flush_writes``)."""
        if self._writes is not None:
            self._writes.append((report, write, args))
            return
        self._write(report, write, args)

    @staticmethod
    def _write(report: PassReport, write: Callable[..., object], args: tuple) -> None:
        try:
            write(*args)
        except Exception as exc:  # noqa: BLE001 - a store error is loud but not fatal
            log.error("recorder failed: %s", exc)
            report.errors.append(f"recorder: {exc}")

    def _flush_writes(self, report: PassReport) -> None:
        """The pass's writes and the dirty classes, in one batch when the recorder has one."""
        writes, self._writes = self._writes, None
        if writes is None:
            self._save_dirty()
            return
        try:
            with self.recorder.batch():
                for rep, write, args in writes:
                    self._write(rep, write, args)
                self._save_dirty()
        except Exception as exc:  # noqa: BLE001 - the batch's own begin or commit failed
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
            want = wanted_quota(rj, by_id)
            if abs(rj.quota_fraction - want) > 1e-9:
                self._set_quota(rj.job_id, want, report)
                self._last[rj.job_id] = replace(rj, quota_fraction=want)

    def _revise_loans(self, samples: dict[str, MetricsSample], report: PassReport) -> None:
        """Idle-only lending, every tick: a host whose measured use left it less headroom
        than the margin gets CPU back from its guests first; a host with ample headroom
        lets its guests grow back to their loans (policies.lending.revise, with hysteresis).
        Guests shrink before the host's quota rises, and the host's quota falls before its
        guests grow, so host and guests never claim more than the host's cores."""
        by_id = self._last
        for host in list(by_id.values()):
            if not host.guest_jobs or host.host_job is not None:
                continue
            s = samples.get(host.job_id)
            if s is None:
                continue
            loans = []
            for g in host.guest_jobs:
                grj = by_id.get(g)
                if grj is None or grj.host_job != host.job_id:
                    continue
                loans.append(Loan(g, grj.job.cores, grj.quota_fraction,
                                  self._loan_target.get(g, grj.quota_fraction)))
            try:
                new = revise(host.job.cores, s.cpu_percent / 100.0 * host.job.cores, loans,
                             self.config.lend_margin, self.config.lend_hysteresis)
            except Exception as exc:  # noqa: BLE001 - a bad sample must not stop the pass
                report.errors.append(f"revising the loans of host {host.job_id}: {exc}")
                continue
            if not new:
                continue
            shrink = {g: q for g, q in new.items() if q < by_id[g].quota_fraction}
            grow = {g: q for g, q in new.items() if g not in shrink}
            now = report.time
            for g, q in new.items():
                self.revisions.append((now, g, by_id[g].quota_fraction, q))
            for g, q in shrink.items():
                self._set_quota(g, q, report)
            for g, q in new.items():
                by_id[g] = replace(by_id[g], quota_fraction=q)
            want = wanted_quota(by_id[host.job_id], by_id)
            if abs(want - by_id[host.job_id].quota_fraction) > 1e-12:
                self._set_quota(host.job_id, want, report)
                by_id[host.job_id] = replace(by_id[host.job_id], quota_fraction=want)
            for g, q in grow.items():
                self._set_quota(g, q, report)

    def _expire_cooldowns(self, now: float) -> None:
        if len(self._cooldown) > 4096 or self.passes % 64 == 0:
            self._cooldown = {k: t for k, t in self._cooldown.items() if t > now}

    # -- host state for the experts -------------------------------------------------------------
    def host_state(self, rj: RunningJob, sample: MetricsSample | None, now: float) -> HostState:
        """HostState of a host from its latest sample (``hosts.host_state``). Unknown
        metrics are read as a busy host (100 % CPU and memory, Hp None): lend little."""
        return host_state(rj, sample, now)
