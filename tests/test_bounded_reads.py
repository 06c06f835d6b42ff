"""Issue 24: every JSON read from outside is bounded (coscheduler/boundedjson.py): the Mesos
queue folder and --queue-file, Slurm's ``--json`` output (a fake ``squeue`` on PATH: the real
interface, a program printing JSON) and slurmrestd's bodies (a real loopback HTTP server).
Each fault is one clear line naming the file, command or URL; the controller's pass is
skipped with that line in its errors and the next pass goes on."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from coscheduler import boundedjson
from coscheduler.controller import Controller
from coscheduler.model import InvalidInput, Job
from coscheduler.policies.coalloc import Static
from mesos_framework.queue import JobQueue, queue_file_cap, read_queue_file
from slurm_plugin.backend import SlurmBackend
from slurm_plugin.commands import SlurmCommandError, SlurmCommands
from slurm_plugin.parse import ParseError
from slurm_plugin.rest import RestClient, RestError, RestSource
from slurm_plugin.source import CommandLineSource
from tests.test_slurm_rest import Replay, source_22, token_file  # noqa: F401 - the fixture

SLURM = FIXTURES / "slurm"
DEEP = b"[" * 100_000 + b"]" * 100_000


# -- the loader ----------------------------------------------------------------------------------

def test_the_nesting_scan_skips_brackets_in_strings_and_escapes():
    doc = {"a": ['[[[\\"', {"b": '"]]]\\\\'}, "\\\\\\\"{"], "c": [[[]]]}
    raw = json.dumps(doc).encode()
    assert boundedjson.nesting_depth(raw, 0) == 4
    assert boundedjson.loads(raw, max_depth=4) == doc
    with pytest.raises(ValueError, match="nested more than 3"):
        boundedjson.loads(raw, max_depth=3)
    # chunked: the string state carries over a chunk's end
    assert boundedjson.nesting_depth(b'["' + b"[" * 9_000_000 + b'"]', 2) == 1


def _depth(x) -> int:
    if isinstance(x, dict):
        return 1 + max(map(_depth, x.values()), default=0)
    if isinstance(x, list):
        return 1 + max(map(_depth, x), default=0)
    return 0


_TEXT = st.text(alphabet='[]{}"\\\\/nu ax', max_size=8)
_DOCS = st.recursive(st.none() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(doc=_DOCS, chunk=st.sampled_from([1, 2, 3, 7, 1 << 22]))
def test_the_nesting_scan_agrees_with_the_parsed_depth(doc, chunk):
    raw = json.dumps(doc).encode()
    saved = boundedjson._CHUNK
    boundedjson._CHUNK = chunk
    try:
        got = boundedjson.nesting_depth(raw, _depth(doc))
        assert got == _depth(doc) or (got == 0 and raw.count(b"[") + raw.count(b"{") <= _depth(doc))
        if _depth(doc) > 0:
            assert boundedjson.nesting_depth(raw, _depth(doc) - 1) == _depth(doc)
    finally:
        boundedjson._CHUNK = saved


def test_a_stream_is_read_up_to_its_cap_and_no_further(tmp_path):
    class Endless:
        read_bytes = 0

        def read(self, n):
            self.read_bytes += n
            return b"x" * n

    s = Endless()
    with pytest.raises(ValueError, match="more than the 1000000 bytes allowed"):
        boundedjson.read_limited(s, 1_000_000, "stream")
    assert s.read_bytes == 1_000_001


# -- the Mesos side: queue files ----------------------------------------------------------------

def test_a_file_read_without_following_links_or_of_given_owners_only(tmp_path):
    """What the Slurm backend reads from folders every user may write to: a link is not
    followed, and a file of a uid not among ``owners`` is refused, naming its uid."""
    good = tmp_path / "good.json"
    good.write_text('{"a": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(good)
    assert boundedjson.load_file(link) == {"a": 1}                 # default: followed
    with pytest.raises(boundedjson.JSONUnusable, match="link.json: cannot be opened"):
        boundedjson.load_file(link, follow=False)
    me = os.getuid()
    assert boundedjson.load_file(good, owners={me}, follow=False) == {"a": 1}
    with pytest.raises(boundedjson.JSONUnusable, match=f"belongs to uid {me}, not to uid "):
        boundedjson.load_file(good, owners={me + 1})


def test_a_200_mb_queue_file_is_refused_without_being_read(tmp_path):
    big = tmp_path / "jobs.json"
    with open(big, "wb") as f:          # sparse: 200 MB that take no disk
        f.truncate(200 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput) as err:
            read_queue_file(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(err.value)
    assert str(big) in msg and "more than the 67108864" in msg
    assert "COSCHED_QUEUE_FILE_MAX_MB" in msg and "\n" not in msg
    assert peak < 8 << 20, f"{peak} bytes allocated to refuse it"


def test_the_queue_file_cap_is_a_setting_and_a_bad_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("COSCHED_QUEUE_FILE_MAX_MB", "0.001")
    assert queue_file_cap() == 1048
    f = tmp_path / "jobs.json"
    d = {"job_id": "a", "cores": 1, "walltime_s": 5, "job_class": "t/x", "command": ["true"]}
    f.write_text(json.dumps([d] * 20))
    with pytest.raises(InvalidInput, match="more than the 1048 "):
        read_queue_file(f)
    monkeypatch.setenv("COSCHED_QUEUE_FILE_MAX_MB", "lots")
    with pytest.raises(InvalidInput, match="COSCHED_QUEUE_FILE_MAX_MB='lots'"):
        read_queue_file(f)
    monkeypatch.delenv("COSCHED_QUEUE_FILE_MAX_MB")
    f.write_text(json.dumps(d) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(InvalidInput, match="line 2: nested more than 8 levels"):
        read_queue_file(f)


def _job_file(q: JobQueue, seq: int, jid: str) -> None:
    job = Job(jid, 1, 60.0, "t/x", command=("/bin/true",))
    (q.new / f"{seq:020d}-{jid}.json").write_text(json.dumps({
        "job_id": job.job_id, "cores": job.cores, "walltime_s": job.walltime_s,
        "job_class": job.job_class, "command": list(job.command)}))


def test_a_fifo_and_a_deep_file_in_the_queue_are_set_aside_and_the_others_go_on(tmp_path):
    q = JobQueue(tmp_path / "q").ensure()
    _job_file(q, 1, "a")
    os.mkfifo(q.new / f"{2:020d}-pipe.json")              # would block a reader forever
    (q.new / f"{3:020d}-deep.json").write_bytes(b"[" * 400_000 + b"]" * 400_000)
    _job_file(q, 4, "b")
    got: list = []
    t = threading.Thread(target=lambda: got.append(q.take()), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():                   # main before the fix: free the thread stuck on the FIFO
        os.close(os.open(q.new / f"{2:020d}-pipe.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the queue blocked on a FIFO")
    assert [j.job_id for j in got[0]] == ["a", "b"] and q.refused == 2
    errors = {p.name: p.read_text() for p in q.rejected.glob("*.error")}
    assert "not a regular file" in errors[f"{2:020d}-pipe.json.error"]
    assert "nested more than 8 levels" in errors[f"{3:020d}-deep.json.error"]
    assert sorted(p.name for p in q.active.iterdir()) == [f"{1:020d}-a.json", f"{4:020d}-b.json"]


# -- Slurm's command line: a fake squeue on PATH -------------------------------------------------

def _fake_slurm(tmp_path, monkeypatch, squeue_body: str) -> None:
    """scontrol (24.11, nodes from the recorded answer) and ``squeue`` running
    ``squeue_body``, first on PATH; the mode file says what squeue prints."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nodes = SLURM / "24.11" / "scontrol_show_node.json"
    progs = {
        "scontrol": "import sys\nif sys.argv[1:] == ['--version']: print('slurm 24.11.1')\n"
                    f"else: sys.stdout.write(open({str(nodes)!r}).read())",
        "squeue": squeue_body,
    }
    for name, body in progs.items():
        p = bin_dir / name
        p.write_text(f"#!{sys.executable}\n{body}\n")
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


SQUEUE_BY_MODE = (
    "import os, sys\n"
    "mode = open(os.path.join(os.path.dirname(sys.argv[0]), 'mode')).read()\n"
    f"good = {str(SLURM / '24.11' / 'squeue.json')!r}\n"
    "sys.stdout.buffer.write(b'{\"jobs\": ' + b'[' * 100000 + b']' * 100000 + b'}' if mode == 'deep'\n"
    "                        else open(good, 'rb').read())\n")


def test_a_100k_deep_squeue_answer_skips_one_pass_with_one_line_and_the_next_goes_on(tmp_path, monkeypatch):
    _fake_slurm(tmp_path, monkeypatch, SQUEUE_BY_MODE)
    mode = tmp_path / "bin" / "mode"
    mode.write_text("deep")
    backend = SlurmBackend(CommandLineSource(SlurmCommands(retries=0)), partition="cosched",
                           state_file=tmp_path / "state.json", refresh_s=0.0)
    ctl = Controller(backend, Static(0.5))
    report = ctl.step()
    # the pass reads Slurm twice (ended jobs, then the queue): each says what went wrong
    errs = [e for e in report.errors if "squeue" in e]
    assert any(e.startswith("reading the backend's state failed") for e in errs)
    for err in errs:
        assert "nested more than 64 levels" in err and "`squeue --json=v0.0.42 --states=all`" in err
        assert "\n" not in err and "Traceback" not in err and len(err) < 400
    assert report.started == 0 and report.coallocated == 0 and ctl.passes == 1
    mode.write_text("good")
    report = ctl.step()
    assert not [e for e in report.errors if "squeue" in e or "JSON" in e], report.errors
    assert [j.job_id for j in backend.queued()] == ["7"]


def test_a_squeue_that_never_stops_printing_is_stopped_at_the_cap(tmp_path, monkeypatch):
    pid_file = tmp_path / "squeue.pid"
    _fake_slurm(tmp_path, monkeypatch,
                "import os, sys, time\n"
                f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                "chunk = b'[' * (1 << 20)\n"
                "end = time.monotonic() + 20\n"
                "while time.monotonic() < end:\n"
                "    sys.stdout.buffer.write(chunk); sys.stdout.flush(); time.sleep(0.01)\n")
    monkeypatch.setenv("COSCHED_SLURM_MAX_JSON_MB", "4")
    cmds = SlurmCommands(retries=0, timeout_s=10)
    assert cmds.max_output_bytes == 4 << 20
    t0 = time.monotonic()
    with pytest.raises(SlurmCommandError) as err:
        CommandLineSource(cmds).jobs()
    took = time.monotonic() - t0
    msg = str(err.value)
    assert "`squeue --json=v0.0.42 --states=all`" in msg and "printed more than 4194304 bytes" in msg
    assert "COSCHED_SLURM_MAX_JSON_MB" in msg and "\n" not in msg
    assert took < 5, f"stopped after {took:.1f} s"
    pid = int(pid_file.read_text())
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):       # killed and reaped, not left printing
        os.kill(pid, 0)


def test_a_bad_output_cap_setting_is_named(monkeypatch):
    monkeypatch.setenv("COSCHED_SLURM_MAX_JSON_MB", "-5")
    with pytest.raises(InvalidInput, match=r"COSCHED_SLURM_MAX_JSON_MB='-5': expected a size in MB"):
        SlurmCommands()


# -- slurmrestd: a real loopback server --------------------------------------------------------

class Flood:
    """An HTTP server whose every answer claims 10 GB and streams until the client leaves
    (or 64 MB, so that a client reading it all does not eat the machine)."""

    def __init__(self):
        self.sent = 0
        flood = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(10 << 30))
                self.end_headers()
                chunk = b"[" * (1 << 20)
                try:
                    for _ in range(64):
                        self.wfile.write(chunk)
                        flood.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    pass
                self.close_connection = True

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_a_10_gb_slurmrestd_answer_is_refused_after_the_cap(token_file):  # noqa: F811
    flood = Flood()
    try:
        client = RestClient(flood.url, str(token_file), retries=0, max_body_bytes=2 << 20)
        t0 = time.monotonic()
        with pytest.raises(RestError) as err:
            client.get_json("/slurm/v0.0.42/jobs")
        took = time.monotonic() - t0
    finally:
        flood.close()
    msg = str(err.value)
    assert f"`GET {flood.url}/slurm/v0.0.42/jobs`" in msg and "more than the 2097152 bytes" in msg
    assert "\n" not in msg and took < 5


def test_a_100k_deep_slurmrestd_answer_skips_one_pass_and_the_next_goes_on(token_file, tmp_path):  # noqa: F811
    replay = Replay()
    try:
        src = source_22(replay, token_file, tmp_path)
        good = replay.routes[("GET", "/slurm/v0.0.38/jobs")][0]
        deep = (200, '{"jobs": ' + DEEP.decode() + "}")
        replay.on("GET", "/slurm/v0.0.38/jobs", deep)
        with pytest.raises(ParseError, match="nested more than 64 levels"):
            src.client.get_json("/slurm/v0.0.38/jobs")
        backend = SlurmBackend(RestSource(src.client), partition="cosched",
                               state_file=tmp_path / "state.json", refresh_s=0.0)
        ctl = Controller(backend, Static(0.5))
        report = ctl.step()
        errs = [e for e in report.errors if "/jobs" in e]
        assert any(e.startswith("reading the backend's state failed") for e in errs)
        for err in errs:
            assert "nested more than 64 levels" in err and replay.url in err and "\n" not in err
        replay.on("GET", "/slurm/v0.0.38/jobs", good)
        report = ctl.step()
        assert not [e for e in report.errors if "/jobs" in e], report.errors
        assert backend.queued() or backend.running()
    finally:
        replay.close()


def test_a_node_agent_answering_10_gb_is_one_error_not_10_gb_in_memory():
    from monitoring.client import AgentClient, AgentError

    flood = Flood()
    try:
        client = AgentClient(flood.url, timeout=5.0)
        t0 = time.monotonic()
        with pytest.raises(AgentError) as err:
            client.jobs()
        took = time.monotonic() - t0
        client.close()
    finally:
        flood.close()
    msg = str(err.value)
    assert f"answer of the agent at {flood.url}" in msg and "more than the 16777216 bytes" in msg
    assert "\n" not in msg and took < 5
