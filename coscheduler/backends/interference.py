"""How co-located jobs slow each other in the virtual backend: the model and ALL its parameters.

Every parameter of the virtual backend's interference model lives in ``InterferenceModel``;
``CALIBRATED`` holds the values fitted to real measurements on the project's development
machine (real stage programs under real cgroup v1 quotas, docs/calibration.md, re-measured
with ``cosched calibrate``). Pure arithmetic: no I/O.

A job is described by shares of its runtime alone (``JobDemand``):

- ``cpu``: u, the share of its cores it keeps busy (CPU time / (cores x runtime));
- ``wait``: the share of the time its processes wait off the CPU (default 1 - u; less for
  a job that holds more cores than it has processes, such as a sequential stage holding
  its workflow's cores); 1 - wait is how much of its time it computes, which is when a
  busy co-runner on its cores slows it;
- ``membw``: the share of its runtime spent streaming memory (a working set larger than the
  caches), which contends for the memory bandwidth of the node;
- ``io``: the share of its runtime spent waiting on the disk / file system, which contends
  with other jobs' I/O on the same storage;
- ``mem``: its memory use as a share of its allocation's memory (capacity, not bandwidth).

A job's speed relative to alone (1.0 = as fast as alone) when it shares a host's cores
with others (the host and its guests; ``others``) is

    rate = min(quota_term,                                              same cores: its
               1 / (1 + (k_ts + k_wake * io / wait) * (1 - wait)         computing shares a
                        * sum(busy_o)))                                  busy core, and each
                                                                         disk wait ends behind it
           / (1 + k_cache * (u - membw) * sum(membw_o)                  a streaming co-runner
                                                                         evicts our cached data
              + k_bw * membw * sum(membw_o)                             memory bandwidth
              + k_io * io * sum(io_o))                                  disk
           x capacity_factor                                            memory capacity

- quota_term = 1 / max(1, x (1 + throttle)) where x = u / q + (1 - overlap) x (1 - u), and
  1 when x <= 1 (the quota never binds): a cgroup quota caps CPU time (u / q); a job that
  alternates computing
  and waiting cannot always hide its waits behind the throttled computing (overlap = 1: a
  fluid job that can, as one with many workers; a single worker measures lower), and
  throttled runs cost a little more or less CPU per unit of work (throttle);
- scheduling classes: a guest the agent puts in the idle class (cgroup v2 cpu.idle = 1)
  counts x ``idle_yield`` in a normal host's busy_o (it yields the core whenever the host
  wants it) and a normal host counts x ``idle_penalty`` in an idle guest's (measured by
  ``cosched calibrate`` with idle co-runners; 1.0, no difference, when not measured);
- busy_o = min(u_o, q_o): the CPU share a co-runner on the same cores really uses, summed
  over the co-runners on the job's cores, each weighted by the share of its cores it runs
  on (a guest fills its own cores, a host's cores only in part). A job pays for it only
  while it computes, (1 - wait) of its time (u for most jobs): then the co-runner, when
  not throttled, takes its turns on the core (k_ts about 1: computing at half speed for
  as long as the co-runner is busy; fitted 1.2, as a short burst can lose the core for a
  whole turn of the co-runner). Its waiting costs it nothing more: after a long sleep
  (emulated storage, a message) a job preempts the busy co-runner at once. A job
  that waits on the disk wakes up after every short I/O, too often to earn that
  precedence, and waits behind the co-runner's turn each time: a cost per wake-up. A
  program wakes up a fixed number of times per unit of its work, so that cost too scales
  with its computing share, by how much of its waiting is on the disk (io / wait: k_wake).
  A job whose own quota binds is
  already paced by it: the co-runner uses the time the quota leaves, hence the min (the
  worse of the two, not their product);
- a job computing on cached data (u - membw) loses the shared cache to co-runners that
  stream memory (k_cache), and the memory bandwidth and the disk are shared by every job
  of the group, whatever its cores (k_bw, k_io);
- shared cores (``pool_cores``): when the jobs of a group may all run on the same set of C
  cores (the host's allocation; a guest's quota caps its CPU time, not where it runs),
  the kernel spreads runnable processes over idle cores, so a computing process waits for
  a busy co-runner only when every core is taken. Each job then runs ``threads``
  processes, each computing (1 - wait) of its time (less under a binding quota); the
  share of a busy core its process meets is the expected excess E[max(0, X + 1 - C)]
  over the processes X of the others computing at that instant (independent, each a
  Bernoulli draw), less what its own other processes already cost it alone. On one core
  with one co-runner process this is busy_o exactly (the same-CPU calibration); on 2 cores
  a sleepy probe beside one CPU-bound loop measured x1.01 (x1.46 pinned to one core),
  beside two loops x1.49. A disk-waiting job still meets a busy core at some wake-ups
  (x1.42 on 2 cores against x3.6 pinned): its wake-up term keeps ``spill`` of the
  per-core busy_o (fitted by ``cosched calibrate --spread``). Without ``pool_cores``, or
  when a job's ``threads`` is unknown, every co-runner counts as on the job's own cores;
- capacity_factor = 1 / (1 + memory_penalty x (S - 1)) when the group wants S > 1 of the
  host's memory (S = mem_host + sum mem_guest x cores_guest / cores_host), else 1:
  swapping and page-cache thrashing. Not measured here (filling a shared 24 GiB machine's
  memory would hurt everyone on it): a documented assumption.

A job alone at full quota pays nothing; a job whose quota is at or above its demand
(``InterferenceModel.demand``: its CPU use u when overlap = 1), with no busy co-runner on
its cores and sharing no memory bandwidth, disk or memory capacity with one, is not slowed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np

from ..model import InvalidInput, check_finite


@dataclass(frozen=True)
class JobDemand:
    """What a job asks of its node, as shares of its runtime alone (see the module docstring)."""

    cpu: float
    membw: float = 0.0
    io: float = 0.0
    mem: float = 0.0
    wait: float | None = None
    # In the idle scheduling class (cgroup v2 cpu.idle = 1, what the agent gives a guest):
    # it runs only when no job of the normal class on its cores wants the CPU.
    idle: bool = False
    # Processes it keeps computing at once when running (a sequential stage 1, a parallel
    # one its cores); None: unknown (its co-runners then count as on its own cores).
    threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.idle, bool):
            raise InvalidInput(f"job demand: idle must be true or false, got {self.idle!r}")
        if self.threads is not None and (isinstance(self.threads, bool)
                                         or not isinstance(self.threads, int) or self.threads < 1):
            raise InvalidInput(f"job demand: threads must be an integer >= 1 or None, "
                               f"got {self.threads!r}")
        if self.wait is None:
            object.__setattr__(self, "wait", max(0.0, 1.0 - float(self.cpu)))
        for name in ("cpu", "membw", "io", "wait"):
            v = check_finite(getattr(self, name), f"job demand: {name}", minimum=0.0)
            if v is None or v > 1.0:
                raise InvalidInput(f"job demand: {name} must lie in [0, 1], got {getattr(self, name)!r}")
        check_finite(self.mem, "job demand: mem", minimum=0.0)


@dataclass(frozen=True)
class InterferenceModel:
    """The parameters (see the module docstring for where each one acts)."""

    throttle: float = 0.0          # relative extra CPU cost of running throttled
    overlap: float = 1.0           # share of a job's waiting hidden behind throttled computing
    timeslice: float = 0.0         # k_ts: a computing job sharing its core with a busy one
    wakeup: float = 0.0            # k_wake: a disk-waiting job waking up behind a busy one
    cache: float = 0.0             # k_cache: a cached job beside a streaming one
    bandwidth: float = 0.0         # k_bw: two memory-streaming jobs
    io: float = 0.0                # k_io: two disk-bound jobs on the same storage
    memory_penalty: float = 2.0    # memory capacity over-commit (assumed, not measured)
    # A co-runner of the other scheduling class: its busy share counts x idle_yield against
    # a normal job (an idle guest gives the core up at once) and x idle_penalty against an
    # idle one (it waits for every turn of a normal host). 1.0: no difference (unmeasured).
    idle_yield: float = 1.0
    idle_penalty: float = 1.0
    # On shared cores (``contention(pool_cores=...)``): the share of the per-core wake-up
    # cost a disk-waiting job keeps although a core is free (1.0: all of it, unmeasured).
    spill: float = 1.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            low = -0.5 if name == "throttle" else 0.0
            check_finite(value, f"interference model: {name}", minimum=low)
        for name in ("overlap", "spill"):
            if getattr(self, name) > 1.0:
                raise InvalidInput(f"interference model: {name} must lie in [0, 1], "
                                   f"got {getattr(self, name)!r}")

    def quota_term(self, demand: JobDemand, quota: float) -> float:
        """Speed under a CPU quota alone (1.0: the quota does not bind)."""
        u = demand.cpu
        if u <= 0:
            return 1.0
        if quota <= 0:
            return 0.0
        x = u / quota + (1.0 - self.overlap) * (1.0 - u)
        if x <= 1.0 + 1e-9:       # the quota never binds: no throttling at all
            return 1.0
        return 1.0 / max(1.0, x * (1.0 + self.throttle))

    def demand(self, demand: JobDemand) -> float:
        """The smallest quota fraction under which the job runs as fast as alone."""
        u = demand.cpu
        if u <= 0:
            return 0.0
        return min(1.0, u / (1.0 - (1.0 - self.overlap) * (1.0 - u)))

    def computing(self, demand: JobDemand, quota: float) -> float:
        """The share of the time each of a job's processes computes under ``quota``."""
        # min(u, q) of its cores as in the same-CPU term, spread over its processes
        u = demand.cpu
        return 0.0 if u <= 0 else (1.0 - float(demand.wait)) * min(1.0, max(0.0, quota) / u)

    def contention(self, demand: JobDemand, quota: float,
                   others: Iterable[tuple[JobDemand, float, float]],
                   pool_cores: int | None = None) -> float:
        """The slowdown factor (>= 1) from co-runners ``others`` = (demand, quota, share of
        this job's cores it runs on: 1 for a guest seen from its host's cores it fills, a
        guest's cores over its host's seen from the host, 0 on other cores) for a job with
        ``demand`` under ``quota``; ``quota_term / contention`` is the job's rate.
        ``pool_cores``: the jobs may all run on these many shared cores (module docstring)."""
        others = list(others)
        busy = bw = io = 0.0
        for o, q, same_cores in others:
            busy += float(same_cores) * min(o.cpu, max(0.0, q)) * self._weight(demand, o)
            bw += o.membw
            io += o.io
        computing = 1.0 - float(demand.wait)
        disk = min(1.0, float(demand.io) / float(demand.wait)) if demand.wait > 0 else 0.0
        busy_wake = busy
        if pool_cores is not None and demand.threads is not None \
                and all(o.threads is not None for o, _q, _s in others):
            pooled = self.pooled_busy(demand, quota, others, pool_cores)
            busy_wake = pooled + self.spill * max(0.0, busy - pooled)
            busy = pooled
        shared = 1.0 + (self.timeslice * busy + self.wakeup * disk * busy_wake) * computing
        # The worse of the quota and the shared core, not both: under a binding quota the
        # co-runner runs in the time that quota leaves.
        cores = max(1.0, shared * self.quota_term(demand, quota))
        return cores * (1.0 + self.cache * max(0.0, demand.cpu - demand.membw) * bw
                        + self.bandwidth * demand.membw * bw + self.io * demand.io * io)

    def _weight(self, demand: JobDemand, other: JobDemand) -> float:
        return 1.0 if other.idle == demand.idle else (
            self.idle_penalty if demand.idle else self.idle_yield)

    def pooled_busy(self, demand: JobDemand, quota: float,
                    others: Sequence[tuple[JobDemand, float, float]], pool_cores: int) -> float:
        """The share of a busy core one of the job's computing processes meets on
        ``pool_cores`` shared cores: E[max(0, X + Y + 1 - C)] - E[max(0, Y + 1 - C)], X the
        others' processes computing at an instant, Y its own other ones (module docstring).
        A co-runner of the other scheduling class counts as in ``contention``."""
        if isinstance(pool_cores, bool) or not isinstance(pool_cores, int) or pool_cores < 1:
            raise InvalidInput(f"pool_cores must be an integer >= 1, got {pool_cores!r}")
        own = _binomial(demand.threads - 1, self.computing(demand, quota))
        total = own
        penalty = 1.0
        for o, q, _same in others:
            w = self._weight(demand, o)
            if w > 1.0:   # an idle job behind a normal one: it waits for every turn
                penalty = max(penalty, w)
                w = 1.0
            total = np.convolve(total, _binomial(o.threads, w * self.computing(o, q)))
        return penalty * max(0.0, _excess(total, pool_cores) - _excess(own, pool_cores))

    def capacity_factor(self, share: float) -> float:
        """Speed factor of every job of a group wanting ``share`` of the host's memory."""
        return 1.0 if share <= 1.0 else 1.0 / (1.0 + self.memory_penalty * (share - 1.0))

    def rate(self, demand: JobDemand, quota: float,
             others: Iterable[tuple[JobDemand, float, float]] = (), mem_share: float = 0.0) -> float:
        """Speed relative to alone of one job (see the module docstring)."""
        others = list(others)
        r = self.quota_term(demand, quota)
        if others:
            r /= self.contention(demand, quota, others)
            r *= self.capacity_factor(mem_share)
        return r

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@lru_cache(maxsize=4096)
def _binomial(n: int, p: float) -> np.ndarray:
    """The distribution of how many of n independent processes, each busy with
    probability p, are busy at once (cached: read only)."""
    p = min(1.0, max(0.0, p))
    if n <= 0 or p == 0.0:
        return _ONE
    if p == 1.0:
        dist = np.zeros(n + 1)
        dist[n] = 1.0
        return dist
    k = np.arange(1, n + 1)
    log_choose = np.concatenate(([0.0], np.cumsum(np.log(n - k + 1) - np.log(k))))
    k = np.arange(n + 1)
    return np.exp(log_choose + k * math.log(p) + (n - k) * math.log1p(-p))


_ONE = np.ones(1)


def _excess(dist: np.ndarray, cores: int) -> float:
    """E[max(0, X + 1 - cores)] for X distributed as ``dist``."""
    k = np.arange(len(dist))
    return float(np.sum(dist * np.maximum(0, k + 1 - cores)))


# Fitted (coscheduler.calibration.fit) to coscheduler/calibration/measured.json: a full
# ``cosched calibrate`` on the shared 2-core development machine (load average 2-8);
# docs/calibration.md gives the figures, the fit's errors and its error on pairs left out
# of it. memory_penalty is the assumed one (not measured).
# idle_yield and idle_penalty: ``cosched calibrate --idle`` (coscheduler/calibration/idle.json,
# load average 7-10: the idle guest lost to that load too, so its penalty is an upper end).
# spill: ``cosched calibrate --spread`` (coscheduler/calibration/spread.json): 1.0, at its
# bound (a disk-waiting probe on 2 shared CPUs lost as much as pinned).
CALIBRATED = InterferenceModel(throttle=0.0359, overlap=0.6254, timeslice=1.2013, wakeup=2.3306,
                               cache=0.0231, bandwidth=0.0887, io=0.0, memory_penalty=2.0,
                               idle_yield=0.1994, idle_penalty=9.2155, spill=1.0)

# No interference beyond what quotas do (for tests that want the pure quota model).
QUOTA_ONLY = InterferenceModel(memory_penalty=0.0)

__all__ = ["CALIBRATED", "InterferenceModel", "JobDemand", "QUOTA_ONLY"]
