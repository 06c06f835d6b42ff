"""``cosched bench squeue``: reading a large ``squeue --json`` answer, the whole tree at once
(the way before) beside a job at a time (``parse.parse_jobs_json``): time and peak memory.

The answer is shaped like Slurm 24.11's (about 9 KB a job; ``coscheduler.bench.jsonread``)
and given as text, as ``SlurmCommands.run`` returns it. Memory is Python's own allocations
during the read (tracemalloc's peak, the text itself not counted), one run each; times are
medians of ``--repeat`` runs without tracing, the two ways in turns.
"""

from __future__ import annotations

import json
import statistics
import time
import tracemalloc

import click

from coscheduler import boundedjson
from coscheduler.bench.jsonread import squeue_like

from .parse import MAX_JSON_DEPTH, job_from_json, parse_jobs_json


def whole_tree(text: str) -> list:
    """The jobs read as before: the whole answer parsed, then each record converted."""
    data = boundedjson.loads(text, max_bytes=len(text) * 4 + 1, max_depth=MAX_JSON_DEPTH)
    return [job_from_json(j) for j in data["jobs"]]


def _peak_bytes(fn, text: str) -> int:
    tracemalloc.start()
    try:
        fn(text)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure(jobs: int, repeat: int) -> dict:
    text = squeue_like(jobs).decode()
    if whole_tree(text) != parse_jobs_json(text):
        raise click.ClickException("the two readers disagree on the jobs")
    times: dict[str, list[float]] = {"whole_tree": [], "per_job": []}
    for _ in range(repeat):
        for name, fn in (("whole_tree", whole_tree), ("per_job", parse_jobs_json)):
            t0 = time.perf_counter()
            fn(text)
            times[name].append(time.perf_counter() - t0)
    out = {"jobs": jobs, "text_mb": round(len(text) / 1e6, 1), "repeat": repeat}
    for name, fn in (("whole_tree", whole_tree), ("per_job", parse_jobs_json)):
        out[f"{name}_s"] = round(statistics.median(times[name]), 3)
        out[f"{name}_peak_mb"] = round(_peak_bytes(fn, text) / 1e6, 1)
    out["peak_ratio"] = round(out["per_job_peak_mb"] / out["whole_tree_peak_mb"], 3)
    out["time_ratio"] = round(out["per_job_s"] / out["whole_tree_s"], 3)
    return out


@click.command("squeue")
@click.option("--jobs", type=click.IntRange(min=1, max=200_000), default=5_000, show_default=True,
              help="Jobs in the squeue-like answer (about 9 KB each).")
@click.option("--repeat", type=click.IntRange(min=1, max=100), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def squeue(jobs: int, repeat: int, as_json: bool) -> None:
    """Reading squeue --json: whole tree vs a job at a time (time, peak memory).

    JSON: {"jobs", "text_mb", "repeat", "whole_tree_s", "whole_tree_peak_mb", "per_job_s",
    "per_job_peak_mb", "peak_ratio", "time_ratio"}
    """
    out = measure(jobs, repeat)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"squeue-like answer: {jobs:,} jobs, {out['text_mb']} MB of text; times: medians "
               f"of {repeat}, in turns; memory: Python's peak during the read, text not counted")
    click.echo(f"  whole tree      {out['whole_tree_s']:.3f} s  peak {out['whole_tree_peak_mb']:8.1f} MB")
    click.echo(f"  a job at a time {out['per_job_s']:.3f} s  peak {out['per_job_peak_mb']:8.1f} MB  "
               f"(x{out['time_ratio']:.2f} the time, x{out['peak_ratio']:.3f} the memory)")
