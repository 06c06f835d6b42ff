"""The testbed's workloads: the paper's 15-workflow mix scaled down to a testbed's size,
and the simulator's prediction for the same scaled setup.

``paper-small`` divides every workflow's cores by 8 (Montage, BLAST, Statistics at
1/2/4/8 cores, Synthetic at 2/4/8), so the largest job fits a node of 8 CPUs; on the
default testbed (2 nodes x 8 CPUs = 16 cores) that is the paper's 128-core cluster
(load 4x) scaled down by 8, on 1 node the 64-core one (8x). The stage jobs are the ones
``cosched simulate paper`` runs (``coscheduler.experiments.paper.paper_workload``, same
geometry and job classes), with a real command each: the stage programs shrink their CPU
work by the node's ``cpu_per_core`` (a node's CPU is a share of a real CPU), so a stage
keeps the runtime profile the simulator assumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from coscheduler.experiments import paper as paper_exp
from coscheduler.model import InvalidInput

from .compose import TestbedSpec


@dataclass(frozen=True)
class ScaledWorkload:
    name: str
    factor: int         # the paper's cores per job divided by this
    scale: float        # default work per task (1: the simulator's scale 1)
    about: str

    def mix(self) -> tuple[tuple[str, int], ...]:
        from coscheduler.workloads.jobs import PAPER_MIX

        return tuple((kind, max(1, cores // self.factor)) for kind, cores in PAPER_MIX)

    def largest_job(self) -> int:
        return max(c for _, c in self.mix())

    def paper_cores(self, spec: TestbedSpec) -> int | None:
        """The paper's cluster size this testbed scales down (None when not one of them)."""
        cores = spec.nodes * spec.cpus * self.factor
        return cores if cores in paper_exp.PAPER_LOAD else None


WORKLOADS: dict[str, ScaledWorkload] = {
    "paper-small": ScaledWorkload(
        "paper-small", 8, 0.1,
        "the paper's 15 workflows (46 stage jobs, all queued at t = 0) at 1/8 of their cores"),
}


def get_workload(name: object) -> ScaledWorkload:
    if name not in WORKLOADS:
        raise InvalidInput(f"unknown testbed workload {name!r}: use one of {', '.join(WORKLOADS)}")
    return WORKLOADS[str(name)]


def check_fits(w: ScaledWorkload, spec: TestbedSpec) -> None:
    if w.largest_job() > spec.cpus:
        raise InvalidInput(f"workload {w.name}'s largest job needs {w.largest_job()} CPUs on one "
                           f"node; this testbed's nodes have {spec.cpus}: bring it up with "
                           f"--cpus {w.largest_job()} or more")


def stages(w: ScaledWorkload, scale: float, tag: str, cpu_per_core: float = 1.0):
    """The stage jobs (``PaperStage``) in submission order, with their commands."""
    return paper_exp.paper_workload(scale, tag, "one", mix=w.mix(),
                                    core_speed=min(1.0, cpu_per_core))


def predict(w: ScaledWorkload, spec: TestbedSpec, scale: float, policies: Sequence[str],
            repeat: int = 1, seed: int = 0):
    """What ``cosched simulate paper`` predicts for the same workload, nodes and scale."""
    nodes = spec.nodes * spec.cpus
    return paper_exp.run_experiment([nodes], policies, repeat, scale, seed, node_cores=spec.cpus,
                                    sequential_cores="one", mix=w.mix())


__all__ = ["ScaledWorkload", "WORKLOADS", "check_fits", "get_workload", "predict", "stages"]
