"""AgentClient against a misbehaving agent: a raw-socket server on 127.0.0.1 that answers
what each test scripts (a trickle, a redirect, a body shorter than its Content-Length,
wrong-shaped job listings). Every failure must be one AgentError naming the agent, within
about the client's timeout: an agent is a peer, its answers are checked, not trusted."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Callable

import pytest

from monitoring.client import AgentClient, AgentError

Script = Callable[[socket.socket], None]


class RawAgent:
    """Accepts connections, reads one request's head (and body), then runs ``script`` on
    the socket and closes it."""

    def __init__(self, script: Script):
        self.script = script
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            head, rest = buf.split(b"\r\n\r\n", 1)
            n = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            while len(rest) < n:
                rest += c.recv(65536)
            self.script(c)
        except OSError:
            pass
        finally:
            c.close()

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


def answer(status: int, body: bytes | dict | list, extra: str = "") -> Script:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    def script(c: socket.socket) -> None:
        c.sendall(f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(raw)}\r\n{extra}\r\n".encode() + raw)
    return script


@pytest.fixture
def agent():
    servers: list[RawAgent] = []

    def start(script: Script) -> RawAgent:
        servers.append(RawAgent(script))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


def _trickle(chunked: bool, headers_too: bool = False) -> Script:
    body = b'{"jobs": []}' + b" " * 40

    def script(c: socket.socket) -> None:
        head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked
                   else f"Content-Length: {len(body)}\r\n\r\n".encode()))
        if headers_too:          # a slow-headers agent: the head itself one byte at a time
            for i in range(len(head)):
                c.sendall(head[i:i + 1])
                time.sleep(0.2)
        else:
            c.sendall(head)
        for i in range(len(body)):
            c.sendall(b"1\r\n" + body[i:i + 1] + b"\r\n" if chunked else body[i:i + 1])
            time.sleep(0.2)
        if chunked:
            c.sendall(b"0\r\n\r\n")
    return script


@pytest.mark.parametrize("chunked,headers_too", [(False, False), (True, False), (False, True)],
                         ids=["content-length", "chunked", "slow-headers"])
def test_a_trickling_agent_fails_the_call_within_about_its_timeout(agent, chunked, headers_too):
    """Before the fix the timeout applied per socket read: 5 bytes a second never let one
    fire, and a call with timeout=1 s took ~10 s (the whole trickle) and returned success."""
    a = agent(_trickle(chunked, headers_too))
    timeout = 1.0
    c = AgentClient(a.url, timeout=timeout)
    t0 = time.monotonic()
    with pytest.raises(AgentError, match="timed out") as e:
        c.jobs()
    took = time.monotonic() - t0
    assert took < 3 * timeout, f"the call took {took:.1f} s with timeout={timeout} s"
    assert a.url in str(e.value) and "\n" not in str(e.value)
    # the timeout engages the quiet period: the next call fails at once, not asked
    t0 = time.monotonic()
    with pytest.raises(AgentError, match="not asked"):
        c.set_quota("1", 0.5, 30)
    assert time.monotonic() - t0 < 0.5
    c.close()


def test_the_deadline_covers_the_whole_call_not_each_read(agent):
    """An answer whose every byte comes well inside the timeout, but whose whole takes
    several timeouts, is a timeout: the caller's pass cannot wait on it."""
    a = agent(_trickle(chunked=False))      # 52 bytes, 0.2 s apart: ~10 s in all
    c = AgentClient(a.url, timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(AgentError, match="timed out"):
        c.node()
    assert time.monotonic() - t0 < 4.5


@pytest.mark.parametrize("status", [301, 302, 307])
def test_a_non_2xx_answer_is_an_error_even_with_a_json_body(agent, status):
    """A 301 with a JSON body made set_quota look successful (any status below 400 was)."""
    a = agent(answer(status, {"jobs": [], "cpu_fraction": 0.5},
                     "Location: http://elsewhere.example/\r\n"))
    c = AgentClient(a.url, timeout=2.0)
    with pytest.raises(AgentError, match="not a 2xx answer") as e:
        c.set_quota("1", 0.5, 30)
    assert e.value.status == status and a.url in str(e.value)
    with pytest.raises(AgentError) as e:
        c.jobs()
    assert e.value.status == status


def test_a_body_shorter_than_its_content_length_is_an_error(agent):
    """http.client returned the bytes read before the agent closed as the whole answer."""
    body = b'{"jobs": []}'
    a = agent(lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + body))
    c = AgentClient(a.url, timeout=2.0)
    with pytest.raises(AgentError, match="after 12 of the 100 bytes") as e:
        c.jobs()
    assert a.url in str(e.value)


def test_a_content_length_past_the_cap_is_refused_before_reading(agent):
    """A 2 GB Content-Length then a short valid body was a success."""
    a = agent(lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2147483648\r\n\r\n"
                                  b'{"jobs": []}'))
    c = AgentClient(a.url, timeout=2.0)
    with pytest.raises(AgentError, match="Content-Length 2147483648"):
        c.jobs()


@pytest.mark.parametrize("body,words", [
    ([1, 2], "a JSON list, not an object"),
    ({"job": []}, "'jobs' is NoneType, not a list"),
    ({"jobs": "abc"}, "'jobs' is str, not a list"),
    ({"jobs": {"1": {}}}, "'jobs' is dict, not a list"),
])
def test_a_jobs_answer_of_the_wrong_shape_is_an_agent_error(agent, body, words):
    """A list answer raised TypeError, a missing 'jobs' KeyError; a string came back as is."""
    a = agent(answer(200, body))
    with pytest.raises(AgentError, match=words) as e:
        AgentClient(a.url, timeout=2.0).jobs()
    assert a.url in str(e.value)


def test_a_non_object_answer_to_another_call_is_an_agent_error(agent):
    a = agent(answer(200, [1, 2]))
    c = AgentClient(a.url, timeout=2.0)
    with pytest.raises(AgentError, match="not an object"):
        c.set_quota("1", 0.5, 30)
    assert c.health() is False      # (was AttributeError: a list has no .get)


def test_job_views_that_are_not_objects_with_a_string_id_are_dropped_and_logged(agent, caplog):
    """Callers key the views by job_id (slurm_plugin/agent_calls.py, mesos_framework/quotas.py):
    an int id crashed the Slurm pass on jid.isdigit(), a non-object entry cost the node all
    its views. The bad entries are dropped, counted and named in one WARNING."""
    good = [{"job_id": "5", "status": "running"}, {"job_id": "7", "status": "done"}]
    views = [good[0], 5, {"job_id": 6}, "x", {"status": "running"}, {"job_id": ""}, None,
             good[1], [1]]
    a = agent(answer(200, {"jobs": views}))
    c = AgentClient(a.url, timeout=2.0)
    with caplog.at_level(logging.WARNING, logger="monitoring.client"):
        assert c.jobs() == good
    assert c.dropped_views == 7
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert a.url in warned[0] and "dropped 7 of 9" in warned[0]
    assert "position 1, 2, 3, 4, 5, 6, 8" in warned[0]
    # asked again every pass, the same agent is not a WARNING again until DROPPED_WARN_S
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="monitoring.client"):
        assert c.jobs() == good
    assert c.dropped_views == 14
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert "14 dropped so far" in caplog.records[0].getMessage()


def test_an_agent_error_message_is_one_short_line(agent):
    a = agent(answer(503, {"error": "line one\nline two " + "x" * 100_000}))
    with pytest.raises(AgentError, match=r"line one line two x+\.\.\. \(HTTP 503\)") as e:
        AgentClient(a.url, timeout=2.0).jobs()
    assert "\n" not in str(e.value) and len(str(e.value)) < 500


def test_an_answer_that_closes_the_connection_is_read_whole(agent):
    """(A guard, not a regression test: the deadline reader must keep the descriptor open
    while the body of a "Connection: close" answer is read after http.client closed it.)"""
    a = agent(answer(409, {"error": "no such job"}, "Connection: close\r\n"))
    with pytest.raises(AgentError, match=r"no such job \(HTTP 409\)"):
        AgentClient(a.url, timeout=2.0).job("1")
    a.script = answer(200, {"job_id": "1"}, "Connection: close\r\n")
    c = AgentClient(a.url, timeout=2.0)
    assert c.job("1") == {"job_id": "1"} and c.job("1") == {"job_id": "1"}


# -- a call sent again after a failure: only when asking twice is asking once -------------------------
def _vanishes(requests: list[bytes]) -> Script:
    """The agent reads the whole request (and may act on it), then dies before answering."""
    def script(c: socket.socket) -> None:
        requests.append(b"")
    return script


def test_a_registration_the_agent_may_have_acted_on_is_not_sent_again(agent):
    """The POST was sent a second time on a new connection: two registrations for one call
    (the second one merges pids into, or recreates, a job that ended in between)."""
    requests: list[bytes] = []
    a = agent(_vanishes(requests))
    with pytest.raises(AgentError, match="POST /v1/jobs: cannot reach agent"):
        AgentClient(a.url, token="t", timeout=2.0).register_job("j1", [123], 2.0)
    assert len(requests) == 1


@pytest.mark.parametrize("call", ["job", "set_quota", "clear_quota"])
def test_an_idempotent_call_is_still_sent_again_once(agent, call):
    requests: list[bytes] = []
    a = agent(_vanishes(requests))
    c = AgentClient(a.url, token="t", timeout=2.0)
    args = {"job": ("j1",), "set_quota": ("j1", 0.5, 30.0), "clear_quota": ("j1",)}[call]
    with pytest.raises(AgentError, match="cannot reach agent"):
        getattr(c, call)(*args)
    assert len(requests) == 2


def test_a_kept_alive_connection_the_agent_closed_is_replaced_before_a_registration(agent):
    """The agent closes each connection after its answer without saying so (an idle
    timeout): the registration goes out once, on a new connection, and succeeds."""
    requests: list[bytes] = []

    def script(c: socket.socket) -> None:
        requests.append(b"")
        answer(200, {"job_id": "j1"})(c)
    a = agent(script)
    c = AgentClient(a.url, token="t", timeout=2.0)
    assert c.job("j1") == {"job_id": "j1"}
    time.sleep(0.2)    # the agent's FIN arrives
    assert c.register_job("j1", [123], 2.0) == {"job_id": "j1"}
    assert len(requests) == 2     # the GET and one POST
