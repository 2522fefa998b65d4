"""Results on gymnasium environments: time to a return threshold, the alpha trade-off, and
where a cliff-walking policy walks.

    rs-lightning gym-results reach <run folder>... --threshold 475
    rs-lightning gym-results tradeoff <sweep folder> --out tradeoff.png
    rs-lightning gym-results heatmap <run folder>... --out heatmap.png

- ``reach``: the first periodic evaluation (``eval_history.jsonl``) whose mean return is at
  least the threshold: its update, environment step and training wall time (the
  ``train_seconds`` of runs that record it; CartPole-v1 is solved at 475).
- ``tradeoff``: E against VaR of the final evaluations of a sweep over alpha (mean and
  standard deviation over seeds), one point per alpha: the price in expectation of a better
  lower tail.
- ``heatmap``: how often the greedy policy of each run visits each cell of the cliff-walking
  grid (Monte Carlo episodes of the run's own environment), one panel per run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from rs_lightning.analysis.plots import _pyplot, _save
from rs_lightning.analysis.results import read_json_object
from rs_lightning.analysis.runs import load_run
from rs_lightning.engine.rollout import learning_reward
from rs_lightning.envs.cliff_walking import COLUMNS, ROWS
from rs_lightning.envs.factory import make_env


# ----------------------------------------------------------------------- pure functions
def first_reaching(history: Iterable[dict[str, Any]], threshold: float,
                   key: str = "expectation") -> Optional[dict[str, Any]]:
    """The first record of ``history`` (in step order) whose ``key`` is at least ``threshold``."""
    for record in sorted(history, key=lambda r: r["step"]):
        if record.get(key, -np.inf) >= threshold:
            return record
    return None


def tradeoff_points(rows: Iterable[dict[str, Any]]) -> list[dict[str, float]]:
    """Mean and standard deviation over seeds of E and VaR for each alpha, by alpha."""
    by_alpha: dict[float, list[dict[str, Any]]] = {}
    for row in rows:
        by_alpha.setdefault(float(row["alpha"]), []).append(row)
    points = []
    for alpha, runs in sorted(by_alpha.items()):
        e = np.array([r["expectation"] for r in runs])
        v = np.array([r["var"] for r in runs])
        points.append({"alpha": alpha, "seeds": len(runs), "expectation": float(e.mean()),
                       "expectation_std": float(e.std(ddof=1)) if len(runs) > 1 else 0.0,
                       "var": float(v.mean()),
                       "var_std": float(v.std(ddof=1)) if len(runs) > 1 else 0.0,
                       # Robust to a seed that failed to learn: median and quartiles.
                       "expectation_quartiles": np.percentile(e, [25, 50, 75]).tolist(),
                       "var_quartiles": np.percentile(v, [25, 50, 75]).tolist(),
                       "runs": [(float(a), float(b)) for a, b in zip(v, e)]})
    return points


def visit_counts(states: Iterable[int], shape: tuple[int, int]) -> np.ndarray:
    """How often each cell of a ``shape`` grid appears among the state indices ``states``."""
    counts = np.bincount(np.asarray(list(states), dtype=int), minlength=shape[0] * shape[1])
    return counts[: shape[0] * shape[1]].reshape(shape)


# ----------------------------------------------------------------------- reading runs
def read_history(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "eval_history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def greedy_visits(run_dir: Path, episodes: int, seed: int = 0) -> np.ndarray:
    """Visits per cell of the cliff-walking grid by a run's greedy policy over ``episodes``;
    ValueError in one line for a run on another environment."""
    from gymnasium.envs.toy_text.cliffwalking import CliffWalkingEnv

    run = load_run(run_dir)
    train = run.run_config.train
    env = make_env(train.env)
    if not isinstance(env.unwrapped, CliffWalkingEnv):
        env.close()
        raise ValueError(f"heatmap: {run_dir} is a run on {train.env.id}; the heat map draws "
                         "the cells a greedy policy visits on cliff walking (env=cliff_walking "
                         "runs)")
    member = run.module
    # What the objective carries through an episode (objective=static: (c, gamma^t, b)).
    state = member.objective.episode_state([seed], 1, float(train.env.gamma), training=False)
    states = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done = False
        while not done:
            states.append(int(env.unwrapped.s))
            seen = state.observe(np.asarray(obs, dtype=np.float32)[None], member.network,
                                 member.device)
            action = int(member.act(seen[None], 0, state)[0, 0])
            obs, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            state.advance(np.array([learning_reward(
                float(reward), train.env.reward_scale, train.env.reward_clip)]),
                np.array([done]))
        states.append(int(env.unwrapped.s))
    return visit_counts(states, (ROWS, COLUMNS))


def heatmap_panel(run_dir: Path, episodes: int) -> tuple[str, np.ndarray]:
    """The label and visit counts of one heat-map panel: a run, or a ``parallel_seeds`` run
    (its ``seed_*`` folders pooled, ``episodes`` each; the label gives means over seeds)."""
    run_dir = Path(run_dir)
    runs = [run_dir] if (run_dir / "eval.json").is_file() else sorted(run_dir.glob("seed_*"))
    runs = [run for run in runs if (run / "eval.json").is_file()]
    if not runs:
        raise FileNotFoundError(f"heatmap: {run_dir} holds no finished run (no eval.json)")
    results = [read_json_object(run / "eval.json") for run in runs]  # DamagedFile: one line
    counts = sum(greedy_visits(run, episodes) for run in runs)
    name = run_dir.name if len(run_dir.name) <= 30 else run_dir.name[:27] + "..."
    mean = {key: float(np.mean([r.get(key, np.nan) for r in results]))
            for key in ("expectation", "var", "risk_outcome_orange")}
    seeds = f", {len(runs)} seeds" if len(runs) > 1 else ""
    name = "" if len(runs) > 1 else f"{name}: "  # a sweep job's folder name says no more
    label = (f"{name}{results[0].get('agent', '?')}, alpha {results[0].get('alpha', '?')}"
             f"{seeds}: E {mean['expectation']:.2f}, VaR {mean['var']:.2f}, "
             f"falls in {100 * mean['risk_outcome_orange']:.1f}% of episodes")
    return label, counts


# ----------------------------------------------------------------------- figures
def plot_tradeoff(points: list[dict[str, float]], out: Path, title: str = "") -> None:
    """E against VaR, one point per alpha at the medians over seeds with interquartile bars,
    each seed a small dot. The axes fit the medians; seeds far outside (a seed that did not
    learn) are listed in the corner instead of squeezing the rest."""

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.8, 4.4))
    x = [p["var_quartiles"][1] for p in points]
    y = [p["expectation_quartiles"][1] for p in points]
    xerr = [[p["var_quartiles"][1] - p["var_quartiles"][0] for p in points],
            [p["var_quartiles"][2] - p["var_quartiles"][1] for p in points]]
    yerr = [[p["expectation_quartiles"][1] - p["expectation_quartiles"][0] for p in points],
            [p["expectation_quartiles"][2] - p["expectation_quartiles"][1] for p in points]]
    ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o-", capsize=3, zorder=3,
                label="median over seeds (bars: quartiles)")
    runs = [(p["alpha"], run) for p in points for run in p["runs"]]
    # Seeds within 10 spreads of the medians (at least 10 return units) set the axes.
    centre_x, centre_y = float(np.median(x)), float(np.median(y))
    reach_x = 10 * max(max(x) - min(x), 1.0)
    reach_y = 10 * max(max(y) - min(y), 1.0)
    inside = [(a, r) for a, r in runs
              if abs(r[0] - centre_x) <= reach_x and abs(r[1] - centre_y) <= reach_y]
    outside = [(a, r) for a, r in runs if (a, r) not in inside]
    shown_x = [r[0] for _, r in inside] + x
    shown_y = [r[1] for _, r in inside] + y
    pad_x = 0.1 * max(max(shown_x) - min(shown_x), 1.0)
    pad_y = 0.1 * max(max(shown_y) - min(shown_y), 1.0)
    low_x, high_x = min(shown_x) - pad_x, max(shown_x) + pad_x
    low_y, high_y = min(shown_y) - pad_y, max(shown_y) + pad_y
    ax.scatter([r[0] for _, r in inside], [r[1] for _, r in inside], s=12, alpha=0.35,
               color="tab:gray", zorder=2, label="one seed")
    labelled: list[tuple[float, float]] = []
    for p in points:
        at = (p["var_quartiles"][1], p["expectation_quartiles"][1])
        near = sum(abs(at[0] - u) < 0.05 * span for u, _ in labelled
                   for span in [high_x - low_x]
                   if abs(at[1] - _) < 0.05 * (high_y - low_y))
        labelled.append(at)
        ax.annotate(f"alpha={p['alpha']:g}", at, fontsize=8, xytext=(5, 4 + 10 * near),
                    textcoords="offset points")
    if outside:
        text = "off the axes:\n" + "\n".join(
            f"alpha={a:g}: E {r[1]:.1f}, VaR {r[0]:.1f}" for a, r in outside)
        ax.text(0.02, 0.02, text, transform=ax.transAxes, fontsize=7, va="bottom")
    ax.set_xlim(low_x, high_x)
    ax.set_ylim(low_y, high_y)
    ax.set_xlabel("VaR of the episode return (the runs' rho)")
    ax.set_ylabel("E of the episode return")
    ax.set_title(title or "E against VaR over alpha")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    _save(fig, out)


def plot_heatmaps(panels: list[tuple[str, np.ndarray]], out: Path) -> None:

    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), squeeze=False)
    for ax, (label, counts) in zip(axes[:, 0], panels):
        share = counts / max(counts.sum(), 1)
        image = ax.imshow(share, cmap="viridis")
        rows, columns = counts.shape
        ax.add_patch(plt.Rectangle((0.5, rows - 1.5), columns - 2, 1, fill=False, hatch="//",
                                   edgecolor="tab:red", lw=1.5))  # the cliff
        ax.set_xticks(range(columns))
        ax.set_yticks(range(rows))
        ax.set_title(label, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.02, label="share of visits")
    fig.suptitle("Cells visited by the greedy policy (the cliff hatched)")
    _save(fig, out)


# ----------------------------------------------------------------------- command line
