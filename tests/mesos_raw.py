"""A plain streaming HTTP client for testing the emulated Mesos master (testbed/mesos/).

Deliberately NOT the framework's driver: the standard library's http.client, a RecordIO
parser written here from docs/recordio.md, and calls built by hand, so that the emulator's
tests check it against the documented protocol and nothing else.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from typing import Any, Callable

JSON = "application/json"


class RawStream:
    """A SUBSCRIBE connection on a bare socket: status, headers, then the chunked body
    decoded by hand (http.client cannot go on reading after a read timed out)."""

    def __init__(self, addr: tuple[str, int], body: dict[str, Any] | bytes,
                 headers: dict[str, str] | None = None, timeout: float = 10.0):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"Host": f"{addr[0]}:{addr[1]}", "Content-Type": JSON, "Accept": JSON,
                "Content-Length": str(len(data))}
        hdrs.update(headers or {})
        self.sock = socket.create_connection(addr, timeout=timeout)
        head = "POST /api/v1/scheduler HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
        self.sock.sendall(head.encode() + data)
        self._in = b""          # bytes read from the socket, not yet decoded
        self.eof = False
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self._in:
            if not self._recv(deadline):
                raise AssertionError(f"no response head: {self._in!r}")
        head_b, self._in = self._in.split(b"\r\n\r\n", 1)
        lines = head_b.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.stream_id = self.headers.get("mesos-stream-id")
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.buf = b""          # decoded body bytes not yet parsed as records
        self.raw = b""          # every decoded byte of the body, in order
        self.chunk_sizes: list[int] = []
        self.events: list[dict[str, Any]] = []
        self.framework_id: dict[str, str] | None = None
        self.ended_cleanly = False
        self.pending: list[dict[str, Any]] = []
        self.on_receive: Callable[[dict[str, Any]], None] | None = None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def body_text(self) -> str:
        """For an error answer: the body (Content-Length)."""
        n = int(self.headers.get("content-length", "0"))
        deadline = time.monotonic() + 5
        while len(self._in) < n and self._recv(deadline):
            pass
        return self._in[:n].decode()

    def _recv(self, deadline: float) -> bool:
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([self.sock], [], [], left)
        if not r:
            return False
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.eof = True
            return False
        self._in += data
        return True

    def _fill(self, deadline: float) -> bool:
        """Decode one more chunk into ``buf``; False on timeout or end of stream."""
        while True:
            if b"\r\n" in self._in:
                size_line, rest = self._in.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    self.ended_cleanly = True
                    self.eof = True
                    return False
                if len(rest) >= size + 2:
                    self.chunk_sizes.append(size)
                    self.buf += rest[:size]
                    self.raw += rest[:size]
                    self._in = rest[size + 2:]
                    return True
            if not self._recv(deadline):
                return False

    def next_record(self, timeout: float = 5.0) -> bytes | None:
        """The next RecordIO record's bytes (None on timeout or end of stream)."""
        deadline = time.monotonic() + timeout
        while True:
            if b"\n" in self.buf:
                head, rest = self.buf.split(b"\n", 1)
                n = int(head)
                if len(rest) >= n:
                    self.buf = rest[n:]
                    return rest[:n]
            if not self._fill(deadline):
                return None

    def _read_event(self, timeout: float) -> dict[str, Any] | None:
        rec = self.next_record(timeout)
        if rec is None:
            return None
        ev = json.loads(rec)
        self.events.append(ev)
        if ev.get("type") == "SUBSCRIBED":
            self.framework_id = ev["subscribed"]["framework_id"]
        if self.on_receive is not None:
            self.on_receive(ev)
        return ev

    def next_event(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The oldest event not yet taken (by this or by wait_for)."""
        if self.pending:
            return self.pending.pop(0)
        return self._read_event(timeout)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10.0) -> dict[str, Any]:
        """The first event not yet taken that matches; others stay for later waits."""
        for i, ev in enumerate(self.pending):
            if pred(ev):
                return self.pending.pop(i)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = self._read_event(deadline - time.monotonic())
            if ev is None:
                if self.eof:
                    raise AssertionError(f"stream ended before the event came; saw {self.types()}")
                continue
            if pred(ev):
                return ev
            self.pending.append(ev)
        raise AssertionError(f"no matching event within {timeout}s; saw {self.types()}")

    def read_until_end(self, timeout: float = 3.0) -> bool:
        """Read (and keep) events until the stream ends; True if it ended in time."""
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            ev = self._read_event(deadline - time.monotonic())
            if ev is not None:
                self.pending.append(ev)
        return self.eof

    def new_events(self, duration: float) -> list[dict[str, Any]]:
        """Forget the backlog; the events that arrive within ``duration`` seconds."""
        self.pending.clear()
        out = []
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            ev = self._read_event(deadline - time.monotonic())
            if ev is not None:
                out.append(ev)
            elif self.eof:
                break
        return out

    def types(self) -> list[str]:
        return [e.get("type") for e in self.events]

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def post(addr: tuple[str, int], body: dict[str, Any] | bytes | None, *, stream_id: str | None = None,
         content_type: str | None = JSON, method: str = "POST", path: str = "/api/v1/scheduler",
         headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """One call on its own connection: (status, body text, headers)."""
    conn = http.client.HTTPConnection(*addr, timeout=10)
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    hdrs = dict(headers or {})
    if content_type:
        hdrs["Content-Type"] = content_type
    if stream_id:
        hdrs["Mesos-Stream-Id"] = stream_id
    conn.request(method, path, data, hdrs)
    r = conn.getresponse()
    text = r.read().decode()
    out = (r.status, text, {k: v for k, v in r.getheaders()})
    conn.close()
    return out


class RawScheduler:
    """A subscribed framework driven by hand: subscribe, call, acknowledge."""

    def __init__(self, addr: tuple[str, int], name: str = "raw-test", *,
                 framework_id: str | None = None, failover_timeout: float | None = None,
                 capabilities: list[str] | None = None, extra: dict[str, Any] | None = None,
                 auto_ack: bool = True):
        self.addr = addr
        self.auto_ack = auto_ack
        info: dict[str, Any] = {"user": "root", "name": name}
        if framework_id:
            info["id"] = {"value": framework_id}
        if failover_timeout is not None:
            info["failover_timeout"] = failover_timeout
        if capabilities:
            info["capabilities"] = [{"type": c} for c in capabilities]
        info.update(extra or {})
        body: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {"framework_info": info}}
        if framework_id:
            body["framework_id"] = {"value": framework_id}
        self.stream = RawStream(addr, body)
        assert self.stream.status == 200, self.stream.body_text()
        first = self.stream.next_event()
        assert first is not None and first["type"] == "SUBSCRIBED", first
        self.framework_id = first["subscribed"]["framework_id"]
        self.subscribed = first["subscribed"]
        self.acked: list[str] = []
        self.stream.on_receive = self._received

    def _received(self, ev: dict[str, Any]) -> None:
        if self.auto_ack and ev.get("type") == "UPDATE" and ev["update"]["status"].get("uuid"):
            self.ack(ev)

    @property
    def fid(self) -> str:
        return self.framework_id["value"]

    def call(self, ctype: str, body: dict[str, Any] | None = None, *,
             stream_id: str | None = "auto") -> tuple[int, str]:
        call: dict[str, Any] = {"framework_id": self.framework_id, "type": ctype}
        if body is not None:
            call[ctype.lower()] = body
        sid = self.stream.stream_id if stream_id == "auto" else stream_id
        status, text, _ = post(self.addr, call, stream_id=sid)
        return status, text

    def ack(self, ev: dict[str, Any]) -> None:
        st = ev["update"]["status"]
        if st.get("uuid"):
            status, text = self.call("ACKNOWLEDGE", {"agent_id": st["agent_id"],
                                                     "task_id": st["task_id"], "uuid": st["uuid"]})
            assert status == 202, (status, text)
            self.acked.append(st["uuid"])

    def next_offers(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        ev = self.stream.wait_for(lambda e: e["type"] == "OFFERS", timeout)
        return ev["offers"]["offers"]

    def launch(self, offer: dict[str, Any], tasks: list[dict[str, Any]],
               refuse_seconds: float | None = None) -> None:
        accept: dict[str, Any] = {"offer_ids": [offer["id"]],
                                  "operations": [{"type": "LAUNCH", "launch": {"task_infos": tasks}}]}
        if refuse_seconds is not None:
            accept["filters"] = {"refuse_seconds": refuse_seconds}
        status, text = self.call("ACCEPT", accept)
        assert status == 202, (status, text)

    def update_for(self, task_id: str, state: str, timeout: float = 10.0) -> dict:
        """Wait for ``state`` of ``task_id`` (reliable updates are acknowledged as they come
        unless ``auto_ack`` is off)."""
        return self.stream.wait_for(
            lambda e: e["type"] == "UPDATE" and e["update"]["status"]["task_id"]["value"] == task_id
            and e["update"]["status"]["state"] == state, timeout)

    def close(self) -> None:
        self.stream.close()


def task_info(task_id: str, agent_id: dict[str, str], command: str, *, cpus: float = 0.5,
              mem: float = 32.0, **extra: Any) -> dict[str, Any]:
    info = {"name": task_id, "task_id": {"value": task_id}, "agent_id": agent_id,
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}}],
            "command": {"shell": True, "value": command}}
    info.update(extra)
    return info


def scalar(offer: dict[str, Any], name: str) -> float:
    return sum(r["scalar"]["value"] for r in offer["resources"] if r["name"] == name)
