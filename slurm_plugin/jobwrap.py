"""Run a job's program and record what it cost: ``python -m slurm_plugin.jobwrap``.

    python -m slurm_plugin.jobwrap --usage-dir D [--progress-dir P] -- PROGRAM ARGS...

Writes ``D/$SLURM_JOB_ID.json``: ``{"job_id", "start", "end", "cpu_s", "rc", "host"}`` with
wall-clock times to the microsecond and the kernel's CPU seconds of the whole process
tree (``getrusage(RUSAGE_CHILDREN)`` after the program and every descendant it waited
for). Slurm itself (without slurmdbd) keeps whole-second times and no CPU time, and the
measurements of a scaled-down run need both. ``COSCHED_PROGRESS_FILE`` defaults to
``P/$SLURM_JOB_ID.json`` (the node agent's progress folder). The program's exit status
is passed on; SIGTERM and SIGINT are forwarded to it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurm_plugin.jobwrap")
    ap.add_argument("--usage-dir", required=True)
    ap.add_argument("--progress-dir", default=None)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no program to run (put it after --)")
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not (job_id.isascii() and job_id.isdigit()):
        ap.error("SLURM_JOB_ID is not set: run this inside a Slurm job")
    env = dict(os.environ)
    if args.progress_dir and "COSCHED_PROGRESS_FILE" not in env:
        env["COSCHED_PROGRESS_FILE"] = os.path.join(args.progress_dir, f"{job_id}.json")
    env.setdefault("COSCHED_JOB_ID", job_id)
    start = time.time()
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        print(f"jobwrap: cannot start {cmd[0]!r}: {exc}", file=sys.stderr)
        rc = 127
    else:
        def forward(signum, _frame):
            try:
                child.send_signal(signum)
            except OSError:
                pass

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        rc = child.wait()
    end = time.time()
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"job_id": int(job_id), "start": start, "end": end,
              "cpu_s": round(ru.ru_utime + ru.ru_stime, 4), "rc": rc, "host": socket.gethostname()}
    path = os.path.join(args.usage_dir, f"{job_id}.json")
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError as exc:
        print(f"jobwrap: cannot write {path}: {exc}", file=sys.stderr)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
