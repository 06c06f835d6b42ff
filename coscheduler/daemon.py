"""The controller as a long-running process (``cosched run``): the loop, its log, its exit.

``ControllerDaemon`` drives one backend with one co-allocation policy:

- every ``interval_s`` one ``Controller.step``; what changed is logged: each start (where),
  each co-allocation (host, guest, both quotas), each ASA_X decision and outcome (through
  ``LoggingRecorder``), each finished job, each error (the loop never stops for one);
- a restart resumes from the state database (``Controller.from_recorder``): weights,
  pending decisions, the host/guest relations the backend still reports;
- on stop (SIGTERM, SIGINT or SIGHUP in ``cosched run``): every quota the backend applied is given
  back, and (unless told to keep them) every job still held for the controller is handed
  to the batch system's own scheduling, so nothing waits for a controller that is gone.

Nothing here knows which body runs the jobs; the backend does (``backends/registry.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .backend import Backend
from .controller import Controller, ControllerConfig, PassReport
from .controller.order import QueueOrder, fcfs
from .learner import LearnerConfig
from .model import RunningJob
from .policies.coalloc import make_policy

log = logging.getLogger("coscheduler.daemon")


class LoggingRecorder:
    """Wraps a Recorder: every decision and outcome is logged, then stored."""

    def __init__(self, inner: Any, logger: logging.Logger = log):
        self._inner = inner
        self._log = logger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def record_decision(self, decision, host_quota: float, guest_quota: float, *a, **kw):
        s = decision.state
        self._log.info(
            "decision %d (%s): guest %s on host %s (class %s, cpu %.0f%%, mem %.0f%%, %s, "
            "elapsed %.0f%%, Hp %s): %s %.0f%% -> host keeps %.3f, guest gets %.3f",
            decision.decision_id, decision.policy, decision.guest_job, decision.host_job,
            decision.job_class, s.cpu_percent, s.mem_percent, s.stage_type.value
            if hasattr(s.stage_type, "value") else s.stage_type, 100 * s.elapsed_fraction,
            "-" if s.happiness is None else f"{s.happiness:.2f}",
            "lend" if decision.action_index else "decline", 100 * decision.action_fraction,
            host_quota, guest_quota)
        return self._inner.record_decision(decision, host_quota, guest_quota, *a, **kw)

    def record_outcome(self, outcome) -> None:
        self._log_outcome(outcome)
        return self._inner.record_outcome(outcome)

    def record_observation(self, outcome, state, closed):
        self._log_outcome(outcome)
        if closed is not None:
            self._log.info("class %s: risk round closed, weights now %s", state.job_class,
                           ", ".join(f"{w:.3f}" for w in state.weights))
        return self._inner.record_observation(outcome, state, closed)

    def _log_outcome(self, o) -> None:
        if o.kind == "declined":
            return
        self._log.info("decision %d: loss %.3f (%s)%s", o.decision_id, o.loss, o.kind,
                       f": {o.note}" if o.note else "")


@dataclass
class DaemonStats:
    passes: int = 0
    errors: int = 0
    started: int = 0
    coallocated: int = 0
    finished: int = 0
    last_error: str | None = None
    fatal: str | None = None   # why the backend cannot go on (the loop stopped for it)
    reports: list[PassReport] = field(default_factory=list)


class ControllerDaemon:
    def __init__(self, backend: Backend, recorder: Any, policy: str = "asax", *,
                 interval_s: float = 2.0, queue_order: QueueOrder = fcfs,
                 config: ControllerConfig | None = None, learner_config: LearnerConfig | None = None,
                 static_fraction: float = 0.5, release_on_exit: bool = True,
                 logger: logging.Logger = log, keep_reports: int = 0):
        self.backend = backend
        self.recorder = LoggingRecorder(recorder, logger)
        self.interval_s = float(interval_s)
        self.release_on_exit = release_on_exit
        self.log = logger
        self.keep_reports = keep_reports
        self.stats = DaemonStats()
        self.stop_event = threading.Event()
        if policy.strip().lower() in ("asax", "asa_x"):
            self.controller = Controller.from_recorder(backend, self.recorder, "asax",
                                                       learner_config=learner_config,
                                                       queue_order=queue_order, config=config)
            # (else the first refit imports scikit-learn inside a pass: 1-2 s, 3x a 10k-job pass)
            if self.controller.learner is not None:
                t0 = time.monotonic()
                self.controller.learner.prepare()
                logger.info("the learner's experts are loaded (%.1f s)", time.monotonic() - t0)
        else:
            self.controller = Controller(backend, make_policy(policy, None, static_fraction),
                                         self.recorder, queue_order, config)
        self.policy = policy
        self._seen: dict[str, RunningJob] = {rj.job_id: rj for rj in self.controller._last.values()}
        self._last_errors: dict[str, float] = {}

    # -- one pass -----------------------------------------------------------------------------
    def step(self) -> PassReport:
        # Optional backend hooks (Mesos: stamp the pass; after it send its ACCEPTs and give
        # back the held offers it saw).
        before = getattr(self.backend, "before_pass", None)
        if before is not None:
            before()
        report = self.controller.step()
        after = getattr(self.backend, "after_pass", None)
        if after is not None:
            after()
        self._record_walltime_credits()
        st = self.stats
        st.passes += 1
        st.started += report.started
        st.coallocated += report.coallocated
        st.finished += report.finished
        if self.keep_reports:
            st.reports.append(report)
            del st.reports[:-self.keep_reports]
        self._log_changes()
        for err in report.errors:
            st.errors += 1
            st.last_error = err
            # The same error every pass (slurmctld down for a minute) is logged every 30 s.
            key = err[:120]
            now = time.monotonic()
            if now - self._last_errors.get(key, -1e9) > 30:
                self._last_errors[key] = now
                self.log.warning("pass %d: %s", st.passes, err)
        for jid in report.failed:
            self.log.warning("job %s given up by the controller", jid)
        return report

    def _record_walltime_credits(self) -> None:
        """Time limits the backend gave back to lending hosts (Slurm: slurm_plugin/walltime.py),
        stored with each host's latest decision so ``cosched decisions show`` has them."""
        drain = getattr(self.backend, "drain_walltime_credits", None)
        record = getattr(self.recorder, "record_walltime_credit", None)
        for c in (drain() if drain is not None else []):
            did = record(c) if record is not None else None
            self.log.info("job %s: time limit +%d min (lending would carry it past its limit; "
                          "decision %s)%s", c["job_id"], c["minutes"], did,
                          ", capped by the partition's MaxTime" if c.get("capped") else "")

    def _log_changes(self) -> None:
        now = self.controller._last
        for jid, rj in now.items():
            old = self._seen.get(jid)
            if old is None:
                if rj.host_job is not None:
                    self.log.info("job %s started as a guest of %s on %s with quota %.3f",
                                  jid, rj.host_job, _where(rj), rj.quota_fraction)
                elif rj.lendable:
                    self.log.info("job %s started on %s (%s, %d cores, walltime %.0f s)",
                                  jid, _where(rj), rj.job.job_class, rj.job.cores, rj.job.walltime_s)
            elif abs(old.quota_fraction - rj.quota_fraction) > 1e-6:
                self.log.info("job %s quota %.3f -> %.3f", jid, old.quota_fraction, rj.quota_fraction)
        for jid in set(self._seen) - set(now):
            if self._seen[jid].lendable or self._seen[jid].host_job:
                self.log.info("job %s ended", jid)
        self._seen = dict(now)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, max_passes: int | None = None,
            until: Callable[["ControllerDaemon"], bool] | None = None) -> DaemonStats:
        """Step every ``interval_s`` until ``stop()`` (or ``max_passes``, or ``until``),
        then shut down cleanly."""
        self.log.info("controller running: policy %s, backend %s, a pass every %.1f s",
                      self.policy, getattr(self.backend, "name", type(self.backend).__name__),
                      self.interval_s)
        try:
            while not self.stop_event.is_set():
                t0 = time.monotonic()
                try:
                    self.step()
                except Exception as exc:  # noqa: BLE001 - the loop survives any pass
                    self.stats.errors += 1
                    self.stats.last_error = str(exc)
                    self.log.exception("pass failed: %s", exc)
                fatal = getattr(self.backend, "fatal", None)
                if fatal:  # e.g. the Mesos event thread died: stop loudly, never idle on
                    self.stats.fatal = str(fatal)
                    self.log.critical("the backend cannot go on: %s", fatal)
                    break
                if max_passes is not None and self.stats.passes >= max_passes:
                    break
                if until is not None and until(self):
                    break
                left = max(0.0, self.interval_s - (time.monotonic() - t0))
                # An event-driven backend (Mesos offers) wakes the loop before the interval.
                wait = getattr(self.backend, "wait_for_change", None)
                if wait is not None and not self.stop_event.is_set():
                    wait(left)
                else:
                    self.stop_event.wait(left)
        finally:
            self.shutdown()
        return self.stats

    def stop(self) -> None:
        self.stop_event.set()
        wake = getattr(self.backend, "wake", None)
        if wake is not None:
            wake()

    def shutdown(self) -> dict:
        """Give quotas back and (unless told otherwise) hand held jobs to the batch system."""
        done: dict = {"quotas_restored": [], "released": []}
        restore = getattr(self.backend, "restore_quotas", None)
        if restore is not None:
            try:
                done["quotas_restored"] = restore()
            except Exception as exc:  # noqa: BLE001
                self.log.error("restoring quotas at exit: %s", exc)
        if self.release_on_exit:
            release = getattr(self.backend, "release_held", None)
            if release is not None:
                try:
                    done["released"] = release()
                except Exception as exc:  # noqa: BLE001
                    self.log.error("releasing held jobs at exit: %s", exc)
        done["records_lost"] = self.controller.flush_records()
        close = getattr(self.backend, "close", None)
        if close is not None:
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                self.log.error("closing the backend at exit: %s", exc)
        self.log.info("controller stopped after %d passes: quotas restored for %s; held jobs "
                      "handed to the batch system: %s", self.stats.passes,
                      done["quotas_restored"] or "none", done["released"] or "none")
        return done


def _where(rj: RunningJob) -> str:
    return ",".join(f"{n}:{c}" for n, c in rj.allocation.cores_by_node)


__all__ = ["ControllerDaemon", "DaemonStats", "LoggingRecorder"]
