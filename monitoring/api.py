"""The agent's HTTP JSON API: a thin layer over :class:`monitoring.agent.NodeAgent`.

Contract (documented in monitoring/README.md):

    GET    /healthz                      liveness, no token
    GET    /metrics                      Prometheus text exposition
    GET    /v1/node                      the agent, its cgroup root, counters, recovery report
    GET    /v1/jobs                      {"jobs": [job, ...]}
    GET    /v1/jobs/{job_id}             job
    POST   /v1/jobs                      register {"job_id", "pids", "cores", ...} -> 201 / 200
    DELETE /v1/jobs/{job_id}             unregister (quota lifted, cgroup removed once empty)
    PUT    /v1/jobs/{job_id}/quota       {"cpu_fraction": f, "lease_s": s[, "role": "host"|"guest"]}
    DELETE /v1/jobs/{job_id}/quota       full quota back

Writes need ``Authorization: Bearer TOKEN``: missing -> 401, wrong -> 403. Errors are
``{"error": message}`` with 400 (bad input, unsafe id), 404, 405, 408 (request not whole
in time), 409, 411, 413, 431, 503 (too many connections) or 500 (a cgroup write failed).

The server is the standard library's threading HTTP server with the limits it lacks added
here (a listen backlog for crowds, a deadline for the request head and one for the whole
request, an idle timeout, a cap on connections with a reserve for callers that presented
the token and a budget per peer, idle or slow untrusted connections closed to make room,
503 only when no room can be made, JSON errors, no tracebacks for clients that leave); a
benchmark against waitress and uvicorn decided it (testbed/bench_http_servers.py).
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from coscheduler import boundedfile, boundedjson
from coscheduler.model import InvalidInput, shown

from .agent import Conflict, NodeAgent, UnknownJob
from .state import validate_agent_job_id
from .cgroupfs import CgroupError, UnsafePath
from .metrics import exposition, make_registry

log = logging.getLogger("monitoring.api")

DEFAULT_PORT = 9137
MAX_BODY = 1 << 20
# a registration is a flat object; a few levels cover any future field
MAX_BODY_DEPTH = 16


DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_IDLE_TIMEOUT_S = 30.0
# a request head (request line and headers) is a few hundred bytes: it arrives at once
DEFAULT_HEADER_TIMEOUT_S = 2.0
# listen(2) backlog; the kernel caps it at net.core.somaxconn (4096 on current kernels). A
# crowd of 200 clients connecting at once overflowed the old 5 into connection resets.
LISTEN_BACKLOG = 1024
# How often an idle accept loop wakes to see whether to stop (shutdown() wakes it at once).
IDLE_POLL_S = 2.0


class HTTPError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status

    def __reduce__(self):
        return type(self), (self.status, str(self))


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


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON; anything that is not plain, bounded JSON (size, nesting:
    coscheduler/boundedjson.py) is a 400 (HTTPError), never an exception further in."""
    try:
        return boundedjson.loads(raw or b"null", max_bytes=MAX_BODY, max_depth=MAX_BODY_DEPTH,
                                 what="request body", unique_keys=True)
    except ValueError as e:
        raise HTTPError(400, str(e)) from None


def _framing_error(headers, version: str = "HTTP/1.1") -> str | None:
    """Why a request's framing is refused (None: it is not). Only one Content-Length and no
    Transfer-Encoding: a body framed two ways, or by two lengths, could be read one way here
    and another way by a proxy in front, and the rest taken as a second request (RFC 9112
    6.1, 6.3). A header line without a colon ends the standard library's header parsing
    early: the headers after it would be dropped without a word (RFC 9112 5.1: 400); a
    folded header (obs-fold) is read one way here and may be another way elsewhere (RFC
    9112 5.2: 400). An HTTP/1.1 request has exactly one Host (RFC 9112 3.2: else 400)."""
    if headers.defects or headers.get_payload():
        return "malformed header line (a header line without ':' right after its name)"
    folded = next((k for k, v in headers.items() if "\n" in v), None)
    if folded is not None:   # obs-fold (RFC 9112 5.2): a line that starts with a blank
        return f"header {shown(folded, 40)} is folded over two lines: send it on one line"
    hosts = headers.get_all("Host") or []
    if version == "HTTP/1.1" and len(hosts) != 1:
        return ("an HTTP/1.1 request needs a Host header" if not hosts
                else f"{len(hosts)} Host headers: send exactly one")
    if headers.get("Transfer-Encoding") is not None:
        return "Transfer-Encoding is not supported: send the body with a Content-Length"
    lengths = headers.get_all("Content-Length") or []
    if len(lengths) > 1:
        return f"{len(lengths)} Content-Length headers: send exactly one"
    return None


def _content_length(value: str | None) -> int:
    if value is None:
        raise HTTPError(411, "a JSON body with Content-Length is required")
    value = value.strip()
    if not value.isascii() or not value.isdigit():
        raise HTTPError(400, f"Content-Length must be a whole number of bytes, got {shown(value, 20)}")
    if len(value) > 12 or int(value) > MAX_BODY:
        raise HTTPError(413, f"body of {value[:20]} bytes is larger than {MAX_BODY}")
    return int(value)


class Api:
    """The routes, independent of the HTTP server that carries them: takes the method, the
    request target, a header getter and a body reader; returns (status, JSON-able or bytes).
    Every error becomes (status, {"error": message})."""

    def __init__(self, agent: NodeAgent, token: str | None):
        self.agent = agent
        self.token = token
        self.registry = make_registry(agent)

    def token_ok(self, header: str | None) -> bool:
        """Does this Authorization header carry the agent's token (any case of "Bearer")?"""
        if not self.token or not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            credentials.strip().encode(), self.token.encode())

    def _auth(self, header: str) -> None:
        if not self.token:
            raise HTTPError(403, "writes are disabled: the agent has no token configured")
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "bearer":  # the scheme is case-insensitive (RFC 7235 2.1)
            raise HTTPError(401, "missing 'Authorization: Bearer TOKEN' header")
        if not hmac.compare_digest(credentials.strip().encode(), self.token.encode()):
            raise HTTPError(403, "wrong token")

    def handle(self, method: str, target: str, header: Callable[[str], str | None],
               read_body: Callable[[int], bytes]) -> tuple[int, Any]:
        try:
            return self._route(method, target, header, read_body)
        except HTTPError as e:
            return e.status, {"error": str(e)}
        except (InvalidInput, UnsafePath) as e:
            return 400, {"error": str(e)}
        except UnknownJob as e:
            return 404, {"error": str(e)}
        except Conflict as e:
            return 409, {"error": str(e)}
        except CgroupError as e:
            log.error("%s %s: %s", method, target[:200], e)
            return 500, {"error": f"cgroup operation failed: {e}"}
        except (TimeoutError, ConnectionError):
            raise  # the connection's business (408 or close), not the request's
        except Exception as e:  # never kill the server thread; say what broke
            log.exception("%s %s failed", method, target[:200])
            return 500, {"error": f"internal error: {type(e).__name__}: {e}"}

    def _route(self, method: str, target: str, header: Callable[[str], str | None],
               read_body: Callable[[int], bytes]) -> tuple[int, Any]:
        agent = self.agent
        path = urlsplit(target).path
        parts = path.split("/")[1:]

        def auth() -> None:
            self._auth(header("Authorization") or "")

        def body() -> Any:
            return parse_json_body(read_body(_content_length(header("Content-Length"))))

        if method == "GET" and path == "/healthz":
            return 200, {"ok": not agent.closed}
        if method == "GET" and path == "/metrics":
            return 200, exposition(self.registry)
        if method == "GET" and path == "/v1/node":
            return 200, agent.node()
        if path in ("/healthz", "/metrics", "/v1/node"):
            raise HTTPError(405, f"{method} not allowed on {path}: it answers GET")
        if parts[:2] != ["v1", "jobs"]:
            raise HTTPError(404, f"no such endpoint: {method} {path[:200]}")
        rest = parts[2:]
        if rest in ([], [""]):
            if method == "GET":
                return 200, {"jobs": agent.jobs()}
            if method == "POST":
                auth()
                view = agent.register_job(body())
                return (201 if view.pop("created") else 200), view
            raise HTTPError(405, f"{method} not allowed on /v1/jobs")
        quota = len(rest) >= 2 and rest[-1] == "quota"
        job_id = validate_agent_job_id(_job_segment(rest[:-1] if quota else rest))
        if quota:
            if method == "PUT":
                auth()
                b = body()
                if not isinstance(b, dict) or set(b) - {"cpu_fraction", "lease_s", "role"} \
                        or "cpu_fraction" not in b or "lease_s" not in b:
                    raise InvalidInput('quota body must be {"cpu_fraction": f, "lease_s": s} and '
                                       f'optionally "role": "host"|"guest", got {str(b)[:200]}')
                return 200, agent.set_quota(job_id, b["cpu_fraction"], b["lease_s"], b.get("role"))
            if method == "DELETE":
                auth()
                return 200, agent.clear_quota(job_id)
            raise HTTPError(405, f"{method} not allowed on a job's quota")
        if method == "GET":
            return 200, agent.job(job_id)
        if method == "DELETE":
            auth()
            return 200, agent.unregister(job_id)
        raise HTTPError(405, f"{method} not allowed on a job")


def encode(status: int, body: Any) -> tuple[bytes, str]:
    """(payload, content type) of an answer."""
    if isinstance(body, bytes):
        return body, "text/plain; version=0.0.4; charset=utf-8"
    return (json.dumps(body) + "\n").encode(), "application/json"


class _DeadlineReader(io.RawIOBase):
    """The socket's read side with a deadline for the whole request, not per recv(): a
    client that sends one byte every few seconds (slowloris) cannot hold a thread longer
    than the deadline. ``deadline`` None waits at most ``idle_s`` for each read."""

    def __init__(self, sock: socket.socket, idle_s: float):
        self.sock = sock
        self.idle_s = idle_s
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        left = self.idle_s if self.deadline is None else self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not complete before the read deadline")
        self.sock.settimeout(left)
        return self.sock.recv_into(b)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # What an answer to an unparsable request line is sent as: the standard library's
    # default (HTTP/0.9) sends the body alone, without a status line or headers.
    default_request_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK hold the body back ~40 ms
    disable_nagle_algorithm = True
    server: "_Server"

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection, self.server.idle_timeout_s)
        self.rfile = io.BufferedReader(self._reader, 65536)
        self._conn = self.server.conn_of(self.request)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.client_address[0], *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's errors (malformed request line, headers too long or too
        many, unknown method) as JSON like every other answer."""
        self.close_connection = True
        self._send(code, {"error": message or explain or HTTPStatus(code).phrase})

    def _send(self, status: int, body: Any) -> None:
        data, ctype = encode(status, body)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="cosched-agent"')
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def handle(self) -> None:
        """Requests until the client closes, stays idle too long, or breaks the protocol. A
        client that goes away mid-answer is its own business: no traceback."""
        try:
            super().handle()
        except (ConnectionError, TimeoutError, OSError) as e:
            log.debug("%s: connection ended: %s", self.client_address[0], e)
            self.close_connection = True

    def handle_one_request(self) -> None:
        self._reader.deadline = None  # idle between requests: wait up to idle_timeout_s
        if self._conn is not None:
            self._conn.waiting = True  # idle or mid-head: may be evicted for a newcomer
        try:
            first = self.rfile.peek(1)
        except TimeoutError:
            self.close_connection = True  # idle keep-alive connection: close quietly
            return
        if not first:
            self.close_connection = True
            return
        # the head must arrive within header_timeout_s (a slow-headers client holds nothing
        # for long), the whole request within read_timeout_s
        started = time.monotonic()
        self._reader.deadline = started + min(self.server.header_timeout_s, self.server.read_timeout_s)
        head_done = False
        self.command = ""  # an answer sent before parse_request needs these
        self.request_version = "HTTP/1.1"
        self.requestline = ""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            for _ in range(4):   # empty lines before a request line are ignored (RFC 9112 2.2)
                if self.raw_requestline not in (b"\r\n", b"\n"):
                    break
                self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG, "request line longer than 64 KiB")
                return
            if not self.parse_request():
                return  # an error was sent
            head_done = True
            framing = _framing_error(self.headers, self.request_version)
            if framing is not None:
                self.send_error(HTTPStatus.BAD_REQUEST, framing)
                return
            self._reader.deadline = started + self.server.read_timeout_s
            if self._conn is not None:
                if not self._conn.trusted and self.server.api.token_ok(self.headers.get("Authorization")):
                    self.server.trust(self._conn)
                self._conn.waiting = False
            if self.command not in ("GET", "HEAD", "POST", "PUT", "DELETE"):
                self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, f"method {self.command[:20]!r} not allowed")
                return
            method = "GET" if self.command == "HEAD" else self.command
            declared = self.headers.get("Content-Length")
            read = 0

            def read_body(n: int) -> bytes:
                nonlocal read
                data = self.rfile.read(n)
                read += len(data)
                return data
            status, body = self.server.api.handle(method, self.path, self.headers.get, read_body)
            if status >= 400 or (declared is not None and declared.strip() != str(read)
                                 and not (declared.strip().isdigit() and int(declared) == read)):
                # A body left unread (a GET or DELETE sent one, or an error came first) would
                # be read as the next request: close rather than let the connection desync.
                self.close_connection = True
            self._reader.deadline = None
            self._send(status, body)
            self.wfile.flush()
        except TimeoutError:
            # a request begun but not finished in time
            self.close_connection = True
            limit = (self.server.read_timeout_s if head_done else
                     min(self.server.header_timeout_s, self.server.read_timeout_s))
            what = "request" if head_done else "request line and headers"
            try:
                self._send(408, {"error": f"{what} not complete within {limit:g} s"})
            except OSError:
                pass


@dataclass(eq=False)
class _Conn:
    """One open connection, as the server's admission sees it."""

    sock: socket.socket
    peer: str
    since: float
    trusted: bool = False   # has presented the agent's token
    waiting: bool = True    # idle, or its request head not complete yet
    evicted: bool = False


class _Server(ThreadingHTTPServer):
    """One thread per connection, at most ``max_connections`` at once, of which
    ``reserve`` are kept for connections that presented the agent's token (the controller).

    A connection that has not (yet) presented the token is untrusted. When a newcomer
    would pass the untrusted share, the whole cap, or its peer's budget
    (``max_per_peer`` untrusted connections from one address), the server frees a slot
    by closing an untrusted connection that is idle or still sending its request head:
    the oldest of the peer holding the most. Only when no slot can be freed does the
    newcomer get a 503 at once. So idle or slow connections from anyone on the node
    cannot lock the controller out: they are closed to make room, and the controller's
    kept-alive connections are never closed for them.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    block_on_close = False

    def __init__(self, addr, api: Api, *, max_connections: int, read_timeout_s: float,
                 idle_timeout_s: float, header_timeout_s: float, reserve: int, max_per_peer: int):
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        self.api = api
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.header_timeout_s = header_timeout_s
        self.reserve = reserve
        self.max_per_peer = max_per_peer
        self.refused = 0
        self.evicted = 0
        self._conns: dict[int, _Conn] = {}
        self._count_lock = threading.Lock()
        super().__init__(addr, _Handler)

    @property
    def active(self) -> int:
        return len(self._conns)

    def conn_of(self, sock: socket.socket) -> _Conn | None:
        return self._conns.get(id(sock))

    def trust(self, conn: _Conn) -> None:
        with self._count_lock:
            conn.trusted = True

    def _victim(self, untrusted: list[_Conn], peer: str | None) -> _Conn | None:
        """The connection to close for a newcomer: an untrusted one that is waiting, of
        ``peer`` when given, else of the peer holding the most; the oldest."""
        pool = [c for c in untrusted if c.waiting and (peer is None or c.peer == peer)]
        if not pool:
            return None
        if peer is None:
            counts: dict[str, int] = {}
            for c in pool:
                counts[c.peer] = counts.get(c.peer, 0) + 1
            top = max(counts.values())
            pool = [c for c in pool if counts[c.peer] == top]
        return min(pool, key=lambda c: c.since)

    def process_request(self, request, client_address) -> None:
        conn = _Conn(request, str(client_address[0]) if client_address else "?", time.monotonic())
        victim = None
        with self._count_lock:
            untrusted = [c for c in self._conns.values() if not c.trusted]
            from_peer = sum(1 for c in untrusted if c.peer == conn.peer)
            over_peer = from_peer >= self.max_per_peer
            if over_peer or len(untrusted) >= self.max_connections - self.reserve \
                    or len(self._conns) >= self.max_connections:
                victim = self._victim(untrusted, conn.peer if over_peer else None)
                if victim is None:
                    self.refused += 1
                    full = True
                else:
                    victim.evicted = True
                    del self._conns[id(victim.sock)]
                    self.evicted += 1
                    full = False
            else:
                full = False
            if not full:
                self._conns[id(request)] = conn
        if victim is not None:
            try:  # wakes its thread's recv() with end-of-file: it closes and ends
                victim.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if full:
            _refuse(request, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    def _forget(self, request) -> None:
        with self._count_lock:
            c = self._conns.get(id(request))
            if c is not None and c.sock is request:
                del self._conns[id(request)]

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def handle_error(self, request, client_address) -> None:
        # socketserver prints a traceback on stderr for anything that escapes a handler
        log.exception("connection from %s failed", client_address[0] if client_address else "?")


def _refuse(sock: socket.socket, cap: int) -> None:
    """Answer 503 without reading the request (the accept loop must not wait on a client)."""
    data = json.dumps({"error": f"too many connections (at most {cap}); retry later"}).encode() + b"\n"
    head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
    try:
        sock.setblocking(False)
        sock.send(head.encode() + data)
    except OSError:
        pass


class AgentServer:
    """Serve a NodeAgent over HTTP. ``listen`` defaults to 127.0.0.1:9137; port 0 picks a
    free port (see ``url``).

    Limits: ``max_connections`` open at once, ``reserve`` of them only for connections
    that presented the token, at most ``max_per_peer`` untrusted ones per address (see
    ``_Server``: idle or slow untrusted connections are closed to make room; 503 when none
    can be); a request head must arrive within ``header_timeout_s`` and the whole request
    within ``read_timeout_s`` of its first byte (else 408); a kept-alive connection idle for
    ``idle_timeout_s`` is closed.
    """

    def __init__(self, agent: NodeAgent, listen: str = f"127.0.0.1:{DEFAULT_PORT}",
                 token: str | None = None, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
                 reserve: int | None = None, max_per_peer: int | None = None):
        if not max_connections >= 1:
            raise InvalidInput(f"max_connections must be >= 1, got {max_connections!r}")
        for name, v in (("read_timeout_s", read_timeout_s), ("idle_timeout_s", idle_timeout_s),
                        ("header_timeout_s", header_timeout_s)):
            if not v > 0:
                raise InvalidInput(f"{name} must be > 0, got {v!r}")
        # an eighth of the slots for the controller by default; half for any one peer
        reserve = max(1, max_connections // 8) if reserve is None else reserve
        if not 0 <= reserve < max_connections:
            raise InvalidInput(f"reserve must be 0..{max_connections - 1}, got {reserve!r}")
        max_per_peer = max(1, max_connections // 2) if max_per_peer is None else max_per_peer
        if not max_per_peer >= 1:
            raise InvalidInput(f"max_per_peer must be >= 1, got {max_per_peer!r}")
        self.agent = agent
        self.api = Api(agent, token)
        self._httpd = _Server(parse_listen(listen), self.api, max_connections=max_connections,
                              read_timeout_s=read_timeout_s, idle_timeout_s=idle_timeout_s,
                              header_timeout_s=header_timeout_s, reserve=reserve,
                              max_per_peer=max_per_peer)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}"

    @property
    def active_connections(self) -> int:
        return self._httpd.active

    def serve_forever(self) -> None:
        # The accept loop wakes every poll interval only to see whether to stop; each wake
        # costs CPU on an idle node, so it is long, and shutdown() wakes the loop at once.
        self._httpd.serve_forever(poll_interval=IDLE_POLL_S)

    def _poke(self) -> None:
        """Connect to our own socket so that the accept loop's select() returns now."""
        host, port = self._httpd.server_address[:2]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        try:
            with socket.create_connection((host, port), timeout=0.2):
                pass
        except OSError:
            pass   # the loop still sees the stop flag within IDLE_POLL_S

    def start(self) -> "AgentServer":
        self._thread = threading.Thread(target=self.serve_forever, name="cosched-agent-http",
                                        daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            stopping = threading.Thread(target=self._httpd.shutdown, daemon=True)
            stopping.start()
            while stopping.is_alive():   # (the first poke may come before the stop flag)
                self._poke()
                stopping.join(0.05)
        elif self._thread is not None:
            self._httpd.shutdown()   # (its loop has ended: returns at once)
        # (never started: BaseServer.shutdown would wait forever for a loop that never ran)
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def read_token_file(path: str, *, follow: bool = True) -> str:
    """The token: the file's first non-empty line, stripped; a regular file of at most
    64 KiB, UTF-8, opened without blocking (``boundedfile.read_line_secret``);
    ``follow=False``: a symbolic link is refused. InvalidInput naming the file."""
    what = f"token file {path}"
    try:
        token = boundedfile.read_line_secret(path, what, follow=follow)
    except OSError as e:    # (not found)
        raise InvalidInput(f"{what}: {e.strerror or e}") from None
    if len(token) < 16:
        raise InvalidInput(f"{what}: the token must be at least 16 characters")
    return token
