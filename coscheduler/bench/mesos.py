"""``cosched bench mesos``: offers handled per second and gang ACCEPT latency, through the
real HTTP driver (mesos_framework.driver) and the framework backend under the Controller.

Two masters:

* ``emulator`` (when ``cosched mesos emulate`` exists, testbed/mesos): the emulated master
  runs as its own process on a free port with ``--agents`` agents; the framework runs a
  queue of short 1-core jobs and 2-agent gangs of ``/bin/true``. offers_per_s = offers the
  framework received and answered (accepted or declined) per second of the run.
* ``scripted`` (always): an in-process HTTP server that streams prepared OFFERS events as
  fast as the socket takes them and answers every call 202. It measures the framework
  side alone: RecordIO decoding, JSON, the callbacks, the offer pool, the controller pass
  and the HTTP ACCEPT/DECLINE calls, with no master logic in the way.

Gang accept latency is the backend's own measure: from the arrival of the last offer a gang
needed to the end of its ACCEPT calls (``MesosBackend.gang_latency_s``). Budgets (issue
#11): >= 1,000 offers/s, < 10 ms median.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import click

from coscheduler.model import Job

BUDGET_OFFERS_PER_S = 1000.0
BUDGET_GANG_MS = 10.0


def _frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return str(len(data)).encode() + b"\n" + data


class _Scripted:
    """Streams ``script()``'s events after SUBSCRIBED; answers calls 202 and counts them."""

    def __init__(self, script):
        self.calls: dict[str, int] = {}
        bench = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("type") != "SUBSCRIBE":
                    bench.calls[body["type"]] = bench.calls.get(body["type"], 0) + 1
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Mesos-Stream-Id", "bench")
                self.end_headers()

                def send(data: bytes):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()

                send(_frame({"type": "SUBSCRIBED", "subscribed": {
                    "framework_id": {"value": "bench"}, "heartbeat_interval_seconds": 5}}))
                try:
                    for item in script():
                        if isinstance(item, float):
                            time.sleep(item)
                        else:
                            send(item)
                    while True:   # keep the stream open with heartbeats until closed
                        time.sleep(1)
                        send(_frame({"type": "HEARTBEAT"}))
                except OSError:
                    return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _offer(oid: str, agent: str, cpus: float) -> dict:
    return {"id": {"value": oid}, "framework_id": {"value": "bench"}, "agent_id": {"value": agent},
            "hostname": f"host-{agent}", "resources": [
                {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
                {"name": "mem", "type": "SCALAR", "scalar": {"value": 4096}}]}


def _true_job(jid: str, cores: int = 1, nodes: int = 1) -> Job:
    return Job(jid, cores, 60.0, "bench/true", nodes=nodes, command=("/bin/true",))


def bench_scripted(offers: int, gangs: int) -> dict:
    """The framework side alone, against a streaming script (see the module docstring)."""
    from mesos_framework.framework import FrameworkConfig
    from mesos_framework.run import MesosRun

    # Part 1: a burst of offers no job needs: each is received, pooled and declined.
    batch = 50
    events = [_frame({"type": "OFFERS", "offers": {"offers": [
        _offer(f"B{i + k}", f"A{(i + k) % 16}", 4) for k in range(batch)]}})
        for i in range(0, offers, batch)]
    master = _Scripted(lambda: [0.3] + events)
    mr = MesosRun(master.url, "space-sharing", config=FrameworkConfig(settle_s=0.0, hold_s=0.0),
                  pass_interval_s=0.01)
    mr.submit([_true_job("never-fits", cores=1000, nodes=1)])   # keeps the framework "busy"
    mr.start()
    t0 = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        mr.step()
        c = mr.backend.counters
        if t0 is None and c["offers"] > 0:
            t0 = time.monotonic()
        if c["declined"] >= offers:
            break
        mr.backend.changed.wait(0.01)
    handled_s = time.monotonic() - (t0 or time.monotonic())
    handled = mr.backend.counters["declined"]
    mr.close(failover=True)
    master.close()

    # Part 2: gangs of 2 x 2 cores over two agents; the second half arrives 20 ms later.
    def script():
        yield 0.3
        for g in range(gangs):
            yield _frame({"type": "OFFERS", "offers": {"offers": [_offer(f"G{g}a", "A1", 2)]}})
            yield 0.02
            yield _frame({"type": "OFFERS", "offers": {"offers": [_offer(f"G{g}b", "A2", 2)]}})
            yield 0.03

    master = _Scripted(script)
    mr = MesosRun(master.url, "space-sharing", config=FrameworkConfig(settle_s=0.0, hold_s=30.0),
                  pass_interval_s=0.5)
    mr.submit([_true_job(f"gang{g}", cores=4, nodes=2) for g in range(gangs)])
    mr.start()
    deadline = time.monotonic() + 30 + gangs * 0.1
    while len(mr.backend.gang_latency_s) < gangs and time.monotonic() < deadline:
        mr.backend.changed.wait(0.5)
        mr.step()
    lat = list(mr.backend.gang_latency_s)
    mr.close(failover=True)
    master.close()
    return {"offers": handled, "offers_per_s": handled / handled_s if handled_s > 0 else None,
            "gangs": len(lat), "gang_accept_median_ms": 1000 * statistics.median(lat) if lat else None,
            "gang_accept_p90_ms": 1000 * sorted(lat)[int(0.9 * (len(lat) - 1))] if lat else None}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_emulator(agents: int, seconds: float) -> dict:
    """Against ``cosched mesos emulate`` in its own process (None when it is not installed)."""
    try:
        import testbed.mesos  # noqa: F401 - the emulator's package
    except ImportError:
        return {"available": False, "why": "testbed/mesos (cosched mesos emulate) is not installed"}
    from mesos_framework.framework import FrameworkConfig
    from mesos_framework.run import MesosRun

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "coscheduler.cli", "mesos", "emulate",
                             "--agents", str(agents), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None:
                    return {"available": False, "why": proc.stderr.read().decode()[-500:]}
                time.sleep(0.05)
        mr = MesosRun(f"http://127.0.0.1:{port}", "space-sharing",
                      config=FrameworkConfig(settle_s=0.2, hold_s=0.5, refuse_s=0.0, idle_refuse_s=0.0),
                      pass_interval_s=0.05)
        n = int(seconds * 50)
        mr.submit([_true_job(f"t{i}") for i in range(n)] +
                  [_true_job(f"g{i}", cores=2, nodes=2) for i in range(n // 10)])
        mr.start()
        t0 = time.monotonic()
        mr.run(timeout_s=seconds)
        dt = time.monotonic() - t0
        c = dict(mr.backend.counters)
        lat = list(mr.backend.gang_latency_s)
        mr.close(failover=False)
        return {"available": True, "agents": agents, "seconds": dt, "offers": c["offers"],
                "offers_per_s": c["offers"] / dt if dt > 0 else None,
                "tasks_launched": c["launched_tasks"],
                "gang_accept_median_ms": 1000 * statistics.median(lat) if lat else None}
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


@click.command("mesos")
@click.option("--offers", type=int, default=5000, show_default=True, help="Offers in the scripted burst.")
@click.option("--gangs", type=int, default=60, show_default=True, help="Gangs in the scripted latency run.")
@click.option("--agents", type=int, default=4, show_default=True, help="Agents of the emulated master.")
@click.option("--seconds", type=float, default=10.0, show_default=True, help="Length of the emulator run.")
@click.option("--json", "as_json", is_flag=True)
def mesos(offers, gangs, agents, seconds, as_json):
    """Offers/s and gang ACCEPT latency through the real HTTP driver (budgets: >= 1,000
    offers/s, < 10 ms)."""
    emu = bench_emulator(agents, seconds)
    scripted = bench_scripted(offers, gangs)
    main = emu if emu.get("available") else scripted
    out = {"offers_per_s": main["offers_per_s"], "gang_accept_median_ms": main["gang_accept_median_ms"],
           "master": "emulator" if emu.get("available") else "scripted",
           "budget_offers_per_s": BUDGET_OFFERS_PER_S, "budget_gang_accept_ms": BUDGET_GANG_MS,
           "emulator": emu, "scripted": scripted}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    for name, r in (("emulator", emu), ("scripted", scripted)):
        if not r.get("available", True):
            click.echo(f"{name:9s} not run: {r['why']}")
            continue
        ops = r.get("offers_per_s")
        gl = r.get("gang_accept_median_ms")
        click.echo(f"{name:9s} offers/s {ops if ops is None else f'{ops:,.0f}':>10}   "
                   f"gang ACCEPT median {gl if gl is None else f'{gl:.2f} ms'}")
    click.echo(f"budgets: >= {BUDGET_OFFERS_PER_S:,.0f} offers/s, < {BUDGET_GANG_MS:g} ms")
