"""The subscription stream: events for one subscribed scheduler, in RecordIO.

Mesos' RecordIO (docs/recordio.md): every record is its length in bytes as decimal digits,
a line feed, then exactly that many bytes of data (here one JSON-encoded ``Event``). The
length is never 0. The HTTP chunk boundaries carry no meaning; ``chunking`` lets tests put
records across chunks the way a proxy may.

A ``Subscription`` is a queue between the master (which puts events) and the HTTP thread
that writes the stream. Faults for tests (a truncated or malformed frame, an unknown event,
a paused stream, no heartbeats) are put in the same queue so that they arrive in order.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
from typing import Any

CHUNKING_MODES = ("record", "split", "bytes", "coalesce")


def mesos_id(value: str) -> dict[str, str]:
    """An ID message (FrameworkID, AgentID, TaskID, ...) in JSON: ``{"value": ...}``."""
    return {"value": value}


def b64(data: bytes) -> str:
    """``bytes`` fields travel as Base64 in JSON."""
    return base64.b64encode(data).decode()


def encode_event(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def record(data: bytes) -> bytes:
    """One RecordIO record: ``<length>\\n<data>``."""
    return b"%d\n" % len(data) + data


class Item:
    """A queued piece of the stream."""

    __slots__ = ("kind", "data")

    def __init__(self, kind: str, data: bytes = b""):
        self.kind = kind      # "record" | "raw" | "close" | "abort"
        self.data = data


class Subscription:
    """One subscription connection of one framework (one ``Mesos-Stream-Id``)."""

    def __init__(self, stream_id: str, heartbeat_interval_s: float):
        self.stream_id = stream_id
        self.framework_id: str | None = None
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeats = True
        self.closed = False          # no more events may be queued
        self.finished = threading.Event()  # the HTTP side has stopped writing
        self._q: "queue.SimpleQueue[Item]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._paused = False
        self._held: list[Item] = []
        self.events_sent = 0

    # -- master side ----------------------------------------------------------------------
    def send(self, event: dict[str, Any]) -> None:
        self._put(Item("record", encode_event(event)))

    def send_raw(self, data: bytes) -> None:
        """Bytes written to the stream as they are (fault injection)."""
        self._put(Item("raw", data))

    def close(self, abort: bool = False) -> None:
        """End the stream: cleanly (the terminating chunk) or by dropping the connection."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            held, self._held, self._paused = self._held, [], False
        for item in held:
            self._q.put(item)
        self._q.put(Item("abort" if abort else "close"))

    def pause(self) -> None:
        """Hold every event (and heartbeat) back, as a network partition would."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            held, self._held = self._held, []
        for item in held:
            self._q.put(item)

    @property
    def paused(self) -> bool:
        return self._paused

    def _put(self, item: Item) -> None:
        with self._lock:
            if self.closed:
                return
            if self._paused:
                self._held.append(item)
                return
        self._q.put(item)

    # -- HTTP side ------------------------------------------------------------------------
    def get(self, timeout: float) -> Item | None:
        try:
            return self._q.get(timeout=timeout)
        except queue.Empty:
            return None


def chunks(data: bytes, mode: str) -> list[bytes]:
    """How one record is cut into HTTP chunks."""
    if mode == "split" and len(data) > 1:
        cut = max(1, len(data) // 2)
        return [data[:cut], data[cut:]]
    if mode == "bytes":
        return [data[i:i + 1] for i in range(len(data))]
    return [data]
