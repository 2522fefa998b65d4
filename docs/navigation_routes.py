"""The greedy paths of trained agents on the risky navigation world, one panel per run, each
seed a line from the start, over the world's region, fences, gates and goal:

    python docs/navigation_routes.py \\
        "DSAC, pessimistic actor (50 quantiles)=outputs/navigation/dsac_cvar_q50" \\
        "DSAC, mixture actor=outputs/navigation/actor_law/mixture_seeds0" \\
        --out docs/figures/navigation_routes_dsac.png

Each panel is ``TITLE=RUN`` (a run of several seeds: its ``seed_<s>/`` folders). A path is
played in the run's own evaluation environment (from the origin); its observations are
positions, so a strike changes the return, not the path.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

MAX_STEPS = 100  # the world's episode limit


def greedy_path(agent) -> tuple[np.ndarray, bool]:
    """The positions of one greedy episode from the start ``[n + 1, 2]`` and whether it
    ended on the goal."""
    from rs_lightning.envs.factory import make_env

    env = make_env(agent.config.train.env)
    try:
        observation, _ = env.reset(seed=0)
        # The world's own float64 positions: the float32 observations round a position a
        # hair outside a fence onto it.
        points, terminated, truncated = [env.unwrapped.position.copy()], False, False
        while not (terminated or truncated) and len(points) <= MAX_STEPS:
            observation, _, terminated, truncated, _ = env.step(agent.act(observation[None])[0])
            points.append(env.unwrapped.position.copy())
        return np.asarray(points, dtype=np.float64), bool(terminated)
    finally:
        env.close()


def draw_world(ax, kwargs: dict) -> None:
    """The region (shaded), its fences with their gates, the goal square and the start."""
    from matplotlib.patches import Rectangle

    from rs_lightning.envs.risky_navigation import (
        GOAL,
        GOAL_HALF_WIDTH,
        REGION_HALF_HEIGHT,
        REGION_X,
    )

    south = kwargs.get("south_edge", -REGION_HALF_HEIGHT)
    north, (west, east) = REGION_HALF_HEIGHT, REGION_X
    ax.add_patch(Rectangle((west, south), east - west, north - south, color="#f4c7c3",
                           zorder=0, label="risky region"))
    gate = kwargs.get("gate")
    if gate is not None:
        fence = {"color": "#555555", "lw": 2.0, "zorder": 1}
        ax.plot([west, east], [north, north], **fence)
        ax.plot([west, east], [south, south], **fence)
        for x in (west, east):
            ax.plot([x, x], [gate, north], **fence)
            ax.plot([x, x], [south, -gate], **fence)
    ax.add_patch(Rectangle((GOAL[0] - GOAL_HALF_WIDTH, GOAL[1] - GOAL_HALF_WIDTH),
                           2 * GOAL_HALF_WIDTH, 2 * GOAL_HALF_WIDTH, color="#93c47d",
                           zorder=0, label="goal"))
    ax.plot(0.0, 0.0, "ko", ms=4, zorder=3)


def panel(ax, title: str, run: Path) -> list[str]:
    """One run's seeds on one axis; returns a line per seed."""
    import rs_lightning
    from rs_lightning.envs.risky_navigation import REGION_HALF_HEIGHT, in_region

    seeds = sorted(run.glob("seed_*")) or [run]
    lines, kwargs = [], None
    for index, folder in enumerate(seeds):
        agent = rs_lightning.load_agent(folder)
        kwargs = dict(agent.config.train.env.kwargs or {})
        path, reached = greedy_path(agent)
        south = kwargs.get("south_edge", -REGION_HALF_HEIGHT)  # the world's default
        crossed = any(in_region(x, y, south) for x, y in path)
        route = "crosses" if crossed else ("around" if reached else "stalls")
        name = folder.name.replace("_", " ")
        ax.plot(path[:, 0], path[:, 1], "-", lw=1.4, color=f"C{index}", zorder=2,
                label=f"{name}: {route}, {len(path) - 1} steps")
        lines.append(f"{title} {name}: {route}, {len(path) - 1} steps")
    draw_world(ax, kwargs or {})
    ax.set_title(title, fontsize=9)
    ax.set_xlim(-0.35, 2.4)
    ax.set_ylim(-1.6, 1.6)
    ax.set_aspect("equal")
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=2,
              frameon=False)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("panels", nargs="+", help="TITLE=RUN, one per panel")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    pairs = []
    for item in args.panels:
        title, separator, run = item.rpartition("=")
        if not separator or not title:
            parser.error(f"a panel is TITLE=RUN, got {item!r}")
        pairs.append((title, Path(run)))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.0 * len(pairs), 4.4),
                             layout="constrained", squeeze=False)
    for ax, (title, run) in zip(axes[0], pairs):
        for line in panel(ax, title, run):
            print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=130)
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
