"""An inspector's rejection budget, chosen on a trace's training part.

SchedInspector lets a pick be rejected at most ``max_rejections`` times (its reference: 10);
after that the pick is accepted without asking. The budget is the hand-written inspector's
one real setting (``policies.selection.RejectBlocked``) and a setting of a trained one (the
model's normalisation): a small budget keeps the base policy's order nearly intact; a large
one lets the rule start the first job in the base order that fits now, as backfilling
without a reservation does, at the price of the wide jobs it passes over.

``budget_table`` measures the rule at each budget on windows of the training part (the
validation figure: what a site may look at to choose) and, for the report only, on the
held-out windows that ``cosched simulate learned`` uses. ``choose_budget`` takes the budget
with the lowest validation bsld, preferring the smaller of budgets within ``TIE`` of it
(a larger budget changes more for the same figure). Pure apart from reading the trace.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..model import InvalidInput
from ..policies.queue import get_policy
from ..policies.selection import RejectBlocked
from ..sim.swf import SwfTrace
from .evaluate import window_metrics
from .windows import EVAL_JOBS, heldout_starts, train_limit

DEFAULT_BUDGETS = (10, 20, 50, 100, 200, 1000)
VALIDATION_WINDOWS = 24
TIE = 0.001   # budgets whose validation bsld is within 0.1 % of the best count as equal


@dataclass(frozen=True)
class WindowFigures:
    """Means over windows of one policy: bounded slowdown, wait (s), and the worst job's
    bounded slowdown (what a large budget costs the jobs it passes over)."""

    bsld: float
    wait_s: float
    max_bsld: float
    per_window_bsld: tuple[float, ...]


def _figures(trace: SwfTrace, policy, backfill: str, starts: list[int]) -> WindowFigures:
    ms = window_metrics(trace, policy, backfill, starts)
    return WindowFigures(statistics.fmean(m.avg_bsld for m in ms),
                         statistics.fmean(m.avg_wait for m in ms),
                         statistics.fmean(m.max_bsld for m in ms),
                         tuple(m.avg_bsld for m in ms))


def validation_starts(total_jobs: int, count: int = VALIDATION_WINDOWS) -> list[int]:
    """``count`` windows of EVAL_JOBS spread evenly over the training part (first 20 %)."""
    last = train_limit(total_jobs) - EVAL_JOBS
    if last < 0:
        raise InvalidInput(f"a trace of {total_jobs} jobs has no {EVAL_JOBS}-job window in "
                           "its training part")
    return sorted({int(x) for x in np.linspace(0, last, count)})


def check_budgets(budgets) -> tuple[int, ...]:
    out = []
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b <= 100_000:
            raise InvalidInput(f"a rejection budget must be an integer from 0 to 100000, got {b!r}")
        out.append(b)
    if not out:
        raise InvalidInput("no rejection budget to measure")
    return tuple(sorted(set(out)))


def budget_table(trace: SwfTrace, base: str, budgets=DEFAULT_BUDGETS, backfill: str = "none",
                 windows: int = VALIDATION_WINDOWS) -> dict:
    """The rule over ``base`` at each budget, validation and held-out, and the choice."""
    budgets = check_budgets(budgets)
    policy = get_policy(base)
    val, held = validation_starts(len(trace.jobs), windows), heldout_starts(len(trace.jobs))
    base_val = _figures(trace, policy, backfill, val)
    base_held = _figures(trace, policy, backfill, held)
    rows = []
    for b in budgets:
        rule = RejectBlocked(policy, max_rejections=b)
        v = _figures(trace, rule, backfill, val)
        h = _figures(trace, rule, backfill, held)
        rows.append({"budget": b, "validation": asdict(v), "heldout": asdict(h),
                     "validation_improvement": 1.0 - v.bsld / base_val.bsld,
                     "heldout_improvement": 1.0 - h.bsld / base_held.bsld,
                     "validation_windows_worse": sum(
                         x > 1.02 * y for x, y in zip(v.per_window_bsld, base_val.per_window_bsld)),
                     "heldout_windows_worse": sum(
                         x > 1.02 * y for x, y in zip(h.per_window_bsld, base_held.per_window_bsld))})
    chosen = choose_budget({r["budget"]: r["validation"]["bsld"] for r in rows})
    return {"trace": Path(trace.path).name, "base": policy.name, "backfill": backfill,
            "validation_windows": val, "heldout_windows": held,
            "base_validation": asdict(base_val), "base_heldout": asdict(base_held),
            "budgets": rows, "chosen": chosen}


def choose_budget(validation_bsld: dict[int, float]) -> int:
    """The smallest budget whose validation bsld is within TIE of the lowest."""
    if not validation_bsld:
        raise InvalidInput("no rejection budget to choose from")
    best = min(validation_bsld.values())
    return min(b for b, v in validation_bsld.items() if v <= best * (1.0 + TIE))


__all__ = ["DEFAULT_BUDGETS", "VALIDATION_WINDOWS", "WindowFigures", "budget_table",
           "check_budgets", "choose_budget", "validation_starts"]
