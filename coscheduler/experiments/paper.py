"""The ASA_X paper's evaluation (section 4) in virtual time, with the real controller.

What runs: the paper's 15 workflows as 46 stage jobs (coscheduler/workloads: 4 Montage, 4 BLAST,
4 Statistics at 8/16/32/64 cores, 3 Synthetic at 16/32/64 cores), all submitted at t = 0,
on a ``VirtualBackend`` cluster driven by ``Controller`` with one of the co-allocation
policies (space sharing with EASY backfilling, Static 50 %, ASA_X). Nothing here decides
anything: the controller and the policies are the ones a real cluster runs.

Files: this one runs a policy and the experiment; the workload's shaping (stages, nodes,
submission order) is paper_workload.py's, what is measured and its summaries beside the
paper's tables paper_metrics.py's; their names are importable from here too.

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

from typing import Sequence

from ..backends.interference import CALIBRATED, InterferenceModel
from ..controller import Controller, ControllerConfig, order_by
from ..controller.usage import ClassUsage
from ..learner import LearnerConfig
from ..learner.classes import class_key
from ..model import InvalidInput
from ..policies.coalloc import Asax, SpaceSharing, Static, make_policy
from ..policies.lending import DEFAULT_MIN_SHARE
from ..policies.permit import HostHarmPermit
from ..recorder import MemoryRecorder, Recorder
from .paper_choices import CLASSES, DEFAULT_EXPERTS, MODEL_NAMES  # noqa: F401 - re-exported
from .paper_metrics import (IO_HEAVY, PAPER_LOAD, PAPER_TABLE2_RUNTIME_H,  # noqa: F401 - re-exported
                            PAPER_TABLE3, SUMMARY_FIELDS, PaperRun, StageRecord, _Census,
                            _RecordingBackend, _RoundTap, _measure, instance_kinds, measure_run,
                            normalised_runtimes, paper_normalised_runtimes, refusal_table,
                            runtime_by_kind, summarise)
from .paper_workload import (SEQUENTIAL_CORES, PaperStage, cluster_nodes,  # noqa: F401 - re-exported
                             paper_workload, submission_order)

PAPER_CLUSTER_CORES: tuple[int, ...] = (64, 128, 256)
POLICIES: tuple[str, ...] = ("space-sharing", "static", "asax")
# With the yardstick: the oracle knows every stage's true CPU use and lends exactly the
# idle share, without interference (policies/oracle.py).
ALL_POLICIES: tuple[str, ...] = POLICIES + ("oracle",)
# The oracle's runs: quotas only, no interference between co-located jobs.
NO_INTERFERENCE = InterferenceModel(memory_penalty=0.0)
WORKFLOW_KINDS: tuple[str, ...] = ("montage", "blast", "statistics", "synthetic")


# The controller's time constants at scale 1 (see the module docstring).
TICK_S = 10.0
DECLINE_COOLDOWN_S = 30.0


# -- the workload ---------------------------------------------------------------------------------

# The co-allocation rules before issue #10, for comparison (``old_rules``): one guest per
# host, at most four hosts asked per guest and pass, a former guest never hosts.
OLD_RULES = {"max_guests_per_host": 1, "max_candidates_per_guest": 4,
             "former_guests_host": False}

# Interference models by name (paper_choices.MODEL_NAMES): fitted to real measurements,
# or quotas and memory only.
MODELS: dict[str, InterferenceModel] = dict(zip(MODEL_NAMES, (
    CALIBRATED, InterferenceModel(memory_penalty=2.0))))


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


# -- one run --------------------------------------------------------------------------------------


def seed_prior_runs(stages: Sequence[PaperStage], recorder: Recorder, usage: ClassUsage) -> None:
    """What a site's accounting of earlier exclusive runs holds (Slurm's sacct: elapsed,
    CPU time, memory), given to ASA_X before its first decision: each stage class's
    runtime alone (exactly what space sharing measures here) and its usual CPU, memory and
    I/O use. The first co-locations then get degradation losses, closing rounds, and the
    lending rule and the pair expert know their guests. Classes already known are kept."""
    for st in stages:
        cls = st.job.job_class
        if recorder.alone_runtime(cls) is None:
            recorder.record_alone_runtime(cls, st.profile.alone_runtime_s)
        if usage.expected(cls) is None:
            usage.add(cls, st.profile.cpu_util * 100.0, st.profile.mem_percent, st.profile.io_mb_s)


def run_paper(cluster_cores: int, policy: str, seed: int = 0, scale: float = 1.0,
              repeat_index: int = 0, recorder: Recorder | None = None, *,
              node_cores: int | None = None, tag: str | None = None,
              learning: str | None = None, sequential_cores: str = "workflow",
              kill_at_walltime: bool = False, static_fraction: float = 0.5,
              mix: Sequence[tuple[str, int]] | None = None,
              explain: bool = False, classes: str = "stage", prior_runs: bool = True,
              experts: Sequence[str] = DEFAULT_EXPERTS, model: InterferenceModel = CALIBRATED,
              usage: ClassUsage | None = None, scale_out: int = 1,
              old_rules: bool = False, queue_policy=None, idle_guests: bool = False,
              permit: float | None = None, shared_cores: bool = True,
              loan_min_share: float = DEFAULT_MIN_SHARE,
              loan_rule: str = "share", short_actions: str = "forget",
              span_hosts: bool = False) -> PaperRun:
    """Run the paper's workload once on a virtual cluster of ``cluster_cores`` cores under
    ``policy`` (space-sharing, static, asax) and measure the paper's metrics.

    ``recorder``: where ASA_X keeps what it learns (a ``MemoryRecorder`` or a
    ``SqliteStore``); pass the same one to successive repetitions to carry learning over.
    None: a fresh one (a fresh learner). ``learning`` labels the run ("carried"/"fresh").
    ``kill_at_walltime``: kill a stage at its walltime as Slurm does; off by default, as in
    the paper ("no hard deadlines are set for jobs' wall-clock times"), so an overrun
    shows as a longer runtime (counted in ``overruns``) rather than a killed workflow.
    ``static_fraction``: the guest's quota under Static (the paper's 50 %).
    ``idle_guests``: ASA_X's guests run in the idle class (cpu.idle, as the agent's
    ``--idle-guests`` places them); ``permit``: ASA_X's Permit step vetoes a loan whose
    predicted host slowdown exceeds this share (policies.permit); None: no permit.
    ``shared_cores``: a host and its guests run on the host's cores, spread by the kernel
    (interference.py, "shared cores"); False: the pinned worst case, every co-runner on
    each job's own cores (the model before 2026-11-26's fourth session).
    ``loan_min_share``: ASA_X lends no less than this share of a guest's need; a guest
    offered less waits for a better host or for cores of its own (policies.lending).
    ``loan_rule``: "sooner" also refuses a partial loan unless the guest is estimated to end
    sooner as a guest than by waiting for cores of its own (ControllerConfig.lend_rule).
    ``span_hosts``: a parallel stage no single host takes may run as two parts in two hosts
    (policies.span; ControllerConfig.span_hosts).
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
                                NO_INTERFERENCE if policy == "oracle" else model,
                                idle_guests=idle_guests and policy == "asax",
                                shared_cores=shared_cores)
    for s in stages:
        backend.submit(s.job, s.profile)
    config = ControllerConfig(decline_cooldown_s=DECLINE_COOLDOWN_S * scale, explain=explain,
                              lend_min_share=loan_min_share, lend_rule=loan_rule,
                              span_hosts=span_hosts, **(OLD_RULES if old_rules else {}))
    # queue_policy: a heuristic, a learned scorer or an inspector (controller.order_by);
    # default the paper's submission order. A fresh order per run: an inspector's keeps state.
    order = submission_order(stages) if queue_policy is None else order_by(queue_policy)
    learning_label = learning or ("carried" if recorder is not None else "fresh")
    recorder = _RoundTap(recorder if recorder is not None else MemoryRecorder())
    if policy == "asax":
        usage = usage if usage is not None else ClassUsage()
        if prior_runs:
            seed_prior_runs(stages, recorder, usage)
        controller = Controller.from_recorder(
            backend, recorder, "asax",
            learner_config=LearnerConfig(seed=seed + repeat_index, extra_experts=tuple(experts)),
            queue_order=order, config=config, class_of=class_key(CLASSES[classes]), usage=usage,
            permit=None if permit is None else HostHarmPermit(permit, idle_guests, model),
            short_actions=short_actions)
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
             "risk": list(r.risk), "weights_before": list(r.weights_before), "weights_after": list(r.weights_after)}
            for r in recorder.closed]
    if census is not None:
        run.refusals = census.totals()
    return run


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
                   workers: int | None = 1, cluster: str | None = None,
                   idle_guests: bool = False, permit: float | None = None,
                   shared_cores: bool = True,
                   loan_min_share: float = DEFAULT_MIN_SHARE,
                   loan_rule: str = "share", short_actions: str = "forget",
                   span_hosts: bool = False) -> list[PaperRun]:
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
                old_rules=old_rules, queue_policy=queue_policy, idle_guests=idle_guests,
                permit=permit, shared_cores=shared_cores, loan_min_share=loan_min_share,
                loan_rule=loan_rule, short_actions=short_actions, span_hosts=span_hosts)
    slots: list[list[tuple[int, int, int]]] | None = None
    if store is not None:
        # the database carries learning across sizes and cannot travel: one chain, here
        tasks = [sweep.Task("all sizes", (list(cluster_sizes), policies, range(repeat), scale,
                                          seed, carry_learning, store, opts))]
        workers, cluster = 1, None
    elif len(set(policies)) == len(policies):
        # A chain holds what must stay in one process: ASA_X's repetitions when learning
        # carries over. Every other run is a task of its own, so the pool stays balanced;
        # the longest tasks (the chains) go first. ``slots``: each task's runs' places in
        # the serial order (size index, policy index, repetition).
        chains, singles, chain_slots, single_slots = [], [], [], []
        for ci, c in enumerate(cluster_sizes):
            for pi, p in enumerate(policies):
                if p == "asax" and carry_learning:
                    chains.append(sweep.Task(f"cores {c} {p}", ([c], [p], range(repeat), scale,
                                                                seed, carry_learning, None, opts)))
                    chain_slots.append([(ci, pi, k) for k in range(repeat)])
                    continue
                for k in range(repeat):
                    singles.append(sweep.Task(f"cores {c} {p} repetition {k}",
                                              ([c], [p], range(k, k + 1), scale, seed,
                                               carry_learning, None, opts)))
                    single_slots.append([(ci, pi, k)])
        # Longest first (the pool's tail is then short): chains, then by cluster size,
        # which a run's length follows.
        order = sorted(range(len(chains)), key=lambda i: -chains[i].args[0][0])
        order_s = sorted(range(len(singles)), key=lambda i: -singles[i].args[0][0])
        tasks = [chains[i] for i in order] + [singles[i] for i in order_s]
        slots = [chain_slots[i] for i in order] + [single_slots[i] for i in order_s]
    else:
        tasks = [sweep.Task(f"cores {c}", ([c], policies, range(repeat), scale, seed,
                                           carry_learning, None, opts)) for c in cluster_sizes]

    def done(task, chain: list[PaperRun]) -> None:
        if on_run is not None:
            for run in chain:
                on_run(run)

    # ASA_X's fitted expert imports sklearn (about 1 s) at its first refit; run_tasks
    # imports it before forking only when the workers outnumber the cores
    chains_run = sweep.run_tasks(_chain_runs, tasks, workers=workers, cluster=cluster,
                                 on_result=done,
                                 preload=("sklearn.tree",) if "asax" in policies else ())
    if slots is None:
        return [run for chain in chains_run for run in chain]
    # Back in the serial order: size, then policy, then repetition.
    placed = sorted(((slot, run) for task_slots, chain in zip(slots, chains_run)
                     for slot, run in zip(task_slots, chain, strict=True)), key=lambda e: e[0])
    return [run for _, run in placed]


def _chain_runs(cluster_sizes: Sequence[int], policies: Sequence[str], repetitions: range,
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
            for k in repetitions:
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
                                queue_policy=opts["queue_policy"],
                                idle_guests=opts.get("idle_guests", False),
                                permit=opts.get("permit"),
                                shared_cores=opts.get("shared_cores", True),
                                loan_min_share=opts.get("loan_min_share", DEFAULT_MIN_SHARE),
                                loan_rule=opts.get("loan_rule", "share"),
                                short_actions=opts.get("short_actions", "forget"),
                                span_hosts=opts.get("span_hosts", False))
                runs.append(run)
    return runs


__all__ = [
    "ALL_POLICIES", "PAPER_CLUSTER_CORES", "PAPER_LOAD", "PAPER_TABLE2_RUNTIME_H", "PAPER_TABLE3", "POLICIES",
    "PaperRun", "PaperStage", "StageRecord", "WORKFLOW_KINDS", "canonical_policy", "cluster_nodes",
    "measure_run",
    "normalised_runtimes", "paper_normalised_runtimes", "paper_workload", "run_experiment",
    "run_paper", "runtime_by_kind", "seed_prior_runs", "submission_order", "summarise",
]
