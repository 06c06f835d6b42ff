"""``cosched bench agent``: the monitoring agent's CPU overhead and quota latency, for real.

Starts ``cosched agent`` as its own process on a scratch cgroup root, registers N jobs
(each a launcher process with one lightly busy worker, so the agent follows 2N processes
and the box is not saturated), sets quotas on half of them, and measures:

* overhead: the agent process's own CPU time over ``--seconds`` at ``--interval`` (DESIGN.md
  budget: < 0.5 % of one core at 1 Hz with 64 jobs);
* latency: from a quota request (HTTP PUT, alternating values) to the kernel's
  ``cpu.cfs_quota_us`` / ``cpu.max`` holding the new value, seen by a thread spinning on the
  file; also to the HTTP answer, and for an in-process ``NodeAgent.set_quota`` call.

Needs root and a writable cgroup CPU controller.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import click

BUDGET_PERCENT = 0.5   # DESIGN.md: of one core, 64 jobs at 1 Hz

# Forks N jobs; each job forks one worker that is busy ~0.5 ms every 100 ms; prints the
# job (launcher) pids as one JSON line, then waits until killed.
_SPAWNER = r"""
import json, os, sys, time, signal
n = int(sys.argv[1])
pids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            while True:
                end = time.perf_counter() + 0.0005
                while time.perf_counter() < end:
                    pass
                time.sleep(0.1)
        while True:
            time.sleep(3600)
    pids.append(pid)
print(json.dumps(pids), flush=True)
signal.signal(signal.SIGTERM, lambda *a: os.killpg(0, signal.SIGKILL))
while True:
    time.sleep(3600)
"""


# A control beside the agent: a process that only wakes once per interval. What it costs
# is the machine's own price of a wake-up (in a VM it can be a millisecond: the vCPU halts
# while idle), which the agent pays at each tick too.
_WAKER = "import sys, time\nwhile True:\n    time.sleep(float(sys.argv[1]))\n"


def _thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds per thread of ``pid`` (schedstat: exact run time; else the tick counts)."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[int(tid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass   # the thread ended
    return out


def retouch_cost_us(interval: float, pages: int = 1024, repeat: int = 3) -> dict[str, float]:
    """Median microseconds to touch a page of this process's memory right away and after
    sleeping ``interval``: on a plain host both are well under a microsecond; in a VM whose
    host reclaims idle guest memory the second can be thousands of times the first, and
    every tick of an agent that sleeps between ticks pays it for each page it touches."""
    page = mmap.PAGESIZE
    buf = bytearray(pages * page)
    for i in range(0, len(buf), page):
        buf[i] = 1

    def touch() -> float:
        t = time.perf_counter()
        for i in range(0, len(buf), page):
            buf[i] ^= 1
        return (time.perf_counter() - t) * 1e6 / pages

    warm, idle = [], []
    for _ in range(repeat):
        touch()
        warm.append(touch())
        time.sleep(interval)
        idle.append(touch())
    return {"warm_us_per_page": round(statistics.median(warm), 3),
            "after_idle_us_per_page": round(statistics.median(idle), 3)}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _quota_path(info: dict, job: str) -> Path:
    d = Path(info["cgroup"]) / job
    return d / ("cpu.cfs_quota_us" if (d / "cpu.cfs_quota_us").exists() else "cpu.max")


def measure(jobs: int, seconds: float, interval: float, requests: int) -> dict:
    """Run the benchmark in a scratch folder (token, state and progress files of both
    agents) that is removed afterwards, whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="cosched-bench-agent-"))
    try:
        return _measure(tmp, jobs, seconds, interval, requests)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _measure(tmp: Path, jobs: int, seconds: float, interval: float, requests: int) -> dict:
    from monitoring.client import AgentClient

    import psutil

    rel = f"cosched-bench-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex + uuid.uuid4().hex
    (tmp / "token").write_text(token + "\n")
    agent = subprocess.Popen(
        [sys.executable, "-c", "from coscheduler.cli import main; main()", "agent",
         "--listen", "127.0.0.1:0", "--cgroup-root", rel, "--state-dir", str(tmp),
         "--token-file", str(tmp / "token"), "--interval", str(interval), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True)
    spawner = subprocess.Popen([sys.executable, "-c", _SPAWNER, str(jobs)], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    wakers = subprocess.Popen([sys.executable, "-c", _WAKER, str(interval)])
    out: dict = {"jobs": jobs, "processes": 2 * jobs, "interval_s": interval, "seconds": seconds}
    try:
        line = agent.stdout.readline()
        if not line:
            raise click.ClickException("the agent did not start (see its log above)")
        info = json.loads(line)
        job_pids = json.loads(spawner.stdout.readline())
        c = AgentClient(info["url"], token=token)
        proc = psutil.Process(agent.pid)
        c0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        for i, pid in enumerate(job_pids):
            c.register_job(f"bench-{i}", [pid], 1, walltime_s=3600, tasks_total=100)
            if i % 2 == 0:
                c.set_quota(f"bench-{i}", 0.5, lease_s=3600)
        out["registering"] = {"jobs": jobs, "quotas": (jobs + 1) // 2,
                              "agent_cpu_ms": round(1000 * (sum(proc.cpu_times()[:2]) - c0), 1),
                              "wall_ms": round(1000 * (time.monotonic() - t0), 1)}
        # let a few ticks pass so every worker has been seen and followed
        time.sleep(3 * interval)
        followed = sum(len(j["pids"]) for j in c.jobs())
        node0 = c.node()
        waker = psutil.Process(wakers.pid)
        th0, w0 = _thread_cpu_s(agent.pid), sum(waker.cpu_times()[:2])
        t0, c0 = time.monotonic(), sum(proc.cpu_times()[:2])
        time.sleep(seconds)
        t1, c1 = time.monotonic(), sum(proc.cpu_times()[:2])
        th1, w1 = _thread_cpu_s(agent.pid), sum(waker.cpu_times()[:2])
        tick_s = th1.get(agent.pid, 0.0) - th0.get(agent.pid, 0.0)   # the CLI ticks in main
        other_s = sum(v - th0.get(t, 0.0) for t, v in th1.items() if t != agent.pid)
        node1 = c.node()
        ticks = node1["ticks"] - node0["ticks"]
        out.update({
            "processes_followed": followed,
            "agent_cpu_percent_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 3),
            "ticks": ticks,
            "mean_tick_ms": round(1000 * node1["mean_tick_s"], 3),
            "budget_percent": BUDGET_PERCENT,
            "tick_thread_cpu_percent": round(100 * tick_s / (t1 - t0), 3),
            "http_threads_cpu_percent": round(100 * other_s / (t1 - t0), 3),
            "idle_waker_cpu_percent": round(100 * (w1 - w0) / (t1 - t0), 3),
        })
        out["within_budget"] = out["agent_cpu_percent_of_one_core"] < BUDGET_PERCENT

        # latency: request -> kernel file changed (spinning reader) and -> HTTP answer
        target = "bench-1"
        qpath = _quota_path(info, target)
        kernel_ms, answer_ms = [], []
        for i in range(requests):
            frac = 0.3 if i % 2 == 0 else 0.6
            want = str(int(frac * 100_000))
            done = threading.Event()
            t_start = time.perf_counter()
            th = threading.Thread(target=lambda f=frac: (c.set_quota(target, f, 3600), done.set()))
            th.start()
            seen = None
            while seen is None:
                if qpath.read_text().split()[0] == want:
                    seen = time.perf_counter()
            th.join()
            kernel_ms.append(1000 * (seen - t_start))
            answer_ms.append(1000 * (time.perf_counter() - t_start))
        out["quota_latency_ms"] = {
            "requests": requests,
            "http_to_kernel_median": round(statistics.median(kernel_ms), 3),
            "http_to_kernel_p95": round(_pct(kernel_ms, 0.95), 3),
            "http_answer_median": round(statistics.median(answer_ms), 3),
        }
        # Every job ends at once (a job array's end, a node drained): the agent's CPU
        # seconds from the kill until it has retired them all.
        c0 = sum(proc.cpu_times()[:2])
        t0 = time.monotonic()
        _end_jobs(spawner)
        while time.monotonic() - t0 < 30 and c.node()["jobs"]["running"]:
            time.sleep(interval / 10)
        left = c.node()["jobs"]["running"]
        out["all_jobs_end"] = {"jobs": jobs, "retired": jobs - left,
                               "agent_cpu_ms": round(1000 * (sum(proc.cpu_times()[:2]) - c0), 1),
                               "wall_ms": round(1000 * (time.monotonic() - t0), 1)}
        c.close()
    finally:
        # the jobs end first, so that the agent's clean stop finds empty cgroups to remove
        _end_jobs(spawner)
        wakers.kill()
        wakers.wait()
        time.sleep(0.2)
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=15)
        except subprocess.TimeoutExpired:
            agent.kill()
        _remove_scratch_root(rel)
    out["quota_latency_ms"].update(_inprocess_latency(requests, tmp))
    out["memory_retouch"] = retouch_cost_us(interval)
    return out


def _end_jobs(spawner: subprocess.Popen) -> None:
    """The bench's jobs (the spawner's process group) killed and reaped."""
    spawner.send_signal(signal.SIGTERM)
    try:
        os.killpg(spawner.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    spawner.wait()


def _remove_scratch_root(rel: str) -> None:
    """Last resort: remove the bench's own scratch cgroups if the agent left any."""
    from monitoring.cgroupfs import detect_layout

    lay = detect_layout()
    for mount in {lay.cpu_mount, lay.acct_mount} - {None}:
        root = Path(mount) / rel
        if root.is_dir():
            for d in sorted((p for p in root.iterdir() if p.is_dir()), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError:
                click.echo(f"warning: could not remove {root}", err=True)


def _inprocess_latency(requests: int, tmp: Path) -> dict:
    """NodeAgent.set_quota called directly (the local backend's path), to the kernel file."""
    from monitoring.agent import NodeAgent

    agent = NodeAgent(f"cosched-bench-{uuid.uuid4().hex[:8]}", state_dir=tmp / "inproc")
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        agent.register_job({"job_id": "lat", "pids": [p.pid], "cores": 1})
        qpath = agent.actuator.cpu.job("lat") / agent.actuator.quota_file
        ms = []
        for i in range(requests):
            frac = 0.3 if i % 2 == 0 else 0.6
            t0 = time.perf_counter()
            agent.set_quota("lat", frac, 3600)
            assert qpath.read_text().split()[0] == str(int(frac * 100_000))
            ms.append(1000 * (time.perf_counter() - t0))
        return {"inprocess_to_kernel_median": round(statistics.median(ms), 3),
                "inprocess_to_kernel_p95": round(_pct(ms, 0.95), 3)}
    finally:
        p.kill()
        p.wait()
        agent.tick()
        agent.close()


@click.command("agent")
@click.option("--jobs", type=click.IntRange(1, 1024), default=64, show_default=True)
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True), default=20.0,
              show_default=True, help="How long to measure the agent's CPU time.")
@click.option("--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Agent sampling interval, seconds.")
@click.option("--requests", type=click.IntRange(1, 100000), default=200, show_default=True,
              help="Quota requests for the latency figure.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def agent(jobs: int, seconds: float, interval: float, requests: int, as_json: bool) -> None:
    """Agent CPU overhead with N lightly busy jobs, and quota request -> kernel latency."""
    if os.geteuid() != 0:
        raise click.ClickException("needs root: the agent writes real cgroup files")
    from monitoring.cgroupfs import CgroupError, detect_layout

    try:
        detect_layout()
    except CgroupError as e:
        raise click.ClickException(str(e))
    r = measure(jobs, seconds, interval, requests)
    if as_json:
        click.echo(json.dumps(r))
        return
    lat = r["quota_latency_ms"]
    click.echo(f"agent overhead: {r['agent_cpu_percent_of_one_core']:.3f} % of one core "
               f"({r['jobs']} jobs, {r['processes_followed']} processes followed, "
               f"{r['interval_s']:g} s interval, {r['seconds']:g} s measured, {r['ticks']} ticks, "
               f"mean tick {r['mean_tick_ms']:.2f} ms) -- budget < {r['budget_percent']:g} %: "
               f"{'met' if r['within_budget'] else 'MISSED'}")
    click.echo(f"  of which the tick loop {r['tick_thread_cpu_percent']:.3f} %, the HTTP "
               f"threads {r['http_threads_cpu_percent']:.3f} %; beside it a process that only "
               f"wakes every {r['interval_s']:g} s costs {r['idle_waker_cpu_percent']:.3f} % "
               "(this machine's price of a wake-up)")
    m = r["memory_retouch"]
    click.echo(f"  this machine: touching a page of memory costs {m['warm_us_per_page']:.3f} us "
               f"at once, {m['after_idle_us_per_page']:.3f} us after {r['interval_s']:g} s idle "
               "(a VM whose host reclaims idle memory makes each tick pay for every page it "
               "touches)")
    click.echo(f"quota request -> kernel file ({lat['requests']} requests): HTTP median "
               f"{lat['http_to_kernel_median']:.3f} ms (p95 {lat['http_to_kernel_p95']:.3f}), "
               f"HTTP answer median {lat['http_answer_median']:.3f} ms; in-process median "
               f"{lat['inprocess_to_kernel_median']:.3f} ms (p95 {lat['inprocess_to_kernel_p95']:.3f})")
    reg = r["registering"]
    click.echo(f"registering {reg['jobs']} jobs ({reg['quotas']} quotas set) over HTTP: "
               f"{reg['wall_ms']:.0f} ms, {reg['agent_cpu_ms']:.0f} ms of the agent's CPU")
    end = r.get("all_jobs_end")
    if end:
        click.echo(f"all {end['jobs']} jobs ending at once: {end['retired']} retired in "
                   f"{end['wall_ms']:.0f} ms, {end['agent_cpu_ms']:.0f} ms of the agent's CPU")
