"""An in-memory backend in virtual time: the controller's unit-test body and the simulator.

It implements ``coscheduler.backend.Backend`` exactly as a live body does, so the same
controller and policies run on it unchanged. Jobs are fluid: each has a profile (its
runtime alone at full quota, the share u of its cores it would use alone, its memory use,
and the shares of its runtime spent waiting on files and streaming memory) and progresses
at a rate relative to alone given by an ``InterferenceModel``
(``coscheduler.backends.interference``, where every parameter lives):

    rate = quota term (min(1, quota / u), as a cgroup quota caps CPU time)
           / contention with the jobs sharing its host's allocation (the host and its
             guests: cores time-sliced, memory bandwidth, disk)
           x memory-capacity factor of that group

A job alone pays only its quota term. The default model is the plain fluid one (quota and
memory capacity only, ``memory_penalty`` 2), exact for hand-computed tests;
``cosched simulate paper`` runs ``interference.CALIBRATED``, fitted to real measurements.

It reports ``MetricsSample`` with cpu_percent = rate * u * 100, tasks_done from the
progress, tasks_per_s = rate * tasks / alone_runtime, io_mb_s = rate * the profile's I/O
rate. Jobs that depend on others (``Job.depends_on``) are queued only once every parent
completed; a job whose parent ended otherwise is reported failed. A job still running at
its walltime is killed (``timeout``), as Slurm does, unless ``kill_at_walltime`` is off.

Test hooks: ``inject_start_errors`` / ``inject_quota_errors`` make the next calls for a
job raise ``BackendError``; ``hide_metrics`` drops a job's samples; ``Profile.fail_after_s``
makes a job fail mid-run; ``cancel`` ends a running job.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from ..backend import BackendError, check_quota_fraction
from ..model import Allocation, InvalidInput, Job, MetricsSample, Node, check_finite
from .book import JobBook, Run
from .interference import InterferenceModel, JobDemand

_EPS = 1e-9


@dataclass(frozen=True)
class Profile:
    """How a job behaves: runtime alone at full quota, CPU use u (share of its cores it
    would keep busy alone, in (0, 1]), memory use (% of its allocation's memory), the
    shares of its runtime alone spent waiting on files (``io_share``) and streaming memory
    (``membw_share``), and its file I/O rate alone (MB/s; None: not reported)."""

    alone_runtime_s: float
    cpu_util: float = 1.0
    mem_percent: float = 10.0
    fail_after_s: float | None = None
    io_share: float = 0.0
    membw_share: float = 0.0
    io_mb_s: float | None = None
    # Share of the time its processes wait off the CPU (None: 1 - cpu_util); less than that
    # for a job holding more cores than it has busy processes.
    wait_share: float | None = None

    def demand(self) -> JobDemand:
        return JobDemand(self.cpu_util, self.membw_share, self.io_share,
                         self.mem_percent / 100.0, self.wait_share)

    def __post_init__(self) -> None:
        rt = check_finite(self.alone_runtime_s, "profile: alone_runtime_s")
        if rt is None or rt <= 0:
            raise InvalidInput(f"profile: alone_runtime_s must be > 0, got {self.alone_runtime_s!r}")
        u = check_finite(self.cpu_util, "profile: cpu_util")
        if u is None or not 0.0 < u <= 1.0:
            raise InvalidInput(f"profile: cpu_util must lie in (0, 1], got {self.cpu_util!r}")
        check_finite(self.mem_percent, "profile: mem_percent", minimum=0.0)
        check_finite(self.fail_after_s, "profile: fail_after_s", minimum=0.0, allow_none=True)
        for name in ("io_share", "membw_share") + (() if self.wait_share is None else ("wait_share",)):
            v = check_finite(getattr(self, name), f"profile: {name}", minimum=0.0)
            if v is None or v > 1.0:
                raise InvalidInput(f"profile: {name} must lie in [0, 1], got {getattr(self, name)!r}")
        check_finite(self.io_mb_s, "profile: io_mb_s", minimum=0.0, allow_none=True)


@dataclass
class _Fluid:
    """A running job's fluid state, kept in ``Run.data``."""

    profile: Profile
    progress: float = 0.0      # share of the work done, 0..1
    rate: float = 1.0          # current speed relative to alone


class Stepper(Protocol):
    def step(self): ...


class VirtualBackend(JobBook):
    """Virtual-time nodes and fluid jobs behind the Backend interface.

    The queue, hosts and guests, cores and outcomes are ``JobBook``'s; this class adds the
    fluid model, the virtual clock, metrics and the test hooks.
    """

    name = "virtual"

    def __init__(self, nodes: Iterable[Node] | dict[str, int], *, start_time: float = 0.0,
                 memory_penalty: float = 2.0, kill_at_walltime: bool = True,
                 model: InterferenceModel | None = None, idle_guests: bool = False,
                 shared_cores: bool = True):
        super().__init__(nodes)
        # A host and its guests share the host's cores: the kernel spreads their processes
        # over idle cores (interference.py, "shared cores"). False: every co-runner counts
        # as on each job's own cores (the pinned worst case the same-CPU calibration measures).
        self.shared_cores = bool(shared_cores)
        # Guests in the idle scheduling class, as the node agent places them with
        # ``--idle-guests`` (cgroup v2 cpu.idle = 1).
        self.idle_guests = bool(idle_guests)
        t = check_finite(start_time, "virtual backend: start_time", minimum=0.0)
        self.t = float(t)
        if model is None:
            pen = check_finite(memory_penalty, "virtual backend: memory_penalty", minimum=0.0)
            model = InterferenceModel(memory_penalty=float(pen))
        elif not isinstance(model, InterferenceModel):
            raise InvalidInput("virtual backend: model must be an InterferenceModel")
        self.model = model
        self.memory_penalty = model.memory_penalty
        self.kill_at_walltime = kill_at_walltime
        self._start_errors: dict[str, int] = {}
        self._quota_errors: dict[str, int] = {}
        self._hidden: set[str] = set()
        self._dirty = True              # rates need recomputing
        self.busy_core_seconds = 0.0    # integral of CPU actually used (cores x s)

    # -- workload -------------------------------------------------------------------------------
    def submit(self, job: Job, profile: Profile) -> None:
        """Add a job; it becomes visible at its submit time once its parents completed."""
        if not isinstance(job, Job) or not isinstance(profile, Profile):
            raise InvalidInput("virtual backend: submit(job, profile) takes a Job and a Profile")
        self._submit(job, profile)

    def split(self, job_id: str, parts: Sequence[Job]) -> None:
        """Run queued ``job_id`` as ``parts`` (policies.span): a fluid job's profile is per
        core, so each part keeps its runtime alone; ``JobBook._split``."""
        self._split(job_id, parts)
        self._dirty = True

    def inject_start_errors(self, job_id: str, count: int = 1) -> None:
        self._start_errors[job_id] = self._start_errors.get(job_id, 0) + count

    def inject_quota_errors(self, job_id: str, count: int = 1) -> None:
        self._quota_errors[job_id] = self._quota_errors.get(job_id, 0) + count

    def hide_metrics(self, job_id: str, hidden: bool = True) -> None:
        (self._hidden.add if hidden else self._hidden.discard)(job_id)

    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> None:
        if job_id not in self._runs:
            raise BackendError(f"cannot cancel job {job_id}: it is not running")
        self._end(job_id, "cancelled", reason)

    # -- Backend interface (the rest is JobBook's) ------------------------------------------------
    def now(self) -> float:
        return self.t

    def metrics(self) -> dict[str, MetricsSample]:
        self._update_rates()
        out = {}
        for jid, r in self._runs.items():
            if jid in self._hidden:
                continue
            f = r.data
            u, tasks = f.profile.cpu_util, r.job.tasks
            out[jid] = MetricsSample(
                job_id=jid, time=self.t, cpu_percent=f.rate * u * 100.0,
                mem_percent=f.profile.mem_percent, tasks_done=min(tasks, int(f.progress * tasks + 1e-9)),
                tasks_total=tasks, tasks_per_s=f.rate * tasks / f.profile.alone_runtime_s,
                io_mb_s=None if f.profile.io_mb_s is None else f.rate * f.profile.io_mb_s)
        return out

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        jid = job.job_id
        if self._start_errors.get(jid, 0) > 0:
            self._start_errors[jid] -= 1
            raise BackendError(f"injected start error for job {jid}")
        profile, q = self._check_start(job, allocation, quota_fraction, host_job)
        self._commit_start(job, allocation, q, host_job, _Fluid(profile))
        self._dirty = True

    def set_quota(self, job_id: str, quota_fraction: float) -> None:
        if self._quota_errors.get(job_id, 0) > 0:
            self._quota_errors[job_id] -= 1
            raise BackendError(f"injected set_quota error for job {job_id}")
        r = self._runs.get(job_id)
        if r is None:
            raise BackendError(f"cannot set the quota of job {job_id}: it is not running")
        r.quota = check_quota_fraction(job_id, quota_fraction)
        self.quota_log.append((self.t, job_id, r.quota))
        self._dirty = True

    # -- virtual time ---------------------------------------------------------------------------
    def quota_of(self, job_id: str) -> float:
        return self._runs[job_id].quota

    def next_event(self) -> float | None:
        """The next time something changes by itself: a job ends or a job is submitted."""
        self._update_rates()
        times = [self._end_time(r)[0] for r in self._runs.values()]
        times += [j.submit_time for j, _ in self._waiting.values() if j.submit_time > self.t + _EPS]
        return min(times) if times else None

    def advance(self, dt: float) -> None:
        """Let ``dt`` virtual seconds pass, ending jobs as their work completes."""
        d = check_finite(dt, "advance: dt", minimum=0.0)
        target = self.t + d
        while True:
            self._update_rates()
            nxt, ending = target, []
            for jid, r in self._runs.items():
                end, state = self._end_time(r)
                if end < nxt - _EPS:
                    nxt, ending = end, [(jid, state)]
                elif abs(end - nxt) <= _EPS:
                    ending.append((jid, state))
            span = max(0.0, nxt - self.t)
            for r in self._runs.values():
                f = r.data
                f.progress = min(1.0, f.progress + span * f.rate / f.profile.alone_runtime_s)
                self.busy_core_seconds += span * f.rate * f.profile.cpu_util * r.job.cores
            self.t = max(self.t, nxt)
            for jid, state in ending:
                if jid in self._runs:
                    self._end(jid, state[0], state[1])
            if self.t >= target - _EPS:
                self.t = max(self.t, target)
                return

    def run_until_idle(self, controller: Stepper, tick_s: float = 10.0,
                       max_time: float = 1e7) -> float:
        """Run controller passes every ``tick_s`` virtual seconds (and at every job end or
        submission) until no job is left; returns the time the last job ended."""
        tick = check_finite(tick_s, "run_until_idle: tick_s")
        if tick is None or tick <= 0:
            raise InvalidInput(f"run_until_idle: tick_s must be > 0, got {tick_s!r}")
        while True:
            controller.step()
            if self.idle():
                controller.step()  # drain the last outcomes
                return max((o.end_time for o in self.history), default=self.t)
            if self.t > max_time:
                stuck = sorted(self._waiting)[:10]
                raise RuntimeError(f"virtual run passed {max_time} s with jobs left: "
                                   f"queued {stuck}, running {sorted(self._runs)[:10]}")
            nxt = self.next_event()
            dt = tick if nxt is None else min(tick, max(nxt - self.t, 0.0))
            self.advance(dt if dt > _EPS else min(tick, 1e-3))

    # -- internals ------------------------------------------------------------------------------
    def _end_time(self, r: Run) -> tuple[float, tuple[str, str]]:
        f = r.data
        left = (1.0 - f.progress) * f.profile.alone_runtime_s
        end = self.t + left / f.rate if f.rate > 0 else math.inf
        state = ("completed", "")
        if f.profile.fail_after_s is not None and r.start + f.profile.fail_after_s < end:
            end, state = r.start + f.profile.fail_after_s, ("failed", "profile: fails mid-run")
        if self.kill_at_walltime and r.start + r.job.walltime_s < end - _EPS:
            end, state = r.start + r.job.walltime_s, ("timeout", "killed at its walltime")
        return max(end, self.t), state

    def _update_rates(self) -> None:
        if not self._dirty:
            return
        model = self.model
        for r in self._runs.values():
            r.data.rate = model.quota_term(r.data.profile.demand(), r.quota)
        for r in self._runs.values():
            if r.host is not None or not r.guests:
                continue
            # A host and its guests: each guest shares the host's cores (its own share of
            # them); guests of one host share no cores with each other.
            group = [r] + [self._runs[g] for g in r.guests]
            share = r.data.profile.mem_percent / 100.0
            for gr in group[1:]:
                share += gr.data.profile.mem_percent / 100.0 * gr.job.cores / r.job.cores
            capacity = model.capacity_factor(share)
            demands = [(_with_threads(x.data.profile.demand(), x.job.cores), x.quota)
                       for x in group]
            pool = group[0].job.cores if self.shared_cores else None
            if self.idle_guests:
                demands[1:] = [(dataclasses.replace(d, idle=True), q) for d, q in demands[1:]]
            cores = [x.job.cores for x in group]
            for i, x in enumerate(group):
                # Seen from a guest, its host fills all its cores; seen from the host, a guest
                # fills its share of the host's cores; guests share no cores with each other.
                others = [(d, q, (cores[k] / cores[0] if i == 0 else 1.0) if (i == 0 or k == 0)
                           else 0.0) for k, (d, q) in enumerate(demands) if k != i]
                x.data.rate = x.data.rate / model.contention(demands[i][0], x.quota, others, pool) \
                    * capacity
        self._dirty = False

    def _end(self, job_id: str, state: str, reason: str, end_time: float | None = None) -> Run:
        run = super()._end(job_id, state, reason, end_time)
        self._dirty = True   # a group lost a member: its memory factor changes
        return run


__all__ = ["Profile", "VirtualBackend"]


def _with_threads(demand: JobDemand, cores: int) -> JobDemand:
    """``demand`` with its computing processes: its busy cores over each one's computing
    share (a sequential stage holding many cores: 1; a parallel one: its cores)."""
    computing = 1.0 - float(demand.wait)
    n = 1 if computing <= 1e-9 else round(demand.cpu * cores / computing)
    return dataclasses.replace(demand, threads=max(1, min(cores, n)))
