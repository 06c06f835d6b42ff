"""``cosched models list [--json]``: the shipped learned models."""

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
    """List the shipped models (use them as --policy rl:NAME or --inspector NAME)."""
    from ..learned.registry import list_models

    rows = list_models()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no models shipped")
        return
    header = ("name", "kind", "trace", "metric", "backfill", "base", "epochs", "train min", "KiB")
    table = [header] + [(
        r["name"], r["kind"] or "BROKEN", str(r["trace"]), str(r["metric"]), str(r["backfill"]),
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
