"""``cosched workload batsim --from TRACE.swf --out W.json``: an SWF trace as a Batsim workload."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import outputs
from ..model import InvalidInput


@click.command("batsim")
@click.option("--from", "trace", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The SWF trace (plain or .gz).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The Batsim JSON workload to write.")
@click.option("--start-index", type=click.IntRange(min=0), default=0, show_default=True,
              help="First job (0-based, job-number order), as for cosched simulate swf.")
@click.option("--jobs", "count", type=click.IntRange(min=1), default=None,
              help="Number of jobs [default: to the end of the trace].")
@click.option("--skip-bad-lines", is_flag=True, help="Skip malformed trace lines.")
def workload_batsim(trace: str, out: Path, start_index: int, count: int | None,
                    skip_bad_lines: bool) -> None:
    """Convert an SWF trace to a Batsim JSON workload: one delay profile per run time,
    walltime = the requested time (else the run time), res = processors, nb_res = MaxProcs.
    cosched simulate swf replays either file to the same schedule."""
    from ..sim.batsim import to_batsim
    from ..sim.replay import window
    from ..sim.swf import read_swf

    try:
        outputs.check_output(out)
        loaded = read_swf(trace, skip_bad_lines=skip_bad_lines)
        jobs = window(loaded.jobs, start_index, count)
        doc = to_batsim(loaded, jobs)
        outputs.write_text(out, json.dumps(doc, indent=1) + "\n")
    except InvalidInput as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{out}: {len(doc['jobs'])} jobs, {len(doc['profiles'])} profiles, "
               f"nb_res {doc['nb_res']}", err=True)
