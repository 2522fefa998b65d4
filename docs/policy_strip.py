"""An image strip of a trained agent's greedy policy: frames of one episode on the run's own
environment (gymnasium's ``rgb_array`` rendering), every ``--every`` steps, with the step and
the return so far under each frame and the episode's return in the title:

    python train.py experiment=pendulum alpha=1 seed=0 logger=none \\
        hydra.run.dir=outputs/pendulum_strip
    python docs/policy_strip.py outputs/pendulum_strip --every 10 --frames 8 \\
        --out docs/figures/pendulum_strip.png

A run of several seeds keeps each in ``seed_<s>/``: pass that folder. ``--alpha`` (and
``--rho``) act at another setting (a risk-conditioned agent at any it trained on).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


def play(agent, seed: int, every: int, frames: int) -> tuple[list[tuple[int, float, np.ndarray]], float]:
    """One greedy episode: (step, return so far, frame) every ``every`` steps, the first
    ``frames`` of them, and the episode's return (played to its end)."""
    from rs_lightning.envs.factory import make_env

    env_config = agent.config.train.env
    probe = make_env(env_config)
    modes = probe.unwrapped.metadata.get("render_modes", [])
    probe.close()
    if "rgb_array" not in modes:
        raise ValueError(f"{env_config.id} draws no rgb_array frames (its render modes: "
                         f"{', '.join(modes) or 'none'}): no image strip of it")
    env_config = dataclasses.replace(env_config, kwargs={**(env_config.kwargs or {}),
                                                         "render_mode": "rgb_array"})
    env = make_env(env_config)  # the training's wrappers: its observations and action box
    try:
        observation, _ = env.reset(seed=seed)
        shots, total, step, done = [], 0.0, 0, False
        while not done:
            if step % every == 0 and len(shots) < frames:
                shots.append((step, total, np.asarray(env.render())))
            action = agent.act(observation[None])[0]
            observation, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            step += 1
            done = terminated or truncated
        if len(shots) < frames:  # the last frame of a short episode
            shots.append((step, total, np.asarray(env.render())))
        return shots, total
    finally:
        env.close()


def setting_label(utility) -> str:
    """"alpha 1", or alpha, the measure and its parameters (a spectral measure's levels and
    weights are tuples: their values joined by "/")."""
    if utility.alpha == 1:
        return "alpha 1"
    params = " ".join(f"{key} {'/'.join(f'{x:g}' for x in np.atleast_1d(value))}"
                      for key, value in utility.params.items())
    return f"alpha {utility.alpha:g}, {utility.risk} {params}".strip()


def draw(shots: list[tuple[int, float, np.ndarray]], total: float, title: str, out: Path) -> None:
    fig, axes = plt.subplots(1, len(shots), figsize=(1.6 * len(shots), 2.4),
                             layout="constrained")
    for ax, (step, so_far, frame) in zip(np.atleast_1d(axes), shots):
        ax.imshow(frame)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"t = {step}\nreturn {so_far:.0f}", fontsize=8)
    fig.suptitle(f"{title}: return {total:.1f}", fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder of one seed")
    parser.add_argument("--every", type=int, default=10, help="steps between frames")
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="the episode's reset seed")
    parser.add_argument("--alpha", type=float, help="act at this alpha (default: the run's)")
    parser.add_argument("--rho", type=float, help="and at this risk level")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)
    if args.every <= 0 or args.frames <= 0:
        parser.error("--every and --frames must be positive")

    from rs_lightning import load_agent

    agent = load_agent(args.run)
    if args.alpha is not None or args.rho is not None:
        agent = agent.at(args.alpha, **({} if args.rho is None else {"rho": args.rho}))
    env_id = agent.config.train.env.id
    try:
        shots, total = play(agent, args.seed, args.every, args.frames)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    agent_name = agent.config.train.agent["name"]
    utility = agent.utility
    draw(shots, total, f"{agent_name} on {env_id}, greedy ({setting_label(utility)})", args.out)
    print(f"{args.out}: {len(shots)} frames, return {total:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
