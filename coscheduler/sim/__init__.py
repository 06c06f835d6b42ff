"""Trace-driven simulator: replays Standard Workload Format traces in virtual time.

Layers, one module each:

- ``swf``: reads a trace file into plain job records (the only module doing file I/O);
- ``cluster``: the machine (nodes x processors per node) and how many nodes a job takes;
- ``decision``: one decision step: order the queue, start the top while it fits, then
  hand over to ``backfill`` (none, EASY, conservative);
- ``engine``: the discrete-event loop: job records in, per-job start/end out;
- ``metrics``: bounded slowdown, waits, utilisation, ... from a schedule;
- ``replay``: glue for the command line and the benchmark (window, run, metrics).
"""

from .cluster import Cluster
from .engine import BACKFILL_MODES, Schedule, simulate
from .metrics import Metrics, compute_metrics
from .swf import SwfFormatError, SwfTrace, TraceJob, read_swf

__all__ = [
    "BACKFILL_MODES",
    "Cluster",
    "Metrics",
    "Schedule",
    "SwfFormatError",
    "SwfTrace",
    "TraceJob",
    "compute_metrics",
    "read_swf",
    "simulate",
]
