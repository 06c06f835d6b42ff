"""One JSON contract with every Slurm release: which command lists nodes and jobs, and in
which data_parser version, decided once from the release (``scontrol --version``).

- Nodes come from ``scontrol show node --json`` on every release that has it (23.02+),
  with the data_parser pinned (``--json=v0.0.4N``) so a release that moves its default
  keeps answering in a shape recorded in tests/fixtures/slurm/. Slurm 22.05 has no
  ``scontrol --json`` at all; its ``sinfo --json`` (openapi v0.0.38) still lists one record
  per node, so 22.05 reads that (23.02+ aggregates ``sinfo --json`` per partition, which
  is what broke ``slurm up`` on 24.11 and 26.05).
- Jobs come from ``squeue --json --states=all``, pinned the same way, read a job at a time
  as squeue prints them (``answerstream.py``); so are nodes.
- Releases before 21.08 have no JSON: ``scontrol show ... -o`` text.

An answer that lacks what the contract needs raises ``ParseError`` at once, naming the
release, the command and the missing field; callers never wait on it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from .answerstream import JobsStream, NodesStream, RecordStream, Surprise
from .commands import SlurmCommands
from .parse import ParseError, SlurmJob, SlurmNode, parse_jobs_json, parse_nodes_json
from .parse import parse_scontrol_jobs, parse_scontrol_nodes

log = logging.getLogger("slurm_plugin.contract")

# The data_parser pinned per release (major, minor): one each release ships (it keeps
# the three newest) and whose answers are recorded in tests/fixtures/slurm/<release>/.
# A release not listed asks for its default (``--json``) and is parsed by field.
PINNED_PARSER: dict[tuple[int, int], str] = {
    (24, 11): "v0.0.42",     # ships v0.0.40-v0.0.42
    (26, 5): "v0.0.42",      # ships v0.0.42-v0.0.45: the same shape as 24.11
}


@dataclass(frozen=True)
class Release:
    """A Slurm release as ``scontrol --version`` names it (``slurm 24.11.5``)."""

    major: int
    minor: int
    patch: int = 0

    @property
    def text(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.patch}"

    def at_least(self, major: int, minor: int) -> bool:
        return (self.major, self.minor) >= (major, minor)


def parse_release(text: str) -> Release:
    """``slurm 24.11.5`` / ``slurm-wlm 22.05.8`` / ``slurm 26.05.0-0rc1`` -> Release."""
    m = re.search(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", text or "")
    if not m:
        raise ParseError(f"`scontrol --version` answered {text.strip()[:80]!r}: no Slurm release in it")
    return Release(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def json_flag(rel: Release) -> str:
    parser = PINNED_PARSER.get((rel.major, rel.minor))
    return f"--json={parser}" if parser else "--json"


def node_command(rel: Release) -> tuple[str, ...]:
    """The command that lists nodes one record each on this release."""
    if not rel.at_least(21, 8):
        return ("scontrol", "show", "node", "-o")
    if not rel.at_least(23, 2):
        return ("sinfo", "--json")          # 22.05: no scontrol --json; sinfo is per node
    return ("scontrol", "show", "node", json_flag(rel))


def job_command(rel: Release) -> tuple[str, ...]:
    if not rel.at_least(21, 8):
        return ("scontrol", "show", "job", "-o", "-d")
    if not rel.at_least(23, 2):
        return ("squeue", "--json", "--states=all")
    return ("squeue", json_flag(rel), "--states=all")


def release(cmds: SlurmCommands) -> Release:
    """The release of the clients ``cmds`` runs (asked once per SlurmCommands)."""
    cached = getattr(cmds, "_release", None)
    if cached is None:
        cached = parse_release(cmds.run("scontrol", "--version", retry=False))
        cmds._release = cached
    return cached


def _what(rel: Release, argv: tuple[str, ...]) -> str:
    return f"Slurm {rel.text}: `{' '.join(argv)}`"


def parse_nodes(rel: Release, text: str) -> list[SlurmNode]:
    argv = node_command(rel)
    if argv[-1] == "-o":
        return parse_scontrol_nodes(text)
    return parse_nodes_json(text, _what(rel, argv))


def parse_jobs(rel: Release, text: str) -> list[SlurmJob]:
    argv = job_command(rel)
    if argv[-1] == "-d":
        return parse_scontrol_jobs(text)
    return parse_jobs_json(text, _what(rel, argv))


def read_nodes(cmds: SlurmCommands, *, retry: bool = True) -> list[SlurmNode]:
    """The nodes Slurm lists, read as ``read_jobs`` reads jobs."""
    rel = release(cmds)
    argv = node_command(rel)
    if argv[-1] == "-o":
        return parse_scontrol_nodes(cmds.run(*argv, retry=retry))
    return _streamed(cmds, argv, NodesStream, _what(rel, argv), parse_nodes_json, retry)


def read_jobs(cmds: SlurmCommands, *, retry: bool = True) -> list[SlurmJob]:
    """The jobs Slurm lists. A JSON answer is read as the command prints it, a job at a
    time (``answerstream``); one that is not the shape read so is read again whole, and the
    whole-text reader says what is wrong with it."""
    rel = release(cmds)
    argv = job_command(rel)
    if argv[-1] == "-d":
        return parse_scontrol_jobs(cmds.run(*argv, retry=retry))
    return _streamed(cmds, argv, JobsStream, _what(rel, argv), parse_jobs_json, retry)


def _streamed(cmds: SlurmCommands, argv: tuple[str, ...], stream: Callable[[str], RecordStream],
              what: str, parse_whole: Callable[[str, str], list], retry: bool) -> list:
    try:
        return cmds.stream(*argv, reader=lambda: stream(what), retry=retry).finish()
    except Surprise as exc:
        log.info("%s; reading the answer again, whole", exc)
    return parse_whole(cmds.run(*argv, retry=retry), what)


__all__ = ["PINNED_PARSER", "Release", "job_command", "json_flag", "node_command",
           "parse_jobs", "parse_nodes", "parse_release", "read_jobs", "read_nodes", "release"]
