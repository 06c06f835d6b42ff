"""The learner's feedback and the recorder's writes: observed and cancelled decisions,
class states saved, and (a recorder with ``batch``) a pass's writes made in one transaction
at its end. A mixin of ``Controller`` (loop.py).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from contextlib import nullcontext
from dataclasses import replace
from typing import Callable

from ..learner import ClassState, Decision
from ..recorder import OutcomeRecord, RecorderUnavailable
from .config import PassReport

log = logging.getLogger("coscheduler.controller")


class FeedbackMixin:
    """Learner feedback and recorder writes of ``Controller``."""

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
            if not self.learner.holds(c):
                # forgotten (learner's class bound): saving would write a fresh state over
                # the one last saved
                self._dirty_classes.discard(c)
                continue
            try:
                self.recorder.save_class(self.learner.class_state(c))
            except RecorderUnavailable:
                return   # the rest stay dirty: saved at a later pass
            except Exception as exc:  # noqa: BLE001
                log.error("saving class %s failed: %s", c, exc)
            self._dirty_classes.discard(c)

    def _class_copy(self, job_class: str) -> ClassState:
        """The class's state as it is now (a write may be made at the end of the pass)."""
        st = self.learner.class_state(job_class)
        if self._writes is None and not self._unwritten:
            return st
        return replace(st, weights=list(st.weights), risk=list(st.risk),
                       cum_expert_risk=list(st.cum_expert_risk),
                       cum_weighted_expert_risk=list(st.cum_weighted_expert_risk))

    def _record(self, report: PassReport, write: Callable[..., object], *args) -> None:
        """A write to the recorder: now, or (a recorder with ``batch``, during a pass) at the
        end of the pass, in order, in one transaction (``_flush_writes``). Behind writes
        that wait (``_unwritten``) it waits too: records are written in the order made."""
        if self._writes is not None:
            self._writes.append((write, args))
        elif self._unwritten or not self._write(report, write, args):
            self._unwritten.append((write, args))

    @staticmethod
    def _write(report: PassReport, write: Callable[..., object], args: tuple) -> bool:
        """Make one write; False when the recorder cannot now (RecorderUnavailable): the
        caller keeps it. A record the recorder refuses is reported and let go."""
        try:
            write(*args)
        except RecorderUnavailable:
            return False
        except Exception as exc:  # noqa: BLE001 - a store error is loud but not fatal
            log.error("recorder failed: %s", exc)
            report.errors.append(f"recorder: {exc}")
        return True

    def flush_records(self) -> int:
        """At exit: the records that wait and the classes to save, written if the recorder
        can now; how many records still wait (lost when the process ends: said loudly)."""
        report = PassReport(time=math.nan)
        self._flush_writes(report, say_waiting=False)
        if self._unwritten:
            log.error("%d records could not be written to the recorder and are lost with "
                      "this process (%s); a restart will not know the decisions among them",
                      len(self._unwritten), "; ".join(report.errors)[-300:] or "unavailable")
        return len(self._unwritten)

    def _flush_writes(self, report: PassReport, say_waiting: bool = True) -> None:
        """The writes that waited, then the pass's, then the dirty classes, in one batch when
        the recorder has one. What cannot be written now waits for the next pass, in order
        (a batch whose commit fails wrote nothing: all of it waits)."""
        writes = list(self._unwritten)
        if self._writes is not None:
            writes += self._writes
        self._writes = None
        self._unwritten.clear()
        dirty = set(self._dirty_classes)    # (saved inside the batch: lost if it is)
        batch = getattr(self.recorder, "batch", None)
        try:
            with (batch() if callable(batch) else nullcontext()):
                for i, (write, args) in enumerate(writes):
                    if not self._write(report, write, args):
                        self._unwritten.extend(writes[i:])
                        break
                else:
                    self._save_dirty()
        except RecorderUnavailable as exc:
            self._unwritten = deque(writes)
            self._dirty_classes |= dirty
            report.errors.append(f"recorder: {exc}")
        except Exception as exc:  # noqa: BLE001 - the batch's own begin or commit failed
            log.error("recorder failed: %s", exc)
            report.errors.append(f"recorder: {exc}")
        report.unwritten = len(self._unwritten)
        if self._unwritten and say_waiting:
            report.errors.append(
                f"recorder: {len(self._unwritten)} records wait to be written (the recorder "
                "cannot write now); co-allocation pauses until they are")
