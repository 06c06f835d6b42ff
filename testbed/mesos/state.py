"""The emulated master's state: agents, executors, offers, filters, tasks and frameworks.

Plain holders of what the master knows, kept apart from ``master.py`` (which changes them
under its lock) so that ``faults.py`` and the HTTP side can name them without importing
the master itself.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from coscheduler.boundedjson import is_finite_number

from .resources import Resources, agent_resources
from .runtime import AgentRuntime
from .stream import Subscription

TERMINAL_STATES = frozenset({"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR",
                             "TASK_LOST", "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR"})
MESOS_VERSION = "1.11.0"   # the API version whose documentation the emulator follows
LABEL_JOB_ID = "cosched_agent_job_id"
LABEL_HINTS = {"cosched_walltime_s": ("walltime_s", float), "cosched_tasks_total": ("tasks_total", int),
               "cosched_job_class": ("job_class", str)}


@dataclass
class AgentSpec:
    """One emulated agent: its resources and, optionally, its hostname and attributes."""

    cpus: float = 4.0
    mem_mb: float = 4096.0
    disk_mb: float | None = None
    ports: tuple[int, int] | None = None
    hostname: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass
class MasterConfig:
    heartbeat_interval_s: float = 15.0      # Mesos' default
    allocation_interval_s: float = 1.0      # Mesos' --allocation_interval default
    offer_timeout_s: float | None = None    # Mesos' --offer_timeout (default: none)
    status_update_retry_s: float = 10.0     # an agent's first retry of an unacknowledged update
    status_update_retry_max_s: float = 600.0
    kill_grace_s: float = 3.0               # KillPolicy.grace_period when none is given
    hostname: str = "127.0.0.1"
    port: int = 5050


class Agent:
    def __init__(self, agent_id: str, name: str, spec: AgentSpec, runtime: AgentRuntime):
        self.id = agent_id
        self.name = name
        self.spec = spec
        self.hostname = spec.hostname or name
        self.total = agent_resources(spec.cpus, spec.mem_mb, spec.disk_mb, spec.ports)
        self.used = Resources()
        self.offered = Resources()
        self.runtime = runtime
        self.job_ids: set[str] = set()
        self.executors: dict[tuple[str, str], "Executor"] = {}
        self.launch_q: "queue.SimpleQueue[Task | None]" = queue.SimpleQueue()
        self.launcher: threading.Thread | None = None

    def available(self) -> Resources:
        return self.total - self.used - self.offered


@dataclass
class Executor:
    """A default executor of a LAUNCH_GROUP: its resources are held while it has tasks."""

    framework_id: str
    executor_id: str
    agent_id: str
    resources: Resources
    tasks: set[str] = field(default_factory=set)


@dataclass
class Offer:
    id: str
    framework_id: str
    agent_id: str
    role: str
    resources: Resources
    created: float


@dataclass
class Filter:
    agent_id: str
    role: str
    resources: Resources
    expires: float


class Task:
    def __init__(self, framework_id: str, info: dict[str, Any], agent: Agent,
                 resources: Resources, group: Executor | None):
        self.framework_id = framework_id
        self.info = info
        self.task_id: str = info["task_id"]["value"]
        self.agent_id = agent.id
        self.name: str = info.get("name", "")
        self.resources = resources
        self.group = group
        self.executor_id = group.executor_id if group else self.task_id
        self.state = "TASK_STAGING"
        self.forwarded_state: str | None = None
        self.updates: deque[dict[str, Any]] = deque()
        self.retry_gen = 0
        self.retry_delay = 0.0
        self.popen = None
        self.job_id: str | None = None
        self.kill_requested = False
        self.kill_grace_s: float | None = None
        self.killing_sent = False
        self.silent = False          # its framework was removed: nobody to tell
        self.lost = False            # its agent was lost
        self.released = False
        self.exited = threading.Event()
        self.started_at: float | None = None
        self.exit_code: int | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def view(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "framework_id": self.framework_id,
                "agent_id": self.agent_id, "name": self.name, "state": self.state,
                "forwarded_state": self.forwarded_state, "resources": self.resources.describe(),
                "executor_id": self.executor_id, "group": self.group is not None,
                "pid": self.popen.pid if self.popen is not None else None,
                "node_agent_job_id": self.job_id, "unacknowledged": len(self.updates),
                "exit_code": self.exit_code}


class Framework:
    def __init__(self, framework_id: str, info: dict[str, Any]):
        self.id = framework_id
        self.info: dict[str, Any] = {}
        self.roles: list[str] = []
        self.capabilities: set[str] = set()
        self.suppressed: set[str] = set()
        self.sub: Subscription | None = None
        self.connected = False
        self.failover_gen = 0
        self.disconnected_at: float | None = None
        self.filters: list[Filter] = []
        self.tasks: dict[str, Task] = {}
        self.offers: set[str] = set()
        self.messages: list[dict[str, Any]] = []
        self.registered_at = time.time()
        self.set_info(info)

    def set_info(self, info: dict[str, Any]) -> None:
        self.info = dict(info, id={"value": self.id})
        self.capabilities = {c.get("type") for c in info.get("capabilities") or []}
        if "MULTI_ROLE" in self.capabilities:
            self.roles = list(dict.fromkeys(info.get("roles") or [])) or ["*"]
        else:
            self.roles = [info.get("role") or "*"]

    @property
    def partition_aware(self) -> bool:
        return "PARTITION_AWARE" in self.capabilities

    @property
    def failover_timeout(self) -> float:
        v = self.info.get("failover_timeout", 0.0)
        return float(v) if is_finite_number(v) and v > 0 else 0.0

    def view(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.info.get("name"), "user": self.info.get("user"),
                "roles": self.roles, "suppressed_roles": sorted(self.suppressed),
                "capabilities": sorted(c for c in self.capabilities if c),
                "failover_timeout": self.failover_timeout, "connected": self.connected,
                "stream_id": self.sub.stream_id if self.sub else None,
                "heartbeats": self.sub.heartbeats if self.sub else None,
                "paused": self.sub.paused if self.sub else None,
                "offers": sorted(self.offers),
                "filters": [{"agent_id": f.agent_id, "role": f.role,
                             "resources": f.resources.describe(),
                             "expires_in_s": round(f.expires - time.monotonic(), 3)}
                            for f in self.filters if f.expires > time.monotonic()],
                "tasks": [t.view() for t in self.tasks.values()],
                "messages": self.messages[-50:]}


class CallError(Exception):
    """A scheduler call the master refuses synchronously (HTTP status and message)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status

    def __reduce__(self):
        return type(self), (self.status, str(self))
