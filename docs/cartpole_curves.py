"""Each agent's CartPole learning curve for its page under docs/algorithms/: the greedy
policy's mean return at each periodic evaluation against the environment steps, the mean of the seeds
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
from pathlib import Path

from learning_curves import draw_runs

SOLVED = 475.0  # CartPole-v1's threshold of a solved task

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the folder holding one run folder per agent")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "figures")
    args = parser.parse_args()
    draw_runs(args.runs, args.out, "cartpole",
              lambda agent: f"{agent} on CartPole-v1 (experiment=cartpole_fast_{agent})",
              SOLVED, "475 (solved)", (0, 520))
