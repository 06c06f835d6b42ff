"""Run jobs on a Mesos master: the driver, the framework backend and the one Controller.

``MesosRun`` wires them and runs the loop: a controller pass whenever the driver brings
something new (offers, rescinds, status updates) or every ``pass_interval_s``, then the
held offers that waited too long go back (``MesosBackend.after_pass``).

It is the in-process harness that tests and ``cosched bench mesos`` use; the command line
is ``cosched run --backend mesos`` (coscheduler/cli/run.py with ``connect.py``), which drives
the same backend through the controller daemon.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from coscheduler.controller import Controller, ControllerConfig, PassReport
from coscheduler.model import Job, Outcome
from coscheduler.recorder import MemoryRecorder, Recorder

from .driver import MesosSchedulerDriver
from .framework import FrameworkConfig, MesosBackend
from .quotas import NodeQuotas

log = logging.getLogger("mesos_framework.run")


@dataclass
class RunResult:
    outcomes: list[Outcome]
    passes: int
    seconds: float
    coallocations: int
    errors: list[str] = field(default_factory=list)
    fatal: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "passes": self.passes,
                "coallocations": self.coallocations, "fatal": self.fatal,
                "jobs": [{"job_id": o.job_id, "state": o.state, "start": round(o.start_time, 3),
                          "end": round(o.end_time, 3), "reason": o.reason} for o in self.outcomes],
                "errors": self.errors[-20:]}


class MesosRun:
    """One framework instance: backend + driver + controller (see the module docstring)."""

    def __init__(self, master: str, policy: str = "asax", *, recorder: Recorder | None = None,
                 config: FrameworkConfig | None = None, quotas: NodeQuotas | None = None,
                 controller_config: ControllerConfig | None = None,
                 pass_interval_s: float = 0.25, driver_options: dict[str, Any] | None = None,
                 learner_config: Any = None, expert_factory: Callable[[], list] | None = None,
                 idle_only: bool = True):
        self.backend = MesosBackend(config, quotas)
        self.driver = MesosSchedulerDriver(self.backend, self.backend.framework_info(), master,
                                           **(driver_options or {}))
        self.backend.attach(self.driver)
        self.recorder = recorder if recorder is not None else MemoryRecorder()
        self.policy = policy
        cc = controller_config or ControllerConfig(**MesosBackend.controller_options)
        self.controller = Controller.from_recorder(self.backend, self.recorder, policy, config=cc,
                                                   learner_config=learner_config,
                                                   expert_factory=expert_factory,
                                                   idle_only=idle_only)
        self.pass_interval_s = pass_interval_s
        self.reports: list[PassReport] = []
        self._stop = threading.Event()

    def submit(self, jobs: Iterable[Job]) -> None:
        for j in jobs:
            self.backend.submit(j)

    def start(self) -> "MesosRun":
        self.driver.start()
        return self

    def step(self) -> PassReport:
        self.backend.changed.clear()
        self.backend.before_pass()
        report = self.controller.step()
        self.backend.after_pass()
        if report.errors:
            for e in report.errors:
                log.info("pass: %s", e)
        self.reports.append(report)
        if len(self.reports) > 1000:
            self.reports = self.reports[-500:]
        return report

    def run(self, until: Callable[[], bool] | None = None, timeout_s: float | None = None) -> RunResult:
        """Pass after pass until every job ended (or ``until()``), the master reported a
        fatal error, ``stop()`` was called, or ``timeout_s`` passed."""
        t0 = time.monotonic()
        done = until or self.backend.idle
        coalloc, errors = 0, []
        while not self._stop.is_set():
            self.backend.wait_for_change(self.pass_interval_s)
            r = self.step()
            coalloc += r.coallocated
            errors += r.errors
            if self.backend.fatal or done():
                break
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                errors.append(f"stopped after {timeout_s:g} s with jobs left")
                break
        return RunResult(list(self.backend.history), self.controller.passes,
                         time.monotonic() - t0, coalloc, errors, self.backend.fatal)

    def stop(self) -> None:
        self._stop.set()
        self.backend.changed.set()

    def close(self, failover: bool = False) -> None:
        """End the framework: its tasks killed and the framework torn down, or with
        ``failover`` both left to a next instance (within failover_timeout)."""
        self.backend.close(kill=not failover)


__all__ = ["MesosRun", "RunResult"]
