"""Run a job's command and record what the kernel says it cost (the testbed's accounting).

``python -m testbed.jobacct --out FILE -- COMMAND...`` runs COMMAND as a child, forwards
SIGTERM/SIGINT/SIGHUP to it (Slurm's cancel and time limit), waits for it, and writes
FILE atomically: ``{"start", "end", "cpu_s", "exit_code", "signal", "host", "slurm_job_id"}``
where ``cpu_s`` is user + system time of the whole process tree the command waited for
(``wait4`` rusage of the child: the kernel's count, as the local backend uses). It exits
with the command's exit code.

Slurm without slurmdbd keeps no CPU time of finished jobs, and a job's cgroup is gone
when it ends, so the testbed's CPU utilisation comes from these files (on the shared
volume) rather than from the agents' sampled CPU %.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path


def write_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)


def run(out: Path, argv: list[str]) -> int:
    start = time.time()
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"jobacct: cannot start {argv[0]}: {exc}", file=sys.stderr)
        return 127
    if pid == 0:   # the child: become the command
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"jobacct: cannot run {argv[0]}: {exc}", file=sys.stderr)
        os._exit(127)

    def forward(signum, _frame) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCONT):
        signal.signal(s, forward)
    while True:
        try:
            _, status, rusage = os.wait4(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    write_atomic(out, {
        "start": round(start, 3), "end": round(time.time(), 3),
        "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 3),
        "exit_code": code if code >= 0 else None, "signal": -code if code < 0 else None,
        "host": socket.gethostname(), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    })
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--out" or argv[2] != "--":
        print("usage: python -m testbed.jobacct --out FILE -- COMMAND...", file=sys.stderr)
        return 2
    return run(Path(argv[1]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
