"""Happiness Hp(t) and the loss of a host job, as DESIGN.md states them.

The paper prints Hp = |t_wall - t| * remaining / rate, which is not dimensionless; its text
means remaining time over the time still needed, which is what we compute:

    Hp(t) = (t_walltime - t) * rate / remaining_tasks        (rate in tasks/s)

Hp >= 1: the job is likely to finish within its walltime; Hp < 1: likely to overrun.
"""

from __future__ import annotations

import math

from .model import InvalidInput, check_finite

# Hp of a job with no work left is infinite; JSON has no infinity, so every output (the
# agent's job view and /metrics, the learner's stored host states, --json) carries this.
HAPPINESS_DONE = 1e9

# Loss saturates at a 50 % slowdown (paper section 4.4: 1.0 = degraded by at least 50 %).
DEGRADATION_AT_FULL_LOSS = 0.5


def _positive(value: float, name: str) -> float:
    v = check_finite(value, name)
    if v is None or v <= 0:
        raise InvalidInput(f"{name} must be > 0, got {value!r}")
    return v


def happiness(elapsed_s: float, walltime_s: float, tasks_done: int, tasks_total: int,
              tasks_per_s: float | None) -> float | None:
    """Hp at ``elapsed_s`` seconds into a job with walltime ``walltime_s``.

    Returns None when it cannot be known yet (no progress rate, or no total). A job with
    no tasks left is done: infinitely happy. A job with time left but a zero rate, or past
    its walltime with work left, has Hp = 0.
    """
    check_finite(elapsed_s, "elapsed_s", minimum=0.0)
    wt = _positive(walltime_s, "walltime_s")
    if tasks_total is None or tasks_per_s is None:
        return None
    check_finite(tasks_per_s, "tasks_per_s", minimum=0.0)
    if tasks_done < 0 or tasks_total < 0:
        raise InvalidInput(f"task counts must be >= 0, got done={tasks_done!r} total={tasks_total!r}")
    remaining = tasks_total - tasks_done
    if remaining <= 0:
        return math.inf
    time_left = max(0.0, wt - elapsed_s)
    return time_left * tasks_per_s / remaining


# Hp against the runtime alone: a job is "in time" while it runs no more than this much
# slower than alone (so a host running as fast as alone has Hp >= 1.1, the experts' slack bin).
HAPPY_SLOWDOWN = 0.1


def happiness_vs_alone(elapsed_s: float, walltime_s: float, alone_runtime_s: float,
                       tasks_done: int, tasks_total: int, tasks_per_s: float | None,
                       tolerance: float = HAPPY_SLOWDOWN) -> float | None:
    """Hp from the job's speed relative to alone: the paper's form with the time budget
    taken from its runtime alone instead of the (generous) walltime request,

        Hp(t) = (min(walltime, (1 + tolerance) x T_alone) - t) x rate / remaining_tasks.

    A job running as fast as alone from its start has Hp = 1 + tolerance at t = 0 and
    more later; one that runs ``tolerance`` slower than alone sits near 1; slower, below.
    (The walltime form is inert where walltimes are 1.75x the runtime: Hp >= 1.1 almost
    always.) None when it cannot be known yet."""
    ta = _positive(alone_runtime_s, "alone_runtime_s")
    tol = check_finite(tolerance, "happiness tolerance", minimum=0.0)
    wt = _positive(walltime_s, "walltime_s")
    return happiness(elapsed_s, min(wt, (1.0 + tol) * ta), tasks_done, tasks_total, tasks_per_s)


def walltime_loss(runtime_s: float, walltime_s: float) -> float:
    """0 when the job finished within its walltime, else min(1, overrun / walltime)."""
    rt = check_finite(runtime_s, "runtime_s", minimum=0.0)
    wt = _positive(walltime_s, "walltime_s")
    assert rt is not None
    return min(1.0, max(0.0, rt - wt) / wt)


def degradation(shared_runtime_s: float, alone_runtime_s: float) -> float:
    """d = (T_shared - T_alone) / T_alone; negative when the shared run was faster."""
    ts = check_finite(shared_runtime_s, "shared_runtime_s", minimum=0.0)
    ta = _positive(alone_runtime_s, "alone_runtime_s")
    assert ts is not None
    return (ts - ta) / ta


def degradation_loss(shared_runtime_s: float, alone_runtime_s: float) -> float:
    """min(1, d / 0.5), floored at 0: 1.0 means at least 50 % slower than alone."""
    d = degradation(shared_runtime_s, alone_runtime_s)
    return min(1.0, max(0.0, d / DEGRADATION_AT_FULL_LOSS))


def host_loss(runtime_s: float, walltime_s: float, alone_runtime_s: float | None = None) -> float:
    """The loss of a host job: degradation-based when its class's exclusive runtime is
    known, walltime-based otherwise. Always in [0, 1]."""
    if alone_runtime_s is not None and alone_runtime_s > 0:
        return degradation_loss(runtime_s, alone_runtime_s)
    return walltime_loss(runtime_s, walltime_s)


def projected_overrun_loss(elapsed_s: float, walltime_s: float, tasks_done: int,
                           tasks_total: int, tasks_per_s: float) -> float | None:
    """An early loss for a host whose Hp shows it cannot finish in time.

    Projects the end from the current rate: runtime = elapsed + remaining / rate, and
    returns the walltime loss of that projection; None when the rate is unknown or zero
    (cannot project) or the projection finishes in time (no early verdict).
    """
    if tasks_per_s is None or tasks_per_s <= 0 or tasks_total is None:
        return None
    remaining = max(0, tasks_total - tasks_done)
    projected = elapsed_s + remaining / tasks_per_s
    loss = walltime_loss(projected, walltime_s)
    return loss if loss > 0 else None
