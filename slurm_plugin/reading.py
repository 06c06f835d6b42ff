"""The Slurm backend reading Slurm: one refresh per pass from its source (source.py), each
Slurm job as a ``Job`` (ours from its metadata, a foreign one as a whole-walltime holder),
its allocation, the nodes that are closed.

A mixin of ``backend.SlurmBackend``; it holds no state of its own.
"""

from __future__ import annotations

import logging
import math
import re
import time

from coscheduler.backend import BackendError
from coscheduler.clocks import due
from coscheduler.model import Allocation, InvalidInput, Job, StageType

from .metadata import AdminMark, default_class, parse_admin_comment, parse_comment
from .parse import ParseError, ReportedErrors, SlurmJob, printable

log = logging.getLogger("slurm_plugin.backend")

_RUNNING = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT"})
_FOREIGN_WALLTIME_S = 365 * 86400.0   # a job without a time limit holds its cores "forever"
_CLASS_BAD = re.compile(r"[^A-Za-z0-9_.+-]")   # (a partition name as a job class part)
# A start or quota change reads Slurm again only past this many times the last read's
# duration: reading then costs at most about a fifth of the act stage's time.
WRITE_AGE_READS = 4.0


class SlurmReading:
    """What Slurm says, as the core's records: refreshed jobs and nodes, ours or foreign, their allocations."""

    # -- reading Slurm --------------------------------------------------------------------------
    def now(self) -> float:
        return self._clock()

    def _refresh(self, force: bool = False, max_age: float | None = None) -> None:
        every = self.refresh_s if max_age is None else max_age
        if not force and not due(self._clock(), self._snap_time, every):
            return   # (wall clock: ``due`` also reads again after a step back)
        t0 = time.monotonic()
        try:
            jobs = self.source.jobs()
            nodes = self.source.nodes()
        except BackendError:
            raise
        except ReportedErrors as exc:
            raise BackendError(f"Slurm could not say what runs: {exc} (is slurmctld up? "
                               "`scontrol ping` tells)") from None
        except ParseError as exc:
            raise BackendError(f"Slurm answered something unreadable: {exc}") from None
        self._jobs = {j.job_id: j for j in jobs}
        self._nodes = {n.name: n for n in nodes if self._has_cpus(n)}
        self._snap_time = self._clock()
        self.last_read_s = time.monotonic() - t0
        self._forget_gone()

    def _has_cpus(self, node) -> bool:
        """A node Slurm reports with no CPUs (0 or fewer: a half-registered node) is left
        out, with one warning per node, rather than failing every pass on it."""
        if node.cpus >= 1:
            return True
        warned = self.__dict__.setdefault("_cpuless_warned", set())
        if node.name not in warned and len(warned) < 10_000:
            warned.add(node.name)
            log.warning("node %s: Slurm reports %d CPUs; left out until it reports some",
                        printable(node.name, 100), node.cpus)
        return False

    def _refresh_for_write(self) -> None:
        """Before a start or a quota change. The pass decided on the snapshot it read at its
        start, and what this backend wrote since is kept in it (``_written``): it is read
        again only when older than ``WRITE_AGE_READS`` times what the last read took (at
        least ``refresh_s``). At 10,000 jobs a read takes seconds; re-reading it before each
        call made the act stage of a pass a series of whole-queue reads."""
        self._refresh(max_age=max(self.refresh_s, WRITE_AGE_READS * self.last_read_s))

    def _forget_gone(self) -> None:
        """Let go of what is kept per job once Slurm no longer lists the job and nothing
        here still tracks it (a controller runs for months: it holds the jobs of now, not
        every job it ever saw). A job id no longer listed is never looked at again, so
        forgetting that it was reported cannot report it twice."""
        keep = self._jobs.keys() | self._known.keys() | self._planned.keys() | self._quotas.keys()
        for cache in (self._job_cache, self._layouts, self._seen):
            for jid in [k for k in cache if k not in keep]:
                del cache[jid]
        if len(self.reported) > len(keep):
            self.reported &= keep

    def _ours(self, j: SlurmJob) -> bool:
        return j.partition == self.partition

    def _partition_nodes(self) -> list:
        return [n for n in self._nodes.values() if self.partition in n.partitions]

    def _blocked_nodes(self) -> set[str]:
        """Nodes where a running job may not share cores: Slurm places no sharing job there."""
        out: set[str] = set()
        for j in self._jobs.values():
            if j.state in _RUNNING and j.shared is not True:
                out.update(j.nodes)
        return out

    def _job(self, j: SlurmJob) -> Job:
        """Our Slurm job as the controller's Job (raises InvalidInput naming the problem)."""
        cached = self._job_cache.get(j.job_id)
        if cached is not None:
            return cached
        if j.time_limit_s is None:
            raise InvalidInput(f"job {j.job_id} has no time limit; co-scheduled jobs need --time")
        meta = parse_comment(j.comment, j.time_limit_s)
        cores = j.cpus
        if not cores:
            raise InvalidInput(f"job {j.job_id}: Slurm reports no CPU count")
        if j.nodes:
            nodes = len(j.nodes)
        else:   # pending: what it asked for
            nodes = min(x for x in (j.max_nodes, j.node_count, cores) if x)
        stage = meta.stage_type or (StageType.PARALLEL if cores > 1 else StageType.SEQUENTIAL)
        job = Job(job_id=str(j.job_id), cores=int(cores), nodes=min(int(nodes), int(cores)),
                  walltime_s=meta.walltime_s or j.time_limit_s,
                  job_class=meta.job_class or default_class(j.user, j.name),
                  submit_time=j.submit_time or 0.0, stage_type=stage, tasks=meta.tasks or 1,
                  workflow=meta.workflow, user=j.user)
        self._job_cache[j.job_id] = job
        return job

    def _foreign_job(self, j: SlurmJob) -> Job:
        """Another partition's job as a holder of its cores, from values kept in range: it
        never raises (one odd job beside ours must not stop every pass)."""
        cores = max(1, j.cpus or len(j.nodes) or 1)
        limit = j.time_limit_s
        walltime = limit if limit is not None and 0 < limit <= _FOREIGN_WALLTIME_S \
            else _FOREIGN_WALLTIME_S
        partition = _CLASS_BAD.sub("_", j.partition)[:100].strip("._") or "none"
        return Job(job_id=str(j.job_id), cores=cores, nodes=max(1, min(len(j.nodes) or 1, cores)),
                   walltime_s=walltime, job_class=f"foreign/{partition}",
                   submit_time=j.submit_time if j.submit_time and math.isfinite(j.submit_time)
                   else 0.0, user=j.user)

    def _allocation(self, j: SlurmJob, job: Job) -> Allocation | None:
        planned = self._planned.get(j.job_id)
        if j.state == "PENDING":
            if planned is not None:
                return planned[0]
            if j.required_nodes:
                return _even(str(j.job_id), j.required_nodes, job.cores)
            return None
        nodes = j.nodes
        if not nodes:
            return None
        if len(nodes) == 1:
            return Allocation(str(j.job_id), ((nodes[0], job.cores),))
        # (decided once per job: a refused layout is not asked for and warned of every pass)
        layout = self._layouts.get(j.job_id) or _agreeing(j, job, j.cpus_by_node)
        if layout is None and planned is not None and planned[0].nodes == tuple(nodes):
            layout = planned[0].cores_by_node
        if layout is None:
            try:
                told = self.source.layout(j.job_id)
            except Exception as exc:  # noqa: BLE001 - an even split is the next best guess
                log.warning("job %s: CPU layout unknown (%s); assuming an even split", j.job_id, exc)
            else:
                layout = _agreeing(j, job, told)
                self._layouts[j.job_id] = layout or _even(str(j.job_id), nodes, job.cores
                                                          ).cores_by_node
        if layout:
            return Allocation(str(j.job_id), tuple(layout))
        return _even(str(j.job_id), nodes, job.cores)

    def _mark(self, j: SlurmJob) -> AdminMark:
        return parse_admin_comment(j.admin_comment) or AdminMark()


def _agreeing(j: SlurmJob, job: Job, layout) -> tuple[tuple[str, int], ...] | None:
    """``layout`` if it is one of ``j``'s: each of its nodes once, with CPUs adding up to its
    CPU count; else None (logged). ``scontrol show job -o -d``, the per-job layout's source
    where the JSON has none, prints the job's name and comment as they were typed, so a
    user can write ``Nodes=... CPU_IDs=...`` into them (seen on Slurm 22.05)."""
    if not layout:
        return None
    layout = tuple(layout)
    names = [n for n, _ in layout]
    if sorted(names) != sorted(j.nodes) or any(c < 1 for _, c in layout) \
            or sum(c for _, c in layout) != job.cores:
        log.warning("job %s: a CPU layout %s that is not its own (nodes %s, %d CPUs): not used",
                    j.job_id, layout, ",".join(j.nodes), job.cores)
        return None
    return layout


def _even(job_id: str, nodes, cores: int) -> Allocation:
    nodes = list(nodes)
    base, extra = divmod(cores, len(nodes))
    return Allocation(job_id, tuple((n, base + (1 if i < extra else 0)) for i, n in enumerate(nodes)
                                    if base + (1 if i < extra else 0) > 0))
