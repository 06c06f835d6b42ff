"""``cosched bench squeue``: reading a large ``squeue --json`` answer, the whole tree at once
(the way before) beside a job at a time (``parse.parse_jobs_json``): time and peak memory;
then from a command that prints it, the answer read whole as text (``SlurmCommands.run``,
then ``parse_jobs_json``) beside read as it is printed (``SlurmCommands.stream`` into
``answerstream.JobsStream``, what the backend does).

The answer is shaped like Slurm 24.11's (about 9 KB a job; ``coscheduler.bench.jsonread``).
Memory is Python's own allocations during the read (tracemalloc's peak), one run each: for
the first pair the text is given and not counted, for the second the command's output is
counted from its first byte. Times are medians of ``--repeat`` runs without tracing, the
two ways of each pair in turns. The command is ``cat`` of a file in a temporary folder.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

import click

from coscheduler import boundedjson
from coscheduler.bench.jsonread import squeue_like

from .commands import SlurmCommands
from .answerstream import JobsStream
from .parse import MAX_JSON_DEPTH, job_from_json, parse_jobs_json


def whole_tree(text: str) -> list:
    """The jobs read as before: the whole answer parsed, then each record converted."""
    data = boundedjson.loads(text, max_bytes=len(text) * 4 + 1, max_depth=MAX_JSON_DEPTH)
    return [job_from_json(j) for j in data["jobs"]]


def _peak_bytes(fn, arg) -> int:
    tracemalloc.start()
    try:
        fn(arg)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _side_by_side(out: dict, ways: tuple, arg, repeat: int) -> None:
    """Each way's median time (in turns) and peak memory into ``out``."""
    times: dict[str, list[float]] = {name: [] for name, _ in ways}
    for _ in range(repeat):
        for name, fn in ways:
            t0 = time.perf_counter()
            fn(arg)
            times[name].append(time.perf_counter() - t0)
    for name, fn in ways:
        out[f"{name}_s"] = round(statistics.median(times[name]), 3)
        out[f"{name}_peak_mb"] = round(_peak_bytes(fn, arg) / 1e6, 1)


def measure(jobs: int, repeat: int) -> dict:
    raw = squeue_like(jobs)
    text = raw.decode()
    if whole_tree(text) != parse_jobs_json(text):
        raise click.ClickException("the two readers disagree on the jobs")
    out = {"jobs": jobs, "text_mb": round(len(text) / 1e6, 1), "repeat": repeat}
    _side_by_side(out, (("whole_tree", whole_tree), ("per_job", parse_jobs_json)), text, repeat)
    out["peak_ratio"] = round(out["per_job_peak_mb"] / out["whole_tree_peak_mb"], 3)
    out["time_ratio"] = round(out["per_job_s"] / out["whole_tree_s"], 3)
    del text
    cmds, what = SlurmCommands(retries=0, timeout_s=600.0), "squeue --json"
    with tempfile.TemporaryDirectory(prefix="cosched-bench-squeue-") as d:
        path = Path(d) / "squeue.json"
        path.write_bytes(raw)
        del raw

        def run_whole(p: Path) -> list:
            return parse_jobs_json(cmds.run("cat", str(p)), what)

        def streamed(p: Path) -> list:
            return cmds.stream("cat", str(p), reader=lambda: JobsStream(what)).finish()
        if run_whole(path) != streamed(path):
            raise click.ClickException("the whole-text and the streamed reads disagree on the jobs")
        _side_by_side(out, (("command_whole_text", run_whole), ("command_streamed", streamed)),
                      path, repeat)
    out["command_peak_ratio"] = round(out["command_streamed_peak_mb"]
                                      / out["command_whole_text_peak_mb"], 3)
    out["command_time_ratio"] = round(out["command_streamed_s"] / out["command_whole_text_s"], 3)
    return out


@click.command("squeue")
@click.option("--jobs", type=click.IntRange(min=1, max=200_000), default=5_000, show_default=True,
              help="Jobs in the squeue-like answer (about 9 KB each).")
@click.option("--repeat", type=click.IntRange(min=1, max=100), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def squeue(jobs: int, repeat: int, as_json: bool) -> None:
    """Reading squeue --json: whole tree vs a job at a time (time, peak memory).

    JSON: {"jobs", "text_mb", "repeat", "whole_tree_s", "whole_tree_peak_mb", "per_job_s",
    "per_job_peak_mb", "peak_ratio", "time_ratio", "command_whole_text_s",
    "command_whole_text_peak_mb", "command_streamed_s", "command_streamed_peak_mb",
    "command_peak_ratio", "command_time_ratio"}
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
    click.echo("from a command that prints it (cat), its output counted from the first byte:")
    click.echo(f"  whole text      {out['command_whole_text_s']:.3f} s  "
               f"peak {out['command_whole_text_peak_mb']:8.1f} MB")
    click.echo(f"  as printed      {out['command_streamed_s']:.3f} s  "
               f"peak {out['command_streamed_peak_mb']:8.1f} MB  (x{out['command_time_ratio']:.2f} "
               f"the time, x{out['command_peak_ratio']:.3f} the memory)")
