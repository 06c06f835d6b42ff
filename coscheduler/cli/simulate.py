"""``cosched simulate``: replay workloads in virtual time.

``cosched simulate swf TRACE [--policy P[,P...]] [--backfill none|easy|conservative]
[--start-index I] [--jobs K] [--json] [--skip-bad-lines]``

stdout carries the result only (a table, or with ``--json`` one object per policy, a list
when several); notes (skipped lines, dropped jobs, parse time) and the progress bar go to
stderr.

``cosched simulate paper [--cores 64,128,256] [--policies space-sharing,static,asax]
[--repeat 3] [--scale 1.0] [--seed 0] [--db PATH] [--fresh-learner]
[--sequential-cores one|workflow] [--node-cores N] [--kill-at-walltime] [--workers N]
[--cluster ADDRESS] [--json]``: the ASA_X paper's
evaluation (section 4) in virtual time with the real controller and policies
(coscheduler/experiments/paper.py); tables like the paper's Tables 3 and 2 with the
paper's own figures beside ours.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from .. import outputs
from ..model import InvalidInput
from ..sweep import SweepError, default_workers
from ..experiments import paper_choices
from ..policies.queue import POLICIES, get_policy
from ..policies.coalloc import SHORT_ACTIONS
from ..policies.lending import DEFAULT_MIN_SHARE, LEND_RULES
from ..sim.batsim import DEFAULT_HOST_SPEED, read_workload
from ..sim.engine import BACKFILL_MODES
from ..sim.replay import ReplayResult, replay, window
from ._types import FiniteRange
from .progress_bar import DelayedProgress
from ._common import echo_json


def _paper():
    """The paper experiment (controller, backends, interference model), imported when
    ``simulate paper`` runs, not by every ``simulate`` command (0.3 s)."""
    from ..experiments import paper

    return paper


def _parse_policies(text: str) -> list[str]:
    names: list[str] = []
    for raw in text.split(","):
        if not raw.strip():
            raise click.BadParameter(
                f"empty policy name in {text!r}; valid policies: {', '.join(POLICIES)}, "
                "rl:NAME or rl:PATH",
                param_hint="--policy",
            )
        try:
            if raw.strip().lower().startswith("rl:"):
                from ..learned.registry import scorer_for

                name = scorer_for(raw).name  # checked now, loaded again per run
            else:
                name = get_policy(raw).name
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--policy") from None
        if name not in names:
            names.append(name)
    return names


def _selector_or_name(name: str):
    """A heuristic's name stays a name; ``rl:...`` becomes its scorer."""
    if name.lower().startswith("rl:"):
        from ..learned.registry import scorer_for

        return scorer_for(name)
    return name


def _table(results: list[ReplayResult]) -> str:
    header = ("policy", "backfill", "jobs", "avg bsld", "max bsld", "worst user",
              "avg wait s", "avg turn s", "util %", "makespan s", "wall s")
    rows = [header]
    for r in results:
        m = r.metrics
        rows.append((
            r.policy, r.backfill, str(m.jobs), f"{m.avg_bsld:.2f}", f"{m.max_bsld:.1f}",
            f"{m.worst_user_bsld:.2f}", f"{m.avg_wait:.0f}", f"{m.avg_turnaround:.0f}",
            f"{100 * m.utilization:.1f}", f"{m.makespan:.0f}", f"{r.wall_seconds:.2f}",
        ))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[c].ljust(widths[c]) if c < 2 else row[c].rjust(widths[c])
                 for c in range(len(header))]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


@click.group()
def simulate() -> None:
    """Replay workloads in virtual time (trace-driven simulation)."""


@simulate.command("swf")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--policy", "policy_text", default="FCFS", show_default=True,
              help=f"Queue policy, or several separated by commas: {', '.join(POLICIES)}.")
@click.option("--backfill", type=click.Choice(BACKFILL_MODES), default="none",
              show_default=True, help="Backfilling: none, EASY, or conservative.")
@click.option("--start-index", type=click.IntRange(min=0), default=0, show_default=True,
              help="First job of the replay window (0-based, in job-number order).")
@click.option("--jobs", "count", type=click.IntRange(min=1), default=None,
              help="Number of jobs in the window [default: to the end of the trace].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (one object per policy).")
@click.option("--skip-bad-lines", is_flag=True,
              help="Skip malformed trace lines (counted and reported) instead of failing.")
@click.option("--inspector", "inspectors", multiple=True, metavar="NAME|PATH",
              help="Also replay under this SchedInspector model over its base policy "
                   "(repeatable; see cosched models list), or reject-blocked:BASE[:BUDGET], the "
                   "hand-written inspector (reject a pick that cannot start now; BUDGET: rejections "
                   "per job, default 10).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each policy's schedule as Batsim's jobs.csv to "
                   "DIR/POLICY_jobs.csv (evalys and Batsim's tools read it).")
@click.option("--host-speed", type=float, default=DEFAULT_HOST_SPEED, show_default=True,
              help="Batsim workloads: flop/s of a host; a parallel_homogeneous profile runs "
                   "cpu / host-speed seconds.")
@click.option("--engine", type=click.Choice(["python", "compiled"]), default="python",
              show_default=True,
              help="python: the engine every policy runs on; compiled: FCFS with none or "
                   "EASY backfilling on the training environments' numba kernels (the rl "
                   "extra): the same schedule, the replay itself about 5x faster, after "
                   "about 1 s of loading numba (and one compilation of some 10 s after "
                   "an install).")
def swf(trace: str, policy_text: str, backfill: str, start_index: int, count: int | None,
        as_json: bool, skip_bad_lines: bool, inspectors: tuple[str, ...], out_dir: Path | None,
        host_speed: float, engine: str) -> None:
    """Replay a Standard Workload Format TRACE (plain or .gz), or a Batsim JSON workload
    (.json, or by content), on an empty cluster sized by its header (SWF MaxNodes/MaxProcs,
    Batsim nb_res), and report bounded slowdown, waits, utilisation and makespan per policy
    (learned ones: rl:NAME, --inspector NAME); --out writes Batsim's jobs.csv."""
    policies: list = _parse_policies(policy_text)
    if engine == "compiled":
        from ..learned import wholetrace

        if not wholetrace.available():
            raise click.BadParameter("the compiled engine needs numba: pip install '.[rl]'",
                                     param_hint="--engine")
        if inspectors or not all(wholetrace.handles(_queue_policy(p), backfill)
                                 for p in policies):
            raise click.BadParameter("--engine compiled replays FCFS with --backfill none or "
                                     "easy only; use --engine python (or auto) for others",
                                     param_hint="--engine")
    for text in inspectors:
        try:
            from ..learned.registry import inspector_for

            policies.append(inspector_for(text))
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--inspector") from None
    t0 = time.perf_counter()
    try:
        if out_dir is not None:   # before the replays a bad --out would lose
            outputs.check_output_dir(out_dir)
        workload = read_workload(trace, skip_bad_lines=skip_bad_lines, host_speed=host_speed)
        loaded = workload.trace
        if not loaded.jobs:
            why = "; ".join(f"{n} {reason}" for reason, n in loaded.dropped.items()) \
                or "no job lines"
            raise InvalidInput(f"{trace}: no usable jobs ({why}"
                               + (f"; {loaded.skipped_lines} malformed line(s) skipped" if
                                  loaded.skipped_lines else "") + ")")
        jobs = window(loaded.jobs, start_index, count)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    parse_s = time.perf_counter() - t0
    selectors = _selectors_for(policies, loaded)

    if loaded.skipped_lines:
        click.echo(f"skipped {loaded.skipped_lines} malformed line(s) in {trace}:", err=True)
        for example in loaded.bad_line_examples:
            click.echo(f"  {example}", err=True)
    for reason, n in loaded.dropped.items():
        click.echo(f"dropped {n} job(s): {reason}", err=True)
    ppn = loaded.max_procs // loaded.max_nodes
    click.echo(
        f"{trace}: {len(loaded.jobs)} jobs read in {parse_s:.2f} s; replaying jobs "
        f"{start_index}..{start_index + len(jobs) - 1} on {loaded.max_nodes} nodes x {ppn} "
        f"processors",
        err=True,
    )

    progress = DelayedProgress(len(jobs) * len(policies), "simulating")
    results = []
    try:
        for policy in selectors:
            if engine == "compiled":   # (checked above: FCFS, none or easy)
                from ..learned import wholetrace

                click.echo("FCFS: compiled engine", err=True)
                results.append(wholetrace.replay(loaded, jobs=jobs, backfill=backfill))
            else:
                results.append(replay(loaded, policy, backfill, jobs=jobs, progress=progress))
            progress.next_run(len(jobs))
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        progress.close()

    if out_dir is not None:
        _write_jobs_csv(out_dir, workload, jobs, results)
    if as_json:
        out = [r.as_json() for r in results]
        echo_json(out[0] if len(out) == 1 else out)
    else:
        click.echo(_table(results))


def _queue_policy(p):
    """A heuristic's name as its QueuePolicy; learned selectors (and rl: names) as they are."""
    if isinstance(p, str) and not p.lower().startswith("rl:"):
        return get_policy(p)
    return p


def _selectors_for(policies: list, trace) -> list:
    """The policies to replay (``rl:`` names loaded as scorers), a learned model trained
    for another machine than the trace's refused before any replay: one line naming the
    model file and both machines."""
    from ..learned.machine import check_selector

    try:
        selectors = [_selector_or_name(p) if isinstance(p, str) else p for p in policies]
        for policy in selectors:
            check_selector(policy, trace)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    return selectors


def _write_jobs_csv(out_dir: Path, workload, jobs, results: list[ReplayResult]) -> None:
    """DIR/POLICY_jobs.csv per policy, Batsim's columns (coscheduler/sim/batsim.py)."""
    from ..sim.batsim import jobs_csv_rows, write_jobs_csv

    for r, stem in zip(results, jobs_csv_stems([r.policy for r in results])):
        path = out_dir / f"{stem}_jobs.csv"
        try:
            write_jobs_csv(path, jobs_csv_rows(workload, jobs, r.schedule))
        except InvalidInput as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"wrote {path}", err=True)


def jobs_csv_stems(policies: list[str]) -> list[str]:
    """A file-name stem per policy, distinct: characters a file name should not carry
    become '-' (so rl:a-b/x and rl:a/b-x both read rl-a-b-x), and a stem already taken
    gets -2, -3, ... (one policy's jobs.csv never overwrites another's)."""
    import re

    taken: set[str] = set()
    stems = []
    for policy in policies:
        base = re.sub(r"[^A-Za-z0-9_.+-]+", "-", policy).strip("-") or "policy"
        stem, k = base, 1
        while stem.lower() in taken:   # case-insensitive file systems too
            k += 1
            stem = f"{base}-{k}"
        taken.add(stem.lower())
        stems.append(stem)
    return stems


def _parse_cores(text: str) -> list[int]:
    sizes: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        try:
            cores = int(item)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a whole number of cores (in {text!r})",
                                     param_hint="--cores") from None
        try:
            _paper().cluster_nodes(cores)
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--cores") from None
        if cores not in sizes:
            sizes.append(cores)
    return sizes


def _parse_coalloc_policies(text: str) -> list[str]:
    names: list[str] = []
    for raw in text.split(","):
        try:
            name = _paper().canonical_policy(raw)
        except InvalidInput as exc:
            raise click.BadParameter(str(exc), param_hint="--policies") from None
        if name not in names:
            names.append(name)
    return names


GUESTS_DEFAULT = "normal"
PERMIT_DEFAULT = "off"


def _parse_permit(text: str) -> float | None:
    """``--permit``: a slowdown share, or off (None)."""
    from ..policies.permit import check_tolerance

    if text.strip().lower() in ("off", "none", "no"):
        return None
    try:
        return check_tolerance(float(text), "--permit")
    except (ValueError, InvalidInput) as exc:
        raise click.BadParameter(f"{text!r}: give a slowdown share such as 0.05, or off "
                                 f"({exc})", param_hint="--permit") from None


def _parse_experts(text: str) -> tuple[str, ...]:
    from ..learner.experts import EXTRA_EXPERTS

    if text.strip().lower() == "none":
        return ()
    names: list[str] = []
    for raw in text.split(","):
        name = raw.strip().lower()
        if name not in EXTRA_EXPERTS:
            raise click.BadParameter(f"unknown expert {raw!r}: use 'none' or some of "
                                     f"{', '.join(EXTRA_EXPERTS)}", param_hint="--experts")
        if name not in names:
            names.append(name)
    return tuple(names)


def _positive_scale(ctx, param, value: float) -> float:
    if not value > 0 or value != value or value == float("inf"):
        raise click.BadParameter(f"must be a finite number > 0, got {value}")
    return value


@simulate.command("paper")
@click.option("--cores", "cores_text", default="64,128,256", show_default=True,
              help="Cluster sizes in cores, separated by commas (each >= 64, the largest job).")
@click.option("--policies", "policies_text", default="space-sharing,static,asax,oracle",
              show_default=True, help="Co-allocation policies: space-sharing, static, asax, "
                                      "and the yardstick oracle (true idle shares lent without "
                                      "interference).")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions of the workload per cluster size and policy.")
@click.option("--scale", type=float, default=1.0, show_default=True, callback=_positive_scale,
              help="Work per stage (1: workflows of minutes; the paper's took 0.3-0.7 h).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="ASA_X's seed (repetition k uses seed + k).")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep ASA_X's learning in this state database (across sizes and runs); "
                   "default: in memory, carried over between the repetitions of a size.")
@click.option("--fresh-learner", is_flag=True,
              help="Start ASA_X from scratch in every repetition (no carried-over learning).")
@click.option("--sequential-cores", type=click.Choice(paper_choices.SEQUENTIAL_CORES),
              default="workflow", show_default=True,
              help="What a sequential stage asks for: one core, or its workflow's cores.")
@click.option("--node-cores", type=click.IntRange(min=1), default=None,
              help="Split the cluster into nodes of this many cores (default: one node, as "
                   "the paper's NumaScale machine appears to jobs).")
@click.option("--kill-at-walltime", is_flag=True,
              help="Kill a stage at its walltime, as Slurm does (the paper did not: an "
                   "overrun only lengthens the runtime).")
@click.option("--scale-out", type=click.IntRange(min=1), default=1, show_default=True,
              help="Multiply the workflows and every cluster size by K (K copies of the 15 "
                   "workflows on K times the cores).")
@click.option("--classes", type=click.Choice(tuple(paper_choices.CLASSES)), default="stage",
              show_default=True,
              help="ASA_X's job classes (weights are kept per class): per workflow kind, per "
                   "stage, or per stage and size.")
@click.option("--experts", "experts_text", default=",".join(paper_choices.DEFAULT_EXPERTS),
              show_default=True,
              help="ASA_X's optional experts beside the paper's four, separated by commas "
                   "(pair, io), or 'none'.")
@click.option("--explain", is_flag=True,
              help="Count, per rule, the stage-seconds waited by stages no host took "
                   "(printed, and in --json as each run's 'refusals').")
@click.option("--model", "model_name", type=click.Choice(paper_choices.MODEL_NAMES),
              default="calibrated", show_default=True,
              help="Interference between co-located jobs: the one fitted to real measurements "
                   "(cosched calibrate, docs/calibration.md), or CPU quotas and memory capacity "
                   "only.")
@click.option("--old-rules", is_flag=True,
              help="Co-allocate by the rules before issue #10 (one guest per host, four hosts "
                   "asked per guest, former guests never host), for comparison.")
@click.option("--guests", type=click.Choice(["normal", "idle"]), default=GUESTS_DEFAULT,
              show_default=True,
              help="ASA_X's guests in the normal or the idle scheduling class (cgroup v2 "
                   "cpu.idle = 1, as the agent's --idle-guests places them).")
@click.option("--permit", "permit_text", default=PERMIT_DEFAULT, show_default=True,
              metavar="SHARE|off",
              help="ASA_X's Permit step: veto a loan whose predicted host slowdown exceeds "
                   "this share (0.05: 5 %), or off.")
@click.option("--loan-min-share", type=FiniteRange(0.0, 1.0, min_open=True),
              default=DEFAULT_MIN_SHARE,
              show_default=True,
              help="ASA_X lends no less than this share of a guest's need (its usual CPU use "
                   "plus the margin); a guest offered less waits for a host with more idle "
                   "CPU or for cores of its own.")
@click.option("--loan-rule", type=click.Choice(LEND_RULES), default="share", show_default=True,
              help="share: every loan of at least --loan-min-share of a guest's need is made; "
                   "sooner: a loan short of the need is made only if the guest is estimated to "
                   "end sooner as a guest than by waiting for cores of its own.")
@click.option("--short-actions", type=click.Choice(SHORT_ACTIONS), default="forget",
              show_default=True,
              help="What ASA_X does when the learner's action is under the smallest loan: "
                   "forget: no loan, nothing learned; floor: lend the smallest loan.")
@click.option("--span-hosts", is_flag=True,
              help="A parallel stage that no single host takes may run as two parts, each a "
                   "guest of its own host (issue 19's 'guest spanning two hosts'; off: the "
                   "paper's rule, a guest inside one host). Every co-allocating policy.")
@click.option("--placement", type=click.Choice(["shared", "pinned"]), default="shared",
              show_default=True,
              help="Where a host's and its guests' processes run: anywhere on the host's cores "
                   "(the kernel spreads them over idle cores) or, the worst case, every "
                   "co-runner on each job's own cores.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Also write PNG plots (makespan, runtime, ASA_X's weights) "
                                 "and the JSON result into this folder.")
@click.option("--queue-policy", default=None,
              help="Queue order: a heuristic (SJF, F1, ...) or a learned model rl:NAME|PATH "
                   "[default: submission order].")
@click.option("--inspector", default=None, metavar="NAME|PATH",
              help="Queue order by a SchedInspector model over its base policy, or "
                   "reject-blocked:BASE[:BUDGET] (the hand-written inspector).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Local processes for the independent chains of runs (one per cluster size "
                   "and policy) [default: this machine's cores; 1: serial]. Same figures.")
@click.option("--cluster", default=None, metavar="ADDRESS",
              help="Run the chains on this Dask scheduler (tcp://HOST:8786; the 'cluster' "
                   "extra) or Ray cluster (ray://HOST:PORT, ray:HOST:PORT, ray:auto; the "
                   "'ray' extra) instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs and medians as JSON.")
def paper(cores_text: str, policies_text: str, repeat: int, scale: float, seed: int,
          db: Path | None, fresh_learner: bool, sequential_cores: str, node_cores: int | None,
          kill_at_walltime: bool, scale_out: int, classes: str, experts_text: str,
          explain: bool, model_name: str, old_rules: bool, out_dir: Path | None,
          queue_policy: str | None, inspector: str | None, workers: int | None,
          cluster: str | None, as_json: bool, guests: str = GUESTS_DEFAULT,
          permit_text: str = PERMIT_DEFAULT, placement: str = "shared",
          loan_min_share: float = DEFAULT_MIN_SHARE, loan_rule: str = "share",
          short_actions: str = "forget", span_hosts: bool = False) -> None:
    """Run the ASA_X paper's evaluation (15 workflows, 46 stage jobs queued at t = 0) in
    virtual time under each policy and cluster size, with the real controller, and compare
    with the paper's Tables 3 and 2."""
    from ..experiments.report import report

    sizes = _parse_cores(cores_text)
    policies = _parse_coalloc_policies(policies_text)
    if out_dir is not None:   # before the runs a bad --out would lose
        try:
            outputs.check_output_dir(out_dir)
        except InvalidInput as exc:
            raise click.ClickException(str(exc)) from None
    permit = _parse_permit(permit_text)
    experts = _parse_experts(experts_text)
    queue = None
    try:
        if inspector is not None:
            from ..learned.registry import inspector_for

            queue = inspector_for(inspector)
        elif queue_policy is not None:
            from ..learned.registry import resolve_policy

            queue = resolve_policy(queue_policy)
    except InvalidInput as exc:
        raise click.BadParameter(str(exc), param_hint="--inspector" if inspector
                                 else "--queue-policy") from None
    if node_cores is not None:
        for cores in sizes:
            try:
                _paper().cluster_nodes(cores, node_cores)
            except InvalidInput as exc:
                raise click.BadParameter(str(exc), param_hint="--node-cores") from None
    if fresh_learner and db is not None:
        raise click.BadParameter("--fresh-learner and --db contradict each other (the database "
                                 "carries learning over)", param_hint="--fresh-learner")
    store = None
    tag = None
    if db is not None and "asax" in policies:
        from ..store import SqliteStore, StoreError

        try:
            store = SqliteStore(db, create=True, synchronous="NORMAL")
        except (InvalidInput, StoreError) as exc:
            raise click.ClickException(str(exc)) from None
        # Job ids never repeat within one state database, across invocations too.
        tag = f"p{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}"
    if store is not None and (cluster is not None or (workers or default_workers()) > 1):
        click.echo("--db: ASA_X learns through one database across sizes, so the runs are "
                   "serial (--workers/--cluster ignored)", err=True)
    learning = ("in " + str(db)) if store is not None else (
        "fresh in every repetition" if fresh_learner
        else "carried over between repetitions (fresh for each cluster size)")
    t0 = time.perf_counter()
    try:
        runs = _paper().run_experiment(sizes, policies, repeat, scale, seed,
                                        carry_learning=not fresh_learner, store=store,
                                        node_cores=node_cores, tag=tag,
                                        sequential_cores=sequential_cores,
                                        kill_at_walltime=kill_at_walltime, classes=classes,
                                        experts=experts, explain=explain, scale_out=scale_out,
                                        old_rules=old_rules, model=_paper().MODELS[model_name],
                                        queue_policy=queue, workers=workers,
                                        cluster=cluster, idle_guests=guests == "idle",
                                        permit=permit, shared_cores=placement == "shared",
                                        loan_min_share=loan_min_share, loan_rule=loan_rule,
                                        short_actions=short_actions,
                                        span_hosts=span_hosts)
    except (InvalidInput, SweepError) as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if store is not None:
            store.close()
    wall = time.perf_counter() - t0
    summary = _paper().summarise(runs)
    click.echo(f"{len(runs)} virtual runs in {wall:.1f} s", err=True)
    result = {
        "settings": {"cores": sizes, "policies": policies, "repeat": repeat, "scale": scale,
                     "queue_policy": queue.name if queue is not None else "submission order",
                     "seed": seed, "asax_learning": learning, "db": str(db) if db else None,
                     "sequential_cores": sequential_cores, "node_cores": node_cores,
                     "kill_at_walltime": kill_at_walltime, "scale_out": scale_out,
                     "classes": classes, "experts": list(experts), "model": model_name,
                     "old_rules": old_rules, "guests": guests, "permit": permit,
                     "placement": placement, "loan_min_share": loan_min_share,
                     "loan_rule": loan_rule, "short_actions": short_actions,
                     "span_hosts": span_hosts},
        "runs": [r.as_json(explain) for r in runs],
        "summary": summary,
        "normalised_runtime": {str(c): v for c, v in
                               _paper().normalised_runtimes(summary).items()},
    }
    if out_dir is not None:
        from ..experiments.plots import write_plots

        try:
            outputs.make_output_dir(out_dir)
            files = write_plots(runs, out_dir, _paper().instance_kinds(scale_out))
            outputs.write_text(out_dir / "result.json",
                               json.dumps(result, indent=2, allow_nan=False))
        except InvalidInput as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write into {out_dir}: {exc}") from None
        click.echo(f"wrote {', '.join(str(f) for f in files)} and {out_dir / 'result.json'}",
                   err=True)
    if as_json:
        echo_json(result)
        return
    notes = [f"ASA_X's learning: {learning}.",
             "Space sharing and Static are deterministic in virtual time: their "
             "repetitions agree exactly.",
             f"Interference between co-located jobs: {model_name} model "
             "(docs/calibration.md).",
             "CPU util (cluster), the headline: CPU time used over all cores x makespan (falls "
             "with cluster size as the paper's Table 3 does); (held): over the allocated "
             "core-seconds. Mean slowdown: co-located stages' runtime over alone, minus 1.",
             "Paper: Souza et al., ASA_X, Tables 2 and 3 (NumaScale, 3 repetitions)."]
    click.echo(report(summary, notes))
    if explain:
        click.echo("")
        click.echo(_paper().refusal_table(runs))


@simulate.command("io-pairs")
@click.option("--repeat", type=click.IntRange(min=1), default=8, show_default=True,
              help="Repetitions, ASA_X's learning carried over.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def io_pairs(repeat: int, seed: int, as_json: bool) -> None:
    """Beyond the paper: ASA_X with its paper experts against the same plus the I/O-aware
    expert, on a workload of I/O-heavy and message-bound stages under the calibrated
    interference model (coscheduler/experiments/io_pairs.py)."""
    from ..experiments.io_pairs import compare

    t0 = time.perf_counter()
    results = compare(repeat, seed)
    click.echo(f"{2 * repeat} virtual runs in {time.perf_counter() - t0:.1f} s", err=True)
    if as_json:
        echo_json({name: [r.as_json() for r in runs]
                               for name, runs in results.items()})
        return
    click.echo(f"{'experts':<10} {'rep':>3} {'I/O pairs':>9} {'other pairs':>11} "
               f"{'I/O-heavy slowdown':>18} {'co-located slowdown':>19} {'io weight':>9}")
    for name, runs in results.items():
        for r in runs:
            w = "-" if r.io_weight is None else f"{r.io_weight:.2f}"
            click.echo(f"{name:<10} {r.repeat:>3} {r.io_pairs:>9} {r.other_pairs:>11} "
                       f"{100 * r.io_heavy_slowdown:>17.0f}% {100 * r.mean_slowdown:>18.0f}% {w:>9}")


def _add_learned() -> None:
    from .simulate_learned import inspector_budget, learned

    simulate.add_command(learned)
    simulate.add_command(inspector_budget)


_add_learned()


# MRSch's multi-resource report (cosched simulate multi): coscheduler/cli/multi.py
from .multi import simulate_multi  # noqa: E402

simulate.add_command(simulate_multi)
