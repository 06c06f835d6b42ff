"""The node agent as a library object: register jobs, sample them, set leased CPU quotas.

``NodeAgent`` ties the layers together (collect -> state -> execute, leases in lease.py)
and is what the HTTP server wraps and what the local backend uses in-process. This file
holds its public calls and its loop; a tick's work per job is observing.py's, discovery,
recovery and saving the state file restore.py's (both mixins of ``NodeAgent``)::

    agent = NodeAgent(cgroup_root="cosched/n1", node_cpus=1.0, state_dir="/tmp/a")
    agent.register_job({"job_id": "j1", "pids": [pid], "cores": 4})
    agent.set_quota("j1", 0.2, lease_s=30)
    agent.start()          # tick every interval_s in a thread (or call agent.tick())
    ...
    agent.close()          # quotas back to full, empty cgroups removed

Threads: the HTTP server calls in from several threads while the tick thread samples, so
job state is guarded by one lock; the slow part of a tick (reading /proc) runs outside it
so that a quota request never waits for a whole sampling pass.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import psutil

from coscheduler.model import InvalidInput, validate_job_id
from coscheduler.oldfiles import Retention
from coscheduler.progress import Progress

from . import collect
from .admission import ENDED_RULE, Admission, JobContext, Refused, uid_of_job
from .cgroupfs import (CgroupError, CgroupFS, Layout, OpenFiles, UnsafePath, detect_layout,
                       raise_open_file_limit)
from .execute import Actuator, InPlaceQuota, make_actuator
from .lease import DEFAULT_MAX_LEASE_S, LeaseKeeper
from .recovery import StateFile
from .roles import check_guest_weight, check_role
from .state import (JobSpec, JobState, check_fraction, job_quota_us,
                    node_quota_us, parse_registration, validate_agent_job_id)
from .observing import JobObservation
from .progressfiles import ProgressFiles
from .restore import Restore

log = logging.getLogger("monitoring.agent")


class UnknownJob(KeyError):
    """No job with that id is registered (HTTP 404)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown job"


class Conflict(RuntimeError):
    """The request contradicts the agent's state (HTTP 409)."""


def default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/cosched-agent")
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "cosched-agent"


class NodeAgent(JobObservation, Restore):
    def __init__(self, cgroup_root: str = "cosched", *, interval_s: float = 1.0,
                 node_cpus: float | None = None, cpu_per_core: float = 1.0,
                 state_dir: str | os.PathLike | None = None,
                 progress_dir: str | os.PathLike | None = None,
                 max_lease_s: float = DEFAULT_MAX_LEASE_S,
                 finished_retention_s: float = 300.0,
                 progress_window_s: float = 60.0,
                 discover_slurm: bool = False, slurm_node: str | None = None,
                 io_every: int = 5, start_grace_s: float = 60.0,
                 cgroup_version: int | None = None,
                 guest_weight: int | str | None = None,
                 layout: Layout | None = None, fs: CgroupFS | None = None):
        if not interval_s > 0:
            raise InvalidInput(f"interval_s must be > 0, got {interval_s!r}")
        if node_cpus is not None and not node_cpus > 0:
            raise InvalidInput(f"node_cpus must be > 0, got {node_cpus!r}")
        if not cpu_per_core > 0:
            raise InvalidInput(f"cpu_per_core must be > 0, got {cpu_per_core!r}")
        self.guest_weight = check_guest_weight(guest_weight)
        self.interval_s = float(interval_s)
        self.node_cpus = node_cpus
        self.cpu_per_core = float(cpu_per_core)
        self.finished_retention_s = finished_retention_s
        self.progress_window_s = progress_window_s
        self.discover_slurm = discover_slurm
        # several slurmd on one host (emulated nodes): discover only this node's jobs
        self.slurm_node = validate_job_id(slurm_node, "slurm node") if slurm_node else None
        # I/O byte counters change slowly and cost one more file per process: read them
        # every io_every ticks (and at once for a new process).
        self.io_every = max(1, int(io_every))
        # a job registered before its processes start (pids []) is not "finished" while empty
        # for this long
        self.start_grace_s = start_grace_s
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.progress_dir = Path(progress_dir) if progress_dir else self.state_dir / "progress"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.progress_dir.mkdir(parents=True, exist_ok=True)
        if progress_dir is None:
            # Jobs run as any user write their progress here (sticky, like /tmp).
            os.chmod(self.progress_dir, 0o1777)

        self.layout = layout or detect_layout(prefer=cgroup_version)
        self.actuator: Actuator = make_actuator(self.layout, cgroup_root, fs)
        self.actuator.guest_weight = self.guest_weight
        self.cgroup_root = self.actuator.cpu.root_rel
        self.leases = LeaseKeeper(max_lease_s, min_lease_s=self.interval_s)
        self.state_file = StateFile(self.state_dir / "state.json")
        # Why the last save of the state file failed (a full disk, say); None once one works.
        self.state_file_error: str | None = None
        self._encoded: dict[str, tuple[tuple, str]] = {}   # job -> its entry, encoded (restore.py)
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._jobs: dict[str, JobState] = {}
        self._prev: dict[str, dict[str, Any]] = {}  # last counters per job, for rates
        self._covered: dict[str, tuple[frozenset, bool]] = {}  # does the cgroup counter cover the job
        self._io: dict[str, dict[int, tuple[int, int]]] = {}  # last I/O bytes per job and pid
        self._light: dict[str, dict[str, Any]] = {}  # last full sample of a job wholly in its cgroup
        self._progress_files = ProgressFiles(self.progress_dir)
        # A retired job's progress file is removed with it (_retire); files left by jobs
        # that ended while no agent ran go after a week, looked for hourly, but only from
        # the agent's own folder: a folder the operator names may be shared with other
        # agents (whose jobs this one does not know) or hold other files.
        self.progress_retention = Retention() if progress_dir is None else None
        self._owners: dict[str, int] = {}   # job -> the uid of its processes (progress files)
        raise_open_file_limit()
        self._files = OpenFiles()  # /proc files kept open between ticks
        self._progress: dict[str, list[Progress]] = {}
        # who may be moved into a job cgroup (monitoring/admission.py); refusals per job,
        # so that a refused process is reported once, not on every tick
        self.admission = Admission(controller="cpu" if self.layout.version == 1 else None)
        self._refused: dict[str, dict[int, Refused]] = {}
        self._v2_scopes: set[Path] = set()   # Slurm's step scopes seen (restore.py)
        self._mem_total = psutil.virtual_memory().total
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events: list[dict[str, Any]] = []
        self.counters = {"ticks": 0, "lease_expiries": 0, "jobs_finished": 0,
                         "tick_seconds_total": 0.0, "last_tick_seconds": 0.0}
        self.started_at = time.time()
        self.closed = False

        self.actuator.setup()
        self.period_us = self.actuator.period_us
        # cgroup v2: a batch job's quota is written in its own cgroup (never moving a task)
        self.inplace = (InPlaceQuota(self.layout.cpu_mount, self.actuator.fs, self.period_us,
                                     self.actuator.stats) if self.layout.version == 2 else None)
        if self.inplace:
            self.inplace.guest_weight = self.guest_weight
        self.node_quota_us = node_quota_us(node_cpus, self.period_us)
        self.recovery = self._recover()
        with self._lock:
            self.actuator.set_node_quota(self.node_quota_us, self.actuator.job_dirs())
            for js in self._jobs.values():
                self._apply(js)
            self._save()

    # ---- public API ------------------------------------------------------------------------
    def register_job(self, body: Mapping[str, Any] | JobSpec) -> dict[str, Any]:
        """Register a job by its processes; returns its view (with ``progress_file``).
        Registering an id again adds the new pids and updates the given fields."""
        self._check_open()
        if isinstance(body, JobSpec):
            spec = body
            for pid in spec.pids:
                try:
                    self.admission.check(pid)
                except Refused as e:
                    raise e.at(f"job {spec.job_id}: ") from None
        else:
            spec = parse_registration(body, self.progress_dir, admission=self.admission)
        with self._lock:
            try:
                self.admission.check_members(spec.pids, self._job_context(spec.job_id))
            except Refused as e:
                raise e.at(f"job {spec.job_id}: ") from None
            for other in self._jobs.values():
                if other.spec.job_id != spec.job_id and other.status == "running":
                    clash = set(spec.pids) & (other.members | set(other.spec.pids))
                    if clash:   # (a number the other job's ended process had is not a clash)
                        clash &= self._processes_of(other)
                    if clash:
                        raise Conflict(f"job {spec.job_id}: pid(s) {sorted(clash)} already belong "
                                       f"to job {other.spec.job_id}")
            js = self._jobs.get(spec.job_id)
            now = time.time()
            if js is not None and js.status == "running":
                merged = dict(js.spec.to_dict())
                for k, v in spec.to_dict().items():
                    if k in ("source", "batch_cgroup"):
                        continue
                    if k == "pids":
                        merged["pids"] = tuple(dict.fromkeys(list(js.spec.pids) + list(v)))
                    elif v is not None and not (isinstance(body, Mapping) and k not in body
                                                and k in ("progress_file", "start_time")):
                        merged[k] = v
                js.spec = JobSpec.from_dict(merged)
                if not isinstance(body, Mapping) or "cores" in body:
                    js.cores_guessed = False
                js.event(now, f"registration updated (pids {list(spec.pids)})")
                created = False
            else:
                taken_over: set[int] = set()
                if js is not None and self.actuator.has_job(spec.job_id):
                    if js.spec.source == "adopted" or js.status == "released":
                        # found in our cgroup root after a restart without a usable state
                        # entry, or unregistered while its processes ran on: the same job,
                        # registered again (by its processes' own user: _job_context), is
                        # managed again
                        taken_over = self.actuator.job_pids(spec.job_id)
                    elif not self.actuator.remove_job(spec.job_id):
                        raise Conflict(f"job {spec.job_id}: a previous job with this id still has "
                                       "processes in its cgroup")
                js = JobState(spec=spec, registered_at=now)
                js.event(now, "registered" + (" again after the agent's restart" if taken_over else ""))
                js.members = taken_over
                js.seen_processes = bool(taken_over)
                self._jobs[spec.job_id] = js
                self._prev.pop(spec.job_id, None)
                self._progress.pop(spec.job_id, None)
                self._owners.pop(spec.job_id, None)   # (a new job: its user is found again)
                created = True
            try:
                self._remake_root_if_removed()
                self.actuator.ensure_job(spec.job_id)
                self._apply(js)
                kids, refused = self.admission.split(collect.descendants(spec.pids) - set(spec.pids))
                # (a child that ended meanwhile is gone, not refused: observing.py)
                refused = {pid: why for pid, why in refused.items() if why.rule != ENDED_RULE}
                members = set(spec.pids) | set(kids)
                res = self.actuator.move(spec.job_id, members)
            except (CgroupError, OSError) as e:
                if created:
                    self._jobs.pop(spec.job_id, None)
                    self.actuator.remove_job(spec.job_id)
                raise CgroupError(f"job {spec.job_id}: cannot set up its cgroup: {e}") from e
            if res.failed and created and not res.moved:
                self._jobs.pop(spec.job_id, None)
                self.actuator.remove_job(spec.job_id)
                pid, why = next(iter(res.failed.items()))
                raise InvalidInput(f"job {spec.job_id}: pid {pid} cannot be moved into a cgroup: {why}")
            js.members |= set(res.moved)
            js.pid_starts.update(collect.start_times(spec.pids))
            js.seen_processes = js.seen_processes or bool(js.members)
            if res.failed:
                js.event(now, f"could not move pid(s) {sorted(res.failed)}")
            for pid, why in refused.items():
                js.event(now, f"not moved: {why}")
            self._refused.setdefault(spec.job_id, {}).update(refused)
            self._save()
            view = self._view(js)
            view["created"] = created
            return view

    def unregister(self, job_id: str) -> dict[str, Any]:
        """Stop managing a job: lease dropped, quota lifted, cgroup removed once empty."""
        self._check_open()
        with self._lock:
            js = self._get(job_id)
            self.leases.revoke(job_id)
            js.fraction, js.role = None, None
            if self.actuator.has_job(job_id) or self._sample_only(js.spec):
                try:   # in place too: nothing left limited or idle
                    self._write_quota(js, None)
                    js.quota_us = None
                except CgroupError as e:
                    if not self._sample_only(js.spec):
                        # Released now, the job would keep the old quota for good (a tick
                        # re-asserts only running jobs): it stays running with no limit
                        # wanted, which every tick writes again until the kernel takes it.
                        js.quota_us = self._desired_quota(js)
                        js.quota_reason = f"unregister failed: quota not lifted yet ({e})"
                        js.event(time.time(), js.quota_reason)
                        self._save()
                        raise CgroupError(f"job {job_id}: its quota could not be lifted, so it "
                                          f"stays registered, with no limit wanted, written again "
                                          f"at every tick; unregister again later: {e}") from e
                    js.event(time.time(), f"quota not lifted: {e}")  # Slurm removed its cgroup
            if js.status == "running":
                js.life_cpu_percent = self._life_cpu_percent(js)   # (before its cgroup goes)
                js.status = "released"
                js.finished_at = time.time()
            js.quota_reason = "unregistered: no limit"
            js.event(time.time(), "unregistered")
            if self.actuator.has_job(job_id) and self.actuator.remove_job(job_id):
                js.event(time.time(), "cgroup removed")
            self._save()
            return self._view(js)

    def set_quota(self, job_id: str, cpu_fraction: float, lease_s: float,
                  role: str | None = None) -> dict[str, Any]:
        """Give a job ``cpu_fraction`` of its allocated cores until the lease lapses (a new
        call renews it); ``role`` "host" or "guest" sets its scheduler files (roles.py),
        None the defaults. The lease covers both."""
        self._check_open()
        f = check_fraction(cpu_fraction)
        role = check_role(role)
        with self._lock:
            js = self._get(job_id)
            if js.status != "running":
                again = " (register it again to manage it)" if js.spec.source == "adopted" else ""
                raise Conflict(f"job {job_id} is {js.status}; no quota can be set{again}")
            lease_s = self.leases.check_lease_s(lease_s)
            previous = (js.fraction, js.quota_reason, js.role, js.quota_us)
            js.fraction, js.role = f, role
            js.quota_reason = (f"set by request: cpu_fraction {f:g}, lease {lease_s:g} s"
                               + (f", role {role}" if role else ""))
            try:
                self._apply(js)
            except CgroupError:
                js.fraction, js.quota_reason, js.role, js.quota_us = previous
                raise
            lease = self.leases.grant(job_id, f, lease_s)
            js.lease_deadline = lease.deadline_wall
            js.event(time.time(), js.quota_reason)
            self._save()
            return self._view(js)

    def clear_quota(self, job_id: str, reason: str = "cleared by request") -> dict[str, Any]:
        """Give a job its full quota back now."""
        self._check_open()
        with self._lock:
            js = self._get(job_id)
            self.leases.revoke(job_id)
            failed = self._restore_full(js, reason)
            self._save()
            if failed is not None:
                # (no limit is wanted now: every tick writes it again until the kernel takes it)
                raise CgroupError(f"job {job_id}: the full quota could not be written yet; "
                                  f"it is written again at every tick: {failed}")
            return self._view(js)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._view(js) for js in self._jobs.values()]

    def job(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return self._view(self._get(job_id))

    def node(self) -> dict[str, Any]:
        """What this agent is and how it is doing (GET /v1/node)."""
        with self._lock:
            try:
                ct = psutil.Process().cpu_times()
                own_cpu = ct.user + ct.system
            except psutil.Error:
                own_cpu = None
            ticks = self.counters["ticks"]
            return {
                "cgroup": {**self.layout.describe(), "root": self.cgroup_root,
                           "path": str(self.actuator.cpu.root), "period_us": self.period_us},
                "node_cpus": self.node_cpus, "node_quota_us": self.node_quota_us,
                "cpu_per_core": self.cpu_per_core, "interval_s": self.interval_s,
                "guest_weight": self.guest_weight or "idle",
                "max_lease_s": self.leases.max_lease_s,
                "progress_dir": str(self.progress_dir), "state_file": str(self.state_file.path),
                "state_file_error": self.state_file_error,
                "jobs": {s: sum(1 for j in self._jobs.values() if j.status == s)
                         for s in ("running", "finished", "released")},
                "leases": len(self.leases), "pid": os.getpid(),
                "started_at": self.started_at, "agent_cpu_s": own_cpu,
                "ticks": ticks, "last_tick_s": self.counters["last_tick_seconds"],
                "mean_tick_s": self.counters["tick_seconds_total"] / ticks if ticks else None,
                "lease_expiries": self.counters["lease_expiries"],
                "writes": self.actuator.stats.as_dict(),
                "recovery": self.recovery,
                "events": self.events[-20:],
            }

    # ---- the loop ------------------------------------------------------------------------
    def tick(self) -> None:
        """One pass: expire leases, follow processes, re-assert quotas, sample, retire."""
        with self._tick_lock:  # one pass at a time (the loop, or a caller of sample())
            self._tick()

    def _tick(self) -> None:
        t0 = time.perf_counter()
        now = time.time()
        with self._lock:
            self._enforce_leases()
            if self.discover_slurm:
                try:
                    self._discover()
                except Exception:  # noqa: BLE001 - the jobs already followed are still sampled
                    log.exception("discovering Slurm jobs failed")
            todo = [(jid, js.spec, js.quota_us is not None or js.sample.get("nr_throttled") is not None,
                     dict(js.pid_starts))
                    for jid, js in self._jobs.items() if js.status == "running"]
        # Reading /proc and cgroup counters is the slow part: no lock held.
        self._progress_files.list(len(todo))
        observed = {jid: self._observe(jid, spec, now, q, starts) for jid, spec, q, starts in todo}
        with self._lock:
            changed = False
            for jid, obs in observed.items():
                js = self._jobs.get(jid)
                if js is None or js.status != "running":
                    continue
                changed |= self._reconcile(js, obs, now)
            changed |= self._retire(now)
            if changed:
                self._save()
            keep = ({js.spec.progress_file for js in self._jobs.values()}
                    if self.progress_retention is not None and self.progress_retention.due(now)
                    else None)
        if keep is not None:   # (a bounded scan, hourly: no lock held)
            try:
                n = self.progress_retention.run(
                    lambda before: self._progress_files.prune(before, keep), now)
            except Exception:  # noqa: BLE001 - housekeeping must never stop a tick
                log.exception("pruning the progress folder %s failed", self.progress_dir)
                n = None
            if n:
                log.info("removed %d progress files older than %g days from %s", n,
                         self.progress_retention.kept_s / 86400, self.progress_dir)
        with self._lock:
            dt = time.perf_counter() - t0
            self.counters["ticks"] += 1
            self.counters["tick_seconds_total"] += dt
            self.counters["last_tick_seconds"] = dt

    def sample(self) -> list[dict[str, Any]]:
        """Take a sample now (a whole tick) and return every job's view."""
        self.tick()
        return self.jobs()

    def enforce_leases(self) -> int:
        with self._lock:
            return self._enforce_leases()

    def run(self, stop: threading.Event | None = None) -> None:
        """Tick every ``interval_s`` until stopped; leases are checked in between so that
        one expires within a few milliseconds of its deadline, not at the next tick."""
        stop = stop or self._stop
        next_tick = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_tick:
                try:
                    self.tick()
                except Exception:  # a bad tick must not stop the fail-safe
                    log.exception("tick failed")
                next_tick = max(next_tick + self.interval_s, time.monotonic())
            else:
                try:
                    self.enforce_leases()
                except Exception:
                    log.exception("lease enforcement failed")
            with self._lock:
                lease_wait = self.leases.seconds_to_next_expiry()
            wait = next_tick - time.monotonic()
            if lease_wait is not None:
                wait = min(wait, lease_wait + 0.002)
            stop.wait(max(0.0, wait))

    def start(self) -> "NodeAgent":
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name="cosched-agent-tick", daemon=True)
            self._thread.start()
        return self

    def close(self, restore: bool = True) -> dict[str, Any]:
        """Stop ticking; with ``restore`` lift every quota, remove empty job cgroups and the
        root when nothing is left. Jobs keep running. Returns what was done."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        done: dict[str, Any] = {"restored": [], "removed": [], "left": []}
        with self._lock:
            if self.closed:
                return done
            self.closed = True
            if not restore:
                return done
            for jid, js in self._jobs.items():
                self.leases.revoke(jid)
                if self._sample_only(js.spec) and js.status == "running" and self.inplace is not None:
                    try:   # in the batch system's cgroup: no limit, idle flag or weight left
                        self.inplace.set_quota(js.spec.batch_cgroup, None)
                        self.inplace.set_role(js.spec.batch_cgroup, None)
                        done["restored"].append(jid)
                    except CgroupError as e:
                        log.error("job %s: could not lift quota at exit: %s", jid, e)
                    continue
                if not self.actuator.has_job(jid):
                    continue
                try:
                    self.actuator.set_quota(jid, None)
                    self.actuator.set_role(jid, None)
                    js.fraction, js.quota_us = None, None
                    js.quota_reason = "agent stopped: no limit"
                    done["restored"].append(jid)
                except CgroupError as e:
                    log.error("job %s: could not lift quota at exit: %s", jid, e)
                if self.actuator.remove_job(jid):
                    done["removed"].append(jid)
                else:
                    done["left"].append(jid)
            for name in self.actuator.job_dirs():  # anything else of ours
                if name not in self._jobs:
                    try:
                        self.actuator.set_quota(name, None)
                        self.actuator.set_role(name, None)
                    except (CgroupError, UnsafePath):
                        pass
                    (done["removed"] if self.actuator.remove_job(name) else done["left"]).append(name)
            self._files.close()
            self.actuator.fs.open_files.close()
            if not done["left"]:
                try:
                    self.actuator.set_node_quota(None, [])
                except CgroupError:
                    pass
                self.actuator.remove_root()
                self.state_file.remove()
            else:
                self._save(clean_exit=True)
            log.info("agent closed: %s", done)
            return done

    # ---- internals (called with the lock held unless said otherwise) -----------------------
    def _check_open(self) -> None:
        if self.closed:
            raise Conflict("the agent is closed")

    def _get(self, job_id: str) -> JobState:
        validate_agent_job_id(job_id)
        js = self._jobs.get(job_id)
        if js is None:
            raise UnknownJob(f"no job {job_id!r} is registered on this node")
        return js

    def _job_context(self, job_id: str) -> JobContext:
        """What the ownership rule needs to know of a job (monitoring/admission.py)."""
        js = self._jobs.get(job_id)
        in_cgroups = set(self.actuator.job_pids(job_id)) if self.actuator.has_job(job_id) else set()
        if js is None or js.status != "running":
            # A released job's processes still in its cgroup may be registered again (taken
            # over), by their own user only.
            return JobContext(job_id, uid_of_job(in_cgroups) if in_cgroups else None,
                              in_cgroups=frozenset(in_cgroups))
        alive = self._processes_of(js, in_cgroups)
        if js.spec.batch_cgroup:
            in_cgroups |= collect.cgroup_tree_pids(Path(js.spec.batch_cgroup))
        return JobContext(job_id, uid_of_job(alive), frozenset(alive), frozenset(in_cgroups))

    def _processes_of(self, js: JobState, in_cgroups: set[int] | None = None) -> set[int]:
        """A running job's live processes: those in its cgroups and its registered ones that
        are still the processes registered (not a later process given the same number)."""
        if in_cgroups is None:
            in_cgroups = set(self.actuator.job_pids(js.spec.job_id)) \
                if self.actuator.has_job(js.spec.job_id) else set()
        procs = set(in_cgroups)
        if js.spec.batch_cgroup:
            procs |= collect.cgroup_tree_pids(Path(js.spec.batch_cgroup))
        starts = js.pid_starts
        return procs | collect.still_the_same({p: starts[p] for p in js.spec.pids if p in starts})

    def _sample_only(self, spec: JobSpec) -> bool:
        """On cgroup v2 there is one hierarchy: moving a batch job's processes into our
        cgroup would take them out of the batch system's. Such jobs are never moved; their
        quota is written in place, in the job's own cgroup (``InPlaceQuota``)."""
        return spec.batch_cgroup is not None and self.layout.version == 2

    def _desired_quota(self, js: JobState) -> int | None:
        return job_quota_us(js.fraction, js.spec.cores, self.cpu_per_core, self.period_us,
                            self.node_quota_us, cap_full=self.node_quota_us is not None)

    def _apply(self, js: JobState, verify: bool = False) -> bool:
        q = self._desired_quota(js)
        js.quota_us = q
        return self._write_quota(js, q, verify)

    def _write_quota(self, js: JobState, q: int | None, verify: bool = False) -> bool:
        try:
            if self._sample_only(js.spec) and self.inplace is not None:
                wrote = self.inplace.set_quota(js.spec.batch_cgroup, q, verify=verify)
            else:
                wrote = self.actuator.set_quota(js.spec.job_id, q, verify=verify)
            js.apply_error = None
        except CgroupError as e:
            js.apply_error = str(e)
            raise
        self._apply_role(js, verify)   # never stops the quota (observing.py)
        return wrote

    def _remake_root_if_removed(self) -> None:
        """Our cgroup root, removed from under us (empty, so no job lost its cgroup), is
        made again with the node's quota rather than failing every registration."""
        if not self.actuator.root_missing():
            return
        self.actuator.remake_root()
        self.actuator.set_node_quota(self.node_quota_us, [])
        self._event(f"the cgroup root {self.actuator.cpu.root} was removed by someone else: made again")
        log.warning("the cgroup root %s was removed by someone else: made again", self.actuator.cpu.root)

    def _remake_job_cgroup(self, js: JobState, now: float) -> None:
        """A job's cgroup removed by someone else (the kernel removes only an empty one, so
        its processes were moved out first): made again, so that the processes moved back
        this tick run under its quota and role again, rather than unlimited for good."""
        jid = js.spec.job_id
        try:
            self._remake_root_if_removed()
            self.actuator.remake_job(jid)
        except (CgroupError, UnsafePath, OSError) as e:
            log.error("job %s: its cgroup was removed and cannot be made again: %s", jid, e)
            return
        js.kernel_role = "?"
        js.event(now, "its cgroup was removed by someone else: made again")
        self._event(f"job {jid}: its cgroup was removed by someone else: made again")
        log.warning("job %s: its cgroup was removed by someone else: made again", jid)

    def _restore_full(self, js: JobState, reason: str) -> CgroupError | None:
        """No limit for a running job from now on; the write's error, if it failed (the
        next ticks write it again)."""
        js.fraction, js.role = None, None
        js.lease_deadline = None
        js.quota_reason = reason
        js.event(time.time(), reason)
        if js.status == "running":
            try:
                self._apply(js)
            except CgroupError as e:
                log.error("job %s: could not restore full quota: %s", js.spec.job_id, e)
                return e
        return None

    def _enforce_leases(self) -> int:
        expired = self.leases.expired()
        for lease in expired:
            js = self._jobs.get(lease.job_id)
            if js is None:
                continue
            reason = lease.expiry_reason()
            self._restore_full(js, reason)
            self.counters["lease_expiries"] += 1
            self._event(f"job {lease.job_id}: {reason}")
            log.warning("job %s: %s", lease.job_id, reason)
        if expired:
            self._save()
        return len(expired)

    def _event(self, what: str) -> None:
        self.events.append({"time": round(time.time(), 3), "event": what})
        del self.events[:-100]


    def _view(self, js: JobState) -> dict[str, Any]:
        lease = self.leases.get(js.spec.job_id)
        s = js.sample
        return {
            "job_id": js.spec.job_id, "status": js.status, "source": js.spec.source,
            "cores": js.spec.cores, "pids": sorted(js.members) if js.members else list(js.spec.pids),
            "cpu_percent": s.get("cpu_percent"), "mem_percent": s.get("mem_percent"),
            "tasks_done": s.get("tasks_done", 0), "tasks_total": s.get("tasks_total", js.spec.tasks_total),
            "tasks_per_s": s.get("tasks_per_s"), "happiness": s.get("happiness"),
            "cpu_fraction": 1.0 if js.fraction is None else js.fraction, "role": js.role,
            "quota_us": js.quota_us, "period_us": self.period_us,
            "lease_s": lease.lease_s if lease else None,
            "lease_expires_in_s": (round(max(0.0, lease.deadline_wall - time.time()), 3)
                                   if lease else None),
            "quota_reason": js.quota_reason, "apply_error": js.apply_error,
            "rss_bytes": s.get("rss_bytes"), "io_read_bytes": s.get("io_read_bytes"),
            "io_write_bytes": s.get("io_write_bytes"), "nprocs": s.get("nprocs"),
            "nr_throttled": s.get("nr_throttled"), "throttled_s": s.get("throttled_s"),
            "cpu_source": s.get("cpu_source"), "sample_time": s.get("sample_time"),
            "walltime_s": js.spec.walltime_s, "start_time": js.spec.start_time,
            "job_class": js.spec.job_class, "progress_file": js.spec.progress_file,
            "mem_mb": js.spec.mem_mb,
            "cgroup": str(self.actuator.cpu.job(js.spec.job_id)),
            "cgroup_procs": self.actuator.procs_files(js.spec.job_id),
            "registered_at": js.registered_at, "finished_at": js.finished_at,
            "life_cpu_percent": js.life_cpu_percent,
            "events": list(js.events)[-5:],
        }

