"""Where the Slurm backend reads and writes a cluster: the command line, or pyslurm.

``SlurmSource`` is the small interface the backend needs (list jobs and nodes, one job's
CPU layout, update/release/hold/cancel a job). ``CommandLineSource`` implements it over
Slurm's command line and is what runs everywhere: nodes from ``scontrol show node
--json=v0.0.4N`` (22.05: ``sinfo --json``), jobs from ``squeue --json``, as
``contract.py`` decides once from the release. ``PyslurmSource`` (``pyslurm_source.py``) implements the same
interface over pyslurm, used only when ``import pyslurm`` works against the running Slurm.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .commands import SlurmCommandError, SlurmCommands
from .contract import read_jobs, read_nodes
from .parse import ParseError, SlurmJob, SlurmNode, duration_s, parse_scontrol_jobs

log = logging.getLogger("slurm_plugin.source")


class SlurmSource(Protocol):
    name: str

    def jobs(self) -> list[SlurmJob]: ...
    def nodes(self) -> list[SlurmNode]: ...
    def layout(self, job_id: int) -> tuple[tuple[str, int], ...] | None: ...
    def update(self, job_id: int, **fields: str) -> None: ...
    def release(self, job_id: int) -> None: ...
    def hold(self, job_id: int) -> None: ...
    def cancel(self, job_id: int) -> None: ...


class CommandLineSource:
    """A cluster through ``squeue``/``scontrol``/``scancel`` (any release): which command
    lists jobs and nodes, in which JSON shape, is ``contract.py``'s one rule per release."""

    name = "command line"

    def __init__(self, commands: SlurmCommands):
        self.cmd = commands

    def jobs(self) -> list[SlurmJob]:
        return read_jobs(self.cmd)

    def nodes(self) -> list[SlurmNode]:
        return read_nodes(self.cmd)

    def layout(self, job_id: int) -> tuple[tuple[str, int], ...] | None:
        jobs = parse_scontrol_jobs(self.cmd.run("scontrol", "show", "job", "-o", "-d", str(job_id)))
        return jobs[0].cpus_by_node if jobs else None

    def partition_max_time(self, partition: str) -> float | None:
        """The partition's MaxTime in seconds (None: UNLIMITED)."""
        text = self.cmd.run("scontrol", "show", "partition", partition, "-o")
        for field in text.split():
            if field.startswith("MaxTime="):
                return duration_s(field.split("=", 1)[1])
        raise ParseError(f"`scontrol show partition {partition} -o` has no MaxTime: {text[:120]!r}")

    def update(self, job_id: int, **fields: str) -> None:
        args = [f"{k}={v}" for k, v in fields.items()]
        self.cmd.run("scontrol", "update", f"JobId={int(job_id)}", *args)

    def release(self, job_id: int) -> None:
        self.cmd.run("scontrol", "release", str(int(job_id)))

    def hold(self, job_id: int) -> None:
        self.cmd.run("scontrol", "hold", str(int(job_id)))

    def cancel(self, job_id: int) -> None:
        self.cmd.run("scancel", str(int(job_id)))


def make_source(commands: SlurmCommands, prefer: str = "auto") -> SlurmSource:
    """``prefer``: ``cli``, ``pyslurm`` or ``auto`` (pyslurm when it imports and matches
    the running Slurm, else the command line)."""
    if prefer not in ("auto", "cli", "pyslurm"):
        raise ValueError(f"unknown Slurm source {prefer!r}: auto, cli or pyslurm")
    if prefer in ("auto", "pyslurm"):
        from .pyslurm_source import PyslurmSource, pyslurm_unavailable

        why = pyslurm_unavailable(commands)
        if why is None:
            return PyslurmSource(commands)
        if prefer == "pyslurm":
            raise SlurmCommandError(["pyslurm"], None, why, note="pyslurm cannot be used")
        log.info("pyslurm not used: %s", why)
    return CommandLineSource(commands)


__all__ = ["CommandLineSource", "SlurmSource", "make_source"]
