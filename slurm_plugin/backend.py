"""The Slurm backend: ``coscheduler.backend.Backend`` over a real Slurm cluster.

It only translates; the controller and policies are the same as on every other body.

Which jobs it sees. Jobs in the co-scheduling partition are *ours*: the submit hook
(``job_submit.lua``) holds them (priority 0) until the controller starts them.
- ``queued()``: ours, pending, held, dependencies satisfied (Slurm clears ``afterok``
  entries once met). A job whose dependency failed, or whose metadata cannot be read, is
  cancelled and reported failed with the reason (never left waiting).
- ``running()``: every job holding cores on the partition's nodes. Ours carry their host
  or guest role and quota from the job's ``AdminComment`` (written only by this backend;
  only Slurm admins can write it), so a restarted controller finds them again. Jobs of
  other partitions are reported ``lendable=False``: they hold cores, never host a guest.
  A job this backend released that Slurm has not started yet is reported running on the
  nodes it was placed on (the controller must not place anything else there).
- ``nodes()``: every node of the partition. The free cores of a node that is down, drained
  or not responding, or where a job that may not share cores runs (Slurm places no sharing
  job there at all), are held by a placeholder ``unavailable.NODE`` in ``running()``, so
  nothing is placed there and no job is given up as too big while a node is away.
- ``drain_finished()``: each of our jobs that reached a final state, once (also across
  controller restarts: the ids already reported are kept in ``state_file``). A job that
  vanished from Slurm's memory is looked up in the jobcomp/filetxt log, else reported
  failed. Runtimes come from the job's own usage record when the job wrapper wrote one
  (sub-second), else from Slurm's start/end times (whole seconds).

How it acts.
- ``start``: ``scontrol update JobId=X NodeList=... AdminComment=...`` then
  ``scontrol release X``; a guest's quota is registered with the node agents first, so its
  processes are throttled from the agent's first look at them.
- ``set_quota``: every node agent of the job's allocation gets the quota under a lease,
  renewed on every pass; the ``AdminComment`` records it. If the controller dies, leases
  lapse and every job gets its full CPU back (DESIGN.md's fail-safe).
- Slurm commands failing or timing out raise ``BackendError`` naming the command and its
  stderr (after retries with backoff for an unreachable slurmctld); the controller keeps
  running and tries again next pass. Leases are renewed before Slurm is asked anything, so
  a slurmctld outage does not drop quotas.

Files: this one holds the Backend interface and the state file; reading Slurm's jobs and
nodes is reading.py's, the calls to the node agents agent_calls.py's (mixins of
``SlurmBackend``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

from coscheduler import boundedjson
from coscheduler.backend import BackendError, check_quota_fraction
from coscheduler.clocks import due
from coscheduler.fanout import DEFAULT_THREADS
from coscheduler.oldfiles import Retention
from coscheduler.model import (Allocation, InvalidInput, Job, MetricsSample, Node, Outcome,
                               RunningJob, check_finite)

from .metadata import (AdminMark, format_admin_comment)
from .jobcomp import find_in_jobcomp, lines_from_end
from .parse import ParseError, SlurmJob, dependency_state, digits
from .source import SlurmSource
from .agent_calls import AgentCalls, number
from .reading import _RUNNING, SlurmReading
from .usage_files import USAGE_KEPT_S, USAGE_SCAN_S, UsageRecords
from .walltime import WalltimeCredit, credit_minutes, projected_end

log = logging.getLogger("slurm_plugin.backend")

_MAX_STATE_BYTES = 64 << 20            # its own state file: job ids and times
# Ended jobs remembered in memory (``history``, ``eligible_at``): a controller runs for
# months; past this many the oldest are let go (in steps of a fifth, so trimming is rare).
ENDED_KEPT = 50_000
_CLOSED_NODE_S = 60.0                 # how soon a closed node is expected back (per pass)


class SlurmBackend(SlurmReading, AgentCalls, UsageRecords):
    """See the module docstring. ``agents`` maps node name -> ``monitoring.client.AgentClient``
    (nodes without an agent are run without quotas and without metrics)."""

    name = "slurm"

    def __init__(self, source: SlurmSource, *, partition: str = "cosched",
                 agents: Mapping[str, object] | None = None, lease_s: float = 20.0,
                 state_file: str | os.PathLike | None = None,
                 jobcomp_file: str | os.PathLike | None = None,
                 usage_dir: str | os.PathLike | None = None, refresh_s: float = 0.25,
                 clock: Callable[[], float] = time.time, cpu_per_core: float = 1.0,
                 agent_threads: int = DEFAULT_THREADS):
        self.source = source
        # node agents asked at once (their job views, lease renewals): each call waits on
        # the network, one after the other a pass over many nodes waited every round trip
        if isinstance(agent_threads, bool) or not isinstance(agent_threads, int) or agent_threads < 1:
            raise InvalidInput(f"agent_threads must be an integer >= 1, got {agent_threads!r}")
        self.agent_threads = agent_threads
        # What one Slurm CPU is worth in real CPUs (1 on a real cluster; less on the
        # emulated one), as the agents count it: the base of an outcome's cpu_percent.
        self.cpu_per_core = check_finite(cpu_per_core, "cpu_per_core", minimum=1e-6)
        self.partition = partition
        self.agents = dict(agents or {})
        self.lease_s = check_finite(lease_s, "lease_s", minimum=1.0)
        self.state_file = Path(state_file) if state_file else None
        self.jobcomp_file = Path(jobcomp_file) if jobcomp_file else None
        self.usage_dir = Path(usage_dir) if usage_dir else None
        self.refresh_s = refresh_s
        self._clock = clock
        self._snap_time = -math.inf
        self.last_read_s = 0.0     # how long the last read of Slurm took
        self._jobs: dict[int, SlurmJob] = {}
        self._nodes: dict = {}
        self._job_cache: dict[int, Job] = {}
        self._planned: dict[int, tuple[Allocation, float]] = {}
        self._layouts: dict[int, tuple[tuple[str, int], ...]] = {}
        self._known: dict[int, str] = {}           # ours seen queued/running -> last state
        # ... and their (user, submit time) as Slurm showed them: what a jobcomp line read
        # for one once it vanished must agree with (jobcomp.find_in_jobcomp)
        self._seen: dict[int, tuple[str | None, float | None]] = {}
        self._quotas: dict[int, tuple[float, tuple[str, ...]]] = {}
        self._renewed: dict[int, float] = {}
        self._roles: dict[int, str | None] = {}    # the role sent with a job's quota
        self._on_agents: dict[int, set[str]] = {}  # nodes whose agent we registered a job with
        self._outbox: list[Outcome] = []
        self._ours_running: set[str] = set()    # ours that Slurm runs now (last running())
        self.reported: set[int] = set()
        self.eligible_at: dict[int, float] = {}
        self.history: list[Outcome] = []
        self.errors: list[str] = []
        self.credits: list[WalltimeCredit] = []
        self._new_credits: list[WalltimeCredit] = []
        self._max_time: tuple[float, float | None] | None = None   # (read at, MaxTime s)
        self._usage_retention = Retention(USAGE_KEPT_S, USAGE_SCAN_S)   # of usage_dir
        self._load_state()

    # -- persistent bits ----------------------------------------------------------------------
    def _load_state(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            data = boundedjson.load_file(self.state_file, max_bytes=_MAX_STATE_BYTES, max_depth=8)
            self.reported = {int(x) for x in data.get("reported", [])}
            self.eligible_at = {int(k): float(v) for k, v in data.get("eligible_at", {}).items()}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            broken = self.state_file.with_name(self.state_file.name + f".broken-{int(time.time())}")
            log.error("Slurm backend state %s is unreadable (%s): set aside as %s",
                      self.state_file, exc, broken)
            try:
                os.replace(self.state_file, broken)
            except OSError:
                pass

    def _save_state(self) -> None:
        if self.state_file is None:
            return
        alive = set(self._jobs)
        data = {"reported": sorted(self.reported & alive),
                "eligible_at": {str(k): v for k, v in self.eligible_at.items() if k in alive}}
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        try:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self.state_file)
        except OSError as exc:
            log.error("cannot write Slurm backend state %s: %s", self.state_file, exc)

    # -- Backend interface ----------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """Every node of the partition, usable now or not: a node that is down, drained or
        closed to sharing jobs for a while has its free cores held by a placeholder in
        ``running()`` instead, so the controller waits for it rather than deciding that a
        job can never fit."""
        self._refresh()
        return [Node(n.name, n.cpus) for n in self._partition_nodes()]

    def _closed_nodes(self) -> set[str]:
        """Partition nodes where nothing of ours can start now: not usable (down, drained,
        not responding...) or running a job that may not share cores."""
        blocked = self._blocked_nodes()
        return {n.name for n in self._partition_nodes() if not n.usable or n.name in blocked}

    def queued(self) -> list[Job]:
        self._refresh()
        out = []
        now = self._clock()
        states = {jid: x.state for jid, x in self._jobs.items()}
        for j in self._jobs.values():
            if not self._ours(j) or j.state != "PENDING" or not j.held:
                continue
            if j.job_id in self._planned and j.reason not in ("JobHeldUser", "JobHeldAdmin"):
                # We released it and Slurm held it again: it refused the placement.
                self._give_up(j, f"Slurm refused to start it where it was placed ({j.reason})")
                continue
            dep = dependency_state(j.dependency, states)
            if dep == "failed" or j.reason == "DependencyNeverSatisfied":
                self._give_up(j, f"its dependency {j.dependency or '(unknown)'} can never be satisfied")
                continue
            try:
                job = self._job(j)
            except InvalidInput as exc:
                self._give_up(j, f"cannot be co-scheduled: {exc}")
                continue
            self._known[j.job_id] = "PENDING"
            self._seen[j.job_id] = (j.user, j.submit_time)
            if dep == "waiting":
                continue
            self.eligible_at.setdefault(j.job_id, now)
            out.append(job)
        return out

    def running(self) -> list[RunningJob]:
        self._refresh()
        node_names = {n.name for n in self._partition_nodes()}
        blocked = self._closed_nodes()
        rows: dict[int, tuple[Job, Allocation, float, AdminMark, bool]] = {}
        for j in self._jobs.values():
            ours = self._ours(j)
            started = j.state in _RUNNING
            starting = ours and j.state == "PENDING" and not j.held and j.job_id in self._planned
            if not (started or starting):
                continue
            if starting:
                lost = [n for n in self._planned[j.job_id][0].nodes
                        if n in self._nodes and not self._nodes[n].usable]
                if lost:
                    # Released onto a node that went down before Slurm started it: Slurm
                    # would keep it pending there forever (ReqNodeNotAvail). Seen when a
                    # node container of the Docker testbed was killed mid-run.
                    self._planned.pop(j.job_id, None)
                    self._give_up(j, f"its node {lost[0]} went down "
                                     f"({self._nodes[lost[0]].state}) before it started there")
                    continue
            if not ours and not (set(j.nodes) & node_names):
                continue
            try:
                job = self._job(j) if ours else self._foreign_job(j)
            except InvalidInput as exc:
                log.warning("running job %s is reported without co-scheduling: %s", j.job_id, exc)
                job, ours = self._foreign_job(j), False
            alloc = self._allocation(j, job)
            if alloc is None:
                continue
            if ours:
                self._known[j.job_id] = j.state
                self._seen[j.job_id] = (j.user, j.submit_time)
                mark = self._mark(j)
                if started and mark.quota < 1.0 and j.job_id not in self._quotas:
                    # Found after a restart: re-apply the recorded quota on the next renewal.
                    self._quotas[j.job_id] = (mark.quota, alloc.nodes)
                    self._renewed[j.job_id] = -math.inf
            start = j.start_time if started and j.start_time else self._planned.get(
                j.job_id, (None, self._clock()))[1]
            # A job Slurm has not started yet cannot host (Slurm would not place a guest
            # beside it); neither can one that may not share, or sits on a closed node.
            lendable = ours and started and j.shared is True and not (set(alloc.nodes) & blocked)
            rows[j.job_id] = (job, alloc, start, self._mark(j) if ours else AdminMark(), lendable)
        self._ours_running = {str(jid) for jid, row in rows.items()
                              if self._ours(self._jobs[jid]) and self._jobs[jid].state in _RUNNING}
        guests: dict[str, list[str]] = {}
        for jid, (job, _, _, mark, _) in rows.items():
            if mark.host is not None and int(mark.host) in rows:
                guests.setdefault(mark.host, []).append(job.job_id)
        out = []
        held: dict[str, int] = {}
        for jid, (job, alloc, start, mark, lendable) in rows.items():
            host = mark.host if mark.host is not None and int(mark.host) in rows else None
            out.append(RunningJob(job, alloc, float(start), mark.quota, host,
                                  tuple(sorted(guests.get(job.job_id, ()))), lendable=lendable))
            if host is None:
                for node, c in alloc.cores_by_node:
                    held[node] = held.get(node, 0) + c
        now = self._clock()
        for node in sorted(blocked):
            free = self._nodes[node].cpus - held.get(node, 0)
            if free > 0:
                # The node's free cores are out of reach for now: held by a placeholder that
                # is expected to let go within a minute (re-made every pass while it lasts).
                jid = f"unavailable.{node}"
                out.append(RunningJob(
                    Job(job_id=jid, cores=free, walltime_s=_CLOSED_NODE_S, job_class="unavailable/node"),
                    Allocation(jid, ((node, free),)), now, lendable=False))
        return out

    def metrics(self) -> dict[str, MetricsSample]:
        self._refresh()
        running = {rj.job_id: rj for rj in self.running() if rj.job_id in self._ours_running}
        if not self.agents:
            return {}
        per_job = self._job_views(running)
        self._renew_leases()
        now = self._clock()
        out: dict[str, MetricsSample] = {}
        for jid, views in per_job.items():
            # (number(): an agent's figure that is not a finite number counts as missing)
            cpu = [(c, p) for c, v in views if (p := number(v.get("cpu_percent"))) is not None]
            if not cpu:
                continue
            done = max(int(min(number(v.get("tasks_done")) or 0.0, 2.0 ** 62)) for _, v in views)
            tt = [t for _, v in views if (t := number(v.get("tasks_total"))) is not None]
            rate = [r for _, v in views if (r := number(v.get("tasks_per_s"))) is not None]
            try:
                out[jid] = MetricsSample(
                    job_id=jid, time=now,
                    cpu_percent=sum(c * p for c, p in cpu) / sum(c for c, _ in cpu),
                    mem_percent=max(number(v.get("mem_percent")) or 0.0 for _, v in views),
                    tasks_done=done, tasks_total=int(min(max(tt), 2.0 ** 62)) if tt else None,
                    tasks_per_s=max(rate) if rate else None)
            except InvalidInput as exc:
                self._note(f"job {jid}: its agents' figures are not a sample: {exc}")
                continue
        self._credit_walltime(out, now)
        return out

    # -- walltime credit (slurm_plugin/walltime.py) -------------------------------------------
    def _partition_max_s(self, now: float) -> float | None:
        if self._max_time is None or due(now, self._max_time[0], 60.0):
            read = getattr(self.source, "partition_max_time", None)
            if read is None:
                raise BackendError(f"{self.source.name} cannot read partition {self.partition}'s MaxTime")
            self._max_time = (now, read(self.partition))
        return self._max_time[1]

    def _credit_walltime(self, samples: Mapping[str, MetricsSample], now: float) -> None:
        """A host that lends (quota below 1, no host of its own) and whose progress projects
        an end past its time limit gets the time back, within the partition's MaxTime."""
        for jid_s, m in samples.items():
            jid = int(jid_s) if digits(jid_s) else None
            q = self._quotas.get(jid) if jid is not None else None
            j = self._jobs.get(jid) if jid is not None else None
            if q is None or q[0] >= 1.0 or j is None or j.state != "RUNNING" \
                    or not j.time_limit_s or not j.start_time or self._mark(j).host is not None:
                continue
            end = projected_end(j.start_time, now, m.tasks_done, m.tasks_total, m.tasks_per_s)
            if end is None:
                continue
            try:
                max_s = self._partition_max_s(now)
                # At quota q a CPU-bound host runs at q of its speed: its limit stretches to
                # at most limit / q. A projection past that is a bad progress count, not
                # lending (the counts come from the job's own progress file).
                most_s = j.time_limit_s * (1.0 / max(q[0], 0.01) - 1.0)
                minutes, capped = credit_minutes(j.start_time, j.time_limit_s, end, max_s,
                                                 most_s=most_s)
                if minutes <= 0:
                    continue
                self.source.update(jid, TimeLimit=f"+{minutes}")
            except (BackendError, ParseError, ArithmeticError) as exc:
                self._note(f"walltime credit of job {jid}: {exc}")
                continue
            credit = WalltimeCredit(jid_s, minutes, now, j.time_limit_s, end, capped)
            self.credits.append(credit)
            self._new_credits.append(credit)
            self._written(replace(j, time_limit_s=j.time_limit_s + 60.0 * minutes))
            log.info("job %s: time limit +%d min (projected end %.0f s after its limit)", jid,
                     minutes, end - j.start_time - j.time_limit_s)

    def drain_walltime_credits(self) -> list[dict]:
        """The credits given since the last call (the daemon records them with decisions)."""
        out, self._new_credits = [c.as_dict() for c in self._new_credits], []
        return out

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        self._refresh_for_write()
        jid = _slurm_id(job.job_id)
        j = self._jobs.get(jid)
        if j is None or not self._ours(j) or j.state != "PENDING" or not j.held:
            state = "unknown to Slurm" if j is None else f"{j.state}, partition {j.partition}" + (
                ", held" if j.held else ", not held")
            raise BackendError(f"cannot start job {job.job_id}: it is not a queued job of "
                               f"partition {self.partition} ({state})")
        q = check_quota_fraction(job.job_id, quota_fraction)
        if allocation.job_id != job.job_id or allocation.cores != job.cores:
            raise BackendError(f"cannot start job {job.job_id}: allocation {allocation} does not "
                               f"match its {job.cores} cores")
        known = {n.name for n in self._partition_nodes()}
        bad = [n for n in allocation.nodes if n not in known]
        if bad:
            raise BackendError(f"cannot start job {job.job_id}: node(s) {bad} are not in partition "
                               f"{self.partition}")
        if host_job is not None:
            h = self._jobs.get(_slurm_id(host_job))
            if h is None or h.state not in _RUNNING or not self._ours(h):
                raise BackendError(f"cannot start job {job.job_id} as a guest: host {host_job} is "
                                   "not a running co-scheduled job")
        mark = AdminMark(q, host_job)
        fields = {"NodeList": ",".join(allocation.nodes), "AdminComment": format_admin_comment(mark)}
        if dependency_state(j.dependency) == "waiting":
            states = {x.job_id: x.state for x in self._jobs.values()}
            if dependency_state(j.dependency, states) != "satisfied":
                raise BackendError(f"cannot start job {job.job_id}: its dependency "
                                   f"{j.dependency} is not met")
            # Met by the snapshot; Slurm would notice only at its next periodic pass.
            fields["Dependency"] = ""
        self.source.update(jid, **fields)
        # (what this pass knows of the job now, without reading all of Slurm again)
        j = self._written(replace(j, required_nodes=tuple(allocation.nodes),
                                  admin_comment=fields["AdminComment"],
                                  dependency="" if "Dependency" in fields else j.dependency))
        if q < 1.0:
            # Throttle the guest from the agent's first look at it.
            placed = RunningJob(job, allocation, self._clock(), q, host_job)
            for node, cores in allocation.cores_by_node:
                if node in self.agents:
                    if self._register(node, placed, cores, strict=True) is None:
                        raise BackendError(f"cannot start job {job.job_id}: the agent of {node} "
                                           "did not take it")
                    self._roles[jid] = "guest" if host_job else None
                    self._agent_quota(node, job.job_id, q, self._roles[jid])
        self.source.release(jid)
        self._written(replace(j, priority=None))   # released: no longer held
        now = self._clock()
        self._planned[jid] = (allocation, now)
        self._quotas[jid] = (q, allocation.nodes)
        self._renewed[jid] = now
        self._known[jid] = "PENDING"

    def set_quota(self, job_id: str, quota_fraction: float) -> None:
        self._refresh_for_write()
        jid = _slurm_id(job_id)
        j = self._jobs.get(jid)
        if j is None or not self._ours(j) or not (j.state in _RUNNING or jid in self._planned
                                                   and j.state == "PENDING"):
            raise BackendError(f"cannot set the quota of job {job_id}: it is not a running "
                               f"co-scheduled job ({'unknown to Slurm' if j is None else j.state})")
        q = check_quota_fraction(job_id, quota_fraction)
        job = self._job(j)
        alloc = self._allocation(j, job)
        if alloc is None:
            raise BackendError(f"cannot set the quota of job {job_id}: its nodes are unknown")
        rj = RunningJob(job, alloc, j.start_time or self._clock(), q)
        role = self._roles[jid] = self._role(jid) if q < 1.0 else None
        for node, cores in alloc.cores_by_node:
            if node not in self.agents:
                continue
            if q < 1.0:
                if self._register(node, rj, cores, strict=True) is None:
                    raise BackendError(f"cannot set the quota of job {job_id}: the agent of {node} "
                                       "did not take it")
                self._agent_quota(node, job_id, q, role)
            else:
                self._agent_clear(node, job_id)
        mark = self._mark(j)
        if abs(mark.quota - q) > 1e-6:
            comment = format_admin_comment(AdminMark(q, mark.host))
            self.source.update(jid, AdminComment=comment)
            self._written(replace(j, admin_comment=comment))
        self._quotas[jid] = (q, alloc.nodes)
        self._renewed[jid] = self._clock()

    def _written(self, j: SlurmJob) -> SlurmJob:
        """Keep in the snapshot what this backend just wrote to a job, so that the pass's
        next calls see it without reading all of Slurm again (each start or quota change
        used to force a new squeue and sinfo: two per co-allocation, each a parse of the
        whole queue). The next pass reads Slurm afresh (``drain_finished``)."""
        self._jobs[j.job_id] = j
        return j

    def fail(self, job_id: str, reason: str) -> None:
        self._refresh()
        j = self._jobs.get(_slurm_id(job_id))
        if j is None or not self._ours(j) or j.state != "PENDING":
            raise BackendError(f"cannot fail job {job_id}: it is not queued")
        self._give_up(j, reason)

    def drain_finished(self) -> list[Outcome]:
        self._renew_leases()   # first: a slurmctld outage must not drop quotas
        self._refresh(force=True)
        self._prune_usage()
        out, self._outbox = self._outbox, []
        ids = sorted(set(self._known) | {j.job_id for j in self._jobs.values()
                                         if self._ours(j) and j.terminal})
        gone = [jid for jid in ids if jid not in self.reported and jid not in self._jobs]
        jobcomp = self._read_jobcomp(gone) if gone else {}
        for jid in ids:
            if jid in self.reported:
                self._known.pop(jid, None)
                self._seen.pop(jid, None)
                continue
            j = self._jobs.get(jid)
            if j is None:
                j = jobcomp.get(jid)
                if j is None:
                    end = self._clock()
                    start = self._planned.get(jid, (None, end))[1]
                    out.append(self._outcome_record(Outcome(
                        str(jid), start, end, "failed",
                        "vanished from Slurm (not in squeue nor in the jobcomp log)")))
                    continue
            if not j.terminal:
                continue
            out.append(self._outcome_record(self._outcome(j)))
        if out:
            self._save_state()
        return out

    # -- running jobs: helpers ------------------------------------------------------------------
    def _outcome_record(self, o: Outcome) -> Outcome:
        jid = int(o.job_id)
        # Whatever Slurm left behind (a node that was marked DOWN under a running job may
        # still run its processes), the job holds no quota from us any more.
        for node in sorted(self._on_agents.pop(jid, set()) | set(self._quotas.get(jid, (1.0, ()))[1])):
            client = self.agents.get(node)
            if client is None:
                continue
            try:
                client.unregister(str(jid))
            except Exception as exc:  # noqa: BLE001 - 404: the agent let it go already
                if getattr(exc, "status", None) != 404:
                    self._note(f"agent of {node}: releasing ended job {jid}: {exc}")
        self.reported.add(jid)
        self._known.pop(jid, None)
        self._seen.pop(jid, None)
        self._quotas.pop(jid, None)
        self._renewed.pop(jid, None)
        self._roles.pop(jid, None)
        self._planned.pop(jid, None)
        self.history.append(o)
        if len(self.history) > ENDED_KEPT:
            del self.history[:ENDED_KEPT // 5]
            kept = {int(x.job_id) for x in self.history if digits(x.job_id)}
            self.eligible_at = {k: v for k, v in self.eligible_at.items()
                                if k in kept or k in self._jobs}
        return o

    def _outcome(self, j: SlurmJob) -> Outcome:
        end = j.end_time or self._clock()
        start = j.start_time or end
        usage = self.usage(j.job_id, j.uid)
        mine = None
        if usage and j.state == "COMPLETED":
            s, e = usage.get("start"), usage.get("end")
            # The wrapper's own clock, to the microsecond, when it is this run's record.
            if isinstance(s, (int, float)) and isinstance(e, (int, float)) and 0 < e - s \
                    and start - 2 <= s and e <= end + 2:
                start, end, mine = float(s), float(e), usage
        if j.state == "COMPLETED":
            return Outcome(str(j.job_id), start, end, "completed",
                           cpu_percent=self._life_cpu_percent(j, mine, end - start))
        if j.state in ("TIMEOUT", "DEADLINE"):
            return Outcome(str(j.job_id), start, end, "timeout",
                           f"Slurm ended it at its time limit ({j.state})")
        if j.state in ("CANCELLED", "PREEMPTED", "REVOKED"):
            why = "scancel by its owner or an admin" if j.state == "CANCELLED" else j.state.lower()
            return Outcome(str(j.job_id), start, end, "cancelled", f"{j.state}: {why}")
        if j.state == "NODE_FAIL":
            return Outcome(str(j.job_id), start, end, "failed",
                           f"NODE_FAIL: node(s) {','.join(j.nodes) or '?'} went down")
        detail = f"exit code {j.exit_code}" if j.exit_code else ""
        if j.exit_signal:
            detail = f"signal {j.exit_signal}"
        return Outcome(str(j.job_id), start, end, "failed",
                       f"{j.state}" + (f": {detail}" if detail else "")
                       + (f" ({j.reason})" if j.reason and j.reason != "None" else ""))

    def _life_cpu_percent(self, j: SlurmJob, usage: dict | None, runtime_s: float) -> float | None:
        """The job's mean CPU use over its life, in % of its CPUs, from the job wrapper's
        record (the rusage of the job's processes at exit); None without one. What a job too
        short for the agents to sample used (the controller's ClassUsage)."""
        cpu_s = usage.get("cpu_s") if usage else None
        cores = j.cpus or 0
        if isinstance(cpu_s, bool) or not isinstance(cpu_s, (int, float)) or not math.isfinite(cpu_s) \
                or cpu_s < 0 or cores < 1 or not runtime_s > 0:
            return None
        return min(100.0, 100.0 * cpu_s / (runtime_s * cores * self.cpu_per_core))

    def _give_up(self, j: SlurmJob, reason: str) -> None:
        """Cancel one of our pending jobs and report it failed with ``reason``."""
        if j.job_id in self.reported:
            return
        try:
            self.source.cancel(j.job_id)
        except BackendError as exc:
            if "already" not in str(exc) and "Invalid job id" not in str(exc):
                self._note(f"cancelling job {j.job_id}: {exc}")
                return
        now = self._clock()
        log.warning("job %s given up: %s", j.job_id, reason)
        self._outbox.append(self._outcome_record(Outcome(str(j.job_id), now, now, "failed", reason)))
        self._save_state()

    def _read_jobcomp(self, wanted: list[int]) -> dict[int, SlurmJob]:
        """The jobcomp log's lines of ``wanted`` jobs (vanished from Slurm's memory), read
        from the log's end (``parse.find_in_jobcomp``)."""
        if self.jobcomp_file is None:
            return {}
        try:
            return find_in_jobcomp(lines_from_end(self.jobcomp_file), wanted, self._seen)
        except OSError:
            return {}

    def _note(self, msg: str) -> None:
        log.warning("%s", msg)
        self.errors.append(msg)
        del self.errors[:-100]



def _slurm_id(job_id: str) -> int:
    if not isinstance(job_id, str) or not digits(job_id):
        raise BackendError(f"{job_id!r} is not a Slurm job id")
    return int(job_id)


__all__ = ["SlurmBackend"]
