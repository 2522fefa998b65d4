"""Monte Carlo evaluation of a greedy policy on the undiscounted episode return S.

Evaluation only reads a policy (a function from a batch of observations to actions); it
never changes the module. Episode ``i`` is reset with the ``i``-th seed drawn from a
``SeedSequence`` of the run's seed: runs with different seeds get independent episodes, the
same run always the same ones (also across periodic evaluations, whose differences then come
from the policy alone), whatever the number of environments run side by side.

    rs-lightning evaluate outputs/runs/<run> --overwrite [--episodes N]

re-evaluates a finished run from its last checkpoint and replaces its ``eval.json`` (only with
``--overwrite``: without it the command refuses, since ``eval.json`` marks the run finished);

    rs-lightning evaluate outputs/runs/<run> alpha=0.3 rho=0.05

evaluates the greedy policy at that setting instead (``alpha=`` and the risk measure's
parameter by its name; either may be left out), Monte Carlo and, on the grid worlds, exactly,
into ``eval_alpha=0.3,rho=0.05.json`` beside ``eval.json`` (which stays as it is). A
risk-conditioned run acts at the setting it is given; a distributional value-based run
re-weighs its one learned law with it (docs/guides/conditioning.md, "Acting at a setting");
a run whose greedy policy cannot depend on the setting (:func:`fixed_policy_reason`) is
refused at any setting but its own.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from rs_lightning.config.schema import SEED_LIMIT
from rs_lightning.engine.rollout import Rollout, act_on_distinct
from rs_lightning.envs.copies import make_copies
from rs_lightning.files import write_json_atomic
from rs_lightning.objectives.per_decision import PerDecision
from rs_lightning.references.ground_truth import (
    BatchPolicy,
    exact_policy_metrics,
    exact_references,
    greedy_cells,
)
from rs_lightning.risk import (
    Utility,
    conditional_value_at_risk,
    expectation,
    from_samples,
    value_at_risk,
)


class FunctionPolicy:
    """A greedy function of the observations as a rollout policy of one member, on the
    per-decision objective of ``utility`` (its episodes carry no state)."""

    device = torch.device("cpu")

    def __init__(self, greedy: BatchPolicy, utility: Utility) -> None:
        self.greedy = greedy
        self.objective = PerDecision(utility)

    def network(self, obs):
        raise TypeError("a greedy function has no return distribution")

    def act(self, obs: np.ndarray, env_step: int, state) -> np.ndarray:
        return act_on_distinct(self.greedy, obs)


def rollout_policy(policy, utility: Utility):
    """A member (:class:`~rs_lightning.engine.learner.MemberPolicy`, with its objective) as
    it is, a greedy function wrapped (:class:`FunctionPolicy`)."""
    return policy if hasattr(policy, "act") else FunctionPolicy(policy, utility)


# Tags the evaluation's random stream, apart from any other use of the run's seed.
_EVALUATION_STREAM = 0xE7A1


def episode_seeds(seed: int, episodes: int) -> np.ndarray:
    """The reset seed of each evaluation episode of a run with seed ``seed``."""
    return np.random.SeedSequence([seed, _EVALUATION_STREAM]).generate_state(episodes)


class PlayedEpisodes(NamedTuple):
    returns: np.ndarray  # undiscounted S per episode
    outcomes: np.ndarray  # R_s per episode (NaN where the env has none)
    discounted: np.ndarray  # sum_t gamma^t r_t per episode (environment units)
    constants: np.ndarray | None  # what the objective's episode state fixed for each episode [E, ...]


# An evaluation episode is cut after this many steps, with a warning: in an environment
# without a time limit, a greedy policy that never ends an episode would hold the evaluation
# (and a stop signal waiting for it) forever.
EPISODE_STEP_CAP = 100_000


class EvaluationStopped(Exception):
    """An evaluation given up at its ``stop`` signal (a SIGTERM during training)."""


def play_episodes(policy, env_config, episodes: int, seed: int, batch_envs: int = 1000,
                  progress: bool = False, stop: Callable[[], bool] | None = None
                  ) -> PlayedEpisodes:
    """Run ``episodes`` episodes of a member's greedy policy (a rollout policy of one member,
    :func:`rollout_policy`): the training's rollout step with epsilon 0.

    ``min(episodes, batch_envs)`` env copies (the engine's :mod:`rs_lightning.envs.copies`)
    play them side by side, with the objective's episode state; a copy whose episode ends
    starts the next one, reset with that episode's seed. ``progress`` shows a bar with
    episodes per second and the running mean return and R_s. An episode still running after
    :data:`EPISODE_STEP_CAP` steps is cut there (its R_s is NaN), with a warning. ``stop``,
    asked before every step of the copies, gives the evaluation up (:class:`EvaluationStopped`)
    when it says so: a signal need not wait for episodes that take long to end.
    """
    n = min(episodes, batch_envs)
    seeds = episode_seeds(seed, episodes)
    gamma = float(env_config.gamma)
    state = policy.objective.episode_state([seed], n, gamma, training=False)
    copies = make_copies(env_config, [int(s) for s in seeds[:n]], device=policy.device)
    rollout = Rollout(copies, state, 1, n,
                      getattr(env_config, "reward_scale", 1.0),
                      getattr(env_config, "reward_clip", None))
    bar = _EpisodeProgress(episodes) if progress else None
    returns = np.zeros(episodes)
    outcomes = np.full(episodes, np.nan)
    discounted = np.zeros(episodes)
    constants = None
    discount = np.ones(n)
    episode_of = np.arange(n)  # which episode each copy is playing
    lengths = np.zeros(n, dtype=np.int64)  # steps of each copy's episode so far
    warned = False
    active = np.ones(n, dtype=bool)
    next_episode = n
    while active.any():
        if stop is not None and stop():
            if bar is not None:
                bar.close()
            raise EvaluationStopped(f"the evaluation was stopped after {next_episode - n} of "
                                    f"{episodes} episodes had started and ended")
        step = rollout.step(policy, 0)
        if step.constants is not None:
            if constants is None:
                constants = np.zeros((episodes, *step.constants.shape[1:]))
            constants[episode_of[active]] = step.constants[active]
        reward = step.copies.reward
        returns[episode_of[active]] += reward[active]
        discounted[episode_of[active]] += (discount * reward)[active]
        lengths += 1
        episode_end = step.copies.ended
        cut = (lengths >= EPISODE_STEP_CAP) & ~episode_end & active
        if cut.any():
            if not warned:
                warned = True
                print(f"warning: an evaluation episode of {env_config.id} ran "
                      f"{EPISODE_STEP_CAP:,} steps without ending and was cut there: the "
                      "environment has no time limit that ends it (set env.max_episode_steps)",
                      file=sys.stderr)
            rollout.state.restart(cut)
            episode_end = episode_end | cut
        lengths[episode_end] = 0
        discount = np.where(episode_end, 1.0, discount * gamma)
        ended = np.flatnonzero(episode_end & active)
        if ended.size:
            outcome = np.where(cut, np.nan, step.copies.risk_outcome)
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
                rollout.copies.reseed(restart, restart_seeds)
    if bar is not None:
        bar.close()
    return PlayedEpisodes(returns, outcomes, discounted, constants)


class _EpisodeProgress:
    """A tqdm bar over evaluation episodes with the running mean of S and R_s, on a
    terminal only, cleared when it ends: the caller prints the figures once. Elsewhere (a
    log file, a pipe) nothing, no carriage-return frames."""

    def __init__(self, episodes: int, refresh_every: int = 500) -> None:
        from tqdm.auto import tqdm

        self.in_place = sys.stderr.isatty()
        self.bar = tqdm(total=episodes, desc="evaluation", unit="episode", dynamic_ncols=True,
                        disable=not self.in_place, leave=False)
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
    policy,
    env_config,
    utility: Utility,
    rho: float,
    episodes: int,
    seed: int,
    batch_envs: int = 1000,
    progress: bool = False,
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Monte Carlo figures of a member's greedy policy, or of a greedy function
    (:func:`rollout_policy`; :func:`summarize_returns`), with what its objective adds
    (:meth:`~rs_lightning.objectives.Objective.monte_carlo_summary`); ``stop``: as for
    :func:`play_episodes`."""
    policy = rollout_policy(policy, utility)
    played = play_episodes(policy, env_config, episodes, seed, batch_envs, progress, stop)
    return summarize_played(policy, played, utility, rho, seed)


def summarize_played(policy, played: PlayedEpisodes, utility: Utility, rho: float,
                     seed: int) -> dict[str, Any]:
    """:func:`evaluate_policy`'s figures of episodes already played by the rollout policy
    ``policy`` (episodes of one policy serve every utility it is judged by)."""
    summary = summarize_returns(played.returns, played.outcomes, utility, rho)
    generator = np.random.default_rng([seed, _EVALUATION_STREAM])
    summary.update(policy.objective.monte_carlo_summary(played.discounted, played.constants,
                                                        generator))
    return summary


def evaluate_run(module, run_config, run_dir: Path, steps: int, env_steps: int,
                 episodes: int | None = None) -> dict[str, Any]:
    """The final evaluation of a run's member ``module``: writes ``eval.json`` (and
    ``policy.json`` on a grid).

    On the grid worlds ``eval.json`` also holds what the objective computes exactly
    (:meth:`~rs_lightning.objectives.Objective.exact_summary`): for a policy of the
    observation alone the exact E, VaR, CVaR, U and R_s of the greedy policy (keys
    ``exact_*``) and the exact references of the per-decision and static objectives.
    """
    train = run_config.train
    summary = evaluate_policy(
        module,
        train.env,
        run_config.utility,
        train.rho,
        episodes or train.evaluation.episodes,
        seed=train.seed,
        batch_envs=train.evaluation.batch_envs,
        progress=train.callbacks.progress_bar,
    )
    summary.update(module.objective.exact_summary(exact_references(train.env, train.rho),
                                                  module.greedy, summary))
    summary.update(
        agent=run_config.agent.name, env=train.env.id, seed=train.seed, steps=steps,
        env_steps=env_steps,
    )
    if train.env.grid_size and module.objective.observation_markov:
        table: dict[str, Any] = dict(grid_policy_table(module.greedy, train.env.grid_size))
        if module.agent.problem.action_names:
            table[POLICY_NAMES_KEY] = list(module.agent.problem.action_names)
        write_json_atomic(Path(run_dir) / "policy.json", table)
    # Last: a complete eval.json marks a finished run (rs_lightning.app.jobs skips it).
    write_json_atomic(Path(run_dir) / "eval.json", summary)
    return summary


def grid_policy_table(policy: BatchPolicy, size: int = 3) -> dict[str, int]:
    """The greedy action of every cell of a ``size`` x ``size`` grid, keyed ``"x,y"``."""
    return {f"{x},{y}": a for (x, y), a in greedy_cells(policy, size).items()}


# policy.json: ``"x,y"`` -> the action's number for every cell, and under this key the
# name of each action where the environment names them (files without it stay valid).
POLICY_NAMES_KEY = "action_names"


def read_policy_table(table: dict[str, Any]) -> tuple[dict[tuple[int, int], int],
                                                      tuple[str, ...]]:
    """A ``policy.json`` read: the action of every cell ``(x, y)`` and the actions' names
    (``()`` in a file that has none)."""
    names = tuple(table.get(POLICY_NAMES_KEY) or ())
    cells = {tuple(int(v) for v in key.split(",")): int(action)
             for key, action in table.items() if key != POLICY_NAMES_KEY}
    return cells, names


# The most Monte Carlo episodes one evaluation plays (the API's ``evaluate``, ``rs-lightning
# evaluate --episodes`` and ``frontier --episodes`` a setting): each keeps its returns in memory,
# and a count past it is a typing slip more often than a plan.
MAX_EVALUATION_EPISODES = 10_000_000


def check_episodes(episodes: Any, key: str = "episodes") -> int:
    """``episodes`` as an int in [1, MAX_EVALUATION_EPISODES], else ValueError naming ``key``."""
    if isinstance(episodes, bool) or not isinstance(episodes, (int, np.integer)) or not (
            1 <= episodes <= MAX_EVALUATION_EPISODES):
        raise ValueError(f"{key}: must be a whole number of episodes in [1, "
                         f"{MAX_EVALUATION_EPISODES:,}], got {episodes!r}")
    return int(episodes)


def check_seed(seed: Any, key: str = "seed") -> int:
    """``seed`` as an int in [0, 2^32) (NumPy's range), else ValueError naming ``key``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not (
            0 <= seed < SEED_LIMIT):
        raise ValueError(f"{key}: must be a whole number in [0, 2^32), got {seed!r}")
    return int(seed)


def check_alpha(alpha: Any, key: str = "alpha") -> float:
    """``alpha`` as a float in [0, 1] (as the config takes it), else ValueError naming ``key``."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(alpha, bool) or not 0.0 <= value <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"{key}: must be in [0, 1], got {alpha!r}")
    return value


def fixed_policy_reason(policy) -> str | None:
    """Why the greedy policy of a member (:class:`~rs_lightning.engine.learner.MemberPolicy`)
    is the same at every setting (alpha and the measure's parameter), or None when a setting
    can change it: an actor-critic that is not risk-conditioned (its actor acts alone), an
    agent without a distribution (DQN's point Q), or U = E at every alpha (risk=expectation).
    A tool asked for another setting of such a member refuses rather than report the same
    policy as if it were another one."""
    agent = policy.agent
    name = agent.config.name
    conditioned = getattr(agent.config, "risk_conditioned", False)
    if agent.continuous_actions and not conditioned:
        return (f"agent={name} is an actor-critic trained at one setting (not risk-conditioned): "
                "its actor takes the same action at every alpha and risk parameter (train with "
                "agent.risk_conditioned=true to act at others)")
    if not agent.distributional:
        return (f"agent={name} learns no distribution (a point Q): every setting ranks its "
                "actions alike, so its greedy policy is the same at every alpha")
    if policy.utility.risk == "expectation" and not conditioned:
        return ("risk=expectation: U = E at every alpha, so the greedy policy is the same at "
                "every setting")
    return None


# What a point at another setting means, by whether the run is risk-conditioned (written into
# the files of evaluations at a setting and of the frontier).
SETTING_MEANING = {
    True: "the policy the conditioned network chose at this setting",
    False: "the run's one learned law re-weighed with this setting (not retrained)",
}


def policy_at(policy, alpha: Any = None, parameter: Any = None):
    """The member ``policy`` acting at ``alpha`` (None: its own) and the measure's
    ``parameter`` (None: its own), every value checked first: alpha in [0, 1], the parameter
    in its measure's domain (the measure checks it), a conditioned member within the ranges it
    trained on, and no other setting for a member whose greedy policy cannot depend on it
    (:func:`fixed_policy_reason`). ValueError in one line otherwise."""
    utility = policy.utility
    alpha = utility.alpha if alpha is None else check_alpha(alpha)
    if parameter is not None:
        names = list(utility.params)
        if len(names) != 1:
            raise ValueError(f"risk={utility.risk} has no parameter to set")
        try:
            parameter = float(parameter)
        except (TypeError, ValueError):
            raise ValueError(f"{names[0]}: must be a number, got {parameter!r}") from None
    own = parameter is None or parameter == next(iter(utility.params.values()))
    if alpha != utility.alpha or not own:
        reason = fixed_policy_reason(policy)
        if reason is not None:
            raise ValueError(reason)
    return policy.at(alpha, parameter)


def evaluate_at_setting(run, setting: dict[str, float], episodes: int | None = None
                       ) -> tuple[dict[str, Any], Path]:
    """The greedy policy of ``run`` at ``setting`` (``alpha`` and / or the risk measure's
    parameter by name; :func:`check_setting`): Monte Carlo and exact (grid worlds) figures,
    written beside ``eval.json`` as :func:`setting_file`; returns them and the file."""
    policy = check_setting(run, setting)
    train = run.run_config.train
    rho = float(policy.utility.params.get("rho", train.rho))
    summary = evaluate_policy(policy, train.env, policy.utility, rho,
                              episodes or train.evaluation.episodes, seed=train.seed,
                              batch_envs=train.evaluation.batch_envs)
    summary.update(exact_policy_metrics(policy.greedy, train.env, policy.utility, rho) or {})
    conditioned = bool(run.run_config.agent.risk_conditioned)
    meaning = (SETTING_MEANING[conditioned] if policy.utility != run.module.utility
               else "the run's own setting")
    summary.update(policy.utility.params, agent=run.run_config.agent.name, env=train.env.id,
                   seed=train.seed, steps=run.steps, env_steps=run.env_steps,
                   risk_conditioned=conditioned, meaning=meaning)
    if train.env.grid_size:
        summary["policy"] = grid_policy_table(policy.greedy, train.env.grid_size)
    path = setting_file(run.run_dir, setting)
    write_json_atomic(path, summary)
    return summary, path


def check_setting(run, setting: dict[str, float]):
    """The member of ``run`` at ``setting`` (:func:`policy_at`); ValueError in one line for a
    key that is not ``alpha`` or the run's measure's parameter, or a value it refuses."""
    utility = run.run_config.utility
    unknown = set(setting) - {"alpha", *utility.params}
    if unknown:
        allowed = ", ".join(["alpha", *utility.params])
        raise ValueError(f"{min(unknown)}: not a setting of risk={utility.risk}; "
                         f"allowed: {allowed}")
    parameter = next((setting[n] for n in utility.params if n in setting), None)
    return policy_at(run.module, setting.get("alpha"), parameter)


def setting_file(run_dir: Path, setting: dict[str, float]) -> Path:
    """Where the evaluation of a run at ``setting`` goes: ``eval_alpha=0.3,rho=0.05.json``."""
    name = ",".join(f"{k}={v:g}" for k, v in setting.items())
    return Path(run_dir) / f"eval_{name}.json"


def setting_keys() -> set[str]:
    """The names a setting may take on the command line: ``alpha`` and the parameter every
    registered risk measure declares (``rho``, ``eta``, ...)."""
    from rs_lightning.risk import RISK_MEASURES, declared_parameter

    return {"alpha"} | {declared_parameter(m) for m in RISK_MEASURES} - {None}


def parse_setting(items: list[str]) -> dict[str, float]:
    """``["alpha=0.3", "rho=0.05"]`` -> ``{"alpha": 0.3, "rho": 0.05}``; ValueError naming the
    key of a value that is not a finite number, or of a key given twice."""
    setting: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key in setting:
            raise ValueError(f"{key}: given twice ({key}={setting[key]:g} and {item})")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(f"{key}: must be a finite number, got {value!r}")
        setting[key] = number
    return setting
