"""Small synthetic traces for the learned-scheduler tests."""

from __future__ import annotations

from pathlib import Path


def write_stuck_shorts_trace(path: Path, cycles: int = 220) -> Path:
    """4 nodes; each job takes the whole machine. Every cycle: a 100 s blocker, then a
    2,000 s job and five 20 s jobs arrive together while it runs (so the next head is
    chosen among all six). FCFS runs the long job first (the short ones wait ~2,000 s,
    bounded slowdown ~100); short-first is far better."""
    lines = ["; MaxNodes: 4", "; MaxProcs: 4"]
    number = 1
    for c in range(cycles):
        t0 = c * 5000
        rows = [(t0, 100, 100), (t0 + 1, 2000, 2000)] + [(t0 + 1, 20, 25) for k in range(5)]
        for submit, run, est in rows:
            lines.append(f"{number} {submit} -1 {run} 4 -1 -1 4 {est} -1 1 {1 + number % 3} "
                         "-1 -1 -1 -1 -1 -1")
            number += 1
    path.write_text("\n".join(lines) + "\n")
    return path
