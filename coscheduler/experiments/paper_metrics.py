"""What a paper run measured, and the summaries beside the paper's Tables 2 and 3: the
recording backend, per-stage records, the run's figures (paper.py's docstring defines each),
medians over repeats, refusal tables, runtimes normalised to space sharing."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..backends.interference import InterferenceModel
from ..backends.virtual import VirtualBackend
from ..controller import Controller
from ..controller.hosts import seconds_by_refusal
from ..model import Allocation, Job
from ..recorder import Recorder

from .paper_workload import PaperStage

PAPER_LOAD = {64: "8x", 128: "4x", 256: "2x"}

# The paper's Table 3: (mean waiting time h, CPU utilisation %, mean response time h).
PAPER_TABLE3: dict[tuple[str, int], tuple[float, float, float]] = {
    ("space-sharing", 64): (3.5, 53, 4.4), ("space-sharing", 128): (1.5, 45, 2.4),
    ("space-sharing", 256): (0.5, 32, 1.4),
    ("static", 64): (1.7, 90, 4.8), ("static", 128): (0.8, 92, 2.8), ("static", 256): (0.3, 89, 2.0),
    ("asax", 64): (1.8, 82, 3.5), ("asax", 128): (1.0, 84, 2.0), ("asax", 256): (0.3, 83, 0.9),
}

# The paper's Table 2: mean total runtime (h) per workflow kind.
PAPER_TABLE2_RUNTIME_H: dict[int, dict[str, dict[str, float]]] = {
    64: {"space-sharing": {"montage": 0.35, "blast": 0.71, "statistics": 0.69, "synthetic": 0.49},
         "static": {"montage": 0.38, "blast": 0.82, "statistics": 0.77, "synthetic": 0.57},
         "asax": {"montage": 0.35, "blast": 0.75, "statistics": 0.73, "synthetic": 0.56}},
    128: {"space-sharing": {"montage": 0.32, "blast": 0.72, "statistics": 0.70, "synthetic": 0.50},
          "static": {"montage": 0.35, "blast": 0.79, "statistics": 0.76, "synthetic": 0.57},
          "asax": {"montage": 0.33, "blast": 0.73, "statistics": 0.72, "synthetic": 0.55}},
    256: {"space-sharing": {"montage": 0.29, "blast": 0.70, "statistics": 0.72, "synthetic": 0.48},
          "static": {"montage": 0.32, "blast": 0.80, "statistics": 0.76, "synthetic": 0.53},
          "asax": {"montage": 0.30, "blast": 0.76, "statistics": 0.73, "synthetic": 0.52}},
}

# A stage that waits on files at least this share of its runtime alone is I/O-heavy.
IO_HEAVY = 0.3

_EPS = 1e-9


class _RecordingBackend(VirtualBackend):
    """The virtual backend, noting each start's quota fraction (to report guests' quotas)."""

    def __init__(self, nodes: dict[str, int], kill_at_walltime: bool, model: InterferenceModel,
                 idle_guests: bool = False, shared_cores: bool = True):
        super().__init__(nodes, kill_at_walltime=kill_at_walltime, model=model,
                         idle_guests=idle_guests, shared_cores=shared_cores)
        self.start_quotas: dict[str, float] = {}
        self.use_log: list[tuple[float, str, float]] = []

    def start(self, job: Job, allocation: Allocation, quota_fraction: float,
              host_job: str | None = None) -> None:
        super().start(job, allocation, quota_fraction, host_job)
        self.start_quotas[job.job_id] = float(quota_fraction)

    def metrics(self):
        out = super().metrics()
        # What the controller saw of each job's CPU use, for the timeline picture.
        for jid, s in out.items():
            self.use_log.append((s.time, jid, s.cpu_percent / 100.0))
        return out


@dataclass(frozen=True)
class StageRecord:
    """What happened to one stage job in a run."""

    job_id: str
    workflow: str
    cores: int
    depends_on: tuple[str, ...]
    submit: float
    eligible: float | None     # None: it never became eligible (a parent did not complete)
    start: float
    end: float
    state: str
    host: str | None           # the host it ran inside as a guest, else None


@dataclass
class PaperRun:
    """The paper's metrics for one run (one cluster size, one policy, one repetition)."""

    cores: int
    policy: str
    repeat: int
    seed: int
    scale: float
    learning: str | None       # ASA_X: "carried" or "fresh"; None for the others
    makespan_s: float
    mean_wait_s: float
    mean_response_s: float
    cpu_util: float
    cluster_util: float
    busy_core_seconds: float
    held_core_seconds: float
    peak_held_cores: int
    coallocations: int
    guest_quotas: list[float]
    timeouts: int
    overruns: int
    failed: int
    completed: int
    workflow_runtime_s: dict[str, float]
    stages: list[StageRecord] = field(default_factory=list)
    # Job ids in the order the backend reported their ends (the contract: each exactly once).
    outcome_ids: list[str] = field(default_factory=list)
    # Mean over stages that hosted or were guests of runtime / runtime alone - 1.
    mean_slowdown: float = 0.0
    # The same stages, time-weighted: their extra runtime over their runtimes alone (a 4 s
    # stage slowed 40 % weighs as much as 1.6 s, not as much as a 100 s stage slowed 40 %).
    weighted_slowdown: float = 0.0
    # The same mean over the hosts only and over the guests only (None: none completed).
    # ASA_X's loss judges the host; a guest trades its slowdown for the wait it skips.
    host_slowdown: float | None = None
    guest_slowdown: float | None = None
    colocated: int = 0
    # Guests co-located with a host when both wait on files at least IO_HEAVY of their
    # time, and the mean slowdown of the stages in those pairs (None without such pairs).
    io_pairs: int = 0
    io_pair_slowdown: float | None = None
    # With ``explain``: stage-seconds of waiting per rule that kept a stage from every host.
    refusals: dict[str, float] | None = None
    # ASA_X: learning rounds closed so far, summed over its classes (None for the others),
    # and the weight updates closed during this run (class, round, weights before/after).
    rounds_closed: int | None = None
    rounds_in_run: int | None = None
    weight_history: list[dict] | None = None
    # The workload and the cluster were this many times the paper's (``--scale-out``).
    scale_out: int = 1
    # Stages that ran as two parts in two hosts (``--span-hosts``; each is one co-allocation).
    spans: int = 0
    # For the timeline picture (not in the JSON): quota changes (time, job, quota), CPU use
    # samples (time, job, share of its cores), quotas at start, and round closing times.
    quota_log: list = field(default_factory=list, repr=False)
    use_log: list = field(default_factory=list, repr=False)
    start_quotas: dict = field(default_factory=dict, repr=False)
    round_times: list = field(default_factory=list, repr=False)

    def as_json(self, refusals: bool = False) -> dict:
        """The run as docs/simulator.md documents it (no per-stage records)."""
        out = {
            "cores": self.cores, "scale_out": self.scale_out, "policy": self.policy,
            "repeat": self.repeat,
            "seed": self.seed, "scale": self.scale, "learning": self.learning,
            "makespan_s": round(self.makespan_s, 3), "mean_wait_s": round(self.mean_wait_s, 3),
            "mean_response_s": round(self.mean_response_s, 3),
            "cpu_util": round(self.cpu_util, 4), "cluster_util": round(self.cluster_util, 4),
            "peak_held_cores": self.peak_held_cores,
            "coallocations": self.coallocations, "spans": self.spans,
            "mean_slowdown": round(self.mean_slowdown, 4),
            "weighted_slowdown": round(self.weighted_slowdown, 4),
            "host_slowdown": _round(self.host_slowdown),
            "guest_slowdown": _round(self.guest_slowdown),
            "rounds_closed": self.rounds_closed,
            "rounds_in_run": self.rounds_in_run,
            "io_pairs": self.io_pairs,
            "io_pair_slowdown": (None if self.io_pair_slowdown is None
                                 else round(self.io_pair_slowdown, 4)),
            "mean_guest_quota": (round(statistics.fmean(self.guest_quotas), 4)
                                 if self.guest_quotas else None),
            "timeouts": self.timeouts, "overruns": self.overruns, "failed": self.failed,
            "completed": self.completed,
            "workflow_runtime_s": {k: round(v, 3) for k, v in self.workflow_runtime_s.items()},
        }
        if refusals:
            out["refusals"] = {k: round(v, 1) for k, v in (self.refusals or {}).items()}
        return out


class _RoundTap:
    """A recorder that passes everything on and also keeps the rounds closed through it
    (for the weight trajectories)."""

    def __init__(self, inner: Recorder):
        self._inner = inner
        self.closed: list = []
        if hasattr(inner, "record_observation"):
            self.record_observation = self._record_observation

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def record_round(self, closed) -> None:
        self.closed.append(closed)
        self._inner.record_round(closed)

    def _record_observation(self, record, state, closed) -> None:
        if closed is not None:
            self.closed.append(closed)
        self._inner.record_observation(record, state, closed)


class _Census:
    """Wraps a controller: after each pass, notes why each waiting stage found no host
    (``PassReport.refused``), weighted by the time until the next pass."""

    def __init__(self, controller: Controller):
        self.controller = controller
        self.passes: list[tuple[float, dict[str, str]]] = []

    def step(self):
        report = self.controller.step()
        self.passes.append((report.time, dict(report.refused)))
        return report

    def totals(self) -> dict[str, float]:
        """Stage-seconds of waiting per refusal reason."""
        return seconds_by_refusal(self.passes)


def _measure(stages: list[PaperStage], backend: _RecordingBackend, cores: int, policy: str,
             repeat: int, seed: int, scale: float, learning: str | None,
             total_cores: int | None = None) -> PaperRun:
    outcomes = {o.job_id: o for o in backend.history}
    hosts = {job: host for _, job, host in backend.starts}
    start_quotas = dict(backend.start_quotas)
    # A stage split into parts (policies.span) counts as one stage: its outcome is the
    # backend's (first part's start to last part's end), its host its first part's (every
    # part's host counts as shared), its quota at start the parts' core-weighted mean.
    parts = getattr(backend, "parts", {})
    part_hosts: set[str] = set()
    spans = 0
    for stage, ids in parts.items():
        started = [p for p in ids if p in start_quotas]
        if not started:
            continue
        spans += 1
        part_cores = [backend.part_jobs[p].cores for p in started]
        start_quotas[stage] = (sum(start_quotas[p] * c for p, c in zip(started, part_cores))
                               / sum(part_cores))
        ran_in = [hosts[p] for p in started if hosts.get(p) is not None]
        if ran_in:
            hosts[stage] = ran_in[0]
            part_hosts.update(ran_in)
    records: list[StageRecord] = []
    for s in stages:
        j = s.job
        o = outcomes[j.job_id]
        parents = [outcomes[d] for d in j.depends_on]
        eligible = (max([j.submit_time] + [p.end_time for p in parents])
                    if all(p.state == "completed" for p in parents) else None)
        ran = j.job_id in start_quotas
        records.append(StageRecord(j.job_id, s.workflow, j.cores, j.depends_on, j.submit_time,
                                   eligible if ran else None, o.start_time, o.end_time, o.state,
                                   hosts.get(j.job_id)))
    ran = [r for r in records if r.eligible is not None]
    held = _held_intervals(records)
    held_cs = sum((b - a) * c for a, b, c in held)
    runtimes: dict[str, float] = {}
    for r in records:
        runtimes[r.workflow] = runtimes.get(r.workflow, 0.0) + (r.end - r.start)
    guests = [r for r in records if r.host is not None]
    by_id = {s.job.job_id: s for s in stages}
    shared = {r.job_id for r in guests} | {r.host for r in guests} | part_hosts
    slowdown = {r.job_id: (r.end - r.start) / by_id[r.job_id].profile.alone_runtime_s - 1.0
                for r in records if r.job_id in shared and r.state == "completed"}
    slowdowns = list(slowdown.values())
    host_ids = {r.host for r in guests} | part_hosts
    of_hosts = [v for j, v in slowdown.items() if j in host_ids]
    of_guests = [slowdown[r.job_id] for r in guests if r.job_id in slowdown]
    alone_s = sum(by_id[j].profile.alone_runtime_s for j in slowdown)
    extra_s = sum(v * by_id[j].profile.alone_runtime_s for j, v in slowdown.items())
    io_heavy = {s.job.job_id for s in stages if s.profile.io_share >= IO_HEAVY}
    io_pair_slowdowns = [slowdown[j] for r in guests if r.job_id in io_heavy and r.host in io_heavy
                         for j in (r.job_id, r.host) if j in slowdown]
    makespan = max(r.end for r in records) - min(r.submit for r in records)
    return PaperRun(
        cores=cores, policy=policy, repeat=repeat, seed=seed, scale=scale, learning=learning,
        makespan_s=makespan,
        mean_wait_s=statistics.fmean(r.start - r.eligible for r in ran) if ran else 0.0,
        mean_response_s=statistics.fmean(r.end - r.submit for r in ran) if ran else 0.0,
        cpu_util=backend.busy_core_seconds / held_cs if held_cs > 0 else 0.0,
        cluster_util=(backend.busy_core_seconds / ((total_cores or cores) * makespan)
                      if makespan > 0 else 0.0),
        busy_core_seconds=backend.busy_core_seconds, held_core_seconds=held_cs,
        peak_held_cores=_peak(held), coallocations=len(guests), spans=spans,
        mean_slowdown=statistics.fmean(slowdowns) if slowdowns else 0.0,
        weighted_slowdown=extra_s / alone_s if alone_s > 0 else 0.0,
        host_slowdown=statistics.fmean(of_hosts) if of_hosts else None,
        guest_slowdown=statistics.fmean(of_guests) if of_guests else None,
        colocated=len(slowdowns),
        io_pairs=sum(1 for r in guests if r.job_id in io_heavy and r.host in io_heavy),
        io_pair_slowdown=statistics.fmean(io_pair_slowdowns) if io_pair_slowdowns else None,
        guest_quotas=[start_quotas[r.job_id] for r in guests],
        timeouts=sum(1 for r in records if r.state == "timeout"),
        overruns=sum(1 for r in records
                     if r.end - r.start > by_id[r.job_id].job.walltime_s + _EPS),
        failed=sum(1 for r in records if r.state in ("failed", "cancelled")),
        completed=sum(1 for r in records if r.state == "completed"),
        workflow_runtime_s={w: runtimes[w] for w in dict.fromkeys(
            by_id[r.job_id].workflow for r in records)},
        stages=records,
        outcome_ids=[o.job_id for o in backend.history],
    )


def measure_run(stages: list[PaperStage], backend, cores: int, policy: str, repeat: int,
                seed: int, scale: float, learning: str | None) -> PaperRun:
    """The paper's metrics of a run of ``stages`` on a cluster of ``cores`` cores, on any
    body that recorded what the virtual backend records: ``history`` (outcomes),
    ``starts`` ((time, job, host)), ``start_quotas`` (job -> quota at start) and
    ``busy_core_seconds`` (the Docker testbed measures a real Slurm run with the same
    definitions)."""
    return _measure(stages, backend, cores, policy, repeat, seed, scale, learning, cores)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _held_intervals(records: Iterable[StageRecord]) -> list[tuple[float, float, int]]:
    """(from, to, cores) the cluster's capacity was allocated: a host's (or lone job's)
    cores from start to end; a guest's cores only while it outlives its host."""
    ends = {r.job_id: r.end for r in records}
    out = []
    for r in records:
        if r.eligible is None:
            continue
        begin = r.start if r.host is None else max(r.start, ends.get(r.host, r.start))
        if r.end > begin:
            out.append((begin, r.end, r.cores))
    return out


def _peak(intervals: list[tuple[float, float, int]]) -> int:
    """Most cores held at once (an interval ending at t frees its cores before one
    starting at t takes them)."""
    events = sorted([(a, 1, c) for a, _, c in intervals] + [(b, 0, -c) for _, b, c in intervals])
    now = peak = 0
    for _, _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


SUMMARY_FIELDS = ("makespan_s", "mean_wait_s", "mean_response_s", "cpu_util", "cluster_util",
                  "coallocations", "spans", "timeouts", "overruns", "mean_slowdown",
                  "weighted_slowdown")


def summarise(runs: Sequence[PaperRun]) -> list[dict]:
    """Medians over the repetitions, per (cluster size, policy), in the runs' order; each
    with the paper's Table 3 figures for that cell (None where the paper has none)."""
    groups: dict[tuple[int, str], list[PaperRun]] = {}
    for r in runs:
        groups.setdefault((r.cores, r.policy), []).append(r)
    out = []
    for (cores, policy), rs in groups.items():
        row: dict = {"cores": cores, "scale_out": rs[0].scale_out, "policy": policy,
                     "repeats": len(rs)}
        for f in SUMMARY_FIELDS:
            row[f] = round(statistics.median(getattr(r, f) for r in rs), 4)
        for f in ("host_slowdown", "guest_slowdown"):   # (medians of the runs that have one)
            known = [getattr(r, f) for r in rs if getattr(r, f) is not None]
            row[f] = round(statistics.median(known), 4) if known else None
        row["rounds_closed"] = rs[-1].rounds_closed   # so far: after the last repetition
        row["rounds_in_run"] = (None if rs[0].rounds_in_run is None else
                                statistics.median(r.rounds_in_run for r in rs))
        row["workflow_runtime_s"] = {
            w: round(statistics.median(r.workflow_runtime_s[w] for r in rs), 3)
            for w in rs[0].workflow_runtime_s}
        paper = PAPER_TABLE3.get((policy, cores))
        row["oracle_share"] = None
        row["paper"] = None if paper is None else {
            "load": PAPER_LOAD[cores], "mean_wait_h": paper[0], "cpu_util": paper[1] / 100.0,
            "mean_response_h": paper[2]}
        out.append(row)
    # Each co-allocating policy's share of the oracle's mean-response gain over space
    # sharing (1: all of what co-allocation could give on this workload; < 0: a loss).
    by = {(r["cores"], r["policy"]): r for r in out}
    for r in out:
        base, orc = by.get((r["cores"], "space-sharing")), by.get((r["cores"], "oracle"))
        if base is None or orc is None or r["policy"] in ("space-sharing", "oracle"):
            continue
        gain = base["mean_response_s"] - orc["mean_response_s"]
        if gain > 1e-9:
            r["oracle_share"] = round((base["mean_response_s"] - r["mean_response_s"]) / gain, 4)
    return out


def instance_kinds(copies: int = 1) -> dict[str, str]:
    """Workflow instance name -> kind (``montage-8.3`` -> ``montage``)."""
    from coscheduler.workloads.jobs import PAPER_MIX

    return {(f"{k}-{c}" if i == 0 else f"{k}-{c}.{i}"): k
            for i in range(copies) for k, c in PAPER_MIX}


def refusal_table(runs: Sequence[PaperRun]) -> str:
    """Per cluster size and co-allocating policy: stage-seconds waited by stages no host took,
    by the rule that refused them (medians over repetitions), and the share of all waiting."""
    from ..controller.hosts import REFUSALS

    lines = ["Why waiting stages found no host (stage-seconds, medians over repetitions; "
             "% of all waiting):"]
    groups: dict[tuple[int, str], list[PaperRun]] = {}
    for r in runs:
        if r.refusals is not None and r.policy != "space-sharing":
            groups.setdefault((r.cores, r.policy), []).append(r)
    for (cores, policy), rs in groups.items():
        waited = statistics.median(sum(s.start - s.eligible for s in r.stages
                                       if s.eligible is not None) for r in rs)
        parts = []
        for reason in REFUSALS:
            v = statistics.median((r.refusals or {}).get(reason, 0.0) for r in rs)
            if v > 0:
                parts.append(f"{reason} {v:.0f} ({100 * v / waited:.0f} %)" if waited > 0
                             else f"{reason} {v:.0f}")
        lines.append(f"  {cores:>4} {policy:<8} waited {waited:.0f}: " + (", ".join(parts) or "-"))
    return "\n".join(lines)


def runtime_by_kind(row: dict) -> dict[str, float]:
    """Mean total runtime per workflow kind (Table 2 averages a kind's instances)."""
    out: dict[str, list[float]] = {}
    for w, t in row["workflow_runtime_s"].items():
        out.setdefault(w.split("-", 1)[0], []).append(t)
    return {k: statistics.fmean(v) for k, v in out.items()}


def normalised_runtimes(summary: Sequence[dict],
                        baseline: str = "space-sharing") -> dict[int, dict[str, dict[str, float]]]:
    """Per cluster size, policy and workflow kind: mean runtime over the baseline's
    (Table 2's "normalised against Slurm"); sizes without a baseline run are left out."""
    base = {r["cores"]: runtime_by_kind(r) for r in summary if r["policy"] == baseline}
    out: dict[int, dict[str, dict[str, float]]] = {}
    for r in summary:
        b = base.get(r["cores"])
        if b is None:
            continue
        mine = runtime_by_kind(r)
        out.setdefault(r["cores"], {})[r["policy"]] = {
            k: round(mine[k] / b[k], 4) for k in mine if b.get(k)}
    return out


def paper_normalised_runtimes(cores: int) -> dict[str, dict[str, float]] | None:
    """The paper's Table 2 runtimes over its Slurm runtimes, per policy and kind."""
    t = PAPER_TABLE2_RUNTIME_H.get(cores)
    if t is None:
        return None
    base = t["space-sharing"]
    return {p: {k: round(v / base[k], 4) for k, v in kinds.items()} for p, kinds in t.items()}
