"""Container health checks (``python -m testbed.health ROLE``, run by Docker inside them).

- node: the node agent answers ``/healthz`` and slurmctld lists this node as usable
  (idle, mixed or allocated: slurmd registered);
- controller: slurmctld answers (``scontrol ping``) from here (munge and slurm.conf work);
- mesos-master: the emulated Mesos master answers ``/health``.

Exit 0 when healthy, 1 with one line saying why otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request

USABLE = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")


def node_state(text: str) -> str | None:
    """The State= field of ``scontrol show node -o`` output (e.g. ``IDLE+DRAIN``)."""
    for word in text.split():
        if word.startswith("State="):
            return word[len("State="):]
    return None


def usable(state: str | None) -> bool:
    if not state:
        return False
    flags = state.split("+")
    return flags[0] in USABLE and not any(f in ("DRAIN", "NOT_RESPONDING", "DOWN") for f in flags[1:])


def check_node() -> str | None:
    port = os.environ.get("COSCHED_AGENT_PORT", "9137")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            if r.status != 200:
                return f"agent answered {r.status}"
    except OSError as exc:
        return f"agent not answering on port {port}: {exc}"
    node = os.environ.get("COSCHED_NODE", "")
    proc = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                          timeout=8)
    state = node_state(proc.stdout)
    if proc.returncode != 0 or not usable(state):
        return f"slurm node {node} is not usable yet (state {state}): {proc.stderr.strip()}"
    return None


def check_controller() -> str | None:
    proc = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=8)
    if proc.returncode != 0 or "UP" not in proc.stdout:
        return f"slurmctld not reachable: {(proc.stdout + proc.stderr).strip()}"
    return None


def check_mesos_master() -> str | None:
    port = os.environ.get("COSCHED_MESOS_PORT", "5050")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return None if r.status == 200 else f"emulated master answered {r.status}"
    except OSError as exc:
        return f"emulated Mesos master not answering on port {port}: {exc}"


def main(argv: list[str]) -> int:
    checks = {"node": check_node, "controller": check_controller,
              "mesos-master": check_mesos_master}
    if len(argv) != 1 or argv[0] not in checks:
        print(f"usage: python -m testbed.health {'|'.join(checks)}", file=sys.stderr)
        return 2
    try:
        problem = checks[argv[0]]()
    except (OSError, subprocess.SubprocessError) as exc:
        problem = str(exc)
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
