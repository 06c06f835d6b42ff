"""MRSch's workloads S1-S10, built deterministically from any SWF trace and a seed.

MRSch (Li et al., Table III and section V-E) extends a CPU-only Theta trace with burst
buffer requests and, for S6-S10, power. Here:

========  ==============  =====================  ===========  =================
set       nodes           jobs asking for BB     BB size      power per node
========  ==============  =====================  ===========  =================
S1        as in trace     50 %                   [5, 285] TB  -
S2        as in trace     75 %                   [5, 285] TB  -
S3        as in trace     50 %                   [20, 285] TB -
S4        as in trace     75 %                   [20, 285] TB -
S5        half (ceil)     75 %                   [20, 285] TB -
S6-S10    as S1-S5        as S1-S5 (same draws)  as S1-S5     [100, 215] W
========  ==============  =====================  ===========  =================

Scaling to the trace's machine: Theta had 4,392 nodes, a 1.26 PB shared burst buffer and,
in MRSch's power study, a 500 kW budget. A machine of N nodes gets ``N / 4392`` of each:
the pool, the budget *and* the request sizes (a 285 TB request is 22.6 % of Theta's pool,
so it is 22.6 % of ours too). Lublin-256 thus has a 73.4 TB pool, requests of 0.29-16.6 TB
and a 29.1 kW budget. Idle nodes draw 60 W. With 100-215 W per busy node a full machine
would need ~1.4x the budget, so power contends as in the paper.

Draws: the jobs asking for burst buffer are exactly ``round(share x jobs)`` of them, picked
without replacement; sizes are uniform integers in GB over the scaled range (MRSch drew
from Darshan records in the range; we have none, so uniform); power is a uniform integer
per job. Each quantity has its own random stream, keyed by (seed, set, quantity), so
S6 has exactly S1's burst-buffer draws. S5 halves the processor count (``ceil(p/2)``),
which halves the nodes on one-processor-per-node machines and about halves them otherwise.
A job whose power draw could never fit the budget (the widest jobs at high per-node power)
gets the highest per-node power that fits; ``power_capped`` counts them.

File format (``write``/``read``): a Standard Workload Format file whose job lines carry
three more columns, 19 burst buffer (GB), 20 power (W per node, 0 = none), 21 memory
(MB per node, 0 = none), and whose header adds the machine's capacities::

    ; MaxNodes: 256
    ; MaxProcs: 256
    ; MultiResource: S4 seed 1 from lublin_256.swf
    ; BurstBufferGB: 73443
    ; PowerBudgetW: 0
    ; IdlePowerW: 0
    ; MemoryPerNodeMB: 0

Fields 1-18 are standard SWF (unknowns -1), so any SWF tool reads them after cutting the
last three columns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import outputs
from ..model import InvalidInput
from ..sim.cluster import Cluster
from ..sim.resources import MachineResources, Request
from ..sim.swf import SwfTrace, TraceJob, read_swf

THETA_NODES = 4392
THETA_BB_TB = 1260.0
THETA_POWER_BUDGET_W = 500_000
IDLE_POWER_W = 60
POWER_RANGE_W = (100, 215)
EXTRA_FIELDS = ("burst buffer (GB)", "power (W per node)", "memory (MB per node)")
_HEADER_KEYS = ("BurstBufferGB", "PowerBudgetW", "IdlePowerW", "MemoryPerNodeMB")


@dataclass(frozen=True)
class SetSpec:
    name: str
    bb_share: float
    bb_range_tb: tuple[float, float]
    halve_nodes: bool
    power: bool


def _specs() -> dict[str, SetSpec]:
    base = [
        (0.50, (5.0, 285.0), False),
        (0.75, (5.0, 285.0), False),
        (0.50, (20.0, 285.0), False),
        (0.75, (20.0, 285.0), False),
        (0.75, (20.0, 285.0), True),
    ]
    out = {}
    for k, (share, rng, halve) in enumerate(base, 1):
        out[f"S{k}"] = SetSpec(f"S{k}", share, rng, halve, False)
        out[f"S{k + 5}"] = SetSpec(f"S{k + 5}", share, rng, halve, True)
    return dict(sorted(out.items(), key=lambda kv: int(kv[0][1:])))


SETS: dict[str, SetSpec] = _specs()


def get_set(name: str) -> SetSpec:
    spec = SETS.get(name.strip().upper()) if isinstance(name, str) else None
    if spec is None:
        raise InvalidInput(f"unknown workload set {name!r}; valid sets: {', '.join(SETS)}")
    return spec


@dataclass
class MultiWorkload:
    """A CPU trace's jobs with extra requests, and the machine's capacities."""

    set_name: str
    seed: int | None
    source: str
    max_nodes: int
    max_procs: int
    jobs: list[TraceJob]
    requests: list[Request]
    machine: MachineResources
    power_capped: int = 0
    header: dict[str, str] = field(default_factory=dict)

    @property
    def cluster(self) -> Cluster:
        return Cluster.from_swf_header(self.max_nodes, self.max_procs)

    def node_counts(self) -> list[int]:
        ppn = self.max_procs // self.max_nodes
        return [-(-j.procs // ppn) for j in self.jobs]

    def select(self, start: int, count: int) -> "MultiWorkload":
        """Jobs ``start .. start+count-1`` with their requests (same machine)."""
        from ..sim.replay import window

        jobs = window(self.jobs, start, count)
        return MultiWorkload(self.set_name, self.seed, self.source, self.max_nodes,
                             self.max_procs, jobs, self.requests[start:start + count],
                             self.machine, self.power_capped, self.header)


def _rng(seed: int, set_name: str, stream: str) -> np.random.Generator:
    # S6-S10 reuse S1-S5's burst-buffer streams: same draws, plus power.
    base = (int(set_name[1:]) - 1) % 5 + 1
    key = base if stream != "power" else int(set_name[1:])
    return np.random.default_rng([seed, key, {"share": 0, "size": 1, "power": 2}[stream]])


def generate(trace: SwfTrace, set_name: str, seed: int = 1) -> MultiWorkload:
    """Set ``set_name`` (S1-S10) from ``trace``'s jobs; the same inputs give the same output."""
    spec = get_set(set_name)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidInput(f"seed must be an integer >= 0, got {seed!r}")
    jobs = list(trace.jobs)
    n = len(jobs)
    if n == 0:
        raise InvalidInput(f"{trace.path}: the trace has no usable jobs")
    scale = trace.max_nodes / THETA_NODES
    pool_gb = max(1, round(THETA_BB_TB * 1000 * scale))
    if spec.halve_nodes:
        jobs = [j._replace(procs=-(-j.procs // 2)) for j in jobs]
    chosen = _rng(seed, spec.name, "share").choice(n, size=round(spec.bb_share * n),
                                                    replace=False)
    lo = max(1, round(spec.bb_range_tb[0] * 1000 * scale))
    hi = max(lo, round(spec.bb_range_tb[1] * 1000 * scale))
    sizes = _rng(seed, spec.name, "size").integers(lo, hi, size=len(chosen), endpoint=True)
    bb = np.zeros(n, dtype=np.int64)
    bb[np.sort(chosen)] = sizes
    machine = MachineResources(burst_buffer_gb=pool_gb)
    power = np.zeros(n, dtype=np.int64)
    capped = 0
    if spec.power:
        budget = round(THETA_POWER_BUDGET_W * scale)
        machine = MachineResources(burst_buffer_gb=pool_gb, power_budget_w=budget,
                                   idle_power_w=IDLE_POWER_W)
        power = _rng(seed, spec.name, "power").integers(*POWER_RANGE_W, size=n, endpoint=True)
        pool = budget - trace.max_nodes * IDLE_POWER_W
        if pool <= 0:
            raise InvalidInput(f"{trace.path}: the scaled power budget cannot run any job")
        ppn = trace.max_procs // trace.max_nodes
        for i, job in enumerate(jobs):
            nodes = -(-job.procs // ppn)
            most = IDLE_POWER_W + pool // nodes
            if power[i] > most:
                power[i] = most
                capped += 1
    requests = [Request(int(b), int(p), 0) for b, p in zip(bb, power)]
    return MultiWorkload(spec.name, seed, trace.path, trace.max_nodes, trace.max_procs,
                         jobs, requests, machine, capped)


def random_requests(spec: SetSpec, procs: list[int], max_nodes: int, max_procs: int,
                    rng: np.random.Generator) -> list[Request]:
    """Requests for jobs of ``procs`` processors by ``spec``'s rules, from one stream (for
    synthetic job sets; ``generate`` keeps separate streams per quantity instead)."""
    n = len(procs)
    scale = max_nodes / THETA_NODES
    lo = max(1, round(spec.bb_range_tb[0] * 1000 * scale))
    hi = max(lo, round(spec.bb_range_tb[1] * 1000 * scale))
    bb = np.zeros(n, dtype=np.int64)
    chosen = rng.choice(n, size=round(spec.bb_share * n), replace=False)
    bb[chosen] = rng.integers(lo, hi, size=len(chosen), endpoint=True)
    power = np.zeros(n, dtype=np.int64)
    if spec.power:
        pool = round(THETA_POWER_BUDGET_W * scale) - max_nodes * IDLE_POWER_W
        ppn = max_procs // max_nodes
        power = rng.integers(*POWER_RANGE_W, size=n, endpoint=True)
        for i, p in enumerate(procs):
            power[i] = min(power[i], IDLE_POWER_W + pool // -(-p // ppn))
    return [Request(int(b), int(w), 0) for b, w in zip(bb, power)]


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(float(x))


def write(workload: MultiWorkload, path: str | Path) -> None:
    """Write ``workload`` in the format of the module doc."""
    m = workload.machine
    seed = "" if workload.seed is None else f" seed {workload.seed}"
    lines = [
        "; Version: 2",
        f"; MultiResource: {workload.set_name}{seed} from {Path(workload.source).name}",
        f"; MaxNodes: {workload.max_nodes}",
        f"; MaxProcs: {workload.max_procs}",
        f"; BurstBufferGB: {m.burst_buffer_gb}",
        f"; PowerBudgetW: {m.power_budget_w}",
        f"; IdlePowerW: {m.idle_power_w}",
        f"; MemoryPerNodeMB: {m.memory_per_node_mb}",
        "; Fields 19-21: burst buffer (GB), power (W per node), memory (MB per node); 0 = none",
    ]
    for j, r in zip(workload.jobs, workload.requests):
        lines.append(
            f"{j.job_id} {_num(j.submit)} -1 {_num(j.run)} {j.procs} -1 -1 {j.procs} "
            f"{_num(j.estimate)} -1 1 {j.user} -1 -1 -1 -1 -1 -1 "
            f"{r.burst_buffer_gb} {r.power_w_per_node} {r.memory_mb_per_node}"
        )
    outputs.write_text(path, "\n".join(lines) + "\n")


_LEADING = re.compile(r"^\s*(-?\d+)")


def read(path: str | Path) -> MultiWorkload:
    """Read a file ``write`` made (or one by hand in that format); errors name the job."""
    trace = read_swf(path, extra_fields=EXTRA_FIELDS)
    values = {}
    for key in _HEADER_KEYS:
        text = trace.header.get(key, "0")
        m = _LEADING.match(text)
        if m is None:
            raise InvalidInput(f"{path}: header {key} must be a whole number, got {text!r}")
        values[key] = int(m.group(1))
    try:
        machine = MachineResources(values["BurstBufferGB"], values["PowerBudgetW"],
                                   values["IdlePowerW"], values["MemoryPerNodeMB"])
    except InvalidInput as e:
        raise InvalidInput(f"{path}: {e}") from None
    requests = [Request.checked(f"{path}: job {j.job_id}", *extra)
                for j, extra in zip(trace.jobs, trace.extras)]
    desc = trace.header.get("MultiResource", "")
    set_name = desc.split()[0] if desc else Path(path).stem
    seed = None
    m = re.search(r"\bseed (\d+)", desc)
    if m:
        seed = int(m.group(1))
    return MultiWorkload(set_name, seed, str(path), trace.max_nodes, trace.max_procs,
                         trace.jobs, requests, machine, 0, trace.header)


def shares(workload: MultiWorkload) -> dict[str, float]:
    """Share of jobs asking for burst buffer and the mean size (TB), for checks and docs."""
    n = len(workload.requests)
    asking = [r.burst_buffer_gb for r in workload.requests if r.burst_buffer_gb]
    return {
        "bb_share": len(asking) / n if n else math.nan,
        "bb_mean_tb": (sum(asking) / len(asking) / 1000) if asking else 0.0,
    }
