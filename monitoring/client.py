"""A small client for the agent's HTTP API, for the controller, backends and operators.

    c = AgentClient("http://127.0.0.1:9137", token_file="/etc/cosched/agent.token")
    c.register_job("j1", pids=[1234], cores=4, walltime_s=3600)
    c.set_quota("j1", 0.5, lease_s=30)
    c.job("j1")["cpu_percent"]
    c.clear_quota("j1")

Every failure raises :class:`AgentError` (``status`` is the HTTP status, None when the
agent could not be reached) with the agent's own error message.

An agent that lets a call time out (frozen, swapping, its node overloaded) is not asked
again for a while: the calls in between fail at once, saying so (``quiet_s``: the timeout,
doubling with each timeout in a row up to ``MAX_QUIET_S``; any answer ends it). A backend
calls each agent several times per pass (its jobs' metrics, one lease renewal per lending
job): waiting out the timeout on every call made each pass of a real Slurm cluster take
15-25 s with one agent frozen by SIGSTOP, so that the leases on every other node lapsed
between passes. A refused connection fails at once already and is not held back.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

from coscheduler import boundedjson

MAX_ANSWER_BYTES = boundedjson.DEFAULT_MAX_BYTES     # 16 MB, as for the agent's request bodies
MAX_QUIET_S = 60.0   # the longest an agent that timed out goes unasked


class AgentError(RuntimeError):
    def __init__(self, message: str, status: int | None = None, method: str = "", path: str = ""):
        where = f"{method} {path}: " if method else ""
        super().__init__(f"agent {where}{message}" + (f" (HTTP {status})" if status else ""))
        self.status = status
        self.message = message
        self.method, self.path = method, path

    def __reduce__(self):
        return type(self), (self.message, self.status, self.method, self.path)


class AgentClient:
    def __init__(self, url: str = "http://127.0.0.1:9137", token: str | None = None,
                 token_file: str | None = None, timeout: float = 5.0):
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"agent url {url!r} must look like http://HOST:PORT")
        self.url = url.rstrip("/")
        self._host, self._port = u.hostname, u.port or 80
        if token is None and token_file is not None:
            with open(token_file) as f:
                token = f.readline().strip()
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # one kept-alive connection, one request at a time
        # After a timeout: not asked again until this (monotonic) time (module docstring).
        self._quiet_until = 0.0
        self._timeouts = 0       # timeouts in a row
        self._clock = time.monotonic

    # ---- API ---------------------------------------------------------------------------
    def health(self) -> bool:
        try:
            return bool(self._call("GET", "/healthz").get("ok"))
        except AgentError:
            return False

    def node(self) -> dict[str, Any]:
        return self._call("GET", "/v1/node")

    def register_job(self, job_id: str, pids: list[int], cores: float, **optional: Any) -> dict[str, Any]:
        """Register a job; optional: walltime_s, start_time, tasks_total, job_class,
        progress_file, mem_mb. Returns the job, including its ``progress_file``."""
        body = {"job_id": job_id, "pids": list(pids), "cores": cores}
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._call("POST", "/v1/jobs", body)

    def jobs(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/jobs")["jobs"]

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{self._q(job_id)}")

    def set_quota(self, job_id: str, cpu_fraction: float, lease_s: float,
                  role: str | None = None) -> dict[str, Any]:
        """``role`` ("host"/"guest") is sent only when given: agents before it refuse the field."""
        body: dict[str, Any] = {"cpu_fraction": cpu_fraction, "lease_s": lease_s}
        if role is not None:
            body["role"] = role
        return self._call("PUT", f"/v1/jobs/{self._q(job_id)}/quota", body)

    def clear_quota(self, job_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/jobs/{self._q(job_id)}/quota")

    def unregister(self, job_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/jobs/{self._q(job_id)}")

    def metrics(self) -> str:
        return self._call("GET", "/metrics", raw=True)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ---- plumbing ------------------------------------------------------------------------
    @staticmethod
    def _q(job_id: str) -> str:
        if not isinstance(job_id, str) or not job_id:
            raise AgentError(f"job id must be a non-empty string, got {job_id!r}")
        return quote(job_id, safe="")

    def _call(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if method != "GET":
            headers["Content-Length"] = str(len(data or b""))
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
        with self._lock:
            left = self._quiet_until - self._clock()
            if left > 0:
                raise AgentError(f"not asked: the agent at {self.url} let {self._timeouts} call(s) "
                                 f"in a row time out ({self.timeout:g} s each); next try in "
                                 f"{left:.1f} s", None, method, path)
            for attempt in (0, 1):  # one retry: a kept-alive connection the server closed
                try:
                    if self._conn is None:
                        self._conn = http.client.HTTPConnection(self._host, self._port,
                                                                timeout=self.timeout)
                    self._conn.request(method, path, body=data or (b"" if method != "GET" else None),
                                       headers=headers)
                    resp = self._conn.getresponse()
                    # an agent is a peer: its answer is read up to a cap, never whole first
                    payload = boundedjson.read_limited(resp, MAX_ANSWER_BYTES,
                                                       f"answer of the agent at {self.url}")
                    if resp.getheader("Connection", "").lower() == "close":
                        self._conn.close()
                        self._conn = None
                    break
                except boundedjson.JSONUnusable as e:
                    self._conn.close()
                    self._conn = None
                    raise AgentError(str(e), None, method, path) from None
                except (http.client.HTTPException, OSError) as e:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    if isinstance(e, TimeoutError):
                        self._timeouts += 1
                        # (the exponent capped: a day of timeouts must not overflow a float)
                        self._quiet_until = self._clock() + min(
                            MAX_QUIET_S, self.timeout * 2 ** min(self._timeouts - 1, 20))
                    if attempt == 1 or isinstance(e, (ConnectionRefusedError, TimeoutError)):
                        raise AgentError(f"cannot reach agent at {self.url}: {e}", None,
                                         method, path) from e
            self._timeouts = 0    # it answered
        if resp.status >= 400:
            try:
                msg = boundedjson.loads(payload, what="agent answer").get("error", payload.decode(errors="replace"))
            except (ValueError, AttributeError):
                msg = payload.decode(errors="replace").strip()
            raise AgentError(msg, resp.status, method, path)
        if raw:
            return payload.decode()
        try:
            return boundedjson.loads(payload, what=f"answer of the agent at {self.url}")
        except ValueError as e:
            raise AgentError(f"answer is not JSON: {payload[:200]!r}", resp.status, method, path) from e
