"""``cosched progress``: report a job's progress to the monitoring agent."""

from __future__ import annotations

import click

import os
import stat

from ..progress import ENV_VAR, read_progress, write_progress


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
    if target:
        _check_replaceable(target)
    try:
        written = write_progress(done, total, path)
    except OSError as e:
        raise click.ClickException(f"cannot write progress file: {e}")
    if written is None:
        raise click.UsageError(f"no progress file: pass --file or set {ENV_VAR}")


def _check_replaceable(target: str) -> None:
    """Refuse to replace anything but a progress record: ``--file`` (or the environment
    variable) may name any file, and the record is written over it."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return
    except OSError as e:
        raise click.ClickException(f"cannot use progress file {target}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise click.BadParameter(f"{target} is a folder", param_hint="--file")
    if not stat.S_ISREG(st.st_mode) or st.st_size > 65536 or read_progress(target) is None:
        raise click.ClickException(
            f"{target} exists and is not a progress file (a {{\"done\": N, ...}} record); "
            "refusing to overwrite it")
