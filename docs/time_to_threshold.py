"""How soon each seed of a peer benchmark reached its threshold: the share of the seeds that had
reached it against the training seconds (left) and against the environment steps (right),
one line per library, from `benchmarks/peers.py`'s result files.

The Pendulum-v1 figure of the results page (docs/figures/pendulum_fast_vs_sac.png):

    results=benchmarks/results/peers_pendulum_2026-11-29
    python docs/time_to_threshold.py \\
        --line "DSAC, experiment=pendulum_fast (128 x 128)" ${results}_fast.json ours_dsac \\
        --line "SB3 SAC, the zoo's settings (256 x 256)" ${results}_fast.json sb3_sac \\
        --line "SB3 SAC at 128 x 128" ${results}_fast_vs_sac128.json sb3_sac \\
        --title "Pendulum-v1, 10 seeds each: when the greedy mean return reached -200" \\
        --out docs/figures/pendulum_fast_vs_sac.png

Each line: its label, a result file and the entry of its runs. A seed that did not reach the
threshold within the benchmark's caps never counts.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def reached(path: Path, entry: str) -> tuple[list[float], list[float], int]:
    """The training seconds and environment steps of the seeds of ``entry`` that reached the
    threshold, and how many seeds ran."""
    runs = [run for run in json.loads(path.read_text())["runs"] if run["entry"] == entry]
    if not runs:
        raise SystemExit(f"{path}: no runs of {entry!r}")
    done = [run for run in runs if run["reached"]]
    return [run["train_seconds"] for run in done], [run["env_steps"] for run in done], len(runs)


def share_curve(values: list[float], seeds: int) -> tuple[list[float], list[float]]:
    """A step curve: after each value (sorted), the share of the seeds reached by then."""
    xs, ys = [0.0], [0.0]
    for k, value in enumerate(sorted(values), start=1):
        xs += [value, value]
        ys += [(k - 1) / seeds, k / seeds]
    return xs, ys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--line", nargs=3, action="append", required=True,
                        metavar=("LABEL", "RESULTS", "ENTRY"), dest="lines")
    parser.add_argument("--title", default="")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    figure, (by_time, by_steps) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for label, path, entry in args.lines:
        seconds, steps, seeds = reached(Path(path), entry)
        # The median over every seed: one that never reached the threshold counts as later
        # than all; past half of them, there is no median.
        median = statistics.median(sorted(seconds) + [math.inf] * (seeds - len(seconds)))
        said = f"median {median:.0f} s" if math.isfinite(median) else "median not reached"
        drawn = by_time.plot(*share_curve(seconds, seeds), label=f"{label}: {said}")
        by_steps.plot(*share_curve(steps, seeds), color=drawn[0].get_color(), label=label)
    by_time.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    by_steps.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    by_time.set(xlabel="training seconds (one torch thread, 2-core CPU)",
                ylabel="share of the seeds that reached it", ylim=(0, 1.02), xlim=(0, None))
    by_steps.set(xlabel="environment steps", xlim=(0, None))
    figure.legend(*by_time.get_legend_handles_labels(), loc="lower center",
                  ncol=len(args.lines), fontsize=8, frameon=False)
    figure.suptitle(args.title)
    figure.tight_layout(rect=(0, 0.07, 1, 1))  # the legend below the two panels
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
