"""Which HTTP server should carry the node agent's API? Latency under a crowd, side by side.

Issue 8 asked whether a well-kept server library would serve the agent better than the
standard library's ``http.server``. This runs the agent's own routes (``monitoring.api.Api``,
one NodeAgent on a mimic cgroup directory, one registered job) behind each candidate, in its
own process, and sends the same load from an asyncio client with ``--clients`` concurrent
connections (default 200):

* ``keepalive``: each client keeps one connection and alternates ``GET /v1/jobs/j1`` and
  ``PUT /v1/jobs/j1/quota`` (how the controller talks to an agent);
* ``fresh``: a new connection for every request (the crowd of the issue's item 5).

Candidates: ``stdlib`` (monitoring.api.AgentServer), ``waitress`` (WSGI, thread pool) and
``uvicorn`` (ASGI, one event loop); the last two only when installed
(``pip install waitress uvicorn``; they are not project dependencies). Rounds alternate the
servers so that load from other tenants of the machine falls on all of them alike; the
figures are medians over rounds. Usage::

    python testbed/bench_http_servers.py [--clients 200] [--requests 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOKEN = "bench-token-0123456789abcdef"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the server side (run in a child process) -------------------------------------------------
def _agent(tmp: str):
    from monitoring.agent import NodeAgent
    from monitoring.mimic import MimicV2FS

    fs = MimicV2FS(os.path.join(tmp, "cgroup2"))
    fs.write(fs.mount / "cgroup.subtree_control", "+cpu")
    agent = NodeAgent("cosched", layout=fs.layout(), fs=fs, state_dir=os.path.join(tmp, "state"),
                      max_lease_s=600)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    agent.register_job({"job_id": "j1", "pids": [sleeper.pid], "cores": 1})
    return agent, sleeper


def serve(kind: str) -> None:
    from monitoring.api import AgentServer, Api, encode

    tmp = tempfile.mkdtemp(prefix="cosched-bench-http-")
    agent, sleeper = _agent(tmp)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        if kind == "stdlib":
            sock.close()
            server = AgentServer(agent, "127.0.0.1:0", TOKEN)
            print(server.url, flush=True)
            server.serve_forever()
        elif kind == "waitress":
            import logging

            import waitress

            logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "Task queue depth is N"

            api = Api(agent, TOKEN)

            def app(environ, start_response):
                headers = {"Authorization": environ.get("HTTP_AUTHORIZATION"),
                           "Content-Length": environ.get("CONTENT_LENGTH")}
                status, body = api.handle(environ["REQUEST_METHOD"], environ["PATH_INFO"],
                                          headers.get, environ["wsgi.input"].read)
                data, ctype = encode(status, body)
                start_response(f"{status} X", [("Content-Type", ctype),
                                               ("Content-Length", str(len(data)))])
                return [data]

            sock.close()
            server = waitress.create_server(app, host="127.0.0.1", port=0, backlog=1024,
                                            connection_limit=256, channel_timeout=30)
            print(f"http://127.0.0.1:{server.effective_port}", flush=True)
            server.run()
        elif kind == "uvicorn":
            import uvicorn

            api = Api(agent, TOKEN)

            async def app(scope, receive, send):
                if scope["type"] != "http":
                    return
                body, more = b"", True
                while more:
                    msg = await receive()
                    body += msg.get("body", b"")
                    more = msg.get("more_body", False)
                headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
                status, out = api.handle(scope["method"], scope["raw_path"].decode(),
                                         lambda h: headers.get(h.lower()), lambda n: body[:n])
                data, ctype = encode(status, out)
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", ctype.encode()),
                                        (b"content-length", str(len(data)).encode())]})
                await send({"type": "http.response.body", "body": data})

            config = uvicorn.Config(app, lifespan="off", log_level="warning", backlog=1024,
                                    limit_concurrency=256, timeout_keep_alive=30)
            sock.listen(1024)
            print(f"http://127.0.0.1:{port}", flush=True)
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        sleeper.kill()
        agent.close()


# ---- the client side --------------------------------------------------------------------------
def _request(i: int) -> bytes:
    if i % 2 == 0:
        return b"GET /v1/jobs/j1 HTTP/1.1\r\nHost: a\r\n\r\n"
    body = json.dumps({"cpu_fraction": 0.3 if i % 4 == 1 else 0.6, "lease_s": 60}).encode()
    return (b"PUT /v1/jobs/j1/quota HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _read_answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return status


async def _crowd(port: int, clients: int, requests: int, fresh: bool) -> dict:
    lat: list[float] = []
    errors: dict[str, int] = {}
    start = asyncio.Event()

    async def one(c: int) -> None:
        await start.wait()
        reader = writer = None
        for k in range(requests):
            t0 = time.perf_counter()
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(_request(c + k))
                status = await asyncio.wait_for(_read_answer(reader), 30)
                if status != 200:
                    errors[f"HTTP {status}"] = errors.get(f"HTTP {status}", 0) + 1
                else:
                    lat.append(time.perf_counter() - t0)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                if writer is not None:
                    writer.close()
                writer = None
                continue
            if fresh:
                writer.close()
                writer = None
        if writer is not None:
            writer.close()

    tasks = [asyncio.create_task(one(c)) for c in range(clients)]
    t0 = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    lat.sort()
    q = lambda f: 1000 * lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")  # noqa: E731
    return {"ok": len(lat), "errors": errors, "median_ms": q(0.5), "p95_ms": q(0.95),
            "p99_ms": q(0.99), "per_s": len(lat) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--requests", type=int, default=5, help="requests per client and mode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default="stdlib,waitress,uvicorn")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return
    kinds = []
    for k in a.servers.split(","):
        if k == "stdlib" or __import__("importlib").util.find_spec(k) is not None:
            kinds.append(k)
        else:
            print(f"({k} is not installed: skipped)")
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(a.rounds):
        for kind in kinds if r % 2 == 0 else list(reversed(kinds)):
            proc = subprocess.Popen([sys.executable, __file__, "--serve", kind], stdout=subprocess.PIPE,
                                    text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
            try:
                port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
                for mode in ("keepalive", "fresh"):
                    res = asyncio.run(_crowd(port, a.clients, a.requests, mode == "fresh"))
                    results.setdefault((kind, mode), []).append(res)
            finally:
                proc.terminate()
                proc.wait(10)
    print(f"\n{a.clients} concurrent clients x {a.requests} requests each, median of {a.rounds} "
          "rounds (latency per request, ms)")
    print(f"{'server':<9} {'mode':<10} {'median':>8} {'p95':>8} {'p99':>8} {'req/s':>7} {'errors':>7}")
    for (kind, mode), rs in results.items():
        med = lambda k: statistics.median(x[k] for x in rs)  # noqa: E731
        errs = sum(sum(x["errors"].values()) for x in rs)
        print(f"{kind:<9} {mode:<10} {med('median_ms'):8.1f} {med('p95_ms'):8.1f} "
              f"{med('p99_ms'):8.1f} {med('per_s'):7.0f} {errs:>7}")


if __name__ == "__main__":
    main()
