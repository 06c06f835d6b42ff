"""The emulated Mesos master: frameworks, agents, offers, tasks and status updates.

THIS IS AN EMULATOR. No Mesos master can be installed on our machines (Apache Mesos is
retired). This state machine follows the documented v1 scheduler API (apache/mesos
``docs/scheduler-http-api.md``, ``docs/reconciliation.md``,
``docs/high-availability-framework-guide.md``, ``include/mesos/v1/scheduler/scheduler.proto``
and ``include/mesos/v1/mesos.proto``) message for message, for the subset listed in
testbed/mesos/README.md, and runs tasks as real processes on this machine.

What it models (each point from those documents):

* SUBSCRIBE: a new framework gets a FrameworkID; a framework id that is known and not removed
  resubscribes (failover) and keeps its tasks; one that was removed gets an ERROR event.
  A newer subscription closes the older one with ERROR "Framework failed over". A framework
  whose stream breaks is disconnected: its outstanding offers are withdrawn, later calls get
  403, and after ``failover_timeout`` seconds (FrameworkInfo, default 0) it is removed and
  its tasks are killed.
* Offers: every allocation pass offers each agent's unallocated resources to one connected,
  unsuppressed framework (least dominant share first). Until accepted or declined, offered
  resources are held. Resources an ACCEPT leaves unused, and declined ones, are filtered
  from that framework on that agent for ``Filters.refuse_seconds`` (default 5 s, at most 365
  days): the filter refuses an agent's resources while they are a subset of what was refused.
  REVIVE clears the filters and the suppression of the given roles (all when none given);
  SUPPRESS stops offers. An offer can be rescinded (``--offer-timeout``, an agent lost, a
  fault): RESCIND is sent and the resources are recovered.
* ACCEPT with LAUNCH or LAUNCH_GROUP (default executor) starts tasks. Invalid offers make
  every task TASK_LOST (TASK_DROPPED for PARTITION_AWARE frameworks) with
  REASON_INVALID_OFFERS; an invalid task gets TASK_ERROR with REASON_TASK_INVALID (or
  REASON_TASK_GROUP_INVALID for its whole group).
* Status updates from the emulated agent (TASK_STARTING, TASK_RUNNING, TASK_KILLING when the
  framework has TASK_KILLING_STATE, then TASK_FINISHED / TASK_FAILED / TASK_KILLED) carry a
  uuid and are resent, with doubling backoff, until acknowledged; as on an agent, a task's
  next update is forwarded only once the previous one is acknowledged. Updates the master
  makes itself (reconciliation, agent removal, invalid offers, invalid tasks) have no uuid
  and are sent once. A task's resources are released when its terminal update is generated;
  the master forgets the task once that terminal update is acknowledged.
* KILL (TASK_LOST etc. for an unknown task; a task group is killed whole), SHUTDOWN,
  RECONCILE (explicit and implicit), MESSAGE, REQUEST (ignored, as the built-in allocator
  does), UPDATE_FRAMEWORK, TEARDOWN.
* Losing an agent: its tasks are killed for real and reported TASK_LOST (TASK_GONE for
  PARTITION_AWARE frameworks) with REASON_AGENT_REMOVED, its offers are rescinded, and a
  FAILURE event names the agent.

Locking: one re-entrant lock guards all state. Process starts and waits run outside it.
Who gets which offer is decided by ``allocation.plan_offers`` (pure); the fault-injection
levers are in ``faults.py``; processes and cgroups in ``runtime.py``; what the master holds
(agents, offers, tasks, frameworks) in ``state.py``. The master's own parts are mixins of
``Master``: the scheduler calls in ``master_calls.py``, tasks and their status updates in
``master_tasks.py``, offers and filters in ``master_offers.py``; the HTTP side is ``server.py``.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable

from .faults import FaultInjection
from .runtime import AgentRuntime
from .stream import Subscription, mesos_id as _id
from .state import (LABEL_HINTS, LABEL_JOB_ID, MESOS_VERSION, TERMINAL_STATES,  # noqa: F401
                    Agent, AgentSpec, CallError, Executor, Filter, Framework, MasterConfig,
                    Offer, Task)
from .timers import Timers
from .master_calls import CallHandlers, _framework_info_problem
from .master_tasks import TaskLifecycle
from .master_offers import OfferCycle

log = logging.getLogger("testbed.mesos")


class Master(FaultInjection, CallHandlers, TaskLifecycle, OfferCycle):
    """The emulated master. Create with agents and a work folder, then ``start()``."""

    def __init__(self, agents: list[AgentSpec], workdir: Path, *, config: MasterConfig | None = None,
                 cgroup_base: str | None = None, cpu_scale: float = 1.0, cpu_limits: bool = True,
                 serve_agent_api: bool = False, token: str | None = None,
                 fast_dir: Path | None = None):
        self.config = config or MasterConfig()
        self.fast_dir = fast_dir
        self.workdir = Path(workdir)
        self.cgroup_base = cgroup_base
        self.cpu_scale = cpu_scale
        self.cpu_limits = cpu_limits
        self.serve_agent_api = serve_agent_api
        self.token = token
        self.id = str(uuid.uuid4())
        self.lock = threading.RLock()
        self.timers = Timers()
        self.agents: dict[str, Agent] = {}
        self.lost_agents: dict[str, float] = {}
        self.frameworks: dict[str, Framework] = {}
        self.removed_frameworks: dict[str, str] = {}
        self.offers: dict[str, Offer] = {}
        # Every task not yet reaped (queued, starting or running), of any framework.
        self._all_tasks: list[Task] = []
        self._seq = {"framework": 0, "offer": 0, "agent": 0}
        self._alloc_pending = False
        self.started = False
        self.closing = False
        # fault injection state read by the HTTP side
        self.redirect_location: str | None = None
        self.chunking = "record"
        # (status, body, call types it applies to or None for every call)
        self._http_faults: deque[tuple[int, str, frozenset[str] | None]] = deque()
        self._http_fault_forever: tuple[int, str, frozenset[str] | None] | None = None
        self.heartbeats_default = True
        self.counters = {"offers": 0, "calls": 0, "launched": 0, "updates": 0}
        try:
            for spec in agents:
                self.add_agent(spec)
        except Exception:
            self.close()
            raise

    # ------------------------------------------------------------------------ lifecycle
    def start(self) -> "Master":
        with self.lock:
            self.started = True
            for agent in self.agents.values():
                agent.launcher.start()
        self.timers.call_later(self.config.allocation_interval_s, self._periodic_allocation)
        self._request_allocation()
        return self

    def close(self) -> dict[str, Any]:
        """Close every stream, kill every task (SIGTERM, then SIGKILL after the grace
        period), and remove the agents' cgroups. Returns what each agent's node agent did."""
        with self.lock:
            if self.closing:
                return {}
            self.closing = True
            for fw in self.frameworks.values():
                if fw.sub is not None:
                    fw.sub.close()
            for t in self._all_tasks:
                t.silent = True
                self._signal(t, signal.SIGTERM)
        # The launcher drains its queue: tasks not started are dropped, one being started
        # is killed as soon as it exists.
        launchers = [a.launcher for a in self.agents.values()]
        for agent in self.agents.values():
            agent.launch_q.put(None)
        for t in launchers:
            if t.is_alive():
                t.join(timeout=10)
        with self.lock:
            tasks = [t for t in self._all_tasks if t.popen is not None]
        deadline = time.monotonic() + self.config.kill_grace_s
        for t in tasks:
            t.exited.wait(max(0.0, deadline - time.monotonic()))
        with self.lock:
            for t in tasks:
                self._signal(t, signal.SIGKILL)
        for t in tasks:
            t.exited.wait(5.0)
        self.timers.close()
        done = {}
        for agent in reversed(list(self.agents.values())):
            try:
                done[agent.id] = agent.runtime.close()
            except Exception as e:
                log.error("agent %s: cleanup failed: %s", agent.name, e)
                done[agent.id] = {"error": str(e)}
        return done

    def _signal(self, task: Task, sig: int) -> None:
        agent = self.agents.get(task.agent_id)
        if agent is not None and task.popen is not None and not task.exited.is_set():
            agent.runtime.signal(task.popen.pid, task.job_id or "", sig)

    # ------------------------------------------------------------------------ agents
    def add_agent(self, spec: AgentSpec) -> str:
        with self.lock:
            self._seq["agent"] += 1
            n = self._seq["agent"]
            name = f"agent{n}"
            agent_id = f"{self.id}-S{n - 1}"
            runtime = AgentRuntime(name, self.workdir / "agents" / name, cgroup_base=self.cgroup_base,
                                   fast_dir=(self.fast_dir / name) if self.fast_dir else None,
                                   cpus=spec.cpus, cpu_scale=self.cpu_scale,
                                   cpu_limits=self.cpu_limits, serve_api=self.serve_agent_api,
                                   token=self.token)
            agent = Agent(agent_id, name, spec, runtime)
            agent.launcher = threading.Thread(target=self._launch_loop, args=(agent,), daemon=True,
                                              name=f"mesos-emu-launcher-{name}")
            self.agents[agent_id] = agent
            if self.started:
                agent.launcher.start()
            log.info("agent %s (%s) registered: %s", agent_id, agent.hostname, agent.total.describe())
            self._request_allocation()
            return agent_id

    def agent_views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"id": a.id, "name": a.name, "hostname": a.hostname,
                     "resources": a.total.describe(), "used": a.used.describe(),
                     "offered": a.offered.describe(), "cgroup": a.runtime.cgroup,
                     "agent_api_url": a.runtime.api_url} for a in self.agents.values()]

    def lose_agent(self, agent_id: str, reason: str = "agent lost (fault injected)") -> dict[str, Any]:
        """Remove an agent as the master does when it fails health checks: its offers are
        rescinded, its tasks killed (for real) and reported lost, FAILURE is sent."""
        with self.lock:
            agent = self.agents.get(agent_id)
            if agent is None:
                raise KeyError(f"no agent {agent_id!r}; agents: {sorted(self.agents)}")
            del self.agents[agent_id]
            self.lost_agents[agent_id] = time.time()
            for offer in [o for o in self.offers.values() if o.agent_id == agent_id]:
                self._rescind(offer, why="agent removed")
            lost = []
            for fw in list(self.frameworks.values()):
                for task in [t for t in fw.tasks.values() if t.agent_id == agent_id]:
                    task.lost = True
                    task.updates.clear()
                    task.retry_gen += 1
                    del fw.tasks[task.task_id]
                    if not task.terminal:
                        state = "TASK_GONE" if fw.partition_aware else "TASK_LOST"
                        task.state = state
                        lost.append(task.task_id)
                        self._master_update(fw, task.task_id, agent_id, state, "REASON_AGENT_REMOVED",
                                            f"Agent {agent.hostname} removed: {reason}")
                    if task.popen is not None and not task.exited.is_set():
                        agent.runtime.signal(task.popen.pid, task.job_id or "", signal.SIGKILL)
            for fw in self.frameworks.values():
                self._send(fw, {"type": "FAILURE", "failure": {"agent_id": _id(agent_id)}})
            tasks = [t for t in self._all_tasks if t.agent_id == agent_id]
            log.warning("agent %s lost (%s): tasks %s", agent_id, reason, lost)
        agent.launch_q.put(None)
        if agent.launcher is not None and agent.launcher.is_alive():
            agent.launcher.join(timeout=10)
        for t in tasks:
            if t.popen is not None:
                t.exited.wait(5.0)
        cleanup = agent.runtime.close()
        return {"agent_id": agent_id, "lost_tasks": lost, "cleanup": cleanup}

    # ------------------------------------------------------------------------ subscribe
    def subscribe(self, call: dict[str, Any]) -> Subscription:
        """SUBSCRIBE (already validated as a Call). Returns the subscription, whose first
        event is SUBSCRIBED, or ERROR followed by the end of the stream."""
        body = call["subscribe"]
        info = body["framework_info"]
        suppressed = list(body.get("suppressed_roles") or [])
        sub = Subscription(str(uuid.uuid4()), self.config.heartbeat_interval_s)
        sub.heartbeats = self.heartbeats_default
        with self.lock:
            self.counters["calls"] += 1
            fid = (info.get("id") or {}).get("value")
            problem = _framework_info_problem(info, suppressed)
            if problem is None and fid and fid in self.removed_frameworks:
                problem = "Framework has been removed"
            if problem is None and self.closing:
                problem = "Master is shutting down"
            if problem is not None:
                log.warning("SUBSCRIBE refused: %s", problem)
                sub.send({"type": "ERROR", "error": {"message": problem}})
                sub.close()
                return sub
            fw = self.frameworks.get(fid) if fid else None
            stale: list[str] = []
            if fw is not None:
                old = fw.sub
                if old is not None and not old.closed:
                    old.send({"type": "ERROR", "error": {"message": "Framework failed over"}})
                    old.close()
                # "Offers are rescinded and regenerated each time the framework
                # (re-)registers" (docs/reconciliation.md): RESCIND on the new stream.
                stale = list(fw.offers)
                for oid in stale:
                    self._remove_offer(self.offers[oid])
                fw.set_info(info)
                fw.failover_gen += 1
                log.info("framework %s (%s) resubscribed", fid, info.get("name"))
            else:
                if not fid:
                    fid = f"{self.id}-{self._seq['framework']:04d}"
                    self._seq["framework"] += 1
                fw = Framework(fid, info)
                self.frameworks[fid] = fw
                log.info("framework %s (%s) subscribed", fid, info.get("name"))
            fw.suppressed = set(suppressed)
            fw.sub = sub
            fw.connected = True
            fw.disconnected_at = None
            sub.framework_id = fid
            sub.send({"type": "SUBSCRIBED", "subscribed": {
                "framework_id": _id(fid),
                "heartbeat_interval_seconds": float(self.config.heartbeat_interval_s),
                "master_info": self._master_info()}})
            if sub.heartbeats:
                sub.send({"type": "HEARTBEAT"})
            for oid in stale:
                sub.send({"type": "RESCIND", "rescind": {"offer_id": _id(oid)}})
            # Unacknowledged status updates go out again at once on the new connection.
            for task in fw.tasks.values():
                if task.updates:
                    task.retry_delay = self.config.status_update_retry_s
                    self._forward_head(task)
            self._request_allocation()
            return sub

    def stream_ended(self, sub: Subscription) -> None:
        """The HTTP side stopped writing this subscription's stream (either end closed it)."""
        with self.lock:
            fid = sub.framework_id
            fw = self.frameworks.get(fid) if fid else None
            if fw is None or fw.sub is not sub:
                return
            fw.connected = False
            fw.sub = None
            fw.disconnected_at = time.time()
            sub.closed = True
            for oid in list(fw.offers):
                self._remove_offer(self.offers[oid])
            timeout = fw.failover_timeout
            log.warning("framework %s disconnected; failover timeout %.3gs", fid, timeout)
            if self.closing:
                return
            if timeout <= 0:
                self._remove_framework(fw, "disconnected with failover_timeout 0")
            else:
                gen = fw.failover_gen
                self.timers.call_later(timeout, lambda: self._failover_expired(fid, gen))
            self._request_allocation()

    def _failover_expired(self, fid: str, gen: int) -> None:
        with self.lock:
            fw = self.frameworks.get(fid)
            if fw is None or fw.connected or fw.failover_gen != gen:
                return
            self._remove_framework(fw, "failover timeout elapsed")

    def _remove_framework(self, fw: Framework, why: str) -> None:
        """Kill every task of the framework (no updates: it is gone) and forget it."""
        log.warning("framework %s removed: %s", fw.id, why)
        fw.failover_gen += 1
        for oid in list(fw.offers):
            self._remove_offer(self.offers[oid])
        for task in list(fw.tasks.values()):
            task.silent = True
            task.updates.clear()
            task.retry_gen += 1
            if not task.terminal:
                self._kill_task(task, grace=self.config.kill_grace_s)
        fw.tasks.clear()
        if fw.sub is not None:
            fw.sub.close()
            fw.sub = None
        fw.connected = False
        del self.frameworks[fw.id]
        self.removed_frameworks[fw.id] = why
        self._request_allocation()

    # ------------------------------------------------------------------------ other calls
    def handle(self, call: dict[str, Any], stream_id: str | None) -> tuple[int, str]:
        """A validated non-SUBSCRIBE call. Returns (HTTP status, body); 202 when accepted."""
        ctype = call["type"]
        with self.lock:
            self.counters["calls"] += 1
            fid = call["framework_id"]["value"]
            fw = self.frameworks.get(fid)
            if fw is None:
                why = self.removed_frameworks.get(fid)
                # 403 as Mesos: a call before SUBSCRIBE or from a framework the master does
                # not know is forbidden, not malformed
                raise CallError(403, f"Framework cannot be found: {fid}"
                                     + (f" (removed: {why})" if why else ""))
            if not fw.connected or fw.sub is None:
                raise CallError(403, _not_subscribed(fw))
            if stream_id is None:
                raise CallError(400, "All non-subscribe calls should include the "
                                     "'Mesos-Stream-Id' header")
            if stream_id != fw.sub.stream_id:
                raise CallError(400, f"The stream ID '{stream_id}' included in this request didn't "
                                     f"match the stream ID currently associated with framework ID {fid}")
            handler: Callable[[Framework, dict], tuple[int, str] | None] = getattr(
                self, "_call_" + ctype.lower())
            out = handler(fw, call)
            return out if out is not None else (202, "")

    # ------------------------------------------------------------------------ events
    def _send(self, fw: Framework, event: dict[str, Any]) -> None:
        """Events for a disconnected framework are dropped (the master keeps no queue)."""
        if fw.connected and fw.sub is not None:
            fw.sub.send(event)

    def _master_info(self) -> dict[str, Any]:
        host, port = self.config.hostname, self.config.port
        try:
            ip = int.from_bytes(socket.inet_aton(host), "little")
        except OSError:
            ip = 0
        return {"id": self.id, "ip": ip, "port": port, "hostname": host,
                "pid": f"master@{host}:{port}", "version": MESOS_VERSION,
                "address": {"hostname": host, "ip": host, "port": port}}

    # ------------------------------------------------------------------------ inspection
    def state(self) -> dict[str, Any]:
        with self.lock:
            return {"master_id": self.id, "version": MESOS_VERSION, "emulated": True,
                    "agents": self.agent_views(),
                    "lost_agents": sorted(self.lost_agents),
                    "frameworks": [f.view() for f in self.frameworks.values()],
                    "removed_frameworks": dict(self.removed_frameworks),
                    "offers": [{"id": o.id, "framework_id": o.framework_id, "agent_id": o.agent_id,
                                "role": o.role, "resources": o.resources.describe()}
                               for o in self.offers.values()],
                    "counters": dict(self.counters),
                    "redirect_location": self.redirect_location, "chunking": self.chunking}


def _not_subscribed(fw: Framework) -> str:
    """The 403 body for a framework the master knows but that has no open subscription.
    Starts with Mesos's own words, so that a client matching them still matches; the rest
    says which framework, since when, and how it gets back in."""
    since = ""
    if fw.disconnected_at is not None:
        since = f" for {max(0.0, time.time() - fw.disconnected_at):.1f} s"
    return (f"Framework is not subscribed: framework {fw.id} has been disconnected{since}; "
            f"SUBSCRIBE again with this framework id within its failover timeout "
            f"({fw.failover_timeout:g} s) before making other calls")


__all__ = ["AgentSpec", "CallError", "Master", "MasterConfig", "TERMINAL_STATES"]
