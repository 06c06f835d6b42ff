"""Jobs from Slurm that run on Mesos: the partition the submit hook marks for Mesos.

A site where users submit everything to Slurm gives the Mesos cluster a partition of its
own (``mesos``; its nodes are FUTURE stand-ins for the Mesos agents, no slurmd serves
them). ``slurm_plugin/job_submit.lua`` checks a job submitted there like a co-scheduled
one (time limit, metadata, no arrays), holds it for good and marks it in its AdminComment
(``cosched:v=1;run=mesos;state=queued``: users cannot write AdminComment, so nobody can
mark a job by hand). This feed, in the Mesos framework's process
(``cosched run --backend mesos --from-slurm``):

- reads the partition's held, marked jobs (``squeue --json``), turns each into a Job (cores,
  nodes, walltime and class from the time limit and the ``--comment`` metadata) whose
  command is the job's own batch script (``scontrol write batch_script``) run in its
  working folder with its output appended to its StdOut/StdErr, as the submitting user;
- maps ``afterok`` and friends between such jobs onto the framework's own dependencies and
  clears them in Slurm (else Slurm, when it sees the parent end, would cancel the child);
  a dependency on any other Slurm job waits until Slurm itself clears it;
- writes how the job goes into its AdminComment (``state=accepted``, ``running`` with the
  agents, ``requeued``, then ``completed``/``failed``/``timeout``/``cancelled`` with the
  runtime and the reason) and, once it ended on Mesos, cancels the Slurm job, which is how
  a job that never ran in Slurm leaves its queue (so it ends CANCELLED in Slurm's records:
  the AdminComment and the framework's queue folder say how it really ended);
- a job its owner cancels in Slurm (``scancel``) is killed on Mesos (Slurm takes no
  changes to an ended job, so its AdminComment keeps the last state written).

Why this route rather than another: the batch system stays the users' one door (sbatch,
squeue, scancel, its accounts and limits: the partition's AllowGroups decide who may use
Mesos), nothing runs twice (Slurm never starts a held job), and the mark is one only an
admin or the hook can write.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

from coscheduler.model import InvalidInput, Job, Outcome, StageType

log = logging.getLogger("mesos_framework.slurm_feed")

MARK = "cosched:v=1;run=mesos"
ID_PREFIX = "slurm-"
LIVE_STATES = ("queued", "accepted", "running", "requeued")

# argv: sh -c BRIDGE slurm-job WORKDIR STDOUT STDERR JOBID JOBNAME SCRIPT
# The batch script runs as it would under sbatch: in its working folder, output appended
# to its files, SLURM_JOB_ID & co. set; each part of a job of several parts runs it once
# (SLURM_NODEID = COSCHED_PART: there is no srun on a Mesos agent).
BRIDGE_SCRIPT = (
    'cd "$1" 2>/dev/null || cd "${MESOS_SANDBOX:-/tmp}"; '
    '[ -n "$2" ] && { exec >>"$2" || exit 98; }; '
    '[ -n "$3" ] && { exec 2>>"$3" || exit 98; }; '
    'export SLURM_JOB_ID="$4" SLURM_JOBID="$4" SLURM_JOB_NAME="$5" '
    'SLURM_NNODES="${COSCHED_PARTS:-1}" SLURM_NODEID="${COSCHED_PART:-0}" '
    'SLURM_CPUS_ON_NODE="${COSCHED_CORES:-1}"; '
    'f="${MESOS_SANDBOX:-${TMPDIR:-/tmp}}/slurm-script-$4-$$"; '
    'printf "%s" "$6" > "$f" && chmod 700 "$f" || exit 98; '
    '"$f"; rc=$?; rm -f "$f"; exit $rc')


def job_id_for(slurm_id: int) -> str:
    return f"{ID_PREFIX}{int(slurm_id)}"


def slurm_id_of(job_id: str) -> int | None:
    if not job_id.startswith(ID_PREFIX) or not job_id[len(ID_PREFIX):].isdigit():
        return None
    return int(job_id[len(ID_PREFIX):])


def parse_mark(admin_comment: str | None) -> dict[str, str] | None:
    """The Mesos mark in an AdminComment as its key/value pairs, or None."""
    text = (admin_comment or "").strip()
    if not text.startswith(MARK):
        return None
    out = {}
    for item in text[len("cosched:"):].split(";"):
        k, sep, v = item.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def format_mark(state: str, **extra: Any) -> str:
    """``cosched:v=1;run=mesos;state=S;k=v...``; values cleaned of ``;``, ``=`` and spaces."""
    parts = [MARK, f"state={state}"]
    for k, v in extra.items():
        if v is None or v == "":
            continue
        clean = re.sub(r"[;=\s]+", "_", str(v))[:160]
        parts.append(f"{k}={clean}")
    return ";".join(parts)


_DEP_ITEM = re.compile(r"(after|afterany|afterok|afternotok|aftercorr):([0-9:+_]+?)(?:\((unfulfilled|failed)\))?$")


@dataclass(frozen=True)
class Dependencies:
    depends_on: tuple[str, ...] = ()   # our job ids (afterok on jobs run on Mesos)
    waiting: bool = False              # on something else Slurm has not cleared yet
    problem: str | None = None         # cannot be run: say why


def translate_dependencies(dep: str, ours: Mapping[int, str]) -> Dependencies:
    """A pending job's Slurm dependency (``squeue``'s form, e.g. ``afterok:12(unfulfilled),
    afterany:13``) in terms of jobs run on Mesos (``ours``: Slurm id -> job id).

    ``afterok`` on ours becomes a dependency of the framework's (which runs a job once its
    dependencies completed, and fails it when one did not). Other kinds on ours, ``?``
    (any of), or entries on other jobs not yet fulfilled: wait, Slurm clears them when met.
    """
    dep = (dep or "").strip()
    if not dep or dep == "(null)":
        return Dependencies()
    if "?" in dep:
        return Dependencies(waiting=True)
    if "(failed)" in dep:
        return Dependencies(problem=f"Slurm dependency {dep} can never be satisfied")
    mine: list[str] = []
    waiting = False
    for item in dep.split(","):
        m = _DEP_ITEM.fullmatch(item.strip())
        if not m:
            waiting = True
            continue
        kind, ids, mark = m.groups()
        for raw in ids.split(":"):
            sid = raw.split("+")[0].split("_")[0]
            if not sid.isdigit():
                waiting = True
                continue
            if int(sid) in ours:
                if kind == "afterok":
                    mine.append(ours[int(sid)])
                else:
                    waiting = waiting or mark is not None
            elif mark is not None:        # unfulfilled on a job of Slurm's own
                waiting = True
    return Dependencies(tuple(dict.fromkeys(mine)), waiting)


def job_from_slurm(sj: Any, script: str, details: Mapping[str, str],
                   depends_on: tuple[str, ...] = ()) -> Job:
    """A marked Slurm job as the framework's Job (InvalidInput naming what is wrong)."""
    from slurm_plugin.metadata import default_class, parse_comment

    if sj.time_limit_s is None:
        raise InvalidInput(f"Slurm job {sj.job_id} has no time limit")
    if not sj.cpus:
        raise InvalidInput(f"Slurm job {sj.job_id}: Slurm reports no CPU count")
    if not script.startswith("#!"):
        raise InvalidInput(f"Slurm job {sj.job_id}: its batch script does not start with #!")
    meta = parse_comment(sj.comment, sj.time_limit_s)
    cores = int(sj.cpus)
    counts = [x for x in (sj.max_nodes, sj.node_count) if x]
    nodes = max(1, min(min(counts) if counts else 1, cores))
    stage = meta.stage_type or (StageType.PARALLEL if cores > 1 else StageType.SEQUENTIAL)
    argv = ("/bin/sh", "-c", BRIDGE_SCRIPT, "slurm-job", details.get("WorkDir", ""),
            details.get("StdOut", ""), details.get("StdErr", ""), str(sj.job_id), sj.name or "", script)
    return Job(job_id=job_id_for(sj.job_id), cores=cores, nodes=nodes,
               walltime_s=meta.walltime_s or sj.time_limit_s,
               job_class=meta.job_class or default_class(sj.user, sj.name),
               submit_time=0.0, stage_type=stage, tasks=meta.tasks or 1,
               workflow=meta.workflow, depends_on=depends_on, user=sj.user, command=argv)


class SlurmFeed:
    """See the module docstring. ``source`` is a ``slurm_plugin.source`` SlurmSource,
    ``commands`` the SlurmCommands it uses (for the batch script and job details)."""

    def __init__(self, source: Any, commands: Any, partition: str = "mesos"):
        self.source = source
        self.cmd = commands
        self.partition = partition
        self.jobs: dict[int, str] = {}          # Slurm id -> our job id (accepted)
        self._after: dict[int, tuple[str, ...]] = {}
        self._ending: set[int] = set()          # cancelled in Slurm by us, once ended on Mesos
        self._written: dict[int, str] = {}      # last AdminComment written
        self._refused: set[int] = set()
        self.errors: list[str] = []

    def __repr__(self) -> str:
        return f"SlurmFeed(partition {self.partition})"

    # -- the feed interface ---------------------------------------------------------------
    def poll(self, backend: Any) -> None:
        snapshot = {j.job_id: j for j in self.source.jobs()}
        self._withdrawn(backend, snapshot)
        self._running(backend)
        ours_in_slurm = {sid: job_id_for(sid) for sid, j in snapshot.items()
                         if j.partition == self.partition and parse_mark(j.admin_comment)}
        for sid in sorted(snapshot):
            j = snapshot[sid]
            if sid in self.jobs or sid in self._refused or j.partition != self.partition:
                continue
            mark = parse_mark(j.admin_comment)
            if j.state != "PENDING" or mark is None or mark.get("state") not in LIVE_STATES:
                continue
            self._take(backend, j, mark, snapshot, ours_in_slurm)

    def ended(self, outcome: Outcome) -> None:
        sid = slurm_id_of(outcome.job_id)
        if sid is None or sid not in self.jobs:
            return
        if outcome.state == "requeued":
            self._mark(sid, format_mark("requeued", reason=outcome.reason, after=self._after_text(sid)))
            return
        self._mark(sid, format_mark(outcome.state, runtime_s=f"{outcome.runtime_s:.1f}",
                                    reason=outcome.reason))
        del self.jobs[sid]
        self._ending.add(sid)
        try:
            self.source.cancel(sid)   # it never ran in Slurm: this is how it leaves the queue
        except Exception as exc:  # noqa: BLE001 - already gone (its owner cancelled it)
            log.info("Slurm job %s: scancel after its end on Mesos: %s", sid, exc)

    def pending(self) -> bool:
        return False     # Slurm may bring jobs at any time

    def close(self) -> None:
        pass

    # -- steps -------------------------------------------------------------------------------
    def _withdrawn(self, backend: Any, snapshot: Mapping[int, Any]) -> None:
        """Jobs cancelled in Slurm (by their owner) or gone from it: killed on Mesos."""
        for sid, jid in list(self.jobs.items()):
            j = snapshot.get(sid)
            if j is not None and not j.terminal:
                continue
            why = (f"cancelled in Slurm ({j.state})" if j is not None else "gone from Slurm")
            log.warning("Slurm job %s (%s): %s: withdrawn from Mesos", sid, jid, why)
            # An ended Slurm job takes no more changes: its AdminComment stays as it was.
            del self.jobs[sid]
            backend.cancel(jid, why)

    def _running(self, backend: Any) -> None:
        for rj in backend.running():
            sid = slurm_id_of(rj.job_id)
            if sid is None or sid not in self.jobs:
                continue
            agents = "+".join(n for n, _ in rj.allocation.cores_by_node)
            self._mark(sid, format_mark("running", agents=agents, host=rj.host_job,
                                        after=self._after_text(sid)))

    def _take(self, backend: Any, j: Any, mark: Mapping[str, str], snapshot: Mapping[int, Any],
              ours_in_slurm: Mapping[int, str]) -> None:
        sid = j.job_id
        if mark.get("after"):
            # Taken before (a previous framework instance): Slurm's dependency was cleared,
            # the mark keeps it.
            deps = Dependencies(tuple(x for x in mark["after"].split("+") if x))
        else:
            deps = translate_dependencies(j.dependency, ours_in_slurm)
        if deps.problem:
            self._refuse(sid, deps.problem)
            return
        if deps.waiting:
            return
        for d in deps.depends_on:
            if backend.known(d):
                continue
            # A parent that ended before this framework instance: its mark says how.
            pm = parse_mark(snapshot[slurm_id_of(d)].admin_comment) if slurm_id_of(d) in snapshot else None
            state = pm.get("state") if pm else None
            if state in LIVE_STATES:
                return        # not taken yet in this pass (taken in id order: next pass)
            backend.note_ended(d, state or "gone from Slurm")
        try:
            script = self.cmd.run("scontrol", "write", "batch_script", str(sid), "-")
            details = self._details(sid)
            job = job_from_slurm(j, script, details, deps.depends_on)
        except InvalidInput as exc:
            self._refuse(sid, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - Slurm busy: next poll
            log.warning("Slurm job %s: cannot read it yet: %s", sid, exc)
            return
        try:
            backend.submit(job)
        except InvalidInput as exc:
            self._refuse(sid, str(exc))
            return
        self.jobs[sid] = job.job_id
        self._after[sid] = deps.depends_on
        if deps.depends_on and j.dependency and j.dependency != "(null)":
            try:
                self.source.update(sid, Dependency="")
            except Exception as exc:  # noqa: BLE001
                log.warning("Slurm job %s: clearing its dependency (now the framework's): %s", sid, exc)
        self._mark(sid, format_mark("accepted", after=self._after_text(sid)))
        log.info("Slurm job %s taken as %s (%d cores on %d node(s), walltime %.0f s%s)", sid,
                 job.job_id, job.cores, job.nodes, job.walltime_s,
                 f", after {', '.join(deps.depends_on)}" if deps.depends_on else "")

    def _details(self, sid: int) -> dict[str, str]:
        from slurm_plugin.parse import _fields

        text = self.cmd.run("scontrol", "show", "job", "-o", str(sid))
        line = next((ln for ln in text.splitlines() if ln.strip()), "")
        out = {}
        for k, v in _fields(line):
            if k in ("WorkDir", "StdOut", "StdErr") and k not in out:
                out[k] = "" if v in ("(null)", "N/A") else v
        return out

    def _refuse(self, sid: int, why: str) -> None:
        log.error("Slurm job %s cannot run on Mesos: %s", sid, why)
        self.errors = (self.errors + [f"{sid}: {why}"])[-100:]
        self._refused.add(sid)
        self._mark(sid, format_mark("failed", reason=why))
        self._ending.add(sid)
        try:
            self.source.cancel(sid)
        except Exception as exc:  # noqa: BLE001
            log.warning("Slurm job %s: scancel: %s", sid, exc)

    def _mark(self, sid: int, text: str) -> None:
        if self._written.get(sid) == text:
            return
        try:
            self.source.update(sid, AdminComment=text)
            self._written[sid] = text
        except Exception as exc:  # noqa: BLE001 - recorded next time
            log.warning("Slurm job %s: writing its AdminComment: %s", sid, exc)

    def _after_text(self, sid: int) -> str:
        return "+".join(self._after.get(sid, ()))


def slurm_feed_from_options(options: Mapping[str, Any]) -> SlurmFeed:
    """For ``cosched run --backend mesos --from-slurm``: ``slurm_dir`` (a cluster of
    ``cosched slurm up``, whose Mesos partition is used) or ``slurm_conf``; ``mesos_partition``."""
    from slurm_plugin.commands import SlurmCommands
    from slurm_plugin.connect import with_default_cluster
    from slurm_plugin.source import make_source

    options = with_default_cluster(options)
    partition = options.get("mesos_partition")
    conf = options.get("slurm_conf")
    if options.get("slurm_dir") and not conf:
        from slurm_plugin.cluster import load_state

        state = load_state(options["slurm_dir"])
        if state is None:
            raise InvalidInput(f"no Slurm cluster in {options['slurm_dir']}: start one with "
                               "`cosched slurm up --mesos-partition mesos`, or give --slurm-conf")
        conf = state.slurm_conf
        partition = partition or state.mesos_partition
        if not partition:
            raise InvalidInput(f"the Slurm cluster in {options['slurm_dir']} has no Mesos partition "
                               "(cosched slurm up --mesos-partition NAME)")
    cmds = SlurmCommands(conf)
    return SlurmFeed(make_source(cmds, "cli"), cmds, partition or "mesos")


__all__ = ["BRIDGE_SCRIPT", "Dependencies", "MARK", "SlurmFeed", "format_mark", "job_from_slurm",
           "job_id_for", "parse_mark", "slurm_feed_from_options", "slurm_id_of",
           "translate_dependencies"]
