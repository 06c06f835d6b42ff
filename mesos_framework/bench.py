"""``cosched bench mesos``: offers handled per second and gang ACCEPT latency, through the
real HTTP driver (mesos_framework.driver), the framework backend under the Controller, and
the emulated master (``cosched mesos emulate`` in its own process, on a free port).

* Offer run (``bench_offers``): what the budget means is how many offers the framework can
  take in and answer. Offers must therefore come faster than tasks end: the emulated master
  has many agents (64) and the framework's queue head waits for more than any agent has,
  so every offer is received, pooled, seen by a controller pass and declined with
  ``refuse_seconds`` 0 (the emulator then offers the resources again at once). Offers
  handled per second of wall time, and per CPU second of each process (the machine may be
  shared: wall-clock rates then fall, CPU per offer does not).
* Gang run (``bench_gangs``): real gangs, 2 x 2 cores over two agents each, running
  ``/bin/true``; the next gang's offers come as the previous gangs' tasks end. Latency is
  the backend's own measure, from the arrival of the last offer a gang needed to its ACCEPT
  calls answered by the master (``gang_latency_s``; ``gang_decision_s``: to the ACCEPTs
  issued).
* ``scripted`` (reference): an in-process HTTP server that streams prepared OFFERS events
  as fast as the socket takes them and answers every call 202: the framework side alone.

Budgets (issue #11): >= 1,000 offers/s, < 10 ms median.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
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


def _true_job(jid: str, cores: int = 1, nodes: int = 1) -> Job:  # noqa: D103
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


class _Emulator:
    """``cosched mesos emulate`` in its own process on a free port (its ready line read)."""

    def __init__(self, agents: int, cpus: float, extra: tuple[str, ...] = ()):
        import select

        argv = [sys.executable, "-m", "coscheduler.cli", "mesos", "emulate", "--agents", str(agents),
                "--cpus", str(cpus), "--listen", "127.0.0.1:0", "--log-level", "WARNING", *extra]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        line = b""
        deadline = time.monotonic() + 60
        while not line.endswith(b"\n"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("the emulator did not start: "
                                   + self.proc.stderr.read().decode(errors="replace")[-500:])
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                line += os.read(self.proc.stdout.fileno(), 1)
        self.url = json.loads(line)["url"]
        import psutil
        self.ps = psutil.Process(self.proc.pid)

    def cpu_s(self) -> float:
        t = self.ps.cpu_times()
        return t.user + t.system

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 15)
            self.proc.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)


def _emulator_available() -> str | None:
    try:
        import testbed.mesos  # noqa: F401 - the emulator's package
    except ImportError:
        return "testbed/mesos (cosched mesos emulate) is not installed"
    return None


def bench_offers(agents: int, seconds: float, refuse_s: float = 0.0, profile: bool = False) -> dict:
    """Offer handling through the real driver and the emulated master: ``agents`` agents,
    a framework whose queue head waits for more than any agent has, so that every offer is
    received, pooled, seen by a controller pass and declined (``refuse_s``, 0: no filter;
    the emulator then offers the resources again at once). Offers handled per second of
    wall time and per CPU second of the framework's process and of the emulator's."""
    from mesos_framework.framework import FrameworkConfig
    from mesos_framework.run import MesosRun

    why = _emulator_available()
    if why:
        return {"available": False, "why": why}
    emu = _Emulator(agents, 4.0, ("--isolation", "none", "--heartbeat", "5"))
    try:
        mr = MesosRun(emu.url, "space-sharing", pass_interval_s=0.05, config=FrameworkConfig(
            settle_s=0.2, hold_s=0.0, hold_jitter=0.0, refuse_s=refuse_s, idle_refuse_s=refuse_s))
        mr.submit([_true_job("waits", cores=4096, nodes=1)])
        mr.start()
        runner = threading.Thread(target=mr.run, kwargs={"until": lambda: False, "timeout_s": seconds + 30},
                                  daemon=True)
        runner.start()
        deadline = time.monotonic() + 30
        while mr.backend.counters["declined"] < agents and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)                                   # warm up
        if profile:
            threading.setprofile(lambda *a: None)
        c0, t0 = dict(mr.backend.counters), time.monotonic()
        cpu0, ecpu0 = time.process_time(), emu.cpu_s()
        passes0 = mr.controller.passes
        time.sleep(seconds)
        c1, t1 = dict(mr.backend.counters), time.monotonic()
        cpu1, ecpu1 = time.process_time(), emu.cpu_s()
        passes = mr.controller.passes - passes0
        mr.stop()
        runner.join(10)
        mr.close(failover=False)
    finally:
        emu.close()
    wall = t1 - t0
    handled = c1["declined"] - c0["declined"]
    received = c1["offers"] - c0["offers"]
    fw_cpu, emu_cpu = cpu1 - cpu0, ecpu1 - ecpu0
    return {"available": True, "agents": agents, "refuse_seconds": refuse_s, "seconds": round(wall, 3),
            "offers_received": received, "offers_handled": handled,
            "offers_per_s": handled / wall if wall > 0 else None,
            "framework_cpu_s": round(fw_cpu, 3), "emulator_cpu_s": round(emu_cpu, 3),
            "offers_per_framework_cpu_s": handled / fw_cpu if fw_cpu > 0 else None,
            "offers_per_emulator_cpu_s": handled / emu_cpu if emu_cpu > 0 else None,
            "controller_passes": passes, "offers_per_pass": handled / passes if passes else None}


def bench_gangs(gangs: int, agents: int = 4) -> dict:
    """Real gangs through the driver and the emulated master: ``gangs`` jobs of 2 x 2 cores
    (``/bin/true``) on ``agents`` agents of 2 cpus; each gang's ACCEPT latency is the
    backend's own measure, from the arrival of the last offer it needed to the end of its
    ACCEPT calls."""
    from mesos_framework.framework import FrameworkConfig
    from mesos_framework.run import MesosRun

    why = _emulator_available()
    if why:
        return {"available": False, "why": why}
    emu = _Emulator(agents, 2.0, ("--isolation", "none", "--heartbeat", "5"))
    try:
        mr = MesosRun(emu.url, "space-sharing", pass_interval_s=0.05,
                      config=FrameworkConfig(settle_s=0.2, hold_s=30.0, refuse_s=0.0, idle_refuse_s=1.0))
        mr.submit([_true_job(f"g{i}", cores=4, nodes=2) for i in range(gangs)])
        mr.start()
        t0, cpu0, ecpu0 = time.monotonic(), time.process_time(), emu.cpu_s()
        result = mr.run(timeout_s=60 + gangs)
        wall, fw_cpu, emu_cpu = time.monotonic() - t0, time.process_time() - cpu0, emu.cpu_s() - ecpu0
        lat = sorted(mr.backend.gang_latency_s)
        dec = sorted(mr.backend.gang_decision_s)
        mr.close(failover=False)
    finally:
        emu.close()
    done = sum(1 for o in result.outcomes if o.state == "completed")
    return {"available": True, "agents": agents, "gangs": len(lat), "completed": done,
            "seconds": round(wall, 3), "framework_cpu_s": round(fw_cpu, 3),
            "emulator_cpu_s": round(emu_cpu, 3),
            "gang_accept_median_ms": 1000 * statistics.median(lat) if lat else None,
            "gang_accept_p90_ms": 1000 * lat[int(0.9 * (len(lat) - 1))] if lat else None,
            "gang_accept_max_ms": 1000 * lat[-1] if lat else None,
            # the framework's own part: last needed offer -> its ACCEPTs issued
            "gang_decide_median_ms": 1000 * statistics.median(dec) if dec else None,
            "framework_cpu_ms_per_gang": round(1000 * fw_cpu / max(1, len(lat)), 3)}


@click.command("mesos")
@click.option("--agents", type=int, default=64, show_default=True,
              help="Agents of the emulated master in the offer run.")
@click.option("--seconds", type=float, default=5.0, show_default=True, help="Length of the offer run.")
@click.option("--refuse", type=float, default=0.0, show_default=True,
              help="refuse_seconds of the declines in the offer run (0: no filter).")
@click.option("--gangs", type=int, default=60, show_default=True, help="Gangs in the latency runs.")
@click.option("--offers", type=int, default=5000, show_default=True,
              help="Offers in the scripted burst (the framework side alone).")
@click.option("--no-scripted", is_flag=True, help="Skip the scripted-master reference run.")
@click.option("--json", "as_json", is_flag=True)
def mesos(agents, seconds, refuse, gangs, offers, no_scripted, as_json):
    """Offers handled per second and gang ACCEPT latency through the real HTTP driver and
    the emulated master (budgets: >= 1,000 offers/s, < 10 ms); with CPU time, since the
    machine may be shared."""
    off = bench_offers(agents, seconds, refuse)
    gang = bench_gangs(gangs)
    scripted = None if no_scripted else bench_scripted(offers, gangs)
    ok = off.get("available") and gang.get("available")
    out = {"offers_per_s": off.get("offers_per_s") if ok else None,
           "gang_accept_median_ms": gang.get("gang_accept_median_ms") if ok else None,
           "master": "emulator" if ok else None,
           "budget_offers_per_s": BUDGET_OFFERS_PER_S, "budget_gang_accept_ms": BUDGET_GANG_MS,
           "load_average": [round(x, 2) for x in os.getloadavg()],
           "offer_run": off, "gang_run": gang, "scripted": scripted}
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if not ok:
        click.echo(f"emulated master not available: {off.get('why') or gang.get('why')}")
    else:
        click.echo(f"offers: {off['offers_per_s']:,.0f}/s handled ({off['offers_handled']} in "
                   f"{off['seconds']:.1f} s, {agents} agents; framework {off['framework_cpu_s']:.2f} CPU s "
                   f"= {off['offers_per_framework_cpu_s'] or 0:,.0f} offers per CPU s; emulator "
                   f"{off['emulator_cpu_s']:.2f} CPU s)   budget >= {BUDGET_OFFERS_PER_S:,.0f}/s")
        click.echo(f"gangs:  ACCEPT median {gang['gang_accept_median_ms']:.2f} ms, p90 "
                   f"{gang['gang_accept_p90_ms']:.2f} ms, max {gang['gang_accept_max_ms']:.2f} ms "
                   f"(issued after {gang['gang_decide_median_ms']:.2f} ms median; {gang['gangs']} gangs "
                   f"of 2 x 2 cores; framework {gang['framework_cpu_ms_per_gang']:.1f} CPU ms per gang)"
                   f"   budget < {BUDGET_GANG_MS:g} ms")
    if scripted:
        click.echo(f"scripted master (framework side alone): {scripted['offers_per_s']:,.0f} offers/s, "
                   f"gang ACCEPT median {scripted['gang_accept_median_ms']:.2f} ms")
    click.echo(f"load average {os.getloadavg()[0]:.1f}")
