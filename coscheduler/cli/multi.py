"""Multi-resource commands: ``cosched workload multi`` and ``cosched simulate multi``.

``cosched workload multi --from TRACE --set S4 [--seed 1] --out FILE [--json]`` writes one
of MRSch's sets S1-S10 built from TRACE (format: coscheduler/multi/workload.py and
docs/multi-resource.md). The simulate command is defined in ``simulate_multi`` below.
"""

from __future__ import annotations

import json

import click

from ..model import InvalidInput
from ..multi import workload as mw
from ..sim.swf import read_swf


@click.command("multi")
@click.option("--from", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="SWF trace (plain or gzip) whose jobs get the extra requests")
@click.option("--set", "set_name", required=True,
              help=f"workload set: {', '.join(mw.SETS)}")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="file to write (SWF plus three columns)")
@click.option("--skip-bad-lines", is_flag=True, help="skip malformed trace lines")
@click.option("--json", "as_json", is_flag=True, help="print a summary as JSON")
def workload_multi(trace_path: str, set_name: str, seed: int, out: str, skip_bad_lines: bool,
                   as_json: bool) -> None:
    """Write MRSch's workload set (burst buffer, power) built from TRACE and a seed."""
    try:
        trace = read_swf(trace_path, skip_bad_lines=skip_bad_lines)
        wl = mw.generate(trace, set_name, seed)
        mw.write(wl, out)
    except InvalidInput as e:
        raise click.ClickException(str(e)) from None
    s = mw.shares(wl)
    m = wl.machine
    summary = {
        "set": wl.set_name, "seed": seed, "trace": trace_path, "out": out,
        "jobs": len(wl.jobs), "nodes": wl.max_nodes,
        "burst_buffer_gb": m.burst_buffer_gb, "power_budget_w": m.power_budget_w,
        "idle_power_w": m.idle_power_w, "bb_share": s["bb_share"],
        "bb_mean_tb": s["bb_mean_tb"], "power_capped": wl.power_capped,
    }
    if as_json:
        click.echo(json.dumps(summary))
        return
    power = (f", power budget {m.power_budget_w} W (idle {m.idle_power_w} W/node, "
             f"{wl.power_capped} jobs capped)" if m.power_budget_w else "")
    click.echo(f"{wl.set_name} (seed {seed}) from {trace_path}: {len(wl.jobs)} jobs on "
               f"{wl.max_nodes} nodes, burst buffer {m.burst_buffer_gb / 1000:.1f} TB, "
               f"{100 * s['bb_share']:.1f} % of jobs ask for it (mean {s['bb_mean_tb']:.2f} TB)"
               f"{power} -> {out}")
