"""One testbed run inside the controller container: ``python -m testbed.runner ...``.

Submits the scaled paper mix (testbed/experiment.py) to the co-scheduling partition
through Slurm (``slurm_plugin.submit``: one job per stage, ``afterok`` chains, metadata in
``--comment``, the job wrapper's usage records on the shared volume), drives the jobs with
the coscheduler controller over the Slurm backend (``slurm_plugin.backend``; quotas
through the node agents) under one policy until every stage ended, and writes the paper's
metrics of the run (``coscheduler.experiments.paper``'s definitions) as JSON.

Progress goes to stderr as ``runner: ...`` lines. SIGINT/SIGTERM: the run's Slurm jobs are
cancelled, every quota is given back, a partial result is written (``interrupted``), and
the runner exits 130. A run that outlives ``--timeout`` is stopped the same way and its
unfinished stages reported failed ("timed out").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CONF = Path("/etc/cosched-testbed")
SLURM_CONF = Path("/etc/slurm/slurm.conf")
SHARED = Path("/shared")
PARTITION = "cosched"
AGENT_PROGRESS = "/var/lib/cosched-agent/progress"   # each node agent's progress folder


class Stop(Exception):
    """SIGINT/SIGTERM or the timeout: stop the run cleanly."""


# The signal handler only notes the request; the loop acts on it between controller passes
# (an exception raised inside a pass would be taken for a backend error and tolerated).
_requested: list[str] = []


def _stop(signum, _frame):
    _requested.append(signal.Signals(signum).name)


def say(msg: str) -> None:
    print(f"runner: {msg}", file=sys.stderr, flush=True)


@dataclass
class _Seen:
    """What the runner saw of the run, keyed by the stage's job id."""

    hosts: dict[str, str] = field(default_factory=dict)       # guest -> host
    start_quota: dict[str, float] = field(default_factory=dict)
    starts: list[tuple[float, str, str | None]] = field(default_factory=list)
    use_log: list[tuple[float, str, float]] = field(default_factory=list)
    quota_log: list[tuple[float, str, float]] = field(default_factory=list)
    round_times: list[float] = field(default_factory=list)
    revisions_seen: int = 0
    rounds_seen: int = -1


class _Measured:
    """What ``coscheduler.experiments.paper`` measures a run from (its backend's
    ``history``, ``starts``, ``start_quotas``, ``busy_core_seconds``), in stage job ids and
    seconds since the submission."""

    def __init__(self, history, starts, start_quotas, busy_core_seconds):
        self.history = history
        self.starts = starts
        self.start_quotas = start_quotas
        self.busy_core_seconds = busy_core_seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.runner")
    ap.add_argument("--policy", required=True)
    ap.add_argument("--workload", default="paper-small")
    ap.add_argument("--scale", type=float, required=True)
    ap.add_argument("--repeat-index", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pid-file", default=None)
    ap.add_argument("--learner-db", default=None)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--tick", type=float, default=None)
    a = ap.parse_args(argv)
    if a.pid_file:
        Path(a.pid_file).parent.mkdir(parents=True, exist_ok=True)
        Path(a.pid_file).write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        return run(a)
    finally:
        if a.pid_file:
            Path(a.pid_file).unlink(missing_ok=True)


def slurm_backend(cmds, cluster: dict, usage_dir: Path, state_file: Path):
    """The run's Slurm backend, from the testbed's ``cluster.json`` (``cluster``): quotas
    through its node agents, completed stages' use from the job wrapper's records in
    ``usage_dir``, in % of their emulated cores (``cpu_per_core`` real CPUs each), as the
    agents sample them."""
    from slurm_plugin.backend import SlurmBackend
    from slurm_plugin.connect import agent_clients
    from slurm_plugin.source import make_source

    return SlurmBackend(make_source(cmds), partition=PARTITION,
                        agents=agent_clients(cluster["nodes"]), usage_dir=str(usage_dir),
                        state_file=str(state_file), cpu_per_core=float(cluster["cpu_per_core"]))


def run(a) -> int:
    from coscheduler.controller import Controller, ControllerConfig
    from coscheduler.experiments import paper as paper_exp
    from coscheduler.model import Outcome
    from coscheduler.policies.coalloc import make_policy
    from coscheduler.recorder import MemoryRecorder
    from slurm_plugin.commands import SlurmCommands
    from slurm_plugin.submit import SubmitOptions, submit_jobs

    from .experiment import get_workload, stages as make_stages
    from .report import run_to_json

    cluster = json.loads((CONF / "cluster.json").read_text())
    cpu_per_core = float(cluster["cpu_per_core"])
    policy = paper_exp.canonical_policy(a.policy)
    w = get_workload(a.workload)
    stg = make_stages(w, a.scale, a.tag, cpu_per_core)
    out_dir = SHARED / "runs" / a.tag
    usage_dir = SHARED / "usage" / a.tag
    for d in (out_dir, usage_dir):
        d.mkdir(parents=True, exist_ok=True)
    cmds = SlurmCommands(str(SLURM_CONF))
    backend = slurm_backend(cmds, cluster, usage_dir, Path(a.out).with_suffix(".backend.json"))
    t0 = time.time()
    submitted = submit_jobs(cmds, [s.job for s in stg], SubmitOptions(
        partition=PARTITION, cosched=True, output_dir=str(out_dir), usage_dir=str(usage_dir),
        progress_dir=AGENT_PROGRESS))
    name_of = {str(s.slurm_job_id): s.name for s in submitted}
    position = {str(s.slurm_job_id): i for i, s in enumerate(submitted)}
    say(f"{policy}: submitted {len(submitted)} stage jobs (Slurm ids "
        f"{submitted[0].slurm_job_id}..{submitted[-1].slurm_job_id})")

    def order(jobs, now):
        return sorted(jobs, key=lambda j: (position.get(j.job_id, len(position)), j.job_id))

    config = ControllerConfig(decline_cooldown_s=paper_exp.DECLINE_COOLDOWN_S * a.scale)
    if policy == "asax":
        from coscheduler.store import SqliteStore

        recorder = SqliteStore(a.learner_db, create=True) if a.learner_db else MemoryRecorder()
        controller = asax_controller(backend, stg, recorder, a.seed + a.repeat_index, order, config)
    else:
        recorder = MemoryRecorder()
        controller = Controller(backend, make_policy(policy), recorder, order, config)

    tick = a.tick if a.tick is not None else max(0.5, paper_exp.TICK_S * a.scale)
    seen = _Seen()
    rounds_before = _rounds(controller)
    done: dict[str, Outcome] = {}
    interrupted = None
    last_say = 0.0
    try:
        while len(done) < len(submitted):
            if _requested:
                raise Stop(_requested[0])
            controller.step()
            # For the timeline picture: what the controller saw each job use, its quota
            # revisions, and when the learner closed a round (seconds since submission).
            tick_t = time.time() - t0
            for jid, smp in getattr(controller, "last_samples", {}).items():
                if jid in name_of:
                    seen.use_log.append((tick_t, name_of[jid], smp.cpu_percent / 100.0))
            made = controller.revisions_dropped + len(controller.revisions)   # (ever made)
            fresh = controller.revisions[max(0, seen.revisions_seen - controller.revisions_dropped):]
            for _, jid, _, q in fresh:
                if jid in name_of:
                    seen.quota_log.append((tick_t, name_of[jid], q))
            seen.revisions_seen = made
            if controller.learner is not None:
                n = _rounds(controller)
                if n > seen.rounds_seen >= 0:
                    seen.round_times.append(tick_t)
                seen.rounds_seen = n
            for o in backend.history:
                if o.job_id in name_of and o.job_id not in done:
                    done[o.job_id] = o
            for rj in backend.running():
                if rj.job_id in name_of and name_of[rj.job_id] not in {s for _, s, _ in seen.starts}:
                    host = name_of.get(rj.host_job) if rj.host_job else None
                    seen.starts.append((rj.start_time - t0, name_of[rj.job_id], host))
                    seen.start_quota[name_of[rj.job_id]] = rj.quota_fraction
                    if host:
                        seen.hosts[name_of[rj.job_id]] = host
            now = time.time()
            if now - last_say > 10:
                running = [r for r in backend.running() if r.job_id in name_of]
                guests = sum(1 for r in running if r.host_job)
                say(f"{policy}: t={now - t0:5.0f}s running {len(running)} ({guests} guests), "
                    f"done {len(done)}/{len(submitted)}")
                last_say = now
            if now - t0 > a.timeout:
                raise Stop(f"timed out after {a.timeout:g} s")
            pause_until = time.monotonic() + tick
            while not _requested and time.monotonic() < pause_until:
                time.sleep(0.1)
    except Stop as exc:
        interrupted = str(exc)
        say(f"{policy}: stopping ({interrupted}): cancelling the run's jobs, giving quotas back")
        left = [j for j in name_of if j not in done]
        for j in left:
            try:
                backend.source.cancel(int(j))
            except Exception as e:  # noqa: BLE001 - report it, go on with the others
                say(f"could not cancel Slurm job {j}: {e}")
        try:
            backend.restore_quotas()
        except Exception as e:  # noqa: BLE001 - the agents' leases lapse anyway
            say(f"could not give every quota back at once ({e}); the agents' leases lapse")
        for j in left:
            done[j] = Outcome(j, time.time(), time.time(), "cancelled" if "timed" not in
                              interrupted else "failed", interrupted)

    # Everything in stage ids and seconds since the submission.
    history = [Outcome(name_of[j], o.start_time - t0, o.end_time - t0, o.state, o.reason)
               for j, o in done.items()]
    cpu_s = 0.0
    for sid in name_of:
        # (this process submitted them: their records are its user's)
        rec = backend.usage(sid, os.getuid()) if hasattr(backend, "usage") else None
        if rec and rec.get("cpu_s") is not None:
            cpu_s += float(rec["cpu_s"])
    measured = _Measured(history, seen.starts, seen.start_quota, cpu_s / cpu_per_core)
    result = paper_exp.measure_run(stg, measured, len(cluster["nodes"]) * int(
        next(iter(cluster["nodes"].values()))["cpus"]), policy, a.repeat_index, a.seed, a.scale,
        "carried" if policy == "asax" else None)
    result.start_quotas = dict(seen.start_quota)
    result.quota_log, result.use_log = seen.quota_log, seen.use_log
    result.round_times = seen.round_times
    if controller.learner is not None:
        # as ``cosched simulate paper`` reports them: closed so far (the state database
        # carries them across repetitions), and closed in this run
        result.rounds_closed = _rounds(controller)
        result.rounds_in_run = result.rounds_closed - rounds_before
    data = run_to_json(result)
    data["slurm_ids"] = {name: int(sid) for sid, name in name_of.items()}
    data["reasons"] = {o.job_id: o.reason for o in history if o.state != "completed"}
    data["interrupted"] = interrupted
    data["cpu_seconds"] = round(cpu_s, 3)
    from coscheduler.outputs import write_text
    write_text(a.out, json.dumps(data, allow_nan=False) + "\n")   # whole or not at all
    say(f"{policy}: finished in {time.time() - t0:.0f} s")
    return 130 if interrupted and "timed" not in interrupted else 0


def asax_controller(backend, stg, recorder, seed: int, order, config):
    """ASA_X's controller as ``cosched simulate paper`` builds it: each stage class's runtime
    alone and usual use seeded first (``paper.seed_prior_runs``), so hosts' losses are
    degradations and close rounds; one class per workflow kind and stage; each host's end
    closes its class's round (ControllerConfig.round_per_host)."""
    from coscheduler.controller import Controller
    from coscheduler.controller.usage import ClassUsage
    from coscheduler.experiments import paper as paper_exp
    from coscheduler.learner import LearnerConfig
    from coscheduler.learner.classes import class_key

    usage = ClassUsage()
    paper_exp.seed_prior_runs(stg, recorder, usage)
    return Controller.from_recorder(
        backend, recorder, "asax", learner_config=LearnerConfig(seed=seed), queue_order=order,
        config=config, class_of=class_key(paper_exp.CLASSES["stage"]), usage=usage)


def _rounds(controller) -> int:
    """Learning rounds ASA_X's learner has closed, over all its job classes (0 without one)."""
    learner = controller.learner
    if learner is None:
        return 0
    return sum(learner.class_state(c).rounds for c in learner.known_classes())


if __name__ == "__main__":
    sys.exit(main())
