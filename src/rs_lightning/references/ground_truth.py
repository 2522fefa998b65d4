"""Ground truth: what a learned policy and distribution attain against the exact references.

:func:`exact_references` gives one object per environment setting with one API, whatever
the world: a paper grid world (Gaussian-mixture laws, :class:`GridWorldReferences`), a small
tabular gymnasium environment (atom-grid laws, :class:`TabularReferences`), or none. Both
kinds run the same policy iteration (:mod:`~rs_lightning.references.policy_iteration`) and
give the same keys:

- ``policy_metrics``: the exact E, VaR, CVaR, U and R_s of the greedy policy's undiscounted
  episode score S (grid worlds; ``eval.json`` carries them beside the Monte Carlo figures);
- ``objective_references``: what the policy attains on the two objectives an agent can
  optimise, exactly: the per-decision fixed point of the paper's method, and the static
  utility U[sum_t gamma^t r_t] of the whole episode, the policy's and the best one's;
- ``static_references``: the part of those that needs no learned policy.

Beside them, on the grid worlds: :func:`exact_action_laws`, the exact law of Z(s, a) of
every first action followed by the greedy policy, and :func:`distribution_distances`, the
Wasserstein-1 distance between learned and exact Z(s, a), logged during training.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np
import torch

from rs_lightning.envs.grid_worlds import START, Cell
from rs_lightning.references import tabular_references
from rs_lightning.references.exact import (
    GaussianMixture,
    _resolve_env,
    exact_return,
    uniform_random_policy,
)

# The utility of an exact law lives in the core layer, beside the exact reference policies.
from rs_lightning.references.exact_policies import (
    CLOSED_FORM_RISKS,
    GRID_POINTS,
    TAIL_SIGMAS,
    mixture_as_distribution,  # noqa: F401 (re-exported: callers import it from here)
    per_decision_fixed_point,
    static_entropic_optimum,
    static_optimum,
    static_utility,
)
from rs_lightning.references.exact_policies import mixture_utility as exact_utility
from rs_lightning.risk import ReturnDistribution, Utility

# A greedy policy as a function: observations [B, D] -> actions [B].
BatchPolicy = Callable[[torch.Tensor], torch.Tensor]


class ExactReferences:
    """The exact figures of one environment setting and risk level, as an objective asks
    for them (:meth:`rs_lightning.objectives.Objective.exact_summary`). This base is the
    world without references: every method gives ``{}``. :func:`exact_references` picks the
    world's kind; both kinds give the same keys (:func:`objective_references`)."""

    def __init__(self, env_config, rho: float) -> None:
        self.env_config = env_config
        self.rho = rho
        self.gamma = float(env_config.gamma)

    def policy_metrics(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        """E, VaR, CVaR, U and the risk outcome of the greedy policy's undiscounted score."""
        return {}

    def objective_references(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        """The greedy policy's static utility against the optimum and the per-decision
        fixed point: :func:`objective_references`."""
        return {}

    def static_references(self, utility: Utility) -> dict[str, Any]:
        """The references that need no learned policy: :func:`static_references`."""
        return {}

    def uniform_random_utility(self, utility: Utility) -> Optional[float]:
        """U[sum_t gamma^t r_t] of the policy drawing every action uniformly at random,
        exactly (None where the world has no references)."""
        return None

    def uniform_random_reference(self, utility: Utility
                                 ) -> tuple[Optional[float], float, float, str]:
        """(U_rand, the two ends of the interval that holds its true value, its kind:
        ``exact``, ``interval`` or ``estimate``)."""
        value = self.uniform_random_utility(utility)
        return value, value, value, "exact"


class GridWorldReferences(ExactReferences):
    """The paper's grid worlds: every fixed policy's return is an exact Gaussian mixture
    (:mod:`~rs_lightning.references.exact`), the fixed point comes from policy iteration on
    those laws and the static optimum from a search over every cell-Markov behaviour
    (:mod:`~rs_lightning.references.exact_policies`)."""

    def __init__(self, env_config, rho: float) -> None:
        super().__init__(env_config, rho)
        flags = _env_flags(env_config)
        self.world = _resolve_env(env_config.id, flags["max_steps"], flags["trap_terminal"])

    def cells(self, greedy: BatchPolicy) -> dict[Cell, int]:
        return greedy_cells(greedy, self.env_config.grid_size)

    def policy_metrics(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        law = exact_return(self.world, self.cells(greedy), gamma=1.0)
        mixture = law.mixture
        metrics = {
            "exact_expectation": mixture.mean(),
            "exact_var": mixture.value_at_risk(self.rho),
            "exact_cvar": mixture.conditional_value_at_risk(self.rho),
            "exact_utility": exact_utility(mixture, utility),
            "exact_risk_outcome": law.expected_risk_outcome,
        }
        for value, name in ((1, "green"), (-1, "orange"), (0, "neither")):
            metrics[f"exact_risk_outcome_{name}"] = float(law.risk_outcome_probs[value])
        return metrics

    def objective_references(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        own = static_utility(self.world, self.cells(greedy), utility, gamma=self.gamma)
        return _against_references(own, self.static_references(utility))

    def static_references(self, utility: Utility) -> dict[str, Any]:
        if utility.alpha == 0.0 and utility.risk == "entropic":  # over every policy
            best = static_entropic_optimum(self.world, utility.params["beta"], gamma=self.gamma)
            return {"static_optimum": best.utility}
        # The search over every behaviour needs R in closed form on a mixture: through a
        # fine CDF grid it takes minutes on the risky grid world.
        if utility.alpha < 1.0 and utility.risk not in CLOSED_FORM_RISKS:
            return {}
        best = static_optimum(self.world, utility, gamma=self.gamma)
        fixed_point = per_decision_fixed_point(self.world, utility, gamma=self.gamma)
        return {"static_optimum": best.utility, "static_optimum_path": best.path,
                "per_decision_path": fixed_point.path,
                "per_decision_static_utility": fixed_point.discounted.utility}

    def uniform_random_utility(self, utility: Utility) -> Optional[float]:
        law = exact_return(self.world, uniform_random_policy(self.world.action_space.n),
                           gamma=self.gamma)
        return exact_utility(law.mixture, utility)

    def action_laws(self, greedy: BatchPolicy, n_actions: int, cell: Cell = START
                    ) -> list[GaussianMixture]:
        """The exact law of the discounted return Z(cell, a) of every first action ``a``
        followed by the greedy policy."""
        cells = self.cells(greedy)
        return [exact_return(self.world, cells, gamma=self.gamma, start=tuple(cell),
                             first_action=a).mixture for a in range(n_actions)]


class TabularReferences(ExactReferences):
    """A small tabular gymnasium environment (Discrete spaces, a published model
    ``unwrapped.P``, at most ``tabular_references.MAX_STATES`` states; gamma < 1, as the
    learner's laws bootstrap through the time limit): laws on a grid of atoms, the fixed
    point by the same policy iteration, the static optimum by dynamic programming on the
    augmented state (:mod:`~rs_lightning.references.tabular_references`), in the
    environment's reward units. ``per_decision_path`` is the fixed point's nominal path
    (the states it visits when no move slips, ``row,column`` on grid-shaped maps)."""

    def __init__(self, env_config, rho: float, model: tabular_references.TabularModel) -> None:
        super().__init__(env_config, rho)
        self.model = model

    def objective_references(self, greedy: BatchPolicy, utility: Utility) -> dict[str, Any]:
        # Observations are one-hot encoded (envs/gym_support.py): row s is state s.
        states = torch.eye(self.model.n_states, dtype=torch.float32)
        actions = greedy(states).cpu().numpy().astype(np.int64)
        return tabular_references.references(self.model, actions, utility, self.gamma)

    def static_references(self, utility: Utility) -> dict[str, Any]:
        return tabular_references.policy_free_references(self.model, utility, self.gamma)

    def uniform_random_utility(self, utility: Utility) -> Optional[float]:
        return tabular_references.uniform_random_utility(self.model, utility, self.gamma)

    def uniform_random_reference(self, utility: Utility
                                 ) -> tuple[Optional[float], float, float, str]:
        return tabular_references.uniform_random_reference(self.model, utility, self.gamma)

    def stored_policy_references(self, actions, utility: Utility) -> dict[str, Any]:
        """:meth:`objective_references` of a policy stored as one action a state
        (``eval.json``'s ``greedy_actions``)."""
        return tabular_references.references(self.model, np.asarray(actions, dtype=np.int64),
                                             utility, self.gamma)


def exact_references(env_config, rho: float) -> ExactReferences:
    """The exact references of a run's environment: a grid world's, a small tabular
    environment's, or none (every method ``{}``). The one place that tells them apart."""
    if env_config.grid_size:
        return GridWorldReferences(env_config, rho)
    model = _tabular_model(env_config)
    if model is not None:
        return TabularReferences(env_config, rho, model)
    return ExactReferences(env_config, rho)


def _against_references(own: float, references: dict[str, Any]) -> dict[str, Any]:
    """A policy's static utility beside the policy-free references, with its gap."""
    out: dict[str, Any] = {"exact_static_utility": own, **references}
    if "static_optimum" in references:
        out["static_gap"] = max(references["static_optimum"] - own, 0.0)
    return out


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
    return exact_references(env_config, rho).policy_metrics(policy, utility) or None


def objective_references(
    policy: BatchPolicy, env_config, utility: Utility
) -> Optional[dict[str, Any]]:
    """The exact references of the two objectives, or None where the world has none.

    The static objective is U[sum_t gamma^t r_t] of the whole episode from the start, with
    the run's discount gamma (what ``objective=static`` optimises); the per-decision one is
    the paper's criterion, whose policy is the fixed point of utility-greedy policy iteration
    on the exact laws (:mod:`~rs_lightning.references.policy_iteration`).

    - ``exact_static_utility``: the greedy policy's static utility;
    - ``static_optimum``: the best static utility (grid worlds: over deterministic
      cell-Markov policies, with ``static_optimum_path`` the path of that policy; tabular
      worlds: over policies of the state, step and return so far, with E, VaR and CVaR;
      with VaR a lower bound, and ``static_optimum_upper`` / ``static_gap_upper`` above);
    - ``static_gap``: ``static_optimum - exact_static_utility`` (>= 0);
    - ``per_decision_path`` / ``per_decision_static_utility``: the path the per-decision
      fixed point takes from the start, and its static utility.

    On the grid worlds the static optimum searches every behaviour (58 to 601 policies a
    world); with a risk measure that has no closed form on a Gaussian mixture (var and
    cvar have) only the policy's own static utility is given.
    """
    return exact_references(env_config, 0.1).objective_references(policy, utility) or None


def static_references(env_config, utility: Utility) -> Optional[dict[str, Any]]:
    """The references of :func:`objective_references` that depend on no learned policy,
    or None where the world or the measure has none."""
    return exact_references(env_config, 0.1).static_references(utility) or None


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


def exact_action_laws(
    policy: BatchPolicy, env_config, n_actions: int, cell: Cell = START
) -> Optional[list[GaussianMixture]]:
    """The exact law of the discounted return Z(cell, a) for every action ``a`` followed by
    the greedy ``policy``, or None off the grid worlds."""
    references = exact_references(env_config, 0.1)
    if not isinstance(references, GridWorldReferences):
        return None
    return references.action_laws(policy, n_actions, cell)


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
    ``w1_mean`` over actions, ``w1_greedy`` of the greedy action, ``w1_action_<a>`` each
    (an agent whose law is the state's, one law for every action: ``w1_greedy`` only)."""
    laws = exact_action_laws(module.greedy, env_config, module.n_actions, cell)
    if laws is None:
        return None
    obs = torch.tensor([cell], dtype=torch.float32, device=module.device)
    learned = module.return_distribution(obs).select(0)
    greedy = int(module.greedy(obs)[0])
    if learned.values.shape[0] != len(laws):
        # One law of the state (an on-policy critic's): that of the action the policy takes.
        return {"w1_greedy": distribution_distances(learned, [laws[greedy]])[0]}
    distances = distribution_distances(learned, laws)
    metrics = {f"w1_action_{a}": d for a, d in enumerate(distances)}
    metrics["w1_mean"] = float(np.mean(distances))
    metrics["w1_greedy"] = distances[greedy]
    return metrics
