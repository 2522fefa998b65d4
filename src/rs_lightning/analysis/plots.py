"""Figures: the learned return distributions behind a decision, and learning curves.

    rs-lightning plots distributions outputs/runs/<run> [--cell 1,0] [--out fig.png]
    rs-lightning plots curves outputs/multirun/<sweep> [--out fig.png]
    rs-lightning plots policy outputs/runs/<run> [--out fig.png]

``distributions`` draws, for one state, the learned CDF and density of Z(s, a) for every action, with markers
for Q (expectation), R (the run's risk measure) and U (the utility) of each action and the
chosen action highlighted (the paper's Figure 5). On the grid worlds it overlays the exact
law of the discounted return of each first action followed by the learned greedy policy, and
prints the Wasserstein-1 distance between learned and exact. ``curves`` draws the risk
indicator R_s and E, VaR, U of the greedy policy against training steps, mean and 95%
bootstrap band over the seeds of each setting (their range below 5 seeds, which the legend
says), one column per environment (the paper's
Figure 4), from the ``eval_history.jsonl`` of every job of a sweep. ``policy`` draws a grid
world run's ``policy.json`` as arrows on the grid (``policy.png``, which every grid-world run
also writes). Plots only read run folders.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rs_lightning.analysis.results import (
    DamagedFile,
    group_by_setting,
    labelled_groups,
    learning_settings,
    read_config,
    setting_labels,
)
from rs_lightning.analysis.stats import band_label, bootstrap_band, probability_of_improvement
from rs_lightning.files import atomic_write, read_jsonl, run_files
from rs_lightning.references.ground_truth import (
    cdf_on,
    exact_action_laws,
    wasserstein_1,
)
from rs_lightning.risk import expectation

if TYPE_CHECKING:  # loading a run needs the training code; the curves only read files
    from rs_lightning.analysis.runs import TrainedRun

DENSITY_BIN = 0.1
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown")


def _pyplot():
    """pyplot on the file-only Agg backend (no display needed, in CI either)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path) -> None:
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:  # a figure with its own (constrained) layout keeps it
        fig.tight_layout()
    out = Path(out)
    try:
        # Atomic: a full disk or a kill leaves the old image, never half of a new one.
        with atomic_write(out, "wb") as f:
            fig.savefig(f, dpi=110, format=out.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)


def parse_cell(text: str) -> tuple[int, ...]:
    """``--cell x,y`` -> ``(x, y)``; ValueError naming ``--cell`` and its form otherwise."""
    try:
        cell = tuple(int(v) for v in text.split(","))
    except ValueError:
        cell = ()
    if not cell:
        raise ValueError(f"--cell: expected the state as whole numbers x,y, got {text!r}")
    return cell


def check_distribution_state(run: TrainedRun, cell: tuple[int, ...]) -> None:
    """ValueError in one line unless ``distributions`` can draw the laws of ``cell`` for the
    run: an agent with a law of every discrete action (not an actor-critic, nor an on-policy
    agent, whose critic learns the state's), an observation of the cell's width, a cell
    inside a grid world's grid."""
    from rs_lightning.envs.factory import make_env

    train = run.run_config.train
    if run.module.agent.continuous_actions:
        raise ValueError(f"distributions: {run.run_dir} is a run of agent="
                         f"{run.run_config.agent.name}, which acts in a continuous box; it draws "
                         "the laws of every discrete action of a state (runs of discrete-action "
                         "agents)")
    if run.module.agent.on_policy:
        raise ValueError(f"distributions: {run.run_dir} is a run of agent="
                         f"{run.run_config.agent.name}, whose critic learns the law of a state's "
                         "return, not one of each action; it draws the laws of every action of "
                         "a state (runs of value-based agents)")
    env = make_env(train.env)
    try:
        shape = tuple(env.observation_space.shape or ())
    finally:
        env.close()
    if shape != (len(cell),):
        raise ValueError(f"--cell: {train.env.id}'s observations are of shape {list(shape)}, "
                         f"not a state x,y ({','.join(map(str, cell))}); distributions draws "
                         "a state given as its observation's numbers")
    size = train.env.grid_size
    if size and not all(0 <= v < size for v in cell):
        raise ValueError(f"--cell: {cell[0]},{cell[1]} lies outside the {size} x {size} grid "
                         f"of {train.env.id} (x and y in 0..{size - 1})")


def plot_return_distributions(run: TrainedRun, cell: tuple[int, int], out: Path) -> dict:
    """Draw the figure into ``out``; returns per-action Q, R, U and the W1 distances."""
    plt = _pyplot()

    train, utility = run.run_config.train, run.run_config.utility
    obs = torch.tensor([cell], dtype=torch.float32)
    with torch.no_grad():
        dist = run.module.return_distribution(obs).select(0)  # [A, K]
    q = expectation(dist).numpy()
    risk = utility.risk_value(dist).numpy()
    u = utility(dist).numpy()
    chosen = int(np.argmax(u))
    z = np.linspace(train.env.return_min - 0.5, train.env.return_max + 0.5, 801)
    laws = exact_action_laws(run.module.greedy, train.env, run.module.n_actions, cell)

    fig, (ax_cdf, ax_pdf) = plt.subplots(1, 2, figsize=(12, 4.5))
    report = {"cell": list(cell), "chosen_action": chosen, "actions": []}
    names = run.module.agent.problem.action_names
    for a in range(run.module.n_actions):
        color = COLORS[a % len(COLORS)]
        name = names[a] if names else f"action {a}"
        width = 2.6 if a == chosen else 1.2
        label = f"{name}{' (chosen)' if a == chosen else ''}: Q={q[a]:.2f} R={risk[a]:.2f} U={u[a]:.2f}"
        learned = cdf_on(dist.select(a), z)
        ax_cdf.plot(z, learned, color=color, lw=width, label=label)
        # Density of the learned law: its mass per bin over the bin width. Bins of 0.1 hold a
        # whole number of the paper's grid steps (0.02), so the curve does not alias.
        bins = np.arange(z[0], z[-1] + DENSITY_BIN, DENSITY_BIN)
        mass, _ = np.histogram(dist.values[a].numpy(), bins=bins, weights=dist.probs[a].numpy())
        ax_pdf.plot(0.5 * (bins[1:] + bins[:-1]), mass / DENSITY_BIN, color=color, lw=width)
        entry = {"action": a, "q": float(q[a]), "risk": float(risk[a]), "utility": float(u[a])}
        if names:
            entry["name"] = names[a]
        if laws is not None:
            exact_cdf = laws[a].cdf(z)
            ax_cdf.plot(z, exact_cdf, color=color, lw=1.0, ls=":")
            ax_pdf.plot(z, laws[a].pdf(z), color=color, lw=1.0, ls=":")
            entry["wasserstein_1"] = wasserstein_1(learned, exact_cdf, z)
        for ax in (ax_cdf, ax_pdf):
            ax.axvline(q[a], color=color, ls="-", lw=0.8, alpha=0.6)
            ax.axvline(risk[a], color=color, ls="--", lw=0.8, alpha=0.6)
        ax_cdf.plot([u[a]], [utility.params.get("rho", 0.5)], marker="*", ms=12 if a == chosen else 8,
                    color=color)
        report["actions"].append(entry)

    risk_name = utility.risk + (f"_{utility.params['rho']:g}" if "rho" in utility.params else "")
    title = (
        f"{run.run_config.agent.name} on {train.env.id.split('/')[-1]}, state {cell}: "
        f"U = {utility.alpha:g} E + {1 - utility.alpha:g} {risk_name}"
    )
    fig.suptitle(title)
    ax_cdf.set(xlabel="return z", ylabel="F(z | s, a)", title="CDF (dotted: exact law)")
    ax_pdf.set(xlabel="return z", ylabel="density", title="density; solid: Q, dashed: R, star: U")
    ax_cdf.legend(fontsize=8, loc="upper left")
    ax_cdf.grid(alpha=0.3)
    ax_pdf.grid(alpha=0.3)
    _save(fig, out)
    return report


CURVE_METRICS = (
    ("risk_outcome", "R_s (+1 green, -1 orange)"),
    ("expectation", "E[S]"),
    ("var", "VaR[S]"),
    ("utility", "U[S]"),
)
# Every metric of eval_history.jsonl a curve can show (``curves --metrics``), with its label.
METRIC_LABELS = dict(CURVE_METRICS, cvar="CVaR[S]", return_std="std of S")
# The x axes of the curves: the evaluation's gradient updates or environment transitions.
CURVE_AXES = {"updates": ("step", "gradient updates"),
              "env_steps": ("env_steps", "environment steps (transitions)")}


def load_histories(sweep_dir: Path) -> dict[tuple[str, str], list[list[dict]]]:
    """{(env id, curve label): [one seed's evaluations, ...]} from a sweep's run folders.

    Runs are grouped as the rows of the results table (:func:`rs_lightning.analysis.results.
    group_by_setting`): runs of other settings are other curves, not more seeds of the same
    one. The label is the agent's name and the settings that tell the curve apart
    (:func:`rs_lightning.analysis.results.setting_labels`). A run repeating the setting and seed of
    another is left out with a warning.
    """
    runs = []
    for history in run_files(sweep_dir, "eval_history.jsonl"):
        try:
            config = read_config(history.parent)
        except DamagedFile as error:
            print(f"warning: left out of the curves: {error}", file=sys.stderr)
            continue
        records = read_jsonl(history)  # drops a last line cut short by a kill
        if records and config is not None:
            runs.append((learning_settings(config), config.get("seed"), records, history.parent))
    groups = group_by_setting(runs, lambda run: run[0], lambda run: run[1])
    duplicates = [str(run[3]) for group in groups for run in group.duplicates]
    if duplicates:
        print(f"warning: left out of the curves, the same config and seed as another run: "
              f"{', '.join(duplicates)}", file=sys.stderr)
    return {(env, label): [run[2] for run in group.runs] for env, label, group in labelled_groups(groups)}


# How well the distribution is learned: Wasserstein-1 distance between the learned and the
# exact Z(start, a) under the greedy policy (grid worlds).
DISTANCE_METRICS = (
    ("w1_greedy", "W1, greedy action"),
    ("w1_mean", "W1, mean over actions"),
)
# The range of a metric's values, to which its bootstrap band is clipped.
METRIC_LIMITS: dict[str, tuple[float, float]] = {
    "risk_outcome": (-1.0, 1.0),
    "w1_greedy": (0.0, np.inf),
    "w1_mean": (0.0, np.inf),
}


def plot_learning_curves(
    sweep_dir: Path,
    out: Path,
    metrics: tuple[tuple[str, str], ...] = CURVE_METRICS,
    title: str = "Greedy policy during training (mean over seeds and a band)",
    x_axis: str = "updates",
) -> dict:
    """Draw the curves into ``out``; returns {env: {agent: number of seeds}}.

    Each row is one of ``metrics`` (key in ``eval_history.jsonl``, axis label); runs whose
    history lacks a metric are left out of its row. ``x_axis``: a key of :data:`CURVE_AXES`.
    """
    x_key, x_label = CURVE_AXES[x_axis]
    plt = _pyplot()

    groups = load_histories(sweep_dir)
    if not groups:
        raise FileNotFoundError(f"no */eval_history.jsonl below {sweep_dir}")
    envs = sorted({env for env, _ in groups})
    agents = sorted({agent for _, agent in groups})
    fig, axes = plt.subplots(
        len(metrics), len(envs), figsize=(max(6.5, 4.5 * len(envs)), 2.6 * len(metrics)),
        squeeze=False, sharex="col",
    )
    seeds: dict[str, dict[str, int]] = {}
    for column, env in enumerate(envs):
        for agent_index, agent in enumerate(agents):
            runs = groups.get((env, agent))
            if not runs:
                continue
            seeds.setdefault(env, {})[agent] = len(runs)
            # Align the seeds on the steps they all evaluated at.
            steps = sorted(set.intersection(*({r[x_key] for r in run} for run in runs)))
            color = COLORS[agent_index % len(COLORS)]
            for row, (metric, label) in enumerate(metrics):
                with_metric = [run for run in runs if all(metric in r for r in run)]
                if not with_metric:
                    continue
                values = np.array([[r[metric] for r in run if r[x_key] in steps] for run in with_metric])
                low, high = bootstrap_band(values, limits=METRIC_LIMITS.get(metric, (-np.inf, np.inf)))
                ax = axes[row, column]
                ax.plot(steps, values.mean(0), color=color,
                        label=f"{agent} ({band_label(len(with_metric))})")
                ax.fill_between(steps, low, high, color=color, alpha=0.2)
                ax.set_ylabel(label)
                ax.grid(alpha=0.3)
        axes[0, column].set_title(env.split("/")[-1])
        axes[-1, column].set_xlabel(x_label)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    _save(fig, out)
    return seeds


def improvement_matrix(scores: list[list[float]]) -> np.ndarray:
    """[i, j]: the probability that a seed of setting i beats a seed of setting j."""
    return np.array([[probability_of_improvement(x, y) for y in scores] for x in scores])


# What the probability of improvement compares: the utility the agents maximize, and its
# two parts.
IMPROVEMENT_METRICS = (("utility", "U[S]"), ("expectation", "E[S]"), ("var", "VaR[S]"))


# The largest matrix whose cells carry their number (larger ones overlap: the colour says).
MAX_CELL_NUMBERS = 8


def plot_probability_of_improvement(table: list[dict[str, Any]], out: Path) -> int:
    """For each environment with several rows of the results ``table``, a matrix per metric
    of P(row's seed > column's seed) (rliable's probability of improvement). Returns the
    number of environments drawn (0: nothing to compare, no file written)."""
    by_env: dict[str, list[dict[str, Any]]] = {}
    for entry in table:
        by_env.setdefault(entry["env"], []).append(entry)
    compared = {env: entries for env, entries in by_env.items() if len(entries) > 1}
    if not compared:
        return 0
    plt = _pyplot()
    size = max(len(entries) for entries in compared.values())
    fig, axes = plt.subplots(
        len(compared), len(IMPROVEMENT_METRICS), squeeze=False, layout="constrained",
        figsize=(len(IMPROVEMENT_METRICS) * (2.2 + 0.55 * size), 1.2 + (1.0 + 0.45 * size) * len(compared)),
    )
    for line, (env, entries) in enumerate(compared.items()):
        labels = setting_labels([entry["settings"] for entry in entries])
        for ax, (metric, name) in zip(axes[line], IMPROVEMENT_METRICS):
            scores = [entry["scores"].get(metric) for entry in entries]
            if any(s is None for s in scores):
                ax.axis("off")
                continue
            matrix = improvement_matrix(scores)
            image = ax.imshow(matrix, vmin=0, vmax=1, cmap="RdBu")
            if len(labels) <= MAX_CELL_NUMBERS:  # beyond, the numbers overlap: the colour bar
                for (i, j), p in np.ndenumerate(matrix):
                    ax.text(j, i, f"{p:.2f}", ha="center", va="center", fontsize=7)
            ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=7)
            ax.set_yticks(range(len(labels)), labels if ax is axes[line, 0] else [], fontsize=7)
            ax.set_title(f"{env.split('/')[-1]}\nP(row > column), {name}", fontsize=8)
        fig.colorbar(image, ax=list(axes[line]), fraction=0.02, pad=0.02)
    fig.suptitle("Probability of improvement over seeds", fontsize=10)
    _save(fig, out)
    return len(compared)


# Arrow (dx, dy) of each move by its name, y pointing up (rs_lightning.envs.grid_worlds).
ACTION_ARROWS = {"right": (1, 0), "down": (0, -1), "left": (-1, 0), "up": (0, 1)}
# Goal colours by their risk outcome R_s: +1 the risk-averse (green) path, -1 the orange one.
GOAL_COLORS = {1: "tab:green", -1: "tab:orange", 0: "tab:gray"}


def plot_policy(table: dict[str, Any], env_id: str, out: Path, title: str = "") -> None:
    """The greedy action of every cell of ``table`` (``policy.json``: ``"x,y"`` -> action,
    and the actions' names) as an arrow; goals (coloured by R_s, no arrow: the episode ends
    there), the trap and the start marked when the environment ``env_id`` has them. A file
    without names (written before they were recorded) is read with the grid worlds' own."""
    import gymnasium as gym

    import rs_lightning.envs  # noqa: F401  (registers the grid worlds)
    from rs_lightning.analysis.evaluation import read_policy_table
    from rs_lightning.envs import ACTION_NAMES, START

    plt = _pyplot()
    env = gym.make(env_id).unwrapped
    goals = {cell: outcome for cell, (_, outcome) in getattr(env, "goals", {}).items()}
    trap = getattr(env, "trap", None)
    env.close()
    cells, names = read_policy_table(table)
    names = names or ACTION_NAMES
    size = max(max(x, y) for x, y in cells) + 1
    fig, ax = plt.subplots(figsize=(1.1 * size + 0.8, 1.1 * size + 0.9))
    for (x, y), action in sorted(cells.items()):
        if (x, y) in goals:
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=GOAL_COLORS.get(goals[(x, y)], "tab:gray"), alpha=0.35))
            ax.text(x, y, "goal", ha="center", va="center", fontsize=9)
            continue
        if (x, y) == trap:
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color="tab:red", alpha=0.25))
            ax.text(x, y - 0.38, "trap", ha="center", va="center", fontsize=8)
        if (x, y) == START:
            ax.text(x, y - 0.38, "start", ha="center", va="center", fontsize=8)
        dx, dy = ACTION_ARROWS[names[action]]
        ax.annotate("", xy=(x + 0.3 * dx, y + 0.3 * dy), xytext=(x - 0.3 * dx, y - 0.3 * dy),
                    arrowprops={"arrowstyle": "->", "lw": 2})
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(-0.5, size - 0.5)
    ax.set_xticks(range(size))
    ax.set_yticks(range(size))
    ax.set_xticks([i - 0.5 for i in range(1, size)], minor=True)
    ax.set_yticks([i - 0.5 for i in range(1, size)], minor=True)
    ax.grid(which="minor", color="0.6")
    ax.tick_params(which="minor", length=0)
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(title or f"greedy policy, {env_id.split('/')[-1]}", fontsize=9)
    _save(fig, out)
