"""Two policies compared window by window on the same windows (pure, numpy).

Mean bounded slowdown over 1,024-job windows is heavy-tailed: a few windows carry most of
a mean, so a ratio of two means over ten windows can move by tens of percent with the
windows drawn. These figures say how far: the share of windows one policy wins and a
bootstrap interval of the ratio of means (windows resampled with replacement, a window's
two figures kept together).
"""

from __future__ import annotations

import math

import numpy as np

BOOTSTRAP_RESAMPLES = 2000


def ratio_interval(model: list[float], best: list[float], resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = 0) -> tuple[float, float]:
    """5th and 95th percentiles of mean(model) / mean(best) over resampled windows; a
    fixed seed, so the same figures give the same interval. A resample whose ``best``
    mean is 0 has no ratio (a light trace's mean wait can be 0); (nan, nan) when none has."""
    m, b = np.asarray(model, dtype=float), np.asarray(best, dtype=float)
    if len(m) != len(b) or len(m) == 0:
        raise ValueError("ratio_interval needs two equally long, non-empty lists")
    idx = np.random.default_rng(seed).integers(0, len(m), (resamples, len(m)))
    num, den = m[idx].mean(axis=1), b[idx].mean(axis=1)
    ratios = num[den > 0] / den[den > 0]
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return math.nan, math.nan
    lo, hi = np.percentile(ratios, [5.0, 95.0])
    return float(lo), float(hi)


def relative(figure: float, best: float) -> float | None:
    """figure / best - 1; 0.0 when both are 0, None when only ``best`` is (no ratio)."""
    if best == 0:
        return 0.0 if figure == 0 else None
    return figure / best - 1.0


def windows_won(model: list[float], best: list[float], higher: bool = False) -> float:
    """The share of windows where ``model`` is at or below ``best`` (at or above if
    ``higher``)."""
    if len(model) != len(best) or not model:
        raise ValueError("windows_won needs two equally long, non-empty lists")
    return sum((m >= b) if higher else (m <= b) for m, b in zip(model, best)) / len(model)


__all__ = ["BOOTSTRAP_RESAMPLES", "ratio_interval", "relative", "windows_won"]
