"""Training curves and per-window comparisons as PNG (matplotlib, from the rl extra)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .. import outputs  # noqa: E402


def plot_curve(curve: list[dict], kind: str, path: Path, title: str = "") -> Path:
    """Mean metric of the training sequences per epoch (and the base policy's, for an
    inspector); filtered epochs shaded."""
    # A row per epoch, plus rows of another kind at epoch 0: a starting model's validation
    # (``init``, under --init) and, for RLScheduler, the warm start's teacher and imitation.
    learned = [(r["epoch"], r["mean_value"]) for r in curve
               if r.get("mean_value") is not None and "init" not in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if learned:
        ax.plot(*zip(*learned), label="learned", color="tab:blue")
    if kind == "inspector":
        base = [(r["epoch"], r["mean_base"]) for r in curve if r.get("mean_base") is not None]
        if base:
            ax.plot(*zip(*base), label="base policy", color="tab:orange")
    checked = [(r["epoch"], r["validation"]) for r in curve if r.get("validation") is not None]
    checked += [(r["epoch"], r["mean_value"]) for r in curve
                if "init" in r and r.get("mean_value") is not None]
    if checked:
        ax.plot(*zip(*checked), "o", color="tab:green", markersize=4,
                label="greedy, validation windows")
    filtered = [r["epoch"] for r in curve if r.get("filtered")]
    if filtered:
        ax.axvspan(min(filtered) - 0.5, max(filtered) + 0.5, color="0.9",
                   label="filtered sequences")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean bounded slowdown of the epoch's sequences"
                  if kind == "inspector" else "mean metric of the epoch's sequences")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    outputs.save_figure(fig, path)
    plt.close(fig)
    return path


def plot_windows(windows: list[int], per_policy: dict[str, list[float]], path: Path,
                 title: str = "") -> Path:
    """Grouped bars: one group per evaluation window, one bar per policy (learned models
    hatched), on a log scale (a window's bsld spans orders of magnitude across policies)."""
    names = list(per_policy)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(windows) + 2), 4), dpi=100)
    for k, name in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(windows))]
        ax.bar(xs, [max(v, 1.0) for v in per_policy[name]], width, label=name,
               hatch="//" if name.startswith("rl:") else None, edgecolor="0.2", linewidth=0.3)
    ax.set_xticks(range(len(windows)), [str(w) for w in windows], fontsize=7)
    ax.set_xlabel("window (first job's position in the trace)")
    ax.set_ylabel("bounded slowdown (log)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=min(len(names), 4))
    fig.tight_layout()
    path = Path(path)
    outputs.save_figure(fig, path)
    plt.close(fig)
    return path
