"""The emulated Mesos master's scheduler calls: TEARDOWN, ACCEPT (LAUNCH, LAUNCH_GROUP), DECLINE,
REVIVE, SUPPRESS, KILL, SHUTDOWN, ACKNOWLEDGE, RECONCILE, MESSAGE, REQUEST, UPDATE_FRAMEWORK.

A mixin of ``master.Master`` (THIS IS AN EMULATOR: see master.py); it holds no state of its own.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from coscheduler.boundedjson import is_finite_number

from .calls import refuse_seconds
from .master_tasks import _grace
from .resources import ResourceError, Resources, parse_resources
from .state import (
    TERMINAL_STATES,
    Agent,
    CallError,
    Executor,
    Framework,
    Offer,
    Task,
)

log = logging.getLogger("testbed.mesos")


class CallHandlers:
    """The scheduler calls a subscribed framework makes (``Master.handle`` dispatches
    ``_call_<type>``), and ACCEPT's launches."""

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


