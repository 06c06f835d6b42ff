"""Text tables for ``cosched simulate paper``: ours beside the paper's (pure formatting).

Our runs are shorter than the paper's (scale 1: workflows of minutes, the paper's of
0.3-0.7 h), so absolute times are printed in one unit chosen for the run and the paper's
in hours, and each time also as a ratio to space sharing (ours) and to Slurm (the
paper's): the ratios are what compares across the two.
"""

from __future__ import annotations

from typing import Sequence

from .paper import (PAPER_LOAD, PAPER_TABLE2_RUNTIME_H, WORKFLOW_KINDS, normalised_runtimes,
                    paper_normalised_runtimes, runtime_by_kind)

BASELINE = "space-sharing"
_COL = 17   # one policy's two columns
_LABEL = 20


def time_unit(summary: Sequence[dict]) -> tuple[str, float]:
    """("h", 3600), ("min", 60) or ("s", 1): the largest unit the longest makespan
    reaches twice, so the figures keep a few significant digits."""
    longest = max((r["makespan_s"] for r in summary), default=0.0)
    for name, size in (("h", 3600.0), ("min", 60.0)):
        if longest >= 2 * size:
            return name, size
    return "s", 1.0


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f} %"


def _row(label: str, cells: list[tuple[str, str]]) -> str:
    parts = [label.ljust(_LABEL)]
    for ours, paper in cells:
        parts.append(f"{ours:>7} {paper:>7}".ljust(_COL))
    return " ".join(parts).rstrip()


def _header(rows: Sequence[dict]) -> list[str]:
    names = " ".join(["".ljust(_LABEL)] + [f"{r['policy']:^15}".ljust(_COL) for r in rows])
    return [names.rstrip(), _row("", [("ours", "paper")] * len(rows))]


def cluster_table(rows: Sequence[dict], unit: tuple[str, float]) -> str:
    """Table 3 for one cluster size: metrics down, policies across, ours beside the paper's."""
    name, size = unit
    cores = rows[0]["cores"]
    base = next((r for r in rows if r["policy"] == BASELINE), None)
    load = PAPER_LOAD.get(cores)
    title = (f"{cores} cores" + (f" (the paper's load {load})" if load else " (not in the paper)")
             + f": medians of {rows[0]['repeats']} repetition(s); ours in {name}, the paper's in h")
    scale_out = rows[0].get("scale_out", 1)
    if scale_out > 1:
        title = title.replace(f"{cores} cores", f"{cores} cores x {scale_out} "
                              f"({cores * scale_out} cores, {15 * scale_out} workflows)", 1)
    lines = [title]
    lines += _header(rows)

    def paper(r: dict, key: str) -> float | None:
        return r["paper"][key] if r["paper"] else None

    def paper_base(key: str) -> float | None:
        return paper(base, key) if base is not None else None

    def ratio(x: float | None, b: float | None) -> str:
        return "-" if x is None or not b else f"x{x / b:.2f}"

    for label, key, pkey in (("mean wait", "mean_wait_s", "mean_wait_h"),
                             ("mean response", "mean_response_s", "mean_response_h")):
        lines.append(_row(label, [(_num(r[key] / size), _num(paper(r, pkey), 1)) for r in rows]))
        if base is not None:
            lines.append(_row("  vs space sharing", [
                (ratio(r[key], base[key]), ratio(paper(r, pkey), paper_base(pkey)))
                for r in rows]))
    # The headline: CPU used over the cluster's cores x makespan, the definition that falls
    # with cluster size under space sharing as the paper's Table 3 does (docs/simulator.md).
    lines.append(_row("CPU util (cluster)", [(_pct(r["cluster_util"]), _pct(paper(r, "cpu_util")))
                                             for r in rows]))
    lines.append(_row("CPU util (held)", [(_pct(r["cpu_util"]), "") for r in rows]))
    lines.append(_row("makespan", [(_num(r["makespan_s"] / size), "") for r in rows]))
    lines.append(_row("co-allocations", [(f"{r['coallocations']:g}", "") for r in rows]))
    if any(r.get("spans") for r in rows):
        lines.append(_row("  in two hosts", [(f"{r.get('spans', 0):g}", "") for r in rows]))
    lines.append(_row("mean slowdown", [(_pct(r["mean_slowdown"]) if r["coallocations"] else "-", "")
                                        for r in rows]))
    lines.append(_row("  time-weighted", [(_pct(r["weighted_slowdown"]) if r["coallocations"]
                                               else "-", "") for r in rows]))
    for role in ("host", "guest"):
        if any(r.get(f"{role}_slowdown") is not None for r in rows):
            lines.append(_row(f"  {role}s", [
                ("-" if r.get(f"{role}_slowdown") is None else _pct(r[f"{role}_slowdown"]), "")
                for r in rows]))
    if any(r.get("rounds_in_run") is not None for r in rows):
        lines.append(_row("rounds closed/run", [
            ("-" if r.get("rounds_in_run") is None else f"{r['rounds_in_run']:g}", "")
            for r in rows]))
    if any(r.get("oracle_share") is not None for r in rows):
        lines.append(_row("oracle's gain taken", [
            ("-" if r.get("oracle_share") is None else f"{100 * r['oracle_share']:.0f} %", "")
            for r in rows]))
    lines.append(_row("timeouts", [(f"{r['timeouts']:g}", "") for r in rows]))
    lines.append(_row("walltime overruns", [(f"{r['overruns']:g}", "") for r in rows]))
    return "\n".join(lines)


def runtime_table(rows: Sequence[dict], unit: tuple[str, float]) -> str | None:
    """Table 2 for one cluster size: each workflow kind's mean total runtime under space
    sharing, and the other policies' as a ratio to it, ours beside the paper's."""
    name, size = unit
    cores = rows[0]["cores"]
    norm = normalised_runtimes(rows).get(cores)
    base = next((r for r in rows if r["policy"] == BASELINE), None)
    if norm is None or base is None:
        return None
    paper_norm = paper_normalised_runtimes(cores) or {}
    paper_h = PAPER_TABLE2_RUNTIME_H.get(cores, {}).get(BASELINE, {})
    ours_base = runtime_by_kind(base)
    lines = [f"{cores} cores: workflow total runtime (sum of its stages' runtimes), Table 2",
             f"space sharing in {name} (the paper's in h), the others as a ratio to it"]
    lines += _header(rows)
    for kind in WORKFLOW_KINDS:
        if kind not in ours_base:
            continue
        cells = []
        for r in rows:
            if r["policy"] == BASELINE:
                cells.append((_num(ours_base[kind] / size), _num(paper_h.get(kind))))
            else:
                p = paper_norm.get(r["policy"], {}).get(kind)
                cells.append((f"x{norm[r['policy']][kind]:.2f}", "-" if p is None else f"x{p:.2f}"))
        lines.append(_row(kind, cells))
    return "\n".join(lines)


def report(summary: Sequence[dict], notes: Sequence[str] = ()) -> str:
    """Both tables for every cluster size, then the notes."""
    unit = time_unit(summary)
    by_cores: dict[int, list[dict]] = {}
    for r in summary:
        by_cores.setdefault(r["cores"], []).append(r)
    blocks = []
    for rows in by_cores.values():
        blocks.append(cluster_table(rows, unit))
        rt = runtime_table(rows, unit)
        if rt is not None:
            blocks.append(rt)
    return "\n\n".join(blocks + (["\n".join(notes)] if notes else []))


__all__ = ["cluster_table", "report", "runtime_table", "time_unit"]
