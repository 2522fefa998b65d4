"""Ground truth on the grid worlds: the exact law behind a learned policy and distribution.

On the paper's grid worlds the return of any fixed policy is an exact Gaussian mixture
(:mod:`rs_lightning.references.exact`). This module applies it to what a run learned:

- :func:`exact_policy_metrics`: the exact E, VaR, CVaR, U and R_s of the greedy policy's
  undiscounted episode score S (``eval.json`` carries them beside the Monte Carlo figures);
- :func:`objective_references`: what the policy attains on the two objectives an agent can
  optimise, exactly: the per-decision fixed point of the paper's method, and the static
  utility U[sum_t gamma^t r_t] of the whole episode, the policy's and the best one's;
- :func:`exact_action_laws`: the exact law of the discounted return Z(s, a) of every first
  action ``a`` followed by the greedy policy, the law the agent's Z(s, a) should converge to;
- :func:`distribution_distances`: the Wasserstein-1 distance between learned and exact
  Z(s, a), a metric of how well the distribution is learned, logged during training.

Everything here returns ``None`` for environments that are not grid worlds (except
:func:`objective_references`, which also covers small tabular environments).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from rs_lightning.envs.grid_worlds import START, Cell
from rs_lightning.references import tabular_references
from rs_lightning.references.exact import GaussianMixture, _resolve_env, exact_return

# The utility of an exact law lives in the core layer, beside the exact reference policies.
from rs_lightning.references.exact_policies import (
    CLOSED_FORM_RISKS,
    GRID_POINTS,
    TAIL_SIGMAS,
    mixture_as_distribution,  # noqa: F401 (re-exported: callers import it from here)
    per_decision_fixed_point,
    static_optimum,
    static_utility,
)
from rs_lightning.references.exact_policies import mixture_utility as exact_utility
from rs_lightning.risk import ReturnDistribution, Utility

# A greedy policy as a function: observations [B, D] -> actions [B].
BatchPolicy = Callable[[torch.Tensor], torch.Tensor]


class ExactReferences:
    """The exact figures of one environment and risk level, as an objective asks for them
    (:meth:`rs_lightning.objectives.Objective.exact_summary`): each method gives ``{}``
    where this environment has none."""

    def __init__(self, env_config, rho: float) -> None:
        self.env_config = env_config
        self.rho = rho

    def policy_metrics(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        return exact_policy_metrics(greedy, self.env_config, utility, self.rho) or {}

    def objective_references(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        return objective_references(greedy, self.env_config, utility) or {}

    def static_references(self, utility: Utility) -> dict[str, Any]:
        return static_references(self.env_config, utility) or {}


def greedy_cells(policy: BatchPolicy, size: int) -> dict[Cell, int]:
    """The greedy action of every cell of a ``size`` x ``size`` grid."""
    cells = [(x, y) for x in range(size) for y in range(size)]
    actions = policy(torch.tensor(cells, dtype=torch.float32)).cpu().tolist()
    return {cell: int(a) for cell, a in zip(cells, actions)}


def _env_flags(env_config) -> dict[str, Any]:
    kwargs = dict(env_config.kwargs or {})
    return {"max_steps": kwargs.get("max_steps"), "trap_terminal": kwargs.get("trap_terminal")}


def exact_policy_metrics(
    policy: BatchPolicy, env_config, utility: Utility, rho: float
) -> Optional[dict[str, float]]:
    """Exact E, VaR_rho, CVaR_rho, U and E[R_s] of the greedy policy's score S (keys
    ``exact_*``), or None off the grid worlds."""
    if not env_config.grid_size:
        return None
    cells = greedy_cells(policy, env_config.grid_size)
    law = exact_return(env_config.id, cells, gamma=1.0, **_env_flags(env_config))
    mixture = law.mixture
    metrics = {
        "exact_expectation": mixture.mean(),
        "exact_var": mixture.value_at_risk(rho),
        "exact_cvar": mixture.conditional_value_at_risk(rho),
        "exact_utility": exact_utility(mixture, utility),
        "exact_risk_outcome": law.expected_risk_outcome,
    }
    for value, name in ((1, "green"), (-1, "orange"), (0, "neither")):
        metrics[f"exact_risk_outcome_{name}"] = float(law.risk_outcome_probs[value])
    return metrics


def objective_references(
    policy: BatchPolicy, env_config, utility: Utility
) -> Optional[dict[str, Any]]:
    """The exact references of the two objectives on a grid world, or None elsewhere.

    The static objective is U[sum_t gamma^t r_t] of the whole episode from the start, with
    the run's discount gamma (what ``objective=static`` optimises); the per-decision one is
    the paper's criterion, whose policy is the fixed point of utility-greedy policy iteration
    on the exact laws (:func:`~rs_lightning.references.exact_policies.per_decision_fixed_point`).

    - ``exact_static_utility``: the greedy policy's static utility;
    - ``static_optimum`` / ``static_optimum_path``: the best static utility over
      deterministic cell-Markov policies, and the path of that policy;
    - ``static_gap``: ``static_optimum - exact_static_utility`` (>= 0);
    - ``per_decision_path`` / ``per_decision_static_utility``: the path the per-decision
      fixed point takes from the start, and its static utility.

    The static optimum searches every behaviour (58 to 601 policies a world); with a risk
    measure that has no closed form on a Gaussian mixture (var and cvar have) that search
    goes through a fine CDF grid and takes minutes on the risky grid world, so only the
    policy's own static utility is given then.
    """
    if not env_config.grid_size:
        return tabular_objective_references(policy, env_config, utility)
    cells = greedy_cells(policy, env_config.grid_size)
    model = _grid_world(env_config)
    gamma = float(env_config.gamma)
    own = static_utility(model, cells, utility, gamma=gamma)
    references: dict[str, Any] = {"exact_static_utility": own}
    others = static_references(env_config, utility)
    if not others:
        return references
    references.update(others, static_gap=max(others["static_optimum"] - own, 0.0))
    return references


def tabular_objective_references(
    policy: BatchPolicy, env_config, utility: Utility
) -> Optional[dict[str, Any]]:
    """The grid worlds' keys on a small tabular gymnasium environment (Discrete spaces, a
    published model ``unwrapped.P``, at most ``tabular_references.MAX_STATES`` states), in
    the environment's reward units; None for any other environment.
    ``per_decision_path`` is the nominal path of the per-decision fixed point (the states
    it visits when no move slips, ``row,column`` on grid-shaped maps). Needs gamma < 1 (the
    learner's laws bootstrap through the time limit)."""
    model = _tabular_model(env_config)
    if model is None:
        return None
    # Observations are one-hot encoded (envs/gym_support.py): row s is state s.
    states = torch.eye(model.n_states, dtype=torch.float32)
    actions = policy(states).cpu().numpy().astype(np.int64)
    return tabular_references.references(model, actions, utility, float(env_config.gamma))


# The tabular model of each environment setting, made once a process (None: not tabular).
_TABULAR_MODELS: dict[str, Optional[tabular_references.TabularModel]] = {}


def _tabular_model(env_config) -> Optional[tabular_references.TabularModel]:
    """The model of a small tabular environment whose references apply (gamma < 1: the
    learner's laws bootstrap through the time limit), or None."""
    if float(env_config.gamma) >= 1.0:
        return None
    kwargs = dict(env_config.kwargs or {})
    max_episode_steps = getattr(env_config, "max_episode_steps", None)
    key = repr((env_config.id, sorted(kwargs.items()), max_episode_steps))
    if key not in _TABULAR_MODELS:
        try:
            env = gym.make(env_config.id, disable_env_checker=True, **kwargs)
        except Exception:  # the run made this environment, or said why it could not
            env = None
        _TABULAR_MODELS[key] = None if env is None else tabular_references.tabular_model(
            env, horizon=max_episode_steps)
        if env is not None:
            env.close()
    return _TABULAR_MODELS[key]


def static_references(env_config, utility: Utility) -> Optional[dict[str, Any]]:
    """The references of :func:`objective_references` that depend on no learned policy
    (``static_optimum``, ``static_optimum_path``, ``per_decision_path``,
    ``per_decision_static_utility``; on a small tabular environment those of
    ``tabular_references.policy_free_references``), or None elsewhere and for a measure
    without a closed form on a Gaussian mixture."""
    if not env_config.grid_size:
        if (model := _tabular_model(env_config)) is None:
            return None
        return tabular_references.policy_free_references(model, utility,
                                                         float(env_config.gamma)) or None
    if utility.alpha < 1.0 and utility.risk not in CLOSED_FORM_RISKS:
        return None
    model = _grid_world(env_config)
    gamma = float(env_config.gamma)
    best = static_optimum(model, utility, gamma=gamma)
    fixed_point = per_decision_fixed_point(model, utility, gamma=gamma)
    return {"static_optimum": best.utility, "static_optimum_path": best.path,
            "per_decision_path": fixed_point.path,
            "per_decision_static_utility": fixed_point.discounted.utility}


def _grid_world(env_config):
    """The grid world of a run's environment config, with its time limit and trap flag."""
    flags = _env_flags(env_config)
    return _resolve_env(env_config.id, flags["max_steps"], flags["trap_terminal"])


def exact_action_laws(
    policy: BatchPolicy, env_config, n_actions: int, cell: Cell = START
) -> Optional[list[GaussianMixture]]:
    """The exact law of the discounted return Z(cell, a) for every action ``a`` followed by
    the greedy ``policy``, or None off the grid worlds."""
    if not env_config.grid_size:
        return None
    cells = greedy_cells(policy, env_config.grid_size)
    return [
        exact_return(
            env_config.id, cells, gamma=env_config.gamma, start=tuple(cell), first_action=a,
            **_env_flags(env_config),
        ).mixture
        for a in range(n_actions)
    ]


def cdf_on(dist: ReturnDistribution, z: np.ndarray) -> np.ndarray:
    """P(Z <= z) of a one-dimensional distribution at the points ``z``."""
    values = dist.values.double().cpu().numpy()
    cumulative = dist.probs.double().cumsum(-1).cpu().numpy()
    index = np.searchsorted(values, z, side="right") - 1
    return np.where(index >= 0, cumulative[np.clip(index, 0, None)], 0.0)


def wasserstein_1(cdf_a: np.ndarray, cdf_b: np.ndarray, z: np.ndarray) -> float:
    """W1 = integral |F_a - F_b| dz, both CDFs given on the grid ``z``."""
    return float(np.trapezoid(np.abs(cdf_a - cdf_b), z))


def distribution_distances(
    learned: ReturnDistribution, laws: list[GaussianMixture], points: int = GRID_POINTS
) -> list[float]:
    """W1 between each action's learned law ``learned.select(a)`` (shape ``[A, K]``) and
    its exact law ``laws[a]``, on a grid covering both."""
    distances = []
    for a, law in enumerate(laws):
        dist = learned.select(a)
        lo = min(float(dist.values.min()), float(np.min(law.means - TAIL_SIGMAS * law.stds)))
        hi = max(float(dist.values.max()), float(np.max(law.means + TAIL_SIGMAS * law.stds)))
        z = np.linspace(lo, hi, points)
        distances.append(wasserstein_1(cdf_on(dist, z), np.asarray(law.cdf(z)), z))
    return distances


@torch.no_grad()
def start_state_distances(module, env_config, cell: Cell = START) -> Optional[dict[str, float]]:
    """W1 between learned and exact Z(cell, a) for a module's agent and greedy policy:
    ``w1_mean`` over actions, ``w1_greedy`` of the greedy action, ``w1_action_<a>`` each."""
    laws = exact_action_laws(module.greedy, env_config, module.n_actions, cell)
    if laws is None:
        return None
    obs = torch.tensor([cell], dtype=torch.float32, device=module.device)
    learned = module.return_distribution(obs).select(0)
    distances = distribution_distances(learned, laws)
    greedy = int(module.greedy(obs)[0])
    metrics = {f"w1_action_{a}": d for a, d in enumerate(distances)}
    metrics["w1_mean"] = float(np.mean(distances))
    metrics["w1_greedy"] = distances[greedy]
    return metrics
