"""Where the Mesos framework's jobs come from: feeds, read after each controller pass.

A feed has ``poll(backend)`` (submit new jobs with ``backend.submit``, withdraw cancelled
ones with ``backend.cancel``), ``ended(outcome)`` (each outcome once, ``requeued`` ones
included) and ``close()``. ``MesosBackend.add_feed`` attaches one.

- ``QueueFeed``: the queue folder (``queue.JobQueue``): ``cosched workload submit
  --mesos``, or any program, drops job files there; outcomes go to its ``done/``.
- ``WorkloadFeed``: the four workflows (``coscheduler.workloads.small_mix``) put into a queue
  once the master's first offers show the cluster's size (their walltimes depend on what
  an emulated core is worth on this machine).
- ``slurm_feed.SlurmFeed``: jobs the Slurm submit hook marked for Mesos.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

from coscheduler import boundedjson
from coscheduler.model import InvalidInput, Outcome

from .queue import MAX_FILE_BYTES, MAX_JOB_DEPTH, JobQueue

log = logging.getLogger("mesos_framework.feeds")


class QueueFeed:
    """Jobs from a queue folder; a restart takes back the jobs left in ``active/``."""

    def __init__(self, queue: JobQueue):
        self.queue = queue.ensure()
        self._recovered = False

    def __repr__(self) -> str:
        return f"QueueFeed({self.queue.root})"

    def poll(self, backend: Any) -> None:
        if not self._recovered:
            self._recovered = True
            jobs = self.queue.recover()
            if jobs:
                log.info("job queue %s: %d job(s) taken back from a previous run", self.queue.root, len(jobs))
            self._note_done_dependencies(backend, jobs)
            self._submit(backend, jobs)
        self._submit(backend, self.queue.take())
        self.queue.prune()

    def _note_done_dependencies(self, backend: Any, jobs) -> None:
        ids = {j.job_id for j in jobs}
        for dep in {d for j in jobs for d in j.depends_on} - ids:
            try:
                done = boundedjson.load_file(self.queue.done / f"{dep}.json",
                                             max_bytes=MAX_FILE_BYTES + 4096, max_depth=MAX_JOB_DEPTH)
                state = done["outcome"]["state"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            backend.note_ended(dep, str(state))

    def _submit(self, backend: Any, jobs) -> None:
        for job in jobs:
            try:
                backend.submit(job)
            except InvalidInput as exc:
                self.queue.forget(job.job_id, str(exc))

    def ended(self, outcome: Outcome) -> None:
        self.queue.finish(outcome)

    def pending(self) -> bool:
        """Files wait in ``new/`` (or were never read)."""
        if not self._recovered:
            return True
        try:
            return any(n.endswith(".json") and not n.startswith(".") for n in os.listdir(self.queue.new))
        except FileNotFoundError:
            return False

    def close(self) -> None:
        pass


class WorkloadFeed:
    """``--workload small``: one Montage-, BLAST-, Statistics- and Synthetic-like workflow,
    put into ``queue`` once the backend has seen its first offers. With the cluster on this
    machine (``local_cores``), a stage's CPU work shrinks with what one offered core is worth
    (machine CPUs / offered cores), as ``cosched demo`` does on its emulated nodes."""

    def __init__(self, queue: JobQueue, *, local_cores: bool, scale: float | None = None,
                 tag: str | None = None, workdir: str | None = None, wait_s: float = 1.0):
        self.queue = queue
        self.local_cores = local_cores
        self.scale = scale
        self.tag = tag or f"mesos{time.strftime('%H%M%S')}"
        self.workdir = workdir
        self.wait_s = wait_s
        self._since: float | None = None
        self.done = False

    def __repr__(self) -> str:
        return f"WorkloadFeed({self.tag})"

    def poll(self, backend: Any) -> None:
        if self.done:
            return
        cores = backend.cluster_cores()
        if cores < 1:
            return
        # Offers of every agent arrive within an allocation interval: wait a little for them.
        now = time.monotonic()
        self._since = self._since or now
        if now - self._since < self.wait_s:
            return
        from coscheduler.workloads.jobs import (DEMO_CORES, DEMO_NODE_CORES, DEMO_NODES, DEMO_SCALE,
                                            small_mix)

        speed = min(1.0, len(os.sched_getaffinity(0)) / cores) if self.local_cores else 1.0
        node_cores = max(1, min(c for c in backend.agent_cores().values() if c >= 1))
        # As the demo's mix on its 4 x 2 cores, grown with the cluster: the workflows want
        # more cores than there are (guests), the widest stages span two agents (gangs).
        grow = max(1, cores // (DEMO_NODES * DEMO_NODE_CORES))
        sizes = {wf: c * grow for wf, c in DEMO_CORES.items()}
        node_cores = min(node_cores, max(sizes.values()) // 2)
        workdir = self.workdir or tempfile.mkdtemp(prefix="cosched-mesos-work-")
        jobs = small_mix(DEMO_SCALE if self.scale is None else self.scale, cores=sizes,
                         node_cores=node_cores, workdir=workdir, core_speed=speed, tag=self.tag)
        self.queue.submit(jobs)
        self.done = True
        log.info("workload small: %d stage jobs of 4 workflows (%s cores) queued in %s (core "
                 "speed %.3g, parts of at most %d cores)", len(jobs),
                 ", ".join(f"{w} {c}" for w, c in sizes.items()), self.queue.root, speed, node_cores)
        backend.wake()

    def ended(self, outcome: Outcome) -> None:
        pass

    def pending(self) -> bool:
        return not self.done

    def close(self) -> None:
        pass


__all__ = ["QueueFeed", "WorkloadFeed"]
