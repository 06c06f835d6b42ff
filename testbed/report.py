"""``cosched testbed report``: what a testbed run measured, beside the simulator's prediction.

Input: the ``run.json`` that ``cosched testbed run`` wrote (testbed/run.py): per policy and
repetition the paper's metrics of one run through real Slurm in the containers, with
every stage job's record. Output:

- the same tables as ``cosched simulate paper`` (testbed/report uses
  ``coscheduler.experiments.report``), the paper's figures beside them for the paper's
  cluster size this setup scales down;
- a side-by-side table: the testbed's per-policy ratios to space sharing (mean wait,
  mean response, CPU utilisation) and the mean slowdown of co-located jobs, against the
  simulator's for the same scaled setup (``cosched simulate paper`` code, same workload,
  nodes, scale), with the relative difference; differences above 15 % are marked and
  docs/testbed.md explains them;
- PNG plots (matplotlib): makespan, mean response time and CPU utilisation per policy,
  testbed beside simulator.

Pure functions turn plain data into tables; only ``write_plots`` touches files.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import fields
from pathlib import Path
from typing import Sequence

from coscheduler import boundedjson
from coscheduler.experiments import paper as paper_exp
from coscheduler.experiments.paper import PaperRun, StageRecord
from coscheduler.experiments.report import report as paper_report

BASELINE = "space-sharing"
RUN_JSON_MAX_BYTES = 256 << 20   # a results file: a few KB per run
FLAG = 0.15
METRICS = (("mean_wait_s", "mean wait"), ("mean_response_s", "mean response"),
           ("cpu_util", "CPU util (held)"), ("makespan_s", "makespan"))


# -- runs to and from JSON -------------------------------------------------------------------------

def run_to_json(run: PaperRun) -> dict:
    d = run.as_json()
    d["guest_quotas"] = list(run.guest_quotas)
    d["busy_core_seconds"] = round(run.busy_core_seconds, 3)
    d["held_core_seconds"] = round(run.held_core_seconds, 3)
    d["stages"] = [{f.name: (list(v) if isinstance(v := getattr(s, f.name), tuple) else v)
                    for f in fields(StageRecord)} for s in run.stages]
    # For the timeline picture.
    d["start_quotas"] = dict(run.start_quotas)
    d["quota_log"] = [list(x) for x in run.quota_log]
    d["use_log"] = [[round(t, 3), j, round(u, 4)] for t, j, u in run.use_log]
    d["round_times"] = list(run.round_times)
    return d


def run_from_json(d: dict) -> PaperRun:
    names = {f.name for f in fields(PaperRun)}
    kw = {k: v for k, v in d.items() if k in names and k not in ("stages",)}
    kw.setdefault("guest_quotas", [])
    kw.setdefault("busy_core_seconds", 0.0)
    kw.setdefault("held_core_seconds", 0.0)
    stages = [StageRecord(**{**s, "depends_on": tuple(s.get("depends_on") or ())})
              for s in d.get("stages", [])]
    return PaperRun(**kw, stages=stages)


def load(path: Path) -> dict:
    """A run.json (or the folder holding it)."""
    p = path / "run.json" if path.is_dir() else path
    try:
        data = boundedjson.load_file(p, max_bytes=RUN_JSON_MAX_BYTES, what="JSON")
    except FileNotFoundError:
        raise FileNotFoundError(f"no testbed results at {p}: run `cosched testbed run` first") from None
    except ValueError as exc:
        raise ValueError(f"{p} is not a testbed run.json: {exc}") from None
    if not isinstance(data, dict) or "runs" not in data or "setup" not in data:
        raise ValueError(f"{p} is not a testbed run.json (no 'runs' and 'setup')")
    if not isinstance(data["setup"], dict) or not isinstance(data["runs"], list):
        raise ValueError(f"{p} is not a testbed run.json ('setup' must be an object and "
                         "'runs' a list)")
    for i, r in enumerate(data["runs"]):
        try:
            run_from_json(r)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise ValueError(f"{p} is not a testbed run.json: run {i} cannot be read "
                             f"({type(exc).__name__}: {str(exc)[:200]})") from None
    return data


# -- metrics --------------------------------------------------------------------------------------

def stage_key(job_id: str) -> str:
    """A stage job's name without its run tag (``r0-c16.montage-1.mProject`` ->
    ``montage-1.mProject``): the same stage across runs."""
    parts = job_id.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 else job_id


def alone_runtimes(runs: Sequence[PaperRun], baseline: str = BASELINE) -> dict[str, float]:
    """Each stage's median runtime under ``baseline`` (by stage key, across repetitions)."""
    base: dict[str, list[float]] = {}
    for r in runs:
        if r.policy == baseline:
            for s in r.stages:
                if s.state == "completed":
                    base.setdefault(stage_key(s.job_id), []).append(s.end - s.start)
    return {k: statistics.median(v) for k, v in base.items()}


def run_slowdowns(run: PaperRun, alone: dict[str, float], role: str | None = None
                  ) -> list[float]:
    """runtime / runtime alone - 1 of the run's co-located stages (guests, and hosts that
    took a guest) that completed and have a runtime alone; ``role`` "host" or "guest":
    only those."""
    hosts = {s.host for s in run.stages if s.host}
    out = []
    for s in run.stages:
        if s.state != "completed" or not (s.host or s.job_id in hosts):
            continue
        if (role == "host" and s.job_id not in hosts) or (role == "guest" and not s.host):
            continue
        a = alone.get(stage_key(s.job_id))
        if a and a > 0:
            out.append((s.end - s.start) / a - 1)
    return out


def colocated_slowdown(runs: Sequence[PaperRun], baseline: str = BASELINE) -> dict[str, float | None]:
    """Per policy: mean over co-located stage jobs (guests, and hosts that took a guest) of
    runtime / the same stage's median runtime under ``baseline`` - 1. None when a policy
    co-located nothing (or there is no baseline run)."""
    alone = alone_runtimes(runs, baseline)
    out: dict[str, list[float]] = {}
    for r in runs:
        out.setdefault(r.policy, []).extend(run_slowdowns(r, alone))
    return {p: (round(statistics.fmean(v), 4) if v else None) for p, v in out.items()}


def ratios(summary: Sequence[dict], slowdown: dict[str, float | None]) -> dict[str, dict]:
    """Per policy: each metric over space sharing's, and the co-located slowdown."""
    base = next((r for r in summary if r["policy"] == BASELINE), None)
    out = {}
    for r in summary:
        row = {}
        for key, _ in METRICS:
            b = base[key] if base else None
            row[key] = round(r[key] / b, 4) if b else None
        row["colocated_slowdown"] = slowdown.get(r["policy"])
        out[r["policy"]] = row
    return out


def compare(testbed: dict[str, dict], simulator: dict[str, dict]) -> list[dict]:
    """Rows {policy, metric, testbed, simulator, difference, flagged}: difference is
    testbed / simulator - 1 for ratios, testbed - simulator for the slowdown (a
    difference of shares, in points)."""
    rows = []
    for policy, tb in testbed.items():
        sim = simulator.get(policy, {})
        for key, label in (*METRICS, ("colocated_slowdown", "co-located slowdown")):
            t, s = tb.get(key), sim.get(key)
            if key == "colocated_slowdown":
                diff = None if t is None or s is None else round(t - s, 4)
            else:
                diff = None if t is None or not s else round(t / s - 1, 4)
            rows.append({"policy": policy, "metric": key, "label": label, "testbed": t,
                         "simulator": s, "difference": diff,
                         "flagged": diff is not None and abs(diff) > FLAG})
    return rows


def _fmt(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key == "colocated_slowdown":
        return f"{100 * v:+.1f} %"
    return f"x{v:.2f}"


def compare_table(rows: Sequence[dict], absolute: dict[str, dict[str, tuple]]) -> str:
    """The side-by-side table: per policy and metric, the testbed's and the simulator's
    ratio to space sharing (and the absolute values under it), their difference."""
    lines = ["testbed vs simulator (same workload, nodes, scale): ratio to space sharing; "
             "absolute values in s or %",
             f"{'policy':<14} {'metric':<20} {'testbed':>9} {'simulator':>10} {'diff':>8}  "
             f"{'testbed abs':>12} {'sim abs':>9}"]
    for r in rows:
        diff = r["difference"]
        d = "-" if diff is None else (f"{100 * diff:+.0f} pt" if r["metric"] == "colocated_slowdown"
                                      else f"{100 * diff:+.0f} %")
        ta, sa = absolute.get(r["policy"], {}).get(r["metric"], (None, None))
        lines.append(f"{r['policy']:<14} {r['label']:<20} {_fmt(r['metric'], r['testbed']):>9} "
                     f"{_fmt(r['metric'], r['simulator']):>10} {d:>8}{' *' if r['flagged'] else '  '}"
                     f"{_abs(r['metric'], ta):>12} {_abs(r['metric'], sa):>9}")
    lines.append(f"* differs by more than {FLAG:.0%} (docs/testbed.md says why)")
    return "\n".join(lines)


def _abs(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    if key == "cpu_util":
        return f"{100 * v:.0f} %"
    if key == "colocated_slowdown":
        return ""
    return f"{v:.1f}"


def absolute_values(tb: Sequence[dict], sim: Sequence[dict]) -> dict[str, dict[str, tuple]]:
    s = {r["policy"]: r for r in sim}
    out: dict[str, dict[str, tuple]] = {}
    for r in tb:
        out[r["policy"]] = {k: (r[k], s.get(r["policy"], {}).get(k)) for k, _ in METRICS}
    return out


# -- the paper's figures for the size this setup scales down ----------------------------------------

def with_paper_equivalent(summary: Sequence[dict], paper_cores: int | None) -> list[dict]:
    """Summary rows with the paper's Table 3 figures of ``paper_cores`` (the size the
    testbed's cluster scales down), so the tables show them beside the testbed's."""
    out = []
    for r in summary:
        r = dict(r)
        if paper_cores is not None:
            p = paper_exp.PAPER_TABLE3.get((r["policy"], paper_cores))
            if p is not None:
                r["paper"] = {"load": paper_exp.PAPER_LOAD[paper_cores], "mean_wait_h": p[0],
                              "cpu_util": p[1] / 100.0, "mean_response_h": p[2]}
        out.append(r)
    return out


def tables(summary: Sequence[dict], cores: int, paper_cores: int | None, title: str) -> str:
    text = paper_report(with_paper_equivalent(summary, paper_cores))
    if paper_cores is not None:
        load = paper_exp.PAPER_LOAD.get(paper_cores, "?")
        text = text.replace(f"{cores} cores (not in the paper)",
                            f"{cores} cores (the paper's {paper_cores} cores scaled down, load {load})")
    return f"{title}\n{text}"


# -- plots ----------------------------------------------------------------------------------------

PLOTS = (("makespan_s", "makespan", "s"), ("mean_response_s", "mean response time", "s"),
         ("cpu_util", "CPU utilisation of held cores", "%"))


def write_plots(runs: Sequence[PaperRun], sim_runs: Sequence[PaperRun], out: Path,
                title: str) -> list[Path]:
    """One PNG per metric: per policy, the testbed's median (bars from the lowest to the
    highest repetition) beside the simulator's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    policies = list(dict.fromkeys(r.policy for r in runs))
    paths = []
    for key, label, unit in PLOTS:
        scale = 100.0 if unit == "%" else 1.0
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
        width = 0.38
        for i, (name, rs, color) in enumerate((("testbed (real Slurm)", runs, "#3a6ea5"),
                                               ("simulator", sim_runs, "#d08a2e"))):
            meds, lo, hi = [], [], []
            for p in policies:
                vals = [getattr(r, key) * scale for r in rs if r.policy == p]
                m = statistics.median(vals) if vals else math.nan
                meds.append(m)
                lo.append(m - min(vals) if vals else 0.0)
                hi.append(max(vals) - m if vals else 0.0)
            xs = [j + (i - 0.5) * width for j in range(len(policies))]
            ax.bar(xs, meds, width, label=name, color=color, yerr=[lo, hi], capsize=3)
            for x, m in zip(xs, meds):
                if not math.isnan(m):
                    ax.annotate(f"{m:.0f}", (x, m), ha="center", va="bottom", fontsize=8,
                                xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(range(len(policies)), policies)
        ax.set_ylabel(f"{label} ({unit})")
        ax.set_title(f"{label}: {title}", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = out / f"{key.replace('_s', '').replace('_', '-')}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    # A timeline per policy: its last testbed run, jobs on cores over time.
    from coscheduler.experiments.paper import instance_kinds
    from coscheduler.experiments.plots import plot_timeline

    last = {r.policy: r for r in runs}
    for policy, r in last.items():
        if any(s.end > s.start for s in r.stages):
            paths.append(plot_timeline(r, out / f"timeline-{policy}.png", instance_kinds()))
    return paths


__all__ = ["FLAG", "absolute_values", "colocated_slowdown", "compare", "compare_table", "load",
           "ratios", "run_from_json", "run_to_json", "stage_key", "tables", "with_paper_equivalent",
           "write_plots"]


# -- the whole report -----------------------------------------------------------------------------

def build(data: dict) -> dict:
    """Everything the report shows, as plain data: the testbed's runs and summary, the
    simulator's for the same setup, the ratios side by side."""
    from .compose import TestbedSpec
    from .experiment import get_workload, predict

    setup = data["setup"]
    runs = [run_from_json(r) for r in data["runs"]]
    # A stage's runtime "alone" is what the simulator's profile says there; on the testbed
    # it is what the same stage took under space sharing (start-up, Slurm's placement and
    # the machine's load included), so the slowdown compares like with like.
    alone = alone_runtimes(runs)
    for r in runs:
        if alone and r.policy != BASELINE:
            sl = run_slowdowns(r, alone)
            r.mean_slowdown, r.colocated = (statistics.fmean(sl) if sl else 0.0), len(sl)
            of_hosts, of_guests = (run_slowdowns(r, alone, role) for role in ("host", "guest"))
            r.host_slowdown = statistics.fmean(of_hosts) if of_hosts else None
            r.guest_slowdown = statistics.fmean(of_guests) if of_guests else None
    if not runs:
        raise ValueError("the run holds no finished policy run (interrupted before the first "
                         "ended?)")
    w = get_workload(setup["workload"])
    spec = TestbedSpec(instance="report", nodes=setup["nodes"], cpus=setup["cpus"],
                       cpu_limit=setup["cpu_limit"])
    policies = list(dict.fromkeys(r.policy for r in runs))
    repeats = max(r.repeat for r in runs) + 1
    sim_runs = predict(w, spec, setup["scale"], policies, repeats, setup.get("seed", 0))
    tb_sum, sim_sum = paper_exp.summarise(runs), paper_exp.summarise(sim_runs)
    tb_ratios = ratios(tb_sum, colocated_slowdown(runs))
    sim_ratios = ratios(sim_sum, colocated_slowdown(sim_runs))
    return {"setup": setup, "runs": runs, "sim_runs": sim_runs, "testbed": tb_sum,
            "simulator": sim_sum, "testbed_ratios": tb_ratios, "simulator_ratios": sim_ratios,
            "comparison": compare(tb_ratios, sim_ratios),
            "absolute": absolute_values(tb_sum, sim_sum),
            "load_average": data.get("load_average")}


def _guest_weight(value: str) -> str:
    return "in the idle class" if value == "idle" else f"at cpu.weight {value}"


def text(rep: dict) -> str:
    s = rep["setup"]
    cores = s["cores"]
    head = (f"{s['workload']} at scale {s['scale']:g} on {s['nodes']} node(s) x {s['cpus']} CPUs "
            f"({s['cpu_limit']:g} real CPU each), Debian {s['suite']}, "
            f"guests {_guest_weight(s.get('guest_weight', 'idle'))}")
    parts = [tables(rep["testbed"], cores, s.get("paper_cores"),
                    f"TESTBED (real Slurm in containers): {head}"),
             tables(rep["simulator"], cores, s.get("paper_cores"),
                    "SIMULATOR (cosched simulate paper, same workload, nodes and scale)"),
             compare_table(rep["comparison"], rep["absolute"])]
    la = rep.get("load_average") or {}
    if la.get("start") and la.get("end"):
        parts.append(f"host load average (1/5/15 min) at start {_la(la['start'])}, at end "
                     f"{_la(la['end'])}: the testbed shares this machine's CPUs")
    return "\n\n".join(parts)


def _la(v: Sequence[float]) -> str:
    return "/".join(f"{x:.1f}" for x in v)
