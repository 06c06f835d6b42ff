"""What the experts see of a host: its ``HostState``, built once per candidate (pure).

A host's own part (class, CPU %, memory %, stage type, elapsed share of walltime, Hp, I/O)
is the same for every guest it is asked about in a pass; what is known of the guest's class
is added per guest. Hp for plainly valid numbers is computed inline (the same arithmetic as
``happiness.happiness``), with ``happiness``'s own checks and errors for anything else.
"""

from __future__ import annotations

import math

from .. import happiness as hp
from ..learner import HostState
from ..model import InvalidInput, Job, MetricsSample, RunningJob, StageType
from .usage import Expected


def host_state(rj: RunningJob, sample: MetricsSample | None, now: float,
               guest: Job | None = None, expected: Expected | None = None,
               alone_runtime_s: float | None = None) -> HostState:
    """HostState of a host from its latest sample. Unknown metrics are read as a busy
    host (100 % CPU and memory, Hp None): with nothing known, lend little. With ``guest``
    and what its class usually uses (``expected``), the state also tells the guest's
    usual CPU, memory and file I/O and its cores over the host's. With the host class's
    runtime alone, Hp measures its speed against alone (``happiness.happiness_vs_alone``)."""
    return state_with_guest(host_own_state(rj, sample, now, alone_runtime_s), rj, guest,
                            expected)


# What a host's state holds of the host alone: its HostState without a guest (class, CPU %,
# memory %, stage type, elapsed share of walltime, Hp, I/O MB/s, waiting share). The same for
# every guest it is asked about in a pass: built and checked once per host.
OwnState = HostState


def host_own_state(rj: RunningJob, sample: MetricsSample | None, now: float,
                   alone_runtime_s: float | None = None,
                   unsampled: Expected | None = None) -> OwnState:
    """The host's own part of ``host_state`` (see there). ``unsampled``: what the host's
    class usually uses, read as its use while it has no sample yet (Hp stays unknown)."""
    job = rj.job
    elapsed = max(0.0, now - rj.start_time)
    happiness = None
    cpu = mem = 100.0
    io = None
    if sample is None and unsampled is not None:
        cpu, mem, io = unsampled.cpu_percent, unsampled.mem_percent, unsampled.io_mb_s
        return HostState.of_host(job.job_class, cpu, mem, job.stage_type,
                                 elapsed / job.walltime_s, None, io,
                                 wait_share(job.stage_type, job.cores, cpu))
    if sample is not None:
        io = sample.io_mb_s
        cpu, mem = sample.cpu_percent, sample.mem_percent
        total = sample.tasks_total if sample.tasks_total is not None else job.tasks
        try:
            if alone_runtime_s is not None and alone_runtime_s > 0:
                happiness = _happiness_vs_alone(elapsed, job.walltime_s, alone_runtime_s,
                                                sample.tasks_done, total, sample.tasks_per_s)
            else:
                happiness = _happiness(elapsed, job.walltime_s, sample.tasks_done, total,
                                       sample.tasks_per_s)
        except InvalidInput:
            happiness = None
    wait = None if sample is None else wait_share(job.stage_type, job.cores, cpu)
    return HostState.of_host(job.job_class, cpu, mem, job.stage_type, elapsed / job.walltime_s,
                             happiness, io, wait)


def wait_share(stage_type: StageType, cores: int, cpu_percent: float) -> float:
    """The share of its time a job's processes wait off the CPU, from its CPU % of its cores.

    A parallel stage keeps about one process per core: it waits 1 - u. A sequential stage
    keeps one process busy however many cores it holds (a workflow's cores kept between
    stages), so its one process computes u x cores of the time: a stage using 4 % of 16
    cores waits 36 %, not 96 %. Which of the two a job waits on (files or sleep) the experts
    read from its file I/O rate."""
    u = min(1.0, max(0.0, cpu_percent / 100.0))
    if stage_type is StageType.SEQUENTIAL:
        return 1.0 - min(1.0, u * max(1, cores))
    return 1.0 - u


def state_with_guest(own: OwnState, rj: RunningJob, guest: Job | None,
                     expected: Expected | None) -> HostState:
    """A HostState from the host's own part and what is known of the guest's class."""
    if guest is not None and expected is not None:
        return own.with_guest(expected.cpu_percent, expected.mem_percent,
                              guest.cores / rj.job.cores, expected.io_mb_s,
                              wait_share(guest.stage_type, guest.cores, expected.cpu_percent))
    return own


def _plain(x: object) -> bool:
    return type(x) is float and 0.0 <= x < math.inf


def _happiness(elapsed: float, walltime: float, done: int, total: int | None,
               rate: float | None) -> float | None:
    """``happiness.happiness``: its arithmetic for plainly valid numbers (one host state per
    candidate host), its checks and errors for anything else."""
    if _plain(elapsed) and _plain(walltime) and walltime > 0.0 and _plain(rate) \
            and type(done) is int and type(total) is int and done >= 0 and total >= 0:
        remaining = total - done
        if remaining <= 0:
            return math.inf
        time_left = max(0.0, walltime - elapsed)
        return time_left * rate / remaining
    return hp.happiness(elapsed, walltime, done, total, rate)


def _happiness_vs_alone(elapsed: float, walltime: float, alone: float, done: int,
                        total: int | None, rate: float | None) -> float | None:
    """``happiness.happiness_vs_alone`` (default tolerance), as ``_happiness``."""
    if _plain(alone) and alone > 0.0 and _plain(walltime) and walltime > 0.0:
        return _happiness(elapsed, min(walltime, (1.0 + _TOLERANCE) * alone), done, total, rate)
    return hp.happiness_vs_alone(elapsed, walltime, alone, done, total, rate)


_TOLERANCE = float(hp.HAPPY_SLOWDOWN)


__all__ = ["OwnState", "host_own_state", "host_state", "state_with_guest", "wait_share"]
