"""Where the cgroup CPU controller lives on this node, and the only door to its files.

Two facts drive this module:

* A node runs either cgroup v1 (one hierarchy per controller, ``cpu.cfs_quota_us``) or
  cgroup v2 (one unified hierarchy, ``cpu.max``); the agent finds out at start from
  ``/proc/self/mountinfo`` (:func:`detect_layout`).
* The agent must never write outside its own cgroup root. Every path it writes is built by
  :class:`Confined` from validated names and checked again just before the write, so a
  job id such as ``../../x`` can never reach the kernel.

:class:`CgroupFS` holds the raw file operations; tests swap it for a mimic of the v2 files
when the kernel does not offer a real cgroup2 ``cpu`` controller.
"""

from __future__ import annotations

import errno
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

# Names of cgroups the agent creates: the same alphabet as job ids, never "." or "..".
# (fullmatch, not "$": "$" also matches before a final newline, and "a\n" is no name.)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,127}")
# Files the kernel puts in every cgroup directory: a job cgroup by such a name would be a
# file, not a folder. v1 and v2 interface files are "tasks", "notify_on_release",
# "release_agent", and "<controller or cgroup>.<anything>".
_INTERFACE_FILES = {"tasks", "notify_on_release", "release_agent"}
_INTERFACE_PREFIXES = {"cgroup", "cpu", "cpuacct", "cpuset", "memory", "memsw", "io", "blkio", "pids",
                       "devices", "freezer", "net_cls", "net_prio", "perf_event", "hugetlb",
                       "rdma", "misc", "irq", "kmem"}


class CgroupError(RuntimeError):
    """A cgroup operation failed or the node lacks what the agent needs."""


class UnsafePath(CgroupError):
    """A path would leave the agent's own cgroup root; nothing was written."""


def validate_cgroup_name(name: object, what: str = "cgroup name") -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or name in (".", ".."):
        raise UnsafePath(f"{what} {name!r} is not a safe cgroup name (1-128 letters, digits, "
                         "'_.:+-', starting with a letter or digit)")
    if name in _INTERFACE_FILES or name.split(".", 1)[0] in _INTERFACE_PREFIXES and "." in name:
        raise UnsafePath(f"{what} {name!r} is the name of a cgroup interface file (such as "
                         "'tasks', 'cgroup.procs' or 'cpu.max'), not usable for a job's cgroup")
    return name


def validate_root(rel: object) -> str:
    """A cgroup root such as ``cosched`` or ``cosched/n1``: relative, each part a safe name."""
    if not isinstance(rel, str) or not rel.strip("/"):
        raise UnsafePath(f"cgroup root {rel!r} must be a relative path such as 'cosched/n1'")
    parts = rel.strip("/").split("/")
    for p in parts:
        validate_cgroup_name(p, f"cgroup root part in {rel!r}")
    return "/".join(parts)


@dataclass(frozen=True)
class Layout:
    """The cgroup hierarchies the agent uses.

    v1: ``cpu_mount`` is the hierarchy holding the ``cpu`` controller; ``acct_mount`` the one
    holding ``cpuacct`` (the same path when they are co-mounted, None when absent).
    v2: ``cpu_mount`` is the unified mount; ``acct_mount`` is the same path (``cpu.stat``).
    """

    version: int
    cpu_mount: Path
    acct_mount: Path | None

    def describe(self) -> dict:
        return {"version": self.version, "cpu_mount": str(self.cpu_mount),
                "acct_mount": str(self.acct_mount) if self.acct_mount else None}


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) for every line of /proc/self/mountinfo."""
    out = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        lf, rf = left.split(), right.split()
        if len(lf) < 5 or len(rf) < 3:
            continue
        out.append((_unescape(lf[4]), rf[0], set(rf[2].split(","))))
    return out


def detect_layout(mountinfo: str | None = None, prefer: int | None = None) -> Layout:
    """Pick the hierarchy that offers CPU quotas: v1 ``cpu`` if mounted, else a cgroup2
    mount whose ``cgroup.controllers`` lists ``cpu``. ``prefer`` forces one version."""
    if mountinfo is None:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
    mounts = parse_mountinfo(mountinfo)
    v1_cpu = next((Path(m) for m, t, o in mounts if t == "cgroup" and "cpu" in o), None)
    v1_acct = next((Path(m) for m, t, o in mounts if t == "cgroup" and "cpuacct" in o), None)
    v2 = [Path(m) for m, t, _ in mounts if t == "cgroup2"]
    if prefer in (None, 1) and v1_cpu is not None:
        return Layout(1, v1_cpu, v1_acct)
    if prefer in (None, 2):
        for m in v2:
            if "cpu" in read_controllers(m):
                return Layout(2, m, m)
    where = ", ".join(str(m) for m in v2) or "none"
    raise CgroupError(
        "no cgroup CPU controller usable for quotas: "
        f"{'no v1 cpu hierarchy is mounted' if v1_cpu is None else 'v1 not wanted'}, and no "
        f"cgroup2 mount lists 'cpu' in cgroup.controllers (cgroup2 mounts: {where})"
    )


def read_controllers(mount: Path) -> set[str]:
    try:
        return set((mount / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


# A /proc or cgroup list (cgroup.procs, children, cpu.stat) is a kernel seq_file: one read
# returns at most one page of it (4 KB here) whatever buffer is asked for, cut at a line.
# A read shorter than half a page therefore ended the file (the lines read here are far
# shorter than half a page); a longer one may have ended a page only, and is read on.
ONE_READ_ENDS_BELOW = 2048


class OpenFiles:
    """Files kept open and re-read from offset 0 with pread: cgroup and /proc files are
    generated anew on each read, and an open costs more than the read itself. The agent
    reads the same few hundred files every tick. A /proc/PID file kept open stays bound to
    that process, so a reused pid can never be mistaken for the old one.

    The files of one process (``/proc/PID/...``) are indexed by that prefix: a job whose
    processes come and go forgets hundreds of them a tick, and a scan of every open file
    per process took most of such a tick."""

    def __init__(self, max_open: int = 2048):
        self.max_open = max_open
        self._fds: dict[str, int] = {}
        self._by_process: dict[str, set[str]] = {}   # "/proc/PID/" -> its open paths
        self._lock = threading.Lock()

    @staticmethod
    def _process_prefix(path: str) -> str | None:
        if not path.startswith("/proc/"):
            return None
        end = path.find("/", 6)
        return path[:end + 1] if end > 6 else None

    def _close(self, path: str) -> None:
        os.close(self._fds.pop(path))
        prefix = self._process_prefix(path)
        if prefix is not None:
            paths = self._by_process.get(prefix)
            if paths is not None:
                paths.discard(path)
                if not paths:
                    del self._by_process[prefix]

    def read(self, path: str) -> bytes | None:
        with self._lock:
            fd = self._fds.get(path)
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    return None
                if len(self._fds) >= self.max_open:
                    self._close(next(iter(self._fds)))  # oldest first (dicts keep insertion order)
                self._fds[path] = fd
                prefix = self._process_prefix(path)
                if prefix is not None:
                    self._by_process.setdefault(prefix, set()).add(path)
            try:
                data = os.pread(fd, 8192, 0)
                if len(data) >= ONE_READ_ENDS_BELOW:   # many pids: read on to the end
                    chunks, off = [data], len(data)
                    while b := os.pread(fd, 65536, off):
                        chunks.append(b)
                        off += len(b)
                    data = b"".join(chunks)
            except OSError:
                data = None
            if not data:  # the process or cgroup is gone: reopen next time
                self._close(path)
                return None
            return data

    def forget(self, prefix: str) -> None:
        """Close the files whose path starts with ``prefix`` ("/proc/PID/": at once)."""
        with self._lock:
            if self._process_prefix(prefix) == prefix:   # one process: its index
                paths = list(self._by_process.get(prefix, ()))
            else:
                paths = [p for p in self._fds if p.startswith(prefix)]
            for path in paths:
                self._close(path)

    def close(self) -> None:
        self.forget("")

    @property
    def open_count(self) -> int:   # (no __len__: an empty set of files must not read as false)
        return len(self._fds)


def raise_open_file_limit(want: int = 65536) -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard limit; returns the soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class CgroupFS:
    """Raw file operations on cgroup files. Writes never create files (O_CREAT is not set):
    a missing interface file means the kernel does not support it."""

    def __init__(self) -> None:
        self.open_files = OpenFiles()

    def read_hot(self, path: Path | str) -> str | None:
        """A file read on every tick, through the kept-open files; None when unreadable."""
        data = self.open_files.read(str(path))
        return None if data is None else data.decode()

    def forget(self, prefix: Path | str) -> None:
        self.open_files.forget(str(prefix))

    def read(self, path: Path | str) -> str:
        # bare system calls: several times cheaper than open() on the per-tick hot path
        fd = os.open(path, os.O_RDONLY)
        try:
            b = os.read(fd, 8192)  # small buffer: a large one costs more than the read
            if len(b) < ONE_READ_ENDS_BELOW:
                return b.decode()
            chunks = [b]
            while b := os.read(fd, 8192):
                chunks.append(b)
            return b"".join(chunks).decode()
        finally:
            os.close(fd)

    def write(self, path: Path, value: str) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)

    def mkdir(self, path: Path) -> bool:
        """Create one cgroup; False when it already existed."""
        try:
            os.mkdir(path)
            return True
        except FileExistsError:
            return False

    def rmdir(self, path: Path) -> bool:
        """Remove one empty cgroup; False when it had processes or children (EBUSY)."""
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError as e:
            if e.errno in (errno.EBUSY, errno.ENOTEMPTY):
                return False
            raise

    def is_dir(self, path: Path) -> bool:
        return os.path.isdir(path)

    def subdirs(self, path: Path) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []


class Confined:
    """Paths under one cgroup root, with a check on every path that leaves it."""

    def __init__(self, mount: Path, root_rel: str):
        self.mount = Path(os.path.normpath(mount))
        self.root_rel = validate_root(root_rel)
        self.root = self.mount / self.root_rel

    def job(self, name: str) -> Path:
        return self.root / validate_cgroup_name(name, "job cgroup name")

    def check(self, path: Path) -> Path:
        """Refuse any path that is not the root or below it (after normalisation)."""
        p = os.path.normpath(path)
        root = str(self.root)
        if p != root and not p.startswith(root + os.sep):
            raise UnsafePath(f"refusing to touch {p}: outside the agent's cgroup root {root}")
        return Path(p)

    def ancestors(self) -> list[Path]:
        """The root's missing-or-present ancestors below the mount, top first (not the root)."""
        parts = self.root_rel.split("/")
        return [self.mount.joinpath(*parts[:i]) for i in range(1, len(parts))]


# ---- cgroup v2 as Slurm lays it out --------------------------------------------------------
# Slurm's cgroup/v2 puts a job's tasks in ``<scope>/<job>/step_<id>/user/task_<n>`` and
# slurmstepd itself in ``<scope>/<job>/step_<id>/slurm``. The job folder is ``job_<id>``
# up to 25.11; 26.05 names it by the job's SLUID unless CgroupJobIdPaths=yes, and the scope
# differs with systemd, without it, and per node under MULTIPLE_SLURMD. So the job's
# cgroup is read from where its processes are (/proc/PID/cgroup), never built from a name:
# it is the folder above the first ``step_*`` folder.
_STEP_RE = re.compile(r"step_(?:batch|extern|interactive|\d+(?:\.\d+)?)")


def unified_path(proc_cgroup: str) -> str | None:
    """The cgroup v2 path in a /proc/PID/cgroup text (its ``0::PATH`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:] or "/"
    return None


def slurm_job_cgroup_v2(path: str) -> str | None:
    """The Slurm job's cgroup for a process in ``path`` (a v2 cgroup path), None when the
    process is not in a Slurm step: ``/system.slice/slurmstepd.scope/job_5/step_batch/user/
    task_0`` -> ``/system.slice/slurmstepd.scope/job_5``."""
    parts = [p for p in path.split("/") if p]
    for i, p in enumerate(parts):
        if i >= 1 and _STEP_RE.fullmatch(p):
            return "/" + "/".join(parts[:i])
    return None


def slurm_jobs_v2(procs: "list[tuple[str, dict[str, str]]]", node: str | None = None) -> dict[str, str]:
    """Slurm job id -> job cgroup path, from (v2 cgroup path, environment) of processes.

    The job id comes from a task's ``SLURM_JOB_ID`` (slurmstepd has none: a job is found
    once one of its tasks runs). ``node``: only jobs whose tasks say ``SLURMD_NODENAME=node``
    (several slurmd on one host). A job cgroup claimed by two job ids is dropped (a
    process's environment is the job's to change)."""
    found: dict[str, str] = {}
    clash: set[str] = set()
    for path, env in procs:
        job_cg = slurm_job_cgroup_v2(path)
        jid = env.get("SLURM_JOB_ID", "")
        if job_cg is None or not jid.isdigit():
            continue
        if node is not None and env.get("SLURMD_NODENAME") != node:
            continue
        if found.get(jid, job_cg) != job_cg or job_cg in {v for k, v in found.items() if k != jid}:
            clash.add(job_cg)
            clash.add(found.get(jid, job_cg))
        found.setdefault(jid, job_cg)
    return {k: v for k, v in found.items() if v not in clash}
