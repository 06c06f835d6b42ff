"""The actuator: the only code that writes cgroup files.

One cgroup per job below the agent's root (``<mount>/<root>/<job_id>``), the root itself
carrying the node's capacity when the node is emulated. Like koordlet's resource executor:

* a write cache skips writes whose value did not change (``set_quota``), and the agent
  re-asserts every job's quota on every tick (``verify=True`` reads the kernel's value and
  writes only on drift), which also corrects anything changed behind our back;
* hierarchical writes keep a parent never below a child: the kernel refuses both a child
  above its parent and a parent lowered below a child (EINVAL on v1);
* every path is checked against the root just before the write (:class:`Confined`);
* files the kernel does not offer are counted and tolerated, not fatal.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .cgroupfs import CgroupError, CgroupFS, Confined, Layout, UnsafePath
from .roles import role_files

log = logging.getLogger("monitoring.agent")


@dataclass
class ActuatorStats:
    writes: int = 0
    skipped: int = 0
    drift_corrected: int = 0
    errors: int = 0
    unsupported: int = 0
    moves: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class MoveResult:
    moved: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)


class RoleFiles:
    """Writes the scheduler files of a job's role (roles.py: ``cpu.idle``/``cpu.weight`` on
    v2, ``cpu.shares`` on v1). A file the kernel does not offer (``cpu.idle`` before Linux
    5.15) is logged once and skipped from then on: the quota goes on without it."""

    version = 0
    fs: CgroupFS
    stats: ActuatorStats
    guest_weight: int | None = None  # None: guests in the idle class (roles.py)

    def _role_write(self, path: Path, value: str) -> None:
        raise NotImplementedError

    def _write_role(self, d: Path, role: str | None, verify: bool) -> bool:
        """Bring ``d``'s role files to ``role``'s values; with ``verify`` read each first and
        write only what differs. True when something was written."""
        missing: set[str] = self.__dict__.setdefault("missing_role_files", set())
        wrote = False
        for name, value in role_files(role, self.version, self.guest_weight):
            if name in missing:
                continue
            path = d / name
            if verify:
                try:
                    if self.fs.read(path).strip() == value:
                        continue
                except OSError:
                    pass  # the write below says why
            try:
                self._role_write(path, value)
            except CgroupError as e:
                if isinstance(e.__cause__, FileNotFoundError) and self.fs.is_dir(d):
                    missing.add(name)
                    log.warning("cgroup %s has no %s (kernel or controller without it): CPU quotas "
                                "go on without it; said once", d, name)
                    continue
                raise
            wrote = True
        return wrote


class Actuator(RoleFiles):
    """Common logic; :class:`V1Actuator` and :class:`V2Actuator` know the file formats."""

    version = 0
    quota_file = ""

    def __init__(self, layout: Layout, root_rel: str, fs: CgroupFS | None = None):
        self.layout = layout
        self.fs = fs or CgroupFS()
        self.cpu = Confined(layout.cpu_mount, root_rel)
        # cpuacct mirror (v1 with a separate cpuacct hierarchy): usage counters per job.
        self.acct = (Confined(layout.acct_mount, root_rel)
                     if layout.version == 1 and layout.acct_mount and layout.acct_mount != layout.cpu_mount
                     else None)
        self.stats = ActuatorStats()
        self._cache: dict[Path, str] = {}
        self._lock = threading.Lock()
        self.period_us = 100_000
        self.created_ancestors: list[Path] = []
        self._paths: dict[tuple[str, str, bool], str] = {}
        # quota file -> (quota, kernel text) last read back and found right (set_quota)
        self._verified: dict[str, tuple[int | None, str]] = {}

    def _p(self, job: str, name: str, acct: bool = False) -> str:
        """Path of a job's file, validated once and cached (read on every tick)."""
        key = (job, name, acct)
        p = self._paths.get(key)
        if p is None:
            conf = self.acct if acct else self.cpu
            p = str(conf.check(conf.job(job) / name))
            if len(self._paths) > 100_000:
                self._paths.clear()
            self._paths[key] = p
        return p

    # ---- files --------------------------------------------------------------------------
    def _confined_for(self, path: Path) -> Confined:
        for c in (self.cpu, self.acct):
            if c is not None:
                try:
                    c.check(path)
                    return c
                except UnsafePath:
                    pass
        raise UnsafePath(f"refusing to touch {path}: outside the agent's cgroup roots")

    def _write(self, path: Path, value: str, *, cache: bool = True) -> bool:
        """Write value, unless ``cache`` is set and the cache says the kernel holds it
        already. Quota writes are remembered; process moves (cache=False) are not."""
        self._confined_for(path)
        with self._lock:
            if cache and self._cache.get(path) == value:
                self.stats.skipped += 1
                return False
            try:
                self.fs.write(path, value)
            except FileNotFoundError as e:
                if not self.fs.is_dir(path.parent):
                    raise CgroupError(f"cgroup {path.parent} does not exist") from e
                self.stats.unsupported += 1
                self.stats.last_error = f"{path.name} not offered by the kernel"
                raise CgroupError(f"{path}: the kernel does not offer {path.name}") from e
            except OSError as e:
                self.stats.errors += 1
                self.stats.last_error = f"write {value!r} to {path}: {e.strerror}"
                self._cache.pop(path, None)
                raise CgroupError(self.stats.last_error) from e
            self.stats.writes += 1
            if cache:
                self._cache[path] = value
            return True

    def _read(self, path: Path | str) -> str | None:
        try:
            return self.fs.read(path)
        except OSError:
            return None

    def _read_hot(self, path: str) -> str | None:
        return self.fs.read_hot(path)

    def _mkdir(self, path: Path) -> bool:
        self._confined_for(path)
        return self.fs.mkdir(path)

    def _forget(self, prefix: Path) -> None:
        # By text (a Path keeps its str): ``prefix in p.parents`` built every parent of
        # every cached path, 2 ms a job with 64 jobs and 40 ms with 1,024, in the tick.
        whole = str(prefix)
        under = whole + "/"
        with self._lock:
            for p in [p for p in self._cache if (t := str(p)) == whole or t.startswith(under)]:
                del self._cache[p]
            for k in [k for k in self._verified if k.startswith(under)]:
                del self._verified[k]

    # ---- quota formats (subclasses) -----------------------------------------------------
    def format_quota(self, quota_us: int | None) -> str:
        raise NotImplementedError

    def parse_quota(self, text: str) -> int | None:
        raise NotImplementedError

    def usage_ns(self, job: str) -> int | None:
        raise NotImplementedError

    def throttling(self, job: str) -> tuple[int, float] | None:
        raise NotImplementedError

    def counters(self, job: str, throttling: bool) -> tuple[int | None, tuple[int, float] | None]:
        """A tick's two counters of a job: CPU used (ns) and, when asked, throttling."""
        return self.usage_ns(job), (self.throttling(job) if throttling else None)

    def _prepare_root(self) -> None:
        """Version-specific work after the root exists (v2: enable the cpu controller)."""

    def _read_period(self) -> int:
        return 100_000

    # ---- setup ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Create the root (and its missing ancestors) in every hierarchy we use."""
        for conf in (self.cpu, self.acct):
            if conf is None:
                continue
            if not self.fs.is_dir(conf.mount):
                raise CgroupError(f"cgroup mount {conf.mount} does not exist")
            for anc in conf.ancestors():
                # Creating a missing ancestor is the only thing done above our root.
                if self.fs.mkdir(anc):
                    self.created_ancestors.append(anc)
            self.fs.mkdir(conf.root)
        self._prepare_root()
        self.period_us = self._read_period()

    # ---- jobs ----------------------------------------------------------------------------
    def job_dirs(self) -> list[str]:
        """Job cgroups present below the root (left by us, now or before a crash)."""
        return self.fs.subdirs(self.cpu.root)

    def root_missing(self) -> bool:
        """Whether someone removed our root (an operator's cleanup, a cgroup manager)."""
        return any(conf is not None and not self.fs.is_dir(conf.root) for conf in (self.cpu, self.acct))

    def remake_root(self) -> None:
        """Create the root again as ``setup`` did (its ancestors, the controllers)."""
        for conf in (self.cpu, self.acct):
            if conf is not None:
                for anc in conf.ancestors():
                    self.fs.mkdir(anc)
                self.fs.mkdir(conf.root)
                self._forget(conf.root)
        self._prepare_root()

    def ensure_job(self, job: str) -> None:
        self._mkdir(self.cpu.job(job))
        if self.acct is not None:
            self._mkdir(self.acct.job(job))

    def job_missing(self, job: str) -> bool:
        """Whether one of the job's cgroups is gone (someone removed it once it was empty)."""
        return any(conf is not None and not self.fs.is_dir(conf.job(job)) for conf in (self.cpu, self.acct))

    def remake_job(self, job: str) -> None:
        """Make a job's cgroups again; what was cached of the removed ones is forgotten, so
        its quota and role files are written anew."""
        for conf in (self.cpu, self.acct):
            if conf is not None:
                d = conf.job(job)
                self.fs.forget(str(d) + os.sep)
                self._forget(d)
        self.ensure_job(job)

    def procs_files(self, job: str) -> list[str]:
        """The cgroup.procs files a launcher writes its own pid into to start a job inside
        the job's cgroups (see monitoring.launch.enter_cgroups)."""
        out = [self._p(job, "cgroup.procs")]
        if self.acct is not None:
            out.append(self._p(job, "cgroup.procs", acct=True))
        return out

    def has_job(self, job: str) -> bool:
        return self.fs.is_dir(self.cpu.job(job))

    def job_pids(self, job: str) -> set[int]:
        """The processes in the job's cgroup now (read every tick: one file per job)."""
        text = self._read_procs(self._p(job, "cgroup.procs"))
        return {int(x) for x in text.split()} if text else set()

    def acct_pids(self, job: str) -> set[int] | None:
        if self.acct is None:
            return None
        text = self._read_procs(self._p(job, "cgroup.procs", acct=True))
        return {int(x) for x in text.split()} if text else set()

    def _read_procs(self, path: str) -> str | None:
        return self._read_hot(path)

    def move(self, job: str, pids: list[int] | set[int]) -> MoveResult:
        """Move processes into the job's cgroup. Processes that exited meanwhile are
        reported as gone; in the accounting hierarchy only processes that no other manager
        (a batch system) placed are moved."""
        res = MoveResult()
        target = self.cpu.job(job) / "cgroup.procs"
        for pid in pids:
            try:
                self._write(target, str(pid), cache=False)
                res.moved.append(pid)
                self.stats.moves += 1
            except CgroupError as e:
                cause = e.__cause__
                if isinstance(cause, OSError) and cause.errno == errno.ESRCH:
                    res.gone.append(pid)
                    self.stats.errors -= 1  # a process exiting is not an error
                else:
                    res.failed[pid] = str(e)
                continue
            if self.acct is not None and self._acct_is_free(pid):
                try:
                    self._write(self.acct.job(job) / "cgroup.procs", str(pid), cache=False)
                except CgroupError:
                    pass
        return res

    def _acct_is_free(self, pid: int) -> bool:
        """True when the process sits in the accounting root or in our own tree."""
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                for line in f:
                    _, ctrls, path = line.rstrip("\n").split(":", 2)
                    if "cpuacct" in ctrls.split(","):
                        return path == "/" or path == "/" + self.acct.root_rel or path.startswith(
                            "/" + self.acct.root_rel + "/")
        except OSError:
            return False
        return False

    def read_quota(self, job: str | None) -> int | None | str:
        """The kernel's quota for a job (or the root with None); "?" when unreadable."""
        d = self.cpu.root if job is None else self.cpu.job(job)
        text = self._read(d / self.quota_file)
        if text is None:
            return "?"
        return self.parse_quota(text)

    def set_quota(self, job: str, quota_us: int | None, *, verify: bool = False) -> bool:
        """Set a job's quota. With ``verify`` the kernel's value is read first and written
        only when it differs (the per-tick re-assertion); else the write cache decides."""
        spath = self._p(job, self.quota_file)
        if verify:
            current = self._read_hot(spath)
            # The common tick: the kernel still holds the text we last found right.
            if current is not None and self._verified.get(spath) == (quota_us, current):
                self.stats.skipped += 1
                return False
        path = Path(spath)
        value = self.format_quota(quota_us)
        if verify:
            with self._lock:
                if current is not None and self.parse_quota(current) == quota_us:
                    self._cache[path] = value
                    if len(self._verified) > 100_000:
                        self._verified.clear()
                    self._verified[spath] = (quota_us, current)
                    self.stats.skipped += 1
                    return False
                if self._cache.get(path) == value:
                    self.stats.drift_corrected += 1  # we wrote it; someone changed it since
                self._cache.pop(path, None)
        return self._write(path, value)

    def set_role(self, job: str, role: str | None, *, verify: bool = True) -> bool:
        """A job's share against its siblings when both want a core (roles.py)."""
        return self._write_role(self.cpu.job(job), role, verify)

    def _role_write(self, path: Path, value: str) -> None:
        self._write(path, value, cache=False)

    def set_node_quota(self, quota_us: int | None, jobs: list[str]) -> None:
        """Set the root's quota, lowering any child that would end up above it first
        (bottom-up when shrinking); the caller raises children after (top-down)."""
        if quota_us is not None:
            for job in jobs:
                q = self.read_quota(job)
                # An unlimited child (None) under a limited parent is allowed.
                if isinstance(q, int) and q > quota_us:
                    self.set_quota(job, quota_us)
        path = self.cpu.root / self.quota_file
        self._forget(path)
        self._write(path, self.format_quota(quota_us))

    def remove_job(self, job: str) -> bool:
        """Remove a job's cgroups; False while processes remain (nothing is moved out)."""
        ok = True
        for conf in (self.acct, self.cpu):
            if conf is None:
                continue
            d = conf.job(job)
            conf.check(d)
            self.fs.forget(str(d) + os.sep)
            if self.fs.is_dir(d):
                ok = self.fs.rmdir(d) and ok
            self._forget(d)
        return ok

    def forget_job(self, job: str) -> None:
        """Drop the paths cached for a job that is gone (an agent runs for months)."""
        for key in [k for k in self._paths if k[0] == job]:
            del self._paths[key]

    def remove_root(self) -> bool:
        """Remove the root (only when empty) and the ancestors this run created."""
        ok = True
        for conf in (self.acct, self.cpu):
            if conf is None:
                continue
            if conf.root in self.created_ancestors:
                continue
            if self.fs.is_dir(conf.root):
                ok = self.fs.rmdir(conf.root) and ok
            self._forget(conf.root)
        for anc in reversed(self.created_ancestors):
            # Only ancestors this agent created; they fail harmlessly while other agents use them.
            self.fs.rmdir(anc)
        return ok


class V1Actuator(Actuator):
    """cgroup v1: ``cpu.cfs_quota_us`` (-1 = no limit) with ``cpu.cfs_period_us``."""

    version = 1
    quota_file = "cpu.cfs_quota_us"

    def format_quota(self, quota_us: int | None) -> str:
        return "-1" if quota_us is None else str(int(quota_us))

    def parse_quota(self, text: str) -> int | None:
        v = int(text.strip())
        return None if v < 0 else v

    def _read_procs(self, path: str) -> str | None:
        # Opened afresh: a v1 cgroup.procs kept open answers the list of its previous read
        # (the kernel caches it per open file), a tick late for processes that ended or
        # that another manager moved out.
        return self._read(path)

    def _read_period(self) -> int:
        text = self._read(self.cpu.root / "cpu.cfs_period_us")
        return int(text) if text else 100_000

    def usage_ns(self, job: str) -> int | None:
        if self.acct is not None:
            text = self._read_hot(self._p(job, "cpuacct.usage", acct=True))
        else:  # cpu,cpuacct co-mounted: the counter sits beside the quota
            text = self._read_hot(self._p(job, "cpuacct.usage"))
        return int(text) if text else None

    def throttling(self, job: str) -> tuple[int, float] | None:
        stat = parse_flat_keyed(self._read_hot(self._p(job, "cpu.stat")))
        if "nr_throttled" not in stat:
            return None
        return stat["nr_throttled"], stat.get("throttled_time", 0) / 1e9


class V2Actuator(Actuator):
    """cgroup v2: ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") and ``cpu.stat``."""

    version = 2
    quota_file = "cpu.max"

    def format_quota(self, quota_us: int | None) -> str:
        return f"{'max' if quota_us is None else int(quota_us)} {self.period_us}"

    def parse_quota(self, text: str) -> int | None:
        q = text.split()[0]
        return None if q == "max" else int(q)

    def _read_period(self) -> int:
        text = self._read(self.cpu.root / "cpu.max")
        return int(text.split()[1]) if text and len(text.split()) == 2 else 100_000

    def _prepare_root(self) -> None:
        # Job cgroups get a cpu.max only when the root delegates the cpu controller to them,
        # and the root can offer it only when its parent does. We enable it in the root and in
        # the ancestors this agent created; an existing parent without it is the operator's
        # to fix (systemd: Delegate=yes).
        parent = self.cpu.root.parent
        ctrls = set((self._read(parent / "cgroup.subtree_control") or "").split())
        if "cpu" not in ctrls:
            chain = [a for a in self.cpu.ancestors() if a in self.created_ancestors]
            first = chain[0].parent if chain else parent
            if "cpu" not in set((self._read(first / "cgroup.subtree_control") or "").split()):
                raise CgroupError(
                    f"cgroup v2: the cpu controller is not enabled for children of {first}; "
                    f"run 'echo +cpu > {first}/cgroup.subtree_control' or start the agent with "
                    "systemd Delegate=yes")
            for anc in chain:
                self.fs.write(anc / "cgroup.subtree_control", "+cpu")
        self._write(self.cpu.root / "cgroup.subtree_control", "+cpu", cache=False)

    def usage_ns(self, job: str) -> int | None:
        stat = parse_flat_keyed(self._read_hot(self._p(job, "cpu.stat")))
        return stat["usage_usec"] * 1000 if "usage_usec" in stat else None

    def throttling(self, job: str) -> tuple[int, float] | None:
        return self._throttling(parse_flat_keyed(self._read_hot(self._p(job, "cpu.stat"))))

    @staticmethod
    def _throttling(stat: dict[str, int]) -> tuple[int, float] | None:
        if "nr_throttled" not in stat:
            return None
        return stat["nr_throttled"], stat.get("throttled_usec", 0) / 1e6

    def counters(self, job: str, throttling: bool) -> tuple[int | None, tuple[int, float] | None]:
        # both counters live in cpu.stat: one read
        stat = parse_flat_keyed(self._read_hot(self._p(job, "cpu.stat")))
        usage = stat["usage_usec"] * 1000 if "usage_usec" in stat else None
        return usage, (self._throttling(stat) if throttling else None)


class InPlaceQuota(RoleFiles):
    """cgroup v2 and a batch system's job cgroup: the quota goes into the job's own cgroup
    (``cpu.max``), where the batch system put its tasks. On v2 a process lives in one cgroup
    for every controller, so moving a task into the agent's tree would take it out of
    Slurm's memory limit, accounting and kill: nothing is ever moved here. Only folders
    strictly below the unified mount, found from the job's processes, are written."""

    version = 2

    def __init__(self, mount: Path, fs: CgroupFS | None = None, period_us: int = 100_000,
                 stats: ActuatorStats | None = None):
        self.mount = Path(os.path.normpath(mount))
        self.fs = fs or CgroupFS()
        self.period_us = period_us
        self.stats = stats or ActuatorStats()

    def check(self, d: Path | str) -> Path:
        p = os.path.normpath(d)
        if not p.startswith(str(self.mount) + os.sep):
            raise UnsafePath(f"refusing to touch {p}: not a cgroup below {self.mount}")
        return Path(p)

    def format_quota(self, quota_us: int | None) -> str:
        return f"{'max' if quota_us is None else int(quota_us)} {self.period_us}"

    def read_quota(self, d: Path | str) -> int | None | str:
        try:
            q = self.fs.read(self.check(d) / "cpu.max").split()[0]
        except (OSError, IndexError):
            return "?"
        return None if q == "max" else int(q)

    def _write(self, path: Path, value: str) -> None:
        try:
            self.fs.write(path, value)
        except FileNotFoundError as e:
            if not self.fs.is_dir(path.parent):
                raise CgroupError(f"cgroup {path.parent} does not exist (the job ended?)") from e
            self.stats.unsupported += 1
            raise CgroupError(f"{path.parent} has no {path.name}: the cpu controller is not "
                              f"enabled for it (cgroup.subtree_control of {path.parent.parent})") from e
        except OSError as e:
            self.stats.errors += 1
            self.stats.last_error = f"write {value!r} to {path}: {e.strerror}"
            raise CgroupError(self.stats.last_error) from e
        self.stats.writes += 1

    def set_quota(self, d: Path | str, quota_us: int | None, *, verify: bool = False) -> bool:
        """Write the job cgroup's cpu.max; with ``verify`` only when the kernel's value differs."""
        d = self.check(d)
        if verify and self.read_quota(d) == quota_us:
            self.stats.skipped += 1
            return False
        self._write(d / "cpu.max", self.format_quota(quota_us))
        return True

    def set_role(self, d: Path | str, role: str | None, *, verify: bool = True) -> bool:
        """The job cgroup's ``cpu.idle`` (1 for a guest: it yields to its host at once) and
        ``cpu.weight`` (a host's share against its siblings), roles.py."""
        return self._write_role(self.check(d), role, verify)

    def _role_write(self, path: Path, value: str) -> None:
        self._write(path, value)


def parse_flat_keyed(text: str | None) -> dict[str, int]:
    """Parse ``key value`` lines (cpu.stat)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def make_actuator(layout: Layout, root_rel: str, fs: CgroupFS | None = None) -> Actuator:
    cls = V1Actuator if layout.version == 1 else V2Actuator
    return cls(layout, root_rel, fs)
