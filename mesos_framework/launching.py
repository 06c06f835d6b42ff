"""The Mesos backend's launches: ``start`` plans a job's parts onto held offers (first-fit
gangs; a guest on its host's agent), ``flush`` sends the ACCEPTs, a refused launch is undone.

A mixin of ``framework.MesosBackend``; it holds no state of its own.
"""

from __future__ import annotations

import logging

from coscheduler.backend import BackendError, check_quota_fraction
from coscheduler.model import Allocation, Job, Outcome

from . import messages as msg
from .offers import HeldOffer, carve, remainder
from .quotas import wrap_command
from .records import _NoOffers, _not_processed, _Run, _Task, task_id_for

log = logging.getLogger("mesos_framework.framework")


class Launching:
    """Starting a job: its parts on agents (a gang across agents, a guest on its host's),
    the offers that carry them, and the ACCEPT calls."""

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        """Commit held offers to the job's tasks; the ACCEPTs go out at the end of the pass
        (``flush``), one per agent with every task placed there in this pass. A guest whose
        host's agent has no memory offer held waits for one (``guest_wait_s``)."""
        q = check_quota_fraction(job.job_id, quota_fraction)
        revive = False
        with self._lock:
            if job.job_id not in self._waiting:
                raise BackendError(f"cannot start job {job.job_id}: it is not queued")
            if allocation.cores != job.cores or len(allocation.cores_by_node) != job.nodes:
                raise BackendError(f"cannot start job {job.job_id}: allocation {allocation} does "
                                   f"not match its request of {job.cores} cores on {job.nodes} node(s)")
            host = None
            if host_job is not None:
                host = self._runs.get(host_job)
                if host is None or host.host is not None:
                    raise BackendError(f"cannot start job {job.job_id} as a guest: {host_job} is "
                                       "not a running host")
            parts = self._parts(job, allocation, host)
            try:
                plan = self._plan(job, parts)
            except _NoOffers as exc:
                if host is None:
                    raise BackendError(str(exc)) from None
                plan = None     # the guest waits for memory on its host's agent
                why = str(exc)
            attempt = self._attempts.get(job.job_id, 0) + 1
            tasks: dict[str, _Task] = {}
            launch: list[tuple[dict[str, str], list[str]]] = []
            for k, (aid, cores, _, _) in enumerate(parts):
                hostname = self._agents.get(aid, "")
                # Each task is one part of the job, told which (as MPI ranks are).
                env = {"COSCHED_JOB_ID": job.job_id, "COSCHED_CORES": str(cores),
                       "COSCHED_PART": str(k), "COSCHED_PARTS": str(len(parts))}
                argv = list(job.command)
                if self.quotas is not None:
                    try:
                        env.update(self.quotas.prepare(aid, hostname, job, cores))
                    except Exception as exc:  # noqa: BLE001
                        for t in tasks.values():
                            self._release_quota(job.job_id, t)
                        raise BackendError(f"cannot start job {job.job_id}: node agent of "
                                           f"{hostname or aid}: {exc}") from None
                    argv = wrap_command(job.command)
                tid = task_id_for(job.job_id, attempt, k)
                tasks[tid] = _Task(tid, aid, hostname, cores)
                launch.append((env, argv))
            # From here nothing can fail.
            self._attempts[job.job_id] = attempt
            del self._waiting[job.job_id]
            run = _Run(job, allocation, self.now(), q, host_job, attempt, tasks,
                       parts=parts, launch=launch)
            self._runs[job.job_id] = run
            if host is not None:
                host.guests.append(job.job_id)
            self.starts.append((run.start, job.job_id, host_job))
            if plan is None:
                run.waiting_since = self.now()
                log.info("guest %s waits for memory on its host's agent (%s): REVIVE", job.job_id, why)
                revive = True
            else:
                self._commit(run, plan)
                self._save_state()
        if revive:
            self._revive(force=True)
        if q < 1.0:
            self.set_quota(job.job_id, q)

    def _commit(self, run: _Run, plan) -> None:
        """Cut the planned offers for each task of ``run`` and queue the launches (lock held)."""
        job = run.job
        last_offer = 0.0
        for k, ((aid, _, offers, amounts), (env, argv)) in enumerate(zip(plan, run.launch)):
            tid = task_id_for(job.job_id, run.attempt, k)
            resources = carve(offers, amounts, self._taken)
            batch = self._pending.setdefault(aid, {"offers": {}, "tasks": [], "jobs": []})
            for h in offers:
                batch["offers"][h.offer_id] = h
                self._pool[h.offer_id] = remainder(h, self._taken[h.offer_id])
                last_offer = max(last_offer, h.received)
            labels = {"cosched_job": job.job_id, "cosched_walltime_s": f"{job.walltime_s:g}",
                      "cosched_tasks_total": str(job.tasks), "cosched_job_class": job.job_class}
            batch["tasks"].append(msg.command_task(
                tid, f"{job.job_id} part {k}", aid, resources, argv, env=env,
                user=job.user if job.user and job.user != self.config.user else None,
                labels=labels))
            if job.job_id not in batch["jobs"]:
                batch["jobs"].append(job.job_id)
        self._last_offer[job.job_id] = last_offer
        if run.waiting_since is not None:
            log.info("guest %s launched after waiting %.2f s for memory", job.job_id,
                     self.now() - run.waiting_since)
            run.waiting_since = None
            run.start = self.now()

    def _launch_waiting_guests(self) -> None:
        """Guests waiting for memory on their host's agent: launched once an offer there
        has it; back to the queue after ``guest_wait_s`` (or when their host ended)."""
        now = self.now()
        with self._lock:
            for jid, run in list(self._runs.items()):
                if run.waiting_since is None:
                    continue
                if run.host is None or run.host not in self._runs:
                    self._give_back(jid, "its host ended before memory was offered on its agent")
                    continue
                try:
                    plan = self._plan(run.job, run.parts)
                except _NoOffers as exc:
                    if now - run.waiting_since > self.config.guest_wait_s:
                        self._give_back(jid, f"no memory offered on its host's agent within "
                                             f"{self.config.guest_wait_s:g} s ({exc})")
                    continue
                self._commit(run, plan)
                self._save_state()

    def _give_back(self, job_id: str, reason: str) -> None:
        """A job that never launched goes back to the queue (lock held); the ``requeued``
        outcome closes the controller's decision."""
        run = self._runs.get(job_id)
        if run is None:
            return
        log.warning("job %s back to the queue: %s", job_id, reason)
        end = self._remove_run(job_id)
        self._finished.append(Outcome(job_id, run.start, end, "requeued", reason))
        self.history.append(self._finished[-1])
        self._waiting[job_id] = run.job

    def flush(self) -> None:
        """Send the ACCEPTs of this pass: one per agent, all its offers, all its tasks. A
        refused ACCEPT sends its jobs back to the queue (their other tasks killed)."""
        with self._lock:
            self._flush_state()   # before the ACCEPTs: a next instance adopts what they launch
            batches, self._pending, self._taken = self._pending, {}, {}
            for batch in batches.values():
                for oid in batch["offers"]:
                    self._pool.pop(oid, None)   # Mesos declines whatever we left unused
        failed: list[tuple[list[str], str]] = []
        sent_jobs: set[str] = set()
        unanswered: list[HeldOffer] = []
        if not batches:
            return
        issued = self.now()

        def send(aid: str, batch: dict) -> Exception | None:
            try:
                self._call(msg.accept(self._fid(), list(batch["offers"]), [msg.launch(batch["tasks"])],
                                      self.config.accept_refuse_s))
                return None
            except Exception as exc:  # noqa: BLE001
                return exc

        # A gang's ACCEPTs (one per agent) go out together, not one after the other: its
        # latency is the slowest answer, not the sum of them.
        items = list(batches.items())
        if len(items) == 1:
            results = [send(*items[0])]
        else:
            results = list(self._senders().map(lambda kv: send(*kv), items))
        for (aid, batch), exc in zip(items, results):
            if exc is None:
                sent_jobs.update(batch["jobs"])
                continue
            failed.append((batch["jobs"], f"ACCEPT on agent {self._agents.get(aid) or aid} failed: {exc}"))
            if _not_processed(exc):
                unanswered += batch["offers"].values()
        now = self.now()
        with self._lock:
            bad = {j for jobs, _ in failed for j in jobs}
            for jobs, why in failed:
                for jid in jobs:
                    self._abort_launch(jid, why)
            self._repool(unanswered)
            self.counters["accepted"] += len(batches) - len(failed)
            for jid in sent_jobs - bad:
                self.counters["launched_tasks"] += len(self._runs[jid].tasks) if jid in self._runs else 0
                if jid in self._last_offer:
                    last = self._last_offer.pop(jid)
                    self.gang_latency_s.append(max(0.0, now - last))
                    self.gang_decision_s.append(max(0.0, issued - last))
            for jid in bad:
                self._last_offer.pop(jid, None)

    def _senders(self):
        if self._pool_x is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool_x = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mesos-accept")
        return self._pool_x

    # -- helpers ----------------------------------------------------------------------------
    def _parts(self, job: Job, allocation: Allocation, host: _Run | None
               ) -> list[tuple[str, int, float, float]]:
        """Per task: (agent id, cores, cpus to take, mem to take). A guest takes no cpus:
        it runs on its host's cores."""
        parts = []
        for node, cores in allocation.cores_by_node:
            aid = self._agent_of.get(node)
            if aid is None:
                raise BackendError(f"cannot start job {job.job_id}: unknown node {node!r}")
            if host is not None and not any(t.agent_id == aid for t in host.tasks.values()):
                raise BackendError(f"cannot start job {job.job_id} inside {host.job.job_id}: the host "
                                   f"has no task on agent {node}")
            # Job.mem_mb is per node the job spans.
            mem = max(self.config.min_task_mem_mb,
                      float(job.mem_mb) if job.mem_mb else self.config.mem_per_core_mb * cores)
            parts.append((aid, cores, 0.0 if host is not None else float(cores), mem))
        return parts

    def _plan(self, job: Job, parts: list[tuple[str, int, float, float]]):
        """Per part: (agent id, cores, offers to accept, resources to take); _NoOffers when
        the held offers of an agent lack what its part needs."""
        plan = []
        taken: set[str] = set()
        for aid, cores, cpus, mem in parts:
            # (walks the agent's offers with cpus or mem left only as far as it takes: a
            # walk and sort of all of them per task made a pass quadratic)
            offers = self._pool.pick(aid, cpus, mem, taken)
            if offers is None:
                held = [h for h in self._pool.of_agent(aid) if h.offer_id not in taken]
                have_c = sum(h.view.cpus for h in held)
                have_m = sum(h.view.mem for h in held)
                raise _NoOffers(f"cannot start job {job.job_id}: the offers held on agent "
                                f"{self._node_of.get(aid, aid)} have {have_c:g} cpus and {have_m:g} MB, "
                                f"the task needs {cpus:g} cpus and {mem:g} MB")
            taken.update(h.offer_id for h in offers)
            plan.append((aid, cores, offers, {"cpus": cpus, "mem": mem}))
        return plan

    def _abort_launch(self, job_id: str, reason: str) -> None:
        """A launch was refused mid-gang: kill what was launched, the job goes back to the
        queue (a ``requeued`` outcome, so the controller closes its decisions)."""
        run = self._runs.get(job_id)
        if run is None:
            return
        self._kill_rest(run, ("requeued", reason))
        end = self._remove_run(job_id)
        self._finished.append(Outcome(job_id, run.start, end, "requeued", reason))
        self.history.append(self._finished[-1])
        self._waiting[job_id] = run.job
