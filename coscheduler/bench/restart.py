"""``cosched bench restart``: a controller's restart on a state database of N decisions.

A state database grows with every decision (about 2 KB each); a site restarts its
controller after months of them. The bench writes N decisions with their outcomes (four
classes, the default learner with its fitted expert) into a fresh database in a temporary
folder, then times ``Controller.from_recorder`` on it in a fresh process, as a restart is,
and reports its wall time, CPU time and peak memory. ``--whole`` also restarts reading
every outcome from the database, as with a recorder that cannot load in part, side by
side (the experts are then still recalled from the last outcomes only).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

CLASSES = ("montage/mProject", "blast/blastall", "stats/summary", "synthetic/burn")


def write_database(path: Path, decisions: int, seed: int = 0) -> None:
    """``decisions`` decided, recorded and observed decisions, 2,000 per transaction."""
    from ..learner import AsaxLearner, HostState, LearnerConfig
    from ..recorder import OutcomeRecord
    from ..store.sqlite import SqliteStore

    store = SqliteStore(path, create=True)
    learner = AsaxLearner(LearnerConfig(seed=1))
    rng = random.Random(seed)
    done = 0
    try:
        while done < decisions:
            with store.batch():
                for _ in range(min(2000, decisions - done)):
                    job_class = CLASSES[done % len(CLASSES)]
                    state = HostState(job_class=job_class, cpu_percent=rng.uniform(1, 100),
                                      mem_percent=rng.uniform(1, 90), stage_type="parallel",
                                      elapsed_fraction=rng.random(),
                                      happiness=rng.uniform(0.5, 1.5))
                    d = learner.decide(state, f"h{done}", f"g{done}", float(done),
                                       job_class=job_class)
                    store.record_decision(d, 0.9, d.action_fraction)
                    loss = 0.0 if d.action_index == 0 else rng.random() * 0.3
                    learner.observe(d.decision_id, loss, float(done))
                    store.record_outcome(OutcomeRecord(
                        d.decision_id, float(done), loss,
                        "declined" if d.action_index == 0 else "degradation"))
                    done += 1
            for st in learner.snapshot():
                store.save_class(st)
    finally:
        store.close()


def _restart(path: str, decisions: int, whole: bool) -> dict:
    """One restart in this (fresh) process: wall, CPU and peak memory."""
    import resource

    from ..backends.virtual import VirtualBackend
    from ..controller import Controller
    from ..learner import LearnerConfig
    from ..store.sqlite import SqliteStore

    class Whole(SqliteStore):
        def load(self):   # (takes neither keyword: the controller reads everything)
            return super().load()

    store = (Whole if whole else SqliteStore)(path)
    backend = VirtualBackend({"n0": 16}, start_time=decisions + 600.0)
    t0, c0 = time.perf_counter(), time.process_time()
    Controller.from_recorder(backend, store, "asax", LearnerConfig(seed=1))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    store.close()
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def measure(decisions: int, repeat: int, whole: bool) -> dict:
    out: dict = {"decisions": decisions, "repeat": repeat}
    with tempfile.TemporaryDirectory(prefix="cosched-bench-restart-") as tmp:
        db = Path(tmp) / "state.db"
        t0 = time.perf_counter()
        write_database(db, decisions)
        out["write_s"] = round(time.perf_counter() - t0, 2)
        out["database_mb"] = round(db.stat().st_size / 1e6, 1)
        modes = ("partial", "whole") if whole else ("partial",)
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for _ in range(repeat):
            for mode in modes:   # alternating, side by side
                code = ("import json, sys; from coscheduler.bench.restart import _restart; "
                        f"print(json.dumps(_restart({str(db)!r}, {decisions}, {mode == 'whole'})))")
                res = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True)
                runs[mode].append(json.loads(res.stdout.strip().splitlines()[-1]))
        for mode, rs in runs.items():
            out[mode] = {k: sorted(r[k] for r in rs)[len(rs) // 2] for k in rs[0]}
    return out


@click.command("restart")
@click.option("--decisions", type=click.IntRange(min=1, max=10_000_000), default=20_000,
              show_default=True, help="Decisions in the state database.")
@click.option("--repeat", type=click.IntRange(min=1, max=50), default=3, show_default=True,
              help="Restarts (medians).")
@click.option("--whole", is_flag=True,
              help="Also restart reading every outcome from the database, side by side.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def restart(decisions: int, repeat: int, whole: bool, as_json: bool) -> None:
    """A controller restart on a state database of DECISIONS decisions.

    JSON: {"decisions", "repeat", "write_s", "database_mb", "partial": {"wall_s", "cpu_s",
    "max_rss_mb"}, "whole": {...} with --whole}: medians over --repeat fresh processes.
    """
    res = measure(decisions, repeat, whole)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(f"restart on {decisions} decisions ({res['database_mb']} MB, written in "
               f"{res['write_s']} s), median of {repeat} fresh processes")
    for mode in ("partial", "whole"):
        if mode in res:
            r = res[mode]
            click.echo(f"  {mode:<8} {r['wall_s']:7.2f} s wall  {r['cpu_s']:7.2f} s CPU  "
                       f"{r['max_rss_mb']:7.1f} MB peak")
