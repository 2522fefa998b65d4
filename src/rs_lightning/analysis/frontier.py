"""The E-VaR-CVaR frontier of finished runs: their greedy policies over a grid of alphas.

    rs-lightning frontier <run> [<run> ...] --alpha 0:1:21 [--rho 0.05,0.1]

evaluates, for every seed of the given runs (a several-seed run counts each ``seed_<s>/``) and
every setting (alpha, and the risk measure's parameter from ``--rho``, default the run's own),
the greedy policy on U at that setting: E, VaR_rho and CVaR_rho of the episode score S by Monte
Carlo and, on the grid worlds, exactly, with the path it takes from the start (green / orange /
neither) and its action in every cell. It writes ``frontier.json`` (every row and the per-setting
summary over seeds), ``frontier.csv`` (one row per seed and setting) and ``frontier.png`` (E
against VaR_rho and against CVaR_rho, one point per alpha with the seeds' spread; E, VaR and
CVaR against alpha with the seeds' range as bands; on the grid worlds the path of every seed
at every alpha; on a world whose class gives exact reference routes, the risky navigation
world, their exact points and the alpha where the best of them changes). The table and the
figure also go to a W&B run (job type ``frontier``; offline unless ``--wandb online``, none
with ``--wandb off``).

What a point means depends on the run:

- a risk-conditioned run (``agent.risk_conditioned=true``) learned Z(s, a | setting) for the
  settings it drew: each point is the policy its network chose for that setting; settings
  outside the ranges it trained on are refused;
- a distributional value-based run that is not conditioned learned one law Z for its own
  setting's policy: each point re-weighs that law with another alpha (argmax_a of U_alpha on
  the same Z). It shows how far the choice moves with alpha on what the run learned, not what
  a run trained at that alpha would learn;
- a run whose greedy policy cannot depend on the setting (an actor-critic that is not
  risk-conditioned, DQN, ``risk=expectation``:
  :func:`~rs_lightning.analysis.evaluation.fixed_policy_reason`) is refused: every point
  would be the same policy.

The runs given must be seeds of one setting, by the rule the reports group runs by (their
whole config but the seed and what does not change what a run learns:
:func:`~rs_lightning.analysis.results.learning_settings`); runs of different agents,
environments or settings are refused, naming what differs. Every argument is checked and every
setting tried on every seed before the first episode is played.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rs_lightning.analysis.evaluation import (
    SETTING_MEANING,
    PlayedEpisodes,
    check_episodes,
    fixed_policy_reason,
    grid_policy_table,
    play_episodes,
    policy_at,
    rollout_policy,
    summarize_played,
)
from rs_lightning.analysis.results import (
    group_by_setting,
    label_keys,
    learning_settings,
    read_config,
)
from rs_lightning.analysis.runs import TrainedRun, load_run
from rs_lightning.files import atomic_write, write_json_atomic
from rs_lightning.references.exact_policies import path_of
from rs_lightning.references.ground_truth import exact_policy_metrics

# The figures of a point: Monte Carlo, then exact (grid worlds).
MEASURES = ("expectation", "var", "cvar", "utility")


# The most settings a frontier evaluates per seed (alphas times --rho values): a grid of 0.001
# in alpha; each point plays its own Monte Carlo episodes.
MAX_SETTINGS = 1001
ALPHA_FORM = (f"low:high:count (count a whole number from 1 to {MAX_SETTINGS}) or a comma "
              "list, every alpha in [0, 1]")


def parse_alphas(text: str) -> list[float]:
    """``low:high:count`` (evenly spaced, ends included) or a comma-separated list; ValueError
    naming ``--alpha`` and its form otherwise."""
    refused = ValueError(f"--alpha: expected {ALPHA_FORM}, got {text!r}")
    try:
        if ":" in text:
            low, high, count_text = text.split(":")
            count = int(count_text)
            if not 1 <= count <= MAX_SETTINGS:
                raise refused
            values = np.linspace(float(low), float(high), count).round(10).tolist()
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise refused from None
    if not values or len(values) > MAX_SETTINGS or not all(0.0 <= v <= 1.0 for v in values):
        raise refused
    return values


def parse_parameters(text: str) -> list[float]:
    """``--rho``: a comma list of finite numbers (each checked by the run's risk measure when
    the frontier starts); ValueError naming ``--rho`` otherwise."""
    refused = ValueError(f"--rho: expected a comma list of at most {MAX_SETTINGS} numbers "
                         f"(the risk measure's parameter), got {text!r}")
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise refused from None
    if not values or len(values) > MAX_SETTINGS or not np.isfinite(values).all():
        raise refused
    return values


def check_runs(runs: list[TrainedRun], settings: list[tuple[float, float | None]],
               exact_only: bool) -> None:
    """ValueError in one line unless the seeds ``runs`` can make one frontier at every
    setting ``(alpha, parameter)``: seeds of one setting by the reports' rule
    (:func:`~rs_lightning.analysis.results.group_by_setting` of their learning settings),
    each seed once, a greedy policy that a setting can change, every setting one each seed
    acts at, and exact figures where ``exact_only`` asks for them alone."""
    configs = {run.run_dir: learning_settings(read_config(run.run_dir) or {}) for run in runs}
    groups = group_by_setting(runs, lambda run: configs[run.run_dir],
                              lambda run: run.run_config.train.seed)
    if len(groups) > 1:
        keys = label_keys([g.settings for g in groups], named=())
        differing = keys or {"": "their configs"}
        shown = "; ".join(
            f"{name}: " + ", ".join(f"{g.settings.get(key, '—')} ({g.runs[0].run_dir})"
                                    for g in groups[:3]) if key else name
            for key, name in list(differing.items())[:3])
        raise ValueError(f"the runs are not seeds of one setting ({shown}): a frontier pools "
                         "seeds of one agent, environment and setting; give such runs, one "
                         "frontier each")
    if groups[0].duplicates:
        again = groups[0].duplicates[0]
        raise ValueError(f"{again.run_dir} repeats seed {again.run_config.train.seed} of "
                         "another run given: give each seed once")
    if exact_only and not runs[0].run_config.train.env.grid_size:
        raise ValueError(f"--exact-only: {runs[0].run_config.train.env.id} has no exact "
                         "figures (only the grid worlds do); leave it out for Monte Carlo")
    reason = fixed_policy_reason(runs[0].module)
    if reason is not None:
        raise ValueError(f"{reason}; a frontier of it would show one policy at every alpha "
                         "(rs-lightning evaluate gives its figures)")
    for run in runs:
        for parameter in dict.fromkeys(p for _, p in settings if p is not None):
            try:
                policy_at(run.module, None, parameter)
            except ValueError as error:
                raise ValueError(f"--rho {parameter:g}: {error}") from None
        for alpha, parameter in settings:
            policy_at(run.module, alpha, parameter)


def seed_runs(run_dirs: list[Path]) -> list[Path]:
    """The single-seed run folders of ``run_dirs``: a folder with ``seed_<s>/`` subfolders (a
    ``parallel_seeds`` run) stands for them."""
    found = []
    for run_dir in run_dirs:
        members = sorted(run_dir.glob("seed_*/config.yaml"),
                         key=lambda p: int(p.parent.name.split("_")[1]))
        if members:
            found.extend(p.parent for p in members)
        else:
            found.append(run_dir)
    return found


def risk_level(run: TrainedRun, parameter: float | None) -> float:
    """The rho of the VaR and CVaR reported: the measure's own level for VaR / CVaR, the
    run's ``rho`` for any other measure."""
    utility = run.run_config.utility
    if parameter is not None and utility.risk in ("var", "cvar"):
        return float(parameter)
    return float(utility.params.get("rho", run.run_config.train.rho))


def evaluate_setting(run: TrainedRun, alpha: float, parameter: float | None,
                     episodes: int, exact_only: bool = False,
                     played: dict[str, PlayedEpisodes] | None = None) -> dict[str, Any]:
    """One seed's greedy policy at one setting: Monte Carlo (unless ``exact_only``) and, on
    the grid worlds, exact figures, the path from the start and the action of every cell.

    ``played``: the episodes already played by this seed's policies, by their grid table.
    On a grid world a policy of the cell alone plays the same episodes (the same seed)
    whatever setting chose it, so each distinct policy is played once and summarised for
    each setting that chose it: the figures are those of playing it again."""
    policy = policy_at(run.module, alpha, parameter)
    train = run.run_config.train
    rho = risk_level(run, parameter)
    names = list(policy.utility.params)
    row: dict[str, Any] = {
        "seed": train.seed, "alpha": alpha,
        "parameter": names[0] if names else None,
        "parameter_value": policy.utility.params[names[0]] if names else None,
        "rho": rho,
    }
    # The action of every cell, once: the row's policy and the key of its played episodes.
    table = grid_policy_table(policy.greedy, train.env.grid_size) if train.env.grid_size else None
    if not exact_only or not train.env.grid_size:
        rollout = rollout_policy(policy, policy.utility)
        key = None
        if played is not None and table is not None and rollout.objective.observation_markov:
            key = json.dumps(table, sort_keys=True)
        episodes_played = played.get(key) if key is not None else None
        if episodes_played is None:
            episodes_played = play_episodes(rollout, train.env, episodes, train.seed,
                                            train.evaluation.batch_envs)
            if key is not None:
                played[key] = episodes_played
        summary = summarize_played(rollout, episodes_played, policy.utility, rho, train.seed)
        row.update({name: summary[name] for name in MEASURES})
        if "risk_outcome" in summary:
            row["risk_outcome"] = summary["risk_outcome"]
    exact = exact_policy_metrics(policy.greedy, train.env, policy.utility, rho)
    if exact is not None:
        row.update({f"exact_{name}": exact[f"exact_{name}"] for name in MEASURES})
        row["path"] = path_of({+1: exact["exact_risk_outcome_green"],
                               -1: exact["exact_risk_outcome_orange"],
                               0: exact["exact_risk_outcome_neither"]})
        row["policy"] = table
    return row


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setting: the mean, min and max over seeds of every figure, and the seeds' paths."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["parameter_value"], row["alpha"]), []).append(row)
    summary = []
    for (parameter, alpha), group in groups.items():
        entry: dict[str, Any] = {"alpha": alpha, "parameter_value": parameter,
                                 "rho": group[0]["rho"], "seeds": len(group)}
        for name in (*MEASURES, *(f"exact_{m}" for m in MEASURES)):
            values = [r[name] for r in group if name in r]
            if values:
                entry[name] = {"mean": float(np.mean(values)), "min": float(np.min(values)),
                               "max": float(np.max(values)), "std": float(np.std(values))}
        paths = [r["path"] for r in group if "path" in r]
        if paths:
            entry["paths"] = {p: paths.count(p) for p in sorted(set(paths))}
        summary.append(entry)
    return summary


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    columns = [c for c in ("seed", "alpha", "parameter", "parameter_value", "rho", *MEASURES,
                           "risk_outcome", *(f"exact_{m}" for m in MEASURES), "path")
               if any(c in r for r in rows)]
    with atomic_write(path, "w") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


PATH_CODES = {"green": 0, "orange": 1, "neither": 2}


def exact_switch_points(run_config) -> list[float]:
    """The alphas at which the exact per-decision fixed point of the run's risk measure
    changes its path from the start, on a grid world and for a measure with a closed form on
    its laws (VaR, CVaR, E); else none."""
    from rs_lightning.references.exact_policies import (
        CLOSED_FORM_RISKS,
        per_decision_switch_points,
    )
    from rs_lightning.references.ground_truth import GridWorldReferences

    train, utility = run_config.train, run_config.utility
    if not train.env.grid_size or utility.risk not in (*CLOSED_FORM_RISKS, "expectation"):
        return []
    world = GridWorldReferences(train.env, train.rho).world
    return [point.alpha for point in
            per_decision_switch_points(world, utility, gamma=float(train.env.gamma))]


def reference_laws(run_config) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The exact return laws of the routes that matter from the start, on a world whose
    class gives them (a ``reference_laws(**kwargs)`` static method: the risky navigation
    world); else none."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    env = run_config.train.env
    try:
        entry_point = gym.spec(env.id).entry_point
    except gym.error.Error:  # an id this process has not registered
        return {}
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    laws = getattr(creator, "reference_laws", None)
    return laws(**dict(env.kwargs or {})) if laws is not None else {}


def exact_routes(run_config, rho: float) -> list[dict[str, Any]]:
    """Each reference route's exact E, VaR_rho, CVaR_rho and its law's risk R of the run's
    own measure (:func:`reference_laws`)."""
    import torch

    from rs_lightning.risk import (
        RISK_MEASURES,
        ReturnDistribution,
        conditional_value_at_risk,
        expectation,
        value_at_risk,
    )

    utility = run_config.utility
    measure = RISK_MEASURES[utility.risk] if utility.uses_risk else None
    routes = []
    for route, (atoms, probabilities) in reference_laws(run_config).items():
        law = ReturnDistribution(torch.tensor(atoms), torch.tensor(probabilities))
        routes.append({
            "route": route, "rho": rho, "expectation": float(expectation(law)),
            "var": float(value_at_risk(law, rho)),
            "cvar": float(conditional_value_at_risk(law, rho)),
            "risk": None if measure is None else float(measure(law, **utility.params)),
        })
    return routes


def route_switch_points(routes: list[dict[str, Any]]) -> list[float]:
    """The alphas in (0, 1) where the best route by U = alpha E + (1 - alpha) R changes
    (U of a route is linear in alpha, so the best one changes only where two are equal)."""
    from itertools import combinations

    if len(routes) < 2 or any(r["risk"] is None for r in routes):
        return []

    def best(alpha: float) -> str:
        return max(routes, key=lambda r: alpha * r["expectation"]
                   + (1 - alpha) * r["risk"])["route"]

    crossings = set()
    for a, b in combinations(routes, 2):
        slope = (a["expectation"] - a["risk"]) - (b["expectation"] - b["risk"])
        if slope != 0 and 0 < (alpha := (b["risk"] - a["risk"]) / slope) < 1:
            crossings.add(alpha)
    return [alpha for alpha in sorted(crossings)
            if best(alpha - 1e-9) != best(alpha + 1e-9)]


def plot_frontier(summary: list[dict[str, Any]], rows: list[dict[str, Any]], path: Path,
                  title: str, switch_points: list[float] = (),
                  routes: list[dict[str, Any]] = ()) -> None:
    """E against VaR and CVaR (a point per alpha, coloured by alpha, the seeds' standard
    deviation as error bars), the three against alpha (the seeds' range as bands) and, on
    grid worlds, the path of every seed at every alpha. Each panel says whether its numbers
    are exact or Monte Carlo; ``switch_points``: the alphas where the exact optimum changes
    its path (dashed lines); ``routes``: the exact points of a world's reference routes
    (:func:`exact_routes`, black crosses)."""
    from rs_lightning.analysis.plots import _pyplot

    plt = _pyplot()

    prefix = "exact_" if all("exact_expectation" in s for s in summary) else ""
    source = "exact" if prefix else "Monte Carlo"
    has_paths = any("path" in r for r in rows)
    panels = 4 if has_paths else 3
    fig, axes = plt.subplots(1, panels, figsize=(4.4 * panels + 0.8, 3.9), layout="constrained")
    scatter = None
    levels = sorted({s["parameter_value"] for s in summary}, key=lambda v: (v is None, v))
    for level in levels:
        points = sorted((s for s in summary if s["parameter_value"] == level),
                        key=lambda s: s["alpha"])
        alphas = np.array([s["alpha"] for s in points])
        label = f"param {level:g}" if level is not None else "run"

        def series(name, stat="mean", points=points):
            return np.array([s[prefix + name][stat] for s in points])

        for ax, risk in zip(axes[:2], ("var", "cvar")):
            ax.errorbar(series(risk), series("expectation"), xerr=series(risk, "std"),
                        yerr=series("expectation", "std"), fmt="-", alpha=0.4)
            scatter = ax.scatter(series(risk), series("expectation"), c=alphas,
                                 cmap="viridis", vmin=0, vmax=1, zorder=3, label=label)
        for name, colour in (("expectation", "C0"), ("var", "C1"), ("cvar", "C2")):
            axes[2].plot(alphas, series(name), color=colour,
                         label=name if level == levels[0] else None)
            axes[2].fill_between(alphas, series(name, "min"), series(name, "max"),
                                 color=colour, alpha=0.2)
    rho = summary[0]["rho"]
    for route in (r for r in routes if r["rho"] == rho):
        for ax, risk in zip(axes[:2], ("var", "cvar")):
            ax.scatter(route[risk], route["expectation"], marker="x", color="black", zorder=4)
            ax.annotate(f"{route['route']} (exact)", (route[risk], route["expectation"]),
                        textcoords="offset points", xytext=(5, 5), fontsize=8)
    axes[0].set(xlabel=f"VaR_{rho:g} of S", ylabel="E[S]", title=f"E against VaR ({source})")
    axes[1].set(xlabel=f"CVaR_{rho:g} of S", ylabel="E[S]", title=f"E against CVaR ({source})")
    axes[2].set(xlabel="alpha", ylabel="S",
                title=f"against alpha ({source})\nband: the seeds' range")
    fig.colorbar(scatter, ax=list(axes[:2]), label="alpha", fraction=0.05)
    for k, alpha in enumerate(switch_points):
        for ax in axes[2:]:
            ax.axvline(alpha, color="black", linestyle="--", linewidth=0.9,
                       label=("exact switch of route" if routes else
                              "exact per-decision switch") if k == 0 and ax is axes[2] else None)
    axes[2].legend(fontsize=8)
    if has_paths:
        seeds = sorted({r["seed"] for r in rows})
        alphas_all = sorted({r["alpha"] for r in rows})
        first = levels[0]
        grid = np.full((len(seeds), len(alphas_all)), np.nan)
        for r in rows:
            if r["parameter_value"] == first and "path" in r:
                grid[seeds.index(r["seed"]), alphas_all.index(r["alpha"])] = PATH_CODES.get(
                    r["path"], 2)
        from matplotlib.colors import ListedColormap

        half = 0.5 * (alphas_all[-1] - alphas_all[0]) / max(len(alphas_all) - 1, 1) or 0.5
        axes[3].imshow(grid, aspect="auto", cmap=ListedColormap(["green", "orange", "grey"]),
                       vmin=0, vmax=2, interpolation="nearest",
                       extent=(alphas_all[0] - half, alphas_all[-1] + half,
                               len(seeds) - 0.5, -0.5))
        axes[3].set_yticks(range(len(seeds)), [str(s) for s in seeds])
        axes[3].set(xlabel="alpha", ylabel="seed", title="path (green / orange / neither)")
    fig.suptitle(title)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def log_frontier_to_wandb(result: dict[str, Any], out_dir: Path, logger, mode: str) -> str:
    """The rows as a W&B table and the figure, in a run of job type ``frontier`` (offline
    again when online fails); returns the run's local folder."""
    import wandb

    from rs_lightning.analysis.wandb_support import init_wandb_run

    run = init_wandb_run(mode, project=logger.project, entity=logger.entity,
                         job_type="frontier", dir=str(out_dir),
                         name=f"frontier-{result['agent']}-{Path(result['runs'][0]).name}",
                         config={k: result[k] for k in ("runs", "agent", "env", "risk",
                                                        "risk_conditioned", "episodes")})
    columns = [c for c in ("seed", "alpha", "parameter_value", "rho", *MEASURES,
                           *(f"exact_{m}" for m in MEASURES), "path")
               if any(c in r for r in result["rows"])]
    media: dict[str, Any] = {"frontier/table": wandb.Table(
        columns=columns, data=[[r.get(c) for c in columns] for r in result["rows"]])}
    if (out_dir / "frontier.png").is_file():
        media["frontier/figure"] = wandb.Image(str(out_dir / "frontier.png"))
    run.log(media)
    folder = str(Path(run.dir).parent)
    run.finish()
    return folder


def frontier(run_dirs: list[Path], alphas: list[float], parameters: list[float] | None,
             episodes: int, out_dir: Path, exact_only: bool = False,
             figure: bool = True, wandb: str = "off") -> dict[str, Any]:
    """Evaluate every seed of ``run_dirs`` at every setting; write the three files into
    ``out_dir``; returns what ``frontier.json`` holds. Everything is checked first
    (:func:`check_runs`): ValueError in one line."""
    rows = []
    if not exact_only:
        check_episodes(episodes, "--episodes")
    runs = [load_run(d) for d in seed_runs(run_dirs)]
    check_runs(runs, [(a, p) for p in (parameters or [None]) for a in alphas], exact_only)
    settings = len(parameters or [None]) * len(alphas)
    first = runs[0].run_config
    if not (exact_only and first.train.env.grid_size):
        print(f"[rs_lightning] frontier: Monte Carlo of {len(runs)} seed(s) x {settings} "
              f"setting(s), {episodes} episodes each"
              + (" (on a grid world each distinct policy is played once; --exact-only "
                 "skips Monte Carlo)" if first.train.env.grid_size else
                 "; this can take minutes: fewer --episodes or settings go faster"),
              file=sys.stderr)
    # Long episodes (LunarLander: minutes a point) say where they are; grid worlds are quick.
    report_each = not first.train.env.grid_size
    for run in runs:
        played: dict[str, PlayedEpisodes] = {}  # this seed's policies, by their grid table
        for parameter in (parameters or [None]):
            for alpha in alphas:
                rows.append(evaluate_setting(run, alpha, parameter, episodes, exact_only,
                                             played))
                if report_each:
                    print(f"[rs_lightning] frontier: {len(rows)}/{len(runs) * settings} "
                          f"seed {rows[-1]['seed']} alpha={alpha:g}: "
                          f"E={rows[-1]['expectation']:.4g}", file=sys.stderr)
    conditioned = first.agent.risk_conditioned
    # A world with reference routes (risky navigation): each one's exact figures.
    routes = exact_routes(first, rows[0]["rho"]) if rows else []
    result = {
        "runs": [str(d) for d in run_dirs],
        "agent": first.agent.name,
        "env": first.train.env.id,
        "risk": first.utility.risk,
        "risk_conditioned": conditioned,
        "meaning": SETTING_MEANING[bool(conditioned)],
        "episodes": 0 if exact_only else episodes,
        "summary": summarize(rows),
        "rows": rows,
        # Where the exact per-decision policy changes its path (grid worlds, VaR / CVaR / E),
        # or where the best reference route changes for the run's own measure.
        "exact_switch_alphas": exact_switch_points(first) or route_switch_points(routes),
        "exact_routes": routes,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "frontier.json", result)
    write_csv(rows, out_dir / "frontier.csv")
    if figure:
        kind = "risk-conditioned" if conditioned else "re-weighed"
        plot_frontier(result["summary"], rows, out_dir / "frontier.png",
                      f"{first.agent.name} ({kind}) on {first.train.env.id}, "
                      f"{len(runs)} seed(s)", result["exact_switch_alphas"],
                      result["exact_routes"])
    if wandb != "off":
        log_frontier_to_wandb(result, out_dir, first.train.logger, wandb)
    return result
