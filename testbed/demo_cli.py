"""``cosched demo``: live co-scheduling of real workflow stages on this machine.

Runs one Montage-, BLAST-, Statistics- and Synthetic-like workflow under space sharing,
Static 50 % and ASA_X, on emulated nodes (cgroups) with real CPU quotas, then compares
what was measured and shows where the learned expert weights went.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import click

from coscheduler.cli._common import echo_json
from coscheduler.demo import (DEMO_NODES, DEMO_POLICIES, DEMO_SEQUENTIAL_CORES, add_slowdowns, demo_jobs,
                              summarise_rounds)
from coscheduler import outputs
from coscheduler.model import InvalidInput
# The workloads' own demo scale (a whole demo in about a minute on two cores).
from coscheduler.workloads.jobs import DEMO_SCALE as DEFAULT_SCALE
from coscheduler.workloads.jobs import SEQUENTIAL_CORES
from monitoring.support import CgroupsUnavailable, check_local_support

from .live import run_policy
WORKDIR_PREFIX = "cosched-demo-"


def _tidy_old_workdirs() -> list[str]:
    """Remove the temporary work folders of demos that were killed (SIGKILL) before they
    could remove their own: ``cosched-demo-<pid>-*`` whose pid is gone."""
    removed = []
    tmp = Path(tempfile.gettempdir())
    for d in tmp.glob(f"{WORKDIR_PREFIX}*-*"):
        pid = d.name[len(WORKDIR_PREFIX):].split("-")[0]
        if d.is_dir() and not d.is_symlink() and pid.isdigit() and d.owner() == _me() \
                and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _progress(stream):
    last = [0.0]

    def show(policy, backend, controller) -> None:
        now = time.monotonic()
        if now - last[0] < 1.0 or not stream.isatty():
            return
        last[0] = now
        running = backend.running()
        guests = sum(1 for r in running if r.host_job)
        done = len(backend.history)
        total = done + len(running) + len(backend._waiting)
        stream.write(f"\r  {policy:<14} t={backend.now():5.0f}s  running {len(running)} "
                     f"({guests} guest{'s' if guests != 1 else ''})  done {done}/{total}   ")
        stream.flush()

    return show


@click.command()
@click.option("--scale", type=float, default=DEFAULT_SCALE, show_default=True,
              help="Work per task relative to the paper's workflows.")
@click.option("--policies", default=",".join(DEMO_POLICIES), show_default=True,
              help="Comma-separated: space-sharing, static, asax.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="ASA_X state database; what ASA_X learns carries over between runs "
                   "(default: demo.db beside the default state database).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where jobs write files, logs and progress, kept afterwards (default: a new "
                   "temp folder, removed at the end).")
@click.option("--keep-workdir", is_flag=True, help="Keep the temp work folder (job logs) at the end.")
@click.option("--seed", type=int, default=0, show_default=True, help="ASA_X's seed.")
@click.option("--repeat", type=click.IntRange(1, 20), default=1, show_default=True,
              help="Rounds of all policies (each about a minute); figures are then medians, "
                   "with their range.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write a timeline PNG per policy (its last round) into this folder.")
@click.option("--sequential-cores", type=click.Choice(SEQUENTIAL_CORES), default=DEMO_SEQUENTIAL_CORES,
              show_default=True,
              help="What a workflow's sequential stage asks for: one core, or the workflow's "
                   "cores (the paper's geometry, Slurm holding the workflow's allocation for "
                   "every stage: idle cores for co-scheduling to lend).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def demo(scale: float, policies: str, db: Path | None, workdir: Path | None, keep_workdir: bool,
         seed: int, repeat: int, out_dir: Path | None, sequential_cores: str, as_json: bool) -> None:
    """Co-schedule real workloads live on this machine under each policy (about a minute)."""
    try:   # before anything runs: a bad --workdir or --out would lose the runs
        for folder in (workdir, out_dir):
            if folder is not None:
                outputs.check_output_dir(folder)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    try:
        check_local_support()
    except CgroupsUnavailable as exc:
        raise click.ClickException(
            f"cosched demo runs real jobs under real cgroup CPU quotas and cannot run here: {exc}.\n"
            "Without root and cgroups you can still compare the policies in virtual time: "
            "`cosched simulate paper` runs the paper's workflows under space sharing, Static "
            "and ASA_X.") from None
    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [p for p in chosen if p not in DEMO_POLICIES]
    if bad or not chosen:
        raise click.BadParameter(f"unknown policy {bad or policies!r}; choose from {', '.join(DEMO_POLICIES)}",
                                 param_hint="--policies")
    if not 0 < scale <= 1:
        raise click.BadParameter(f"must lie in (0, 1], got {scale}", param_hint="--scale")
    from coscheduler.store import SqliteStore
    from coscheduler.store.paths import default_db_path

    _tidy_old_workdirs()
    err = sys.stderr
    explicit_db = db is not None
    db = db or default_db_path().with_name("demo.db")
    try:
        # One store for every run: the runtimes of jobs that ran alone (space sharing) are
        # what ASA_X's degradation loss compares a shared run against. A folder is made
        # only for the default path (and said so); a --db in a missing folder is refused.
        store = SqliteStore(db, create=True, create_dirs=not explicit_db)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    try:
        store.claim_controller()  # one controller per database: refuse before starting anything
    except InvalidInput as exc:
        store.close()
        raise click.ClickException(str(exc)) from None
    for d in store.created_dirs:
        click.echo(f"created folder {d} for the demo's state database", err=True)
    temp_workdir = workdir is None
    if temp_workdir:
        workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
    if not as_json:
        click.echo(f"coscheduler demo: {len(DEMO_NODES)} emulated nodes x "
                   f"{max(DEMO_NODES.values())} cores on this machine; work in {workdir}"
                   + (" (removed at the end; --keep-workdir keeps it)"
                      if temp_workdir and not keep_workdir else ""), err=True)
        click.echo(f"ASA_X state: {db} (what it learns carries over to the next run)", err=True)
    run_tag = time.strftime("%H%M%S")
    # SIGTERM unwinds like Ctrl-C, so every backend kills its jobs and gives quotas back.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    rounds: list[list] = []
    from coscheduler.controller.usage import ClassUsage
    usage = ClassUsage()   # what space sharing sees each class use alone teaches ASA_X
    try:
        for k in range(repeat):
            runs = []
            for policy in chosen:
                where = workdir / (policy if repeat == 1 else f"round{k + 1}-{policy}")
                jobs = demo_jobs(scale, where, tag=f"{run_tag}-{k + 1}-{policy}",
                                 sequential_cores=sequential_cores)
                runs.append(run_policy(policy, jobs, where, recorder=store, seed=seed,
                                       on_tick=None if as_json else _progress(err),
                                       usage=usage, scale=scale))
                if not as_json:
                    r = runs[-1]
                    label = policy if repeat == 1 else f"{policy} ({k + 1}/{repeat})"
                    err.write(f"\r  {label:<20} done in {r.makespan_s:.0f} s: {r.completed}/{r.jobs} "
                              f"jobs completed, {r.coallocations} co-allocated" + " " * 20 + "\n")
            add_slowdowns(runs)
            rounds.append(runs)
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
        if temp_workdir and not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    results = summarise_rounds(rounds)
    if out_dir is not None:
        from coscheduler.experiments.timeline import draw_timeline

        try:
            outputs.make_output_dir(out_dir)
            files = [draw_timeline(r.timeline, out_dir / f"timeline-{r.policy}.png")
                     for r in rounds[-1] if r.timeline is not None and r.timeline.jobs]
        except InvalidInput as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write into {out_dir}: {exc}") from None
        click.echo(f"wrote {', '.join(str(f) for f in files)}", err=True)
    if as_json:
        echo_json({"mode": "live", "workdir": str(workdir) if not temp_workdir or keep_workdir else None,
                   "db": str(db), "repeat": repeat,
                   "sequential_cores": sequential_cores, "results": results})
        return
    click.echo("")
    if repeat > 1:
        click.echo(f"medians of {repeat} rounds; below each, the range (lowest-highest)")
    click.echo(f"{'policy':<14} {'makespan':>9} {'mean wait':>10} {'CPU util':>9} "
               f"{'slowdown':>9} {'co-alloc':>9}  done")
    for r in results:
        slow = "-" if r["mean_slowdown"] is None else f"{r['mean_slowdown'] * 100:+.1f}%"
        click.echo(f"{r['policy']:<14} {r['makespan_s']:>8.1f}s {r['mean_wait_s']:>9.1f}s "
                   f"{r['cpu_util'] * 100:>8.1f}% {slow:>9} {r['coallocations']:>9g}  "
                   f"{r['completed']:g}/{r['jobs']}")
        if repeat > 1:
            def span(key, fmt, sep="-", unit=""):
                vals = [x[key] for x in r["runs"] if x[key] is not None]
                return f"{fmt(min(vals))}{sep}{fmt(max(vals))}{unit}" if vals else "-"
            click.echo(f"{'  range':<14} {span('makespan_s', lambda v: f'{v:.0f}', unit='s'):>9} "
                       f"{span('mean_wait_s', lambda v: f'{v:.1f}', unit='s'):>10} "
                       f"{span('cpu_util', lambda v: f'{100 * v:.0f}', unit='%'):>9} "
                       f"{span('mean_slowdown', lambda v: f'{100 * v:+.0f}', '..', '%'):>9} "
                       f"{span('coallocations', lambda v: f'{v:g}'):>9}  "
                       f"{span('completed', lambda v: f'{v:g}')}")
    click.echo("\nCPU util: kernel CPU time over the capacity of the held cores.\n"
               "slowdown: runtime against the same job under space sharing.\n"
               "done: jobs completed (a job running past twice its walltime is killed).")
    why = [(r["policy"], r["waited_s_by_reason"]) for r in results if r.get("waited_s_by_reason")]
    # (a policy that lent to every waiting job has no line)
    if why:
        click.echo("\nWhy waiting jobs found no host (job-seconds"
                   + (", median of the rounds" if repeat > 1 else "") + "):")
        for policy, reasons in why:
            parts = ", ".join(f"{reason} {secs:.1f} s" for reason, secs in
                              sorted(reasons.items(), key=lambda kv: -kv[1]))
            click.echo(f"  {policy:<14} {parts}")
    if "asax" in chosen:
        from coscheduler.cli.experts import show

        click.echo(f"\nWhere ASA_X's expert weights went (cosched experts show --db {db}):")
        click.echo("")
        click.get_current_context().invoke(show, db=db, job_class=None, as_json=False)
