"""Stages 1 and 2 of a pass: drain finished jobs (their decisions' losses, quotas given
back, exclusive runtimes learned) and read the metrics (with early losses where Hp projects
an overrun). A mixin of ``Controller`` (loop.py), which holds the state it reads.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from .. import happiness as hp
from ..learner import Decision
from ..model import Job, MetricsSample, Outcome
from ..recorder import RecorderUnavailable
from .config import PassReport
from .quotas import quota_without_guest

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


class DrainMixin:
    """Stages 1 (drain) and 2 (metrics) of ``Controller``."""

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
        # A job that ran alone teaches its class's exclusive runtime, and what its class
        # uses if no sample ever showed it (a job shorter than the sampling interval).
        if job is not None and o.state == "completed" and o.job_id not in self._shared:
            try:
                self.recorder.record_alone_runtime(job.job_class, o.runtime_s)
            except RecorderUnavailable:   # written with the others that wait
                self._unwritten.append((self.recorder.record_alone_runtime,
                                        (job.job_class, o.runtime_s)))
            except Exception as exc:  # noqa: BLE001
                report.errors.append(f"recording the alone runtime of {o.job_id}: {exc}")
            self._learn_use_at_exit(job, o)
        self._shared.discard(o.job_id)
        self._loan_target.pop(o.job_id, None)
        self._was_guest.discard(o.job_id)
        self._unplaceable.discard(o.job_id)
        self._attempts.pop(o.job_id, None)
        self._beyond_known.discard(o.job_id)

    def _learn_use_at_exit(self, job: Job, o: Outcome) -> None:
        """A class's use from a job's accounting at exit, only while no sample taught it:
        the samples of running jobs stay the measure (``ClassUsage.observe``)."""
        cpu = o.cpu_percent
        if cpu is None or not math.isfinite(cpu) or self.usage.expected(job.job_class) is not None:
            return
        mem = o.mem_percent if o.mem_percent is not None and math.isfinite(o.mem_percent) else 0.0
        self.usage.add(job.job_class, min(max(cpu, 0.0), 100.0), min(max(mem, 0.0), 100.0))

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
