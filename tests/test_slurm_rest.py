"""The slurmrestd backend's source (slurm_plugin/rest.py, rest_contract.py) on answers
recorded from a real slurmrestd (tests/fixtures/slurm/<release>/rest_*.json), served by a
small local HTTP server that replays them: the contract per release, the request bodies,
the JWT file's checks, and each failure as one line that never shows the token. The live
runs against Debian's slurmrestd are in test_slurm_rest_live.py."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import FIXTURES
from coscheduler.bench.jsonread import squeue_like
from coscheduler.backend import BackendError
from coscheduler.model import InvalidInput
from slurm_plugin.contract import Release
from slurm_plugin.parse import ParseError, SlurmJob
from slurm_plugin.rest import RestClient, RestError, RestSource, check_url, read_token, token_user
from slurm_plugin.rest_contract import (REST_PARSER, parse_partition_max_time, parse_rest_jobs,
                                        parse_rest_nodes, release_of_ping, restd_plugins,
                                        update_body)
from slurm_plugin.rest_daemon import sign_jwt
from slurm_answers import ODD_ANSWERS, ODD_NODE_ANSWERS, nodes_like, surprised
from slurm_plugin.answerstream import JobsStream, NodesStream

SLURM = FIXTURES / "slurm"
REST_RELEASES = sorted(p.name for p in SLURM.iterdir() if (p / "rest_ping.json").exists())


def rec(version: str, name: str) -> str:
    return (SLURM / version / name).read_text()


def rel_parser(version: str) -> tuple[Release, str]:
    rel = release_of_ping(json.loads(rec(version, "rest_ping.json")), "ping")
    return rel, REST_PARSER[(rel.major, rel.minor)]


@pytest.fixture
def token_file(tmp_path):
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    f = tmp_path / "token"
    f.write_text("SLURM_JWT=" + sign_jwt(key, "alice") + "\n")
    f.chmod(0o600)
    return f


class Replay:
    """A local HTTP server answering (method, path) with recorded (status, body); it keeps
    every request it got (method, path, headers, JSON body)."""

    def __init__(self):
        self.routes: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self.got: list[tuple[str, str, dict, object]] = []
        replay = self

        class H(BaseHTTPRequestHandler):
            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                replay.got.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                answers = replay.routes.get((self.command, self.path)) or [(404, '{"errors": []}')]
                status, text = answers.pop(0) if len(answers) > 1 else answers[0]
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def on(self, method: str, path: str, *answers: tuple[int, str]) -> None:
        self.routes[(method, path)] = list(answers)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replay():
    r = Replay()
    yield r
    r.close()


def source_22(replay, token_file, tmp_path, marks=True):
    for name, p in [("rest_ping.json", "ping"), ("rest_jobs.json", "jobs"), ("rest_nodes.json", "nodes"),
                    ("rest_partition.json", "partition/cosched")]:
        replay.on("GET", f"/slurm/v0.0.38/{p}", (200, rec("22.05", name)))
    replay.on("GET", "/slurm/v0.0.42/ping", (404, "{}"))
    client = RestClient(replay.url, str(token_file), sleep=lambda s: None)
    return RestSource(client, marks_file=tmp_path / "marks.json" if marks else None)


# -- the contract -----------------------------------------------------------------------------

def test_two_releases_are_recorded_with_their_pinned_parser():
    assert "22.05" in REST_RELEASES and len(REST_RELEASES) >= 2, REST_RELEASES
    for version in REST_RELEASES:
        rel, parser = rel_parser(version)
        assert f"{rel.major}.{rel.minor:02d}" == version
        assert json.loads(rec(version, "rest_ping.json"))["meta"]["plugin"]["type"].endswith(parser) \
            or parser in rec(version, "rest_ping.json")


@pytest.mark.parametrize("version", REST_RELEASES)
def test_recorded_jobs_nodes_and_partition_parse(version):
    rel, parser = rel_parser(version)
    jobs = parse_rest_jobs(rel, parser, rec(version, "rest_jobs.json"))
    nodes = parse_rest_nodes(rel, parser, rec(version, "rest_nodes.json"))
    assert jobs and all(j.job_id > 0 and j.state != "UNKNOWN" for j in jobs)
    running = [j for j in jobs if j.state == "RUNNING"]
    assert running and all(j.nodes for j in running)
    assert any(j.admin_comment.startswith("cosched:") for j in jobs)
    assert len(nodes) == 2 and all(n.cpus == 4 and "cosched" in n.partitions for n in nodes)
    assert parse_partition_max_time(rel, parser, json.loads(rec(version, "rest_partition.json")),
                                    "cosched") is None          # MaxTime=INFINITE


@pytest.mark.parametrize("version", REST_RELEASES)
def test_an_unknown_shape_names_release_endpoint_and_field(version):
    rel, parser = rel_parser(version)
    data = json.loads(rec(version, "rest_nodes.json"))
    data["nodes"][0].pop("cpus")
    with pytest.raises(ParseError) as e:
        parse_rest_nodes(rel, parser, json.dumps(data))
    msg = str(e.value)
    assert f"Slurm {rel.text}" in msg and f"GET /slurm/{parser}/nodes" in msg and "'cpus'" in msg
    data = json.loads(rec(version, "rest_jobs.json"))
    del data["jobs"]
    with pytest.raises(ParseError, match=rf"Slurm {rel.text} slurmrestd: `GET /slurm/{parser}/jobs`.*'jobs'"):
        parse_rest_jobs(rel, parser, json.dumps(data))
    with pytest.raises(ParseError, match="maximums.time"):
        parse_partition_max_time(rel, parser, {"partitions": [{"name": "cosched"}]}, "cosched")


def test_update_bodies_per_parser():
    job = SlurmJob(job_id=7, time_limit_s=120.0)
    fields = {"NodeList": "n[1-2]", "Priority": "5", "TimeLimit": "+3", "Dependency": ""}
    assert update_body("v0.0.38", fields, job) == {
        "nodelist": "n1,n2", "priority": "5", "time_limit": 5, "dependency": ""}
    num = lambda n: {"set": True, "number": n, "infinite": False}  # noqa: E731
    assert update_body("v0.0.42", {**fields, "AdminComment": "cosched:v=1;quota=0.5000",
                                   "OverSubscribe": "no"}, job) == {
        "required_nodes": ["n1", "n2"], "priority": num(5), "time_limit": num(5), "dependency": "",
        "admin_comment": "cosched:v=1;quota=0.5000", "shared": ["none"]}
    for bad, match in [({"AdminComment": "x"}, "cannot write AdminComment"),
                       ({"Partition": "x"}, "'Partition' is not one the backend writes"),
                       ({"TimeLimit": "+1"}, "needs the job's current time limit"),
                       ({"Priority": "-1"}, "not a whole number")]:
        with pytest.raises(ValueError, match=match):
            update_body("v0.0.38", bad)


def test_slurmrestd_plugins_per_release():
    assert restd_plugins(Release(22, 5, 8)) == ("openapi/v0.0.38",)
    assert restd_plugins(Release(24, 11, 5)) == ("openapi/slurmctld",)


# -- the token file and the URL ----------------------------------------------------------------

def test_token_file_is_checked_and_never_shown(tmp_path, token_file):
    tok = read_token(token_file)
    assert tok.count(".") == 2 and token_user(tok) == "alice"
    bare = tmp_path / "bare"
    bare.write_text(tok)
    bare.chmod(0o600)
    assert read_token(bare) == tok
    cases = [("", 0o600, "empty"), (tok, 0o644, "mode 0644 lets others read"),
             ("not a token at all", 0o600, "does not hold one JWT"),
             (tok + "\n" + tok, 0o600, "does not hold one JWT")]
    for i, (text, mode, match) in enumerate(cases):
        f = tmp_path / f"t{i}"
        f.write_text(text)
        f.chmod(mode)
        with pytest.raises(InvalidInput, match=match) as e:
            read_token(f)
        assert tok not in str(e.value) and "\n" not in str(e.value) and str(f) in str(e.value)
    with pytest.raises(InvalidInput, match="No such file"):
        read_token(tmp_path / "missing")
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_token(tmp_path)


@pytest.mark.parametrize("url", ["", "localhost:6820", "ftp://h:1", "http://", "http://h:99999",
                                 "http://h:1/?x=1"])
def test_bad_urls_are_refused_in_one_line(url):
    with pytest.raises(InvalidInput, match="--url") as e:
        check_url(url)
    assert "\n" not in str(e.value)


# -- HTTP: answers and failures ----------------------------------------------------------------

def test_reads_the_recorded_cluster_over_http_with_the_token(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    assert src.contract() == (Release(22, 5, 8), "v0.0.38")
    jobs, nodes = src.jobs(), src.nodes()
    assert len(nodes) == 2 and jobs
    assert src.partition_max_time("cosched") is None
    method, path, headers, _ = replay.got[-1]
    tok = read_token(token_file)
    assert headers["x-slurm-user-token"] == tok and headers["x-slurm-user-name"] == "alice"
    # the newest pinned parser was tried first: 404 there, then 22.05's
    assert [g[1] for g in replay.got[:2]] == ["/slurm/v0.0.42/ping", "/slurm/v0.0.38/ping"]


def test_v0038_keeps_admin_comment_marks_itself_and_drops_purged_ones(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    held = next(j for j in src.jobs() if j.state == "PENDING")
    replay.on("GET", f"/slurm/v0.0.38/job/{held.job_id}", (200, rec("22.05", "rest_jobs.json")))
    replay.on("POST", f"/slurm/v0.0.38/job/{held.job_id}", (200, rec("22.05", "rest_ping.json")))
    src.update(held.job_id, AdminComment="cosched:v=1;quota=0.3000", NodeList="c28389n2")
    posts = [g for g in replay.got if g[0] == "POST"]
    assert posts[-1][3] == {"nodelist": "c28389n2"}          # the comment is not sent
    assert next(j for j in src.jobs() if j.job_id == held.job_id).admin_comment == "cosched:v=1;quota=0.3000"
    assert json.loads((tmp_path / "marks.json").read_text()) == {str(held.job_id): "cosched:v=1;quota=0.3000"}
    # a second source (a restarted controller) reads the marks back
    again = source_22(replay, token_file, tmp_path)
    assert next(j for j in again.jobs() if j.job_id == held.job_id).admin_comment.endswith("0.3000")
    # OverSubscribe=no cannot be written on 22.05: not sent, the release still goes through
    src.update(held.job_id, OverSubscribe="no")
    src.release(held.job_id)
    assert [g[3] for g in replay.got if g[0] == "POST"][-1] == {"hold": False}
    # the job purged by slurmctld: its mark goes too
    data = json.loads(rec("22.05", "rest_jobs.json"))
    data["jobs"] = [j for j in data["jobs"] if j["job_id"] != held.job_id]
    replay.on("GET", "/slurm/v0.0.38/jobs", (200, json.dumps(data)))
    src.jobs()
    assert json.loads((tmp_path / "marks.json").read_text()) == {}


def test_a_refused_token_is_one_line_naming_the_file_not_the_token(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    src.contract()
    replay.on("GET", "/slurm/v0.0.38/jobs", (401, "Authentication failure"))
    with pytest.raises(RestError) as e:
        src.jobs()
    msg = str(e.value)
    assert "HTTP 401" in msg and str(token_file) in msg and replay.url in msg and "\n" not in msg
    assert read_token(token_file) not in msg and isinstance(e.value, BackendError)
    # 22.05 answers a token slurmctld rejects with a 500 (recorded): said so
    replay.on("GET", "/slurm/v0.0.38/nodes", (500, rec("22.05", "rest_401.txt")[:-3]))
    with pytest.raises(RestError, match="slurmctld config is unable to load.*rejects the token"):
        src.nodes()


def test_5xx_and_unreachable_are_retried_then_named(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    src.contract()
    calls = len(replay.got)
    replay.on("GET", "/slurm/v0.0.38/nodes", (503, "busy"), (503, "busy"), (200, rec("22.05", "rest_nodes.json")))
    assert len(src.nodes()) == 2 and len(replay.got) - calls == 3
    unknown = rec("22.05", "rest_job_unknown.json")
    replay.on("POST", "/slurm/v0.0.38/job/999", (500, unknown))
    calls = len(replay.got)
    with pytest.raises(RestError, match=r"HTTP 500\): Unable to find JobId=999"):
        src.release(999)
    assert len(replay.got) - calls == 1                      # a final answer: not retried
    # nothing listens: transient, retried, then one line
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    dead = RestSource(RestClient(f"http://127.0.0.1:{port}", str(token_file), sleep=lambda s: None))
    ping = rf"slurmrestd `GET http://127.0.0.1:{port}/slurm/v0.0.42/ping`: no answer"
    with pytest.raises(RestError, match=ping) as e:
        dead.jobs()
    assert e.value.transient and dead.client.calls == 4 and "\n" not in str(e.value)


def test_an_error_inside_a_200_answer_is_a_failure(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    replay.on("POST", "/slurm/v0.0.38/job/1", (200, rec("22.05", "rest_update_unknown_key.json")))
    with pytest.raises(RestError, match='Unknown key "admin_comment"'):
        src._post(1, {"admin_comment": "x"})


def test_the_token_file_is_read_at_each_request(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path)
    src.contract()
    token_file.chmod(0o644)
    with pytest.raises(InvalidInput, match="chmod 600"):
        src.nodes()


def test_the_backend_is_built_from_the_run_options(tmp_path, token_file):
    from coscheduler.backends.registry import backend_names, make_backend

    assert "slurmrestd" in backend_names()
    with pytest.raises(InvalidInput, match="needs --url"):
        make_backend("slurmrestd", {"token_file": str(token_file)})
    with pytest.raises(InvalidInput, match="--url 'localhost:1'"):
        make_backend("slurmrestd", {"url": "localhost:1", "token_file": str(token_file),
                                    "slurm_dir": str(tmp_path)})
    with pytest.raises(InvalidInput, match="no cluster in"):
        make_backend("slurmrestd", {"url": "http://127.0.0.1:1", "token_file": str(token_file),
                                    "slurm_dir": str(tmp_path)})


def test_v0042_sends_every_field_and_a_511_is_a_refused_token(replay, token_file):
    replay.on("GET", "/slurm/v0.0.42/ping", (200, rec("24.11", "rest_ping.json")))
    replay.on("GET", "/slurm/v0.0.42/jobs", (200, rec("24.11", "rest_jobs.json")))
    src = RestSource(RestClient(replay.url, str(token_file), sleep=lambda s: None))
    rel, parser = src.contract()
    assert (rel.text, parser) == ("24.11.5", "v0.0.42")
    running = next(j for j in src.jobs() if j.state == "RUNNING" and j.time_limit_s)
    replay.on("GET", f"/slurm/v0.0.42/job/{running.job_id}", (200, rec("24.11", "rest_jobs.json")))
    replay.on("POST", f"/slurm/v0.0.42/job/{running.job_id}", (200, '{"errors": [], "results": []}'))
    src.update(running.job_id, AdminComment="cosched:v=1;quota=0.2500", TimeLimit="+2")
    body = [g[3] for g in replay.got if g[0] == "POST"][-1]
    limit = int(running.time_limit_s / 60) + 2
    assert body == {"admin_comment": "cosched:v=1;quota=0.2500",
                    "time_limit": {"set": True, "number": limit, "infinite": False}}
    # 24.11 answers a token signed with another key with 511 (recorded live)
    replay.on("GET", "/slurm/v0.0.42/nodes", (511, json.dumps({"errors": [
        {"description": "Failure to query nodes", "error": "Protocol authentication error"}]})))
    with pytest.raises(RestError, match=r"refused the token in .* \(HTTP 511\): Failure to query nodes"):
        src.nodes()


# -- GET jobs read as it is sent (slurm_plugin/answerstream.py) ------------------------------------

def _old_rest_jobs(src):
    """What RestSource.jobs gave before: the body parsed whole, then its jobs read."""
    rel, parser = src.contract()
    try:
        raw, _ = src.client.get_json(f"/slurm/{parser}/jobs")
        return parse_rest_jobs(rel, parser, raw.decode())
    except ParseError as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("text", [(FIXTURES / "slurm" / "22.05" / "rest_jobs.json").read_text(),
                                  *ODD_ANSWERS])
def test_slurmrestd_jobs_read_as_sent_give_what_the_whole_body_gave(replay, token_file, tmp_path, text):
    src = source_22(replay, token_file, tmp_path, marks=False)
    replay.on("GET", "/slurm/v0.0.38/jobs", (200, text))
    want = _old_rest_jobs(src)
    before = len(replay.got)
    try:
        got = src.jobs()
    except ParseError as exc:
        got = type(exc), str(exc)
    assert got == want
    # one GET, or two when the stream was surprised and the body was read again whole
    assert len(replay.got) - before == (2 if surprised(text) else 1)


def test_a_slurmrestd_body_past_the_cap_is_stopped_and_named(replay, token_file, tmp_path):
    src = source_22(replay, token_file, tmp_path, marks=False)
    src.client.max_body_bytes = 1000
    replay.on("GET", "/slurm/v0.0.38/jobs", (200, squeue_like(5).decode()))
    with pytest.raises(RestError, match="more than the 1000 bytes allowed.*COSCHED_SLURM_MAX_JSON_MB"):
        src.jobs()


# -- GET nodes read as it is sent, as jobs are -----------------------------------------------------

def _old_rest_nodes(src):
    rel, parser = src.contract()
    try:
        raw, _ = src.client.get_json(f"/slurm/{parser}/nodes")
        return parse_rest_nodes(rel, parser, raw.decode())
    except ParseError as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("text", [(FIXTURES / "slurm" / "22.05" / "rest_nodes.json").read_text(),
                                  nodes_like(300).decode(), *ODD_NODE_ANSWERS])
def test_slurmrestd_nodes_read_as_sent_give_what_the_whole_body_gave(replay, token_file, tmp_path, text):
    src = source_22(replay, token_file, tmp_path, marks=False)
    replay.on("GET", "/slurm/v0.0.38/nodes", (200, text))
    want = _old_rest_nodes(src)
    before = len(replay.got)
    try:
        got = src.nodes()
    except ParseError as exc:
        got = type(exc), str(exc)
    assert got == want
    assert len(replay.got) - before == (2 if surprised(text, NodesStream) else 1)


# -- a body that trickles in is cut off, as a command that prints slowly is -------------------------

class Trickle:
    """A server that answers every request with headers at once, then a body of
    ``length`` bytes one byte every ``every_s`` (a stuck or hostile slurmrestd)."""

    def __init__(self, length: int = 400, every_s: float = 0.05):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.length, self.every_s = length, every_s
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn):
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % self.length)
            try:
                for _ in range(self.length):
                    if self.stop.wait(self.every_s):
                        return
                    conn.sendall(b" ")
            except OSError:
                return          # the client gave up

    def close(self):
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("way", ["whole", "streamed"])
def test_a_body_that_trickles_in_is_cut_off_within_the_timeout(token_file, way):
    trickle = Trickle()
    try:
        client = RestClient(trickle.url, str(token_file), timeout_s=0.5, retries=0)
        t0 = time.monotonic()
        with pytest.raises(RestError, match=r"`GET .*/slurm/v0.0.38/jobs`: the answer did not come "
                                            r"whole within 0.5 s \(\d+ bytes came\)") as exc:
            if way == "whole":
                client.request("GET", "/slurm/v0.0.38/jobs")
            else:
                client.stream("/slurm/v0.0.38/jobs", lambda: JobsStream("x"))
        # each byte came well within the socket's timeout: without the bound it reads on
        # for 400 x 50 ms (then fails: no error); with it, at most one socket timeout past 0.5 s
        assert time.monotonic() - t0 < 1.0 + 0.5
        assert exc.value.transient      # (tried again, as a timeout is)
    finally:
        trickle.close()


def test_the_readers_own_time_does_not_count_toward_the_bodys_timeout(replay, token_file):
    body = squeue_like(60).decode()
    replay.on("GET", "/slurm/v0.0.38/jobs", (200, body))

    class SlowReader(JobsStream):
        pieces = 0

        def feed(self, raw: bytes) -> None:
            SlowReader.pieces += 1
            time.sleep(0.05)
            super().feed(raw)

    client = RestClient(replay.url, str(token_file), timeout_s=0.3, retries=0)
    t0 = time.monotonic()
    jobs = client.stream("/slurm/v0.0.38/jobs", lambda: SlowReader("x")).finish()
    assert len(jobs) == 60 and SlowReader.pieces >= 8 and time.monotonic() - t0 > 0.4
    assert client.calls == 1
