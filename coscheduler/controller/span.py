"""Stage 4 and 5 for a guest spanning two hosts (``ControllerConfig.span_hosts``; the rule
is ``policies.span``). A mixin of ``Controller`` (loop.py).

A parallel stage that no single host took is cut in two parts of half its cores; each part
is offered to the policy as a guest of its own (the second never in the first's host). Only
when both are placed is the stage split and started; if the second finds no host, the
first part's decision is forgotten (it was never carried out) and the stage waits whole.
"""

from __future__ import annotations

import logging
from itertools import islice

from ..learner import Decision
from ..model import Job
from ..policies.span import can_span, split
from .config import PassReport
from .hosts import HostIndex
from .placement import CoStart, SpanStart

log = logging.getLogger("coscheduler.controller")

UNDONE_NOTE = "its stage's other part found no host: no loan"


class SpanMixin:
    """``_try_span`` (place) and ``_span_start`` (act) of ``Controller``."""

    def _can_split(self, job: Job) -> bool:
        return self.config.span_hosts and can_span(job) \
            and callable(getattr(self.backend, "split", None))

    def _try_span(self, job: Job, index: HostIndex, shadow: float | None, now: float,
                  host_quota: dict[str, float], declined: list[Decision],
                  report: PassReport) -> SpanStart | None:
        """Both parts of ``job`` placed in two hosts, or None (``declined`` gets every
        decision that lent nothing, the first part's too when the second found no host)."""
        parts = split(job, job.cores - job.cores // 2)
        # Ask only when two distinct hosts could take the parts: an ask spends a decision
        # and the host (asked once per pass), which a hopeless attempt must not.
        first = [c.host.job.job_id for c in islice(index.candidates(parts[0], shadow), 2)]
        second = [c.host.job.job_id for c in islice(index.candidates(parts[1], shadow), 2)]
        if not first or not second or len(set(first) | set(second)) < 2:
            return None
        chosen = []
        for part in parts:
            taken = {ch.host_job for _, ch in chosen}
            cands = (c for c in index.candidates(part, shadow) if c.host.job.job_id not in taken)
            try:
                result = self.policy.choose(part, cands, now)
            except Exception as exc:  # noqa: BLE001 - a policy bug must not stop the pass
                log.exception("co-allocation policy %s failed for part %s", self.policy.name,
                              part.job_id)
                report.errors.append(f"policy {self.policy.name} failed for job {part.job_id}: {exc}")
                result = None
            if result is not None:
                chosen_host = result.choice.host_job if result.choice is not None else None
                others = [h for h in result.asked if h != chosen_host]
                if others and self.learner is not None:   # (no learner: asking spends nothing)
                    index.mark_asked(others)
                declined.extend(result.declined)
                for d in result.declined:
                    self._cooldown[(part.job_id, d.host_job)] = now + self.config.decline_cooldown_s
            if result is None or result.choice is None:
                for _, ch in chosen:   # the first part's loan is not made
                    if ch.decision is not None and self.learner is not None:
                        index.mark_asked([ch.host_job])
                        self.learner.forget(ch.decision.decision_id)
                        self._span_undone.add(ch.decision.decision_id)
                        declined.append(ch.decision)
                return None
            chosen.append((part, result.choice))
        costarts = []
        for part, ch in chosen:
            before = host_quota.get(ch.host_job, self._last[ch.host_job].quota_fraction)
            host_quota[ch.host_job] = ch.host_quota
            index.took(ch.host_job, ch.placement, ch.guest_quota * part.cores)
            costarts.append(CoStart(part, ch, before))
        return SpanStart(job, tuple(costarts))

    def _span_start(self, item: SpanStart, now: float, report: PassReport) -> None:
        try:
            self.backend.split(item.job.job_id, [c.job for c in item.parts])
        except Exception as exc:  # noqa: BLE001 - the stage stays queued whole
            reason = f"splitting it into {', '.join(c.job.job_id for c in item.parts)} failed: {exc}"
            for c in item.parts:
                if c.choice.decision is not None:
                    self._cancel_choice(c.choice.decision, c.choice, reason, now, report)
            self._start_failed(item.job.job_id, reason, report)
            return
        # From here each part is a queued job of its own: one that fails to start is
        # retried as any job is (on free cores or as a guest), never lost.
        for c in item.parts:
            self._co_start(c, now, report)


__all__ = ["SpanMixin", "UNDONE_NOTE"]
