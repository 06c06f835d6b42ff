"""``cosched models list [--json]``: the shipped learned models (queue schedulers and
inspectors in coscheduler/learned/models, MRSch and scalar RL in coscheduler/multi/models)."""

from __future__ import annotations

import json

import click


@click.group()
def models() -> None:
    """Learned queue-scheduler models shipped with coscheduler."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True,
              help='Print [{"name", "kind", "trace", "metric", "backfill", "path", ...}].')
def list_cmd(as_json: bool) -> None:
    """List the shipped models (rl:NAME with --policy, --inspector NAME; mrsch and
    scalar-rl with cosched simulate multi --methods)."""
    from ..learned.registry import list_models
    from ..multi.report import list_models as list_multi_models

    rows = list_models() + list_multi_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no models shipped")
        return
    header = ("name", "kind", "trace", "metric/set", "backfill", "base", "epochs", "train min",
              "KiB")
    table = [header] + [(
        r["name"], r["kind"] or "BROKEN", str(r["trace"]), str(r["metric"] or r.get("set")),
        str(r["backfill"]),
        r.get("base") or "-", str(r.get("epochs")),
        f"{r['training_seconds'] / 60:.1f}" if r.get("training_seconds") else "-",
        f"{r.get('size_bytes', 0) / 1024:.1f}") for r in rows]
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    for k, row in enumerate(table):
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if k == 0:
            click.echo("  ".join("-" * w for w in widths))
    for r in rows:
        if "error" in r:
            click.echo(f"warning: {r['error']}", err=True)
