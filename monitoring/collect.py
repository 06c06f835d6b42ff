"""Collect: what each job's processes are doing (psutil, cgroup counters, progress files).

Nothing here decides or writes: it reads ``/proc``, cgroup stat files and progress files
and turns successive readings into rates. The rate arithmetic is in small pure functions.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import psutil

from coscheduler import hostlist
from coscheduler.progress import Progress

from .cgroupfs import ONE_READ_ENDS_BELOW, OpenFiles, slurm_job_cgroup_v2, slurm_jobs_v2, unified_path


# ---- processes ---------------------------------------------------------------------------
def _children_of(pid: int, threads: int = 0, files: "OpenFiles | None" = None) -> list[int]:
    """Direct children via /proc/PID/task/TID/children (cheap: no scan of all processes).
    A single-threaded process has one task, named by its pid: no directory listing."""
    out: list[int] = []
    if threads == 1 and _HAVE_CHILDREN_FILE:
        path = f"/proc/{pid}/task/{pid}/children"
        raw = files.read(path) if files is not None else read_small(path)
        return [int(x) for x in raw.split()] if raw else out
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        raw = read_small(f"/proc/{pid}/task/{tid}/children")
        if raw is None:
            if not _HAVE_CHILDREN_FILE:
                # Kernel without CONFIG_PROC_CHILDREN: fall back to psutil's scan.
                try:
                    return [c.pid for c in psutil.Process(pid).children(recursive=False)]
                except psutil.Error:
                    return out
            continue
        out.extend(int(x) for x in raw.split())
    return out


_HAVE_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def descendants(pids: Iterable[int]) -> set[int]:
    """All live descendants of ``pids`` (the pids themselves excluded), like
    ``psutil.Process.children(recursive=True)`` but reading only the job's own processes."""
    seen: set[int] = set()
    todo = list(pids)
    roots = set(todo)
    while todo:
        pid = todo.pop()
        for c in _children_of(pid):
            if c not in seen and c not in roots:
                seen.add(c)
                todo.append(c)
    return seen


def read_small(path: str, limit: int = 1 << 22) -> bytes | None:
    """A /proc or cgroup file with bare system calls (several times cheaper than ``open()``;
    the agent reads about a thousand such files per tick with 64 jobs): one read when it is
    short, else on to its end (a long list comes a page per read), at most ``limit`` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 8192)
        if len(data) < ONE_READ_ENDS_BELOW:
            return data
        chunks, size = [data], len(data)
        while size < limit and (b := os.read(fd, min(65536, limit - size))):
            chunks.append(b)
            size += len(b)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


_CLK_TCK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_BOOT = psutil.boot_time()


@dataclass(slots=True)
class ProcStat:
    """What one read of /proc/PID/stat tells: enough for CPU, liveness, age and RSS."""

    pid: int
    state: str
    cpu_s: float
    start_time: float  # epoch seconds
    rss_bytes: int
    threads: int
    # Clock ticks from boot to the process's start: what tells it from a later process
    # given the same number. The epoch start time above is computed from the boot time
    # /proc/stat gives in whole seconds, which moves by one when the clock is adjusted.
    start_ticks: int = 0


def proc_stat(pid: int, files: "OpenFiles | None" = None) -> ProcStat | None:
    """Parse /proc/PID/stat (proc(5)); None when the process is gone or a zombie."""
    path = f"/proc/{pid}/stat"
    raw = files.read(path) if files is not None else read_small(path)
    if not raw:
        return None
    try:
        # the command name (field 2) may hold spaces and parentheses: split after the last ')'
        f = raw[raw.rindex(b")") + 2:].split()
        state = f[0].decode()
        if state in ("Z", "X"):
            return None
        rss = int(f[21]) * _PAGE
        if rss == 0:
            # Seen once on a 6.18 kernel for a live, busy Python process: the counter in
            # stat is approximate (per-CPU since 6.2); smaps_rollup walks the page tables.
            rss = proc_rss_exact(pid)
        ticks = int(f[19])
        return ProcStat(pid, state, (int(f[11]) + int(f[12])) / _CLK_TCK,
                        _BOOT + ticks / _CLK_TCK, rss, int(f[17]), ticks)
    except (ValueError, IndexError):
        return None


def proc_rss_exact(pid: int) -> int:
    """Resident bytes from /proc/PID/smaps_rollup (exact, but costs a page-table walk);
    0 when unreadable."""
    raw = read_small(f"/proc/{pid}/smaps_rollup")
    for line in (raw or b"").split(b"\n"):
        if line.startswith(b"Rss:"):
            try:
                return int(line.split()[1]) * 1024
            except (ValueError, IndexError):
                return 0
    return 0


def proc_io(pid: int, files: "OpenFiles | None" = None) -> tuple[int, int]:
    """(read_bytes, write_bytes) from /proc/PID/io; zeros when unreadable."""
    path = f"/proc/{pid}/io"
    raw = files.read(path) if files is not None else read_small(path)
    rd = wr = 0
    if raw:
        for line in raw.split(b"\n"):
            if line.startswith(b"read_bytes:"):
                rd = int(line[11:])
            elif line.startswith(b"write_bytes:"):
                wr = int(line[12:])
    return rd, wr


def alive(pid: int) -> bool:
    """True for a live, non-zombie process."""
    return proc_stat(pid) is not None


def start_times(pids: Iterable[int], files: "OpenFiles | None" = None) -> dict[int, int]:
    """The start of each live process among ``pids``, in clock ticks since boot (what tells
    a process from a later one given the same number; unlike an epoch time, it never
    changes, in this agent or the next one)."""
    out = {}
    for pid in pids:
        st = proc_stat(pid, files)
        if st is not None:
            out[pid] = st.start_ticks
    return out


def start_ticks(pid: int) -> int | None:
    """The start of one live process in clock ticks since boot; None when it is gone."""
    st = proc_stat(pid)
    return None if st is None else st.start_ticks


def still_the_same(pid_starts: Mapping[int, int], files: "OpenFiles | None" = None) -> set[int]:
    """The pids whose process is still the one that had the recorded start time (through
    ``files``, the tick's open /proc files, when given: the same reads the tick makes)."""
    return {pid for pid, t in start_times(pid_starts, files).items() if pid_starts[pid] == t}


@dataclass
class ProcTotals:
    """Sums over a job's live processes at one instant."""

    nprocs: int = 0
    rss_bytes: int = 0
    io_read_bytes: int = 0
    io_write_bytes: int = 0
    cpu_s_by_pid: dict[int, float] = field(default_factory=dict)
    create_by_pid: dict[int, float] = field(default_factory=dict)


def job_processes(candidates: Iterable[int], files: "OpenFiles | None" = None) -> dict[int, ProcStat]:
    """The live processes among ``candidates`` and all their live descendants (what
    ``psutil.Process.children(recursive=True)`` finds, reading only the job's processes)."""
    found: dict[int, ProcStat] = {}
    todo = list(candidates)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        st = proc_stat(pid, files)
        if st is None:
            if files is not None:   # gone (or a zombie): close its other files now
                files.forget(f"/proc/{pid}/")
            continue
        found[pid] = st
        todo.extend(c for c in _children_of(pid, st.threads, files) if c not in found)
    return found


def totals(procs: dict[int, ProcStat], io: dict[int, tuple[int, int]] | None = None) -> ProcTotals:
    """Sums over the processes; I/O bytes from ``io`` (read less often than the rest)."""
    t = ProcTotals()
    for pid, st in procs.items():
        t.nprocs += 1
        t.rss_bytes += st.rss_bytes
        t.cpu_s_by_pid[pid] = st.cpu_s
        t.create_by_pid[pid] = st.start_time
        if io is not None and pid in io:
            rd, wr = io[pid]
            t.io_read_bytes += rd
            t.io_write_bytes += wr
    return t


# ---- rates (pure) ------------------------------------------------------------------------
def per_process_cpu_delta(prev: dict[int, float], cur: dict[int, float], created: dict[int, float],
                     prev_time: float) -> float:
    """CPU seconds spent between two readings, from per-process times.

    A process present in both counts its increase; one that appeared since counts its whole
    time if it was created after the previous reading; one that vanished is lost (its last
    interval cannot be seen any more): the cgroup counter, when it covers the job, has no
    such gap and is preferred.
    """
    total = 0.0
    for pid, cpu in cur.items():
        if pid in prev:
            total += max(0.0, cpu - prev[pid])
        elif created.get(pid, 0.0) >= prev_time:
            total += cpu
    return total


def cpu_percent(cpu_s: float, wall_s: float, cores: float) -> float | None:
    """CPU use as a percentage of the job's allocated cores (100 = all busy)."""
    if wall_s <= 0 or cores <= 0:
        return None
    return max(0.0, 100.0 * cpu_s / wall_s / cores)


def progress_rate(history: list[Progress], now: float, window_s: float = 60.0) -> float | None:
    """Tasks per second from successive progress records (oldest first).

    Uses the records of the last ``window_s`` plus the one just before it, so the rate
    follows recent progress; when no record has come for longer than the window, the rate
    is measured up to ``now`` and so decays towards 0 for a stalled job. None until two
    records with different times exist.
    """
    recs = sorted({r.time: r for r in history}.values(), key=lambda r: r.time)
    if len(recs) < 2:
        return None
    start = 0
    for i, r in enumerate(recs):
        if r.time >= recs[-1].time - window_s:
            start = max(0, i - 1)
            break
    first, last = recs[start], recs[-1]
    end = now if now - last.time > window_s else last.time
    span = end - first.time
    if span <= 0:
        return None
    return max(0.0, (last.done - first.done) / span)


# ---- batch-system discovery ----------------------------------------------------------------
def read_environ(path: str, keys: tuple[bytes, ...]) -> dict[str, str] | None:
    """The variables ``keys`` of a process's environment (``/proc/PID/environ``, read up to
    1 MiB), or None when it cannot be read (the process is gone, or not ours to read)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(1 << 20)
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k in keys:
            env[k.decode()] = v.decode(errors="replace")
    return env


def discover_slurm_jobs(acct_mount: Path, node: str | None = None) -> dict[str, Path]:
    """Slurm job cgroups under a cpuacct (v1) or unified (v2) hierarchy, by Slurm job id.

    Slurm 22.05 (task/cgroup, v1) makes ``cpuacct/slurm[_NODE]/uid_U/job_ID``; on v2 it
    makes ``system.slice/slurmstepd.scope/job_ID``. Read only. ``node``: only that
    node's ``slurm_NODE`` folder (several slurmd on one host, MULTIPLE_SLURMD, each make
    their own; an agent per emulated node must see only its node's jobs).
    """
    found: dict[str, Path] = {}
    candidates: list[Path] = []
    try:
        for top in acct_mount.iterdir():
            if node is not None:
                if top.name == f"slurm_{node}":
                    for uid in top.glob("uid_*"):
                        candidates.extend(uid.glob("job_*"))
                continue
            if top.name == "slurm" or top.name.startswith("slurm_"):
                for uid in top.glob("uid_*"):
                    candidates.extend(uid.glob("job_*"))
        if node is None:
            candidates.extend((acct_mount / "system.slice" / "slurmstepd.scope").glob("job_*"))
    except OSError:
        return found
    for d in candidates:
        jid = d.name[4:]
        if d.is_dir() and jid.isascii() and jid.isdigit():
            found[jid] = d
    return found


def discover_slurm_jobs_v2(mount: Path, node: str | None = None,
                           proc: str = "/proc", known: frozenset[str] | set[str] = frozenset()
                           ) -> dict[str, Path]:
    """Slurm job cgroups on cgroup v2, by job id, read from where the jobs' processes are
    (/proc/PID/cgroup) and what their environment says (SLURM_JOB_ID, SLURMD_NODENAME);
    see cgroupfs.slurm_jobs_v2. Read only. ``known``: job cgroups (paths as returned)
    already followed, whose processes' environments are not read again (a job's user sets
    them, up to about 1 MiB each; read every tick for every task, they cost the most)."""
    entries = []
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return {}
    base = str(mount)
    for pid in pids:
        raw = read_small(f"{proc}/{pid}/cgroup")
        path = unified_path(raw.decode(errors="replace")) if raw else None
        job_cg = slurm_job_cgroup_v2(path) if path is not None else None
        if job_cg is None or (known and os.path.normpath(base + job_cg) in known):
            continue
        env = read_environ(f"{proc}/{pid}/environ", (b"SLURM_JOB_ID", b"SLURMD_NODENAME"))
        if env is None:
            continue
        entries.append((path, env))
    out = {}
    for jid, rel in slurm_jobs_v2(entries, node).items():
        d = Path(os.path.normpath(str(mount) + rel))
        if d.is_dir():
            out[jid] = d
    return out


def scope_folders_v2(scopes: "set[Path]") -> set[str] | None:
    """The folders in Slurm's step scopes on cgroup v2 (one per job; ``system`` holds
    slurmstepd itself), as normalized paths; None when a scope cannot be listed."""
    out: set[str] = set()
    for scope in scopes:
        try:
            with os.scandir(scope) as it:
                out.update(os.path.normpath(e.path) for e in it
                           if e.name != "system" and e.is_dir(follow_symlinks=False))
        except OSError:
            return None
    return out


def slurm_scopes_v2(mount: Path) -> set[Path]:
    """Where Slurm usually makes its step scope on cgroup v2: ``system.slice/slurmstepd.scope``
    (``NODE_slurmstepd.scope`` with several slurmd on one host)."""
    try:
        return set((mount / "system.slice").glob("*slurmstepd.scope"))
    except OSError:
        return set()


def cgroup_tree_pids(d: Path) -> set[int]:
    """Every pid in a cgroup and its descendants (a Slurm job keeps them in step cgroups)."""
    pids: set[int] = set()
    for root, _dirs, files in os.walk(d):
        if "cgroup.procs" in files:
            try:
                with open(os.path.join(root, "cgroup.procs")) as f:
                    pids.update(int(x) for x in f.read().split())
            except OSError:
                pass
    return pids


def batch_usage_ns(d: Path) -> int | None:
    """CPU time of a batch-system cgroup: v1 ``cpuacct.usage`` or v2 ``cpu.stat``."""
    raw = read_small(str(d / "cpuacct.usage"))
    if raw:
        return int(raw)
    raw = read_small(str(d / "cpu.stat"))
    for line in (raw or b"").splitlines():
        if line.startswith(b"usage_usec "):
            return int(line.split()[1]) * 1000
    return None


def cpuset_cores(d: Path) -> int | None:
    """Cores in a cpuset list such as ``0-3,8`` read from ``cpuset.cpus`` (None if absent)."""
    for name in ("cpuset.cpus.effective", "cpuset.cpus"):
        try:
            text = (d / name).read_text().strip()
        except OSError:
            continue
        if text:
            return count_cpu_list(text)
    return None


def cpus_of_node(cpus_per_node: str, nodelist: str, node: str) -> int | None:
    """This node's CPUs from the job-level ``SLURM_JOB_CPUS_PER_NODE`` (``4(x2),2``) and
    ``SLURM_JOB_NODELIST``; None when the node is not in the list."""
    # Both come from the environment of the job's processes, which its user sets: a
    # count or a range past any cluster's size is refused before anything is built.
    counts: list[tuple[int, int]] = []     # (CPUs, nodes that have them)
    total = 0
    for item in cpus_per_node.split(","):
        m = re.fullmatch(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?", item.strip())
        if not m:
            return None
        counts.append((int(m.group(1)), int(m.group(2) or 1)))
        total += counts[-1][1]
        if total > hostlist.MAX_HOSTS:
            return None
    try:
        nodes = hostlist.expand(nodelist)
    except hostlist.HostListError:
        return None
    if node not in nodes or len(nodes) != total:
        return None
    at = nodes.index(node)
    for cpus, n in counts:
        if at < n:
            return cpus
        at -= n
    return None


def slurm_cpus_from_environ(pids) -> int | None:
    """CPUs Slurm gave a job on this node, from the environment of its processes (used
    when the job has no cpuset to count: ``ConstrainCores=no``, e.g. emulated nodes that
    claim more CPUs than the host has). The job-level ``SLURM_JOB_CPUS_PER_NODE`` for this
    node (``SLURMD_NODENAME`` in ``SLURM_JOB_NODELIST``) first: on 24.11 and newer a step's
    task sees only the step's CPUs in ``SLURM_CPUS_ON_NODE`` (a node that runs only an
    ``srun`` step of a 4-CPU allocation would read 1); else the largest
    ``SLURM_CPUS_ON_NODE`` any of its processes sees."""
    best = None
    for pid in sorted(pids):
        env = read_environ(f"/proc/{pid}/environ", (b"SLURM_CPUS_ON_NODE", b"SLURM_JOB_CPUS_PER_NODE",
                                                    b"SLURM_JOB_NODELIST", b"SLURMD_NODENAME"))
        if env is None:
            continue
        if {"SLURM_JOB_CPUS_PER_NODE", "SLURM_JOB_NODELIST", "SLURMD_NODENAME"} <= set(env):
            n = cpus_of_node(env["SLURM_JOB_CPUS_PER_NODE"], env["SLURM_JOB_NODELIST"],
                             env["SLURMD_NODENAME"])
            if n is not None and 0 < n <= 4096:
                return n
        value = env.get("SLURM_CPUS_ON_NODE", "")
        if value.isascii() and value.isdigit() and 0 < int(value) <= 4096:
            best = max(best or 0, int(value))
    return best


def count_cpu_list(text: str) -> int | None:
    n = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            n += int(b) - int(a) + 1
        else:
            int(part)
            n += 1
    return n or None
