"""The simulated machine: identical nodes, each job takes whole nodes."""

from __future__ import annotations

from dataclasses import dataclass

from ..model import InvalidInput


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``procs_per_node`` processors each (SWF: MaxNodes, MaxProcs/MaxNodes)."""

    nodes: int
    procs_per_node: int = 1

    def __post_init__(self) -> None:
        for name in ("nodes", "procs_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"cluster {name} must be an integer >= 1, got {value!r}")

    @classmethod
    def from_swf_header(cls, max_nodes: int, max_procs: int) -> "Cluster":
        """MaxNodes nodes with MaxProcs/MaxNodes processors each."""
        if max_nodes < 1 or max_procs < max_nodes or max_procs % max_nodes:
            raise InvalidInput(
                f"MaxProcs ({max_procs}) must be a positive multiple of MaxNodes ({max_nodes})"
            )
        return cls(nodes=max_nodes, procs_per_node=max_procs // max_nodes)

    @property
    def procs(self) -> int:
        return self.nodes * self.procs_per_node

    def nodes_for(self, procs: int) -> int:
        """Whole nodes a job of ``procs`` processors takes: ceil(procs / procs_per_node)."""
        return -(-procs // self.procs_per_node)
