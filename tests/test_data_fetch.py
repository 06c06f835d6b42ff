"""cosched data fetch against a real HTTP server on 127.0.0.1 started here (this machine
reaches no archive): full download, resume after a truncated attempt, checksum refused,
bad names and URLs; and cosched data list."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from coscheduler.cli import main
from coscheduler.data.fetch import (CATALOGUE, Entry, FetchError, default_dir, fetch, resolve)

BODY = os.urandom(300_000)
SHA = hashlib.sha256(BODY).hexdigest()


class _Server:
    """Serves BODY at /t/TRACE.swf.gz with Range support; ``truncate_next`` makes the next
    full response stop half-way (the connection closes, as a dropped link would)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.truncate_next = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append({"path": self.path, "range": self.headers.get("Range")})
                if self.path != "/t/TRACE.swf.gz":
                    self.send_error(404)
                    return
                start = 0
                rng = self.headers.get("Range")
                if rng:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
                else:
                    self.send_response(200)
                body = BODY[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if outer.truncate_next:
                    outer.truncate_next = False
                    self.wfile.write(body[:len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/t/TRACE.swf.gz"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


def test_full_download_verified(server, tmp_path):
    res = fetch(Entry("t", server.url, SHA), tmp_path)
    assert res.path == tmp_path / "TRACE.swf.gz" and res.path.read_bytes() == BODY
    assert res.verified and res.sha256 == SHA and res.downloaded == len(BODY)
    assert not (tmp_path / "TRACE.swf.gz.part").exists()
    # a second fetch finds it complete and asks the server nothing
    n = len(server.requests)
    again = fetch(Entry("t", server.url, SHA), tmp_path)
    assert again.cached and len(server.requests) == n


def test_truncated_then_resumed_with_range(server, tmp_path):
    server.truncate_next = True
    with pytest.raises(FetchError, match="incomplete.*run the same command again to resume"):
        fetch(Entry("t", server.url, SHA), tmp_path)
    part = tmp_path / "TRACE.swf.gz.part"
    assert part.stat().st_size == len(BODY) // 2
    assert not (tmp_path / "TRACE.swf.gz").exists()
    res = fetch(Entry("t", server.url, SHA), tmp_path)
    assert server.requests[-1]["range"] == f"bytes={len(BODY) // 2}-"
    assert res.resumed_from == len(BODY) // 2 and res.downloaded == len(BODY) - len(BODY) // 2
    assert res.path.read_bytes() == BODY and res.verified and not part.exists()


def test_checksum_mismatch_keeps_nothing(server, tmp_path):
    wrong = "0" * 64
    with pytest.raises(FetchError, match=r"sha256 .* does not match the recorded 0{64}.*removed"):
        fetch(Entry("t", server.url, wrong), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_url_without_hash_is_kept_and_reported_unverified(server, tmp_path):
    r = CliRunner().invoke(main, ["data", "fetch", server.url, "--data-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(tmp_path / "TRACE.swf.gz")
    assert f"sha256 {SHA} (not verified" in r.stderr
    # with --sha256 it is checked: a wrong one refuses (and removes) nothing corrupt stays
    (tmp_path / "TRACE.swf.gz").unlink()
    r = CliRunner().invoke(main, ["data", "fetch", server.url, "--data-dir", str(tmp_path),
                                  "--sha256", "1" * 64, "--json"])
    assert r.exit_code == 1 and "does not match" in r.stderr and list(tmp_path.iterdir()) == []
    r = CliRunner().invoke(main, ["data", "fetch", server.url, "--data-dir", str(tmp_path),
                                  "--sha256", SHA, "--json"])
    out = json.loads(r.stdout)
    assert out["verified"] is True and out["sha256"] == SHA


def test_bad_names_and_urls(server, tmp_path):
    def run(*a):
        return CliRunner().invoke(main, ["data", "fetch", *a, "--data-dir", str(tmp_path)])
    r = run("no-such-trace")
    assert r.exit_code == 1 and "unknown trace 'no-such-trace'" in r.stderr and "hpc2n" in r.stderr
    r = run("ftp://example.org/x.swf")
    assert r.exit_code == 1 and "only http:// and https://" in r.stderr
    r = run(server.url.replace("TRACE", "MISSING"))
    assert r.exit_code == 1 and "HTTP 404" in r.stderr and "Traceback" not in r.output
    r = run("http://127.0.0.1:1/x.swf")
    assert r.exit_code == 1 and "cannot connect" in r.stderr
    r = run(server.url, "--sha256", "xyz")
    assert r.exit_code == 1 and "not 64 hexadecimal digits" in r.stderr
    assert not any(p.name.endswith(".swf.gz") for p in tmp_path.iterdir())


def test_catalogue_names_and_default_dir(tmp_path):
    e = resolve("HPC2N")
    assert e.url.endswith("/HPC2N-2002-2.2-cln.swf.gz") and e.sha256 == CATALOGUE["hpc2n"].sha256
    assert resolve("CTC-SP2-1996-3.1-cln.swf.gz").name == "ctc-sp2"
    assert default_dir({"COSCHED_DATA_DIR": str(tmp_path)}) == tmp_path
    assert default_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == \
        __import__("pathlib").Path("/c/coscheduler/traces")
    assert str(default_dir({"HOME": "/h"})) == "/h/.cache/coscheduler/traces"


def test_bundled_sha256_match_the_catalogue():
    from coscheduler.data import swf_trace
    for name in ("ctc-sp2", "hpc2n"):
        e = CATALOGUE[name]
        path = swf_trace(e.url.rsplit("/", 1)[1])
        assert hashlib.sha256(path.read_bytes()).hexdigest() == e.sha256


def test_data_list_json(tmp_path, monkeypatch):
    monkeypatch.setenv("COSCHED_DATA_DIR", str(tmp_path))
    (tmp_path / "HPC2N-2002-2.2-cln.swf.gz").write_bytes(b"x")
    (tmp_path / "other.swf.part").write_bytes(b"x")
    r = CliRunner().invoke(main, ["data", "list", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["data_dir"] == str(tmp_path) and len(out["bundled"]) == 4
    hp = next(c for c in out["catalogue"] if c["name"] == "hpc2n")
    assert hp["cached"] == str(tmp_path / "HPC2N-2002-2.2-cln.swf.gz")
    assert out["cached"] == [str(tmp_path / "HPC2N-2002-2.2-cln.swf.gz")]
    assert CliRunner().invoke(main, ["data", "list"]).exit_code == 0
