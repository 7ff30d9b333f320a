"""Latency-over-time figures: one panel per segment, latency from the trade on a log scale, per second."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def segment_panels(segments: list[dict], path: Path, draw: Callable, title: Callable[[int, dict], str],
                   ylabel: str) -> bool:
    """One panel per segment (`draw(ax, segment)` plots its lines), saved to `path`. False if nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not segments:
        return False
    fig, axes = plt.subplots(1, len(segments), figsize=(4 * len(segments), 3.2), sharey=True, squeeze=False)
    for i, (ax, s) in enumerate(zip(axes[0], segments)):
        draw(ax, s)
        ax.set_yscale("log")
        ax.set_title(title(i, s))
        ax.set_xlabel("second of the segment")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
