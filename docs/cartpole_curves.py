"""Each agent's CartPole learning curve for docs/guides/agents.md: the greedy policy's mean
return at each periodic evaluation against the environment steps, the mean of the seeds
with their range as a band.

Made from one run per agent of its CartPole preset, several seeds as members:

    for agent in dqn c51 qr_dqn iqn; do
        python train.py experiment=cartpole_fast_$agent alpha=1 seed=0 parallel_seeds=3 \\
            logger=none hydra.run.dir=outputs/cartpole_curves/$agent
    done
    python docs/cartpole_curves.py outputs/cartpole_curves

It writes docs/figures/cartpole_<agent>.png for every agent folder it finds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

SOLVED = 475.0  # CartPole-v1's threshold of a solved task


def seed_curves(run: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(environment steps, mean return) of each seed of a run folder."""
    folders = sorted(run.glob("seed_*")) or [run]
    curves = []
    for folder in folders:
        rows = [json.loads(line) for line in (folder / "eval_history.jsonl").read_text().splitlines()]
        curves.append((np.array([r["env_steps"] for r in rows]),
                       np.array([r["expectation"] for r in rows])))
    return curves


def draw(agent: str, curves: list[tuple[np.ndarray, np.ndarray]], out: Path) -> None:
    steps = curves[0][0]
    length = min(len(c[1]) for c in curves)
    returns = np.stack([c[1][:length] for c in curves])
    steps = steps[:length]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.fill_between(steps, returns.min(0), returns.max(0), alpha=0.25,
                    label=f"range of {len(curves)} seeds")
    ax.plot(steps, returns.mean(0), label="mean")
    ax.axhline(SOLVED, color="grey", linestyle="--", linewidth=1, label="475 (solved)")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("greedy policy's mean return")
    ax.set_ylim(0, 520)
    ax.set_title(f"{agent} on CartPole-v1 (experiment=cartpole_fast_{agent})", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the folder holding one run folder per agent")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "figures")
    args = parser.parse_args()
    for run in sorted(p for p in args.runs.iterdir() if p.is_dir()):
        out = args.out / f"cartpole_{run.name}.png"
        draw(run.name, seed_curves(run), out)
        print(f"-> {out}")


if __name__ == "__main__":
    main()
