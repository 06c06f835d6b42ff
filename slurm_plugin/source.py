"""Where the Slurm backend reads and writes a cluster: the command line, or pyslurm.

``SlurmSource`` is the small interface the backend needs (list jobs and nodes, one job's
CPU layout, update/release/hold/cancel a job). ``CommandLineSource`` implements it over
Slurm's command line and is what runs everywhere: it tries JSON first (``squeue --json``,
``sinfo --json``, then ``scontrol show node --json`` whose per-node records replaced
``sinfo``'s in 23.02+) and falls back to ``scontrol show ... -o`` text; the first form
that works is remembered. ``PyslurmSource`` (``pyslurm_source.py``) implements the same
interface over pyslurm, used only when ``import pyslurm`` works against the running Slurm.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .commands import SlurmCommandError, SlurmCommands
from .parse import (ParseError, SlurmJob, SlurmNode, parse_jobs_json, parse_nodes_json,
                    parse_scontrol_jobs, parse_scontrol_nodes)

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


# What a client prints when it does not know an option (a release without --json).
_NO_OPTION = ("unrecognized option", "invalid option", "unknown option", "Invalid argument --json")


class CommandLineSource:
    """A cluster through ``squeue``/``sinfo``/``scontrol``/``scancel`` (any release)."""

    name = "command line"

    def __init__(self, commands: SlurmCommands):
        self.cmd = commands
        self._job_form: str | None = None
        self._node_form: str | None = None

    def jobs(self) -> list[SlurmJob]:
        forms = [self._job_form] if self._job_form else ["squeue-json", "scontrol-text"]
        last: Exception | None = None
        for form in forms:
            try:
                if form == "squeue-json":
                    out = parse_jobs_json(self.cmd.run("squeue", "--json", "--states=all"))
                else:
                    out = parse_scontrol_jobs(self.cmd.run("scontrol", "show", "job", "-o", "-d"))
            except SlurmCommandError as exc:
                if exc.transient or not any(s in exc.stderr for s in _NO_OPTION):
                    raise
                last = exc
                continue
            except ParseError as exc:
                if self._job_form:
                    raise
                last = exc
                continue
            if self._job_form != form:
                log.info("reading jobs with %s", form)
                self._job_form = form
            return out
        raise last or ParseError("no way to list jobs worked")

    def nodes(self) -> list[SlurmNode]:
        forms = [self._node_form] if self._node_form else ["sinfo-json", "scontrol-json", "scontrol-text"]
        last: Exception | None = None
        for form in forms:
            try:
                if form == "sinfo-json":
                    out = parse_nodes_json(self.cmd.run("sinfo", "--json"))
                elif form == "scontrol-json":
                    out = parse_nodes_json(self.cmd.run("scontrol", "show", "node", "--json"),
                                           "scontrol show node --json")
                else:
                    out = parse_scontrol_nodes(self.cmd.run("scontrol", "show", "node", "-o"))
            except SlurmCommandError as exc:
                if exc.transient:
                    raise
                last = exc
                continue
            except ParseError as exc:
                if self._node_form:
                    raise
                last = exc
                continue
            if self._node_form != form:
                log.info("reading nodes with %s", form)
                self._node_form = form
            return out
        raise last or ParseError("no way to list nodes worked")

    def layout(self, job_id: int) -> tuple[tuple[str, int], ...] | None:
        jobs = parse_scontrol_jobs(self.cmd.run("scontrol", "show", "job", "-o", "-d", str(job_id)))
        return jobs[0].cpus_by_node if jobs else None

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
