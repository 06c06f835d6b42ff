"""``cosched experts``: what the learner learned, per job class (weights, rounds, history)."""

from __future__ import annotations

from pathlib import Path

import click

from ..store import queries
from ._common import bar, clip, db_option, echo_json, fmt_time, open_readonly, pct


def _unknown_class(store, job_class: str) -> click.ClickException:
    known = queries.class_names(store)
    shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
    return click.ClickException(
        f"unknown job class {job_class!r} in {store.path} (known: {shown or 'none yet'})")


@click.group()
def experts() -> None:
    """Expert weights the learner keeps per job class."""


@experts.command("show")
@db_option
@click.option("--class", "job_class", default=None, metavar="K", help="Only this job class.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/cli-json.md).")
def show(db: Path | None, job_class: str | None, as_json: bool) -> None:
    """Weights of each expert per job class, with rounds and last update."""
    with open_readonly(db) as store:
        states = queries.class_states(store, job_class)
        if job_class is not None and not states:
            raise _unknown_class(store, job_class)
        path = str(store.path)
    if as_json:
        echo_json({"db": path, "classes": [{
            "class": st.job_class,
            "rounds": st.rounds,
            "weights": dict(zip(st.expert_names, st.weights)),
            "risk": dict(zip(st.expert_names, st.risk)),
            "decisions": st.decisions,
            "observations": st.observations,
            "last_update": st.last_update,
        } for st in states]})
        return
    click.echo(f"State database: {path}  ({len(states)} job class{'es' if len(states) != 1 else ''})")
    if not states:
        click.echo("No job class learned yet: no decision has been recorded.")
    for st in states:
        click.echo("")
        click.echo(clip(st.job_class, 80))
        click.echo(f"  rounds {st.rounds}   decisions {st.decisions}   observed {st.observations}"
                   f"   last update {fmt_time(st.last_update)}")
        click.echo(f"  {'expert':<10} {'weight':>8}  {'':<30}  {'open-round risk':>15}")
        for name, w, r in zip(st.expert_names, st.weights, st.risk):
            click.echo(f"  {clip(name, 10):<10} {pct(w, 8)}  {bar(w)}  {r:>15.3f}")


@experts.command("history")
@click.argument("job_class", metavar="CLASS")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/cli-json.md).")
def history(job_class: str, db: Path | None, as_json: bool) -> None:
    """The weight trajectory of one job class: the weights after each closed round."""
    with open_readonly(db) as store:
        states = queries.class_states(store, job_class)
        rounds = queries.weight_history(store, job_class)
        if not states and not rounds:
            raise _unknown_class(store, job_class)
        path = str(store.path)
    names = list(states[0].expert_names) if states else [f"expert{i}" for i in range(len(rounds[0].risk))]
    if as_json:
        echo_json({"db": path, "class": job_class, "experts": names, "rounds": [{
            "round": r.round, "time": r.time, "gamma": r.gamma,
            "risk": dict(zip(names, r.risk)),
            "weights_before": dict(zip(names, r.weights_before)),
            "weights": dict(zip(names, r.weights_after)),
        } for r in rounds]})
        return
    click.echo(clip(f"Weight history of {job_class} ({len(rounds)} closed rounds) in {path}", 80))
    cols = "".join(f"{clip(n, 7):>8}" for n in names)
    click.echo(f"{'round':>5}  {'time':<19} {'gamma':>6}{cols}")
    if not rounds:
        click.echo("(no round closed yet: weights are still the initial ones)")
        return
    start = "".join(pct(w, 8) for w in rounds[0].weights_before)
    click.echo(f"{0:>5}  {'(start)':<19} {'-':>6}{start}")
    for r in rounds:
        ws = "".join(pct(w, 8) for w in r.weights_after)
        click.echo(f"{r.round:>5}  {fmt_time(r.time):<19} {r.gamma:>6.3f}{ws}")
