"""The ASA_X paper's evaluation (section 4) in virtual time, with the real controller.

What runs: the paper's 15 workflows as 46 stage jobs (coscheduler/workloads: 4 Montage, 4 BLAST,
4 Statistics at 8/16/32/64 cores, 3 Synthetic at 16/32/64 cores), all submitted at t = 0,
on a ``VirtualBackend`` cluster driven by ``Controller`` with one of the co-allocation
policies (space sharing with EASY backfilling, Static 50 %, ASA_X). Nothing here decides
anything: the controller and the policies are the ones a real cluster runs.

Modelling choices (each one is a parameter or documented in docs/simulator.md):

- The cluster is one node of ``cluster_cores`` cores by default: the paper's NumaScale
  machine (6 x 48 cores) appears to jobs as a single server. ``node_cores`` splits it into
  equal nodes; every job (at most 64 cores, one node each) must fit one node.
- A stage's profile comes from ``coscheduler.workloads.profile.stage_profile``: its runtime
  alone and its CPU use u (CPU time over cores x runtime). Its memory use is the paper's
  Table 2 memory share of the allocation for its workflow (``mem_share``: Montage 10 %,
  BLAST 44 %, Statistics 5 %, Synthetic 95 %), because the virtual backend's interference
  model is written in shares of the host's allocation; the program's own peak ``mem_mb``
  depends on the machine's memory per core, which the paper does not pin down per job.
- Job classes are ``{workflow}-{cores}/{stage}`` (``montage-8/mProject``), not the
  testbed's ``montage/mProject``: the controller measures ASA_X's degradation loss against
  the class's runtime alone, and a stage on 8 cores runs 8x longer than on 64.
- Queue order is submission order (FCFS by the job's position in the paper's list, as
  Slurm orders equal-priority jobs by job id), not alphabetical job ids.
- ``scale`` shrinks every stage's work (scale 1: workflows of 2-5 min, the paper's took
  0.3-0.7 h). The controller's time constants (pass period 10 s, decline cooldown 30 s)
  shrink with it, so a small-scale run is the scale-1 run in miniature (up to the stages'
  fixed start-up overheads and walltime margins).
- ASA_X's learning carries over between repetitions through its recorder (what the
  controller persists anyway): pass the same recorder to successive ``run_paper`` calls.
  A fresh recorder is a fresh learner. Each repetition seeds the learner with
  ``seed + repeat_index``.

Metrics (per run), as the paper defines them (section 4.3):

- makespan_s: the last stage's end (everything was submitted at t = 0);
- workflow_runtime_s: per workflow, the sum of its stages' runtimes (end - start);
- mean_wait_s: mean over stage jobs of start - eligible, where eligible is the time the
  stage could first start: max(submit, its parent's end);
- mean_response_s: mean over stage jobs of end - submit ("the time elapsed between the
  submission and the time when the job finishes execution");
- cpu_util: CPU core-seconds the jobs used (the fluid model's integral) over the
  core-seconds of allocated capacity: a host's cores from its start to its end; a guest's
  cores only while it outlives its host (before that they are its host's, counted once);
- cluster_util: the same CPU core-seconds over the whole cluster's capacity (cores x
  makespan), idle cores included;
- coallocations: guests started inside a host; guest_quotas their quota fractions;
- timeouts: stages killed at their walltime (their successors then fail), only with
  ``kill_at_walltime`` (off by default: the paper set no hard deadlines);
- overruns: stages whose runtime exceeded their walltime request.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..backends.interference import CALIBRATED, InterferenceModel
from ..backends.virtual import Profile, VirtualBackend
from ..controller import Controller, ControllerConfig, order_by
from ..controller.usage import ClassUsage
from ..learner import LearnerConfig
from ..learner.classes import class_key
from ..model import Allocation, InvalidInput, Job
from ..policies.coalloc import Asax, SpaceSharing, Static, make_policy
from ..recorder import MemoryRecorder, Recorder

PAPER_CLUSTER_CORES: tuple[int, ...] = (64, 128, 256)
PAPER_LOAD = {64: "8x", 128: "4x", 256: "2x"}
POLICIES: tuple[str, ...] = ("space-sharing", "static", "asax")
# With the yardstick: the oracle knows every stage's true CPU use and lends exactly the
# idle share, without interference (policies/oracle.py).
ALL_POLICIES: tuple[str, ...] = POLICIES + ("oracle",)
# The oracle's runs: quotas only, no interference between co-located jobs.
NO_INTERFERENCE = InterferenceModel(memory_penalty=0.0)
WORKFLOW_KINDS: tuple[str, ...] = ("montage", "blast", "statistics", "synthetic")

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

# The controller's time constants at scale 1 (see the module docstring).
TICK_S = 10.0
DECLINE_COOLDOWN_S = 30.0

_EPS = 1e-9


# -- the workload ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class PaperStage:
    """One stage job of the paper's mix, with the profile the virtual backend runs it by."""

    job: Job
    profile: Profile
    workflow: str     # the workflow instance, e.g. "montage-8"
    kind: str         # the workflow kind, e.g. "montage"


SEQUENTIAL_CORES = ("one", "workflow")

# The co-allocation rules before issue #10, for comparison (``old_rules``): one guest per
# host, at most four hosts asked per guest and pass, a former guest never hosts.
OLD_RULES = {"max_guests_per_host": 1, "max_candidates_per_guest": 4,
             "former_guests_host": False}

# Interference models by name: fitted to real measurements, or quotas and memory only.
MODELS: dict[str, InterferenceModel] = {"calibrated": CALIBRATED,
                                        "fluid": InterferenceModel(memory_penalty=2.0)}

# ASA_X's optional experts beyond the paper's four (coscheduler.learner.experts).
DEFAULT_EXPERTS: tuple[str, ...] = ("pair",)

# ASA_X's class granularity (coscheduler.learner.classes) over the job classes
# ``{kind}/{stage}/{cores}``: one class per workflow kind, per stage, or per stage and size.
CLASSES: dict[str, str] = {"kind": "prefix:1", "stage": "prefix:2", "size": "job"}


def paper_workload(scale: float = 1.0, tag: str | None = None,
                   sequential_cores: str = "workflow", *, copies: int = 1,
                   mix: Sequence[tuple[str, int]] | None = None,
                   core_speed: float = 1.0) -> list[PaperStage]:
    """The paper's 46 stage jobs in submission order, all submitted at t = 0.

    ``tag`` goes in front of every job id (``{tag}.montage-8.mProject``) so that runs
    sharing one state database never reuse a job id. ``sequential_cores``: "workflow" (the
    paper's: every stage is a job asking for its workflow's cores; a sequential one keeps
    one of them busy) or "one" (the testbed's jobs: a sequential stage asks for one core).
    ``copies``: the 15 workflows that many times over (``--scale-out``), copy after copy;
    copy i > 0 names its instances ``montage-8.i``. ``mix``: (workflow kind, cores) pairs
    instead of the paper's (the Docker testbed runs it at a fraction of the cores).
    ``core_speed``: what a core of the cluster that runs the jobs' commands is worth (the
    stage programs shrink their CPU work by it; the profiles, and so the simulation, do not
    change)."""
    if sequential_cores not in SEQUENTIAL_CORES:
        raise InvalidInput(f"sequential_cores must be one of {', '.join(SEQUENTIAL_CORES)}, "
                           f"got {sequential_cores!r}")
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise InvalidInput(f"copies (scale-out) must be an integer >= 1, got {copies!r}")
    from coscheduler.workloads.jobs import PAPER_MIX, workflow_jobs
    from coscheduler.workloads.profile import workflow_profiles

    base_mix = tuple(PAPER_MIX if mix is None else mix)
    profiles_of = {(kind, cores): workflow_profiles(kind, cores, scale) for kind, cores in base_mix}
    stages: list[PaperStage] = []
    for copy, (kind, cores) in ((c, m) for c in range(copies) for m in base_mix):
        name = f"{kind}-{cores}" if copy == 0 else f"{kind}-{cores}.{copy}"
        prefix = name if tag is None else f"{tag}.{name}"
        jobs = workflow_jobs(kind, cores, scale, 0.0, prefix, core_speed=core_speed)
        profiles = profiles_of[(kind, cores)]
        for job, prof in zip(jobs, profiles, strict=True):
            held, util = job.cores, prof.cpu_util
            if sequential_cores == "workflow" and job.cores < cores:
                held, util = cores, prof.cpu_util * job.cores / cores
            job = dataclasses.replace(job, job_class=f"{kind}/{prof.stage}/{cores}", cores=held)
            stages.append(PaperStage(job, Profile(
                prof.runtime_s, util, prof.mem_share * 100.0, io_share=prof.io_share,
                membw_share=prof.membw_share, io_mb_s=prof.io_mb_s,
                wait_share=1.0 - prof.cpu_util), name, kind))
    return stages


def cluster_nodes(cluster_cores: object, node_cores: object | None = None,
                  largest_job: int = 64) -> dict[str, int]:
    """The virtual cluster's nodes: one node of ``cluster_cores`` by default, else equal
    nodes of ``node_cores``. Refuses a cluster or node too small for the largest job."""
    if isinstance(cluster_cores, bool) or not isinstance(cluster_cores, int) or cluster_cores < 1:
        raise InvalidInput(f"cluster cores must be a positive integer, got {cluster_cores!r}")
    if cluster_cores < largest_job:
        raise InvalidInput(f"cluster cores {cluster_cores} cannot hold the workload's largest "
                           f"job ({largest_job} cores): give at least {largest_job}")
    if node_cores is None:
        return {"n1": cluster_cores}
    if isinstance(node_cores, bool) or not isinstance(node_cores, int) or node_cores < largest_job:
        raise InvalidInput(f"node cores must be an integer >= {largest_job} (the largest job "
                           f"runs on one node), got {node_cores!r}")
    if cluster_cores % node_cores:
        raise InvalidInput(f"cluster cores {cluster_cores} is not a multiple of node cores "
                           f"{node_cores}")
    return {f"n{i + 1}": node_cores for i in range(cluster_cores // node_cores)}


def canonical_policy(name: object) -> str:
    """``space-sharing`` (alias slurm), ``static``, ``asax`` (alias asa_x) or ``oracle``;
    else a named error."""
    if isinstance(name, str) and name.strip().lower() == "oracle":
        return "oracle"
    try:
        pol = make_policy(name) if isinstance(name, str) else None
    except InvalidInput:
        pol = None
    for cls, key in ((SpaceSharing, "space-sharing"), (Static, "static"), (Asax, "asax")):
        if isinstance(pol, cls):
            return key
    raise InvalidInput(f"unknown co-allocation policy {name!r}: use one of {', '.join(ALL_POLICIES)}")


def submission_order(stages: Sequence[PaperStage]):
    """FCFS by submission position (what Slurm's increasing job ids give), not by job id."""
    position = {s.job.job_id: i for i, s in enumerate(stages)}

    def order(jobs: Sequence[Job], now: float) -> list[Job]:
        return sorted(jobs, key=lambda j: (j.submit_time, position.get(j.job_id, len(position)),
                                           j.job_id))

    return order


class _RecordingBackend(VirtualBackend):
    """The virtual backend, noting each start's quota fraction (to report guests' quotas)."""

    def __init__(self, nodes: dict[str, int], kill_at_walltime: bool, model: InterferenceModel):
        super().__init__(nodes, kill_at_walltime=kill_at_walltime, model=model)
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



# -- one run --------------------------------------------------------------------------------------

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
            "coallocations": self.coallocations,
            "mean_slowdown": round(self.mean_slowdown, 4), "rounds_closed": self.rounds_closed,
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


def run_paper(cluster_cores: int, policy: str, seed: int = 0, scale: float = 1.0,
              repeat_index: int = 0, recorder: Recorder | None = None, *,
              node_cores: int | None = None, tag: str | None = None,
              learning: str | None = None, sequential_cores: str = "workflow",
              kill_at_walltime: bool = False, static_fraction: float = 0.5,
              mix: Sequence[tuple[str, int]] | None = None,
              explain: bool = False, classes: str = "stage", prior_runs: bool = True,
              experts: Sequence[str] = DEFAULT_EXPERTS, model: InterferenceModel = CALIBRATED,
              usage: ClassUsage | None = None, scale_out: int = 1,
              old_rules: bool = False, queue_policy=None) -> PaperRun:
    """Run the paper's workload once on a virtual cluster of ``cluster_cores`` cores under
    ``policy`` (space-sharing, static, asax) and measure the paper's metrics.

    ``recorder``: where ASA_X keeps what it learns (a ``MemoryRecorder`` or a
    ``SqliteStore``); pass the same one to successive repetitions to carry learning over.
    None: a fresh one (a fresh learner). ``learning`` labels the run ("carried"/"fresh").
    ``kill_at_walltime``: kill a stage at its walltime as Slurm does; off by default, as in
    the paper ("no hard deadlines are set for jobs' wall-clock times"), so an overrun
    shows as a longer runtime (counted in ``overruns``) rather than a killed workflow.
    ``static_fraction``: the guest's quota under Static (the paper's 50 %).
    """
    from coscheduler.workloads.profile import check_scale

    scale = check_scale(scale)
    if classes not in CLASSES:
        raise InvalidInput(f"classes must be one of {', '.join(CLASSES)}, got {classes!r}")
    if isinstance(repeat_index, bool) or not isinstance(repeat_index, int) or repeat_index < 0:
        raise InvalidInput(f"repeat_index must be an integer >= 0, got {repeat_index!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidInput(f"seed must be an integer, got {seed!r}")
    policy = canonical_policy(policy)
    if isinstance(scale_out, bool) or not isinstance(scale_out, int) or scale_out < 1:
        raise InvalidInput(f"scale_out must be an integer >= 1, got {scale_out!r}")
    stages = paper_workload(scale, tag, sequential_cores, copies=scale_out, mix=mix)
    largest = max(s.job.cores for s in stages)
    nodes = cluster_nodes(cluster_cores * scale_out, node_cores, largest)
    backend = _RecordingBackend(nodes, kill_at_walltime,
                                NO_INTERFERENCE if policy == "oracle" else model)
    for s in stages:
        backend.submit(s.job, s.profile)
    config = ControllerConfig(decline_cooldown_s=DECLINE_COOLDOWN_S * scale, explain=explain,
                              **(OLD_RULES if old_rules else {}))
    # queue_policy: a heuristic, a learned scorer or an inspector (controller.order_by);
    # default the paper's submission order. A fresh order per run: an inspector's keeps state.
    order = submission_order(stages) if queue_policy is None else order_by(queue_policy)
    learning_label = learning or ("carried" if recorder is not None else "fresh")
    recorder = _RoundTap(recorder if recorder is not None else MemoryRecorder())
    if policy == "asax":
        usage = usage if usage is not None else ClassUsage()
        if prior_runs:
            # What a site's accounting of earlier exclusive runs holds (Slurm's sacct:
            # elapsed, CPU time, memory): each class's runtime alone, exactly what space
            # sharing measures here, and its CPU and memory use. The first co-locations get
            # degradation losses, and the pair expert knows its guests.
            for st in stages:
                cls = st.job.job_class
                if recorder.alone_runtime(cls) is None:
                    recorder.record_alone_runtime(cls, st.profile.alone_runtime_s)
                if usage.expected(cls) is None:
                    usage.add(cls, st.profile.cpu_util * 100.0, st.profile.mem_percent,
                              st.profile.io_mb_s)
        controller = Controller.from_recorder(
            backend, recorder, "asax",
            learner_config=LearnerConfig(seed=seed + repeat_index, extra_experts=tuple(experts)),
            queue_order=order, config=config, class_of=class_key(CLASSES[classes]), usage=usage)
    elif policy == "oracle":
        from ..policies.oracle import Oracle

        controller = Controller(backend, Oracle(
            {s.job.job_id: s.profile.cpu_util for s in stages},
            alone_runtime={s.job.job_id: s.profile.alone_runtime_s for s in stages}),
            recorder, order, config)
    else:
        controller = Controller(backend, make_policy(policy, static_fraction=static_fraction),
                                recorder, order, config)
    census = _Census(controller) if explain else None
    backend.run_until_idle(census or controller, tick_s=TICK_S * scale)
    run = _measure(stages, backend, cluster_cores, policy, repeat_index, seed, scale,
                    learning_label if policy == "asax" else None, cluster_cores * scale_out)
    run.scale_out = scale_out
    run.quota_log, run.use_log = list(backend.quota_log), backend.use_log
    run.start_quotas = dict(backend.start_quotas)
    run.round_times = [r.time for r in recorder.closed]
    if controller.learner is not None:
        learner = controller.learner
        run.rounds_closed = sum(learner.class_state(c).rounds for c in learner.known_classes())
        run.rounds_in_run = len(recorder.closed)
        run.weight_history = [
            {"class": r.job_class, "round": r.round, "time": r.time,
             "experts": list(learner.class_state(r.job_class).expert_names),
             "weights_before": list(r.weights_before), "weights_after": list(r.weights_after)}
            for r in recorder.closed]
    if census is not None:
        run.refusals = census.totals()
    return run


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
        out: dict[str, float] = {}
        for (t, refused), (t_next, _) in zip(self.passes, self.passes[1:]):
            for reason in refused.values():
                out[reason] = out.get(reason, 0.0) + (t_next - t)
        return out


def _measure(stages: list[PaperStage], backend: _RecordingBackend, cores: int, policy: str,
             repeat: int, seed: int, scale: float, learning: str | None,
             total_cores: int | None = None) -> PaperRun:
    outcomes = {o.job_id: o for o in backend.history}
    hosts = {job: host for _, job, host in backend.starts}
    records: list[StageRecord] = []
    for s in stages:
        j = s.job
        o = outcomes[j.job_id]
        parents = [outcomes[d] for d in j.depends_on]
        eligible = (max([j.submit_time] + [p.end_time for p in parents])
                    if all(p.state == "completed" for p in parents) else None)
        ran = j.job_id in backend.start_quotas
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
    shared = {r.job_id for r in guests} | {r.host for r in guests}
    slowdown = {r.job_id: (r.end - r.start) / by_id[r.job_id].profile.alone_runtime_s - 1.0
                for r in records if r.job_id in shared and r.state == "completed"}
    slowdowns = list(slowdown.values())
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
        peak_held_cores=_peak(held), coallocations=len(guests),
        mean_slowdown=statistics.fmean(slowdowns) if slowdowns else 0.0,
        colocated=len(slowdowns),
        io_pairs=sum(1 for r in guests if r.job_id in io_heavy and r.host in io_heavy),
        io_pair_slowdown=statistics.fmean(io_pair_slowdowns) if io_pair_slowdowns else None,
        guest_quotas=[backend.start_quotas[r.job_id] for r in guests],
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


# -- the whole experiment -------------------------------------------------------------------------

def run_experiment(cluster_sizes: Sequence[int] = PAPER_CLUSTER_CORES,
                   policies: Sequence[str] = POLICIES, repeat: int = 3, scale: float = 1.0,
                   seed: int = 0, carry_learning: bool = True, store: Recorder | None = None,
                   node_cores: int | None = None, tag: str | None = None,
                   sequential_cores: str = "workflow", kill_at_walltime: bool = False,
                   on_run=None, mix: Sequence[tuple[str, int]] | None = None, *,
                   classes: str = "stage",
                   experts: Sequence[str] = DEFAULT_EXPERTS,
                   model: InterferenceModel = CALIBRATED, explain: bool = False,
                   prior_runs: bool = True, scale_out: int = 1,
                   old_rules: bool = False, queue_policy=None,
                   workers: int | None = 1, cluster: str | None = None) -> list[PaperRun]:
    """Every cluster size x policy x repetition. ASA_X's learning carries over between the
    repetitions of one cluster size (``carry_learning``; else a fresh learner each time);
    each cluster size starts fresh, so its figures do not depend on which sizes ran first.
    With ``store`` (a state database) every ASA_X run learns into it and from it, across
    sizes and invocations. ``on_run(run)`` is called after each run (progress).
    ``workers``/``cluster``: run the independent chains (one per cluster size and policy)
    on that many local processes (None: every core) or on a Dask cluster
    (coscheduler/sweep.py); the runs, and so the figures, are those of a serial run."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidInput(f"repeat must be an integer >= 1, got {repeat!r}")
    from .. import sweep

    policies = [canonical_policy(p) for p in policies]
    opts = dict(node_cores=node_cores, tag=tag, sequential_cores=sequential_cores,
                kill_at_walltime=kill_at_walltime, mix=mix, classes=classes, experts=experts,
                model=model, explain=explain, prior_runs=prior_runs, scale_out=scale_out,
                old_rules=old_rules, queue_policy=queue_policy)
    if store is not None:
        # the database carries learning across sizes and cannot travel: one chain, here
        tasks = [sweep.Task("all sizes", (list(cluster_sizes), policies, repeat, scale, seed,
                                          carry_learning, store, opts))]
        workers, cluster = 1, None
    elif len(set(policies)) == len(policies):
        tasks = [sweep.Task(f"cores {c} {p}", ([c], [p], repeat, scale, seed, carry_learning,
                                               None, opts))
                 for c in cluster_sizes for p in policies]
    else:
        tasks = [sweep.Task(f"cores {c}", ([c], policies, repeat, scale, seed, carry_learning,
                                           None, opts)) for c in cluster_sizes]

    def done(task, chain: list[PaperRun]) -> None:
        if on_run is not None:
            for run in chain:
                on_run(run)

    # ASA_X's fitted expert imports sklearn (about 1 s) at its first refit: once, not per worker
    chains = sweep.run_tasks(_chain_runs, tasks, workers=workers, cluster=cluster,
                             on_result=done,
                             preload=("sklearn.tree",) if "asax" in policies else ())
    return [run for chain in chains for run in chain]


def _chain_runs(cluster_sizes: Sequence[int], policies: Sequence[str], repeat: int,
                scale: float, seed: int, carry_learning: bool, store: Recorder | None,
                opts: dict) -> list[PaperRun]:
    """run_experiment's runs for these sizes and policies, in its order (one sweep task)."""
    runs: list[PaperRun] = []
    tag = opts["tag"]
    for cores in cluster_sizes:
        carried: Recorder | None = store if store is not None else (
            MemoryRecorder() if carry_learning else None)
        usage = ClassUsage() if carry_learning or store is not None else None
        for policy in policies:
            for k in range(repeat):
                recorder = carried if policy == "asax" else None
                run_tag = f"c{cores}-r{k}" if tag is None else f"{tag}-c{cores}-r{k}"
                run = run_paper(cores, policy, seed, scale, k, recorder,
                                node_cores=opts["node_cores"], tag=run_tag,
                                sequential_cores=opts["sequential_cores"],
                                kill_at_walltime=opts["kill_at_walltime"], mix=opts["mix"],
                                learning="carried" if (carry_learning or store is not None)
                                else "fresh", classes=opts["classes"], experts=opts["experts"],
                                model=opts["model"], explain=opts["explain"],
                                prior_runs=opts["prior_runs"],
                                usage=usage if policy == "asax" else None,
                                scale_out=opts["scale_out"], old_rules=opts["old_rules"],
                                queue_policy=opts["queue_policy"])
                runs.append(run)
    return runs


SUMMARY_FIELDS = ("makespan_s", "mean_wait_s", "mean_response_s", "cpu_util", "cluster_util",
                  "coallocations", "timeouts", "overruns", "mean_slowdown")


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


__all__ = [
    "ALL_POLICIES", "PAPER_CLUSTER_CORES", "PAPER_LOAD", "PAPER_TABLE2_RUNTIME_H", "PAPER_TABLE3", "POLICIES",
    "PaperRun", "PaperStage", "StageRecord", "WORKFLOW_KINDS", "canonical_policy", "cluster_nodes",
    "measure_run",
    "normalised_runtimes", "paper_normalised_runtimes", "paper_workload", "run_experiment",
    "run_paper", "runtime_by_kind", "submission_order", "summarise",
]
