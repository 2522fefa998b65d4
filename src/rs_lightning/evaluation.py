"""Monte Carlo evaluation of a greedy policy on the undiscounted episode return S.

Evaluation only reads a policy (a function from a batch of observations to actions); it
never changes the module. Episode ``i`` is reset with the ``i``-th seed drawn from a
``SeedSequence`` of the run's seed: runs with different seeds get independent episodes, the
same run always the same ones (also across periodic evaluations, whose differences then come
from the policy alone), whatever the number of environments run side by side.

    python -m rs_lightning.evaluation outputs/runs/<run> [--episodes N]

re-evaluates a finished run from its last checkpoint and rewrites its ``eval.json``;

    python -m rs_lightning.evaluation outputs/runs/<run> alpha=0.3 rho=0.05

evaluates the greedy policy at that setting instead (``alpha=`` and the risk measure's
parameter by its name; either may be left out), Monte Carlo and, on the grid worlds, exactly,
into ``eval_alpha=0.3,rho=0.05.json`` beside ``eval.json`` (which stays as it is). A
risk-conditioned run acts at the setting it is given; any other run re-weighs its one learned
law with it (README, "Risk-conditioned agents").
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from rs_lightning.engine.behaviour import AccumulatedReturns
from rs_lightning.engine.experience import learning_reward
from rs_lightning.envs.copies import make_copies
from rs_lightning.files import write_json_atomic
from rs_lightning.ground_truth import (
    exact_policy_metrics,
    greedy_cells,
    objective_references,
    static_references,
)
from rs_lightning.risk import (
    Utility,
    conditional_value_at_risk,
    expectation,
    from_samples,
    value_at_risk,
)
from rs_lightning.runs import load_run

BatchPolicy = Callable[[torch.Tensor], torch.Tensor]


def deduplicated(policy: BatchPolicy) -> BatchPolicy:
    """Evaluate ``policy`` once per distinct observation of a batch (grid worlds have 9)."""

    def act(obs: torch.Tensor) -> torch.Tensor:
        unique, inverse = torch.unique(obs, dim=0, return_inverse=True)
        return policy(unique).cpu()[inverse]

    return act


# Tags the evaluation's random stream, apart from any other use of the run's seed.
_EVALUATION_STREAM = 0xE7A1


def episode_seeds(seed: int, episodes: int) -> np.ndarray:
    """The reset seed of each evaluation episode of a run with seed ``seed``."""
    return np.random.SeedSequence([seed, _EVALUATION_STREAM]).generate_state(episodes)


def run_episodes(
    policy: BatchPolicy, env_config, episodes: int, seed: int, batch_envs: int = 1000,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Run ``episodes`` episodes of ``policy``; returns (S per episode, R_s per episode)
    (:func:`play_episodes`)."""
    played = play_episodes(policy, env_config, episodes, seed, batch_envs, progress)
    return played.returns, played.outcomes


class PlayedEpisodes(NamedTuple):
    returns: np.ndarray  # undiscounted S per episode
    outcomes: np.ndarray  # R_s per episode (NaN where the env has none)
    discounted: np.ndarray | None = None  # objective=static: sum_t gamma^t r_t per episode
    thresholds: np.ndarray | None = None  # objective=static: each episode's b (learning units)


def play_episodes(
    policy: BatchPolicy, env_config, episodes: int, seed: int, batch_envs: int = 1000,
    progress: bool = False, static_member=None,
) -> PlayedEpisodes:
    """Run ``episodes`` episodes of ``policy``.

    ``min(episodes, batch_envs)`` env copies (the engine's :mod:`rs_lightning.envs.copies`)
    play them side by side; a copy whose episode ends starts the next one, reset with that
    episode's seed. ``progress`` shows a bar with episodes per second and the running mean
    return and R_s.

    ``static_member`` (a member of an objective=static run): the policy sees each copy's
    state augmented with (c, gamma^t, b), b the best threshold at the episode's start, and
    each episode's discounted return and threshold are returned too.
    """
    policy = deduplicated(policy)
    accumulated = None
    if static_member is not None:
        accumulated = AccumulatedReturns(static_member.static, [seed], min(episodes, batch_envs),
                                         float(env_config.gamma), uniform_share=0.0)
        best = (lambda grouped: static_member.best_thresholds(
            torch.from_numpy(grouped[0])).cpu().numpy()[None])
        discounted, thresholds = np.zeros(episodes), np.zeros(episodes)
        raw_discount = np.ones(min(episodes, batch_envs))
    bar = _EpisodeProgress(episodes) if progress else None
    seeds = episode_seeds(seed, episodes)
    n = min(episodes, batch_envs)
    copies = make_copies(env_config, [int(s) for s in seeds[:n]])
    returns = np.zeros(episodes)
    outcomes = np.full(episodes, np.nan)
    episode_of = np.arange(n)  # which episode each copy is playing
    active = np.ones(n, dtype=bool)
    next_episode = n
    while active.any():
        obs = copies.obs()
        if accumulated is not None:
            accumulated.resolve(obs, best)
            thresholds[episode_of[active]] = accumulated.threshold[active]
            obs = accumulated.augment(obs)
        actions = policy(torch.from_numpy(obs)).numpy().reshape(-1)
        step = copies.step(actions)
        returns[episode_of[active]] += step.reward[active]
        if accumulated is not None:
            discounted[episode_of[active]] += (raw_discount * step.reward)[active]
            raw_discount = np.where(step.ended, 1.0, raw_discount * accumulated.gamma)
            accumulated.advance(learning_reward(step.reward, getattr(env_config, "reward_scale",
                                                                     1.0), env_config.reward_clip),
                                step.ended)
        ended = np.flatnonzero(step.ended & active)
        if ended.size:
            outcome = step.risk_outcome
            restart, restart_seeds = [], []
            for j in ended:
                episode = episode_of[j]
                outcomes[episode] = outcome[j]
                if bar is not None:
                    bar.episode_ended(returns[episode], outcomes[episode])
                if next_episode < episodes:
                    episode_of[j] = next_episode
                    restart.append(int(j))
                    restart_seeds.append(int(seeds[next_episode]))
                    next_episode += 1
                else:
                    active[j] = False
            if restart:
                copies.reseed(restart, restart_seeds)
    if bar is not None:
        bar.close()
    if accumulated is None:
        return PlayedEpisodes(returns, outcomes)
    return PlayedEpisodes(returns, outcomes, discounted, thresholds)


class _EpisodeProgress:
    """A tqdm bar over evaluation episodes with the running mean of S and R_s."""

    def __init__(self, episodes: int, refresh_every: int = 500) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=episodes, desc="evaluation", unit="episode", dynamic_ncols=True)
        self.refresh_every = refresh_every
        self.count = 0
        self.return_sum = 0.0
        self.outcome_sum = 0.0
        self.outcome_count = 0

    def episode_ended(self, episode_return: float, outcome: float) -> None:
        self.count += 1
        self.return_sum += episode_return
        if outcome == outcome:  # not NaN
            self.outcome_sum += outcome
            self.outcome_count += 1
        if self.count % self.refresh_every == 0:
            shown = {"E": f"{self.return_sum / self.count:.3g}"}
            if self.outcome_count:
                shown["R_s"] = f"{self.outcome_sum / self.outcome_count:.3g}"
            self.bar.set_postfix(shown, refresh=False)
            self.bar.update(self.refresh_every)

    def close(self) -> None:
        self.bar.update(self.count - self.bar.n)
        self.bar.close()


def summarize_returns(
    returns: np.ndarray, outcomes: np.ndarray, utility: Utility, rho: float
) -> dict[str, Any]:
    """E, VaR_rho, CVaR_rho, the run's risk measure R (``risk_value``: VaR or CVaR again, or
    Wang, CPW, power, ... with the run's parameters) and U = alpha E + (1 - alpha) R of S,
    and the mean risk outcome R_s."""
    dist = from_samples(torch.as_tensor(returns, dtype=torch.float64))
    summary: dict[str, Any] = {
        "episodes": int(returns.size),
        "expectation": float(expectation(dist)),
        "var": float(value_at_risk(dist, rho)),
        "cvar": float(conditional_value_at_risk(dist, rho)),
        "utility": float(utility(dist)),
        "return_std": float(returns.std()),
        # Standard error of the mean, to judge agreement with reference numbers.
        "expectation_stderr": float(returns.std() / math.sqrt(max(returns.size, 1))),
        "rho": rho,
        "alpha": utility.alpha,
        "risk": utility.risk,
    }
    if utility.uses_risk or utility.params:  # at alpha 1 the measure may lack its parameters
        summary["risk_value"] = float(utility.risk_value(dist))
    summary["return_histogram"] = return_histogram(returns)
    # The tails at a glance, exactly (a histogram of wide-ranging returns bins them coarsely).
    summary["return_quantiles"] = {
        f"{level:g}": float(value_at_risk(dist, level)) for level in RETURN_QUANTILE_LEVELS}
    if not np.isnan(outcomes).all():
        summary["risk_outcome"] = float(np.nanmean(outcomes))
        for value, name in ((1, "green"), (-1, "orange"), (0, "neither")):
            summary[f"risk_outcome_{name}"] = float(np.mean(outcomes == value))
    return summary


# The levels of ``return_quantiles`` in eval.json: lower quantiles, as VaR_rho is one.
RETURN_QUANTILE_LEVELS = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)


def return_histogram(returns: np.ndarray, max_bins: int = 40) -> dict[str, list]:
    """The episode returns as a histogram: ``edges`` (bins + 1) and ``counts`` (bins).

    At most ``max_bins`` equal bins over [min, max]; fewer when the returns take fewer
    distinct values (one bin per value when they are whole numbers, as step counts are).
    """
    returns = np.asarray(returns, dtype=np.float64)
    low, high = float(returns.min()), float(returns.max())
    if low == high:
        return {"edges": [low - 0.5, high + 0.5], "counts": [int(returns.size)]}
    bins = min(max_bins, np.unique(returns).size)
    if np.all(returns == np.round(returns)) and high - low + 1 <= max_bins:
        bins, low, high = int(high - low + 1), low - 0.5, high + 0.5  # one bin per integer
    counts, edges = np.histogram(returns, bins=bins, range=(low, high))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def evaluate_policy(
    policy: BatchPolicy,
    env_config,
    utility: Utility,
    rho: float,
    episodes: int,
    seed: int,
    batch_envs: int = 1000,
    progress: bool = False,
    static_member=None,
) -> dict[str, Any]:
    """Monte Carlo figures of ``policy`` (:func:`summarize_returns`); for a member of an
    objective=static run (``static_member``) also :func:`static_summary`."""
    played = play_episodes(policy, env_config, episodes, seed, batch_envs, progress,
                           static_member)
    summary = summarize_returns(played.returns, played.outcomes, utility, rho)
    if static_member is not None:
        summary.update(static_summary(played.discounted, played.thresholds, utility, seed))
    return summary


# Bootstrap resamples behind the standard error of a Monte Carlo utility.
BOOTSTRAP_RESAMPLES = 200


def static_summary(discounted: np.ndarray, thresholds: np.ndarray, utility: Utility,
                   seed: int) -> dict[str, Any]:
    """What an objective=static run optimises, by Monte Carlo: ``mc_static_utility``, U of
    the discounted episode return sum_t gamma^t r_t (environment units), its bootstrap
    standard error ``mc_static_utility_stderr`` and the mean threshold b the episodes
    started with (``static_threshold``, learning units)."""
    values = torch.as_tensor(discounted, dtype=torch.float64)
    generator = np.random.default_rng([seed, _EVALUATION_STREAM])
    picks = torch.from_numpy(generator.integers(values.numel(),
                                                size=(BOOTSTRAP_RESAMPLES, values.numel())))
    resampled = utility(from_samples(values[picks]))
    return {
        "objective": "static",
        "mc_static_utility": float(utility(from_samples(values))),
        "mc_static_utility_stderr": float(resampled.std()),
        "static_threshold": float(np.mean(thresholds)),
    }


def evaluate_run(module, settings, run_dir: Path, steps: int, env_steps: int,
                 episodes: int | None = None) -> dict[str, Any]:
    """The final evaluation of a run: writes ``eval.json`` (and ``policy.json`` on a grid).

    On the grid worlds ``eval.json`` also holds the exact E, VaR, CVaR, U and R_s of the
    greedy policy (keys ``exact_*``), beside the Monte Carlo estimates, and the exact
    references of the per-decision and static objectives (``objective_references``).
    """
    train = settings.train
    static = getattr(module, "static", None) is not None
    summary = evaluate_policy(
        module.greedy,
        train.env,
        settings.utility,
        train.rho,
        episodes or train.evaluation.episodes,
        seed=train.seed,
        batch_envs=train.evaluation.batch_envs,
        progress=train.callbacks.progress_bar,
        static_member=module if static else None,
    )
    if static:
        # A static policy depends on (c, gamma^t, b), not on the cell alone: the exact
        # machinery evaluates cell-Markov policies, so only the references are exact here.
        references = static_references(train.env, settings.utility) or {}
        summary.update(references)
        if "static_optimum" in references:
            summary["mc_static_gap"] = references["static_optimum"] - summary["mc_static_utility"]
    else:
        summary.update(exact_policy_metrics(module.greedy, train.env, settings.utility,
                                            train.rho) or {})
        summary.update(objective_references(module.greedy, train.env, settings.utility) or {})
    summary.update(
        agent=settings.agent.name, env=train.env.id, seed=train.seed, steps=steps,
        env_steps=env_steps,
    )
    if train.env.grid_size and not static:
        table = grid_policy_table(module.greedy, train.env.grid_size)
        write_json_atomic(Path(run_dir) / "policy.json", table)
    # Last: a complete eval.json marks a finished run (rs_lightning.jobs skips it).
    write_json_atomic(Path(run_dir) / "eval.json", summary)
    return summary


def grid_policy_table(policy: BatchPolicy, size: int = 3) -> dict[str, int]:
    """The greedy action of every cell of a ``size`` x ``size`` grid, keyed ``"x,y"``."""
    return {f"{x},{y}": a for (x, y), a in greedy_cells(policy, size).items()}


def evaluate_at_setting(run, setting: dict[str, float], episodes: int | None = None
                       ) -> tuple[dict[str, Any], Path]:
    """The greedy policy of ``run`` at ``setting`` (``alpha`` and / or the risk measure's
    parameter by name): Monte Carlo and exact (grid worlds) figures, written beside
    ``eval.json`` as ``eval_<setting>.json``; returns them and the file."""
    utility = run.settings.utility
    unknown = set(setting) - {"alpha", *utility.params}
    if unknown:
        allowed = ", ".join(["alpha", *utility.params])
        raise ValueError(f"{min(unknown)}: not a setting of risk={utility.risk}; "
                         f"allowed: {allowed}")
    parameter = next((setting[n] for n in utility.params if n in setting), None)
    policy = run.module.at(setting.get("alpha", utility.alpha), parameter)
    train = run.settings.train
    rho = float(policy.utility.params.get("rho", train.rho))
    summary = evaluate_policy(policy.greedy, train.env, policy.utility, rho,
                              episodes or train.evaluation.episodes, seed=train.seed,
                              batch_envs=train.evaluation.batch_envs)
    summary.update(exact_policy_metrics(policy.greedy, train.env, policy.utility, rho) or {})
    summary.update(policy.utility.params, agent=run.settings.agent.name, env=train.env.id,
                   seed=train.seed, steps=run.steps, env_steps=run.env_steps,
                   risk_conditioned=run.settings.conditioning is not None)
    if train.env.grid_size:
        summary["policy"] = grid_policy_table(policy.greedy, train.env.grid_size)
    name = ",".join(f"{k}={v:g}" for k, v in setting.items())
    path = Path(run.run_dir) / f"eval_{name}.json"
    write_json_atomic(path, summary)
    return summary, path


def parse_setting(items: list[str]) -> dict[str, float]:
    """``["alpha=0.3", "rho=0.05"]`` -> ``{"alpha": 0.3, "rho": 0.05}``."""
    setting = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            setting[key] = float(value)
        except ValueError:
            raise ValueError(f"{key}: must be a number, got {value!r}") from None
    return setting


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-evaluate finished runs from their last checkpoint.")
    parser.add_argument("run_dirs", nargs="+",
                        help="run folders, then optionally a setting: alpha=0.3 rho=0.05")
    parser.add_argument("--episodes", type=int, help="Monte Carlo episodes (default: the run's config)")
    args = parser.parse_args(argv)
    try:
        setting = parse_setting([a for a in args.run_dirs if "=" in a])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    status = 0
    for run_dir in (Path(a) for a in args.run_dirs if "=" not in a):
        try:
            run = load_run(run_dir)
            if setting:
                summary, path = evaluate_at_setting(run, setting, args.episodes)
                print(f"{path}: E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
                      f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}")
                continue
        except (FileNotFoundError, ValueError) as error:
            print(f"error: {run_dir}: {error}", file=sys.stderr)
            status = 2
            continue
        summary = evaluate_run(
            run.module, run.settings, run_dir, steps=run.steps, env_steps=run.env_steps,
            episodes=args.episodes,
        )
        print(f"{run_dir}: E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
              f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
