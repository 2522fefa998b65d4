"""The figure of the evaluated episode returns: one panel per setting, one outline per seed.

Every ``eval.json`` carries ``return_histogram`` (:func:`rs_lightning.evaluation.return_histogram`),
the Monte Carlo evaluation's episode returns binned; :func:`plot_return_histograms` draws the
histograms of a sweep's jobs, any environment (the report's ``return_histograms.png``), with
E (solid) and VaR (dashed) of each seed marked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rs_lightning.plots import COLORS, _pyplot, _save


def setting_of(row: dict[str, Any]) -> tuple:
    return (row["env"], row["agent"], row["alpha"], row["risk"], row["rho"])


def histogram_density(histogram: dict[str, list]) -> tuple[np.ndarray, np.ndarray]:
    """(edges, share of episodes per unit of return) of a stored histogram."""
    edges = np.asarray(histogram["edges"], dtype=float)
    counts = np.asarray(histogram["counts"], dtype=float)
    return edges, counts / max(counts.sum(), 1.0) / np.diff(edges)


def plot_return_histograms(rows: list[dict[str, Any]], out: Path, columns: int = 3) -> int:
    """Draw the return histogram of every row that has one into ``out``; returns the number
    of panels (0: nothing drawn, no file written)."""

    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        if "return_histogram" in row:
            groups.setdefault(setting_of(row), []).append(row)
    if not groups:
        return 0
    plt = _pyplot()
    n = len(groups)
    columns = min(columns, n)
    lines = -(-n // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.6 * columns, 3.0 * lines), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, ((env, agent, alpha, risk, rho), runs) in zip(axes.flat, sorted(groups.items())):
        for i, row in enumerate(sorted(runs, key=lambda r: r.get("seed", 0))):
            color = COLORS[i % len(COLORS)]
            edges, density = histogram_density(row["return_histogram"])
            ax.stairs(density, edges, color=color, label=f"seed {row.get('seed')}")
            ax.axvline(row["expectation"], color=color, lw=1)
            ax.axvline(row["var"], color=color, lw=1, ls="--")
        ax.set_title(f"{env.split('/')[-1]} {agent}\nalpha {alpha:g}, {risk} {rho:g}", fontsize=9)
        ax.set_xlabel("episode return S")
        ax.set_ylabel("density")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Returns of the greedy policy (Monte Carlo evaluation): E solid, VaR dashed")
    _save(fig, out)
    return n
