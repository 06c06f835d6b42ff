"""``cosched progress``: report a job's progress to the monitoring agent."""

from __future__ import annotations

import click

from ..progress import ENV_VAR, write_progress


@click.command("progress")
@click.option("--done", type=click.IntRange(min=0), required=True, help="Tasks finished so far.")
@click.option("--total", type=click.IntRange(min=0), default=None, help="Tasks in the whole job.")
@click.option("--file", "path", type=click.Path(dir_okay=False), default=None,
              help=f"Progress file [default: ${ENV_VAR}, set by the backend that started the job].")
def progress(done: int, total: int | None, path: str | None) -> None:
    """Record that DONE of TOTAL tasks are finished; the node agent turns successive
    records into tasks/s and happiness Hp(t)."""
    if total is not None and done > total:
        raise click.BadParameter(f"--done {done} is larger than --total {total}", param_hint="--done")
    try:
        written = write_progress(done, total, path)
    except OSError as e:
        raise click.ClickException(f"cannot write progress file: {e}")
    if written is None:
        raise click.UsageError(f"no progress file: pass --file or set {ENV_VAR}")
