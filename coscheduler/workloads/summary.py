"""Per-category summary of measured WfCommons instances, and the code that derives it.

The workflow definitions take their stage structure and relative task runtimes from two
measured WfFormat 1.4 instances, shipped in coscheduler/data/workflows/ (see its README):

- montage-chameleon-2mass-01d-001.json (Pegasus, Montage 2MASS, 1 degree, 103 tasks)
- blast-chameleon-small-001.json (Makeflow, BLAST small, 43 tasks)

``summarize_instance(path)`` groups an instance's tasks by ``category`` and keeps, per
category in first-seen order: the task count, the mean ``runtimeInSeconds``, the mean
``avgCPU`` (percent of one core), the mean memory (MB; ``memoryInBytes`` or ``memory`` in
KB), the mean number and total size of input and output files, and the parent categories.
``EMBEDDED`` below is its output for the two instances, rounded by ``_round`` (regenerate
with ``python -m coscheduler.workloads.summary`` on the bundled instances, or PATH...), so
nothing parses the instances at run time; a test checks the copy against the bundled data.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from pathlib import Path
from statistics import fmean
from typing import Any

from .. import boundedjson

# WfFormat instances of the largest workflows are tens of MB
INSTANCE_MAX_BYTES = 512 << 20
# Instance file name -> workflow name used in the definitions.
INSTANCE_FILES = {
    "montage": "montage-chameleon-2mass-01d-001.json",
    "blast": "blast-chameleon-small-001.json",
}


def _task_memory_mb(task: dict[str, Any]) -> float | None:
    if isinstance(task.get("memoryInBytes"), (int, float)):
        return task["memoryInBytes"] / 1e6
    if isinstance(task.get("memory"), (int, float)):  # WfFormat 1.4: KB
        return task["memory"] / 1e3
    return None


def _round(x: float) -> float:
    """Four significant digits: enough to define workloads, stable to compare."""
    return float(f"{x:.4g}")


def summarize_instance(path: str | Path) -> dict[str, Any]:
    """Summarise one WfFormat instance by task category (see the module docstring)."""
    path = Path(path)
    try:
        doc = boundedjson.load_file(path, max_bytes=INSTANCE_MAX_BYTES, what="JSON")
        tasks = doc["workflow"]["tasks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a readable WfFormat instance ({e})") from None
    by_name = {t["name"]: t.get("category") or t["name"].split("_ID")[0] for t in tasks}
    groups: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
    for t in tasks:
        groups.setdefault(by_name[t["name"]], []).append(t)
    categories = []
    for cat, ts in groups.items():
        def files(t: dict[str, Any], link: str) -> list[int]:
            return [f.get("sizeInBytes", 0) for f in t.get("files", []) if f.get("link") == link]
        mems = [m for m in (_task_memory_mb(t) for t in ts) if m is not None]
        cpus = [t["avgCPU"] for t in ts if isinstance(t.get("avgCPU"), (int, float))]
        parents = []
        for t in ts:
            for p in t.get("parents", []):
                pc = by_name.get(p)
                if pc is not None and pc not in parents:
                    parents.append(pc)
        categories.append({
            "category": cat,
            "tasks": len(ts),
            "runtime_s": _round(fmean(t["runtimeInSeconds"] for t in ts)),
            "avg_cpu_pct": _round(fmean(cpus)) if cpus else None,
            "memory_mb": _round(fmean(mems)) if mems else None,
            "files_in": _round(fmean(len(files(t, "input")) for t in ts)),
            "mb_in": _round(fmean(sum(files(t, "input")) for t in ts) / 1e6),
            "files_out": _round(fmean(len(files(t, "output")) for t in ts)),
            "mb_out": _round(fmean(sum(files(t, "output")) for t in ts) / 1e6),
            "parents": sorted(parents),
        })
    return {
        "instance": path.name,
        "makespan_s": _round(float(doc["workflow"].get("makespanInSeconds", 0.0))),
        "categories": categories,
    }


# Output of summarize_instance() on the two instances named in INSTANCE_FILES.
# Note: the Montage instance ran on a 48-core machine with local disks, where mProject was
# CPU-bound (avgCPU ~99 %); the paper's Montage ran on a shared XFS file system and was
# I/O-bound (21-45 % CPU, Table 2). definitions.py keeps these runtimes but caps CPU shares.
EMBEDDED: dict[str, dict[str, Any]] = {
    'montage': {
        'instance': 'montage-chameleon-2mass-01d-001.json',
        'makespan_s': 1362.0,
        'categories': [
            {'category': 'mProject',
             'tasks': 21,
             'runtime_s': 16.21,
             'avg_cpu_pct': 98.9,
             'memory_mb': 14.67,
             'files_in': 2.0,
             'mb_in': 1.49,
             'files_out': 2.0,
             'mb_out': 8.296,
             'parents': []},
            {'category': 'mDiffFit',
             'tasks': 45,
             'runtime_s': 0.157,
             'avg_cpu_pct': 5.31,
             'memory_mb': 2.855,
             'files_in': 5.0,
             'mb_in': 16.59,
             'files_out': 1.0,
             'mb_out': 0.0002635,
             'parents': ['mProject']},
            {'category': 'mConcatFit',
             'tasks': 3,
             'runtime_s': 0.1833,
             'avg_cpu_pct': 100.2,
             'memory_mb': 70.81,
             'files_in': 16.0,
             'mb_in': 0.02683,
             'files_out': 1.0,
             'mb_out': 0.00118,
             'parents': ['mDiffFit']},
            {'category': 'mBgModel',
             'tasks': 3,
             'runtime_s': 0.59,
             'avg_cpu_pct': 100.0,
             'memory_mb': 137.0,
             'files_in': 2.0,
             'mb_in': 0.01503,
             'files_out': 1.0,
             'mb_out': 0.0003677,
             'parents': ['mConcatFit']},
            {'category': 'mBackground',
             'tasks': 21,
             'runtime_s': 0.3751,
             'avg_cpu_pct': 85.53,
             'memory_mb': 68.99,
             'files_in': 4.0,
             'mb_in': 8.302,
             'files_out': 2.0,
             'mb_out': 8.296,
             'parents': ['mBgModel', 'mProject']},
            {'category': 'mImgtbl',
             'tasks': 3,
             'runtime_s': 0.1807,
             'avg_cpu_pct': 99.82,
             'memory_mb': 71.16,
             'files_in': 8.0,
             'mb_in': 29.04,
             'files_out': 1.0,
             'mb_out': 0.003944,
             'parents': ['mBackground']},
            {'category': 'mAdd',
             'tasks': 3,
             'runtime_s': 0.3703,
             'avg_cpu_pct': 94.61,
             'memory_mb': 70.01,
             'files_in': 16.0,
             'mb_in': 58.08,
             'files_out': 2.0,
             'mb_out': 18.67,
             'parents': ['mBackground', 'mImgtbl']},
            {'category': 'mViewer',
             'tasks': 4,
             'runtime_s': 0.8097,
             'avg_cpu_pct': 99.37,
             'memory_mb': 32.62,
             'files_in': 1.5,
             'mb_in': 14.0,
             'files_out': 1.0,
             'mb_out': 0.7705,
             'parents': ['mAdd']},
        ],
    },
    'blast': {
        'instance': 'blast-chameleon-small-001.json',
        'makespan_s': 1279.0,
        'categories': [
            {'category': 'split_fasta',
             'tasks': 1,
             'runtime_s': 0.05402,
             'avg_cpu_pct': 94.81,
             'memory_mb': 3.0,
             'files_in': 2.0,
             'mb_in': 0.000204,
             'files_out': 40.0,
             'mb_out': 0.00024,
             'parents': []},
            {'category': 'blastall',
             'tasks': 40,
             'runtime_s': 9.57,
             'avg_cpu_pct': 99.52,
             'memory_mb': 527.0,
             'files_in': 3.0,
             'mb_in': 5112.0,
             'files_out': 2.0,
             'mb_out': 1.385e-05,
             'parents': ['split_fasta']},
            {'category': 'cat_blast',
             'tasks': 1,
             'runtime_s': 0.03481,
             'avg_cpu_pct': 91.02,
             'memory_mb': 3.0,
             'files_in': 41.0,
             'mb_in': 0.000555,
             'files_out': 1.0,
             'mb_out': 0.000454,
             'parents': ['blastall']},
            {'category': 'cat',
             'tasks': 1,
             'runtime_s': 0.009611,
             'avg_cpu_pct': 66.41,
             'memory_mb': 3.0,
             'files_in': 40.0,
             'mb_in': 0.0,
             'files_out': 1.0,
             'mb_out': 0.0,
             'parents': ['blastall']},
        ],
    },
}


def main(argv: list[str]) -> int:
    """Print the summary of each instance given on the command line (default: the bundled
    ones), as JSON."""
    if not argv:   # the bundled instances the definitions were made from
        from coscheduler.data import workflow_instance

        argv = [str(workflow_instance(name)) for name in INSTANCE_FILES.values()]
    print(json.dumps([summarize_instance(p) for p in argv], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
