"""``cosched testbed run``: the scaled paper mix through real Slurm, once per policy.

The host side only orchestrates. For each repetition and policy it starts the runner
(``testbed/runner.py``) in the controller container with ``docker exec``: the runner
submits the stage jobs to slurmctld, drives them with the coscheduler controller and the
Slurm backend (quotas through the node agents), and writes its measurements to
``/results/RUN/POLICY-rR.json`` (the host's ``INSTANCE/results/RUN``). The host collects
them into ``run.json`` with the setup, for ``cosched testbed report``.

Ctrl-C: the runner in the container is told to stop (SIGINT by its pid file): it
cancels the run's Slurm jobs and gives every quota back; then the host says so and exits
130. The testbed stays up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from coscheduler.experiments.paper import POLICIES, canonical_policy
from coscheduler.model import InvalidInput
from coscheduler.outputs import write_text

from .cluster import Cluster
from .compose import RESULTS_MOUNT
from .experiment import check_fits, get_workload
from .instance import TestbedError, container_health

Say = Callable[[str], None]
PY = "/opt/cosched/bin/python"


@dataclass
class RunResult:
    run_id: str
    path: Path
    data: dict
    interrupted: bool = False


def parse_policies(text: str | Sequence[str]) -> list[str]:
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    if not items:
        raise InvalidInput("--policies: give at least one of " + ", ".join(POLICIES))
    out = []
    for p in items:
        c = canonical_policy(p)
        if c not in out:
            out.append(c)
    # Space sharing first: its runtimes are the other policies' "alone" reference.
    return sorted(out, key=lambda p: POLICIES.index(p))


def results_root(cluster: Cluster) -> Path:
    return cluster.folder / "results"


def latest_run(results: Path) -> Path | None:
    runs = sorted(p for p in results.glob("*/run.json")) if results.is_dir() else []
    return runs[-1].parent if runs else None


def run(instance: str | None = None, workload: str = "paper-small",
        policies: str | Sequence[str] = POLICIES, repeat: int = 1, scale: float | None = None,
        seed: int = 0, timeout_s: float = 3600.0, say: Say = lambda _m: None) -> RunResult:
    cluster = Cluster.open(instance)
    spec = cluster.spec
    w = get_workload(workload)
    check_fits(w, spec)
    pols = parse_policies(policies)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= 20:
        raise InvalidInput(f"--repeat must be an integer in 1..20, got {repeat!r}")
    scale = w.scale if scale is None else scale
    if not (isinstance(scale, (int, float)) and 0 < scale <= 1):
        raise InvalidInput(f"--scale must lie in (0, 1], got {scale!r}")
    health = container_health(cluster.engine, spec)
    bad = {s: h for s, h in health.items() if h["health"] != "healthy"}
    if bad:
        raise TestbedError("the testbed is not healthy ("
                           + ", ".join(f"{s} {h['state']}/{h['health']}" for s, h in bad.items())
                           + "): `cosched testbed status` shows more; `down` and `up` again")
    run_id = time.strftime("%Y%m%d-%H%M%S")
    rdir = results_root(cluster) / run_id
    rdir.mkdir(parents=True, exist_ok=True)
    setup = {"instance": spec.instance, "workload": w.name, "workload_about": w.about,
             "mix": [list(m) for m in w.mix()], "factor": w.factor, "nodes": spec.nodes,
             "cpus": spec.cpus, "cpu_limit": spec.cpu_limit, "cpu_per_core": spec.cpu_per_core,
             "cores": spec.nodes * spec.cpus, "paper_cores": w.paper_cores(spec), "scale": scale,
             "seed": seed, "policies": pols, "repeat": repeat, "suite": spec.suite,
             "image_tag": spec.tag, "guest_weight": spec.guest_weight}
    data: dict = {"run_id": run_id, "setup": setup, "started": time.time(), "runs": [],
                  "load_average": {"start": list(os.getloadavg())}}
    say(f"run {run_id}: {w.name} at scale {scale:g} on {spec.nodes} x {spec.cpus} CPUs, "
        f"policies {', '.join(pols)}, {repeat} repetition(s); results in {rdir}")
    interrupted = False
    try:
        for k in range(repeat):
            for policy in pols:
                name = f"{policy}-r{k}"
                say(f"{name}: submitting {len(w.mix())} workflows through Slurm")
                out = _run_one(cluster, run_id, name, policy, w.name, scale, k, seed, timeout_s,
                               say)
                data["runs"].append(out)
                say(f"{name}: makespan {out['makespan_s']:.0f} s, mean wait "
                    f"{out['mean_wait_s']:.1f} s, CPU util {100 * out['cpu_util']:.0f} %, "
                    f"{out['coallocations']} co-allocations, {out['failed']} failed")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        data["finished"] = time.time()
        data["interrupted"] = interrupted
        data["load_average"]["end"] = list(os.getloadavg())
        write_text(rdir / "run.json", json.dumps(data, indent=1, allow_nan=False) + "\n")
    if interrupted:
        raise KeyboardInterrupt
    return RunResult(run_id, rdir, data, interrupted)


def _run_one(cluster: Cluster, run_id: str, name: str, policy: str, workload: str,
             scale: float, repeat_index: int, seed: int, timeout_s: float, say: Say) -> dict:
    base = f"{RESULTS_MOUNT}/{run_id}"
    out_file = f"{base}/{name}.json"
    pid_file = f"{base}/{name}.pid"
    argv = [cluster.engine.docker_bin, "exec", cluster.spec.container("controller"), PY, "-m",
            "testbed.runner", "--policy", policy, "--workload", workload, "--scale", repr(scale),
            "--repeat-index", str(repeat_index), "--seed", str(seed), "--tag", name,
            "--out", out_file, "--pid-file", pid_file, "--learner-db", f"{base}/asax.db",
            "--timeout", repr(float(timeout_s))]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)   # Ctrl-C reaches us, not docker exec
    tail: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            line = line.rstrip()
            tail.append(line)
            del tail[:-30]
            if line.startswith("runner: "):
                say(f"{name}: {line[len('runner: '):]}")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        say(f"{name}: interrupted: stopping the runner (it cancels the run's jobs and gives "
            "every quota back)")
        _stop_runner(cluster, pid_file)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.join(timeout=5)
        raise
    reader.join(timeout=5)
    host_file = results_root(cluster) / run_id / f"{name}.json"
    if rc != 0 or not host_file.exists():
        raise TestbedError(f"the runner for {name} failed (exit {rc}):\n" + "\n".join(tail[-15:]))
    return json.loads(host_file.read_text())


def _stop_runner(cluster: Cluster, pid_file: str) -> None:
    """SIGINT to the runner inside the controller container, by the pid it wrote."""
    host_pid = results_root(cluster) / Path(pid_file).relative_to(RESULTS_MOUNT)
    try:
        pid = int(host_pid.read_text().strip())
    except (OSError, ValueError):
        return
    cluster.exec("controller", "kill", f"-{int(signal.SIGINT)}", str(pid), check=False, timeout=20)


__all__ = ["RunResult", "latest_run", "parse_policies", "run"]
