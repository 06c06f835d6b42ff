"""Start a job's processes directly inside its agent cgroup (no window in which the job
runs, or forks, outside it): register the job with ``"pids": []``, then start it with

    view = agent.register_job({"job_id": "j1", "pids": [], "cores": 2})
    subprocess.Popen(cmd, preexec_fn=enter_cgroups(view["cgroup_procs"]),
                     env={**os.environ, "COSCHED_PROGRESS_FILE": view["progress_file"]})

The child writes its own pid into the job's ``cgroup.procs`` files between fork and exec
(needs the right to write them: root, or a delegated cgroup).
"""

from __future__ import annotations

import os
from typing import Callable, Sequence


def enter_cgroups(procs_files: Sequence[str]) -> Callable[[], None]:
    paths = [os.fsencode(p) for p in procs_files]

    def _enter() -> None:
        pid = str(os.getpid()).encode()
        for p in paths:
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    return _enter
