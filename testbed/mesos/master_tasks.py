"""The emulated Mesos master's tasks: launch as real processes, wait, kill, release, and the
status updates each produces (agent-made, resent until acknowledged; master-made, sent once).

A mixin of ``master.Master`` (THIS IS AN EMULATOR: see master.py); it holds no state of its own.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from .runtime import AgentRuntime, LaunchError, command_argv, command_env, node_job_id
from .state import (
    LABEL_HINTS,
    LABEL_JOB_ID,
    TERMINAL_STATES,
    Agent,
    Framework,
    Task,
)
from .stream import b64 as _b64
from .stream import mesos_id as _id

log = logging.getLogger("testbed.mesos")


class TaskLifecycle:
    """Tasks as real processes on an agent, and their status updates (resent until acknowledged)."""

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

