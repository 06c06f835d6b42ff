"""Reading a scheduler ``Call`` from its JSON form, as the master does before acting on it.

The v1 scheduler API (``include/mesos/v1/scheduler/scheduler.proto``) encodes a Call as the
protobuf JSON mapping of ``mesos.v1.scheduler.Call``: field names as in the .proto, enums by
name, ``bytes`` as Base64. The master answers "400 Bad Request" when the body cannot be
converted into a Call (wrong JSON types, a required field missing, an unknown enum name) or
when the call fails validation (``type`` missing, the message for the type missing,
``framework_id`` missing on a non-SUBSCRIBE call, ``framework_id`` differing from
``subscribe.framework_info.id``, an acknowledgement ``uuid`` that is not a UUID).

The checker below is table-driven: one small spec per message the emulator reads. Unknown
JSON fields are ignored (as a protobuf parser ignores unknown fields); fields the emulator
does not interpret are declared ``ANY`` and passed through unchecked. Every error names the
path of the offending field, e.g. ``accept.operations[0].launch.task_infos[1].task_id``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any

from coscheduler import boundedjson


class BadCall(ValueError):
    """The request cannot become a valid Call: answer 400 with this message."""


@dataclass(frozen=True)
class F:
    """One field: its kind, and whether it is required / repeated."""

    kind: str                      # string bool double int uint bytes enum msg any
    required: bool = False
    repeated: bool = False
    spec: Any = None               # message spec (dict) for msg, names (tuple) for enum


ANY = F("any")


def _msg(spec: dict, required: bool = False, repeated: bool = False) -> F:
    return F("msg", required, repeated, spec)


def _enum(names: tuple[str, ...], required: bool = False) -> F:
    return F("enum", required, False, names)


ID = {"value": F("string", required=True)}
DURATION = {"nanoseconds": F("int", required=True)}

SCALAR = {"value": F("double", required=True)}
RANGE = {"begin": F("uint", required=True), "end": F("uint", required=True)}
RESOURCE = {
    "name": F("string", required=True),
    "type": _enum(("SCALAR", "RANGES", "SET", "TEXT"), required=True),
    "scalar": _msg(SCALAR),
    "ranges": _msg({"range": _msg(RANGE, repeated=True)}),
    "set": _msg({"item": F("string", repeated=True)}),
    "role": F("string"),
    "allocation_info": ANY, "reservation": ANY, "reservations": ANY, "disk": ANY,
    "revocable": ANY, "shared": ANY, "provider_id": ANY,
}
VARIABLE = {"name": F("string", required=True), "type": _enum(("UNKNOWN", "VALUE", "SECRET")),
            "value": F("string"), "secret": ANY}
COMMAND = {
    "uris": ANY,
    "environment": _msg({"variables": _msg(VARIABLE, repeated=True)}),
    "shell": F("bool"),
    "value": F("string"),
    "arguments": F("string", repeated=True),
    "user": F("string"),
}
EXECUTOR = {
    "type": _enum(("UNKNOWN", "DEFAULT", "CUSTOM")),
    "executor_id": _msg(ID, required=True),
    "framework_id": _msg(ID),
    "command": _msg(COMMAND),
    "container": ANY,
    "resources": _msg(RESOURCE, repeated=True),
    "name": F("string"), "source": F("string"), "data": F("bytes"),
    "discovery": ANY, "shutdown_grace_period": _msg(DURATION), "labels": ANY,
}
LABELS = {"labels": _msg({"key": F("string", required=True), "value": F("string")}, repeated=True)}
TASK_INFO = {
    "name": F("string", required=True),
    "task_id": _msg(ID, required=True),
    "agent_id": _msg(ID, required=True),
    "resources": _msg(RESOURCE, repeated=True),
    "executor": _msg(EXECUTOR),
    "command": _msg(COMMAND),
    "container": ANY, "health_check": ANY, "check": ANY,
    "kill_policy": _msg({"grace_period": _msg(DURATION)}),
    "data": F("bytes"),
    "labels": _msg(LABELS),
    "discovery": ANY,
    "max_completion_time": _msg(DURATION),
    "limits": ANY,
}
OPERATION_TYPES = ("UNKNOWN", "LAUNCH", "LAUNCH_GROUP", "RESERVE", "UNRESERVE", "CREATE",
                   "DESTROY", "GROW_VOLUME", "SHRINK_VOLUME", "CREATE_DISK", "DESTROY_DISK")
OPERATION = {
    "type": _enum(OPERATION_TYPES),
    "id": _msg(ID),
    "launch": _msg({"task_infos": _msg(TASK_INFO, repeated=True)}),
    "launch_group": _msg({"executor": _msg(EXECUTOR, required=True),
                          "task_group": _msg({"tasks": _msg(TASK_INFO, repeated=True)},
                                             required=True)}),
    "reserve": ANY, "unreserve": ANY, "create": ANY, "destroy": ANY, "grow_volume": ANY,
    "shrink_volume": ANY, "create_disk": ANY, "destroy_disk": ANY,
}
FILTERS = {"refuse_seconds": F("double")}
CAPABILITY_TYPES = ("UNKNOWN", "REVOCABLE_RESOURCES", "TASK_KILLING_STATE", "GPU_RESOURCES",
                    "SHARED_RESOURCES", "PARTITION_AWARE", "MULTI_ROLE",
                    "RESERVATION_REFINEMENT", "REGION_AWARE")
FRAMEWORK_INFO = {
    "user": F("string", required=True),
    "name": F("string", required=True),
    "id": _msg(ID),
    "failover_timeout": F("double"),
    "checkpoint": F("bool"),
    "role": F("string"),
    "roles": F("string", repeated=True),
    "hostname": F("string"),
    "principal": F("string"),
    "webui_url": F("string"),
    "capabilities": _msg({"type": _enum(CAPABILITY_TYPES)}, repeated=True),
    "labels": ANY,
    "offer_filters": ANY,
}

CALL_TYPES = ("UNKNOWN", "SUBSCRIBE", "TEARDOWN", "ACCEPT", "DECLINE", "ACCEPT_INVERSE_OFFERS",
              "DECLINE_INVERSE_OFFERS", "REVIVE", "KILL", "SHUTDOWN", "ACKNOWLEDGE",
              "ACKNOWLEDGE_OPERATION_STATUS", "RECONCILE", "RECONCILE_OPERATIONS", "MESSAGE",
              "REQUEST", "SUPPRESS", "UPDATE_FRAMEWORK")

# Call type -> (field holding its message, spec, whether the master requires it).
CALL_BODIES: dict[str, tuple[str, dict, bool]] = {
    "SUBSCRIBE": ("subscribe", {"framework_info": _msg(FRAMEWORK_INFO, required=True),
                                "suppressed_roles": F("string", repeated=True),
                                "offer_constraints": ANY, "force": F("bool")}, True),
    "ACCEPT": ("accept", {"offer_ids": _msg(ID, repeated=True),
                          "operations": _msg(OPERATION, repeated=True),
                          "filters": _msg(FILTERS)}, True),
    "DECLINE": ("decline", {"offer_ids": _msg(ID, repeated=True),
                            "filters": _msg(FILTERS)}, True),
    "ACCEPT_INVERSE_OFFERS": ("accept_inverse_offers",
                              {"inverse_offer_ids": _msg(ID, repeated=True),
                               "filters": _msg(FILTERS)}, True),
    "DECLINE_INVERSE_OFFERS": ("decline_inverse_offers",
                               {"inverse_offer_ids": _msg(ID, repeated=True),
                                "filters": _msg(FILTERS)}, True),
    # The documentation's REVIVE example writes {"role": ...}; the .proto has repeated roles.
    "REVIVE": ("revive", {"roles": F("string", repeated=True), "role": F("string")}, False),
    "SUPPRESS": ("suppress", {"roles": F("string", repeated=True)}, False),
    "KILL": ("kill", {"task_id": _msg(ID, required=True), "agent_id": _msg(ID),
                      "kill_policy": _msg({"grace_period": _msg(DURATION)})}, True),
    "SHUTDOWN": ("shutdown", {"executor_id": _msg(ID, required=True),
                              "agent_id": _msg(ID, required=True)}, True),
    "ACKNOWLEDGE": ("acknowledge", {"agent_id": _msg(ID, required=True),
                                    "task_id": _msg(ID, required=True),
                                    "uuid": F("bytes", required=True)}, True),
    "ACKNOWLEDGE_OPERATION_STATUS": ("acknowledge_operation_status",
                                     {"agent_id": _msg(ID), "resource_provider_id": _msg(ID),
                                      "uuid": F("bytes", required=True),
                                      "operation_id": _msg(ID, required=True)}, True),
    "RECONCILE": ("reconcile", {"tasks": _msg({"task_id": _msg(ID, required=True),
                                               "agent_id": _msg(ID)}, repeated=True)}, True),
    "RECONCILE_OPERATIONS": ("reconcile_operations",
                             {"operations": _msg({"operation_id": _msg(ID, required=True),
                                                  "agent_id": _msg(ID),
                                                  "resource_provider_id": _msg(ID)},
                                                 repeated=True)}, True),
    "MESSAGE": ("message", {"agent_id": _msg(ID, required=True),
                            "executor_id": _msg(ID, required=True),
                            "data": F("bytes", required=True)}, True),
    "REQUEST": ("request", {"requests": ANY}, True),
    "UPDATE_FRAMEWORK": ("update_framework", {"framework_info": _msg(FRAMEWORK_INFO, required=True),
                                              "suppressed_roles": F("string", repeated=True),
                                              "offer_constraints": ANY}, True),
}


def _check(value: Any, f: F, path: str) -> None:
    if f.repeated:
        if not isinstance(value, list):
            raise BadCall(f"'{path}' must be a JSON array, got {_show(value)}")
        for i, v in enumerate(value):
            _check_one(v, f, f"{path}[{i}]")
    else:
        _check_one(value, f, path)


def _check_one(v: Any, f: F, path: str) -> None:
    k = f.kind
    if k == "any":
        return
    if k == "string":
        if not isinstance(v, str):
            raise BadCall(f"'{path}' must be a string, got {_show(v)}")
    elif k == "bool":
        if not isinstance(v, bool):
            raise BadCall(f"'{path}' must be true or false, got {_show(v)}")
    elif k == "double":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise BadCall(f"'{path}' must be a number, got {_show(v)}")
    elif k in ("int", "uint"):
        # 64-bit integers may come as JSON numbers or as decimal strings.
        if isinstance(v, str) and v.lstrip("-").isdigit():
            v = int(v)
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())):
            raise BadCall(f"'{path}' must be an integer, got {_show(v)}")
        if k == "uint" and v < 0:
            raise BadCall(f"'{path}' must be >= 0, got {v!r}")
    elif k == "bytes":
        if not isinstance(v, str):
            raise BadCall(f"'{path}' must be a Base64 string, got {_show(v)}")
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise BadCall(f"'{path}' is not valid Base64: {v[:40]!r}") from None
    elif k == "enum":
        if not isinstance(v, str) or v not in f.spec:
            raise BadCall(f"'{path}' has no enum value {_show(v)}; known: {', '.join(f.spec)}")
    elif k == "msg":
        if not isinstance(v, dict):
            raise BadCall(f"'{path}' must be a JSON object, got {_show(v)}")
        _check_message(v, f.spec, path)
    else:  # pragma: no cover - a spec typo
        raise AssertionError(k)


def _check_message(obj: dict, spec: dict, path: str) -> None:
    for name, f in spec.items():
        sub = f"{path}.{name}" if path else name
        if name not in obj or obj[name] is None:
            if f.required:
                raise BadCall(f"required field '{sub}' is missing")
            continue
        _check(obj[name], f, sub)


def _show(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, (bytes, bytearray)) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


# A Call's protobuf nests about ten levels deep; far more is not a Call.
MAX_CALL_DEPTH = 64


def decode_json(body: bytes) -> Any:
    """Strict JSON (no NaN/Infinity tokens), bounded in nesting (coscheduler/boundedjson.py:
    a 100,000-deep body is a 400, never a RecursionError); BadCall with the reason."""
    try:
        return boundedjson.loads(body, max_depth=MAX_CALL_DEPTH, what="body", strict=True)
    except ValueError as e:
        raise BadCall(f"Failed to parse body into JSON: {e}") from None


def parse_call(body: bytes) -> dict[str, Any]:
    """Validate a Call's JSON body; returns the JSON object (plain data) or raises BadCall."""
    call = decode_json(body)
    if not isinstance(call, dict):
        raise BadCall(f"Failed to convert JSON into Call protobuf: expected a JSON object, "
                      f"got {_show(call)}")
    try:
        _check_message(call, {"framework_id": _msg(ID)}, "")
        if "type" not in call or call["type"] is None:
            raise BadCall("Expecting 'type' to be present")
        _check_one(call["type"], _enum(CALL_TYPES), "type")
        ctype = call["type"]
        if ctype in CALL_BODIES:
            field, spec, required = CALL_BODIES[ctype]
            if ctype == "REQUEST" and field not in call and "requests" in call:
                # The documentation's REQUEST example puts "requests" at the top level.
                call[field] = {"requests": call["requests"]}
            if call.get(field) is None:
                if required:
                    raise BadCall(f"Expecting '{field}' to be present")
                call[field] = {}
            _check(call[field], _msg(spec), field)
    except BadCall as e:
        msg = str(e)
        if not msg.startswith("Expecting"):
            msg = f"Failed to validate scheduler::Call: {msg}"
        raise BadCall(msg) from None
    if ctype == "SUBSCRIBE":
        info_id = call["subscribe"]["framework_info"].get("id")
        if (info_id or {}).get("value") != (call.get("framework_id") or {}).get("value"):
            raise BadCall("Failed to validate scheduler::Call: 'framework_id' differs from "
                          "'subscribe.framework_info.id'")
    elif ctype == "UPDATE_FRAMEWORK":
        info_id = call["update_framework"]["framework_info"].get("id")
        if (info_id or {}).get("value") != (call.get("framework_id") or {}).get("value"):
            raise BadCall("Failed to validate scheduler::Call: 'framework_id' differs from "
                          "'update_framework.framework_info.id'")
    elif ctype != "UNKNOWN" and not call.get("framework_id"):
        raise BadCall("Failed to validate scheduler::Call: Expecting 'framework_id' to be present")
    if ctype == "ACKNOWLEDGE" and len(b64(call["acknowledge"]["uuid"])) != 16:
        raise BadCall("Failed to validate scheduler::Call: 'acknowledge.uuid' is not a UUID "
                      "(expected 16 bytes, Base64-encoded)")
    return call


def b64(text: str) -> bytes:
    return base64.b64decode(text)


def refuse_seconds(filters: dict | None, default: float = 5.0, cap: float = 31536000.0) -> float:
    """``Filters.refuse_seconds`` as mesos.proto defines it: 5 s when unset or negative,
    at most 365 days."""
    if not filters or "refuse_seconds" not in filters:
        return default
    v = float(filters["refuse_seconds"])
    if math.isnan(v) or v < 0:
        return default
    return min(v, cap)
