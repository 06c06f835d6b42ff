"""Which processes the agent may move into a job cgroup: one rule, applied wherever a pid
enters (a registration over HTTP or in process, a job read back from the state file, a
process the job started later, a process listed in a batch system's cgroup).

The agent runs as root and a move takes a whole thread group with it, so a wrong pid can
throttle the agent itself, init, or the kernel's own threads. A pid is admitted only if it
is a thread-group leader of a live user process, and it is not:

* pid 1 (init: every orphan is re-parented to it);
* a kernel thread (``PF_KTHREAD``; kthreadd and everything it spawns);
* a thread of another process (writing a thread id to ``cgroup.procs`` moves its whole
  process: a thread id of the agent once moved the agent);
* the agent itself or one of its ancestors;
* in the agent's own cgroup (systemd's service cgroup, say), unless the agent started it
  (an in-process agent's jobs start as its children), and unless that cgroup is the root
  of the hierarchy as the agent sees it: the hierarchy's root on a host without cgroup
  management, or the container's own cgroup inside a container (Docker on cgroup v1
  mounts the container's cgroup as the root; a batch system there starts every job in it).
  Nor does it apply to a process the batch system placed in the job's own cgroup
  (``placed_by_batch``: listed in Slurm's job cgroup): Slurm makes no cgroup in the cpu
  hierarchy, so on cgroup v1 in a container (where the container's cgroup is not the
  hierarchy's root when the host's tree is mounted) its jobs share the agent's cpu cgroup,
  and only root (slurmstepd) can put a process in Slurm's job cgroup.

A pid registered for a job must moreover be the job's (``Admission.check_member``, the
ownership rule): it runs as the job's user (the real uid of the job's processes; the first
pid registered for a job sets it), and once the job has processes, a pid registered later
must already be in one of the job's cgroups (the agent's job cgroup, or the batch system's:
Slurm's job cgroup, a Mesos task's) or descend from one of the job's registered processes.
A process of another user, or a root process outside the job, is refused with the rule
"owner" or "not the job's". The rule is applied to registrations (over HTTP or in process);
processes the agent finds itself (descendants of the job, members of its cgroups) are the
job's by construction.

A refusal is :class:`Refused` (an ``InvalidInput``: HTTP 400) whose message names the pid
and the rule, and whose ``rule`` attribute is a short key.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from coscheduler.model import InvalidInput, shown

PF_KTHREAD = 0x00200000
PID_MAX_LIMIT = 1 << 22  # the kernel's largest pid_max (include/linux/threads.h)


# the rule a batch system's placement overrides (Admission.check's placed_by_batch)
OWN_CGROUP_RULE = "agent's cgroup"
# the process is not (or no longer) running: for a pid read from /proc, one that ended
ENDED_RULE = "not running"


class Refused(InvalidInput):
    """A pid the agent must never move; ``rule`` names the rule that refused it."""

    def __init__(self, pid: object, rule: str, detail: str, where: str = ""):
        super().__init__(f"{where}{detail} (refused by the rule '{rule}'; see monitoring/README.md)")
        self.pid = pid
        self.rule = rule
        self.detail = detail
        self.where = where

    def __reduce__(self):
        return type(self), (self.pid, self.rule, self.detail, self.where)

    def at(self, where: str) -> "Refused":
        """The same refusal, its message prefixed with where it happened (e.g. "job j1: ")."""
        return Refused(self.pid, self.rule, self.detail, where)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], ppid [1], flags [6])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    try:
        return raw[raw.rindex(b")") + 2:].decode().split()
    except ValueError:
        return None


def _tgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def uid_of(pid: int) -> int | None:
    """The real uid of a process (the first field of ``Uid:`` in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def uid_of_job(pids) -> int | None:
    """The real uid of a job's processes: that of the first (lowest pid) still readable."""
    return next((u for u in map(uid_of, sorted(pids)) if u is not None), None)


def _user(uid: int | None) -> str:
    if uid is None:
        return "an unknown user"
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


@dataclass(frozen=True)
class JobContext:
    """What the agent knows of a job when a pid is registered for it (plain data)."""

    job_id: str
    uid: int | None = None                      # its processes' user; None: not known yet
    processes: frozenset[int] = frozenset()     # registered and member processes, alive
    in_cgroups: frozenset[int] = frozenset()    # pids now in its cgroups (ours, the batch system's)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def cgroup_of(pid: int, controller: str | None) -> str | None:
    """The process's cgroup path in the hierarchy of ``controller`` (v1, e.g. ``cpu``) or in
    the unified hierarchy (``None``); None when unreadable."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, ctrls, path = parts
        if controller is None and hid == "0" and ctrls == "":
            return path
        if controller is not None and controller in ctrls.split(","):
            return path
    return None


def mount_root(controller: str | None) -> str | None:
    """The cgroup at the root of this process's mount of the hierarchy (the fourth field of
    /proc/self/mountinfo): "/" on a host, the container's cgroup inside a container."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        if controller is None and rf[0] == "cgroup2":
            return lf[3]
        if controller is not None and rf[0] == "cgroup" and controller in rf[2].split(","):
            return lf[3]
    return None


class Admission:
    """The rule, bound to one agent process (``own_pid``, default this process).

    ``own_cgroup``: the agent's cgroup in the hierarchy it moves processes in (when not
    given, read anew at each check: an operator or systemd may move the agent);
    ``cgroup_of`` reads a process's cgroup (tests swap it); ``top`` is the cgroup at the root
    of the agent's view of the hierarchy, where the own-cgroup rule does not apply (read
    from mountinfo when not given).
    """

    def __init__(self, *, own_pid: int | None = None, controller: str | None = "cpu",
                 own_cgroup: str | None = None, top: str | None = None,
                 cgroup_of: Callable[[int], str | None] | None = None):
        self.own_pid = own_pid if own_pid is not None else os.getpid()
        self.controller = controller
        self._cgroup_of = cgroup_of or (lambda pid: globals()["cgroup_of"](pid, controller))
        self._own_cgroup = own_cgroup
        self.top = {"/", top if top is not None else mount_root(controller)}
        self._ancestors: tuple[float, set[int]] | None = None

    @property
    def own_cgroup(self) -> str | None:
        if self._own_cgroup is not None:
            return self._own_cgroup
        return self._cgroup_of(self.own_pid)

    # -- /proc helpers ----------------------------------------------------------------------
    @staticmethod
    def _ppid(pid: int) -> int | None:
        f = _stat_fields(pid)
        try:
            return int(f[1]) if f else None
        except (ValueError, IndexError):
            return None

    @staticmethod
    def _descends_from(pid: int, ancestor: int) -> bool:
        seen = 0
        p: int | None = pid
        while p is not None and p > 1 and seen < 4096:
            p = Admission._ppid(p)
            if p == ancestor:
                return True
            seen += 1
        return False

    def ancestors(self) -> set[int]:
        """The agent's ancestors (re-read at most every second: a parent that dies
        re-parents the agent; a tick checking many new processes reads them once)."""
        now = time.monotonic()
        if self._ancestors is None or now - self._ancestors[0] > 1.0:
            self._ancestors = (now, self._read_ancestors())
        return self._ancestors[1]

    def _read_ancestors(self) -> set[int]:
        out: set[int] = set()
        p = self._ppid(self.own_pid)
        while p is not None and p > 0 and p not in out and len(out) < 4096:
            out.add(p)
            p = self._ppid(p)
        return out

    # -- the rule -----------------------------------------------------------------------------
    def check(self, pid: object, placed_by_batch: bool = False) -> int:
        """Return ``pid`` if the agent may move it into a job cgroup; raise Refused if not.
        ``placed_by_batch``: the pid is in the job's batch-system cgroup (see the module
        docstring: the own-cgroup rule does not apply)."""
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
            raise Refused(pid, "not a process id",
                          f"{shown(pid)} is not a process id (integers 1..{PID_MAX_LIMIT})")
        if pid > PID_MAX_LIMIT:
            raise Refused(pid, ENDED_RULE, f"pid {shown(pid)} is not a running process")
        if pid == 1:
            raise Refused(pid, "init", "pid 1 (init) is never moved into a job cgroup")
        fields = _stat_fields(pid)
        if not fields or fields[0] in ("Z", "X"):
            raise Refused(pid, ENDED_RULE, f"pid {shown(pid)} is not a running process")
        try:
            ppid, flags = int(fields[1]), int(fields[6])
        except (ValueError, IndexError):
            raise Refused(pid, ENDED_RULE, f"pid {shown(pid)} is not a running process") from None
        if pid == 2 or ppid == 2 or flags & PF_KTHREAD:
            raise Refused(pid, "kernel thread",
                          f"pid {pid} ({_comm(pid)}) is a kernel thread, not a user process")
        tgid = _tgid(pid)
        if tgid is None:
            raise Refused(pid, ENDED_RULE, f"pid {shown(pid)} is not a running process")
        if tgid != pid:
            whose = "of the agent itself" if tgid == self.own_pid else f"of process {tgid}"
            raise Refused(pid, "thread", f"pid {pid} is a thread {whose}, not a process: a move "
                          "would take its whole process; register the process (thread-group "
                          "leader) instead")
        if pid == self.own_pid:
            raise Refused(pid, "agent", f"pid {pid} is the agent itself")
        if pid in self.ancestors():
            raise Refused(pid, "agent's ancestor", f"pid {pid} ({_comm(pid)}) is an ancestor of "
                          f"the agent (pid {self.own_pid})")
        own = self.own_cgroup
        if own is not None and own not in self.top and not placed_by_batch and self._cgroup_of(pid) == own \
                and not self._descends_from(pid, self.own_pid):
            raise Refused(pid, OWN_CGROUP_RULE, f"pid {pid} ({_comm(pid)}) lives in the agent's "
                          f"own cgroup {own} and was not started by the agent")
        return pid

    def check_member(self, pid: int, job: JobContext) -> int:
        """The ownership rule (module docstring): ``pid`` may join ``job``; Refused if not.
        Call after :meth:`check` (which rules out init, kernel threads, the agent)."""
        uid = uid_of(pid)
        if job.uid is not None and uid != job.uid:
            raise Refused(pid, "owner", f"pid {pid} ({_comm(pid)}) runs as {_user(uid)}, but job "
                          f"{job.job_id}'s processes run as {_user(job.uid)}: only the job's own "
                          "processes may be registered")
        if not job.processes or pid in job.processes or pid in job.in_cgroups:
            return pid
        if any(self._descends_from(pid, leader) for leader in job.processes):
            return pid
        listed = sorted(job.processes)
        shown = ", ".join(map(str, listed[:5])) + (", ..." if len(listed) > 5 else "")
        raise Refused(pid, "not the job's", f"pid {pid} ({_comm(pid)}) is neither in job "
                      f"{job.job_id}'s cgroup nor a descendant of its registered process(es) "
                      f"{shown}: only the job's own processes may be registered")

    def check_members(self, pids: Iterable[int], job: JobContext) -> None:
        """:meth:`check_member` for a registration's pids; the first sets the job's uid
        when it is not known yet."""
        for pid in pids:
            self.check_member(pid, job)
            if job.uid is None:
                job = JobContext(job.job_id, uid_of(pid), job.processes, job.in_cgroups)

    def split(self, pids: Iterable[int]) -> tuple[list[int], dict[int, Refused]]:
        """(admitted, refused by pid) for many pids."""
        ok: list[int] = []
        refused: dict[int, Refused] = {}
        for pid in pids:
            try:
                ok.append(self.check(pid))
            except Refused as e:
                refused[pid] = e
        return ok, refused
