"""Resources beside nodes: a shared burst buffer, a power budget, memory per node.

A job asks for whole nodes (as in every trace) plus, optionally, burst-buffer space
(a global pool), a power draw per node (against a global budget) and memory per node.
The machine's capacities are ``MachineResources``; a job's extra requests are a
``Request``. Zero everywhere means "not modelled": the engine then runs exactly its
CPU-only path.

Units are integers so that taking and giving back never drifts: burst buffer in GB,
power in W, memory in MB.

How each resource constrains a start:

- **burst buffer**: a pool of ``burst_buffer_gb``; a running job holds its request.
- **power**: every node draws ``idle_power_w`` when idle and the job's per-node power
  when busy; the machine's draw must stay within ``power_budget_w``. A busy node adds
  ``power - idle`` over idle, so the engine sees a pool of ``budget - nodes * idle`` from
  which a job takes ``nodes * (power - idle)``. A budget below the all-idle draw can run
  nothing and is refused.
- **memory per node**: jobs take whole nodes exclusively here, so memory never contends
  between jobs; a request above a node's memory can never run and is refused up front.
  (Memory matters where jobs share nodes: the co-scheduler's co-allocation check.)

``pool_model`` turns capacities and requests into the plain vectors the engine checks:
one capacity per active global pool and, per job, what it takes from each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from ..boundedjson import is_finite_number
from ..model import InvalidInput

POOL_NAMES = ("burst_buffer", "power")


def _check_int(value: object, what: str) -> int:
    if not is_finite_number(value):
        raise InvalidInput(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise InvalidInput(f"{what} must be >= 0, got {value!r}")
    if value != int(value):
        raise InvalidInput(f"{what} must be a whole number, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class MachineResources:
    """Capacities beside the nodes; 0 = not modelled."""

    burst_buffer_gb: int = 0
    power_budget_w: int = 0
    idle_power_w: int = 0
    memory_per_node_mb: int = 0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            object.__setattr__(self, name, _check_int(value, f"machine {name}"))

    @property
    def modelled(self) -> bool:
        return any(asdict(self).values())


@dataclass(frozen=True)
class Request:
    """One job's requests beside its nodes; 0 = none."""

    burst_buffer_gb: int = 0
    power_w_per_node: int = 0
    memory_mb_per_node: int = 0

    @classmethod
    def checked(cls, job: str, burst_buffer_gb: object = 0, power_w_per_node: object = 0,
                memory_mb_per_node: object = 0) -> "Request":
        """A request from outside: negative, NaN or fractional values name ``job``."""
        return cls(
            _check_int(burst_buffer_gb, f"{job}: burst buffer request (GB)"),
            _check_int(power_w_per_node, f"{job}: power request (W per node)"),
            _check_int(memory_mb_per_node, f"{job}: memory request (MB per node)"),
        )


NO_REQUEST = Request()


@dataclass(frozen=True)
class PoolModel:
    """What the engine checks: capacities of the active global pools, each job's take."""

    names: tuple[str, ...]
    capacity: tuple[int, ...]
    take: list[tuple[int, ...]]  # per job, one amount per pool

    @property
    def empty(self) -> bool:
        return not self.names


def pool_model(machine: MachineResources, requests: Sequence[Request], nodes: Sequence[int],
               total_nodes: int, labels: Sequence[str] | None = None,
               force: Sequence[str] = ()) -> PoolModel:
    """Validate ``requests`` against ``machine`` and build the engine's pool vectors.

    ``nodes[i]`` is job i's node count; ``labels[i]`` names job i in errors (default:
    "job at position i"). A request for a resource the machine does not model, or above
    its capacity, is refused: such a job could never start. A pool is active when some
    job asks for it, or when it is named in ``force`` (so that job sets drawn from one
    workload all show a learned agent the same pools).
    """
    if len(requests) != len(nodes):
        raise InvalidInput(f"{len(requests)} resource requests for {len(nodes)} jobs")
    idle = machine.idle_power_w
    power_pool = 0
    if machine.power_budget_w:
        power_pool = machine.power_budget_w - total_nodes * idle
        if power_pool <= 0:
            raise InvalidInput(
                f"power budget {machine.power_budget_w} W does not exceed the idle draw of "
                f"{total_nodes} nodes x {idle} W: no job could ever start"
            )
    use_bb = use_power = False
    for i, (req, n) in enumerate(zip(requests, nodes)):
        who = labels[i] if labels is not None else f"job at position {i}"
        if req.burst_buffer_gb:
            use_bb = True
            if req.burst_buffer_gb > machine.burst_buffer_gb:
                raise InvalidInput(
                    f"{who}: requests {req.burst_buffer_gb} GB of burst buffer, the machine "
                    f"has {machine.burst_buffer_gb} GB"
                )
        if req.power_w_per_node:
            use_power = True
            if not machine.power_budget_w:
                raise InvalidInput(f"{who}: requests power but the machine has no power budget")
            if req.power_w_per_node < idle:
                raise InvalidInput(
                    f"{who}: requests {req.power_w_per_node} W per node, below the idle "
                    f"draw of {idle} W"
                )
            if n * (req.power_w_per_node - idle) > power_pool:
                raise InvalidInput(
                    f"{who}: {n} nodes x {req.power_w_per_node} W exceed the power budget "
                    f"{machine.power_budget_w} W (with the other nodes idle at {idle} W)"
                )
        if req.memory_mb_per_node and req.memory_mb_per_node > machine.memory_per_node_mb:
            raise InvalidInput(
                f"{who}: requests {req.memory_mb_per_node} MB per node, a node has "
                f"{machine.memory_per_node_mb} MB"
            )
    use_bb = use_bb or ("burst_buffer" in force and machine.burst_buffer_gb > 0)
    use_power = use_power or ("power" in force and power_pool > 0)
    names: list[str] = []
    capacity: list[int] = []
    if use_bb:
        names.append("burst_buffer")
        capacity.append(machine.burst_buffer_gb)
    if use_power:
        names.append("power")
        capacity.append(power_pool)
    take = []
    for req, n in zip(requests, nodes):
        row = []
        if use_bb:
            row.append(req.burst_buffer_gb)
        if use_power:
            row.append(n * (req.power_w_per_node - idle) if req.power_w_per_node else 0)
        take.append(tuple(row))
    return PoolModel(tuple(names), tuple(capacity), take)
