"""The Slurm backend's calls to the node agents (monitoring/ over HTTP): register a job,
set and clear its leased quota, renew leases each pass, restore full quotas on exit.

A mixin of ``backend.SlurmBackend``; it holds no state of its own.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterator

from coscheduler.backend import BackendError
from coscheduler.clocks import due
from coscheduler.fanout import at_once
from coscheduler.model import RunningJob

from .metadata import AdminMark, format_admin_comment
from .parse import digits
from .reading import _RUNNING

log = logging.getLogger("slurm_plugin.backend")


def number(v: Any) -> float | None:
    """A finite number from an agent's view, else None (agents are peers: their answers
    are read, never trusted)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:   # (an int past float's range)
        return None
    return f if math.isfinite(f) else None


def views_by_job(views: Any) -> tuple[dict[str, dict], int]:
    """An agent's job list as {job id: view}, and how many entries were left out: not an
    object, or without a job id in text. One bad entry must not cost the node (or, read
    in the same loop, every node) its metrics and lease renewals."""
    if not isinstance(views, list):
        return {}, 1
    out: dict[str, dict] = {}
    dropped = 0
    for v in views:
        if isinstance(v, dict) and isinstance(v.get("job_id"), str):
            out[v["job_id"]] = v
        else:
            dropped += 1
    return out, dropped


class AgentCalls:
    """Calls to the node agents: register a job's processes, set and clear leased quotas,
    renew leases, give quotas back."""

    # -- node agents ----------------------------------------------------------------------------
    def _register(self, node: str, rj: RunningJob, cores: int, strict: bool = False) -> dict | None:
        client = self.agents.get(node)
        if client is None:
            return None
        job = rj.job
        self._on_agents.setdefault(int(job.job_id), set()).add(node)
        try:
            return client.register_job(job.job_id, [], float(cores), walltime_s=job.walltime_s,
                                       start_time=rj.start_time, tasks_total=job.tasks,
                                       job_class=job.job_class)
        except Exception as exc:  # noqa: BLE001
            if strict:
                raise BackendError(f"agent of {node}: registering job {job.job_id}: {exc}") from None
            self._note(f"agent of {node}: registering job {job.job_id}: {exc}")
            return None

    def _job_views(self, running: dict[str, RunningJob]) -> dict[str, list[tuple[int, dict]]]:
        """Each running job's views from the agents of its nodes, as (its cores there, the
        view); a job an agent does not know (or knows from before Slurm started it, or with
        other cores) is registered there. A quota an agent holds on a job that no longer
        lends or borrows, or is not ours, is lifted."""
        per_job: dict[str, list[tuple[int, dict]]] = {}
        # each node's jobs, found once (not every running job asked at every node)
        on_node: dict[str, list[tuple[str, RunningJob, int]]] = {}
        for jid, rj in running.items():
            for node, cores in rj.allocation.as_dict().items():
                if cores:
                    on_node.setdefault(node, []).append((jid, rj, cores))
        for node, client, listing in self._agent_listings():
            if isinstance(listing, Exception):   # a node without metrics this pass
                self._note(f"agent of {node}: {listing}")
                continue
            for jid, rj, cores in on_node.get(node, ()):
                v = listing.get(jid)
                if v is None or _stale(v, rj.start_time) or (
                        v.get("status") == "running" and number(v.get("cores")) != float(cores)):
                    v = self._register(node, rj, cores)
                if v is not None and self._plausible(node, jid, cores, v):
                    per_job.setdefault(jid, []).append((cores, v))
            for jid, v in listing.items():
                # A quota on a job that no longer shares its cores, or that is not ours: lift it.
                if v.get("status") == "running" and (number(v.get("cpu_fraction")) or 1.0) < 1.0:
                    q = self._quotas.get(int(jid)) if digits(jid) else None
                    if q is None or q[0] >= 1.0:
                        try:
                            client.clear_quota(jid)
                        except Exception as exc:  # noqa: BLE001
                            self._note(f"agent of {node}: lifting the quota of {jid}: {exc}")
        return per_job

    def _plausible(self, node: str, jid: str, cores: int, view: Any) -> bool:
        """A view whose CPU use fits on its node (at most all of the node's CPUs); another
        is set aside, noted: one absurd reading would skew what its class is expected to use."""
        if not isinstance(view, dict):
            return False
        p = number(view.get("cpu_percent"))
        n = self._nodes.get(node)
        if p is not None and n is not None and p * cores > 100.0 * n.cpus * (1 + 1e-9):
            self._note(f"agent of {node}: job {jid} at {p:.4g} % of {cores} cores, more "
                       f"than the node's {n.cpus} CPUs: reading left out")
            return False
        return True

    def _agent_listings(self) -> Iterator[tuple[str, Any, dict[str, dict] | Exception]]:
        """Every agent's job views by job id, as (node, client, views or the error), in the
        agents' order. The agents are asked at once, at most ``agent_threads`` at a time:
        asked one after the other, a pass over a thousand nodes waited a thousand round trips."""
        agents = list(self.agents.items())

        def listing(client) -> tuple[dict[str, dict], int] | Exception:
            try:
                return views_by_job(client.jobs())
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                return exc

        answers = self._at_once(listing, [c for _, c in agents])
        for (node, client), answer in zip(agents, answers):
            if isinstance(answer, Exception):
                yield node, client, answer
                continue
            views, dropped = answer
            if dropped:
                self._note(f"agent of {node}: {dropped} job view(s) of the wrong shape left out")
            yield node, client, views

    def _role(self, jid: int) -> str:
        """A job under a quota below 1 is a guest (its mark names a running host) or a host
        that lends: the agent makes a guest yield its cores to the host (monitoring/roles.py).
        Renewals send the role last sent (``_roles``): a snapshot taken before a guest's
        mark was written would call it a host."""
        j = self._jobs.get(jid)
        host = self._mark(j).host if j is not None else None
        h = self._jobs.get(int(host)) if host is not None and digits(host) else None
        return "guest" if h is not None and h.state in _RUNNING else "host"   # its host ran on

    def _agent_quota(self, node: str, job_id: str, q: float, role: str | None = None) -> None:
        try:
            self.agents[node].set_quota(job_id, q, self.lease_s, role)
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"agent of {node}: quota {q:.3f} for job {job_id}: {exc}") from None

    def _agent_clear(self, node: str, job_id: str) -> None:
        try:
            self.agents[node].clear_quota(job_id)
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status", None) == 404:
                return  # the agent does not know it: nothing is limited
            raise BackendError(f"agent of {node}: full quota for job {job_id}: {exc}") from None

    def _renew_leases(self) -> None:
        """Renew every lease due (a third of it has passed) on every node of its job, the
        agents asked at once (``_at_once``): one after the other, a thousand leases waited a
        thousand round trips, and the last could lapse before its turn."""
        now = self._clock()
        calls: list[tuple[int, str, float, str]] = []
        for jid, (q, nodes) in list(self._quotas.items()):
            # (wall clock: ``due`` also renews after a step back, coscheduler/clocks.py)
            if q >= 1.0 or not due(now, self._renewed.get(jid, 0.0), self.lease_s / 3):
                continue
            role = self._roles.get(jid) or self._role(jid)
            calls += [(jid, node, q, role) for node in nodes if node in self.agents]
            if not any(node in self.agents for node in nodes):
                self._renewed[jid] = now

        # One worker per node, its renewals in turn (a client makes one call at a time).
        by_node: dict[str, list[tuple[int, str, float, str]]] = {}
        for call in calls:
            by_node.setdefault(call[1], []).append(call)

        def renew(node_calls: list[tuple[int, str, float, str]]) -> list[Exception | None]:
            out: list[Exception | None] = []
            for jid, node, q, role in node_calls:
                try:
                    self.agents[node].set_quota(str(jid), q, self.lease_s, role)
                    out.append(None)
                except Exception as exc:  # noqa: BLE001 - lapses: full quota, safe
                    out.append(exc)
            return out

        groups = list(by_node.values())
        results = [(call, exc) for group, excs in zip(groups, self._at_once(renew, groups))
                   for call, exc in zip(group, excs)]
        failed: dict[int, bool] = {}
        for (jid, node, _, _), exc in results:
            failed.setdefault(jid, False)
            if exc is None:
                continue
            failed[jid] = True
            if getattr(exc, "status", None) in (404, 409):
                self._quotas.pop(jid, None)   # the job ended: nothing to renew
            else:
                self._note(f"agent of {node}: renewing the lease of job {jid}: {exc}")
        for jid, bad in failed.items():
            if not bad:
                self._renewed[jid] = now

    def _at_once(self, fn, items: list) -> list:
        """``[fn(x) for x in items]``, at most ``agent_threads`` at a time (coscheduler/fanout.py)."""
        return at_once(fn, items, self.agent_threads)

    def restore_quotas(self) -> list[str]:
        """Give every job this backend throttled its full CPU back (controller shutdown):
        the agents lift the quota and the job's mark says 1.0, also for a guest Slurm has not
        started yet, so that nobody re-applies it later."""
        done: set[str] = set()
        try:
            self._refresh(force=True)
            for rj in self.running():
                j = self._jobs.get(int(rj.job_id)) if digits(rj.job_id) else None
                if j is None or not self._ours(j) or rj.quota_fraction >= 1.0:
                    continue
                for node in rj.allocation.nodes:
                    if node in self.agents:
                        try:
                            self._agent_clear(node, rj.job_id)
                        except BackendError as exc:
                            self._note(str(exc))
                try:
                    self.source.update(j.job_id, AdminComment=format_admin_comment(
                        AdminMark(1.0, self._mark(j).host)))
                except BackendError as exc:
                    self._note(f"job {j.job_id}: marking its full quota: {exc}")
                self._quotas.pop(j.job_id, None)
                done.add(rj.job_id)
        except BackendError as exc:
            self._note(f"restoring quotas without a view of Slurm: {exc}")
        for jid, (q, nodes) in list(self._quotas.items()):   # what Slurm could not tell us
            if q < 1.0:
                for node in nodes:
                    if node in self.agents:
                        try:
                            self._agent_clear(node, str(jid))
                        except BackendError as exc:
                            self._note(str(exc))
                done.add(str(jid))
            self._quotas.pop(jid, None)
        self._snap_time = -math.inf
        return sorted(done)

    def release_held(self) -> list[str]:
        """Hand every held job of ours back to Slurm's own scheduling (controller shutdown):
        they run without sharing (``OverSubscribe=no``), like any other job."""
        done = []
        self._refresh(force=True)
        for j in self._jobs.values():
            if self._ours(j) and j.state == "PENDING" and j.held:
                try:
                    self.source.update(j.job_id, OverSubscribe="no")
                    self.source.release(j.job_id)
                    done.append(str(j.job_id))
                except BackendError as exc:
                    self._note(f"releasing job {j.job_id}: {exc}")
        self._snap_time = -math.inf
        return done


def _stale(view: dict, started: float) -> bool:
    """An agent's entry that ended before Slurm started the job: registered ahead of a start
    that took longer than the agent's start grace. A job the agent saw end after it started
    (its processes are gone, Slurm is still completing it) is not registered again."""
    if view.get("status") == "running":
        return False
    ended = view.get("finished_at")
    return isinstance(ended, (int, float)) and ended < started
