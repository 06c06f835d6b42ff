"""A small client for the agent's HTTP API, for the controller, backends and operators.

    c = AgentClient("http://127.0.0.1:9137", token_file="/etc/cosched/agent.token")
    c.register_job("j1", pids=[1234], cores=4, walltime_s=3600)
    c.set_quota("j1", 0.5, lease_s=30)
    c.job("j1")["cpu_percent"]
    c.clear_quota("j1")

Every failure raises :class:`AgentError` (``status`` is the HTTP status, None when the
agent could not be reached) with the agent's own error message, on one line, naming the agent.
An agent is a peer whose answers are checked, not trusted: only a 2xx answer is a success;
an answer must be a JSON object (``metrics()``: text) whose body is as long as its
Content-Length says; ``jobs()`` is a list of objects with a string ``job_id`` (other entries
are dropped and logged, see ``jobs``).

``timeout`` is a deadline for the whole call (connecting, sending, the headers and the body),
not a limit per socket read as in http.client: an agent sending its answer one byte a second
made a call with a 2 s timeout take 25 s, and every other node of the pass waited for it.

An agent that lets a call time out (frozen, swapping, its node overloaded) is not asked
again for a while: the calls in between fail at once, saying so (``quiet_s``: the timeout,
doubling with each timeout in a row up to ``MAX_QUIET_S``; any answer ends it). A backend
calls each agent several times per pass (its jobs' metrics, one lease renewal per lending
job): waiting out the timeout on every call made each pass of a real Slurm cluster take
15-25 s with one agent frozen by SIGSTOP, so that the leases on every other node lapsed
between passes. A refused connection fails at once already and is not held back.

A call whose connection fails is sent again once on a new connection (a kept-alive
connection the agent closed), except a POST (``register_job``) once its request was
written whole: the agent may have acted on it, so the caller gets the AgentError and
decides (the Slurm backend registers a job missing from the agent's listing at its next
pass, after having read that listing). A kept-alive
connection the agent closed while idle is noticed before the request is sent and replaced,
so that case needs no second send.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import math
import select
import socket
import threading
import time
from typing import Any
from urllib.parse import quote, urlsplit

from coscheduler import boundedjson
from coscheduler.boundedfile import read_line_secret

MAX_ANSWER_BYTES = boundedjson.DEFAULT_MAX_BYTES     # 16 MB, as for the agent's request bodies
MAX_QUIET_S = 60.0   # the longest an agent that timed out goes unasked
MAX_ERROR_CHARS = 300   # of an agent's own error message, in an AgentError
DROPPED_WARN_S = 600.0  # the most often malformed job views of one agent are a WARNING
# Calls sent again after the connection failed once the whole request was written: asking
# twice leaves the agent as asking once. POST /v1/jobs (register_job) is not sent again:
# the agent may have registered the job and failed before answering, and a second
# registration is not the same as one (it merges pids into, or recreates, a job that ended
# or was unregistered in between).
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})

log = logging.getLogger("monitoring.client")


class AgentError(RuntimeError):
    def __init__(self, message: str, status: int | None = None, method: str = "", path: str = "",
                 url: str = ""):
        at = f" at {url}" if url else ""
        where = f"{method} {path}: " if method else ""
        super().__init__(f"agent{at} {where}{message}" + (f" (HTTP {status})" if status else ""))
        self.status = status
        self.message = message
        self.method, self.path, self.url = method, path, url

    def __reduce__(self):
        return type(self), (self.message, self.status, self.method, self.path, self.url)


def _one_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A peer's text for an error message: one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _time_left(deadline: float) -> float:
    """Seconds to ``deadline`` (monotonic); TimeoutError once none are left, the error
    ``_call`` already answers with the quiet period."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


class _DeadlineReader(io.RawIOBase):
    """An answer's bytes from the socket, each recv given only the time left to the call's
    deadline (http.client gives each read the whole timeout again)."""

    def __init__(self, sock: socket.socket, deadline: float):
        super().__init__()
        self._sock, self._deadline = sock, deadline
        # read through the socket's own raw file: it holds the descriptor open while the
        # body is read after http.client closed the connection (an answer with
        # "Connection: close"), as http.client's own makefile does
        self._raw = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int | None:
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(b)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _AnswerSocket:
    """What an HTTPResponse is built on: it only calls ``makefile`` (the status line, the
    headers and the body are all read through it, so all under the deadline)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


class _DeadlineConnection(http.client.HTTPConnection):
    """An HTTPConnection whose connect, sends and answer reads all end by ``deadline``
    (monotonic), set before each call."""

    deadline = math.inf

    def __init__(self, host: str, port: int, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.response_class = self._answer    # type: ignore[assignment]

    def _answer(self, sock: socket.socket, *args: Any, **kw: Any) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(_AnswerSocket(sock, self.deadline), *args, **kw)  # type: ignore[arg-type]

    def connect(self) -> None:
        self.timeout = _time_left(self.deadline)
        super().connect()

    def send(self, data: Any) -> None:
        if self.sock is not None:     # (a new connection gets its time left in connect)
            self.sock.settimeout(_time_left(self.deadline))
        super().send(data)

    def dropped(self) -> bool:
        """Whether the kept-alive connection was closed by the agent while idle (its idle
        timeout, a restart): readable with nothing asked means an EOF (or a stray byte; the
        connection is no use either way). Checked before a request is sent on it."""
        if self.sock is None:
            return False
        try:
            return bool(select.select([self.sock], [], [], 0)[0])
        except (OSError, ValueError):
            return True


class AgentClient:
    def __init__(self, url: str = "http://127.0.0.1:9137", token: str | None = None,
                 token_file: str | None = None, timeout: float = 5.0):
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"agent url {url!r} must look like http://HOST:PORT")
        self.url = url.rstrip("/")
        self._host, self._port = u.hostname, u.port or 80
        if token is None and token_file is not None:
            # (bounded, no FIFO wait, UTF-8: an InvalidInput naming the file otherwise)
            token = read_line_secret(token_file, f"token file {token_file}")
        self.token = token
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()  # one kept-alive connection, one request at a time
        # After a timeout: not asked again until this (monotonic) time (module docstring).
        self._quiet_until = 0.0
        self._timeouts = 0       # timeouts in a row
        self._clock = time.monotonic
        self.dropped_views = 0   # malformed entries of jobs() answers, dropped (see jobs)
        self._dropped_warned = -math.inf   # (monotonic) when that was last a WARNING

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
        """The agent's job views. An answer without a ``jobs`` list is an AgentError; an entry
        that is not an object with a non-empty string ``job_id`` is dropped (``dropped_views``
        counts them; a WARNING, at most every ``DROPPED_WARN_S`` per agent, names the agent
        and the positions): callers key
        the views by ``job_id``, a job missing from them is registered again, and one bad
        entry no longer costs the node its other jobs' views (or the pass a TypeError)."""
        views = self._call("GET", "/v1/jobs").get("jobs")
        if not isinstance(views, list):
            raise AgentError(f"answer's 'jobs' is {type(views).__name__}, not a list",
                             None, "GET", "/v1/jobs", self.url)
        good, bad = [], []
        for i, v in enumerate(views):
            ok = isinstance(v, dict) and isinstance(v.get("job_id"), str) and v["job_id"] != ""
            (good if ok else bad).append(v if ok else i)
        if bad:
            self.dropped_views += len(bad)
            shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
            # A WARNING at most every DROPPED_WARN_S per agent (asked every pass, a broken
            # agent would flood the log); DEBUG in between, the count kept in dropped_views.
            now = self._clock()
            level = logging.WARNING if now - self._dropped_warned >= DROPPED_WARN_S else logging.DEBUG
            if level == logging.WARNING:
                self._dropped_warned = now
            log.log(level, "agent at %s: GET /v1/jobs: dropped %d of %d job view(s) that are "
                    "not objects with a string job_id (at position %s; %d dropped so far)",
                    self.url, len(bad), len(views), shown, self.dropped_views)
        return good

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
                raise AgentError(f"not asked: it let {self._timeouts} call(s) "
                                 f"in a row time out ({self.timeout:g} s each); next try in "
                                 f"{left:.1f} s", None, method, path, self.url)
            # one deadline for the whole call, the retry included (module docstring)
            deadline = time.monotonic() + self.timeout
            for attempt in (0, 1):  # one retry: a kept-alive connection the server closed
                sent = False        # the whole request written: the agent may have acted on it
                try:
                    if self._conn is not None and self._conn.dropped():
                        self._conn.close()
                        self._conn = None
                    if self._conn is None:
                        self._conn = _DeadlineConnection(self._host, self._port, self.timeout)
                    self._conn.deadline = deadline
                    self._conn.request(method, path, body=data or (b"" if method != "GET" else None),
                                       headers=headers)
                    sent = True
                    resp = self._conn.getresponse()
                    # the body's length as http.client frames it (None: chunked or to the close)
                    declared = resp.length
                    if declared is not None and declared > MAX_ANSWER_BYTES:
                        raise boundedjson.JSONUnusable(
                            f"answer of the agent at {self.url}: Content-Length {declared}, "
                            f"more than the {MAX_ANSWER_BYTES} bytes allowed")
                    # an agent is a peer: its answer is read up to a cap, never whole first
                    payload = boundedjson.read_limited(resp, MAX_ANSWER_BYTES,
                                                       f"answer of the agent at {self.url}")
                    if declared is not None and len(payload) < declared:
                        # http.client returns a short body as if whole when the peer closes
                        raise boundedjson.JSONUnusable(
                            f"answer ended after {len(payload)} of the {declared} bytes its "
                            f"Content-Length declared")
                    if resp.getheader("Connection", "").lower() == "close":
                        self._conn.close()
                        self._conn = None
                    break
                except boundedjson.JSONUnusable as e:
                    self._conn.close()
                    self._conn = None
                    raise AgentError(str(e), None, method, path, self.url) from None
                except (http.client.HTTPException, OSError) as e:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    if isinstance(e, TimeoutError):
                        self._timeouts += 1
                        # (the exponent capped: a day of timeouts must not overflow a float)
                        self._quiet_until = self._clock() + min(
                            MAX_QUIET_S, self.timeout * 2 ** min(self._timeouts - 1, 20))
                        raise AgentError(f"timed out: no whole answer within {self.timeout:g} s",
                                         None, method, path, self.url) from e
                    if attempt == 1 or isinstance(e, ConnectionRefusedError) or (
                            sent and method not in IDEMPOTENT):
                        raise AgentError(f"cannot reach agent: {_one_line(str(e) or type(e).__name__)}",
                                         None, method, path, self.url) from e
            self._timeouts = 0    # it answered
        if not 200 <= resp.status < 300:
            # only 2xx is a success: a 301 with a JSON body is not a quota set
            text = payload.decode(errors="replace")
            try:
                msg = boundedjson.loads(payload, what="agent answer").get("error", text)
            except (ValueError, AttributeError):
                msg = text
            msg = _one_line(str(msg)) or "no error message"
            if resp.status < 400:     # (a redirect is not followed: the agent is the one asked)
                msg = f"not a 2xx answer: {msg}"
            raise AgentError(msg, resp.status, method, path, self.url)
        if raw:
            try:
                return payload.decode()
            except UnicodeDecodeError as e:
                raise AgentError(f"answer is not UTF-8 ({e.reason} at byte {e.start})",
                                 resp.status, method, path, self.url) from None
        try:
            answer = boundedjson.loads(payload, what="answer")
        except ValueError as e:
            raise AgentError(f"{_one_line(str(e))}: {payload[:200]!r}", resp.status,
                             method, path, self.url) from None
        if not isinstance(answer, dict):
            # every API answer is an object; callers use .get and keys on it
            raise AgentError(f"answer is a JSON {type(answer).__name__}, not an object",
                             resp.status, method, path, self.url)
        return answer
