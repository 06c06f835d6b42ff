"""The node agent's tick, job by job: observe a job (collect.py reads /proc and cgroups),
reconcile its cgroup against the quota it should have (execute.py writes), update its sample
(state.py), finish and retire jobs whose processes are gone.

A mixin of ``agent.NodeAgent`` (called with the lock held unless said otherwise).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from coscheduler.happiness import happiness
from coscheduler.progress import Progress

from . import collect
from .admission import ENDED_RULE, OWN_CGROUP_RULE, Refused, uid_of_job
from .cgroupfs import CgroupError, UnsafePath
from .state import JobSpec, JobState, finite_happiness

log = logging.getLogger("monitoring.agent")


class JobObservation:
    """One tick's view of each job: read it (collect), reconcile its cgroup with the quota
    it should have (execute), update its sample (state), and retire jobs that ended."""

    def _observe(self, jid: str, spec: JobSpec, now: float, quota_set: bool,
                 pid_starts: dict[int, int] | None = None) -> dict[str, Any]:
        """Read a job's processes and counters (no lock: only reads).

        A job whose processes all live in its cgroup is sampled from the cgroup alone on
        most ticks (a light tick): its process list (cgroup.procs, read fresh) and its CPU
        counter, one file each, whatever the number of processes. A process the job forks
        is in the cgroup, under its quota, from birth; it shows in the figures at the next
        full tick. Every ``io_every`` ticks, and whenever the list changed (a process
        ended, or was moved out), every process is read again (/proc stat, children,
        I/O): memory and I/O figures are that fresh."""
        in_cg = self.actuator.job_pids(jid)
        light = self._light.get(jid)
        if (light is not None and in_cg and in_cg == light["members"]
                and self.counters["ticks"] % self.io_every != 0 and not spec.batch_cgroup):
            usage, thr = self.actuator.counters(jid, quota_set)
            if usage is not None:
                return {"members": set(in_cg), "to_move": set(), "refused": {}, "stale_pids": {},
                        "totals": light["totals"], "io": light["io"], "usage_ns": usage,
                        "usage_src": "cgroup", "progress": self._progress_files.read(spec.progress_file,
                                                                     self._owner(jid, in_cg)),
                        "throttling": thr,
                        "time": time.monotonic(), "wall": now}
        batch: set[int] = set()
        if spec.batch_cgroup:
            batch = collect.cgroup_tree_pids(Path(spec.batch_cgroup))
        # Every process that would enter the job's cgroup passes the admission rule first
        # (a batch system's cgroup may list anything; so may a pid reused by the kernel).
        known = self._refused.get(jid, {})
        refused: dict[int, Refused] = {}
        ended: set[int] = set()

        def admitted(pids: set[int]) -> set[int]:
            ok = set()
            for pid in pids:
                # A refusal is remembered (one event per process), except the own-cgroup
                # one once the batch system lists the pid: Slurm had placed it meanwhile.
                if pid in known and not (pid in batch and known[pid].rule == OWN_CGROUP_RULE):
                    refused[pid] = known[pid]
                    continue
                try:
                    ok.add(self.admission.check(pid, placed_by_batch=pid in batch))
                except Refused as e:
                    if e.rule == ENDED_RULE:
                        # ended since it was listed (a job's short-lived children, by
                        # the hundred): no refusal to report, only a process gone
                        ended.add(pid)
                    else:
                        refused[pid] = e
            return ok

        # The registered processes that are still the ones registered (a number whose
        # process ended may now be anyone's), those in our cgroup or the batch system's,
        # and every descendant of them: a process the job started later is found here.
        registered, stale = set(spec.pids), {}
        if pid_starts is not None:
            registered = collect.still_the_same({p: pid_starts[p] for p in spec.pids if p in pid_starts},
                                                self._files)
            stale = {p: pid_starts.get(p) for p in spec.pids if p not in registered}
        procs = collect.job_processes(in_cg | registered | admitted(batch - in_cg), self._files)
        if spec.batch_cgroup and not set(procs) - in_cg - known.keys() <= batch:
            # A child forked after the batch cgroup was read is in it from birth (it
            # inherits its parent's cgroups): read the list again rather than judge it
            # without (on cgroup v1 it would share the agent's cpu cgroup and be refused).
            # (Not for a process refused before: the next tick's read says if it moved.)
            batch |= collect.cgroup_tree_pids(Path(spec.batch_cgroup))
        for pid in refused.keys() | ended:
            procs.pop(pid, None)
        live = set(procs)
        io = self._io.get(jid, {})
        fresh = self.counters["ticks"] % self.io_every == 0
        io = {pid: (collect.proc_io(pid, self._files) if fresh or pid not in io else io[pid])
              for pid in live}
        totals = collect.totals(procs, io)
        usage_ns, usage_src = None, None
        if spec.batch_cgroup:
            usage_ns = collect.batch_usage_ns(Path(spec.batch_cgroup))
            usage_src = "batch"
        elif live:
            # The cgroup counter is exact (it keeps the time of processes that exited) but
            # only when the job's processes are all in it; re-checked when membership changes.
            key = frozenset(live)
            covered = self._covered.get(jid)
            if covered is None or covered[0] != key:
                acct = self.actuator.acct_pids(jid)
                covered = (key, live <= (acct if acct is not None else in_cg))
                self._covered[jid] = covered
            if covered[1]:
                usage_ns, usage_src = self.actuator.usage_ns(jid), "cgroup"
        prog = self._progress_files.read(spec.progress_file, self._owner(jid, live))
        # throttling happens only under a limit: skip the read for unlimited jobs
        thr = self.actuator.throttling(jid) if quota_set else None
        outside = set() if self._sample_only(spec) else live - in_cg
        if outside:
            # a child forked after the list was read is in the cgroup from birth: read the
            # list again rather than check and move each (hundreds a tick for some jobs)
            outside -= self.actuator.job_pids(jid)
        to_move = admitted(outside)
        live -= ended
        for pid in ended:
            self._files.forget(f"/proc/{pid}/")
        new_refusals = {p: why for p, why in refused.items() if p not in known}
        self._refused[jid] = refused
        covered = usage_src == "cgroup" and usage_ns is not None and not refused
        if covered and live == in_cg:   # every process in our cgroup: light ticks may follow
            self._light[jid] = {"members": frozenset(in_cg), "totals": totals, "io": io}
        else:
            self._light.pop(jid, None)
        return {"members": live - set(refused), "to_move": to_move, "refused": new_refusals,
                "stale_pids": stale, "totals": totals,
                "io": io, "usage_ns": usage_ns,
                "usage_src": usage_src if usage_ns is not None else "proc", "progress": prog,
                "throttling": thr, "time": time.monotonic(), "wall": now}

    def _owner(self, jid: str, pids: set[int] | frozenset[int]) -> int | None:
        """The uid of the job's processes (found once), which its progress file must
        belong to (progressfiles.py); None while it has no process."""
        uid = self._owners.get(jid)
        if uid is None:
            uid = uid_of_job(pids)
            if uid is not None:
                self._owners[jid] = uid
        return uid

    def _reconcile(self, js: JobState, obs: dict[str, Any], now: float) -> bool:
        jid = js.spec.job_id
        changed = self._forget_ended_registrations(js, obs["stale_pids"], now)
        if obs["to_move"]:
            # (checked only when there is something to move: a removed cgroup was emptied)
            if not self._sample_only(js.spec) and self.actuator.job_missing(jid):
                self._remake_job_cgroup(js, now)
            res = self.actuator.move(jid, obs["to_move"])
            if res.moved:
                js.event(now, f"followed new process(es) {sorted(res.moved)}")
            for pid, why in res.failed.items():
                js.event(now, f"could not move pid {pid}: {why}")
        for pid, why in obs["refused"].items():
            js.event(now, f"not moved: {why}")
            log.warning("job %s: pid %s not moved: %s", jid, pid, why)
        why = self._progress_files.new_refusal(js.spec.progress_file)
        if why is not None:
            js.event(now, why)
        for pid in js.members - obs["members"]:
            self._files.forget(f"/proc/{pid}/")
        js.members = set(obs["members"])
        self._io[jid] = obs["io"]
        if js.members:
            js.seen_processes = True
        elif js.seen_processes or now - js.registered_at > self.start_grace_s:
            self._finish(js, now)
            return True
        else:
            return changed  # still waiting for the job to start in its cgroup
        try:
            self._apply(js, verify=True)  # re-assert: writes only when the kernel drifted
        except CgroupError as e:
            log.error("job %s: quota not applied: %s", jid, e)
        self._update_sample(js, obs)
        return changed

    def _forget_ended_registrations(self, js: JobState, stale: dict[int, float | None],
                                    now: float) -> bool:
        """Registered pids whose process ended (or whose number a new process holds now)
        are dropped from the job's registration: never followed again."""
        gone = {p for p, t in stale.items() if js.pid_starts.get(p) == t}
        if not gone:
            return False
        js.spec = replace(js.spec, pids=tuple(p for p in js.spec.pids if p not in gone))
        for p in gone:
            js.pid_starts.pop(p, None)
        js.event(now, f"registered process(es) {sorted(gone)[:10]} ended: no longer followed")
        return True

    def _apply_role(self, js: JobState, verify: bool) -> None:
        """Bring the job cgroup's scheduler files to its role (roles.py), where its quota
        is (in place on cgroup v2 for a batch job). A held role is read back on every tick
        (``verify``) and re-asserted on drift; the defaults are checked once. A failure is
        logged once per cause and never stops the quota."""
        want = js.role or ""
        if js.kernel_role == want and not (want and verify):
            return
        try:
            if self._sample_only(js.spec) and self.inplace is not None:
                self.inplace.set_role(js.spec.batch_cgroup, js.role)
            else:
                self.actuator.set_role(js.spec.job_id, js.role)
            js.kernel_role = want
        except (CgroupError, UnsafePath) as e:
            js.kernel_role = "?"
            if not any(ev["event"].endswith(str(e)) for ev in js.events):
                js.event(time.time(), f"role files not written: {e}")
                log.warning("job %s: role %s not written: %s", js.spec.job_id, js.role, e)

    def _update_sample(self, js: JobState, obs: dict[str, Any]) -> None:
        jid = js.spec.job_id
        t: collect.ProcTotals = obs["totals"]
        prev = self._prev.get(jid)
        cpu_pct = js.sample.get("cpu_percent")
        if prev is not None:
            wall = obs["time"] - prev["time"]
            if obs["usage_src"] == prev["usage_src"] and obs["usage_src"] != "proc":
                cpu_s = max(0, obs["usage_ns"] - prev["usage_ns"]) / 1e9
            else:
                cpu_s = collect.per_process_cpu_delta(prev["cpu_by_pid"], t.cpu_s_by_pid,
                                                 t.create_by_pid, prev["wall"])
            # Of the job's allocated cores: on an emulated node a core is cpu_per_core CPUs
            # (a busy 4-core job on a 0.25-CPU-per-core node reads 100 %, not 25 %).
            cpu_pct = collect.cpu_percent(cpu_s, wall, js.spec.cores * self.cpu_per_core)
        self._prev[jid] = {"time": obs["time"], "wall": obs["wall"], "usage_ns": obs["usage_ns"],
                           "usage_src": obs["usage_src"], "cpu_by_pid": t.cpu_s_by_pid}
        hist = self._progress.setdefault(jid, [])
        prog: Progress | None = obs["progress"]
        if prog is not None and (not hist or prog.time != hist[-1].time):
            hist.append(prog)
            cutoff = prog.time - 4 * self.progress_window_s
            while len(hist) > 2 and hist[1].time < cutoff:
                hist.pop(0)
        last = hist[-1] if hist else None
        rate = collect.progress_rate(hist, obs["wall"], self.progress_window_s)
        total = last.total if last is not None and last.total is not None else js.spec.tasks_total
        done = last.done if last is not None else 0
        hp = None
        # (no rate yet: Hp is unknown, and happiness() would say so after checking its input)
        if rate is not None and js.spec.walltime_s and js.spec.start_time is not None \
                and total is not None:
            elapsed = max(0.0, obs["wall"] - js.spec.start_time)
            hp = finite_happiness(happiness(elapsed, js.spec.walltime_s, done, total, rate))
        mem_alloc = js.spec.mem_mb * 2**20 if js.spec.mem_mb else self._mem_total
        thr = obs["throttling"] or (js.sample.get("nr_throttled"), js.sample.get("throttled_s"))
        if thr[0] is None:
            thr = None
        js.sample = {
            "sample_time": round(obs["wall"], 3),
            "cpu_percent": None if cpu_pct is None else round(cpu_pct, 2),
            "cpu_source": obs["usage_src"],
            "mem_percent": round(100.0 * t.rss_bytes / mem_alloc, 3),
            "rss_bytes": t.rss_bytes, "io_read_bytes": t.io_read_bytes,
            "io_write_bytes": t.io_write_bytes, "nprocs": t.nprocs,
            "tasks_done": done, "tasks_total": total,
            "tasks_per_s": None if rate is None else round(rate, 6),
            "happiness": None if hp is None else round(hp, 4),
            "nr_throttled": thr[0] if thr else None,
            "throttled_s": round(thr[1], 3) if thr else None,
        }

    def _finish(self, js: JobState, now: float) -> None:
        jid = js.spec.job_id
        js.status = "finished"
        js.finished_at = now
        self.leases.revoke(jid)
        js.lease_deadline = None
        js.life_cpu_percent = self._life_cpu_percent(js)   # (before the counter goes)
        removed = self.actuator.remove_job(jid)
        js.event(now, "all processes gone: finished" + ("; cgroup removed" if removed else
                                                        "; cgroup not yet removable"))
        self.counters["jobs_finished"] += 1
        self._forget_observations(js)

    def _forget_observations(self, js: JobState) -> None:
        """What was kept to sample a job (last counters, members, I/O per pid, refused
        pids, its progress file): once it finished, or once a released job is retired (it
        never finishes here: it is no longer followed)."""
        jid = js.spec.job_id
        self._prev.pop(jid, None)
        self._covered.pop(jid, None)
        self._io.pop(jid, None)
        self._light.pop(jid, None)
        self._refused.pop(jid, None)
        self._progress_files.forget(js.spec.progress_file)
        self._owners.pop(jid, None)

    def _life_cpu_percent(self, js: JobState) -> float | None:
        """The job's mean CPU use since it was registered, in % of its cores as its samples
        are, from its cgroup's counter (which keeps the time of processes that exited): what
        a job too short to be sampled used. None when the counter may miss some of its
        processes (a batch system's cgroup; processes sampled outside ours) or is gone."""
        jid = js.spec.job_id
        if js.spec.batch_cgroup or js.sample.get("cpu_source") not in (None, "cgroup") \
                or not self.actuator.has_job(jid):
            return None
        try:
            used_ns = self.actuator.usage_ns(jid)
        except (CgroupError, OSError):
            return None
        if used_ns is None:
            return None
        pct = collect.cpu_percent(used_ns / 1e9, time.time() - js.registered_at,
                                  js.spec.cores * self.cpu_per_core)
        return None if pct is None else round(min(pct, 100.0), 2)

    def _retire(self, now: float) -> bool:
        """Forget finished jobs after the retention time; remove released cgroups once empty."""
        changed = False
        for jid, js in list(self._jobs.items()):
            if js.status == "running":
                continue
            if self.actuator.has_job(jid) and self.actuator.remove_job(jid):
                js.event(now, "cgroup removed")
                changed = True
            if (js.finished_at or now) + self.finished_retention_s <= now and not self.actuator.has_job(jid):
                del self._jobs[jid]
                path = js.spec.progress_file
                if not any(o.spec.progress_file == path for o in self._jobs.values()):
                    self._progress_files.remove(path)
                self._progress.pop(jid, None)
                self._forget_observations(js)
                self.actuator.forget_job(jid)
                changed = True
        return changed
