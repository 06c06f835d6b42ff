"""The node agent's start and saves: discover Slurm jobs in the accounting hierarchy, recover
the jobs and quotas a previous agent left in its state file (recovery.StateFile), save it.

A mixin of ``agent.NodeAgent`` (called with the lock held unless said otherwise).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

from coscheduler.model import InvalidInput

from . import collect
from .admission import ENDED_RULE, Refused
from .cgroupfs import CgroupError, UnsafePath, validate_cgroup_name
from .state import JobSpec, JobState, parse_registration, validate_agent_job_id

log = logging.getLogger("monitoring.agent")


# v2 discovery reads every process's cgroup at least this often (Restore._v2_scan_due)
V2_FULL_SCAN_TICKS = 30


class Restore:
    """Jobs found at start: Slurm's accounting hierarchy, and the state file a previous agent left."""

    proc_root = "/proc"   # where v2 discovery reads processes (tests give a fake one)
    # Slurm's step scopes seen on cgroup v2 (their folders are the jobs: _v2_scan_due)
    _v2_scopes: set[Path]

    def _discover(self) -> None:
        """Register Slurm jobs found in the accounting hierarchy (read only there)."""
        mount = self.layout.acct_mount or self.layout.cpu_mount
        if self.layout.version == 2:
            # (jobs followed in their own cgroup, their cores known: nothing more to read)
            followed = {js.spec.batch_cgroup for js in self._jobs.values()
                        if js.status == "running" and js.spec.batch_cgroup and not js.cores_guessed}
            if not self._v2_scan_due(Path(mount), followed):
                return
            found = collect.discover_slurm_jobs_v2(Path(mount), self.slurm_node, self.proc_root,
                                                   followed)
            self._v2_scopes |= {d.parent for d in found.values()}
        else:
            found = collect.discover_slurm_jobs(Path(mount), self.slurm_node)
        for slurm_id, d in found.items():
            known = self._jobs.get(slurm_id)
            if known is not None:
                if known.status == "running" and known.spec.batch_cgroup is None:
                    # registered by the controller before Slurm made its cgroup: follow it now
                    known.spec = dataclasses.replace(known.spec, batch_cgroup=str(d))
                    known.kernel_role = "?"   # its role files move there too
                    known.event(time.time(), f"found in {d}")
                elif known.status == "running" and known.cores_guessed:
                    self._read_cores_again(known, mount, d)
                continue  # running, or finished: not again
            pids = sorted(collect.cgroup_tree_pids(d))
            if not pids:
                continue
            found_cores = self._slurm_cores(mount, d, pids)
            cores = found_cores or 1
            spec = JobSpec(job_id=slurm_id, cores=float(cores), pids=tuple(pids), source="slurm",
                           batch_cgroup=str(d),
                           progress_file=str(Path(os.path.realpath(self.progress_dir)) / f"{slurm_id}.json"))
            js = JobState(spec=spec, registered_at=time.time())
            js.event(time.time(), f"discovered in {d}" + ("" if found_cores else
                     " (its cores not readable yet: 1 until they are)"))
            js.cores_guessed = not found_cores
            self._jobs[slurm_id] = js
            try:
                if not self._sample_only(spec):
                    self.actuator.ensure_job(slurm_id)
                self._apply(js)
            except CgroupError as e:
                js.apply_error = str(e)

    def _v2_scan_due(self, mount: Path, followed: set[str]) -> bool:
        """Whether v2 discovery must read every process's cgroup this tick (about 5 us a
        process: a node's 1,500 processes, kernel threads included, cost 0.75 % of a core
        at 1 Hz, more than the agent's whole budget). Not while each folder in Slurm's step
        scopes is a job followed already: a new job is a new folder there. Every
        ``V2_FULL_SCAN_TICKS`` ticks, and while no scope is known, it reads them all."""
        if self.counters["ticks"] % V2_FULL_SCAN_TICKS == 0 or not self._v2_scopes:
            self._v2_scopes |= collect.slurm_scopes_v2(mount)
            return True
        inside = collect.scope_folders_v2(self._v2_scopes)
        return inside is None or not inside <= followed

    def _slurm_cores(self, mount, d: Path, pids) -> int | None:
        """The CPUs Slurm gave a job on this node: its cpuset, else its processes'
        environment; None when neither says yet (slurmstepd made the job's cgroup and has
        not started the task, whose environment holds them, nor written the cpuset)."""
        if self.layout.version == 2:
            cores = collect.cpuset_cores(d)
        else:  # v1: the job's cpuset lives in the cpuset hierarchy, same relative path
            cores = collect.cpuset_cores(Path(str(mount)).parent / "cpuset" / d.relative_to(mount))
        return cores or collect.slurm_cpus_from_environ(pids)

    def _read_cores_again(self, js: JobState, mount, d: Path) -> None:
        """A discovered job whose cores were guessed (1): read them again at each tick until
        they are known. Once fixed at the guess, a job of 4 CPUs was followed, and limited,
        as a job of 1 until the controller registered it again (a CI run saw an agent's
        view of a two-node gang at 1.0 core)."""
        cores = self._slurm_cores(mount, d, sorted(collect.cgroup_tree_pids(d)))
        if not cores:
            return
        js.cores_guessed = False
        if cores != js.spec.cores:
            js.spec = dataclasses.replace(js.spec, cores=float(cores))
            js.event(time.time(), f"cores read: {cores}")
            try:
                self._apply(js)
            except CgroupError as e:
                js.apply_error = str(e)

    def _recover(self) -> dict[str, Any]:
        """Clean what a previous run left: every job cgroup under our root gets its full
        quota back; empty ones are removed; ones with processes are adopted."""
        saved = self.state_file.load()
        report: dict[str, Any] = {"state_file": "absent" if saved is None else "read",
                                  "restored": [], "removed": [], "adopted": [], "problem": None}
        jobs_saved: dict[str, Any] = {}
        problems: list[str] = []
        if saved is not None:
            report.update(previous_pid=saved.pid, clean_exit=saved.clean_exit,
                          problem=saved.problem)
            if saved.problem:
                log.error("%s", saved.problem)
                problems.append(saved.problem)
            if saved.cgroup_root not in (None, self.cgroup_root):
                problems.append(f"state file was written for cgroup root {saved.cgroup_root}, "
                                f"this agent uses {self.cgroup_root}: its jobs are ignored")
            else:
                jobs_saved = saved.jobs
        report["restored_in_place"] = self._lift_in_place(jobs_saved)
        names = set(self.actuator.job_dirs())
        dropped: dict[str, str] = {}  # state file entries not brought back, and why
        for name in jobs_saved:
            shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:60]}..."
            try:
                validate_agent_job_id(name)
            except InvalidInput:
                dropped[shown] = "not a valid job id (a cgroup name under the agent's root)"
                continue
            if name in report["restored_in_place"]:
                dropped[shown] = ("its batch job's own cgroup (cgroup v2): quota and role lifted "
                                  "in place; discovery or the controller registers it again")
            elif name not in names:
                dropped[shown] = "its cgroup is gone (the job ended while the agent was down)"
            bad = _bad_saved_quota(jobs_saved[name])
            if bad:
                # Recovery lifts every quota whatever was saved; a damaged value is still
                # said, so that an operator knows the file was edited or corrupted.
                problems.append(f"state file entry of job {shown!r}: {bad}; not used (its "
                                f"quota is lifted like every other)")
        for name in sorted(names):
            try:
                validate_cgroup_name(name)
            except UnsafePath:
                continue
            try:
                self.actuator.set_quota(name, None)  # fail safe first: no limit at all
                self.actuator.set_role(name, None)   # nor an idle flag or a weight
                report["restored"].append(name)
            except CgroupError as e:
                log.error("leftover cgroup %s: cannot lift its quota: %s", name, e)
            pids = self.actuator.job_pids(name)
            if not pids:
                if self.actuator.remove_job(name):
                    report["removed"].append(name)
                if name in jobs_saved:
                    dropped[name] = "no process left in its cgroup: removed"
                continue
            now = time.time()
            spec = None
            if name in jobs_saved:
                try:
                    spec = self._saved_spec(name, jobs_saved[name])
                except InvalidInput as e:
                    problems.append(f"state file entry of job {name} refused: {e}")
                    dropped[name] = f"refused: {str(e)[:300]}; kept as an adopted job"
            starts: dict[int, float] = {}
            if spec is None:
                spec = JobSpec(job_id=name, cores=1.0, pids=tuple(sorted(pids)), source="adopted")
                status = "released"  # unknown allocation: not managed, removed once empty
                reason = "full quota restored after agent restart"
            else:
                spec, starts = self._registered_still(spec, jobs_saved[name], pids)
                # A job unregistered before the restart stays so (its quota is lifted above).
                released = jobs_saved[name].get("status") == "released"
                status = "released" if released else "running"
                reason = ("unregistered before the agent's restart: no limit" if released
                          else "full quota restored after agent restart")
            js = JobState(spec=spec, registered_at=now, status=status, quota_reason=reason,
                          pid_starts=starts)
            js.members = set(pids)
            js.seen_processes = True
            js.event(now, f"adopted after restart (previous agent pid {report.get('previous_pid')})")
            if status == "released":
                js.finished_at = now
            self._jobs[name] = js
            report["adopted"].append(name)
        report["dropped"] = dropped
        for name, why in dropped.items():
            if why.startswith("not a valid"):
                problems.append(f"state file entry {name!r} dropped: {why}")
            else:
                self._event(f"recovery: state file entry {name!r} dropped: {why}")
        report["problem"] = "; ".join(problems) or None
        for p in problems:
            self._event(f"recovery: {p}")
        if report["restored"] or report["restored_in_place"] or report["problem"]:
            self._event(f"recovery: {report}")
            log.warning("recovered from previous run: %s", report)
        return report

    def _lift_in_place(self, jobs_saved: Mapping[str, Any]) -> list[str]:
        """cgroup v2: what a previous agent wrote in batch jobs' own cgroups (not under our
        root, so the scan of the root does not see it) goes back to no limit and the
        default idle flag and weight. Only folders strictly below the cgroup mount are
        written (InPlaceQuota.check), and only the fail-safe values."""
        lifted: list[str] = []
        if self.inplace is None:
            return lifted
        for name, raw in jobs_saved.items():
            spec = raw.get("spec") if isinstance(raw, Mapping) else None
            batch = spec.get("batch_cgroup") if isinstance(spec, Mapping) else None
            if not isinstance(batch, str):
                continue
            try:
                d = self.inplace.check(batch)
                if not self.actuator.fs.is_dir(d):
                    continue   # the job ended while the agent was down: Slurm removed it
                self.inplace.set_quota(d, None)
                self.inplace.set_role(d, None)
                lifted.append(str(name)[:80])
            except (CgroupError, UnsafePath) as e:
                log.error("job %s: cannot lift what the previous agent wrote in %s: %s",
                          str(name)[:80], batch[:200], e)
        return lifted

    @staticmethod
    def _registered_still(spec: JobSpec, raw: Mapping[str, Any], in_cgroup: set[int]
                          ) -> tuple[JobSpec, dict[int, int]]:
        """The saved registration with only the registered processes that are still the
        ones registered: the same start (clock ticks since boot) as saved, or (a state file
        written before start ticks were saved) in the job's cgroup now. A number whose
        process ended while the agent was down may have been given to anyone's new process."""
        saved = raw.get("pid_start_ticks")
        saved = saved if isinstance(saved, Mapping) else None
        now = collect.start_times(spec.pids)
        keep: dict[int, int] = {}
        for pid, t in now.items():
            if saved is None:
                if pid in in_cgroup:
                    keep[pid] = t
            elif saved.get(str(pid)) == t:
                keep[pid] = t
        return dataclasses.replace(spec, pids=tuple(p for p in spec.pids if p in keep)), keep

    def _saved_spec(self, name: str, raw: Any) -> JobSpec:
        """A job read back from the state file, through the same validation as a registration
        over HTTP (the file may have been damaged or edited): InvalidInput if unusable.
        Processes that ended while the agent was down are dropped; a pid the admission rule
        refuses makes the whole entry unusable, as it would a registration."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("spec"), Mapping):
            raise InvalidInput("not an object with a 'spec' object")
        d = raw["spec"]
        fields = ("job_id", "pids", "cores", "walltime_s", "start_time", "tasks_total",
                  "job_class", "progress_file", "mem_mb")
        body = {k: d[k] for k in fields if k in d and d[k] is not None}
        if body.get("job_id") != name:
            raise InvalidInput(f"its job_id {body.get('job_id')!r} is not its cgroup's name {name!r}")
        spec = parse_registration(body, self.progress_dir)
        pids = []
        for pid in spec.pids:
            try:
                pids.append(self.admission.check(pid))
            except Refused as e:
                if e.rule != ENDED_RULE:
                    raise
        source = d.get("source", "pids")
        if source not in ("pids", "slurm", "adopted"):
            raise InvalidInput(f"unknown source {source!r}")
        batch = d.get("batch_cgroup")
        if batch is not None:
            mount = str(self.layout.acct_mount or self.layout.cpu_mount)
            if not isinstance(batch, str) or not os.path.normpath(batch).startswith(mount + os.sep):
                raise InvalidInput(f"batch_cgroup {batch!r} is not a cgroup under {mount}")
            batch = os.path.normpath(batch)
        return JobSpec(**{**spec.to_dict(), "pids": tuple(pids), "source": source,
                          "batch_cgroup": batch})

    def _save(self, clean_exit: bool = False) -> None:
        # Every job with a cgroup, and running jobs whose quota is written in place (v2). A
        # running job's cgroup is not looked up (made at registration; one gone is skipped
        # at recovery): a stat per job per save made registering n jobs quadratic. Each
        # entry is encoded once per change (``_encoded``), not at every save.
        cache = self._encoded
        parts = []
        kept = set()
        for jid, js in self._jobs.items():
            if js.status != "running" and not self.actuator.has_job(jid):
                continue
            key = (js.spec, js.status, js.fraction, js.quota_us, tuple(js.pid_starts.items()))
            hit = cache.get(jid)
            if hit is None or hit[0] != key:
                hit = cache[jid] = (key, json.dumps(jid) + ": " + json.dumps(
                    {"spec": js.spec.to_dict(), "status": js.status, "fraction": js.fraction,
                     "quota_us": js.quota_us,
                     "pid_start_ticks": {str(p): t for p, t in js.pid_starts.items()}}))
            parts.append(hit[1])
            kept.add(jid)
        for jid in [j for j in cache if j not in kept]:
            del cache[jid]
        try:
            self.state_file.save(cgroup_version=self.layout.version, cgroup_root=self.cgroup_root,
                                 jobs_json="{" + ", ".join(parts) + "}", clean_exit=clean_exit)
        except OSError as e:
            log.error("cannot write state file %s: %s", self.state_file.path, e)
            if self.state_file_error is None:   # said once per failing stretch, not per save
                self._event(f"cannot write the state file {self.state_file.path}: {e}; a "
                            "restart still lifts every quota under its cgroup root")
            self.state_file_error = f"{e}"
            return
        if self.state_file_error is not None:
            self._event(f"the state file {self.state_file.path} is written again")
        self.state_file_error = None


def _bad_saved_quota(raw: Any) -> str | None:
    """What is wrong with the quota an entry of the state file holds (its ``fraction``, a
    share of its cores in [0, 1] or null, and ``quota_us``, a positive integer or null);
    None when nothing is."""
    if not isinstance(raw, Mapping):
        return None     # (the entry itself is refused by ``_saved_spec``)
    fraction, quota_us = raw.get("fraction"), raw.get("quota_us")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not math.isfinite(fraction) or not 0.0 <= fraction <= 1.0):
        return f"its saved quota fraction {str(fraction)[:40]} is not a number in [0, 1]"
    if quota_us is not None and (isinstance(quota_us, bool) or not isinstance(quota_us, int)
                                 or quota_us <= 0):
        return f"its saved quota_us {str(quota_us)[:40]} is not a positive whole number"
    return None

