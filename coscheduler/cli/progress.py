"""``cosched progress``: report a job's progress to the monitoring agent."""

from __future__ import annotations

import os

import click

from ..outputs import OutputError
from ..progress import ENV_VAR, check_progress_file, write_progress


@click.command("progress")
@click.option("--done", type=click.IntRange(min=0), required=True, help="Tasks finished so far.")
@click.option("--total", type=click.IntRange(min=0), default=None, help="Tasks in the whole job.")
@click.option("--file", "path", type=click.Path(dir_okay=False), default=None,
              help=f"Progress file [default: ${ENV_VAR}, set by the backend that started the job].")
def progress(done: int, total: int | None, path: str | None) -> None:
    """Record that DONE of TOTAL tasks are finished; the node agent turns successive
    records into tasks/s and happiness Hp(t). Hp assumes equal tasks: where they are not,
    count work units instead (the project's stage programs count each task by its cost)."""
    if total is not None and done > total:
        raise click.BadParameter(f"--done {done} is larger than --total {total}", param_hint="--done")
    target = path if path is not None else os.environ.get(ENV_VAR)
    if not target:
        raise click.UsageError(f"no progress file: pass --file or set {ENV_VAR}")
    try:
        check_progress_file(target)
        write_progress(done, total, target)
    except OutputError as e:
        raise click.ClickException(str(e)) from None
