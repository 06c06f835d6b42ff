"""Stage 5 of a pass, act: start jobs and guests through the backend, and the quota helpers
(reconcile, idle-only loan revisions). A mixin of ``Controller`` (loop.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from ..learner import Decision
from ..model import MetricsSample, RunningJob
from ..policies.coalloc import Choice
from ..policies.lending import Loan, revise
from ..recorder import OutcomeRecord
from .config import PassReport
from .placement import CoStart, Start
from .span import UNDONE_NOTE
from .quotas import wanted_quota

log = logging.getLogger("coscheduler.controller")
# Quota revisions kept for reports (``Controller.revisions``): a controller runs for months
# and revises loans every tick; past this many the oldest fifth is let go.
REVISIONS_KEPT = 20_000
_new = object.__new__
_setattr = object.__setattr__


def _running_job(job, allocation, start_time, quota_fraction, host_job, guest_jobs,
                 decision_id, lendable) -> RunningJob:
    """``RunningJob(...)`` (which has no checks) with its fields set at once, not one by one
    through the frozen dataclass's __init__: two per guest started."""
    rj = _new(RunningJob)
    _setattr(rj, "__dict__", {"job": job, "allocation": allocation, "start_time": start_time,
                              "quota_fraction": quota_fraction, "host_job": host_job,
                              "guest_jobs": guest_jobs, "decision_id": decision_id,
                              "lendable": lendable})
    return rj


class ActMixin:
    """Stage 5 (act) and the quotas of ``Controller``."""

    # -- stage 5: act -------------------------------------------------------------------------
    def _act(self, plan: list, declined: list[Decision], now: float, report: PassReport) -> None:
        for d in declined:
            report.declined += 1
            host = self._last.get(d.host_job)
            hq = host.quota_fraction if host is not None else 1.0
            self._record(report, self.recorder.record_decision, d, hq, 0.0)
            if d.action_index == 0:
                kind, note = "declined", "a_0: not on this host"
            elif d.decision_id in self._span_undone:
                self._span_undone.discard(d.decision_id)
                kind, note = "cancelled", UNDONE_NOTE
            else:   # forgotten by the learner: closed like a decision never carried out
                kind, note = "cancelled", "action under the smallest loan (or vetoed): no loan"
            self._record(report, self.recorder.record_outcome, OutcomeRecord(
                d.decision_id, now, 0.0, kind, note=note))
            self._dirty_classes.add(d.job_class)
        for item in plan:
            if isinstance(item, Start):
                self._start(item, now, report)
            elif isinstance(item, CoStart):
                self._co_start(item, now, report)
            else:
                self._span_start(item, now, report)

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
            self._last[ch.host_job] = _running_job(
                host.job, host.allocation, host.start_time, ch.host_quota, host.host_job,
                host.guest_jobs + (job.job_id,), host.decision_id, host.lendable)
        self._last[job.job_id] = _running_job(job, ch.placement, now, ch.guest_quota,
                                              ch.host_job, (), d.decision_id if d else None, True)
        self._loan_target[job.job_id] = ch.guest_quota
        if d is not None:
            self._host_round[ch.host_job] = d.job_class
            self._by_host.setdefault(ch.host_job, set()).add(d.decision_id)
            self._by_guest[job.job_id] = d.decision_id
            self._record(report, self.recorder.record_decision, d, ch.host_quota, ch.guest_quota)
            self._dirty_classes.add(d.job_class)

    def _co_start_failed(self, job_id: str, d: Decision | None, reason: str, ch: Choice,
                         now: float, report: PassReport) -> None:
        if d is not None:
            self._cancel_choice(d, ch, reason, now, report)
        self._start_failed(job_id, reason, report)

    def _cancel_choice(self, d: Decision, ch: Choice, reason: str, now: float,
                       report: PassReport) -> None:
        """A chosen loan that was not made: the decision happened (its id is spent), so it
        is recorded and closed as cancelled."""
        if self.learner is None:
            return
        self.learner.forget(d.decision_id)
        self._record(report, self.recorder.record_decision, d, ch.host_quota, ch.guest_quota)
        self._record(report, self.recorder.record_outcome, OutcomeRecord(
            d.decision_id, now, 0.0, "cancelled", note=reason))
        report.cancelled += 1
        self._dirty_classes.add(d.job_class)

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
            if len(self.revisions) > REVISIONS_KEPT:
                drop = REVISIONS_KEPT // 5
                del self.revisions[:drop]
                self.revisions_dropped += drop
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
            # (an end further away than a cooldown lasts was set before the backend's clock
            # stepped back: it goes too, or the pair would wait out the step as well)
            latest = now + self.config.decline_cooldown_s
            self._cooldown = {k: t for k, t in self._cooldown.items() if now < t <= latest}
