"""Measure interference for real: the testbed's stage programs under real cgroup CPU quotas.

Every run is a real process (``python -m coscheduler.workloads.stage ... --report``) pinned to
one CPU, in its own cgroup under the cpu controller with its own quota, started by a shell
that moves itself into the cgroup before it execs the program (so no instruction of it
runs outside the quota). What is measured is the program's own report: wall-clock seconds
and kernel CPU seconds.

Experiments (each point repeated; every measured run comes right after a reference run of
the same probe alone at full quota, and its slowdown is the ratio of the two, so that the
drifting load of a shared machine hits both alike; ratios are summarised by medians):

- ``quota``: a probe alone at quotas from 100 % down to 10 % of its CPU;
- ``pairs``: a target probe while another probe runs in a loop beside it, either on the
  same CPU with quotas that split it (the host/guest arrangement of co-allocation) or on
  the other CPU with no quota (contention that CPU quotas do not control: the disk, the
  memory bandwidth);
- ``shared pairs``: a target beside one or more copies of another probe, all free to run
  on every CPU of the machine, no quota: whether the kernel spreads them over idle cores
  (a host and its guests share the host's cores, not one pinned core each);
- ``idle pairs``: the same-CPU arrangement with one of the two in the idle scheduling
  class, as the agent places a guest (cgroup v2 ``cpu.idle = 1``; on cgroup v1, which has
  no idle class, ``cpu.shares = 2``, the smallest weight, which the kernel also gives the
  idle class).

The calibration cgroups get a high ``cpu.shares`` (default 65536, 64x a default job's): on a
machine shared with other work, a quota only shows when the program could otherwise use
the whole CPU, and the 1-minute load average is recorded at every round. Runs are short
(one to a few seconds each): a quick calibration takes about half a minute, the waiting
hosts alone (``Settings.waiting``) about four minutes, a full one about 17 minutes on the
2-core development machine.

Needs root and a writable cgroup cpu controller (v1 ``cpu.cfs_quota_us`` or v2
``cpu.max``); ``CalibrationUnavailable`` says what is missing. Every cgroup made is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

_V1 = Path("/sys/fs/cgroup/cpu")
_V2 = Path("/sys/fs/cgroup")
_PREFIX = "cosched-calib-"
PERIOD_US = 100_000
# cgroup v1 has no idle class: the smallest cpu.shares, the weight the kernel gives it.
IDLE_SHARES = 2


class CalibrationUnavailable(RuntimeError):
    """This machine (or user) cannot measure quotas; the message says what is needed."""


@dataclass(frozen=True)
class Probe:
    """A stage program as a probe: one worker on one CPU, sized to run about a second."""

    name: str
    workflow: str
    stage: str
    tasks: int
    scale: float
    what: str

    def argv(self, workdir: str) -> list[str]:
        return [sys.executable, "-m", "coscheduler.workloads.stage", "--workflow", self.workflow,
                "--stage", self.stage, "--tasks", str(self.tasks), "--workers", "1",
                "--scale", repr(self.scale), "--workdir", workdir, "--report"]


# The testbed's own programs, each sized so that one kind of work dominates (about 1-2 s
# alone on the development machine).
PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("cpu", "blast", "blastall", 8, 0.01,
          "BLAST map: arithmetic over an in-cache database shard (CPU-bound)"),
    Probe("mem", "synthetic", "compute", 8, 0.01,
          "Synthetic compute: adds and multiplies streamed over an 80 MB array (memory-bound)"),
    Probe("io", "montage", "mProject", 400, 0.0001,
          "Montage mProject at a size where its real file writes and fsyncs dominate (disk-bound)"),
    Probe("mixed", "montage", "mProject", 16, 0.01,
          "Montage mProject as the workflow runs it: 40 % CPU, the rest waiting (emulated I/O)"),
)}


@dataclass
class Settings:
    """What to measure (``quick`` / ``full``) and how often."""

    repeats: int
    quotas: dict[str, tuple[float, ...]]
    same_core: tuple[tuple[str, str, float], ...]      # (target, other, target's quota)
    cross_core: tuple[tuple[str, str], ...]
    shares: int = 65536
    # (target, other, target's quota, which of the two is idle: "target" or "other")
    same_core_idle: tuple[tuple[str, str, float, str], ...] = ()
    # (target, other, copies of other): all on every CPU, no quota
    shared: tuple[tuple[str, str, int], ...] = ()

    @classmethod
    def quick(cls) -> "Settings":
        return cls(repeats=2,
                   quotas={"cpu": (0.5,), "mixed": (0.5, 0.2)},
                   same_core=(("mixed", "cpu", 0.5),),
                   cross_core=())

    @classmethod
    def waiting(cls) -> "Settings":
        """The co-allocation case alone: the waiting hosts (disk, sleepy) beside a CPU-bound
        guest at 50/50 and 75/25, seven rounds (about four minutes): a second session
        whose pairs check a fitted model out of sample."""
        return cls(repeats=7,
                   quotas={"cpu": (0.5,), "io": (0.5,), "mixed": (0.5,)},
                   same_core=(("io", "cpu", 0.5), ("mixed", "cpu", 0.5), ("io", "cpu", 0.75),
                              ("mixed", "cpu", 0.75)),
                   cross_core=())

    @classmethod
    def idle(cls) -> "Settings":
        """Hosts beside a CPU-bound guest in the idle class at 50/50 and 75/25, waiting
        guests in the idle class beside a CPU-bound host, and the same pairs in the normal
        class for comparison, five rounds (about six minutes): what ``cpu.idle`` buys the
        host and costs the guest."""
        hosts = ("io", "mixed", "cpu")
        same = tuple((h, "cpu", s) for h in hosts for s in (0.5, 0.75))
        idle = tuple((h, "cpu", s, "other") for h in hosts for s in (0.5, 0.75))
        # The idle one as the target: a waiting guest whose own quota does not bind (a
        # CPU-bound one at its quota is paced by the quota whatever its class).
        idle += (("mixed", "cpu", 0.5, "target"), ("io", "cpu", 0.5, "target"),
                 ("mixed", "cpu", 0.25, "target"))
        return cls(repeats=5, quotas={"cpu": (0.5,), "io": (0.5,), "mixed": (0.5,)},
                   same_core=same, cross_core=(), same_core_idle=idle)

    @classmethod
    def spread(cls) -> "Settings":
        """Probes free to run on every CPU (as a host and its guests on the host's cores)
        beside one CPU-bound co-runner (a core stays free) and as many as there are CPUs
        (none does), with the same-CPU pairs for comparison, five rounds (about three
        minutes on two CPUs): fits only ``spill``, the wake-up cost a disk-waiting job
        keeps although a core is free."""
        n = len(os.sched_getaffinity(0))
        shared = tuple((t, o, c) for t, o in (("mixed", "cpu"), ("io", "cpu"))
                       for c in sorted({n - 1, n}) if c >= 1)
        shared += (("cpu", "mixed", max(1, n - 1)), ("cpu", "io", max(1, n - 1)))
        return cls(repeats=5, quotas={"cpu": (0.5,), "io": (0.5,), "mixed": (0.5,)},
                   same_core=(("mixed", "cpu", 0.5), ("io", "cpu", 0.5)), cross_core=(),
                   shared=shared)

    @classmethod
    def full(cls) -> "Settings":
        # The host/guest arrangement at three quota splits, in both orders where the two
        # probes differ in kind (a waiting host beside a busy guest is what co-allocation
        # does most), and every kind of probe beside the CPU- and memory-bound ones.
        q = (0.75, 0.5, 0.25, 0.1)
        splits = (0.25, 0.5, 0.75)
        same = tuple((t, o, s) for t, o in (("io", "cpu"), ("mixed", "cpu"), ("cpu", "mixed"))
                     for s in splits)
        same += (("cpu", "io", 0.5), ("cpu", "cpu", 0.5), ("cpu", "cpu", 0.75),
                 ("mixed", "mixed", 0.5), ("io", "mixed", 0.5), ("mixed", "io", 0.5),
                 ("mem", "cpu", 0.5), ("cpu", "mem", 0.5), ("mem", "mem", 0.5),
                 ("io", "mem", 0.5), ("mixed", "mem", 0.5), ("io", "io", 0.5))
        return cls(repeats=5,
                   quotas={"cpu": q, "mem": q[:3], "io": q, "mixed": q},
                   same_core=same,
                   cross_core=(("io", "io"), ("mem", "mem"), ("cpu", "cpu"), ("mixed", "io"),
                               ("cpu", "mem")))


def check_support() -> str:
    """"v1" or "v2" when quotas can be measured here; else CalibrationUnavailable."""
    if os.name != "posix" or not Path("/proc/self/stat").exists():
        raise CalibrationUnavailable("calibration needs Linux (/proc and cgroups)")
    if os.geteuid() != 0:
        raise CalibrationUnavailable("calibration writes CPU quotas into cgroups, which needs "
                                     "root: run it as root")
    if (_V1 / "cpu.cfs_quota_us").exists() and os.access(_V1, os.W_OK):
        return "v1"
    ctl = _V2 / "cgroup.controllers"
    if ctl.exists() and "cpu" in ctl.read_text().split() and os.access(_V2, os.W_OK):
        return "v2"
    raise CalibrationUnavailable("no writable cgroup cpu controller (v1 cpu.cfs_quota_us or "
                                 "v2 cpu.max)")
    return ""  # pragma: no cover


class _Cgroup:
    """One calibration cgroup with a CPU quota (None: no limit) and cpu.shares."""

    _count = 0

    def __init__(self, layout: str, quota: float | None, shares: int, idle: bool = False):
        _Cgroup._count += 1
        name = f"{_PREFIX}{os.getpid()}-{_Cgroup._count}"
        self.layout = layout
        self.path = (_V1 if layout == "v1" else _V2) / name
        self.path.mkdir()
        try:
            if layout == "v1":
                (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(
                    "-1" if quota is None else str(max(1000, round(quota * PERIOD_US))))
                (self.path / "cpu.shares").write_text(str(IDLE_SHARES if idle else shares))
            else:
                (self.path / "cpu.max").write_text(
                    f"{'max' if quota is None else max(1000, round(quota * PERIOD_US))} {PERIOD_US}")
                (self.path / "cpu.weight").write_text(str(max(1, min(10000, shares * 100 // 1024))))
                if idle:
                    (self.path / "cpu.idle").write_text("1")
        except OSError:
            self.remove()
            raise

    def remove(self) -> None:
        deadline = time.monotonic() + 10.0
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)   # processes still leaving it


def remove_leftovers() -> None:
    """Remove empty calibration cgroups a killed earlier calibration of a dead process left."""
    for base in (_V1, _V2):
        for p in base.glob(f"{_PREFIX}*") if base.exists() else ():
            pid = p.name[len(_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                try:
                    p.rmdir()
                except OSError:
                    pass


class _Run:
    """A probe process in its cgroup, pinned to one CPU (or to a set of CPUs)."""

    def __init__(self, probe: Probe, cpu: int | frozenset[int], quota: float | None, layout: str,
                 shares: int, workdir: str, idle: bool = False):
        cpus = set(cpu) if isinstance(cpu, frozenset) else {cpu}
        self.group = _Cgroup(layout, quota, shares, idle)
        procs = self.group.path / "cgroup.procs"
        argv = ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "calib"] + probe.argv(workdir)
        try:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, preexec_fn=lambda: os.sched_setaffinity(0, cpus))
        except Exception:
            self.group.remove()
            raise

    def result(self, timeout: float = 120.0) -> dict:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            raise
        finally:
            self.group.remove()
        if self.proc.returncode != 0:
            raise RuntimeError(f"probe failed ({self.proc.returncode}): {err.strip()[-500:]}")
        return json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=10)
        finally:
            self.group.remove()


@dataclass
class Measurements:
    """Raw figures: every run's wall and CPU seconds, by experiment (see to_dict)."""

    layout: str
    settings: Settings
    alone: dict[str, list[dict]] = field(default_factory=dict)       # probe -> runs at 100 %
    quota: list[dict] = field(default_factory=list)
    pairs: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    load: list[dict] = field(default_factory=list)    # 1-minute load average, each round

    def to_dict(self) -> dict:
        return {"layout": self.layout, "cpus": len(os.sched_getaffinity(0)),
                "load_avg": [round(x, 2) for x in os.getloadavg()],
                "shares": self.settings.shares, "repeats": self.settings.repeats,
                "probes": {k: {"workflow": p.workflow, "stage": p.stage, "tasks": p.tasks,
                               "scale": p.scale, "what": p.what} for k, p in PROBES.items()},
                "alone": self.alone, "quota": self.quota, "pairs": self.pairs,
                "wall_s": round(self.wall_s, 1), "load": self.load}


def _short(r: dict) -> dict:
    return {"elapsed_s": r["elapsed_s"], "cpu_s": r["cpu_s"]}


def measure(settings: Settings, progress: Callable[[str], None] | None = None) -> Measurements:
    """Run every experiment of ``settings`` for real (see the module docstring)."""
    layout = check_support()
    remove_leftovers()
    say = progress or (lambda _msg: None)
    cpus = sorted(os.sched_getaffinity(0))
    main_cpu, other_cpu = cpus[0], cpus[-1]
    m = Measurements(layout, settings)
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="cosched-calib-")
    try:
        every_cpu = frozenset(cpus)

        def one(probe: str, quota: float | None, cpu: int | frozenset[int] = main_cpu) -> dict:
            return _Run(PROBES[probe], cpu, quota, layout, settings.shares, work).result()

        def alone(probe: str, cpu: int | frozenset[int] = main_cpu) -> dict:
            r = _short(one(probe, None, cpu))
            m.alone.setdefault(probe, []).append(r)
            return r

        def beside(target: str, tq: float | None, other: str, oq: float | None,
                   other_cpu_: int | frozenset[int], idle: str | None = None,
                   copies: int = 1) -> dict:
            """Run ``target`` while ``copies`` of ``other`` run in a loop beside it
            (``idle``: which of the two is in the idle class)."""
            loop: list[_Run] = []

            def start_other() -> _Run:
                run = _Run(PROBES[other], other_cpu_, oq, layout, settings.shares, work,
                           idle == "other")
                loop.append(run)
                return run

            current = [start_other() for _ in range(copies)]
            time.sleep(0.3)  # the co-runners are past their start-up
            where = other_cpu_ if isinstance(other_cpu_, frozenset) else main_cpu
            target_run = _Run(PROBES[target], where, tq, layout, settings.shares, work,
                              idle == "target")
            try:
                while target_run.proc.poll() is None:
                    for i, run in enumerate(current):
                        if run.proc.poll() is not None:
                            run.result()
                            current[i] = start_other()
                    time.sleep(0.02)
                return _short(target_run.result())
            finally:
                for r in loop:
                    if r.proc.poll() is None:
                        r.kill()
                    else:
                        try:
                            r.group.remove()
                        except OSError:
                            pass

        for k in range(settings.repeats):
            m.load.append({"round": k, "at_s": round(time.monotonic() - t0, 1),
                           "load_avg_1min": round(os.getloadavg()[0], 2)})
            for probe, quotas in settings.quotas.items():
                for q in quotas:
                    say(f"round {k + 1}/{settings.repeats}: {probe} at quota {q:.0%}")
                    ref = alone(probe)
                    m.quota.append({"probe": probe, "quota": q, **_short(one(probe, q)),
                                    "ref_elapsed_s": ref["elapsed_s"], "round": k})
            for target, other, tq in settings.same_core:
                say(f"round {k + 1}/{settings.repeats}: {target} at {tq:.0%} beside {other} "
                    f"at {1 - tq:.0%}, same CPU")
                ref = alone(target)
                r = beside(target, tq, other, round(1.0 - tq, 6), main_cpu)
                m.pairs.append({"target": target, "other": other, "placement": "same-cpu",
                                "target_quota": tq, "other_quota": round(1.0 - tq, 6), **r,
                                "ref_elapsed_s": ref["elapsed_s"], "round": k})
            for target, other, tq, idle in settings.same_core_idle:
                say(f"round {k + 1}/{settings.repeats}: {target} at {tq:.0%} beside {other} "
                    f"at {1 - tq:.0%}, same CPU, the {idle} idle")
                ref = alone(target)
                r = beside(target, tq, other, round(1.0 - tq, 6), main_cpu, idle)
                m.pairs.append({"target": target, "other": other, "placement": "same-cpu",
                                "target_quota": tq, "other_quota": round(1.0 - tq, 6), **r,
                                "ref_elapsed_s": ref["elapsed_s"], "idle": idle, "round": k})
            for target, other, copies in settings.shared:
                say(f"round {k + 1}/{settings.repeats}: {target} beside {copies} x {other}, "
                    f"all on {len(every_cpu)} CPUs")
                ref = alone(target, every_cpu)
                r = beside(target, None, other, None, every_cpu, copies=copies)
                m.pairs.append({"target": target, "other": other, "placement": "shared-cpus",
                                "cpus": len(every_cpu), "copies": copies,
                                "target_quota": 1.0, "other_quota": 1.0, **r,
                                "ref_elapsed_s": ref["elapsed_s"], "round": k})
            for target, other in settings.cross_core:
                if other_cpu == main_cpu:
                    continue
                say(f"round {k + 1}/{settings.repeats}: {target} beside {other} on the other CPU")
                ref = alone(target)
                r = beside(target, None, other, None, other_cpu)
                m.pairs.append({"target": target, "other": other, "placement": "other-cpu",
                                "target_quota": 1.0, "other_quota": 1.0, **r,
                                "ref_elapsed_s": ref["elapsed_s"], "round": k})
    finally:
        shutil.rmtree(work, ignore_errors=True)
        remove_leftovers()
    m.wall_s = time.monotonic() - t0
    m.load.append({"round": settings.repeats, "at_s": round(m.wall_s, 1),
                   "load_avg_1min": round(os.getloadavg()[0], 2)})
    return m


def median(values) -> float:
    return statistics.median(values)


__all__ = ["CalibrationUnavailable", "Measurements", "PROBES", "Probe", "Settings",
           "check_support", "measure", "remove_leftovers"]
