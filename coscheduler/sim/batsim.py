"""Batsim's formats: JSON workloads in, ``jobs.csv`` schedules out, and SWF -> Batsim JSON.

Batsim (the reference scheduling simulator, https://batsim.readthedocs.io) reads a JSON
workload and writes one CSV row per job; evalys and Batsim's own tools plot that CSV.

Reading a workload (``parse_workload``, pure):

- ``nb_res``: the machine's resources. Batsim has no nodes; each resource is one processor
  here (``procs_per_node``, our own optional key, which Batsim ignores, keeps an SWF trace's
  nodes on a round trip: default 1).
- ``jobs``: ``id`` (string or integer), ``subtime`` (s, >= 0), ``res`` (>= 1, <= nb_res),
  ``walltime`` (s; absent, null or <= 0: none, then the estimate is the run time, as for
  SWF's -1), ``profile`` (a key of ``profiles``); ``user`` (an SWF user id, our own optional
  key kept by ``to_batsim`` for per-user metrics) when present.
- ``profiles``: ``{"type": "delay", "delay": S}`` runs S seconds;
  ``{"type": "parallel_homogeneous", "cpu": F, "com": B}`` runs F / host_speed seconds
  (our rule: every host computes its F flops at ``host_speed`` flop/s, default 1e9, one Gflop/s;
  ``com`` is ignored because this simulator has no network). Other types are refused.
- Jobs keep the file's order (SWF's job-number order when made by ``to_batsim``); a job
  runs its whole run time even past its walltime, as SWF replays do (Batsim would kill it:
  ``final_state`` is then ``COMPLETED_WALLTIME_REACHED`` in Batsim, not here).

Writing ``jobs.csv`` (``jobs_csv_rows``): Batsim 4's 17 columns, in its order (``COLUMNS``).
``allocated_resources`` is an interval set (``0-3 8``): the simulator tracks counts, not
which processors, so processors are numbered afterwards, lowest free first, in start order
(a job's nodes whole, as the simulator allocates them).
"""

from __future__ import annotations

import csv
import heapq
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .. import boundedfile, boundedjson, outputs
from ..boundedjson import is_finite_number
from ..model import InvalidInput, shown
from .cluster import Cluster
from .engine import Schedule
from .swf import MAX_MACHINE, MAX_SECONDS, SwfTrace, TraceJob, read_swf

COLUMNS = ("job_id", "workload_name", "profile", "submission_time",
           "requested_number_of_resources", "requested_time", "success", "final_state",
           "starting_time", "execution_time", "finish_time", "waiting_time", "turnaround_time",
           "stretch", "allocated_resources", "consumed_energy", "metadata")
PROFILE_TYPES = ("delay", "parallel_homogeneous")
DEFAULT_HOST_SPEED = 1e9   # flop/s for parallel_homogeneous profiles
MAX_BYTES = 512 * 1024 * 1024


class BatsimFormatError(InvalidInput):
    """A Batsim workload that cannot be read; the message names the file and the job."""


@dataclass
class Workload:
    """A loaded workload: the trace the simulator replays, plus what jobs.csv names."""

    trace: SwfTrace
    # Per job index: the workload's job id and its profile name. None for an SWF trace
    # until jobs.csv asks (the job number; ``delay_profile``): 200,000 strings otherwise
    # built for nothing on every replay of HPC2N.
    given_ids: list[str] | None = None
    given_profiles: list[str] | None = None

    @property
    def ids(self) -> list[str]:
        if self.given_ids is None:
            self.given_ids = [str(j.job_id) for j in self.trace.jobs]
        return self.given_ids

    @property
    def profiles(self) -> list[str]:
        if self.given_profiles is None:
            self.given_profiles = [delay_profile(j.run) for j in self.trace.jobs]
        return self.given_profiles

    @property
    def name(self) -> str:
        return Path(self.trace.path).name.split(".")[0]


def _num(v: Any) -> float | None:
    if not is_finite_number(v):
        return None
    return float(v)


def parse_workload(doc: Any, name: str, host_speed: float = DEFAULT_HOST_SPEED) -> Workload:
    """A Batsim JSON workload (already decoded) -> ``Workload``; errors name the job."""
    if not isinstance(doc, dict):
        raise BatsimFormatError(f"{name}: a Batsim workload is a JSON object")
    nb_res = doc.get("nb_res")
    if isinstance(nb_res, bool) or not isinstance(nb_res, int) or not 1 <= nb_res <= MAX_MACHINE:
        raise BatsimFormatError(f"{name}: nb_res must be an integer in 1..{MAX_MACHINE}, "
                                f"got {shown(nb_res)}")
    ppn = doc.get("procs_per_node", 1)
    if isinstance(ppn, bool) or not isinstance(ppn, int) or ppn < 1 or nb_res % ppn:
        raise BatsimFormatError(f"{name}: procs_per_node must be an integer >= 1 dividing "
                                f"nb_res ({nb_res}), got {ppn!r}")
    jobs, profiles = doc.get("jobs"), doc.get("profiles", {})
    if not isinstance(jobs, list):
        raise BatsimFormatError(f"{name}: 'jobs' must be a list")
    if not isinstance(profiles, dict):
        raise BatsimFormatError(f"{name}: 'profiles' must be an object (name -> profile)")
    if not host_speed > 0 or not math.isfinite(host_speed):
        raise InvalidInput(f"host speed must be > 0 flop/s, got {host_speed!r}")

    runs: dict[str, float] = {}
    for pname, prof in profiles.items():
        where = f"{name}: profile {pname!r}"
        if not isinstance(prof, dict):
            raise BatsimFormatError(f"{where}: must be an object")
        ptype = prof.get("type")
        if ptype == "delay":
            d = _num(prof.get("delay"))
            if d is None or not 0 <= d < MAX_SECONDS:
                raise BatsimFormatError(f"{where}: delay must be a number of seconds in "
                                        f"[0, {MAX_SECONDS:g}), got {shown(prof.get('delay'))}")
            runs[pname] = d
        elif ptype == "parallel_homogeneous":
            cpu = _num(prof.get("cpu"))
            if cpu is None or cpu < 0:
                raise BatsimFormatError(f"{where}: cpu must be a number >= 0 (flops), "
                                        f"got {prof.get('cpu')!r}")
            if cpu / host_speed >= MAX_SECONDS:
                raise BatsimFormatError(f"{where}: cpu {cpu:g} flops run {cpu / host_speed:g} s "
                                        f"at {host_speed:g} flop/s, past the {MAX_SECONDS:g} s allowed")
            runs[pname] = cpu / host_speed

    rows: list[tuple[int, float, float, int, float, int]] = []
    ids: list[str] = []
    pnames: list[str] = []
    seen: set[str] = set()
    dropped_zero = 0
    for k, job in enumerate(jobs):
        if not isinstance(job, dict):
            raise BatsimFormatError(f"{name}: jobs[{k}] must be an object")
        jid = job.get("id")
        if isinstance(jid, bool) or not isinstance(jid, (int, str)) or str(jid) == "":
            raise BatsimFormatError(f"{name}: jobs[{k}] has no usable id ({jid!r})")
        where = f"{name}: job {jid!r}"
        if str(jid) in seen:
            raise BatsimFormatError(f"{where}: the id appears twice")
        seen.add(str(jid))
        sub = _num(job.get("subtime"))
        if sub is None or not 0 <= sub < MAX_SECONDS:
            raise BatsimFormatError(f"{where}: subtime must be a number of seconds in "
                                    f"[0, {MAX_SECONDS:g}), got {shown(job.get('subtime'))}")
        res = job.get("res")
        if isinstance(res, bool) or not isinstance(res, int) or res < 1:
            raise BatsimFormatError(f"{where}: res must be an integer >= 1, got {res!r}")
        if res > nb_res:
            raise BatsimFormatError(f"{where}: res {res} is more than nb_res {nb_res}")
        pname = job.get("profile")
        if not isinstance(pname, str) or pname not in profiles:
            raise BatsimFormatError(f"{where}: profile {pname!r} is not defined in 'profiles'")
        if pname not in runs:
            ptype = profiles[pname].get("type")
            raise BatsimFormatError(
                f"{where}: profile {pname!r} has type {ptype!r}; this simulator reads "
                f"{' and '.join(PROFILE_TYPES)}")
        wall = job.get("walltime")
        walltime = _num(wall) if wall is not None else -1.0
        if walltime is None or walltime >= MAX_SECONDS:
            raise BatsimFormatError(f"{where}: walltime must be a number of seconds under "
                                    f"{MAX_SECONDS:g}, got {shown(wall)}")
        run = runs[pname]
        if run <= 0:            # as SWF jobs with run time <= 0: nothing to schedule
            dropped_zero += 1
            continue
        num = int(jid) if isinstance(jid, int) or str(jid).isdigit() else len(rows) + 1
        user = job.get("user", -1)
        user = user if isinstance(user, int) and not isinstance(user, bool) else -1
        rows.append((num, sub, run, res, walltime if walltime > 0 else run, user))
        ids.append(str(jid))
        pnames.append(pname)

    trace = SwfTrace(path=name, max_nodes=nb_res // ppn, max_procs=nb_res,
                     jobs=[TraceJob(i, *r) for i, r in enumerate(rows)],
                     dropped={"run time <= 0": dropped_zero} if dropped_zero else {},
                     header={"nb_res": str(nb_res)})
    return Workload(trace, ids, pnames)


def is_batsim(path: Path) -> bool:
    """A ``.json`` file, or one whose first non-blank byte is ``{``."""
    if path.suffix.lower() == ".json":
        return True
    if path.name.endswith(".gz"):
        return False
    try:   # (not a plain open: a FIFO would block it; the SWF reader says what is wrong)
        head = boundedfile.read_head(path, 4096).lstrip()
    except (OSError, boundedfile.FileUnusable):
        return False
    return head[:1] == b"{"


def read_workload(path: str | Path, *, skip_bad_lines: bool = False,
                  host_speed: float = DEFAULT_HOST_SPEED) -> Workload:
    """An SWF trace or a Batsim JSON workload (by extension, else by content)."""
    path = Path(path)
    if not is_batsim(path):
        trace = read_swf(path, skip_bad_lines=skip_bad_lines)
        return Workload(trace)
    try:
        if path.stat().st_size > MAX_BYTES:
            raise BatsimFormatError(f"{path}: larger than {MAX_BYTES >> 20} MiB")
        doc = boundedjson.load_file(path, max_bytes=MAX_BYTES)
    except OSError as exc:
        raise BatsimFormatError(f"{path}: cannot read workload ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise BatsimFormatError(str(exc)) from None   # (it names the file)
    return parse_workload(doc, str(path), host_speed)


def delay_profile(run: float) -> str:
    """The profile name ``to_batsim`` gives a run time (one profile per distinct run time)."""
    return f"delay_{run:g}"


def to_batsim(trace: SwfTrace, jobs: Sequence[TraceJob] | None = None) -> dict:
    """An SWF trace (or a window of it) as a Batsim JSON workload: ``delay`` profiles (run
    time), ``walltime`` the estimate, ``res`` the processors; ids are the job numbers."""
    chosen = trace.jobs if jobs is None else jobs
    profiles: dict[str, dict] = {}
    out_jobs = []
    for j in chosen:
        p = delay_profile(j.run)
        profiles.setdefault(p, {"type": "delay", "delay": j.run})
        out_jobs.append({"id": j.job_id, "subtime": j.submit, "res": j.procs,
                         "walltime": j.estimate, "profile": p, "user": j.user})
    return {
        "description": f"converted by cosched workload batsim from {Path(trace.path).name}",
        "nb_res": trace.max_procs,
        "procs_per_node": trace.max_procs // trace.max_nodes,
        "jobs": out_jobs,
        "profiles": profiles,
    }


def allocate(jobs: Sequence[TraceJob], schedule: Schedule, cluster: Cluster) -> list[list[int]]:
    """Processor numbers per job, given the schedule's start/end times: whole nodes,
    lowest free first, ends before starts at the same instant (as the simulator frees)."""
    free_nodes = list(range(cluster.nodes))          # a heap of free node numbers
    events = []
    for k, j in enumerate(jobs):
        events.append((schedule.end[k], 0, k))
        events.append((schedule.start[k], 1, k))
    events.sort()
    held: dict[int, list[int]] = {}
    out: list[list[int]] = [[] for _ in jobs]
    ppn = cluster.procs_per_node
    for _t, kind, k in events:
        if kind == 0:
            for n in held.pop(k, []):
                heapq.heappush(free_nodes, n)
            continue
        need = cluster.nodes_for(jobs[k].procs)
        if need > len(free_nodes):
            raise InvalidInput(f"job {jobs[k].job_id}: the schedule uses more nodes than the "
                               f"cluster has at {schedule.start[k]}")
        nodes = sorted(heapq.heappop(free_nodes) for _ in range(need))
        held[k] = nodes
        out[k] = [n * ppn + p for n in nodes for p in range(ppn)][:jobs[k].procs]
    return out


def interval_set(ids: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``"0-3 8"`` (Batsim's interval set, hyphen form)."""
    parts: list[str] = []
    s = sorted(ids)
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        parts.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return " ".join(parts)


def jobs_csv_rows(workload: Workload, jobs: Sequence[TraceJob], schedule: Schedule) -> list[dict]:
    """One Batsim jobs.csv row per job (``COLUMNS``), in job order."""
    cluster = Cluster.from_swf_header(workload.trace.max_nodes, workload.trace.max_procs)
    alloc = allocate(jobs, schedule, cluster)
    rows = []
    for k, j in enumerate(jobs):
        start, end = schedule.start[k], schedule.end[k]
        execution = end - start
        rows.append({
            "job_id": workload.ids[j.index], "workload_name": workload.name,
            "profile": workload.profiles[j.index], "submission_time": j.submit,
            "requested_number_of_resources": j.procs, "requested_time": j.estimate,
            "success": 1, "final_state": "COMPLETED_SUCCESSFULLY",
            "starting_time": start, "execution_time": execution, "finish_time": end,
            "waiting_time": start - j.submit, "turnaround_time": end - j.submit,
            "stretch": (end - j.submit) / execution if execution > 0 else 1.0,
            "allocated_resources": interval_set(alloc[k]), "consumed_energy": -1,
            "metadata": "",
        })
    return rows


def write_jobs_csv(path: Path, rows: Sequence[dict]) -> None:
    with outputs.open_output(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})
