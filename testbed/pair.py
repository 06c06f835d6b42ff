"""The smoke test's co-allocated pair, inside the controller container:
``python -m testbed.pair --fraction F --cores C [--hold S]``.

Submits two busy jobs of C cores to the co-scheduling partition (the submit hook holds
them), then runs the coscheduler controller with the Static policy (guest quota F) over
the Slurm backend: the first job starts alone on a node, the second has no free cores
left and starts as its guest on the same cores, its quota lent through the node agent.
Once Slurm runs both, it prints one JSON line ``{"host", "guest", "node", "host_quota",
"guest_quota", "seconds"}`` and keeps the controller stepping (renewing the quota leases)
for ``--hold`` seconds while the host side measures inside the node container; then it
cancels both jobs and gives the quotas back. Exit 1 with a message when the pair does not
form within ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

CONF = Path("/etc/cosched-testbed")
BURN = ("-c", "while True: pass")


def main(argv: list[str] | None = None) -> int:
    from coscheduler.controller import Controller, ControllerConfig
    from coscheduler.model import Job, StageType
    from coscheduler.policies.coalloc import make_policy
    from coscheduler.recorder import MemoryRecorder
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.commands import SlurmCommands
    from slurm_plugin.connect import agent_clients
    from slurm_plugin.source import make_source
    from slurm_plugin.submit import SubmitOptions, submit_jobs

    from .slurm_files import PARTITION

    ap = argparse.ArgumentParser(prog="python -m testbed.pair")
    ap.add_argument("--fraction", type=float, required=True)
    ap.add_argument("--cores", type=int, required=True)
    ap.add_argument("--hold", type=float, default=20.0)
    ap.add_argument("--timeout", type=float, default=90.0)
    a = ap.parse_args(argv)

    cluster = json.loads((CONF / "cluster.json").read_text())
    cmds = SlurmCommands("/etc/slurm/slurm.conf")
    usage = Path("/shared/usage/smoke")
    usage.mkdir(parents=True, exist_ok=True)
    backend = SlurmBackend(make_source(cmds), partition=PARTITION,
                           agents=agent_clients(cluster["nodes"]), usage_dir=str(usage))
    jobs = [Job(job_id=f"smoke-{role}", cores=a.cores, walltime_s=600.0,
                job_class=f"smoke/{role}", stage_type=StageType.PARALLEL,
                command=(sys.executable, *BURN)) for role in ("host", "guest")]
    sub = submit_jobs(cmds, jobs, SubmitOptions(partition=PARTITION, cosched=True,
                                                output_dir="/shared/runs/smoke",
                                                usage_dir=str(usage)))
    host, guest = (str(s.slurm_job_id) for s in sub)
    order = {host: 0, guest: 1}
    controller = Controller(backend, make_policy("static", static_fraction=a.fraction),
                            MemoryRecorder(), lambda js, now: sorted(js, key=lambda j: order.get(j.job_id, 9)),
                            ControllerConfig())
    t0 = time.monotonic()
    try:
        paired = None
        while paired is None:
            controller.step()
            running = {r.job_id: r for r in backend.running()}
            slurm = {str(j.job_id): j.state for j in backend.source.jobs()}
            g = running.get(guest)
            if g is not None and g.host_job == host and slurm.get(host) == "RUNNING" \
                    and slurm.get(guest) == "RUNNING":
                paired = {"host": host, "guest": guest, "node": g.allocation.nodes[0],
                          "host_quota": running[host].quota_fraction,
                          "guest_quota": g.quota_fraction,
                          "seconds": round(time.monotonic() - t0, 2)}
                break
            if time.monotonic() - t0 > a.timeout:
                print(f"pair: no co-allocation within {a.timeout:g} s (Slurm: host {slurm.get(host)}, "
                      f"guest {slurm.get(guest)}; backend notes: {backend.errors[-3:]})",
                      file=sys.stderr)
                return 1
            time.sleep(0.5)
        print(json.dumps(paired), flush=True)
        end = time.monotonic() + a.hold
        while time.monotonic() < end:   # keep renewing the leases while the host measures
            controller.step()
            time.sleep(1.0)
        return 0
    finally:
        for jid in (host, guest):
            try:
                backend.source.cancel(int(jid))
            except Exception as exc:  # noqa: BLE001 - say it, go on
                print(f"pair: cancelling {jid}: {exc}", file=sys.stderr)
        backend.restore_quotas()


if __name__ == "__main__":
    sys.exit(main())
