"""Bookkeeping every backend body shares: the queue, hosts and guests, cores, outcomes.

A body (virtual, local, ...) subclasses ``JobBook`` and adds only how jobs really run.
The book enforces the Backend conventions (coscheduler/backend.py): a job is queued once
its parents completed, a job whose parent ended otherwise is reported failed, a guest
runs inside spare cores of a running host, a guest whose host ends holds those cores
alone, and every outcome is drained exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..backend import BackendError, check_quota_fraction
from ..model import Allocation, InvalidInput, Job, Node, Outcome, RunningJob

_EPS = 1e-9


@dataclass
class Run:
    """A running job as the book keeps it; ``data`` is the body's own (a process, a profile)."""

    job: Job
    allocation: Allocation
    start: float
    quota: float
    host: str | None
    data: Any = None
    guests: list[str] = field(default_factory=list)

    def running_job(self) -> RunningJob:
        return RunningJob(self.job, self.allocation, self.start, self.quota, self.host,
                          tuple(self.guests))


class JobBook:
    """The state a backend keeps about jobs, with the checks the controller relies on."""

    name = "book"

    def __init__(self, nodes: Iterable[Node] | dict[str, int]):
        if isinstance(nodes, dict):
            nodes = [Node(n, c) for n, c in nodes.items()]
        self._nodes = list(nodes)
        if not self._nodes:
            raise InvalidInput(f"{self.name} backend: needs at least one node")
        names = [n.name for n in self._nodes]
        if len(set(names)) != len(names):
            raise InvalidInput(f"{self.name} backend: node names repeat: {names}")
        self._capacity = {n.name: n.cores for n in self._nodes}
        self._used = {n.name: 0 for n in self._nodes}
        self._waiting: dict[str, tuple[Job, Any]] = {}   # submitted, not started
        self._runs: dict[str, Run] = {}
        self._ended: dict[str, str] = {}                  # job id -> final state
        self._finished: list[Outcome] = []                # not yet drained
        self.history: list[Outcome] = []                  # every outcome, in order
        self.starts: list[tuple[float, str, str | None]] = []  # (time, job, host)
        self.quota_log: list[tuple[float, str, float]] = []
        # Stages split into parts (``split``): stage -> its parts' ids, part -> its job,
        # and (until it ends) part -> stage.
        self.parts: dict[str, tuple[str, ...]] = {}
        self.part_jobs: dict[str, Job] = {}
        self._stage_of: dict[str, str] = {}
        self._part_ends: dict[str, Outcome] = {}

    def now(self) -> float:  # pragma: no cover - bodies define their clock
        raise NotImplementedError

    # -- workload -------------------------------------------------------------------------
    def _submit(self, job: Job, data: Any) -> None:
        jid = job.job_id
        if jid in self._waiting or jid in self._runs or jid in self._ended:
            raise InvalidInput(f"{self.name} backend: job {jid} was already submitted")
        for dep in job.depends_on:
            if dep not in self._waiting and dep not in self._runs and dep not in self._ended:
                raise InvalidInput(f"job {jid} depends on {dep}, which was not submitted")
        self._waiting[jid] = (job, data)

    # -- Backend interface (shared part) ----------------------------------------------------
    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def queued(self) -> list[Job]:
        self._resolve_dependencies()
        now = self.now()
        return [job for job, _ in self._waiting.values()
                if job.submit_time <= now + _EPS
                and all(self._ended.get(d) == "completed" for d in job.depends_on)]

    def running(self) -> list[RunningJob]:
        return [r.running_job() for r in self._runs.values()]

    def fail(self, job_id: str, reason: str) -> None:
        if job_id not in self._waiting:
            raise BackendError(f"cannot fail job {job_id}: it is not queued")
        del self._waiting[job_id]
        now = self.now()
        self._record(Outcome(job_id, now, now, "failed", reason))

    def _split(self, job_id: str, parts: Sequence[Job]) -> None:
        """Queue ``parts`` (``policies.span.split``) instead of queued job ``job_id``, each
        with the job's own data; a body whose data can run a part offers this as ``split``
        (the controller splits only on a backend that has it). The job's outcome is
        recorded once every part has ended: from the first part's start to the last part's
        end, completed if every part completed (else the first other state), so its
        successors wait for all of them."""
        entry = self._waiting.get(job_id)
        if entry is None:
            raise BackendError(f"cannot split job {job_id}: it is not queued")
        job, data = entry
        ids = [p.job_id for p in parts]
        if len(parts) < 2 or sum(p.cores for p in parts) != job.cores \
                or len(set(ids)) != len(ids) or any(
                    p.depends_on != job.depends_on or p.job_id in self._waiting
                    or p.job_id in self._runs or p.job_id in self._ended for p in parts):
            raise BackendError(f"cannot split job {job_id} into {ids}: the parts must be new "
                               f"jobs with its parents whose cores add up to its {job.cores}")
        del self._waiting[job_id]
        for p in parts:
            self._waiting[p.job_id] = (p, data)
            self._stage_of[p.job_id] = job_id
            self.part_jobs[p.job_id] = p
        self.parts[job_id] = tuple(ids)

    def drain_finished(self) -> list[Outcome]:
        self._resolve_dependencies()
        out, self._finished = self._finished, []
        return out

    def idle(self) -> bool:
        return not self._runs and not self._waiting

    # -- checks and transitions for the bodies ------------------------------------------------
    def _check_start(self, job: Job, allocation: Allocation, quota_fraction: float,
                     host_job: str | None) -> tuple[Any, float]:
        """Refuse a start that breaks the rules; returns the job's data and its quota."""
        jid = job.job_id
        entry = self._waiting.get(jid)
        if entry is None or entry[0].submit_time > self.now() + _EPS or any(
                self._ended.get(d) != "completed" for d in entry[0].depends_on):
            raise BackendError(f"cannot start job {jid}: it is not queued")
        q = check_quota_fraction(jid, quota_fraction)
        if allocation.job_id != jid or allocation.cores != job.cores or \
                len(allocation.cores_by_node) != job.nodes:
            raise BackendError(f"cannot start job {jid}: allocation {allocation} does not match "
                               f"its request of {job.cores} cores on {job.nodes} node(s)")
        if host_job is None:
            for node, c in allocation.cores_by_node:
                if node not in self._capacity:
                    raise BackendError(f"cannot start job {jid}: unknown node {node!r}")
                if self._used[node] + c > self._capacity[node]:
                    raise BackendError(f"cannot start job {jid}: node {node} has "
                                       f"{self._capacity[node] - self._used[node]} free cores, not {c}")
        else:
            host = self._runs.get(host_job)
            if host is None or host.host is not None:
                raise BackendError(f"cannot start job {jid} as a guest: {host_job} is not a running host")
            held = host.allocation.as_dict()
            for g in host.guests:
                for node, c in self._runs[g].allocation.cores_by_node:
                    held[node] = held.get(node, 0) - c
            for node, c in allocation.cores_by_node:
                if held.get(node, 0) < c:
                    raise BackendError(f"cannot start job {jid} inside {host_job}: node {node} "
                                       f"has {held.get(node, 0)} of the host's cores spare, not {c}")
        return entry[1], q

    def _commit_start(self, job: Job, allocation: Allocation, quota: float,
                      host_job: str | None, data: Any) -> Run:
        jid = job.job_id
        if host_job is None:
            for node, c in allocation.cores_by_node:
                self._used[node] += c
        else:
            self._runs[host_job].guests.append(jid)
        del self._waiting[jid]
        run = self._runs[jid] = Run(job, allocation, self.now(), quota, host_job, data)
        self.starts.append((run.start, jid, host_job))
        return run

    def _end(self, job_id: str, state: str, reason: str, end_time: float | None = None,
             use: tuple[float | None, float | None] = (None, None)) -> Run:
        """The job ended: its cores freed, its guests orphaned, its outcome recorded
        (``use``: its mean CPU and peak memory percentages, when known)."""
        r = self._runs.pop(job_id)
        if r.host is None:
            for node, c in r.allocation.cores_by_node:
                self._used[node] -= c
            for g in r.guests:  # orphaned guests now hold their cores alone
                gr = self._runs.get(g)
                if gr is not None:
                    gr.host = None
                    for node, c in gr.allocation.cores_by_node:
                        self._used[node] += c
        else:
            host = self._runs.get(r.host)
            if host is not None:
                host.guests.remove(job_id)
        end = self.now() if end_time is None else end_time
        self._record(Outcome(job_id, r.start, max(end, r.start), state, reason, *use))
        return r

    def _record(self, outcome: Outcome) -> None:
        self._ended[outcome.job_id] = outcome.state
        self._finished.append(outcome)
        self.history.append(outcome)
        stage = self._stage_of.pop(outcome.job_id, None)
        if stage is not None:
            self._part_ends[outcome.job_id] = outcome
            if all(p in self._part_ends for p in self.parts[stage]):
                self._record(self._stage_outcome(stage))

    def _stage_outcome(self, stage: str) -> Outcome:
        """A split stage's outcome from its parts' (``split``)."""
        parts = [self._part_ends.pop(p) for p in self.parts[stage]]
        bad = next((o for o in parts if o.state != "completed"), None)
        return Outcome(stage, min(o.start_time for o in parts), max(o.end_time for o in parts),
                       "completed" if bad is None else bad.state,
                       "" if bad is None else f"part {bad.job_id}: {bad.reason}".rstrip(": "))

    def _resolve_dependencies(self) -> None:
        changed = True
        while changed:
            changed = False
            for jid, (job, _) in list(self._waiting.items()):
                bad = [d for d in job.depends_on if self._ended.get(d, "completed") != "completed"]
                if bad:
                    del self._waiting[jid]
                    now = self.now()
                    self._record(Outcome(jid, now, now, "failed",
                                         f"dependency {bad[0]} ended {self._ended[bad[0]]}"))
                    changed = True


__all__ = ["JobBook", "Run"]
