"""``cosched bench json``: what reading a peer's JSON bounded costs beside ``json.loads``.

The document is shaped like Slurm 24.11's ``squeue --json`` (about 9 KB a job, printed with
an indent of 2, nested 9 levels, strings with escapes and brackets), built here so the bench
needs no recorded file. Side by side, medians of ``--repeat`` runs: ``json.loads`` alone,
``boundedjson.loads`` (the size and nesting checks, then the same parse), the nesting scan
alone, and the scan the project used before (a regular expression dropping strings).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from itertools import accumulate

import click

from .. import boundedjson


def _number(n: int) -> dict:
    return {"set": True, "infinite": False, "number": n}


def squeue_like(jobs: int) -> bytes:
    """A ``squeue --json``-like answer of ``jobs`` jobs (about 9 KB each)."""
    recs = []
    for i in range(jobs):
        rec = {"account": "", "admin_comment": "cosched:v=1;host=7;q=0.6" if i % 3 else "",
               "command": f"/home/u{i % 50}/run \"case [{i}]\" --out {{dir}}\\\\x",
               "comment": "cosched:class=montage/stage,tasks=8", "job_id": 1000 + i,
               "job_resources": {"nodes": {"allocation": [
                   {"cpus": {"count": 2, "used": 2}, "memory": {"allocated": 1024},
                    "name": f"n{k}", "sockets": [{"cores": [{"index": c, "status": ["ALLOCATED"]}
                                                            for c in range(2)]}]}
                   for k in range(2)]}},
               "job_state": ["PENDING"] if i % 2 else ["RUNNING"], "name": f"stage-{i}",
               "partition": "cosched", "user_name": f"u{i % 50}"}
        for k in range(60):     # Slurm's many optional numbers
            rec[f"field_{k:02d}"] = _number(i * k)
        recs.append(rec)
    return json.dumps({"jobs": recs, "meta": {"plugin": {"type": "openapi/slurmctld"}},
                       "errors": [], "warnings": []}, indent=2).encode()


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPEN_AS_1 = bytes.maketrans(b"[{]}", b"\x01\x01\x00\x00")


def regex_depth(raw: bytes) -> int:
    """The nesting scan before numpy: strings dropped by a regular expression."""
    brackets = _STRINGS.sub(b"", raw).translate(_OPEN_AS_1, _NOT_BRACKETS)
    return max(accumulate((-1, 1)[b] for b in brackets), default=0)


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@click.command("json")
@click.option("--jobs", type=click.IntRange(min=1, max=200_000), default=10_000, show_default=True,
              help="Jobs in the squeue-like answer (about 9 KB each).")
@click.option("--repeat", type=click.IntRange(min=1, max=100), default=3, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def jsonread(jobs: int, repeat: int, as_json: bool) -> None:
    """Bounded JSON reading (coscheduler/boundedjson.py) beside json.loads."""
    raw = squeue_like(jobs)
    depth = boundedjson.nesting_depth(raw, 0)
    if depth != regex_depth(raw):
        raise click.ClickException(f"the two nesting scans disagree ({depth} vs {regex_depth(raw)})")
    cap = len(raw) + 1
    out = {"jobs": jobs, "bytes": len(raw), "depth": depth, "repeat": repeat,
           "json_loads_s": _median(lambda: json.loads(raw), repeat),
           "bounded_loads_s": _median(lambda: boundedjson.loads(raw, max_bytes=cap), repeat),
           "nesting_scan_s": _median(lambda: boundedjson.nesting_depth(raw, 64), repeat),
           "regex_scan_s": _median(lambda: regex_depth(raw), repeat)}
    out["bounded_over_json_loads"] = out["bounded_loads_s"] / out["json_loads_s"]
    out["regex_over_nesting_scan"] = out["regex_scan_s"] / out["nesting_scan_s"]
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"squeue-like answer: {jobs:,} jobs, {len(raw) / 1e6:.1f} MB, nested {depth} deep; "
               f"medians of {repeat}")
    click.echo(f"  json.loads              {out['json_loads_s']:.3f} s")
    click.echo(f"  boundedjson.loads       {out['bounded_loads_s']:.3f} s  "
               f"(x{out['bounded_over_json_loads']:.2f} of json.loads)")
    click.echo(f"  nesting scan (numpy)    {out['nesting_scan_s']:.3f} s")
    click.echo(f"  nesting scan (regex)    {out['regex_scan_s']:.3f} s  "
               f"(x{out['regex_over_nesting_scan']:.1f} of the numpy scan)")
