"""``cosched decisions``: the co-allocation decisions the learner made, and their outcomes."""

from __future__ import annotations

from pathlib import Path

import click

from ._types import INT_MAX

from ..happiness import HAPPINESS_DONE
from ..store import queries
from ._common import (clip, db_option, echo_json, fmt_loss, fmt_time, open_readonly,
                      open_store, pct, resolve_db)

# Kept per class by `decisions prune`: twice what the default learner recalls its fitted
# expert from (AsaxLearner.recall_window(): 5,500), and never less than that.
KEEP_MIN = 5_500
KEEP_DEFAULT = 11_000
# LearnerConfig.max_classes's default (a test checks they agree; the learner is not imported
# here for a command that needs none of it)
MAX_CLASSES_DEFAULT = 10_000


@click.group()
def decisions() -> None:
    """Co-allocation decisions: host, guest, action, quotas, loss."""


@decisions.command("list")
@db_option
@click.option("--last", "last", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many of the most recent decisions.")
@click.option("--class", "job_class", default=None, metavar="K", help="Only decisions of this job class.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/cli-json.md).")
def list_(db: Path | None, last: int, job_class: str | None, as_json: bool) -> None:
    """The most recent decisions, oldest first; loss is pending until the host ends."""
    with open_readonly(db) as store:
        rows = queries.recent_decisions(store, last, job_class)
        if job_class is not None and not rows and job_class not in queries.class_names(store):
            from .experts import _unknown_class

            raise _unknown_class(store, job_class)  # as `experts show --class` does
        total = queries.decision_count(store)
        path = str(store.path)
    if as_json:
        echo_json({"db": path, "decisions": [{
            "id": r.decision_id, "time": r.time, "host_job": r.host_job, "guest_job": r.guest_job,
            "job_class": r.job_class, "action_fraction": r.action_fraction, "loss": r.loss,
        } for r in rows]})
        return
    click.echo(clip(f"Last {len(rows)} of {total} decisions in {path}", 80))
    if not rows:
        click.echo("No decision recorded yet.")
        return
    click.echo(f"{'id':>5} {'time':<19} {'host job':<11} {'guest job':<11} {'class':<14} "
               f"{'lent':>6} {'loss':>7}")
    for r in rows:
        click.echo(f"{r.decision_id:>5} {fmt_time(r.time):<19} {clip(r.host_job, 11):<11} "
                   f"{clip(r.guest_job, 11):<11} {clip(r.job_class, 14):<14} "
                   f"{100 * r.action_fraction:>4.0f} % {fmt_loss(r.loss):>7}")


@decisions.command("show")
@click.argument("decision_id", metavar="ID", type=click.IntRange(1, INT_MAX))
@db_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/cli-json.md).")
def show(decision_id: int, db: Path | None, as_json: bool) -> None:
    """Everything about one decision: host state, each expert's distribution, the
    mixture, the action, the quotas and the outcome."""
    with open_readonly(db) as store:
        detail = queries.decision_detail(store, decision_id)
        credits = store.walltime_credits(decision_id) if detail is not None else []
        path = str(store.path)
        if detail is None:
            total = queries.decision_count(store)
            raise click.ClickException(
                f"unknown decision id {decision_id} in {path} ({total} decisions recorded)")
    d, out = detail.decision, detail.outcome
    if as_json:
        echo_json({"db": path, "decision": {
            "id": d.decision_id, "time": d.time, "policy": d.policy, "job_class": d.job_class,
            "host_job": d.host_job, "guest_job": d.guest_job, "state": d.state.to_dict(),
            "experts": [{"name": n, "weight": w, "distribution": list(p)}
                        for n, w, p in zip(d.expert_names, d.weights, d.expert_dists)],
            "mixture": list(d.mixture), "action_index": d.action_index,
            "action_fraction": d.action_fraction,
            "host_quota": detail.host_quota, "guest_quota": detail.guest_quota,
            "outcome": None if out is None else {
                "time": out.time, "loss": out.loss, "kind": out.kind,
                "host_runtime_s": out.host_runtime_s, "host_walltime_s": out.host_walltime_s,
                "guest_runtime_s": out.guest_runtime_s, "note": out.note,
            },
            "walltime_credits": credits,
        }})
        return
    s = d.state
    hp = "unknown" if s.happiness is None else ("done (no work left)" if s.happiness >= HAPPINESS_DONE
                                                else f"{s.happiness:.2f}")
    echo = click.echo
    echo(clip(f"Decision {d.decision_id} (policy {d.policy}) in {path}", 80))
    echo(f"  time        {fmt_time(d.time)}")
    echo(f"  job class   {clip(d.job_class, 66)}")
    echo(f"  host job    {d.host_job}")
    echo(f"  guest job   {d.guest_job}")
    echo(f"  host state  CPU {pct(s.cpu_percent / 100, 7).strip()}, memory "
         f"{pct(s.mem_percent / 100, 7).strip()}, {s.stage_type.value} stage,")
    echo(f"              {pct(s.elapsed_fraction, 7).strip()} of walltime elapsed, Hp {hp}")
    echo(f"  action      lend {100 * d.action_fraction:.0f} % of the host's quota "
         f"(action {d.action_index} of 0..{len(d.mixture) - 1})")
    echo(f"  quotas      host {pct(detail.host_quota, 7).strip()}, guest "
         f"{pct(detail.guest_quota, 7).strip()} (CPU quota of each job's own cores)")
    if out is None:
        echo("  outcome     pending (the host has not finished)")
    else:
        echo(f"  outcome     loss {out.loss:.3f} ({out.kind}) at {fmt_time(out.time)}")
        runtimes = []
        if out.host_runtime_s is not None:
            runtimes.append(f"host {out.host_runtime_s:,.1f} s")
        if out.host_walltime_s is not None:
            runtimes.append(f"walltime {out.host_walltime_s:,.1f} s")
        if out.guest_runtime_s is not None:
            runtimes.append(f"guest {out.guest_runtime_s:,.1f} s")
        if runtimes:
            echo(f"              runtimes: {', '.join(runtimes)}")
        if out.note:
            echo(clip(f"              note: {out.note}", 80))
    for c in credits:
        echo(clip(f"  walltime    +{c['minutes']} min to job {c['job_id']} at {fmt_time(c['time'])} "
                  f"(limit was {c['limit_s'] / 60:g} min; its progress projected "
                  f"{(c['projected_end'] - c['time']) / 60:.1f} min more"
                  f"{'; capped by the partition MaxTime' if c['capped'] else ''})", 160))
    # The distributions, one row per action so that any number of actions fits in 80 columns.
    names = [clip(n, 7) for n in d.expert_names][:7]
    echo("")
    echo(f"  {'action':>6}" + "".join(f"{n:>8}" for n in names) + f" {'mixture':>8}")
    for j, mix in enumerate(d.mixture):
        fraction = j / len(d.mixture)
        cells = "".join(pct(p[j], 8) for p in d.expert_dists[:7])
        mark = "  <- chosen" if j == d.action_index else ""
        echo(f"  {100 * fraction:>4.0f} %" + cells + f" {pct(mix, 8)}" + mark)
    echo(f"  {'weight':>6}" + "".join(pct(w, 8) for w in d.weights[:7]))


@decisions.command("prune")
@db_option
@click.option("--older-than", "days", type=click.FloatRange(min=0.0, max=36_500.0),
              required=True, metavar="DAYS",
              help="Delete decisions whose outcome was recorded more than DAYS days ago.")
@click.option("--keep-per-class", type=click.IntRange(min=KEEP_MIN, max=1_000_000_000),
              default=KEEP_DEFAULT, show_default=True,
              help="Each class's most recent observed decisions kept whatever their age "
                   f"(at least {KEEP_MIN}: what a restart recalls the fitted expert from).")
@click.option("--max-classes", type=click.IntRange(min=1), default=None,
              help="The controller's learner bound (LearnerConfig.max_classes): saved classes "
                   "past it that a restart would not read, and that saw nothing in the last "
                   "DAYS days, are deleted whole (state, rounds, decisions). [default: the "
                   f"bound the controller last started with, else {MAX_CLASSES_DEFAULT:,}]")
@click.option("--vacuum", is_flag=True,
              help="Then give the freed space back (rewrites the file; a running controller "
                   "keeps its records meanwhile and pauses co-allocation until it is done).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/cli-json.md).")
def prune(db: Path | None, days: float, keep_per_class: int, max_classes: int | None,
          vacuum: bool, as_json: bool) -> None:
    """Let old decisions go: the state database grows by about 2 KB per decision.

    Pending decisions and each class's last --keep-per-class observed ones are kept, and
    so are class states, rounds and alone runtimes, but for the classes past
    --max-classes that a restart no longer reads; what a restarted controller rebuilds
    is unchanged (the deleted outcomes are still counted). Safe while the controller runs.
    """
    import time as _time

    path = resolve_db(db)
    before = _time.time() - days * 86400.0
    with open_store(path, readonly=False) as store:
        recorded = store.class_bound()
        if max_classes is None:
            max_classes = recorded or MAX_CLASSES_DEFAULT
        elif recorded is not None and max_classes < recorded:
            raise click.UsageError(
                f"--max-classes {max_classes} is below the bound of {recorded} classes the "
                f"controller last started with on {path}: it would delete classes its "
                "learner holds")
        forgotten = store.prune_classes(before, max_classes)
        deleted = store.prune(before, keep_per_class)
        left = queries.decision_count(store)
        if vacuum:
            store.vacuum()
    if as_json:
        echo_json({"db": str(path), "before": before, "deleted": deleted, "left": left,
                   "bytes": path.stat().st_size, "classes_deleted": forgotten,
                   "max_classes": max_classes})
        return
    total = sum(deleted.values())
    click.echo(f"Deleted {total} decisions recorded before {fmt_time(before)} from {path}; "
               f"{left} left; the file holds {path.stat().st_size / 1e6:.1f} MB")
    for job_class, n in sorted(deleted.items()):
        click.echo(f"  {clip(job_class, 40):<40} {n:>8}")
    if forgotten:
        click.echo(f"Deleted {len(forgotten)} classes past the learner's bound of "
                   f"{max_classes} that a restart no longer reads, with their "
                   f"{sum(forgotten.values())} decisions")
