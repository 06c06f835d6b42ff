"""The agent's HTTP JSON API: a thin layer over :class:`monitoring.agent.NodeAgent`.

Contract (documented in monitoring/README.md):

    GET    /healthz                      liveness, no token
    GET    /metrics                      Prometheus text exposition
    GET    /v1/node                      the agent, its cgroup root, counters, recovery report
    GET    /v1/jobs                      {"jobs": [job, ...]}
    GET    /v1/jobs/{job_id}             job
    POST   /v1/jobs                      register {"job_id", "pids", "cores", ...} -> 201 / 200
    DELETE /v1/jobs/{job_id}             unregister (quota lifted, cgroup removed once empty)
    PUT    /v1/jobs/{job_id}/quota       {"cpu_fraction": f, "lease_s": s}
    DELETE /v1/jobs/{job_id}/quota       full quota back

Writes need ``Authorization: Bearer TOKEN``: missing -> 401, wrong -> 403. Errors are
``{"error": message}`` with 400 (bad input, unsafe id), 404, 409, 413 or 500.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from coscheduler.model import InvalidInput, validate_job_id

from .agent import Conflict, NodeAgent, UnknownJob
from .cgroupfs import CgroupError, UnsafePath
from .metrics import exposition, make_registry

log = logging.getLogger("monitoring.api")

DEFAULT_PORT = 9137
MAX_BODY = 1 << 20


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def parse_listen(addr: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (127.0.0.1) or ``[::1]:PORT``."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = addr, str(DEFAULT_PORT)
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"listen address {addr!r}: port must be 0-65535")
    return host, int(port)


def _job_segment(parts: list[str]) -> str:
    # Everything between /v1/jobs/ and an optional /quota is the job id, decoded, so that
    # '../../x' or '%2e%2e%2fx' is judged as an id (and refused) rather than routed.
    return unquote("/".join(parts))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK hold the body back ~40 ms
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.client_address[0], *args)

    def _send(self, status: int, body: Any, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="cosched-agent"')
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _auth(self) -> None:
        token = self.server.token
        if not token:
            raise HTTPError(403, "writes are disabled: the agent has no token configured")
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise HTTPError(401, "missing 'Authorization: Bearer TOKEN' header")
        if not hmac.compare_digest(header[7:].strip().encode(), token.encode()):
            raise HTTPError(403, "wrong token")

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise HTTPError(411, "a JSON body with Content-Length is required")
        n = int(length)
        if n > MAX_BODY:
            raise HTTPError(413, f"body of {n} bytes is larger than {MAX_BODY}")
        raw = self.rfile.read(n)
        try:
            return json.loads(raw or b"null")
        except ValueError as e:
            raise HTTPError(400, f"body is not valid JSON: {e}") from None

    def _route(self, method: str) -> tuple[int, Any]:
        agent: NodeAgent = self.server.agent
        path = urlsplit(self.path).path
        parts = path.split("/")[1:]
        if method == "GET" and path == "/healthz":
            return 200, {"ok": not agent.closed}
        if method == "GET" and path == "/metrics":
            return 200, exposition(self.server.registry)
        if method == "GET" and path == "/v1/node":
            return 200, agent.node()
        if parts[:2] != ["v1", "jobs"]:
            raise HTTPError(404, f"no such endpoint: {method} {path}")
        rest = parts[2:]
        if rest in ([], [""]):
            if method == "GET":
                return 200, {"jobs": agent.jobs()}
            if method == "POST":
                self._auth()
                view = agent.register_job(self._body())
                return (201 if view.pop("created") else 200), view
            raise HTTPError(405, f"{method} not allowed on /v1/jobs")
        quota = len(rest) >= 2 and rest[-1] == "quota"
        job_id = validate_job_id(_job_segment(rest[:-1] if quota else rest))
        if quota:
            if method == "PUT":
                self._auth()
                body = self._body()
                if not isinstance(body, dict) or set(body) - {"cpu_fraction", "lease_s"} \
                        or "cpu_fraction" not in body or "lease_s" not in body:
                    raise InvalidInput('quota body must be {"cpu_fraction": f, "lease_s": s}, '
                                       f"got {body!r}")
                return 200, agent.set_quota(job_id, body["cpu_fraction"], body["lease_s"])
            if method == "DELETE":
                self._auth()
                return 200, agent.clear_quota(job_id)
            raise HTTPError(405, f"{method} not allowed on a job's quota")
        if method == "GET":
            return 200, agent.job(job_id)
        if method == "DELETE":
            self._auth()
            return 200, agent.unregister(job_id)
        raise HTTPError(405, f"{method} not allowed on a job")

    def _handle(self, method: str) -> None:
        try:
            status, body = self._route(method)
        except HTTPError as e:
            status, body = e.status, {"error": str(e)}
        except (InvalidInput, UnsafePath) as e:
            status, body = 400, {"error": str(e)}
        except UnknownJob as e:
            status, body = 404, {"error": str(e)}
        except Conflict as e:
            status, body = 409, {"error": str(e)}
        except CgroupError as e:
            log.error("%s %s: %s", method, self.path, e)
            status, body = 500, {"error": f"cgroup operation failed: {e}"}
        except Exception as e:  # never kill the server thread; say what broke
            log.exception("%s %s failed", method, self.path)
            status, body = 500, {"error": f"internal error: {type(e).__name__}: {e}"}
        ctype = "text/plain; version=0.0.4; charset=utf-8" if isinstance(body, bytes) else "application/json"
        if status >= 400:
            # The body may be unread: close rather than let a kept-alive connection desync.
            self.close_connection = True
        self._send(status, body, ctype)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, agent: NodeAgent, token: str | None):
        host = addr[0]
        if ":" in host:
            import socket
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.agent = agent
        self.token = token
        self.registry = make_registry(agent)


class AgentServer:
    """Serve a NodeAgent over HTTP. ``listen`` defaults to 127.0.0.1:9137; port 0 picks a
    free port (see ``url``)."""

    def __init__(self, agent: NodeAgent, listen: str = f"127.0.0.1:{DEFAULT_PORT}",
                 token: str | None = None):
        self.agent = agent
        self._httpd = _Server(parse_listen(listen), agent, token)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.1)

    def start(self) -> "AgentServer":
        self._thread = threading.Thread(target=self.serve_forever, name="cosched-agent-http",
                                        daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def read_token_file(path: str) -> str:
    """The token: the file's first line, stripped; refuses an empty file."""
    try:
        with open(path) as f:
            token = f.readline().strip()
    except OSError as e:
        raise InvalidInput(f"token file {path}: {e.strerror}") from None
    if len(token) < 16:
        raise InvalidInput(f"token file {path}: the token must be at least 16 characters")
    return token
