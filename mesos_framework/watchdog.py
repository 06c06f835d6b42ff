"""The lease keeper that outlives the framework: lifts the quotas of its in-process node
agents when the framework process dies (``kill -9``, a crash, the OOM killer).

Why a process: with ``--quotas local`` the node agents live inside the framework process,
and a quota in the kernel never times out by itself; whatever enforces a lease after the
framework died must live outside it. ``cosched agent`` is its own daemon for that reason;
for local agents this small process is the part of it that matters. It costs one sleeping
Python process per framework and touches nothing while the framework lives.

How it works: the framework starts it with a pipe on its stdin and keeps the write end.
The read blocks until the framework writes ``bye`` (a clean close: the agents have lifted
everything themselves) or until the kernel closes the pipe because the framework died.
Then it waits one lease (every quota granted before the death has lapsed by then, so no
live lease is cut short), lifts every quota under the framework's cgroup base, removes the
job cgroups that are empty, and keeps removing those that empty until none is left. A
successor framework with the same id (a restart) recovers the same cgroups itself and
stops this watchdog first (SIGTERM, pid in ``watchdog.pid``), so the two never fight.

    python -m mesos_framework.watchdog --base cosched-mesos-<id> --lease-s 20 --pidfile P
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

log = logging.getLogger("mesos_framework.watchdog")

SWEEP_S = 2.0


def lift_and_sweep(base: str, layout=None) -> tuple[list[str], int]:
    """Lift every job quota under ``<mount>/<base>/<agent>/`` and remove the empty job
    cgroups (then empty agent roots and the base). Returns (jobs lifted, cgroups left)."""
    from monitoring.cgroupfs import CgroupError, UnsafePath, detect_layout
    from monitoring.execute import make_actuator

    layout = layout or detect_layout()
    top = layout.cpu_mount / base
    if not top.is_dir():
        return [], 0
    lifted, left = [], 0
    for agent_dir in sorted(p for p in top.iterdir() if p.is_dir()):
        act = make_actuator(layout, f"{base}/{agent_dir.name}")
        jobs = act.job_dirs()
        for job in jobs:
            try:
                act.set_quota(job, None)
                lifted.append(f"{agent_dir.name}/{job}")
            except (CgroupError, UnsafePath, OSError) as e:
                log.error("%s/%s: cannot lift its quota: %s", agent_dir.name, job, e)
            if not act.remove_job(job):
                left += 1
        if not act.job_dirs():
            try:
                act.set_node_quota(None, [])
            except (CgroupError, OSError):
                pass
            act.remove_root()
    for mount in {layout.cpu_mount, layout.acct_mount}:
        if mount is not None:
            try:
                os.rmdir(mount / base)
            except OSError:
                pass  # not empty yet, or gone
    return lifted, left


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mesos_framework.watchdog")
    ap.add_argument("--base", required=True, help="the framework's cgroup base name")
    ap.add_argument("--lease-s", type=float, required=True)
    ap.add_argument("--pidfile", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s cosched-watchdog %(message)s")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))   # a successor took over
    signal.signal(signal.SIGINT, signal.SIG_IGN)            # the framework's Ctrl-C is not ours
    if args.pidfile:
        with open(args.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
    said = sys.stdin.buffer.read(16)
    if said.startswith(b"bye"):
        return 0
    log.warning("the framework died; lifting the quotas under %s in %g s (one lease)",
                args.base, args.lease_s)
    time.sleep(args.lease_s + 0.5)
    lifted, left = lift_and_sweep(args.base)
    log.warning("quotas lifted: %s; %d cgroup(s) still hold processes", lifted, left)
    while left:
        time.sleep(SWEEP_S)
        _, left = lift_and_sweep(args.base)
    if args.pidfile:
        try:
            os.unlink(args.pidfile)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
