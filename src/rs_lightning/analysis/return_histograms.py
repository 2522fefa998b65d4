"""The figure of the evaluated episode returns: one panel per setting, one outline per seed.

Every ``eval.json`` carries ``return_histogram`` (:func:`rs_lightning.analysis.evaluation.return_histogram`),
the Monte Carlo evaluation's episode returns binned; :func:`plot_return_histograms` draws the
histograms of a sweep's jobs, any environment (the report's ``return_histograms.png``), with
E (solid) and VaR (dashed) of each seed marked.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from rs_lightning.analysis import plots
from rs_lightning.analysis.plots import COLORS, _pyplot
from rs_lightning.analysis.results import group_by_setting, labelled_groups, settings_of

TITLE = "Returns of the greedy policy (Monte Carlo evaluation): E solid, VaR dashed"


def histogram_density(histogram: dict[str, list]) -> tuple[np.ndarray, np.ndarray]:
    """(edges, share of episodes per unit of return) of a stored histogram."""
    edges = np.asarray(histogram["edges"], dtype=float)
    counts = np.asarray(histogram["counts"], dtype=float)
    return edges, counts / max(counts.sum(), 1.0) / np.diff(edges)


def plot_return_histograms(rows: list[dict[str, Any]], out: Path, columns: int = 3) -> int:
    """Draw the return histogram of every row that has one into ``out``; returns the number
    of panels (0: nothing drawn, no file written)."""

    # The settings of the results table; a duplicate run (listed there) is left out here.
    groups = group_by_setting([row for row in rows if "return_histogram" in row], settings_of,
                              lambda row: row.get("seed"))
    if not groups:
        return 0
    panels = [(f"{env.split('/')[-1]}: {label}", group.runs) for env, label, group in labelled_groups(groups)]
    plt = _pyplot()
    n = len(panels)
    columns = min(columns, n)
    lines = -(-n // columns)
    width = 4.6 * columns
    fig, axes = plt.subplots(lines, columns, figsize=(width, 3.0 * lines + 0.4), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, (label, runs) in zip(axes.flat, panels):
        for i, row in enumerate(sorted(runs, key=lambda r: r.get("seed", 0))):
            color = COLORS[i % len(COLORS)]
            edges, density = histogram_density(row["return_histogram"])
            ax.stairs(density, edges, color=color, label=f"seed {row.get('seed')}")
            ax.axvline(row["expectation"], color=color, lw=1)
            ax.axvline(row["var"], color=color, lw=1, ls="--")
        ax.set_title(textwrap.fill(label, 45), fontsize=9)
        ax.set_xlabel("episode return S")
        ax.set_ylabel("density")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    # About 9 characters of a 12-point title per inch: wrap it to the figure's width.
    fig.suptitle(textwrap.fill(TITLE, int(9 * width)))
    plots._save(fig, out)  # looked up at call time: tests replace it
    return n
