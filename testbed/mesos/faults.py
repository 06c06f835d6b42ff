"""Fault injection on the emulated master, for tests (the admin API's Python side).

NOT part of Mesos: these are the emulator's own levers to make the documented failure
cases happen on demand (README.md, "Fault injection"): offers rescinded, heartbeats
stopped, a stream paused, ended or broken mid-record, malformed or unknown events, 5xx
answers, playing a non-leading master, odd HTTP chunking. (Losing an agent, which touches
agents and tasks, is ``Master.lose_agent``.) Mixed into ``Master``: it uses the master's
lock, frameworks, offers and event sending.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .stream import CHUNKING_MODES, Subscription, b64, mesos_id

if TYPE_CHECKING:  # pragma: no cover
    from .state import Framework


class FaultInjection:
    """Methods of ``Master`` that inject faults (see the module docstring)."""

    def rescind_offer(self, offer_id: str, refuse_seconds: float = 0.0) -> None:
        with self.lock:
            offer = self.offers.get(offer_id)
            if offer is None:
                raise KeyError(f"no outstanding offer {offer_id!r}")
            self._rescind(offer, why="rescinded by fault injection", refuse_s=refuse_seconds)

    def _framework(self, fid: str) -> "Framework":
        fw = self.frameworks.get(fid)
        if fw is None:
            raise KeyError(f"no framework {fid!r}; frameworks: {sorted(self.frameworks)}")
        return fw

    def _subs(self, fid: str | None) -> list[Subscription]:
        fws = [self._framework(fid)] if fid else list(self.frameworks.values())
        return [f.sub for f in fws if f.sub is not None]

    def set_heartbeats(self, enabled: bool, framework_id: str | None = None) -> None:
        with self.lock:
            if framework_id is None:
                self.heartbeats_default = enabled
            for sub in self._subs(framework_id):
                sub.heartbeats = enabled

    def pause_stream(self, framework_id: str, paused: bool = True) -> None:
        with self.lock:
            for sub in self._subs(framework_id):
                sub.pause() if paused else sub.resume()

    def close_stream(self, framework_id: str, abort: bool = False) -> None:
        """End a framework's subscription stream from the master's side (cleanly, or by
        dropping the connection); the framework is then disconnected."""
        with self.lock:
            for sub in self._subs(framework_id):
                sub.close(abort=abort)

    def inject(self, framework_id: str, kind: str, data: str | None = None) -> None:
        """Put a bad piece into a framework's stream: see README (Fault injection)."""
        with self.lock:
            subs = self._subs(framework_id)
            if not subs:
                raise KeyError(f"framework {framework_id!r} is not connected")
            sub = subs[0]
            if kind == "unknown_event":
                sub.send({"type": data or "EMULATOR_UNKNOWN_EVENT",
                          "emulator_unknown_event": {"note": "injected by the emulator"}})
            elif kind == "bad_json":
                sub.send_raw(b"%d\n" % 17 + b'{"type": "OFFERS"')
            elif kind == "bad_length":
                sub.send_raw(b"12x\n{\"type\":\"HEARTBEAT\"}")
            elif kind == "zero_length":
                sub.send_raw(b"0\n")
            elif kind == "not_an_event":
                sub.send_raw(b"%d\n%s" % (len(b"[1,2,3]"), b"[1,2,3]"))
            elif kind == "truncated":
                body = b'{"type":"HEARTBEAT"}'
                sub.send_raw(b"%d\n" % (len(body) + 100) + body)
                sub.close(abort=True)
            elif kind == "raw":
                sub.send_raw((data or "").encode())
            else:
                raise ValueError(f"unknown injection kind {kind!r}; known: unknown_event, bad_json, "
                                 "bad_length, zero_length, not_an_event, truncated, raw")

    def send_message(self, framework_id: str, agent_id: str, executor_id: str, data: bytes) -> None:
        """A MESSAGE event, as if an executor had sent ``data`` to the scheduler."""
        with self.lock:
            self._send(self._framework(framework_id), {"type": "MESSAGE", "message": {
                "agent_id": mesos_id(agent_id), "executor_id": mesos_id(executor_id), "data": b64(data)}})

    def send_event(self, framework_id: str, event: dict[str, Any]) -> None:
        """Any event, as given (e.g. INVERSE_OFFERS, which the emulator never makes)."""
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise ValueError("an event must be a JSON object with a string 'type'")
        with self.lock:
            fw = self._framework(framework_id)
            if not fw.connected:
                raise KeyError(f"framework {framework_id!r} is not connected")
            self._send(fw, event)

    def send_error(self, framework_id: str, message: str) -> None:
        with self.lock:
            self._send(self._framework(framework_id), {"type": "ERROR", "error": {"message": message}})

    def fail_calls(self, status: int | None, count: int = 1, body: str = "",
                   calls: frozenset[str] | None = None) -> None:
        """Answer the next ``count`` scheduler calls (SUBSCRIBE included) with ``status``;
        count -1: until cleared; status None clears. ``calls``: only calls of these types
        (e.g. SUBSCRIBE) meet the fault, so a retried ACKNOWLEDGE cannot take it first."""
        with self.lock:
            self._http_faults.clear()
            self._http_fault_forever = None
            if status is None:
                return
            if not 100 <= int(status) <= 599:
                raise ValueError(f"HTTP status {status!r} must be 100-599")
            text = body or f"fault injected by the emulator: HTTP {status}"
            fault = (int(status), text, calls)
            if count < 0:
                self._http_fault_forever = fault
            else:
                self._http_faults.extend([fault] * int(count))

    def take_http_fault(self, call_type: str | None = None) -> tuple[int, str] | None:
        """The fault this call meets, if any. ``call_type`` None: the call is not parsed
        yet, so only faults for every call type apply."""
        def applies(fault: tuple[int, str, frozenset[str] | None]) -> bool:
            return fault[2] is None if call_type is None else (fault[2] is None or call_type in fault[2])

        with self.lock:
            forever = self._http_fault_forever
            if forever is not None:
                return forever[:2] if applies(forever) else None
            if self._http_faults and applies(self._http_faults[0]):
                return self._http_faults.popleft()[:2]
            return None

    def set_redirect(self, location: str | None) -> None:
        """Act as a non-leading master: answer every scheduler call with 307 and this
        ``Location`` (None: lead again)."""
        with self.lock:
            self.redirect_location = location

    def set_chunking(self, mode: str) -> None:
        if mode not in CHUNKING_MODES:
            raise ValueError(f"chunking mode {mode!r}; known: {', '.join(CHUNKING_MODES)}")
        self.chunking = mode
