"""HTTP for the emulated master: the scheduler API and, apart from it, the admin API.

``POST /api/v1/scheduler`` follows docs/scheduler-http-api.md:

* 307 Temporary Redirect with ``Location`` while the emulator plays a non-leading master;
* 405 for another method; 400 when ``Content-Type`` is missing; 415 Unsupported Media Type
  for anything but ``application/json`` (the emulator does not speak
  ``application/x-protobuf``); for SUBSCRIBE, 406 Not Acceptable when ``Accept`` allows
  neither JSON nor anything; 400 for a body that is not JSON or not a valid Call, and for a
  SUBSCRIBE that carries a ``Mesos-Stream-Id``; 501 for a Call of type UNKNOWN;
* SUBSCRIBE: "200 OK" with ``Transfer-Encoding: chunked``, ``Mesos-Stream-Id`` and a RecordIO
  stream of events (HEARTBEAT every ``heartbeat_interval_seconds``);
* other calls: 202 Accepted (200 for UPDATE_FRAMEWORK), 400 when ``Mesos-Stream-Id`` is
  missing or wrong, 403 when the framework is unknown (a call before SUBSCRIBE) or not
  subscribed.

Errors have a ``text/plain`` body saying what was wrong. ``GET /health`` answers 200.

``/admin/...`` is the emulator's own API for tests (fault injection and state), NOT part of
Mesos: reads are open, writes need ``Authorization: Bearer TOKEN``. See README.md.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from coscheduler import boundedjson

from .calls import BadCall, parse_call
from .master import CallError, Master
from .stream import Item, Subscription, chunks, record

log = logging.getLogger("testbed.mesos.http")

SCHEDULER_PATH = "/api/v1/scheduler"
MAX_BODY = 16 << 20
_STREAM_POLL_S = 0.05


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}

    def __reduce__(self):
        return type(self), (self.status, str(self), self.headers)


def _media_type(value: str | None) -> str | None:
    return value.split(";", 1)[0].strip().lower() if value else None


def accepts_json(accept: str | None) -> bool:
    """Does an ``Accept`` header allow application/json? (No header: anything goes.)"""
    if not accept or not accept.strip():
        return True
    for part in accept.split(","):
        bits = [b.strip() for b in part.split(";")]
        mt = bits[0].lower()
        q = 1.0
        for b in bits[1:]:
            if b.lower().startswith("q="):
                try:
                    q = float(b[2:])
                except ValueError:
                    q = 0.0
        if q > 0 and mt in ("application/json", "application/*", "*/*"):
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "_Server"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.client_address[0], *args)

    # -- plumbing -------------------------------------------------------------------------
    def _reply(self, status: int, body: str | bytes = b"", content_type: str = "text/plain; charset=utf-8",
               headers: dict[str, str] | None = None) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if data or status not in (202, 204, 307):
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip() or b"x", 16)
                except ValueError:
                    raise HTTPFailure(400, "malformed chunked request body") from None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise HTTPFailure(413, f"request body larger than {MAX_BODY} bytes")
                out += self.rfile.read(size)
                self.rfile.readline(16)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        if not length.strip().isdigit():
            raise HTTPFailure(400, f"malformed Content-Length {length!r}")
        n = int(length)
        if n > MAX_BODY:
            raise HTTPFailure(413, f"request body of {n} bytes is larger than {MAX_BODY}")
        return self.rfile.read(n)

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        try:
            if path == SCHEDULER_PATH:
                self._scheduler()
            elif path == "/health" and self.command in ("GET", "HEAD"):
                self._reply(200)
            elif path.startswith("/admin/") or path == "/admin":
                self._admin(path)
            else:
                raise HTTPFailure(404, f"no such endpoint: {self.command} {path}")
        except HTTPFailure as e:
            self.close_connection = True
            self._reply(e.status, str(e), headers=e.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # the server thread never dies; say what broke
            log.exception("%s %s failed", self.command, self.path)
            self.close_connection = True
            try:
                self._reply(500, f"internal error: {type(e).__name__}: {e}")
            except OSError:
                pass

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _dispatch

    # -- scheduler API --------------------------------------------------------------------
    def _scheduler(self) -> None:
        master: Master = self.server.master
        fault = master.take_http_fault()
        if fault is not None:
            self._read_body_quietly()
            raise HTTPFailure(fault[0], fault[1])
        if master.redirect_location is not None:
            self._read_body_quietly()
            raise HTTPFailure(307, f"not the leading master; see {master.redirect_location}",
                              {"Location": master.redirect_location})
        if self.command != "POST":
            raise HTTPFailure(405, f"Expecting one of {{ 'POST' }}, but received '{self.command}'",
                              {"Allow": "POST"})
        body = self._read_body()
        ctype = _media_type(self.headers.get("Content-Type"))
        if ctype is None:
            raise HTTPFailure(400, "Expecting 'Content-Type' to be present")
        if ctype == "application/x-protobuf":
            raise HTTPFailure(415, "This emulated master speaks JSON only: send "
                                   "'Content-Type: application/json' (application/x-protobuf is "
                                   "not supported by the emulator)")
        if ctype != "application/json":
            raise HTTPFailure(415, f"Expecting 'Content-Type' of application/json, got {ctype!r}")
        try:
            call = parse_call(body)
        except BadCall as e:
            raise HTTPFailure(400, str(e)) from None
        fault = master.take_http_fault(call["type"])      # a fault aimed at this call type
        if fault is not None:
            raise HTTPFailure(fault[0], fault[1])
        stream_id = self.headers.get("Mesos-Stream-Id")
        if call["type"] == "SUBSCRIBE":
            if not accepts_json(self.headers.get("Accept")):
                raise HTTPFailure(406, "Expecting 'Accept' to allow 'application/json' (the "
                                       "emulator does not send application/x-protobuf)")
            if stream_id is not None:
                raise HTTPFailure(400, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
            self._stream(master.subscribe(call))
            return
        if call["type"] == "UNKNOWN":
            raise HTTPFailure(501, "Received an UNKNOWN call")
        try:
            status, text = master.handle(call, stream_id)
        except CallError as e:
            raise HTTPFailure(e.status, str(e)) from None
        self._reply(status, text)

    def _read_body_quietly(self) -> None:
        try:
            self._read_body()
        except HTTPFailure:
            pass

    def _stream(self, sub: Subscription) -> None:
        """Write the subscription's events until it ends or the client goes away."""
        master: Master = self.server.master
        self.close_connection = True
        sock = self.connection
        next_beat = time.monotonic() + sub.heartbeat_interval_s
        aborted = False
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "keep-alive")
            self.send_header("Mesos-Stream-Id", sub.stream_id)
            self.end_headers()
            self.wfile.flush()
            while True:
                item = sub.get(_STREAM_POLL_S)
                if item is None:
                    if self._client_gone(sock):
                        log.info("framework %s closed its stream", sub.framework_id)
                        break
                    now = time.monotonic()
                    if now >= next_beat:
                        next_beat = now + sub.heartbeat_interval_s
                        if sub.heartbeats and not sub.paused and not sub.closed:
                            self._write_records([record(b'{"type":"HEARTBEAT"}')], master.chunking)
                    continue
                if item.kind == "close":
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                    break
                if item.kind == "abort":
                    aborted = True
                    break
                batch = [item]
                if master.chunking == "coalesce":  # several records in one chunk
                    while True:
                        nxt = sub.get(0)
                        if nxt is None:
                            break
                        if nxt.kind not in ("record", "raw"):
                            sub._q.put(nxt)  # keep the end of the stream for the next turn
                            break
                        batch.append(nxt)
                self._write_records([_bytes(i) for i in batch], master.chunking)
                sub.events_sent += len(batch)
        except (BrokenPipeError, ConnectionResetError, OSError) as e:
            log.info("stream of framework %s broke: %s", sub.framework_id, e)
        finally:
            if aborted:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            sub.closed = True
            sub.finished.set()
            master.stream_ended(sub)

    def _write_records(self, datas: list[bytes], mode: str) -> None:
        out = bytearray()
        if mode == "coalesce":
            data = b"".join(datas)
            out += b"%x\r\n%s\r\n" % (len(data), data)
        else:
            for data in datas:
                for c in chunks(data, mode):
                    out += b"%x\r\n%s\r\n" % (len(c), c)
                    if mode == "bytes":
                        self.wfile.write(bytes(out))
                        self.wfile.flush()
                        out.clear()
        if out:
            self.wfile.write(bytes(out))
        self.wfile.flush()

    @staticmethod
    def _client_gone(sock: socket.socket) -> bool:
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # -- admin API ------------------------------------------------------------------------
    def _auth(self) -> None:
        token = self.server.token
        header = self.headers.get("Authorization", "")
        if not header.startswith("Bearer "):
            raise HTTPFailure(401, "missing 'Authorization: Bearer TOKEN' header (the token is "
                                   "in the emulator's admin_token_file)",
                              {"WWW-Authenticate": 'Bearer realm="mesos-emulator-admin"'})
        if not token or not hmac.compare_digest(header[7:].strip().encode(), token.encode()):
            raise HTTPFailure(403, "wrong admin token")

    def _json_body(self) -> dict[str, Any]:
        raw = self._read_body()
        if not raw.strip():
            return {}
        try:
            body = boundedjson.loads(raw, what="admin body")
        except ValueError as e:
            raise HTTPFailure(400, f"admin body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise HTTPFailure(400, "admin body must be a JSON object")
        return body

    def _admin(self, path: str) -> None:
        master: Master = self.server.master
        parts = [unquote(p) for p in path.split("/")[2:]]
        if self.command == "GET" and parts == ["state"]:
            self._reply(200, json.dumps(master.state()), "application/json")
            return
        if self.command != "POST":
            raise HTTPFailure(405 if parts and parts[0] in _ADMIN_WRITES else 404,
                              f"no such admin endpoint: {self.command} {path}")
        self._auth()
        body = self._json_body()
        try:
            result = _admin_write(master, parts, body)
        except KeyError as e:
            raise HTTPFailure(404, str(e.args[0]) if e.args else "not found") from None
        except (ValueError, TypeError) as e:
            raise HTTPFailure(400, str(e)) from None
        self._reply(200, json.dumps(result if result is not None else {"ok": True}), "application/json")


_ADMIN_WRITES = {"agents", "offers", "frameworks", "heartbeats", "http-faults", "leader", "chunking"}


def _need(body: dict[str, Any], key: str, kind: type | tuple) -> Any:
    if key not in body:
        raise ValueError(f"admin body needs '{key}'")
    v = body[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise ValueError(f"'{key}' has the wrong type: {v!r}")
    return v


def _admin_write(master: Master, parts: list[str], body: dict[str, Any]) -> Any:
    """POST /admin/...: the fault-injection and setup actions (documented in README.md)."""
    from .master import AgentSpec

    match parts:
        case ["agents"]:
            spec = AgentSpec(cpus=float(body.get("cpus", 4.0)), mem_mb=float(body.get("mem", 4096.0)),
                             disk_mb=body.get("disk"), hostname=body.get("hostname"))
            if not spec.cpus > 0 or not spec.mem_mb > 0:
                raise ValueError("cpus and mem must be > 0")
            return {"agent_id": master.add_agent(spec)}
        case ["agents", agent_id, "lose"]:
            return master.lose_agent(agent_id, body.get("reason") or "agent lost (fault injected)")
        case ["offers", offer_id, "rescind"]:
            master.rescind_offer(offer_id, float(body.get("refuse_seconds", 0.0)))
            return None
        case ["heartbeats"]:
            master.set_heartbeats(bool(_need(body, "enabled", bool)), body.get("framework_id"))
            return None
        case ["frameworks", fid, "inject"]:
            master.inject(fid, _need(body, "kind", str), body.get("data"))
            return None
        case ["frameworks", fid, "close"]:
            master.close_stream(fid, abort=bool(body.get("abort", False)))
            return None
        case ["frameworks", fid, "pause"]:
            master.pause_stream(fid, True)
            return None
        case ["frameworks", fid, "resume"]:
            master.pause_stream(fid, False)
            return None
        case ["frameworks", fid, "message"]:
            data = base64.b64decode(_need(body, "data", str), validate=True)
            master.send_message(fid, _need(body, "agent_id", str), _need(body, "executor_id", str), data)
            return None
        case ["frameworks", fid, "event"]:
            master.send_event(fid, _need(body, "event", dict))
            return None
        case ["frameworks", fid, "error"]:
            master.send_error(fid, _need(body, "message", str))
            return None
        case ["http-faults"]:
            status = body.get("status")
            calls = body.get("calls")
            if calls is not None and (not isinstance(calls, list) or not calls
                                      or not all(isinstance(c, str) and c for c in calls)):
                raise ValueError("'calls' must be a non-empty list of call types, e.g. [\"SUBSCRIBE\"]")
            master.fail_calls(None if status is None else int(status), int(body.get("count", 1)),
                              str(body.get("body", "")), None if calls is None else frozenset(calls))
            return None
        case ["leader"]:
            loc = body.get("redirect_to")
            if loc is not None and not isinstance(loc, str):
                raise ValueError("'redirect_to' must be a string or null")
            master.set_redirect(loc)
            return None
        case ["chunking"]:
            master.set_chunking(_need(body, "mode", str))
            return None
    raise KeyError(f"no such admin endpoint: POST /admin/{'/'.join(parts)}")


def _bytes(item: Item) -> bytes:
    return record(item.data) if item.kind == "record" else item.data


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], master: Master, token: str | None):
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, _Handler)
        self.master = master
        self.token = token


class MasterServer:
    """Serve a Master over HTTP on ``listen`` (host, port); port 0 picks a free port."""

    def __init__(self, master: Master, listen: tuple[str, int], token: str | None):
        self.master = master
        self._httpd = _Server(listen, master, token)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return host, port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> "MasterServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="mesos-emu-http", daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        if self._thread is not None:   # serve_forever never ran: nothing to stop
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
