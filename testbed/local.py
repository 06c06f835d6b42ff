"""The local backend: real processes on emulated nodes of this machine (the embedded default).

Like submitit's local executor beside its Slurm one, it runs the same jobs the cluster
backends run, with no cluster. Each emulated node is a cgroup with its own CPU capacity,
managed by one in-process ``monitoring.NodeAgent`` (the agent stays the only part that
writes cgroups). The machine's real CPUs are split evenly over the emulated cores:

    cpu_per_core = real CPUs / total emulated cores

so on a 2-CPU machine, 2 nodes x 4 cores make each "core" a quarter of a real CPU, and a
job's full quota is cores x cpu_per_core. Lending works exactly as on a cluster: the host's
quota shrinks, the guest gets the rest of the shared cores.

How a job runs: its command starts under ``/bin/sh`` that stops itself first, the agent
moves it into the job's cgroup (and sets its quota), then it continues; so no instruction
of a job ever runs outside its quota. Its progress goes to ``$COSCHED_PROGRESS_FILE``.
Its CPU time is the kernel's own count for the process tree (``wait4`` rusage). A job
still running at (1 + overtime_factor) x its walltime is killed (``timeout``), like Slurm's
OverTimeLimit; the default (1.0) lets a job overrun by one walltime, where ASA_X's loss
saturates, so an overrun is measured rather than cut short. Quotas below 1 are
leased; the backend renews the leases on every controller pass, so if this process dies
the agents' leases lapse and, on the next start, the agents' state files undo the rest.

Each job runs on one emulated node (``Job.nodes`` must be 1).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil

from coscheduler.backend import BackendError, check_quota_fraction
from coscheduler.backends.book import JobBook
from coscheduler.model import Allocation, InvalidInput, Job, MetricsSample, Node
from coscheduler.progress import ENV_VAR as PROGRESS_ENV
from monitoring.agent import NodeAgent
from monitoring.recovery import remove_orphaned_roots
from monitoring.support import CgroupsUnavailable, check_local_support  # noqa: F401 - re-exported

# `kill -STOP $$` holds the job until the agent has moved it into its cgroup. setpriv's
# parent-death signal kills the job if this process dies, so no job outlives the backend
# (and its quota) unseen; the stage programs stop their own workers when they are killed.
_BARRIER = ("/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "cosched-job")
_SETPRIV = shutil.which("setpriv")
_LAUNCHER = ((_SETPRIV, "--pdeathsig", "KILL") + _BARRIER) if _SETPRIV else _BARRIER
_STOP_WAIT_S = 5.0
_CGROUP_PREFIX = "cosched-local-"
_KILL_GRACE_S = 3.0


@dataclass
class _Proc:
    """A running job's process and what the backend measures of it."""

    popen: subprocess.Popen
    node: str
    log_path: Path
    progress_path: Path
    started_wall: float
    lease_renewed: float = 0.0


@dataclass
class JobUsage:
    """What was measured of one job: kernel CPU seconds, and core-seconds it held alone."""

    cpu_seconds: float = 0.0
    held_core_seconds: float = 0.0   # emulated cores held exclusively, x seconds
    eligible_at: float | None = None


class LocalBackend(JobBook):
    """Runs jobs as local processes on emulated nodes, quotas applied by node agents."""

    name = "local"
    _instances = 0

    def __init__(self, nodes: Iterable[Node] | dict[str, int], workdir: str | os.PathLike, *,
                 cpus: float | None = None, cgroup_base: str | None = None,
                 lease_s: float = 20.0, agent_interval_s: float = 0.5,
                 overtime_factor: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(nodes)
        if not overtime_factor >= 0:
            raise InvalidInput(f"local backend: overtime_factor must be >= 0, got {overtime_factor!r}")
        self.overtime_factor = float(overtime_factor)
        check_local_support()
        # A backend killed with -9 took its jobs with it but left empty cgroups: tidy them.
        remove_orphaned_roots(_CGROUP_PREFIX)

        real = float(cpus) if cpus is not None else float(len(os.sched_getaffinity(0)))
        if not real > 0:
            raise InvalidInput(f"local backend: cpus must be > 0, got {cpus!r}")
        total = sum(n.cores for n in self._nodes)
        self.cpu_per_core = real / total
        self._node_mem_bytes = psutil.virtual_memory().total   # what the agents measure against
        self.lease_s = float(lease_s)
        self.workdir = Path(workdir)
        for sub in ("logs", "progress", "jobs", "agents"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        # One root per backend (pid and a counter): a root one backend could not remove
        # never becomes another's, and a dead process's roots are found by the pid.
        LocalBackend._instances += 1
        self.cgroup_base = cgroup_base or f"{_CGROUP_PREFIX}{os.getpid()}-{LocalBackend._instances}"
        self._clock = clock
        self._t0 = clock()
        self.usage: dict[str, JobUsage] = {}
        self._io_seen: dict[str, tuple[float, int, float | None]] = {}   # job -> t, bytes, rate
        self._orphaned_at: dict[str, float] = {}
        self.agents = {}
        try:
            for n in self._nodes:
                self.agents[n.name] = NodeAgent(
                    cgroup_root=f"{self.cgroup_base}/{n.name}", interval_s=agent_interval_s,
                    node_cpus=n.cores * self.cpu_per_core, cpu_per_core=self.cpu_per_core,
                    state_dir=self.workdir / "agents" / n.name,
                    progress_dir=self.workdir / "progress").start()
        except Exception:
            self.close()
            raise

    # -- workload -------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        if job.nodes != 1:
            raise InvalidInput(f"local backend: job {job.job_id} asks for {job.nodes} nodes; "
                               "each job runs on one emulated node here")
        if not job.command:
            raise InvalidInput(f"local backend: job {job.job_id} has no command to run")
        if max(self._capacity.values()) < job.cores:
            raise InvalidInput(f"local backend: job {job.job_id} needs {job.cores} cores; "
                               f"the largest emulated node has {max(self._capacity.values())}")
        self._submit(job, None)
        self.usage[job.job_id] = JobUsage()

    # -- Backend interface ----------------------------------------------------------------
    def now(self) -> float:
        return self._clock() - self._t0

    def _io_rate(self, job_id: str, view: dict) -> float | None:
        """MB/s read and written by the job's processes since its previous agent sample
        (None until two samples with I/O counters exist)."""
        t, rd, wr = view.get("sample_time"), view.get("io_read_bytes"), view.get("io_write_bytes")
        if t is None or rd is None or wr is None:
            return None
        prev = self._io_seen.get(job_id)
        self._io_seen[job_id] = (t, rd + wr, prev[2] if prev and prev[0] == t else None)
        if prev is None:
            return None
        if prev[0] == t:               # the agent has not sampled again: keep the last rate
            return prev[2]
        rate = max(0.0, (rd + wr - prev[1]) / 1e6 / (t - prev[0])) if t > prev[0] else None
        self._io_seen[job_id] = (t, rd + wr, rate)
        return rate

    def queued(self) -> list[Job]:
        self._reap()
        jobs = super().queued()
        now = self.now()
        for j in jobs:
            u = self.usage[j.job_id]
            if u.eligible_at is None:
                u.eligible_at = now
        return jobs

    def metrics(self) -> dict[str, MetricsSample]:
        self._reap()
        self._renew_leases()
        out: dict[str, MetricsSample] = {}
        now = self.now()
        for jid, run in self._runs.items():
            try:
                v = self.agents[run.data.node].job(jid)
            except Exception:  # the agent lost it: unknown this pass
                continue
            if v.get("cpu_percent") is None:
                continue
            try:
                out[jid] = MetricsSample(
                    job_id=jid, time=now, cpu_percent=v["cpu_percent"],
                    mem_percent=v.get("mem_percent") or 0.0, tasks_done=v.get("tasks_done") or 0,
                    tasks_total=v.get("tasks_total"), tasks_per_s=v.get("tasks_per_s"),
                    io_mb_s=self._io_rate(jid, v))
            except InvalidInput:
                continue
        return out

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        _, q = self._check_start(job, allocation, quota_fraction, host_job)
        node = allocation.nodes[0]
        agent = self.agents[node]
        jid = job.job_id
        progress = self.workdir / "progress" / f"{jid}.json"
        log_path = self.workdir / "logs" / f"{jid}.log"
        jobdir = self.workdir / "jobs" / jid
        jobdir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, **{PROGRESS_ENV: str(progress), "COSCHED_JOB_ID": jid,
                                  "COSCHED_CORES": str(job.cores)})
        with open(log_path, "ab") as log:
            try:
                popen = subprocess.Popen(_LAUNCHER + tuple(job.command), env=env, cwd=jobdir,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:
                raise BackendError(f"cannot start job {jid}: {exc}") from None
        try:
            self._wait_stopped(popen.pid)
            agent.register_job({
                "job_id": jid, "pids": [popen.pid], "cores": job.cores,
                "walltime_s": job.walltime_s, "start_time": time.time(),
                "tasks_total": job.tasks, "job_class": job.job_class,
                "progress_file": str(progress)})
            if q < 1.0:
                agent.set_quota(jid, q, self.lease_s)
            os.kill(popen.pid, signal.SIGCONT)
        except Exception as exc:
            self._kill(popen)
            try:
                agent.unregister(jid)
            except Exception:
                pass
            raise BackendError(f"cannot start job {jid} on {node}: {exc}") from None
        run = self._commit_start(job, allocation, q, host_job,
                                 _Proc(popen, node, log_path, progress, time.time(), time.time()))
        self.quota_log.append((run.start, jid, q))

    def set_quota(self, job_id: str, quota_fraction: float) -> None:
        run = self._runs.get(job_id)
        if run is None:
            raise BackendError(f"cannot set the quota of job {job_id}: it is not running")
        q = check_quota_fraction(job_id, quota_fraction)
        agent = self.agents[run.data.node]
        try:
            if q >= 1.0:
                agent.clear_quota(job_id, "full quota given back by the controller")
            else:
                agent.set_quota(job_id, q, self.lease_s)
                run.data.lease_renewed = time.time()
        except Exception as exc:
            raise BackendError(f"cannot set the quota of job {job_id}: {exc}") from None
        run.quota = q
        self.quota_log.append((self.now(), job_id, q))

    def drain_finished(self):
        self._reap()
        return super().drain_finished()

    # -- running --------------------------------------------------------------------------
    def cancel(self, job_id: str, reason: str = "cancelled by the user") -> None:
        run = self._runs.get(job_id)
        if run is None:
            raise BackendError(f"cannot cancel job {job_id}: it is not running")
        self._kill(run.data.popen)
        self._reap(forced={job_id: ("cancelled", reason)})

    def close(self) -> None:
        """Kill what still runs, give every quota back, remove the cgroups."""
        for jid in list(self._runs):
            self._kill(self._runs[jid].data.popen)
        self._reap(forced={j: ("cancelled", "backend closed") for j in self._runs})
        # Newest first: the first agent made the shared parent cgroup and removes it last.
        for agent in reversed(list(self.agents.values())):
            try:
                agent.close()
            except Exception:
                pass
        self.agents = {}

    def __enter__(self) -> "LocalBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cpu_seconds(self) -> float:
        return sum(u.cpu_seconds for u in self.usage.values())

    def held_core_seconds(self) -> float:
        return sum(u.held_core_seconds for u in self.usage.values())

    # -- internals ------------------------------------------------------------------------
    def _wait_stopped(self, pid: int) -> None:
        deadline = time.monotonic() + _STOP_WAIT_S
        proc = psutil.Process(pid)
        while proc.status() != psutil.STATUS_STOPPED:
            if time.monotonic() > deadline:
                raise BackendError(f"process {pid} did not reach its start barrier")
            time.sleep(0.002)

    def _renew_leases(self) -> None:
        now = time.time()
        for jid, run in self._runs.items():
            if run.quota < 1.0 and now - run.data.lease_renewed > self.lease_s / 3:
                try:
                    self.agents[run.data.node].set_quota(jid, run.quota, self.lease_s)
                    run.data.lease_renewed = now
                except Exception:
                    pass  # the lease lapses: the host gets its full quota: safe

    def _reap(self, forced: dict[str, tuple[str, str]] | None = None) -> None:
        """Collect ended processes (and kill those past their walltime)."""
        forced = dict(forced or {})
        now = self.now()
        for jid, run in list(self._runs.items()):
            popen = run.data.popen
            if jid not in forced and now - run.start > run.job.walltime_s * (1 + self.overtime_factor):
                self._kill(popen)
                forced[jid] = ("timeout", f"killed at {1 + self.overtime_factor:g} x its walltime")
            try:
                pid, status, rusage = os.wait4(popen.pid, 0 if jid in forced else os.WNOHANG)
            except ChildProcessError:
                pid, status, rusage = popen.pid, 0, None
            if pid == 0:
                continue
            popen.returncode = os.waitstatus_to_exitcode(status)
            if jid in forced:
                state, reason = forced[jid]
            elif popen.returncode == 0:
                state, reason = "completed", ""
            else:
                state, reason = "failed", f"exit code {popen.returncode} (log: {run.data.log_path})"
            self._account(jid, run, rusage, now)
            try:
                self.agents[run.data.node].unregister(jid)
            except Exception:
                pass
            self._end(jid, state, reason, end_time=now, use=self._life_use(run, rusage, now))

    def _account(self, jid: str, run, rusage, now: float) -> None:
        u = self.usage[jid]
        if rusage is not None:
            u.cpu_seconds = rusage.ru_utime + rusage.ru_stime
        held_from = run.start if run.host is None and jid not in self._orphaned_at else \
            self._orphaned_at.get(jid)
        if held_from is not None:
            u.held_core_seconds += (now - held_from) * run.job.cores
        if run.host is None:
            for g in run.guests:   # guests hold these cores alone from now on
                self._orphaned_at[g] = now

    def _life_use(self, run, rusage, now: float) -> tuple[float | None, float | None]:
        """A job's mean CPU use over its life, in % of its cores (of ``cpu_per_core`` each),
        and its peak resident memory in % of the node's memory, from the accounting of its
        exit, in the units of the agent's samples; (None, None) without one. (Jobs are
        registered without a memory size: an emulated job's ``mem_mb`` is its profile's, a
        few MB at the demo's scale, far below its interpreter's resident size.)"""
        held_s = (now - run.start) * run.job.cores * self.cpu_per_core
        if rusage is None or held_s <= 0:
            return None, None
        cpu = 100.0 * (rusage.ru_utime + rusage.ru_stime) / held_s
        # ru_maxrss: KiB, the largest single process of the job (its workers' are not summed)
        mem = 100.0 * rusage.ru_maxrss * 1024.0 / self._node_mem_bytes
        return min(cpu, 100.0), min(mem, 100.0)

    @staticmethod
    def _kill(popen: subprocess.Popen) -> None:
        """SIGTERM the job's process group, SIGKILL it after a grace period, and wait until
        every process of the job is gone (so its cgroup can be removed right after)."""
        try:
            members = psutil.Process(popen.pid).children(recursive=True)
        except psutil.Error:
            members = []
        try:
            os.killpg(popen.pid, signal.SIGCONT)   # a stopped group cannot handle SIGTERM
            os.killpg(popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < deadline:
            try:
                os.killpg(popen.pid, 0)
            except ProcessLookupError:
                return
            try:
                if os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    break
            except ChildProcessError:
                return
            time.sleep(0.05)
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # Exit is asynchronous: a worker still exiting keeps the job's cgroup busy.
        psutil.wait_procs(members, timeout=_KILL_GRACE_S)


__all__ = ["CgroupsUnavailable", "JobUsage", "LocalBackend", "check_local_support"]
