"""Training curves as PNG (matplotlib, from the rl extra)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_curve(curve: list[dict], kind: str, path: Path, title: str = "") -> Path:
    """Mean metric of the training sequences per epoch (and the base policy's, for an
    inspector); filtered epochs shaded."""
    epochs = [r["epoch"] for r in curve]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    ax.plot(epochs, [r["mean_value"] for r in curve], label="learned", color="tab:blue")
    if kind == "inspector":
        ax.plot(epochs, [r["mean_base"] for r in curve], label="base policy", color="tab:orange")
    checked = [(r["epoch"], r["validation"]) for r in curve if r.get("validation") is not None]
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
    fig.savefig(path)
    plt.close(fig)
    return path
