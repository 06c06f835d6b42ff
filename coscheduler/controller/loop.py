"""The Controller: the loop that runs the pipeline (see the package docstring).

Read ``step`` first: it calls the stages in order. Stage 4 (place) is here; the others are
mixins beside this module: ``drain`` (stages 1 and 2: finished jobs, metrics, early
losses), ``act`` (stage 5 and the quota helpers), ``feedback`` (the learner's feedback and
the recorder's writes, batched per pass). The pure pieces: ``order`` (stage 3),
``placement`` (free cores and the EASY reservation), ``hosts`` (candidate hosts for a
guest), ``quotas``; ``collect`` decides when the process collects its garbage in full.
"""

from __future__ import annotations

import gc
import inspect
import logging
import math
import time
from collections import deque
from typing import Callable

from ..backend import Backend
from ..learner import AsaxLearner, Decision, HostState, LearnerConfig
from ..model import Job, MetricsSample, RunningJob
from ..policies.coalloc import NO_COALLOCATION, CoallocationPolicy, SpaceSharing, make_policy
from ..policies.gang import first_fit
from ..recorder import MemoryRecorder, Recorder
from .config import ControllerConfig, PassReport
from .hosts import HostIndex, host_state, why_not_hosted
from .order import QueueOrder, fcfs
from .placement import (CoStart, EasyBackfill, Start, core_releases, easy_reservation,
                        free_cores, own_start_estimate)
from .act import ActMixin
from .collect import promote_young
from .drain import DrainMixin
from .feedback import FeedbackMixin
from .span import SpanMixin
from .usage import ClassUsage

# The package's name, as before the controller became a package, so log filters still match.
log = logging.getLogger("coscheduler.controller")


def _claim(recorder: Recorder | None) -> None:
    """One controller per persistent store (store/lock.py): recorders that can be shared
    between processes say so with ``claim_controller``; a second controller is refused."""
    claim = getattr(recorder, "claim_controller", None)
    if callable(claim):
        claim()


def _takes(fn, *names: str) -> bool:
    """Whether ``fn`` takes every one of ``names`` (False when its signature is unknown)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params for n in names)


def _loads_in_part(recorder: Recorder) -> bool:
    """Whether the recorder's load() takes ``observed_per_class`` and ``related_to``."""
    return _takes(recorder.load, "observed_per_class", "related_to")


def _note_class_bound(recorder: Recorder, max_classes: int) -> None:
    """Tell a store that keeps it the learner's class bound (``decisions prune`` reads it)."""
    note = getattr(recorder, "note_class_bound", None)
    if note is None:
        return
    try:
        note(max_classes)
    except Exception as exc:  # noqa: BLE001 - only the prune's default depends on it
        log.warning("recording the learner's class bound in the state store failed: %s", exc)


def _running_ids(backend: Backend) -> set[str] | None:
    """The running jobs' ids, or None if the backend cannot say now (then the whole
    history is read: the relations it holds must not be lost)."""
    try:
        return {rj.job_id for rj in backend.running()}
    except Exception:  # noqa: BLE001 - _adopt_running says why, once the controller is built
        return None


class Controller(DrainMixin, ActMixin, FeedbackMixin, SpanMixin):
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
        self._beyond_known: set[str] = set()   # said once: bigger than any node set seen
        self._span_undone: set[int] = set()   # decisions forgotten with a stage's other part
        self._dirty_classes: set[str] = set()
        # Idle-only lending: each guest's quota at its start (what a revision may grow
        # it back to), and the quota revisions made (time, guest, old, new) for reports.
        self._loan_target: dict[str, float] = {}
        # Hosts that lent under a learner's decision -> the class whose round closes when
        # the host ends (ControllerConfig.round_per_host).
        self._host_round: dict[str, str] = {}
        self.revisions: list[tuple[float, str, float, float]] = []
        self.revisions_dropped = 0   # the oldest, let go past REVISIONS_KEPT (act.py)
        self.last_samples: dict[str, MetricsSample] = {}
        self.passes = 0
        # During a pass, with a recorder that can batch: the writes to make at its end.
        self._writes: list[tuple[Callable[..., object], tuple]] | None = None
        # Writes the recorder could not make yet (RecorderUnavailable: a full disk, a busy
        # file), in order; tried again first at every pass. While any wait, co-allocation
        # pauses: no decision is made that could not be recorded (feedback.py).
        self._unwritten: deque[tuple[Callable[..., object], tuple]] = deque()
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
                      idle_only: bool = True, permit=None,
                      short_actions: str = "forget") -> "Controller":
        """Rebuild a controller after a restart: the learner from ``recorder.load()``
        (classes, pending decisions, next id; the fitted experts recalled from the observed
        outcomes they depend on), declines still in cooldown, and host/guest relations
        from the backend and from the decisions that name running jobs.

        A recorder that can load in part (``observed_per_class``, ``related_to``: the SQLite
        store, ``MemoryRecorder``) is asked only for each class's last outcomes the experts
        need and for the decisions about running jobs and recent declines: a restart after
        months of decisions reads thousands of rows, not millions."""
        learner = None
        _claim(recorder)  # before load(): a second controller must not even read the state
        asax = policy.strip().lower() in ("asax", "asa_x")
        learner_config = learner_config or LearnerConfig()
        cooldown_s = (config or ControllerConfig()).decline_cooldown_s
        window = AsaxLearner(learner_config, expert_factory).recall_window() if asax else 0
        now = backend.now()
        running_ids = _running_ids(backend) if _loads_in_part(recorder) else None
        if running_ids is not None:
            bound = {"max_classes": learner_config.max_classes} \
                if asax and _takes(recorder.load, "max_classes") else {}
            loaded = recorder.load(observed_per_class=window,
                                   related_to=(running_ids, now - cooldown_s), **bound)
            related = loaded.related
        else:
            loaded = recorder.load()
            related = loaded.observed
        if asax:
            _note_class_bound(recorder, learner_config.max_classes)
            learner = AsaxLearner(learner_config, expert_factory,
                                  classes=loaded.classes, pending=loaded.pending,
                                  next_decision_id=loaded.next_decision_id)
            saved = {st.job_class for st in loaded.classes}
            by_class: dict[str, list] = {}
            for decision, loss in loaded.observed:
                by_class.setdefault(decision.job_class, []).append((decision, loss))
            for job_class, outcomes in by_class.items():
                if job_class in saved and not learner.holds(job_class):
                    continue   # forgotten past the class bound: its experts are not rebuilt
                learner.recall(job_class, outcomes,
                               loaded.observed_counts.get(job_class, len(outcomes)))
        ctl = cls(backend, make_policy(policy, learner, static_fraction, class_of, idle_only, permit,
                                       short_actions), recorder,
                  queue_order, config, usage)
        running = set(ctl._last)
        for decision, _ in related:
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
        if self._unwritten:   # the recorder could not write them last time: try first
            self._flush_writes(report, say_waiting=False)
        # A recorder that can batch gets the pass's writes at its end, in one transaction.
        self._writes = [] if callable(getattr(self.recorder, "batch", None)) else None
        # The cyclic garbage collector waits for the end of the pass: a pass makes no
        # reference cycles to speak of, but its many small objects would start full
        # collections of the whole heap mid-pass (a third of a 10k x 10k pass, measured).
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            self._pass(now, report)
        finally:
            try:
                self._flush_writes(report)
            finally:
                if collecting:
                    promote_young()
                    gc.enable()
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

    # -- stage 4: place -----------------------------------------------------------------------
    def _place(self, ordered: list[Job], running: list[RunningJob], nodes, samples, now: float,
               report: PassReport) -> tuple[list, list[Decision]]:
        capacity = {n.name: n.cores for n in nodes}
        by_id = self._last
        cores = EasyBackfill(free_cores(capacity, running, by_id))
        index = None
        # No co-allocation while records wait for the recorder (a full disk): a decision
        # made now could not be recorded, and a restart would not know it.
        if self.policy.co_allocates and not self._unwritten:
            index = HostIndex(running, capacity, samples, now, running_by_id=by_id,
                              was_guest=self._was_guest, cooldown=self._cooldown,
                              config=self.config, usage=self.usage,
                              idle_only=getattr(self.policy, "idle_only", False),
                              alone_runtime=self.recorder.alone_runtime)
        plan: list[Start | CoStart] = []
        ahead: list[Job] | None = None   # ("sooner" rule) the jobs left waiting so far, in order
        if index is not None and index.sooner:
            ahead = []
            index.wait_of = self._own_start_estimate(cores, running, plan, now, ahead)
        declined: list[Decision] = []
        host_quota: dict[str, float] = {}   # hosts' quotas after this pass's co-starts
        fits_empty: dict[tuple[int, int], bool] = {}
        known: dict[str, int] | None = None    # (read once, when a job does not fit)
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
                if known is None:
                    known = self._known_capacity()
                if known and first_fit(job, known) is None:
                    # Offer-based, and more than every node ever seen could hold: it waits
                    # for nodes to join without holding the offers others can use.
                    self._wait_beyond_known(job, known, report)
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
                asked = result.asked
                if asked and (len(asked) > 1 or asked[0] != chosen):   # (most: none, or chosen)
                    index.mark_asked([h for h in asked if h != chosen])
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
                if self.config.span_hosts and self._can_split(job):
                    try:
                        span = self._try_span(job, index, cores.shadow, now, host_quota,
                                              declined, report)
                    except Exception as exc:  # noqa: BLE001 - nor may a bug of the attempt
                        log.exception("spanning job %s over two hosts failed", job.job_id)
                        report.errors.append(f"spanning job {job.job_id} failed: {exc}")
                        span = None
                    if span is not None:
                        plan.append(span)
                        continue
                if self.config.explain:
                    report.refused[job.job_id] = "declined" if result.asked else why_not_hosted(
                        job, running, running_by_id=by_id, was_guest=self._was_guest,
                        cooldown=self._cooldown, index=index, shadow=cores.shadow,
                        now=now, config=self.config)
            if ahead is not None:
                ahead.append(job)
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

    def _known_capacity(self) -> dict[str, int]:
        """The most cores each node was ever seen with, from an offer-based backend that
        keeps it (``known_capacity``); {} from others (their nodes are the whole cluster)."""
        read = getattr(self.backend, "known_capacity", None)
        if read is None:
            return {}
        try:
            return dict(read())
        except Exception as exc:  # noqa: BLE001 - unknown this pass: hold offers as before
            log.warning("reading the backend's known capacity failed: %s", exc)
            return {}

    def _wait_beyond_known(self, job: Job, known: dict[str, int], report: PassReport) -> None:
        why = (f"needs {job.cores} cores on {job.nodes} node(s); the {len(known)} node(s) seen "
               f"so far ({sum(known.values())} cores) cannot hold it: it waits for more "
               "without holding offers")
        if job.job_id not in self._beyond_known:
            self._beyond_known.add(job.job_id)
            log.warning("job %s %s", job.job_id, why)
        if self.config.explain:
            report.refused[job.job_id] = why

    def _own_start_estimate(self, cores: EasyBackfill, running: list[RunningJob],
                            plan: list, now: float, ahead: list[Job]
                            ) -> Callable[[Job], float]:
        """When a job could start on cores of its own (``placement.own_start_estimate``)
        behind the jobs left waiting ahead of it so far in this pass, with the cores held
        and freed as this pass has planned so far; once per job size and such state."""
        seen: dict[tuple[int, int, int], float] = {}
        releases: tuple[int, list[tuple[float, int]]] = (-1, [])

        def wait_of(job: Job) -> float:
            nonlocal releases
            key = (job.cores, len(ahead), len(plan))
            if key not in seen:
                if releases[0] != len(plan):
                    releases = (len(plan), core_releases(running, plan, now, self._last))
                seen[key] = own_start_estimate(job.cores, cores.free.total, releases[1],
                                               ahead, now)
            return seen[key]
        return wait_of

    # -- host state for the experts -------------------------------------------------------------
    def host_state(self, rj: RunningJob, sample: MetricsSample | None, now: float) -> HostState:
        """HostState of a host from its latest sample (``hosts.host_state``). Unknown
        metrics are read as a busy host (100 % CPU and memory, Hp None): lend little."""
        return host_state(rj, sample, now)
