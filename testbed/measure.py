"""Measure jobs' CPU quotas and CPU use inside a node container, from the kernel's files.

``python -m testbed.measure --seconds S JOB...`` (run with ``docker exec`` in a node
container) prints one JSON object: per Slurm job id, the CPU quota the node agent set on
the job's cgroup (``cpu.cfs_quota_us / cpu.cfs_period_us``, in CPUs; null = no limit) and
the CPU it used over S seconds (CPUs, from ``cpuacct.usage`` of the job's Slurm cgroup, or
the sum of its processes' ``/proc/PID/stat`` times when that is absent), plus how often
the kernel throttled it. Nothing here trusts the agent's own report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

CPU = Path("/sys/fs/cgroup/cpu")
ACCT = Path("/sys/fs/cgroup/cpuacct")
TICK = os.sysconf("SC_CLK_TCK")


def _read(p: Path) -> str | None:
    try:
        return p.read_text()
    except OSError:
        return None


def job_cgroup(job: str, agent_root: str = "cosched") -> Path:
    return CPU / agent_root / job


def slurm_acct_dir(job: str) -> Path | None:
    for top in ACCT.glob("slurm*"):
        for d in top.glob(f"uid_*/job_{job}"):
            return d
    return None


def quota_cpus(cg: Path) -> float | None:
    q, p = _read(cg / "cpu.cfs_quota_us"), _read(cg / "cpu.cfs_period_us")
    if q is None or p is None or int(q) < 0:
        return None
    return int(q) / int(p)


def throttled(cg: Path) -> int | None:
    text = _read(cg / "cpu.stat")
    for line in (text or "").splitlines():
        if line.startswith("nr_throttled "):
            return int(line.split()[1])
    return None


def pids_of(cg: Path) -> list[int]:
    out: list[int] = []
    for root, _dirs, files in os.walk(cg):
        if "cgroup.procs" in files:
            text = _read(Path(root) / "cgroup.procs") or ""
            out += [int(x) for x in text.split()]
    return out


def cpu_seconds(job: str, cg: Path) -> tuple[float, str]:
    acct = slurm_acct_dir(job)
    if acct is not None:
        raw = _read(acct / "cpuacct.usage")
        if raw:
            return int(raw) / 1e9, "cpuacct"
    total = 0
    for pid in pids_of(cg):
        stat = _read(Path(f"/proc/{pid}/stat"))
        if stat:
            fields = stat.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICK, "proc"


def measure(jobs: list[str], seconds: float) -> dict:
    cgs = {j: job_cgroup(j) for j in jobs}
    before = {j: cpu_seconds(j, cgs[j]) for j in jobs}
    thr0 = {j: throttled(cgs[j]) for j in jobs}
    t0 = time.monotonic()
    time.sleep(seconds)
    dt = time.monotonic() - t0
    out = {}
    for j in jobs:
        used, source = cpu_seconds(j, cgs[j])
        t1 = throttled(cgs[j])
        out[j] = {
            "cgroup": str(cgs[j]), "exists": cgs[j].is_dir(),
            "quota_cpus": quota_cpus(cgs[j]),
            "cpu_used": round((used - before[j][0]) / dt, 4), "source": source,
            "throttled_periods": None if t1 is None or thr0[j] is None else t1 - thr0[j],
        }
    return {"seconds": round(dt, 3), "node_quota_cpus": quota_cpus(CPU), "jobs": out}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.measure")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("jobs", nargs="+")
    a = ap.parse_args(argv)
    for j in a.jobs:
        if not j.isdigit():
            print(json.dumps({"error": f"job id {j!r} is not a Slurm job id"}))
            return 2
    print(json.dumps(measure(a.jobs, a.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
