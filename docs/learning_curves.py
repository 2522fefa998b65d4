"""Learning curves of runs with several seeds: the greedy policy's mean return at each
periodic evaluation against the environment steps, the mean of the seeds with their range as
a band (one figure per run folder). ``docs/cartpole_curves.py`` draws CartPole's with it;
from the command line it draws any preset's:

    python train.py experiment=pendulum alpha=1 seed=0 parallel_seeds=5 \\
        logger=none hydra.run.dir=outputs/pendulum_curves/tqc
    python docs/learning_curves.py outputs/pendulum_curves --env Pendulum-v1 \\
        --preset experiment=pendulum --threshold -200 --ylim -1700 0 --name pendulum

It writes docs/figures/<name>_<run folder>.png for every run folder it finds.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def seed_curves(run: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(environment steps, mean return) of each seed of a run folder."""
    folders = sorted(run.glob("seed_*")) or [run]
    curves = []
    for folder in folders:
        rows = [json.loads(line) for line in (folder / "eval_history.jsonl").read_text().splitlines()]
        curves.append((np.array([r["env_steps"] for r in rows]),
                       np.array([r["expectation"] for r in rows])))
    return curves


def draw(curves: list[tuple[np.ndarray, np.ndarray]], out: Path, title: str,
         threshold: float, threshold_label: str, ylim: tuple[float, float]) -> None:
    """The seeds' mean and range against the environment steps, with a threshold line."""
    length = min(len(c[1]) for c in curves)
    steps = curves[0][0][:length]
    returns = np.stack([c[1][:length] for c in curves])
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.fill_between(steps, returns.min(0), returns.max(0), alpha=0.25,
                    label=f"range of {len(curves)} seeds")
    ax.plot(steps, returns.mean(0), label="mean")
    ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=threshold_label)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("greedy policy's mean return")
    ax.set_ylim(*ylim)
    ax.set_title(textwrap.fill(title, 60), fontsize=10)  # a long preset's name wraps
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def draw_runs(runs: Path, out: Path, name: str, title, threshold: float, threshold_label: str,
              ylim: tuple[float, float]) -> None:
    """One figure, ``<out>/<name>_<folder>.png``, for every run folder in ``runs``;
    ``title(folder name)`` is its title."""
    for run in sorted(p for p in runs.iterdir() if p.is_dir()):
        if not any(run.glob("eval_history.jsonl")) and not any(run.glob("seed_*/eval_history.jsonl")):
            print(f"skipped {run}: no eval_history.jsonl, not a run folder")
            continue
        figure = out / f"{name}_{run.name}.png"
        draw(seed_curves(run), figure, title(run.name), threshold, threshold_label, ylim)
        print(f"-> {figure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the folder holding one run folder per agent")
    parser.add_argument("--env", required=True, help="the environment's name, for the titles")
    parser.add_argument("--preset", required=True, help="the preset, for the titles")
    parser.add_argument("--threshold", type=float, required=True, help="a return to mark")
    parser.add_argument("--ylim", type=float, nargs=2, required=True)
    parser.add_argument("--name", required=True, help="the figures' file name prefix")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "figures")
    args = parser.parse_args()
    draw_runs(args.runs, args.out, args.name, lambda agent: f"{agent} on {args.env} ({args.preset})",
              args.threshold, f"{args.threshold:g}", tuple(args.ylim))


if __name__ == "__main__":
    main()
