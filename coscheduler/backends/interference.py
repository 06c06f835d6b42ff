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
- capacity_factor = 1 / (1 + memory_penalty x (S - 1)) when the group wants S > 1 of the
  host's memory (S = mem_host + sum mem_guest x cores_guest / cores_host), else 1:
  swapping and page-cache thrashing. Not measured here (filling a shared 24 GiB machine's
  memory would hurt everyone on it): a documented assumption.

A job alone at full quota pays nothing; a job whose quota is at or above its demand
(``InterferenceModel.demand``: its CPU use u when overlap = 1), with no busy co-runner on
its cores and sharing no memory bandwidth, disk or memory capacity with one, is not slowed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

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

    def __post_init__(self) -> None:
        if not isinstance(self.idle, bool):
            raise InvalidInput(f"job demand: idle must be true or false, got {self.idle!r}")
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

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            low = -0.5 if name == "throttle" else 0.0
            check_finite(value, f"interference model: {name}", minimum=low)
        if self.overlap > 1.0:
            raise InvalidInput(f"interference model: overlap must lie in [0, 1], got {self.overlap!r}")

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

    def contention(self, demand: JobDemand, quota: float,
                   others: Iterable[tuple[JobDemand, float, float]]) -> float:
        """The slowdown factor (>= 1) from co-runners ``others`` = (demand, quota, share of
        this job's cores it runs on: 1 for a guest seen from its host's cores it fills, a
        guest's cores over its host's seen from the host, 0 on other cores) for a job with
        ``demand`` under ``quota``; ``quota_term / contention`` is the job's rate."""
        busy = bw = io = 0.0
        for o, q, same_cores in others:
            weight = 1.0 if o.idle == demand.idle else (
                self.idle_penalty if demand.idle else self.idle_yield)
            busy += float(same_cores) * min(o.cpu, max(0.0, q)) * weight
            bw += o.membw
            io += o.io
        computing = 1.0 - float(demand.wait)
        disk = min(1.0, float(demand.io) / float(demand.wait)) if demand.wait > 0 else 0.0
        shared = 1.0 + (self.timeslice + self.wakeup * disk) * computing * busy
        # The worse of the quota and the shared core, not both: under a binding quota the
        # co-runner runs in the time that quota leaves.
        cores = max(1.0, shared * self.quota_term(demand, quota))
        return cores * (1.0 + self.cache * max(0.0, demand.cpu - demand.membw) * bw
                        + self.bandwidth * demand.membw * bw + self.io * demand.io * io)

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


# Fitted (coscheduler.calibration.fit) to coscheduler/calibration/measured.json: a full
# ``cosched calibrate`` on the shared 2-core development machine (load average 2-8);
# docs/calibration.md gives the figures, the fit's errors and its error on pairs left out
# of it. memory_penalty is the assumed one (not measured).
# idle_yield and idle_penalty: ``cosched calibrate --idle`` (coscheduler/calibration/idle.json,
# load average 7-10: the idle guest lost to that load too, so its penalty is an upper end).
CALIBRATED = InterferenceModel(throttle=0.0359, overlap=0.6254, timeslice=1.2013, wakeup=2.3306,
                               cache=0.0231, bandwidth=0.0887, io=0.0, memory_penalty=2.0,
                               idle_yield=0.1994, idle_penalty=9.2155)

# No interference beyond what quotas do (for tests that want the pure quota model).
QUOTA_ONLY = InterferenceModel(memory_penalty=0.0)

__all__ = ["CALIBRATED", "InterferenceModel", "JobDemand", "QUOTA_ONLY"]
