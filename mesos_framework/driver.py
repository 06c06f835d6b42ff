"""A Mesos v1 scheduler HTTP API driver (docs/scheduler-http-api.md), pymesos-compatible.

``MesosSchedulerDriver(scheduler, framework, master)`` has pymesos's constructor and methods
(launchTasks, acceptOffers, declineOffer, killTask, reconcileTasks, reviveOffers, ...), and
calls a pymesos-style ``Scheduler`` (registered, reregistered, disconnected, resourceOffers,
offerRescinded, statusUpdate, frameworkMessage, slaveLost, executorLost, error, ...) with
the master's JSON messages as plain dicts, as pymesos does. So a scheduler written for
pymesos runs on this driver unchanged (pymesos itself does not install on Python >= 3.11).

How it talks to the master:

- SUBSCRIBE is a POST whose answer is a chunked stream of RecordIO-framed JSON events
  (``recordio``), read incrementally on one thread. Its ``Mesos-Stream-Id`` header goes on
  every later call, which travel on other connections (a urllib3 pool).
- A 307 answer names the leading master in ``Location``: the driver follows it (SUBSCRIBE
  and calls alike) and keeps talking to that master.
- Heartbeats: SUBSCRIBED carries ``heartbeat_interval_seconds``; when no event at all has
  arrived for ``heartbeat_misses`` intervals (the proto suggests 5), the stream is presumed
  dead (a network partition), closed, and SUBSCRIBE is sent again.
- Any end of the stream (closed, malformed RecordIO, missed heartbeats, 5xx) calls
  ``disconnected`` and resubscribes with exponential backoff (capped, as the doc advises at
  15 s) with the framework id it was given, so tasks survive while ``failover_timeout`` runs.
- An unknown event type or an unreadable event (not JSON, larger than ``MAX_EVENT_BYTES``,
  nested deeper than ``MAX_EVENT_DEPTH``: coscheduler/boundedjson.py) is logged, counted in
  ``bad_events`` and skipped; an exception in a scheduler callback is logged and the stream
  goes on.
- If the subscription thread itself dies of something unforeseen, the driver does not
  pretend to be alive: it logs at CRITICAL, aborts (``status`` DRIVER_ABORTED, ``fatal``
  says why) and calls the scheduler's ``error``, which ends the framework's run loop.

Why urllib3: the doc requires a client that hands over a chunked response as it arrives
(``HTTPResponse.read_chunked``), the driver needs per-call timeouts, kept-alive pools for
calls, redirects it can refuse to follow (a 307 must change the master for every later
call, not only for one request), and a way to cut a stream from another thread
(``HTTPResponse.shutdown``, for the heartbeat watchdog). urllib3 does all of these, is the
most used HTTP client in Python (requests is built on it) and is already installed here.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

import urllib3

from coscheduler import boundedjson

from . import messages as msg
from .recordio import RecordIODecoder, RecordIOError
from .driver_calls import PymesosCalls

log = logging.getLogger("mesos_framework.driver")

API_PATH = "/api/v1/scheduler"
DAY = 86400.0

# mesos.proto Status (what join()/run() return)
DRIVER_NOT_STARTED, DRIVER_RUNNING, DRIVER_ABORTED, DRIVER_STOPPED = 1, 2, 3, 4
# One event: an OFFERS event of a large cluster is a few MB; Mesos's own protobuf nesting
# stays under 20 levels.
MAX_EVENT_BYTES = 64 << 20
MAX_EVENT_DEPTH = 64
# The event types counted by name in ``events`` (the scheduler API's list).
_EVENT_TYPES = frozenset(msg.EVENT_TYPES)
# The heartbeat watcher's sleep between looks: at least this (while connecting, or just
# after the limit passed), at most that (the interval may change when SUBSCRIBED arrives).
WATCH_MIN_S = 0.05
WATCH_MAX_S = 1.0
# heartbeat_interval_seconds is the master's word: clamped to these. 1e-9 s made the
# watchdog cut every stream at once (38 SUBSCRIBEs in 3 s); an hour is already far past any
# master's setting (Mesos' default is 15 s).
HEARTBEAT_MIN_S = 1.0
HEARTBEAT_MAX_S = 3600.0


class MesosCallError(RuntimeError):
    """A call was answered with an error status (or could not be sent)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class NotSubscribed(MesosCallError):
    """A call was attempted while no subscription is open (the master would answer 403)."""


def parse_master(uri: str) -> str:
    """``host:port``, ``http://host:port`` or ``https://...`` -> ``scheme://host:port``.
    ZooKeeper URLs are refused with a clear message (no leader detection here)."""
    u = uri.strip()
    if u.startswith(("zk://", "zoo://")):
        raise ValueError(f"master {uri!r}: ZooKeeper master detection is not supported; give "
                         "the URL of any master (the driver follows 307 redirects to the leader)")
    if "://" not in u:
        u = "http://" + u
    parts = urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"master {uri!r} is not an http(s)://HOST[:PORT] address")
    try:
        port = parts.port or 5050
    except ValueError:
        raise ValueError(f"master {uri!r} has an invalid port") from None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def leader_from_location(location: str, current: str) -> str:
    """The master a 307's ``Location`` points at. Real masters answer ``//host:port/path``;
    the doc's example shows a bare ``host:port``; an absolute URL is taken as it is."""
    loc = location.strip()
    scheme = urlsplit(current).scheme or "http"
    if loc.startswith("//"):
        loc = f"{scheme}:{loc}"
    elif "://" not in loc:
        loc = f"{scheme}://{loc}"
    return parse_master(loc)


def backoff_delays(base: float, cap: float, rng: random.Random | None = None) -> Iterable[float]:
    """Exponential backoff with jitter: base, 2 base, 4 base ... capped at ``cap``, each
    drawn from its upper half so that many frameworks do not reconnect in step."""
    rng = rng or random.Random()
    d = base
    while True:
        yield min(cap, d) * rng.uniform(0.5, 1.0)
        d = min(cap, d * 2)


class MesosSchedulerDriver(PymesosCalls):
    """See the module docstring. ``framework`` is a FrameworkInfo dict (pymesos style)."""

    def __init__(self, sched: Any, framework: Mapping[str, Any], master_uri: str,
                 use_addict: bool = False, implicit_acknowledgements: bool = True,
                 principal: str | None = None, secret: str | None = None,
                 failover: bool = False, timeout: float = DAY, *,
                 heartbeat_misses: float = 5.0, first_heartbeat_s: float = 15.0,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 15.0,
                 call_timeout_s: float = 75.0, max_redirects: int = 5,
                 min_heartbeat_s: float = HEARTBEAT_MIN_S, max_heartbeat_s: float = HEARTBEAT_MAX_S):
        self.sched = sched
        self._framework = dict(framework)
        if principal and "principal" not in self._framework:
            self._framework["principal"] = principal
        self.master = parse_master(master_uri)
        self.implicit_acknowledgements = implicit_acknowledgements
        self._failover = failover
        self.heartbeat_misses = float(heartbeat_misses)
        self.first_heartbeat_s = float(first_heartbeat_s)
        self.min_heartbeat_s = float(min_heartbeat_s)
        self.max_heartbeat_s = float(max_heartbeat_s)
        self._heartbeat_warned: str | None = None   # the last odd value logged (once each)
        self.backoff_base_s = float(backoff_base_s)
        self.backoff_max_s = float(backoff_max_s)
        self.call_timeout_s = float(call_timeout_s)
        self.max_redirects = int(max_redirects)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if principal is not None and secret is not None:
            headers.update(urllib3.make_headers(basic_auth=f"{principal}:{secret}"))
        self._headers = headers
        self._http = urllib3.PoolManager(num_pools=4, maxsize=10, retries=False)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._resp: urllib3.BaseHTTPResponse | None = None
        self.stream_id: str | None = None
        self.heartbeat_interval_s: float | None = None
        self.last_event: float = 0.0
        self.status = DRIVER_NOT_STARTED
        self.subscriptions = 0          # SUBSCRIBED events received (tests and logs)
        self.disconnections = 0
        # Count per event type; types the docs do not list share the key "unknown" (a
        # master's made-up types would add a key each, without bound).
        self.events: dict[str, int] = {}
        self.stream_errors: list[str] = []  # why streams ended (last 50)
        self.bad_events = 0             # events skipped as unusable
        self.fatal: str | None = None   # why the subscription thread died, if it did

    # -- pymesos-compatible properties ---------------------------------------------------
    @property
    def framework_id(self) -> str | None:
        fid = self._framework.get("id")
        return fid.get("value") if isinstance(fid, Mapping) else None

    @framework_id.setter
    def framework_id(self, value: str | None) -> None:
        with self._lock:
            if value:
                self._framework["id"] = msg.ident(value)
            else:
                self._framework.pop("id", None)

    @property
    def framework(self) -> dict[str, Any]:
        return dict(self._framework)

    @property
    def connected(self) -> bool:
        return self.stream_id is not None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> int:
        with self._lock:
            if self._thread is not None:
                return self.status
            self._stop.clear()
            self.status = DRIVER_RUNNING
            self._thread = threading.Thread(target=self._run, name="mesos-subscription", daemon=True)
            self._watchdog = threading.Thread(target=self._watch, name="mesos-heartbeat", daemon=True)
            self._thread.start()
            self._watchdog.start()
        return self.status

    def stop(self, failover: bool | None = None) -> int:
        """Stop. Without ``failover`` the framework is torn down (its tasks killed);
        with it, the master keeps the tasks for ``failover_timeout`` seconds."""
        if failover is None:
            failover = self._failover
        if not failover and self.connected and self.framework_id:
            self._stop.set()     # the master ends the stream after TEARDOWN: not an error
            try:
                self._post(msg.teardown(self.framework_id))
            except Exception as exc:  # noqa: BLE001 - stopping anyway
                log.warning("TEARDOWN failed: %s", exc)
        self._halt()
        self.status = DRIVER_STOPPED
        return self.status

    def abort(self) -> int:
        """Stop without tearing down (no further callbacks)."""
        self._halt()
        self.status = DRIVER_ABORTED
        return self.status

    def join(self, timeout: float | None = None) -> int:
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
        return self.status

    def run(self) -> int:
        self.start()
        while not self._stop.wait(0.5):
            pass
        return self.join()

    def _halt(self) -> None:
        self._stop.set()
        self._cut_stream()
        with self._lock:
            self.stream_id = None
        for t in (self._thread, self._watchdog):
            if t is not None and t is not threading.current_thread():
                t.join(5.0)
        with self._lock:
            self._thread = self._watchdog = None


    # -- calls (strict) -------------------------------------------------------------------
    def call(self, body: Mapping[str, Any]) -> urllib3.BaseHTTPResponse:
        """Send one call; raises NotSubscribed or MesosCallError (with the status and the
        master's message) unless the master answers 200 or 202."""
        if not self.connected:
            raise NotSubscribed(f"{body.get('type')}: not subscribed to {self.master}")
        return self._post(body)

    def _send(self, build: Callable[[str], dict[str, Any]]):
        """pymesos semantics: nothing is sent while disconnected (logged); an error answer
        raises MesosCallError."""
        fid = self.framework_id
        if not self.connected or not fid:
            log.warning("call dropped: not subscribed to %s", self.master)
            return None
        return self._post(build(fid))

    def _post(self, body: Mapping[str, Any]) -> urllib3.BaseHTTPResponse:
        data = json.dumps(body).encode()
        kind = body.get("type")
        for _ in range(self.max_redirects + 1):
            headers = dict(self._headers)
            sid = self.stream_id
            if sid:
                headers["Mesos-Stream-Id"] = sid
            master = self.master
            try:
                r = self._http.request("POST", master + API_PATH, body=data, headers=headers,
                                       redirect=False, timeout=urllib3.Timeout(self.call_timeout_s))
            except urllib3.exceptions.HTTPError as exc:
                raise MesosCallError(f"{kind} to {master}: {exc}") from None
            if r.status == 307 and r.headers.get("Location"):
                self._follow(r.headers["Location"], master)
                continue
            if r.status in (200, 202):
                return r
            # (the master's words: into a log line and an exception's text)
            text = msg.printable(r.data.decode("utf-8", "replace").strip(), 500)
            if r.status == 403:
                # Not subscribed as far as the master knows: the stream is stale.
                log.warning("%s answered 403 (%s): resubscribing", kind, text)
                self._cut_stream()
            raise MesosCallError(f"{kind} to {master} answered HTTP {r.status}: {text}", r.status)
        raise MesosCallError(f"{kind}: more than {self.max_redirects} redirects")

    def _follow(self, location: str, current: str) -> None:
        leader = leader_from_location(location, current)
        with self._lock:
            if self.master == current and leader != current:
                log.info("master %s redirected to the leading master %s", current, leader)
                self.master = leader

    # -- the subscription ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._subscribe_loop()
        except BaseException as exc:  # noqa: BLE001 - a dead event thread must not look alive
            why = f"the Mesos subscription thread died: {type(exc).__name__}: {str(exc)[:300]}"
            log.critical("%s", why, exc_info=True)
            self.fatal = why
            self.status = DRIVER_ABORTED
            self._stop.set()
            with self._lock:
                self.stream_id = None
            fn = getattr(self.sched, "error", None)
            if fn is not None:
                try:
                    fn(self, why)
                except Exception:  # noqa: BLE001 - already failing loudly
                    log.exception("scheduler callback error raised")

    def _subscribe_loop(self) -> None:
        delays = backoff_delays(self.backoff_base_s, self.backoff_max_s)
        while not self._stop.is_set():
            subscribed = self._subscribe_once()
            if self._stop.is_set():
                break
            if subscribed:
                delays = backoff_delays(self.backoff_base_s, self.backoff_max_s)
            wait = next(delays)
            log.info("resubscribing to %s in %.2f s", self.master, wait)
            self._stop.wait(wait)

    def _subscribe_once(self) -> bool:
        """One SUBSCRIBE and its stream, to its end. True if SUBSCRIBED was received."""
        was_subscribed = False
        with self._lock:
            body = msg.subscribe(self._framework)
        data = json.dumps(body).encode()
        resp = None
        try:
            for _ in range(self.max_redirects + 1):
                master = self.master
                self.last_event = time.monotonic()
                self.heartbeat_interval_s = None
                # The stream's connection is never reused (the doc's example: Connection: close).
                resp = self._http.request(
                    "POST", master + API_PATH, body=data,
                    headers={**self._headers, "Connection": "close"},
                    redirect=False, preload_content=False,
                    timeout=urllib3.Timeout(connect=self.call_timeout_s, read=None))
                if resp.status == 307 and resp.headers.get("Location"):
                    self._follow(resp.headers["Location"], master)
                    resp.close()
                    resp = None
                    continue
                break
            if resp is None:
                self._stream_ended(f"SUBSCRIBE: more than {self.max_redirects} redirects")
                return False
            if resp.status != 200:
                text = msg.printable(resp.read(2000).decode("utf-8", "replace").strip(), 500)
                self._stream_ended(f"SUBSCRIBE to {self.master} answered HTTP {resp.status}: {text}")
                return False
            sid = resp.headers.get("Mesos-Stream-Id")
            if not sid or len(sid) > 128:
                self._stream_ended(f"SUBSCRIBE answer has no valid Mesos-Stream-Id header "
                                   f"({msg.printable(repr(sid), 200)})")
                return False
            with self._lock:
                self._resp = resp
            decoder = RecordIODecoder()
            for chunk in self._chunks(resp):
                if self._stop.is_set():
                    return was_subscribed
                try:
                    records = decoder.feed(chunk)
                except RecordIOError as exc:
                    records, fault = exc.records, exc
                else:
                    fault = None
                for record in records:   # what came before a fault is still good
                    self.last_event = time.monotonic()
                    if self._event(record, sid):
                        was_subscribed = True
                if fault is not None:
                    raise fault
            decoder.finish()
            self._stream_ended("the master closed the event stream")
        except RecordIOError as exc:
            self._stream_ended(f"malformed event stream from {self.master}: {exc}")
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if not self._stop.is_set():
                self._stream_ended(f"event stream from {self.master} broke: {exc!r}")
        finally:
            with self._lock:
                self._resp = None
                connected, self.stream_id = self.stream_id is not None, None
            if resp is not None:
                # Closed, never given back to the pool half read.
                resp.close()
            if connected and not self._stop.is_set():
                self.disconnections += 1
                self._callback("disconnected")
        return was_subscribed

    @staticmethod
    def _chunks(resp: urllib3.BaseHTTPResponse) -> Iterable[bytes]:
        if resp.chunked and resp.supports_chunked_reads():
            yield from resp.read_chunked(decode_content=False)
            return
        while True:   # not chunked: take whatever has arrived
            data = resp.read1(65536)
            if not data:
                return
            yield data

    def _stream_ended(self, why: str) -> None:
        if self._stop.is_set():
            return
        log.error("%s", why)
        self.stream_errors = (self.stream_errors + [why])[-50:]

    def _cut_stream(self) -> None:
        with self._lock:
            resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def _watch(self) -> None:
        """Cut the stream when no event came for ``heartbeat_misses`` intervals. It sleeps
        until the silence could pass that limit (at most ``WATCH_MAX_S``), not a fixed
        short tick: a framework runs for months and each wake-up costs CPU."""
        wait = WATCH_MIN_S
        while not self._stop.wait(wait):
            with self._lock:
                if self._resp is None:
                    wait = WATCH_MIN_S   # (connecting: a stream may start at any moment)
                    continue
                interval = self.heartbeat_interval_s or self.first_heartbeat_s
            limit = self.heartbeat_misses * interval
            silent = time.monotonic() - self.last_event
            if silent > limit:
                why = (f"no event from {self.master} for {silent:.1f} s ({self.heartbeat_misses:g} "
                       f"heartbeats of {interval:g} s missed): reconnecting")
                self._stream_ended(why)
                self._cut_stream()
                self.last_event = time.monotonic()
                wait = WATCH_MIN_S
            else:
                # (a new event moves the limit later: the next look recomputes it)
                wait = min(WATCH_MAX_S, max(WATCH_MIN_S, limit - silent + WATCH_MIN_S))

    # -- events ---------------------------------------------------------------------------
    def _event(self, record: bytes, sid: str) -> bool:
        """Handle one event; returns True for SUBSCRIBED. Never raises for bad content."""
        try:
            event = boundedjson.loads(record, max_bytes=MAX_EVENT_BYTES, max_depth=MAX_EVENT_DEPTH,
                                      what="event")
        except ValueError as exc:
            self._bad_event(f"event is not JSON ({exc}): {record[:120]!r}")
            return False
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._bad_event(f"event without a type: {record[:120]!r}")
            return False
        kind = event["type"][:64]
        try:
            return self._dispatch(kind, event, sid)
        except Exception as exc:  # noqa: BLE001 - one bad event is one bad event
            self._bad_event(f"{kind} event unusable: {type(exc).__name__}: {str(exc)[:200]}")
            return False

    def _bad_event(self, why: str) -> None:
        self.bad_events += 1
        log.error("skipped an event from %s (%d so far): %s", self.master, self.bad_events, why)

    def _dispatch(self, kind: str, event: dict[str, Any], sid: str) -> bool:
        counted = kind if kind in _EVENT_TYPES else "unknown"
        self.events[counted] = self.events.get(counted, 0) + 1
        body = event.get(kind.lower())
        try:
            if kind == "SUBSCRIBED":
                return self._on_subscribed(body, sid)
            if kind == "HEARTBEAT":
                self._callback("processHeartBeat")
            elif kind == "OFFERS":
                self._callback("resourceOffers", _get_list(body, "offers", kind))
            elif kind == "INVERSE_OFFERS":
                self._callback("inverseOffers", _get_list(body, "inverse_offers", kind))
            elif kind == "RESCIND":
                self._callback("offerRescinded", _get(body, "offer_id", kind))
            elif kind == "RESCIND_INVERSE_OFFER":
                self._callback("inverseOfferRescinded", _get(body, "inverse_offer_id", kind))
            elif kind == "UPDATE":
                status = _get(body, "status", kind)
                self._callback("statusUpdate", status)
                if self.implicit_acknowledgements and isinstance(status, dict):
                    self._ack(status)
            elif kind == "UPDATE_OPERATION_STATUS":
                status = _get(body, "status", kind)
                self._callback("operationStatusUpdate", status)
                if self.implicit_acknowledgements and isinstance(status, dict):
                    self.acknowledgeOperationStatusUpdate(status)
            elif kind == "MESSAGE":
                self._callback("frameworkMessage", _get(body, "executor_id", kind),
                               _get(body, "agent_id", kind), body.get("data"))
            elif kind == "FAILURE":
                if not isinstance(body, dict):
                    raise msg.MessageError("FAILURE event without a 'failure' object")
                if "executor_id" in body:
                    self._callback("executorLost", body["executor_id"], body.get("agent_id"),
                                   body.get("status"))
                elif "agent_id" in body:
                    self._callback("slaveLost", body["agent_id"])
            elif kind == "ERROR":
                text = body.get("message") if isinstance(body, dict) else event.get("message")
                text = msg.printable(text, 500)
                log.error("ERROR event from the master: %s", text)
                # The doc: abort on ERROR (e.g. another instance of this framework took over).
                self._stop.set()
                self.status = DRIVER_ABORTED
                threading.Thread(target=self._cut_stream, daemon=True).start()
                self._callback("error", text)
            else:
                log.error("unknown event type %r from %s: ignored", kind, self.master)
        except msg.MessageError as exc:
            self._bad_event(f"{kind} event unusable: {exc}")
        return False

    def _on_subscribed(self, body: Any, sid: str) -> bool:
        # Everything read and checked before any state changes: a field that raised halfway
        # left the driver looking connected while the scheduler was never told.
        fid = msg._value(_get(body, "framework_id", "SUBSCRIBED"), "SUBSCRIBED.framework_id")
        interval = self._heartbeat_interval(body.get("heartbeat_interval_seconds"))
        info = body.get("master_info")
        if not isinstance(info, dict):
            u = urlsplit(self.master)
            info = {"hostname": u.hostname, "port": u.port}
        with self._lock:
            old = self.framework_id
            self.framework_id = fid
            self.stream_id = sid
            self.heartbeat_interval_s = interval
        self.subscriptions += 1
        if old is not None and old != fid:
            # Not ours any more as the master sees it: a new registration (the scheduler saves
            # the new id and reconciles its tasks), never the old id on the new stream.
            log.error("SUBSCRIBED with framework id %s, not %s as subscribed with: registered as a "
                      "new framework", msg.printable(fid), msg.printable(old))
            self._callback("registered", msg.ident(fid), info)
        elif old is not None:
            self._callback("reregistered", info)
        else:
            self._callback("registered", msg.ident(fid), info)
        return True

    def _heartbeat_interval(self, hb: Any) -> float | None:
        """SUBSCRIBED's ``heartbeat_interval_seconds`` clamped to [min_heartbeat_s,
        max_heartbeat_s]; None (the default, ``first_heartbeat_s``) when absent or not a
        positive finite number. Each odd value is logged once."""
        if hb is None:
            return None
        if not boundedjson.is_finite_number(hb) or hb <= 0:
            value, why = None, f"not a positive finite number: the default {self.first_heartbeat_s:g} s used"
        elif hb < self.min_heartbeat_s:
            value, why = self.min_heartbeat_s, f"below {self.min_heartbeat_s:g} s: that used"
        elif hb > self.max_heartbeat_s:
            value, why = self.max_heartbeat_s, f"above {self.max_heartbeat_s:g} s: that used"
        else:
            return float(hb)
        shown = msg.printable(repr(hb), 60)
        if shown != self._heartbeat_warned:
            self._heartbeat_warned = shown
            log.warning("SUBSCRIBED heartbeat_interval_seconds %s from %s is %s", shown, self.master, why)
        return value

    def _ack(self, status: dict[str, Any]) -> None:
        if self._stop.is_set():
            return      # stopping (after TEARDOWN the master knows the framework no more)
        try:
            self.acknowledgeStatusUpdate(status)
        except MesosCallError as exc:
            # (Stopping: a TEARDOWN sent meanwhile makes the master forget the framework.)
            (log.debug if self._stop.is_set() else log.warning)(
                "acknowledging task %s failed: %s", status.get("task_id"), exc)

    def _callback(self, name: str, *args: Any) -> None:
        fn = getattr(self.sched, name, None)
        if fn is None:
            return
        try:
            fn(self, *args)
        except Exception:  # noqa: BLE001 - a scheduler bug must not end the stream
            log.exception("scheduler callback %s raised", name)


def _get(body: Any, key: str, kind: str) -> Any:
    if not isinstance(body, dict) or key not in body:
        raise msg.MessageError(f"{kind} event lacks {kind.lower()}.{key}")
    return body[key]


def _get_list(body: Any, key: str, kind: str) -> list[Any]:
    # A copy, and only of a list: list() of a string or an object read each character or
    # key as an offer (one logged problem per byte of a crafted event).
    value = _get(body, key, kind)
    if not isinstance(value, list):
        raise msg.MessageError(f"{kind} event: {kind.lower()}.{key} must be a list, "
                               f"got {type(value).__name__}")
    return list(value)


__all__ = ["DAY", "DRIVER_ABORTED", "DRIVER_NOT_STARTED", "DRIVER_RUNNING", "DRIVER_STOPPED",
           "MesosCallError", "MesosSchedulerDriver", "NotSubscribed", "backoff_delays",
           "leader_from_location", "parse_master"]
