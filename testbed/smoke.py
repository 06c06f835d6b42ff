"""``cosched testbed smoke``: the testbed end to end in a few minutes, then gone.

Steps: the engine (installed and started when missing), ``up`` of a one-node testbed
(images built or reused), two busy jobs submitted to Slurm's co-scheduling partition
(held by the submit hook) and started by the coscheduler controller (Static policy,
over the Slurm backend, in the controller container: testbed/pair.py), the second as a
guest on the first one's cores with 2 % of their CPU quota lent through the node agent;
the quotas and the CPU each job really got measured from the kernel's files inside the
node container; the controller cancels the pair and gives the quotas back; ``down``. Every step is timed; the first
failure stops the run, and ``down`` runs in any case (also on Ctrl-C).
"""

from __future__ import annotations

import json
import subprocess
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from . import instance
from .engine import ensure_engine

Say = Callable[[str], None]
# Small enough that the guest's quota binds even when the shared machine is busy (then
# each process gets well under a CPU, and a 50 % quota might never be reached).
GUEST_FRACTION = 0.02
NODE_CPUS = 4
NODE_CPU_LIMIT = 1.0
MEASURE_S = 6.0
HOLD_S = 12.0   # the pair's controller renews the leases this long (covers the measurement)


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class SmokeResult:
    ok: bool = False
    steps: list[Step] = field(default_factory=list)
    instance: str | None = None
    seconds: float = 0.0
    built: bool | None = None
    measured: dict = field(default_factory=dict)

    def as_json(self) -> dict:
        return {"ok": self.ok, "instance": self.instance, "seconds": round(self.seconds, 1),
                "images_built": self.built, "measured": self.measured,
                "steps": [{"name": s.name, "ok": s.ok, "seconds": round(s.seconds, 1),
                           "detail": s.detail} for s in self.steps]}


class _Failed(Exception):
    pass


def check_split(measured: dict, host: str, guest: str, fraction: float, job_cpus: float) -> list[str]:
    """Problems with a measured host/guest split (empty when it is right). Quotas must be
    what was asked to within 2 %; CPU use must follow them: the guest throttled by the
    kernel, at most near its quota and well below the host (the two would split the node
    evenly without quotas)."""
    problems = []
    jobs = measured["jobs"]
    want = {host: (1 - fraction) * job_cpus, guest: fraction * job_cpus}
    for j, q in want.items():
        got = jobs[j]["quota_cpus"]
        if got is None or abs(got - q) > 0.02 * q + 0.002:
            problems.append(f"job {j}: kernel quota {got} CPUs, asked {q:.3f}")
    h, g = jobs[host]["cpu_used"], jobs[guest]["cpu_used"]
    if g > want[guest] * 1.25 + 0.02:
        problems.append(f"guest {guest} used {g:.3f} CPUs, above its quota {want[guest]:.3f}")
    thr = jobs[guest].get("throttled_periods")
    if not thr:
        problems.append(f"guest {guest} was never throttled by the kernel ({thr!r} periods)")
    if h + g < 3 * want[guest]:
        # Both jobs got less than the guest's quota would hold back: nothing to compare.
        problems.append(f"this machine was too busy to show the split: the pair got "
                        f"{h + g:.3f} CPUs in all (guest quota {want[guest]:.3f})")
    elif h < 1.8 * g:
        problems.append(f"host {host} used {h:.3f} CPUs, not clearly above the guest's {g:.3f} "
                        f"(quotas {want[host]:.2f} / {want[guest]:.2f})")
    return problems


def smoke(say: Say = lambda _m: None, keep: bool = False, install: bool = True,
          suite: str = "bookworm", base: str = "auto") -> SmokeResult:
    from .cluster import Cluster

    res = SmokeResult()
    t0 = time.monotonic()
    cluster: Cluster | None = None

    def step(name: str, fn: Callable[[], str | None]) -> None:
        s0 = time.monotonic()
        say(f"smoke: {name}")
        try:
            detail = fn() or ""
        except KeyboardInterrupt:
            res.steps.append(Step(name, False, time.monotonic() - s0, "interrupted"))
            raise
        except Exception as exc:  # every failure is reported as the step's
            res.steps.append(Step(name, False, time.monotonic() - s0,
                                  str(exc) or traceback.format_exc(limit=2)))
            raise _Failed() from None
        res.steps.append(Step(name, True, time.monotonic() - s0, detail))

    jobs: dict[str, str] = {}
    pair_proc: list[subprocess.Popen] = []
    try:
        step("engine", lambda: f"Docker {ensure_engine(install=install, say=say).server_version}")

        def do_up() -> str:
            nonlocal cluster
            up = instance.up(nodes=1, cpus=NODE_CPUS, cpu_limit=NODE_CPU_LIMIT, suite=suite,
                             base=base, install=install, say=say)
            res.instance, res.built = up.spec.instance, up.built
            cluster = Cluster.open(up.spec.instance)
            return (f"instance {up.spec.instance}, {'built' if up.built else 'cached'} images, "
                    f"{up.seconds:.1f} s")

        step("up", do_up)
        assert cluster is not None
        job_cpus = NODE_CPUS * cluster.spec.cpu_per_core

        def coallocate() -> str:
            # The controller (Static, guest quota GUEST_FRACTION) over the Slurm backend,
            # inside the controller container; it prints the pair once Slurm runs both.
            p = subprocess.Popen(
                [cluster.engine.docker_bin, "exec", cluster.spec.container("controller"),
                 "/opt/cosched/bin/python", "-m", "testbed.pair", "--fraction",
                 str(GUEST_FRACTION), "--cores", str(NODE_CPUS), "--hold", str(HOLD_S)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True)
            pair_proc.append(p)
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                err = p.stderr.read() if p.stderr else ""
                raise RuntimeError(f"the controller formed no pair: {err.strip()[-800:]}")
            paired = json.loads(line)
            jobs.update(host=paired["host"], guest=paired["guest"])
            return (f"Slurm jobs {paired['host']} (host, quota {paired['host_quota']:.2f}) and "
                    f"{paired['guest']} (guest, quota {paired['guest_quota']:.2f}) on "
                    f"{paired['node']} after {paired['seconds']:.1f} s")

        step("co-allocate a pair: Slurm + controller + agent", coallocate)

        def measure() -> str:
            time.sleep(1.0)   # let the quotas settle for a period or two
            m = cluster.measure("node1", [jobs["host"], jobs["guest"]], MEASURE_S)
            res.measured = m
            problems = check_split(m, jobs["host"], jobs["guest"], GUEST_FRACTION, job_cpus)
            h, g = (m["jobs"][jobs[r]] for r in ("host", "guest"))
            summary = (f"host quota {h['quota_cpus']} used {h['cpu_used']:.3f} CPUs; guest quota "
                       f"{g['quota_cpus']} used {g['cpu_used']:.3f} CPUs")
            if problems:
                raise AssertionError("; ".join(problems) + f" ({summary})")
            return summary

        step("measure inside the node container", measure)

        def finish() -> str:
            p = pair_proc[0]
            out, err = p.communicate(timeout=HOLD_S + 60)
            if p.returncode != 0:
                raise RuntimeError(f"the pair's controller exited {p.returncode}: {err.strip()[-800:]}")
            return "both jobs cancelled, quotas given back"

        step("controller cancels the pair", finish)
        res.ok = True
    except _Failed:
        pass
    finally:
        for p in pair_proc:   # a failed or interrupted smoke: the pair's controller must go
            if p.poll() is None:
                p.kill()
        if cluster is not None and jobs:
            cluster.exec("controller", "scancel", *jobs.values(), check=False)
        if res.instance is not None and not keep:
            s0 = time.monotonic()
            try:
                say("smoke: down")
                d = instance.down(res.instance)
                res.steps.append(Step("down", True, time.monotonic() - s0,
                                      ", ".join(f"{len(v)} {k}" for k, v in d.removed.items())))
            except Exception as exc:
                res.ok = False
                res.steps.append(Step("down", False, time.monotonic() - s0, str(exc)))
        res.seconds = time.monotonic() - t0
    return res


__all__ = ["SmokeResult", "check_split", "smoke"]
