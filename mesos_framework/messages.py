"""The v1 scheduler API's messages as plain JSON-ready dicts, and readers for what the
master sends: pure functions, no I/O.

Field names and nesting follow include/mesos/v1/scheduler/scheduler.proto and
include/mesos/v1/mesos.proto in their JSON mapping (the proto field names, enums as their
names, ``bytes`` as Base64). Every call but SUBSCRIBE carries ``framework_id``.

Readers (``read_offer``, ``read_status``) turn the master's JSON into small dataclasses and
never raise for a bad field inside a well-formed message: they keep what is usable and
list each problem by its field (an offer with an unknown resource type, a negative or
missing scalar), so the framework can log it and carry on.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from coscheduler.boundedjson import is_finite_number

# -- enums we act on (mesos.proto) ----------------------------------------------------------

EVENT_TYPES = ("SUBSCRIBED", "OFFERS", "INVERSE_OFFERS", "RESCIND", "RESCIND_INVERSE_OFFER",
               "UPDATE", "UPDATE_OPERATION_STATUS", "MESSAGE", "FAILURE", "ERROR", "HEARTBEAT")

TERMINAL_STATES = frozenset({"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR",
                             "TASK_DROPPED", "TASK_GONE", "TASK_LOST", "TASK_GONE_BY_OPERATOR",
                             "TASK_UNKNOWN", "TASK_UNREACHABLE"})
# A task in one of these did not run to its end because of the cluster, not itself:
# the job may be launched again (TASK_LOST: "The task failed but can be rescheduled").
RETRYABLE_STATES = frozenset({"TASK_LOST", "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR",
                              "TASK_UNKNOWN", "TASK_UNREACHABLE"})
ALL_STATES = frozenset({"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"}) | TERMINAL_STATES

VALUE_TYPES = frozenset({"SCALAR", "RANGES", "SET", "TEXT"})

# The most of a scalar one offer may carry. A value past it is a bad field, not capacity:
# the largest machines have ~10^4 cores and ~10^8 MB, and a sum of values near the float
# maximum becomes inf, which then breaks every controller pass (int(inf)). Generous, so
# no real agent is ever refused: a million cores; 10^12 MB (an exabyte) of mem or disk.
SCALAR_MAX = {"cpus": 1e6, "mem": 1e12, "disk": 1e12}
SCALAR_MAX_OTHER = 1e15
# Problems listed per offer; the rest are counted in one last line. An offer of 400,000
# unreadable resources is one broken offer, not 400,000 log lines.
MAX_OFFER_PROBLEMS = 8

# Control characters (C0, DEL, NEL, the Unicode line and paragraph separators): the master's
# text shown as escapes, so that it cannot forge or break a log line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


class MessageError(ValueError):
    """A message from the master lacks what makes it usable; names the field."""


def printable(text: object, limit: int = 300) -> str:
    """The master's text (an id, a status message, an answer's body) for a log line or a
    stored reason: control characters shown as escapes, at most ``limit`` characters."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > limit:
        s = f"{s[:limit]}... ({len(s)} characters)"
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], s)


def scalar_value(name: str, value: Any) -> float | None:
    """A scalar resource's value as a float rounded down to 0.001 (``floor_scalar``), or
    None when it is not usable: not a number, negative, not finite (a JSON integer past the
    float range included: no OverflowError) or beyond ``SCALAR_MAX``."""
    if not is_finite_number(value) or value < 0:
        return None
    v = float(value)
    return floor_scalar(v) if v <= SCALAR_MAX.get(name, SCALAR_MAX_OTHER) else None


def floor_scalar(value: float) -> float:
    """``value`` rounded DOWN to the 0.001 that Mesos keeps of a scalar (fixed point, three
    decimals), never above ``value``. Offers are read and pieces cut this way so that a task
    never asks for more than a piece holds, nor for 0.0: rounding to nearest turned mem
    pieces of 31.9996 and 0.0004 into 32.0 and 0.0, and a master refuses both."""
    # (+1e-6 of a step: binary noise, 4.35 * 1000 may be 4349.999...; min() keeps the bound)
    return min(value, math.floor(value * 1000 + 1e-6) / 1000)


# -- ids and small pieces -------------------------------------------------------------------

def ident(value: str) -> dict[str, str]:
    """A FrameworkID/OfferID/AgentID/TaskID/ExecutorID: ``{"value": ...}``."""
    return {"value": str(value)}


def b64(data: bytes | str) -> str:
    """``bytes`` fields travel as Base64 in JSON."""
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def scalar(name: str, value: float, role: str | None = None) -> dict[str, Any]:
    """A scalar Resource (cpus, mem, disk, ...). Mesos keeps three decimals."""
    r: dict[str, Any] = {"name": name, "type": "SCALAR", "scalar": {"value": round(float(value), 3)}}
    if role is not None:
        r["role"] = role
    return r


def filters(refuse_seconds: float | None) -> dict[str, float] | None:
    return None if refuse_seconds is None else {"refuse_seconds": float(refuse_seconds)}


def framework_info(user: str, name: str, *, framework_id: str | None = None,
                   failover_timeout: float | None = None, roles: Iterable[str] = (),
                   principal: str | None = None, hostname: str | None = None,
                   checkpoint: bool | None = None,
                   capabilities: Iterable[str] = ()) -> dict[str, Any]:
    """FrameworkInfo. ``user`` and ``name`` are required; with ``roles`` the MULTI_ROLE
    capability is added (the proto requires it when ``roles`` is used)."""
    fi: dict[str, Any] = {"user": user, "name": name}
    if framework_id:
        fi["id"] = ident(framework_id)
    if failover_timeout is not None:
        fi["failover_timeout"] = float(failover_timeout)
    roles = list(roles)
    caps = list(capabilities)
    if roles:
        fi["roles"] = roles
        if "MULTI_ROLE" not in caps:
            caps.append("MULTI_ROLE")
    if principal:
        fi["principal"] = principal
    if hostname:
        fi["hostname"] = hostname
    if checkpoint is not None:
        fi["checkpoint"] = bool(checkpoint)
    if caps:
        fi["capabilities"] = [{"type": c} for c in caps]
    return fi


# -- calls ----------------------------------------------------------------------------------

def subscribe(info: Mapping[str, Any], suppressed_roles: Iterable[str] = ()) -> dict[str, Any]:
    """SUBSCRIBE. A resubscription (``info`` has ``id``) also sets the call's
    ``framework_id``, as the doc asks ("subscribe.framework_info.id" and "FrameworkID")."""
    call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": dict(info)}}
    sr = list(suppressed_roles)
    if sr:
        call["subscribe"]["suppressed_roles"] = sr
    if info.get("id"):
        call["framework_id"] = dict(info["id"])
    return call


def _call(fid: str, kind: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"framework_id": ident(fid), "type": kind}
    if body is not None:
        call[kind.lower()] = dict(body)
    return call


def teardown(fid: str) -> dict[str, Any]:
    return _call(fid, "TEARDOWN")


def accept(fid: str, offer_ids: Iterable[str], operations: list[dict[str, Any]],
           refuse_seconds: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"offer_ids": [ident(o) for o in offer_ids], "operations": operations}
    f = filters(refuse_seconds)
    if f is not None:
        body["filters"] = f
    return _call(fid, "ACCEPT", body)


def launch(task_infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Offer.Operation LAUNCH."""
    return {"type": "LAUNCH", "launch": {"task_infos": task_infos}}


def launch_group(executor: dict[str, Any], task_infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Offer.Operation LAUNCH_GROUP (tasks of one executor, launched atomically)."""
    return {"type": "LAUNCH_GROUP",
            "launch_group": {"executor": executor, "task_group": {"tasks": task_infos}}}


def decline(fid: str, offer_ids: Iterable[str], refuse_seconds: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"offer_ids": [ident(o) for o in offer_ids]}
    f = filters(refuse_seconds)
    if f is not None:
        body["filters"] = f
    return _call(fid, "DECLINE", body)


def accept_inverse_offers(fid: str, ids: Iterable[str], refuse_seconds: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"inverse_offer_ids": [ident(o) for o in ids]}
    if refuse_seconds is not None:
        body["filters"] = filters(refuse_seconds)
    return _call(fid, "ACCEPT_INVERSE_OFFERS", body)


def decline_inverse_offers(fid: str, ids: Iterable[str], refuse_seconds: float | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"inverse_offer_ids": [ident(o) for o in ids]}
    if refuse_seconds is not None:
        body["filters"] = filters(refuse_seconds)
    return _call(fid, "DECLINE_INVERSE_OFFERS", body)


def revive(fid: str, roles: Iterable[str] = ()) -> dict[str, Any]:
    # The doc's example shows {"role": ...}; scheduler.proto's Revive has `repeated string
    # roles`, which is what we send (and nothing at all for "every role").
    roles = list(roles)
    return _call(fid, "REVIVE", {"roles": roles} if roles else None)


def suppress(fid: str, roles: Iterable[str] = ()) -> dict[str, Any]:
    roles = list(roles)
    return _call(fid, "SUPPRESS", {"roles": roles} if roles else None)


def kill(fid: str, task_id: str, agent_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"task_id": ident(task_id)}
    if agent_id:
        body["agent_id"] = ident(agent_id)
    return _call(fid, "KILL", body)


def shutdown(fid: str, executor_id: str, agent_id: str) -> dict[str, Any]:
    return _call(fid, "SHUTDOWN", {"executor_id": ident(executor_id), "agent_id": ident(agent_id)})


def acknowledge(fid: str, agent_id: str, task_id: str, uuid_b64: str) -> dict[str, Any]:
    """ACKNOWLEDGE an UPDATE; ``uuid_b64`` is the status's ``uuid`` exactly as received."""
    return _call(fid, "ACKNOWLEDGE", {"agent_id": ident(agent_id), "task_id": ident(task_id),
                                      "uuid": uuid_b64})


def acknowledge_operation_status(fid: str, operation_id: str, uuid_b64: str,
                                 agent_id: str | None = None,
                                 resource_provider_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"operation_id": ident(operation_id), "uuid": uuid_b64}
    if agent_id:
        body["agent_id"] = ident(agent_id)
    if resource_provider_id:
        body["resource_provider_id"] = ident(resource_provider_id)
    return _call(fid, "ACKNOWLEDGE_OPERATION_STATUS", body)


def reconcile(fid: str, tasks: Iterable[tuple[str, str | None]] = ()) -> dict[str, Any]:
    """RECONCILE the given (task id, agent id) pairs; none means every task the master knows."""
    items = []
    for task_id, agent_id in tasks:
        t: dict[str, Any] = {"task_id": ident(task_id)}
        if agent_id:
            t["agent_id"] = ident(agent_id)
        items.append(t)
    return _call(fid, "RECONCILE", {"tasks": items})


def reconcile_operations(fid: str, operations: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    return _call(fid, "RECONCILE_OPERATIONS", {"operations": [dict(o) for o in operations]})


def message(fid: str, agent_id: str, executor_id: str, data: bytes | str) -> dict[str, Any]:
    return _call(fid, "MESSAGE", {"agent_id": ident(agent_id), "executor_id": ident(executor_id),
                                  "data": b64(data)})


def request(fid: str, requests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return _call(fid, "REQUEST", {"requests": [dict(r) for r in requests]})


def update_framework(info: Mapping[str, Any], suppressed_roles: Iterable[str] = ()) -> dict[str, Any]:
    fid = info.get("id", {}).get("value", "")
    body: dict[str, Any] = {"framework_info": dict(info)}
    sr = list(suppressed_roles)
    if sr:
        body["suppressed_roles"] = sr
    return _call(fid, "UPDATE_FRAMEWORK", body)


def command_task(task_id: str, name: str, agent_id: str, resources: list[dict[str, Any]],
                 argv: Iterable[str], *, env: Mapping[str, str] | None = None,
                 user: str | None = None, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A TaskInfo run by the agent's command executor: ``argv[0]`` executed with ``argv``
    as its arguments (CommandInfo with ``shell: false``, so nothing is re-parsed by a shell)."""
    argv = list(argv)
    if not argv:
        raise ValueError(f"task {task_id}: an empty command")
    cmd: dict[str, Any] = {"shell": False, "value": argv[0], "arguments": argv}
    if env:
        cmd["environment"] = {"variables": [{"name": k, "value": v} for k, v in env.items()]}
    if user:
        cmd["user"] = user
    task: dict[str, Any] = {"name": name, "task_id": ident(task_id), "agent_id": ident(agent_id),
                            "resources": resources, "command": cmd}
    if labels:
        task["labels"] = {"labels": [{"key": k, "value": v} for k, v in labels.items()]}
    return task


# -- readers --------------------------------------------------------------------------------

def _value(obj: Any, where: str) -> str:
    """The ``value`` of an id message, or MessageError naming ``where``."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("value"), str) or not obj["value"]:
        raise MessageError(f"{where} must be an object with a non-empty string 'value', "
                           f"got {printable(repr(obj), 120)}")
    return obj["value"]


@dataclass(frozen=True)
class OfferView:
    """What the framework uses of an Offer: the scalars it knows, per name, and the problems
    found while reading it (each naming its field)."""

    offer_id: str
    agent_id: str
    hostname: str
    scalars: Mapping[str, float]
    problems: tuple[str, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def cpus(self) -> float:
        return self.scalars.get("cpus", 0.0)

    @property
    def mem(self) -> float:
        return self.scalars.get("mem", 0.0)


def read_offer(offer: Any) -> OfferView:
    """Read an Offer. Raises MessageError only when the offer cannot be used at all (no id,
    no agent id); bad resources are skipped and listed in ``problems``."""
    if not isinstance(offer, Mapping):
        raise MessageError(f"an offer must be an object, got {type(offer).__name__}")
    oid = _value(offer.get("id"), "offer.id")
    shown_oid = printable(oid, 120)   # (problems are logged: the id is the master's text)
    aid = _value(offer.get("agent_id"), f"offer {shown_oid}: agent_id")
    hostname = offer.get("hostname")
    problems: list[str] = []
    more = 0

    def problem(text: str) -> None:
        nonlocal more
        if len(problems) < MAX_OFFER_PROBLEMS:
            problems.append(text)
        else:
            more += 1

    if not isinstance(hostname, str) or not hostname:
        problem(f"offer {shown_oid}: hostname missing or not a string "
                f"({printable(repr(hostname), 120)})")
        hostname = ""
    scalars: dict[str, float] = {}
    resources = offer.get("resources", [])
    if not isinstance(resources, list):
        problem(f"offer {shown_oid}: resources must be a list, got {type(resources).__name__}")
        resources = []
    for i, r in enumerate(resources):
        if not isinstance(r, Mapping):
            problem(f"offer {shown_oid}: resources[{i}] is not an object")
            continue
        name, kind = r.get("name"), r.get("type")
        if not isinstance(name, str) or not name:
            problem(f"offer {shown_oid}: resources[{i}].name missing")
            continue
        where = f"offer {shown_oid}: resource {printable(repr(name), 80)}"
        if kind not in VALUE_TYPES:
            problem(f"{where} has unknown type {printable(repr(kind), 80)} "
                    f"(known: {sorted(VALUE_TYPES)}); ignored")
            continue
        if r.get("revocable") is not None:
            continue   # revocable resources are never used by this framework
        if kind != "SCALAR":
            continue   # ports, sets, text: not used
        sv = r.get("scalar")
        v = sv.get("value") if isinstance(sv, Mapping) else None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            problem(f"{where}: scalar.value missing or not a number "
                    f"({printable(repr(v), 80)}); ignored")
            continue
        fv = scalar_value(name, v)
        if fv is None:
            problem(f"{where}: scalar.value {printable(repr(v), 80)} is negative, not finite "
                    f"or above {SCALAR_MAX.get(name, SCALAR_MAX_OTHER):g}; ignored")
            continue
        scalars[name] = scalars.get(name, 0.0) + fv
    if more:
        problems.append(f"offer {shown_oid}: and {more} more problems (not listed)")
    return OfferView(oid, aid, hostname, scalars, tuple(problems), offer)


@dataclass(frozen=True)
class StatusView:
    """A TaskStatus as the framework uses it."""

    task_id: str
    state: str
    agent_id: str | None = None
    message: str = ""
    reason: str = ""
    source: str = ""
    uuid: str | None = None           # Base64, as received: echoed back in ACKNOWLEDGE
    executor_pid: int | None = None   # container_status.executor_pid, when the agent gives it
    problems: tuple[str, ...] = ()

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def read_status(status: Any) -> StatusView:
    """Read a TaskStatus. Raises MessageError without a task id; an unknown state is
    reported in ``problems`` (and kept, so the caller can decide)."""
    if not isinstance(status, Mapping):
        raise MessageError(f"a task status must be an object, got {type(status).__name__}")
    tid = _value(status.get("task_id"), "status.task_id")
    problems: list[str] = []
    state = status.get("state")
    if not isinstance(state, str) or state not in ALL_STATES:
        problems.append(f"task {printable(tid, 120)}: unknown state {printable(repr(state), 80)}")
        state = str(state)
    agent = status.get("agent_id")
    aid = agent.get("value") if isinstance(agent, Mapping) and isinstance(agent.get("value"), str) else None
    uuid = status.get("uuid")
    if uuid is not None and not isinstance(uuid, str):
        problems.append(f"task {printable(tid, 120)}: uuid is not a Base64 string "
                        f"({printable(repr(uuid), 80)})")
        uuid = None
    pid = None
    cs = status.get("container_status")
    if isinstance(cs, Mapping) and isinstance(cs.get("executor_pid"), int) and cs["executor_pid"] > 0:
        pid = cs["executor_pid"]
    return StatusView(tid, state, aid, str(status.get("message") or ""), str(status.get("reason") or ""),
                      str(status.get("source") or ""), uuid, pid, tuple(problems))


__all__ = [name for name in dir() if not name.startswith("_") and name not in
           ("annotations", "base64", "re", "dataclass", "field", "Any", "Iterable", "Mapping",
            "is_finite_number")]
