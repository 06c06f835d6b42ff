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
(agents, offers, tasks, frameworks) in ``state.py``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable

from coscheduler.boundedjson import is_finite_number

from .allocation import Candidate, Refusal, plan_offers
from .calls import refuse_seconds
from .faults import FaultInjection
from .resources import Resources, ResourceError, parse_resources
from .runtime import AgentRuntime, LaunchError, command_argv, command_env, node_job_id
from .stream import Subscription, b64 as _b64, mesos_id as _id
from .state import (LABEL_HINTS, LABEL_JOB_ID, MESOS_VERSION, TERMINAL_STATES,  # noqa: F401
                    Agent, AgentSpec, CallError, Executor, Filter, Framework, MasterConfig,
                    Offer, Task)
from .timers import Timers

log = logging.getLogger("testbed.mesos")

class Master(FaultInjection):
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
        self._http_faults: deque[tuple[int, str]] = deque()
        self._http_fault_forever: tuple[int, str] | None = None
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
                raise CallError(403, "Framework is not subscribed")
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

    def _call_teardown(self, fw: Framework, call: dict) -> None:
        self._remove_framework(fw, "TEARDOWN")

    def _call_accept(self, fw: Framework, call: dict) -> None:
        self._accept(fw, call["accept"])

    def _call_decline(self, fw: Framework, call: dict) -> None:
        body = call["decline"]
        secs = refuse_seconds(body.get("filters"))
        for oid in [x["value"] for x in body.get("offer_ids") or []]:
            offer = self.offers.get(oid)
            if offer is None or offer.framework_id != fw.id:
                log.info("framework %s declined unknown offer %s (ignored)", fw.id, oid)
                continue
            self._remove_offer(offer)
            self._add_filter(fw, offer.agent_id, offer.role, offer.resources, secs)
        self._request_allocation()

    def _call_accept_inverse_offers(self, fw: Framework, call: dict) -> None:
        log.info("framework %s: ACCEPT_INVERSE_OFFERS ignored (the emulator makes no inverse offers)", fw.id)

    _call_decline_inverse_offers = _call_accept_inverse_offers

    def _call_revive(self, fw: Framework, call: dict) -> None:
        body = call.get("revive") or {}
        roles = list(body.get("roles") or []) or ([body["role"]] if body.get("role") else [])
        roles = roles or list(fw.roles)
        fw.suppressed -= set(roles)
        fw.filters = [f for f in fw.filters if f.role not in roles]
        self._request_allocation()

    def _call_suppress(self, fw: Framework, call: dict) -> None:
        roles = list((call.get("suppress") or {}).get("roles") or []) or list(fw.roles)
        fw.suppressed |= set(roles)

    def _call_kill(self, fw: Framework, call: dict) -> None:
        body = call["kill"]
        tid = body["task_id"]["value"]
        agent_id = (body.get("agent_id") or {}).get("value")
        task = fw.tasks.get(tid)
        if task is None:
            self._reconcile_unknown(fw, tid, agent_id)
            return
        if task.terminal:
            return
        grace = _grace((body.get("kill_policy") or {}))
        targets = [task]
        if task.group is not None:  # a task group is killed whole
            targets = [fw.tasks[t] for t in task.group.tasks if t in fw.tasks]
        for t in targets:
            self._kill_task(t, grace=grace)

    def _call_shutdown(self, fw: Framework, call: dict) -> None:
        body = call["shutdown"]
        eid, aid = body["executor_id"]["value"], body["agent_id"]["value"]
        for t in list(fw.tasks.values()):
            if t.agent_id == aid and t.executor_id == eid and not t.terminal:
                self._kill_task(t, grace=None)

    def _call_acknowledge(self, fw: Framework, call: dict) -> None:
        body = call["acknowledge"]
        tid = body["task_id"]["value"]
        task = fw.tasks.get(tid)
        if task is None or not task.updates or task.updates[0].get("uuid") != body["uuid"]:
            log.info("framework %s: acknowledgement for task %s uuid %s matches no pending update "
                     "(ignored)", fw.id, tid, body["uuid"])
            return
        done = task.updates.popleft()
        task.retry_gen += 1
        task.retry_delay = self.config.status_update_retry_s
        if task.updates:
            self._forward_head(task)
        elif done["state"] in TERMINAL_STATES:
            del fw.tasks[tid]   # the master forgets a task once its terminal update is acknowledged

    def _call_acknowledge_operation_status(self, fw: Framework, call: dict) -> None:
        log.info("framework %s: ACKNOWLEDGE_OPERATION_STATUS ignored (no operation updates are sent)", fw.id)

    def _call_reconcile(self, fw: Framework, call: dict) -> None:
        tasks = call["reconcile"].get("tasks") or []
        if not tasks:  # implicit: every task the master knows
            for t in fw.tasks.values():
                self._reconcile_known(fw, t)
            return
        for item in tasks:
            tid = item["task_id"]["value"]
            t = fw.tasks.get(tid)
            if t is not None:
                self._reconcile_known(fw, t)
            else:
                self._reconcile_unknown(fw, tid, (item.get("agent_id") or {}).get("value"))

    def _call_reconcile_operations(self, fw: Framework, call: dict) -> None:
        for op in call["reconcile_operations"].get("operations") or []:
            status: dict[str, Any] = {"operation_id": op["operation_id"], "state": "OPERATION_UNKNOWN"}
            if op.get("agent_id"):
                status["agent_id"] = op["agent_id"]
            self._send(fw, {"type": "UPDATE_OPERATION_STATUS",
                            "update_operation_status": {"status": status}})

    def _call_message(self, fw: Framework, call: dict) -> None:
        body = call["message"]
        entry = {"agent_id": body["agent_id"]["value"], "executor_id": body["executor_id"]["value"],
                 "data": body["data"], "time": time.time()}
        fw.messages.append(entry)
        log.info("framework %s: MESSAGE for executor %s on %s (%d bytes Base64); the emulator has "
                 "no executors to deliver it to", fw.id, entry["executor_id"], entry["agent_id"],
                 len(body["data"]))

    def _call_request(self, fw: Framework, call: dict) -> None:
        pass  # the built-in hierarchical allocator ignores REQUEST; so does the emulator

    def _call_update_framework(self, fw: Framework, call: dict) -> tuple[int, str]:
        body = call["update_framework"]
        info = body["framework_info"]
        for name, default in (("user", None), ("principal", None), ("checkpoint", False)):
            if info.get(name, default) != fw.info.get(name, default):
                raise CallError(400, f"Updating 'FrameworkInfo.{name}' is not allowed")
        suppressed = list(body.get("suppressed_roles") or [])
        problem = _framework_info_problem(info, suppressed)
        if problem:
            raise CallError(400, problem)
        old_roles = set(fw.roles)
        fw.set_info(info)
        for role in old_roles - set(fw.roles):
            for oid in list(fw.offers):
                if self.offers[oid].role == role:
                    self._rescind(self.offers[oid], why="role removed by UPDATE_FRAMEWORK")
        unsuppressed = fw.suppressed - set(suppressed)
        fw.filters = [f for f in fw.filters if f.role not in unsuppressed and f.role in fw.roles]
        fw.suppressed = set(suppressed)
        self._request_allocation()
        return 200, ""

    # ------------------------------------------------------------------------ accept/launch
    def _accept(self, fw: Framework, body: dict) -> None:
        oids = [x["value"] for x in body.get("offer_ids") or []]
        ops = body.get("operations") or []
        secs = refuse_seconds(body.get("filters"))
        problem = None
        offers: list[Offer] = []
        if not oids:
            problem = "No offers specified"
        elif len(set(oids)) != len(oids):
            problem = "Duplicate offers specified"
        for oid in dict.fromkeys(oids):
            offer = self.offers.get(oid)
            if offer is None or offer.framework_id != fw.id:
                problem = problem or f"Offer {oid} is no longer valid"
            else:
                offers.append(offer)
        if problem is None and len({o.agent_id for o in offers}) > 1:
            problem = "Aggregated offers must belong to one single agent"
        if problem is None and offers[0].agent_id not in self.agents:
            problem = f"Agent {offers[0].agent_id} is not available"
        for offer in offers:
            self._remove_offer(offer)
        if problem is not None:
            # The valid offers' resources are recovered; every task to launch is lost.
            state = "TASK_DROPPED" if fw.partition_aware else "TASK_LOST"
            for info in _launch_task_infos(ops):
                self._master_update(fw, info["task_id"]["value"],
                                    (info.get("agent_id") or {}).get("value"), state,
                                    "REASON_INVALID_OFFERS",
                                    f"Task launched with invalid offers: {problem}")
            log.info("framework %s: ACCEPT with invalid offers: %s", fw.id, problem)
            self._request_allocation()
            return
        agent = self.agents[offers[0].agent_id]
        role = offers[0].role
        pool = Resources()
        for o in offers:
            pool = pool + o.resources
        for op in ops:
            otype = op.get("type") or ("LAUNCH" if op.get("launch") else
                                       "LAUNCH_GROUP" if op.get("launch_group") else "UNKNOWN")
            if otype == "LAUNCH":
                for info in (op.get("launch") or {}).get("task_infos") or []:
                    pool = self._launch_one(fw, agent, info, pool)
            elif otype == "LAUNCH_GROUP":
                pool = self._launch_group(fw, agent, op.get("launch_group") or {}, pool)
            else:
                log.warning("framework %s: operation %s is not supported by the emulator (ignored)",
                            fw.id, otype)
        if not pool.is_empty():
            self._add_filter(fw, agent.id, role, pool, secs)
        self._request_allocation()

    def _task_problem(self, fw: Framework, agent: Agent, info: dict, seen: set[str]) -> str | None:
        tid = info["task_id"]["value"]
        if not tid or tid in (".", "..") or "/" in tid or any(c.isspace() for c in tid):
            return f"Task ID {tid!r} is invalid (empty, '.', '..', a slash or whitespace)"
        if tid in fw.tasks or tid in seen:
            return f"Task has duplicate ID: {tid}"
        if info["agent_id"]["value"] != agent.id:
            return (f"Task uses agent {info['agent_id']['value']} but the offers are for "
                    f"agent {agent.id}")
        if info.get("container") is not None:
            return "ContainerInfo is not supported by the emulator (tasks run as plain processes)"
        cmd = info.get("command")
        if not cmd or not cmd.get("value"):
            return "Task needs 'command' with a 'value' (the command to run)"
        return None

    def _launch_one(self, fw: Framework, agent: Agent, info: dict, pool: Resources) -> Resources:
        tid = info["task_id"]["value"]
        problem = self._task_problem(fw, agent, info, set())
        if problem is None and info.get("executor") is not None:
            problem = ("custom executors are not supported by the emulator: give the task a "
                       "'command' and no 'executor' (the command executor), or use LAUNCH_GROUP")
        res = None
        if problem is None:
            try:
                res = parse_resources(info.get("resources"), f"task {tid}")
            except ResourceError as e:
                problem = str(e)
        if problem is None and not pool.contains(res):
            problem = (f"Task uses more resources {res.describe()} than available "
                       f"{pool.describe()}")
        if problem is not None:
            self._master_update(fw, tid, agent.id, "TASK_ERROR", "REASON_TASK_INVALID", problem)
            return pool
        task = Task(fw.id, info, agent, res, None)
        agent.used = agent.used + res
        fw.tasks[tid] = task
        self._start(task)
        return pool - res

    def _launch_group(self, fw: Framework, agent: Agent, body: dict, pool: Resources) -> Resources:
        executor = body.get("executor") or {}
        infos = (body.get("task_group") or {}).get("tasks") or []
        eid = executor.get("executor_id", {}).get("value", "")
        key = (fw.id, eid)
        existing = agent.executors.get(key)
        problem = None
        if executor.get("type") != "DEFAULT":
            problem = "LAUNCH_GROUP needs an executor of type DEFAULT (the emulator's only executor)"
        elif not infos:
            problem = "Task group is empty"
        elif executor.get("command") is not None:
            problem = "'command' must not be set for a DEFAULT executor"
        total = Resources()
        exec_res = Resources()
        seen: set[str] = set()
        if problem is None and existing is None:
            try:
                exec_res = parse_resources(executor.get("resources"), f"executor {eid}")
            except ResourceError as e:
                problem = str(e)
        if problem is None:
            for info in infos:
                tid = info["task_id"]["value"]
                p = self._task_problem(fw, agent, info, seen)
                if p is None and info.get("executor") is not None and \
                        info["executor"].get("executor_id", {}).get("value") != eid:
                    p = "Task's executor differs from the task group's executor"
                if p is None:
                    try:
                        total = total + parse_resources(info.get("resources"), f"task {tid}")
                    except ResourceError as e:
                        p = str(e)
                if p is not None:
                    problem = f"Task {tid}: {p}"
                    break
                seen.add(tid)
        if problem is None and not pool.contains(total + exec_res):
            problem = (f"Task group uses more resources {(total + exec_res).describe()} than "
                       f"available {pool.describe()}")
        if problem is not None:
            for info in infos:
                self._master_update(fw, info["task_id"]["value"], agent.id, "TASK_ERROR",
                                    "REASON_TASK_GROUP_INVALID", problem)
            return pool
        if existing is None:
            existing = Executor(fw.id, eid, agent.id, exec_res)
            agent.executors[key] = existing
            agent.used = agent.used + exec_res
            pool = pool - exec_res
        for info in infos:
            res = parse_resources(info.get("resources"), "task")
            task = Task(fw.id, info, agent, res, existing)
            existing.tasks.add(task.task_id)
            agent.used = agent.used + res
            fw.tasks[task.task_id] = task
            pool = pool - res
            self._start(task)
        return pool

    def _start(self, task: Task) -> None:
        self.counters["launched"] += 1
        self._all_tasks.append(task)
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            agent.launch_q.put(task)

    # Each agent has one long-lived launcher thread: a task's parent-death signal follows
    # the thread that started it, so that thread lives as long as the agent.
    def _launch_loop(self, agent: Agent) -> None:
        while True:
            task = agent.launch_q.get()
            if task is None:
                return
            try:
                self._launch(task)
            except Exception:
                log.exception("launching task %s failed", task.task_id)

    def _launch(self, task: Task) -> None:
        with self.lock:
            if task.silent or task.lost or self.closing:
                self._forget(task)
                self._release(task)
                return
            if task.kill_requested:
                self._forget(task)
                self._agent_update(task, "TASK_KILLED", reason="REASON_TASK_KILLED_DURING_LAUNCH",
                                   message="Task killed before it was launched")
                return
            agent = self.agents[task.agent_id]
            self._agent_update(task, "TASK_STARTING")
            task.job_id = node_job_id(task.framework_id, task.task_id, agent.job_ids)
            agent.job_ids.add(task.job_id)
            cmd = task.info["command"]
            sandbox = agent.runtime.sandboxes / task.framework_id / task.task_id.replace("/", "_")
            env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "HOME": "/root" if _is_root() else str(Path.home()),
                   "MESOS_TASK_ID": task.task_id, "MESOS_FRAMEWORK_ID": task.framework_id,
                   "MESOS_AGENT_ID": task.agent_id, "MESOS_EXECUTOR_ID": task.executor_id,
                   "MESOS_SANDBOX": str(sandbox), "COSCHED_JOB_ID": task.job_id}
            env.update(command_env(cmd))
            argv = command_argv(cmd)
            hints = _label_hints(task.info)
            cpus, mem = task.resources.scalar("cpus"), task.resources.scalar("mem")
            runtime = agent.runtime
        try:
            popen = runtime.launch(task.job_id, argv, env, sandbox, cpus=cpus,
                                   mem_mb=mem or None, hints=hints)
        except LaunchError as e:
            with self.lock:
                self._forget(task)
                agent.job_ids.discard(task.job_id)
                if not (task.silent or task.lost):
                    self._agent_update(task, "TASK_FAILED", source="SOURCE_AGENT",
                                       reason="REASON_CONTAINER_LAUNCH_FAILED", message=str(e))
                else:
                    self._release(task)
            return
        with self.lock:
            task.popen = popen
            task.started_at = time.time()
            if task.silent or task.lost or task.kill_requested or self.closing:
                sig = signal.SIGTERM if task.kill_requested and not (task.silent or task.lost) \
                    else signal.SIGKILL
                runtime.signal(popen.pid, task.job_id, sig)
                if sig == signal.SIGTERM:
                    self._schedule_sigkill(task)
            else:
                self._agent_update(task, "TASK_RUNNING", labels={"labels": [
                    {"key": LABEL_JOB_ID, "value": task.job_id}]})
        threading.Thread(target=self._wait, args=(task, runtime), daemon=True,
                         name=f"mesos-emu-wait-{task.task_id[:20]}").start()

    def _wait(self, task: Task, runtime: AgentRuntime) -> None:
        # Wait for the exit without reaping: while the leader is a zombie its pid (the
        # process group id) cannot be reused, so the group kill below hits only the task.
        try:
            os.waitid(os.P_PID, task.popen.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
        # The command has ended: like a container being destroyed, nothing of it survives.
        runtime.signal(task.popen.pid, task.job_id or "", signal.SIGKILL)
        rc = task.popen.wait()
        runtime.release(task.job_id or "")
        with self.lock:
            task.exit_code = rc
            agent = self.agents.get(task.agent_id)
            if agent is not None:
                agent.job_ids.discard(task.job_id)
            self._forget(task)
            if task.silent or task.lost or task.terminal:
                self._release(task)
                return
            if task.kill_requested:
                state, msg = "TASK_KILLED", f"Command terminated: {_exit_text(rc)}"
            elif rc == 0:
                state, msg = "TASK_FINISHED", "Command exited with status 0"
            else:
                state, msg = "TASK_FAILED", f"Command {_exit_text(rc)}"
            self._agent_update(task, state, message=msg)
            if state != "TASK_FINISHED" and task.group is not None:
                # The default executor kills the whole group when one of its tasks fails.
                fw = self.frameworks.get(task.framework_id)
                for tid in list(task.group.tasks):
                    sib = fw.tasks.get(tid) if fw else None
                    if sib is not None and sib is not task and not sib.terminal:
                        self._kill_task(sib, grace=None)

    def _forget(self, task: Task) -> None:
        """The task's process has ended (or never started)."""
        task.exited.set()
        if task in self._all_tasks:
            self._all_tasks.remove(task)

    def _kill_task(self, task: Task, grace: float | None) -> None:
        if task.terminal:
            return
        first = not task.kill_requested
        task.kill_requested = True
        task.kill_grace_s = grace if grace is not None else _grace(task.info.get("kill_policy") or {},
                                                                   self.config.kill_grace_s)
        if task.popen is None:
            return   # the launcher has not started it: it sees kill_requested
        if first and not task.silent:
            fw = self.frameworks.get(task.framework_id)
            if fw is not None and "TASK_KILLING_STATE" in fw.capabilities and not task.killing_sent:
                task.killing_sent = True
                self._agent_update(task, "TASK_KILLING")
        agent = self.agents.get(task.agent_id)
        if agent is not None:
            agent.runtime.signal(task.popen.pid, task.job_id or "", signal.SIGTERM)
            self._schedule_sigkill(task)

    def _schedule_sigkill(self, task: Task) -> None:
        grace = task.kill_grace_s if task.kill_grace_s is not None else self.config.kill_grace_s

        def hard_kill() -> None:
            with self.lock:
                agent = self.agents.get(task.agent_id)
                if agent is not None and not task.exited.is_set():
                    agent.runtime.signal(task.popen.pid, task.job_id or "", signal.SIGKILL)
        self.timers.call_later(grace, hard_kill)

    def _release(self, task: Task) -> None:
        if task.released:
            return
        task.released = True
        agent = self.agents.get(task.agent_id)
        if agent is None:
            return
        agent.used = agent.used - task.resources
        ex = task.group
        if ex is not None:
            ex.tasks.discard(task.task_id)
            if not ex.tasks and agent.executors.get((ex.framework_id, ex.executor_id)) is ex:
                del agent.executors[(ex.framework_id, ex.executor_id)]
                agent.used = agent.used - ex.resources
                fw = self.frameworks.get(ex.framework_id)
                if fw is not None and not task.silent:
                    # The default executor exits once all its tasks are over.
                    self._send(fw, {"type": "FAILURE", "failure": {
                        "agent_id": _id(agent.id), "executor_id": _id(ex.executor_id), "status": 0}})
        self._request_allocation()

    # ------------------------------------------------------------------------ status updates
    def _agent_update(self, task: Task, state: str, *, source: str = "SOURCE_EXECUTOR",
                      reason: str | None = None, message: str | None = None,
                      labels: dict | None = None) -> None:
        """A status update from the emulated agent: reliable (uuid, resent until acked)."""
        task.state = state
        if state in TERMINAL_STATES:
            self._release(task)
        if task.silent or task.lost:
            return
        status: dict[str, Any] = {
            "task_id": _id(task.task_id), "state": state, "source": source,
            "agent_id": _id(task.agent_id), "executor_id": _id(task.executor_id),
            "timestamp": time.time(), "uuid": _b64(uuid.uuid4().bytes)}
        if message:
            status["message"] = message
        if reason:
            status["reason"] = reason
        if labels:
            status["labels"] = labels
        self.counters["updates"] += 1
        task.updates.append(status)
        if len(task.updates) == 1:
            task.retry_delay = self.config.status_update_retry_s
            self._forward_head(task)

    def _forward_head(self, task: Task) -> None:
        status = task.updates[0]
        task.forwarded_state = status["state"]
        fw = self.frameworks.get(task.framework_id)
        if fw is not None:
            self._send(fw, {"type": "UPDATE", "update": {"status": status}})
        task.retry_gen += 1
        gen = task.retry_gen
        delay = task.retry_delay or self.config.status_update_retry_s
        self.timers.call_later(delay, lambda: self._retry_update(task, gen))

    def _retry_update(self, task: Task, gen: int) -> None:
        with self.lock:
            if gen != task.retry_gen or not task.updates or task.silent or task.lost:
                return
            task.retry_delay = min(2 * (task.retry_delay or self.config.status_update_retry_s),
                                   self.config.status_update_retry_max_s)
            log.info("resending unacknowledged %s of task %s", task.updates[0]["state"], task.task_id)
            self._forward_head(task)

    def _master_update(self, fw: Framework, task_id: str, agent_id: str | None, state: str,
                       reason: str, message: str) -> None:
        """A status update the master makes itself: no uuid, sent once, not acknowledged."""
        status: dict[str, Any] = {"task_id": _id(task_id), "state": state, "source": "SOURCE_MASTER",
                                  "reason": reason, "message": message, "timestamp": time.time()}
        if agent_id:
            status["agent_id"] = _id(agent_id)
        self.counters["updates"] += 1
        self._send(fw, {"type": "UPDATE", "update": {"status": status}})

    def _reconcile_known(self, fw: Framework, task: Task) -> None:
        state = task.forwarded_state or task.state
        status: dict[str, Any] = {"task_id": _id(task.task_id), "state": state,
                                  "source": "SOURCE_MASTER", "reason": "REASON_RECONCILIATION",
                                  "message": "Reconciliation: Latest task state",
                                  "agent_id": _id(task.agent_id),
                                  "executor_id": _id(task.executor_id), "timestamp": time.time()}
        self._send(fw, {"type": "UPDATE", "update": {"status": status}})

    def _reconcile_unknown(self, fw: Framework, task_id: str, agent_id: str | None) -> None:
        pa = fw.partition_aware
        if agent_id and agent_id in self.agents:
            state, msg = ("TASK_GONE" if pa else "TASK_LOST"), "Reconciliation: Task is unknown to the agent"
        elif agent_id and agent_id in self.lost_agents:
            state, msg = ("TASK_GONE" if pa else "TASK_LOST"), "Reconciliation: Task is gone (agent removed)"
        else:
            state, msg = ("TASK_UNKNOWN" if pa else "TASK_LOST"), "Reconciliation: Task is unknown"
        self._master_update(fw, task_id, agent_id, state, "REASON_RECONCILIATION", msg)

    # ------------------------------------------------------------------------ offers
    def _request_allocation(self) -> None:
        if not self._alloc_pending and not self.closing:
            self._alloc_pending = True
            self.timers.call_later(0.0, self._allocate)

    def _periodic_allocation(self) -> None:
        if self.closing:
            return
        self._allocate()
        self.timers.call_later(self.config.allocation_interval_s, self._periodic_allocation)

    def _allocate(self) -> None:
        with self.lock:
            self._alloc_pending = False
            if self.closing:
                return
            now = time.monotonic()
            fws = [f for f in self.frameworks.values()
                   if f.connected and any(r not in f.suppressed for r in f.roles)]
            if not fws:
                return
            for f in fws:
                f.filters = [x for x in f.filters if x.expires > now]
            total = Resources()
            for a in self.agents.values():
                total = total + a.total
            candidates = [Candidate(f.id, tuple(f.roles), frozenset(f.suppressed), self._allocated(f),
                                    tuple(Refusal(x.agent_id, x.role, x.resources) for x in f.filters))
                          for f in fws]
            agents = [(a.id, a.available()) for a in sorted(self.agents.values(), key=lambda a: a.id)]
            batches: dict[str, list[Offer]] = {}
            for g in plan_offers(agents, candidates, total):
                agent = self.agents[g.agent_id]
                offer = self._make_offer(self.frameworks[g.framework_id], agent, g.role,
                                         agent.available())
                batches.setdefault(g.framework_id, []).append(offer)
            for fid, offers in batches.items():
                fw = self.frameworks[fid]
                self._send(fw, {"type": "OFFERS", "offers": {
                    "offers": [self._offer_json(o) for o in offers]}})

    def _allocated(self, fw: Framework) -> Resources:
        out = Resources()
        for t in fw.tasks.values():
            if not t.released:
                out = out + t.resources
        for oid in fw.offers:
            out = out + self.offers[oid].resources
        return out

    def _make_offer(self, fw: Framework, agent: Agent, role: str, res: Resources) -> Offer:
        oid = f"{self.id}-O{self._seq['offer']}"
        self._seq["offer"] += 1
        offer = Offer(oid, fw.id, agent.id, role, res, time.monotonic())
        self.offers[oid] = offer
        fw.offers.add(oid)
        agent.offered = agent.offered + res
        self.counters["offers"] += 1
        if self.config.offer_timeout_s:
            self.timers.call_later(self.config.offer_timeout_s, lambda: self._offer_timeout(oid))
        return offer

    def _offer_json(self, o: Offer) -> dict[str, Any]:
        agent = self.agents[o.agent_id]
        attrs = [{"name": k, "type": "TEXT", "text": {"value": v}}
                 for k, v in sorted(agent.spec.attributes.items())]
        if agent.runtime.api_url:
            attrs.append({"name": "cosched_agent_url", "type": "TEXT",
                          "text": {"value": agent.runtime.api_url}})
        executors = [_id(eid) for (fid, eid) in agent.executors if fid == o.framework_id]
        return {"id": _id(o.id), "framework_id": _id(o.framework_id), "agent_id": _id(o.agent_id),
                "hostname": agent.hostname, "allocation_info": {"role": o.role},
                "resources": o.resources.to_json(o.role), "attributes": attrs,
                "executor_ids": executors}

    def _offer_timeout(self, oid: str) -> None:
        with self.lock:
            offer = self.offers.get(oid)
            if offer is not None:
                self._rescind(offer, why="offer timeout")

    def _remove_offer(self, offer: Offer) -> None:
        """Withdraw an offer and give its resources back to the agent (no event)."""
        self.offers.pop(offer.id, None)
        fw = self.frameworks.get(offer.framework_id)
        if fw is not None:
            fw.offers.discard(offer.id)
        agent = self.agents.get(offer.agent_id)
        if agent is not None:
            agent.offered = agent.offered - offer.resources

    def _rescind(self, offer: Offer, why: str, refuse_s: float = 0.0) -> None:
        self._remove_offer(offer)
        fw = self.frameworks.get(offer.framework_id)
        if fw is not None:
            self._send(fw, {"type": "RESCIND", "rescind": {"offer_id": _id(offer.id)}})
            if refuse_s > 0:
                self._add_filter(fw, offer.agent_id, offer.role, offer.resources, refuse_s)
        log.info("offer %s rescinded: %s", offer.id, why)
        self._request_allocation()

    def _add_filter(self, fw: Framework, agent_id: str, role: str, res: Resources, secs: float) -> None:
        if secs <= 0 or res.is_empty():
            return
        fw.filters.append(Filter(agent_id, role, res, time.monotonic() + secs))
        # When the filter expires the resources may be offered again.
        self.timers.call_later(secs, self._locked_request_allocation)

    def _locked_request_allocation(self) -> None:
        with self.lock:
            self._request_allocation()

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



def _framework_info_problem(info: dict[str, Any], suppressed: list[str]) -> str | None:
    """What makes a FrameworkInfo unusable (sent as an ERROR event), or None."""
    caps = {c.get("type") for c in info.get("capabilities") or []}
    if info.get("roles") and "MULTI_ROLE" not in caps:
        return "'FrameworkInfo.roles' is set but the framework lacks the MULTI_ROLE capability"
    if "MULTI_ROLE" in caps and info.get("role") is not None:
        return "'FrameworkInfo.role' must not be set with the MULTI_ROLE capability (use 'roles')"
    roles = (info.get("roles") or ["*"]) if "MULTI_ROLE" in caps else [info.get("role") or "*"]
    for r in roles:
        if not r or "/" == r[0] or r in (".", "..") or any(c.isspace() for c in r):
            return f"Role {r!r} is invalid"
    extra = sorted(set(suppressed) - set(roles))
    if extra:
        return f"Suppressed roles {extra} are not contained in the framework's roles {roles}"
    ft = info.get("failover_timeout")
    if ft is not None and (not is_finite_number(ft) or ft < 0):
        return f"'FrameworkInfo.failover_timeout' must be a finite number >= 0, got {ft!r}"
    return None


def _launch_task_infos(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for op in ops:
        out += (op.get("launch") or {}).get("task_infos") or []
        out += ((op.get("launch_group") or {}).get("task_group") or {}).get("tasks") or []
    return out


def _grace(kill_policy: dict[str, Any], default: float | None = None) -> float | None:
    ns = (kill_policy.get("grace_period") or {}).get("nanoseconds")
    if ns is None:
        return default
    return max(0.0, int(ns) / 1e9)


def _exit_text(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = str(-rc)
        return f"terminated with signal {name}"
    return f"exited with status {rc}"


def _label_hints(info: dict[str, Any]) -> dict[str, Any]:
    """Optional hints for the node agent from the task's labels (walltime, tasks, class)."""
    out: dict[str, Any] = {}
    for lab in (info.get("labels") or {}).get("labels") or []:
        spec = LABEL_HINTS.get(lab.get("key"))
        if spec is None or lab.get("value") is None:
            continue
        name, conv = spec
        try:
            out[name] = conv(lab["value"])
        except (TypeError, ValueError):
            log.warning("task %s: label %s=%r is not a valid %s (ignored)",
                        info["task_id"]["value"], lab.get("key"), lab.get("value"), conv.__name__)
    return out


def _is_root() -> bool:
    return os.geteuid() == 0


__all__ = ["AgentSpec", "CallError", "Master", "MasterConfig", "TERMINAL_STATES"]
