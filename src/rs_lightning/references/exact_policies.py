"""Exact reference policies on the grid worlds: the paper's per-decision criterion and the
static objective, both computed on the exact return laws of :mod:`rs_lightning.references.exact`.

Per-decision (the paper's method): the agent acts greedily on the utility of the
law of the return from the current state-action,
pi(s) = argmax_a U[Z^pi(s, a)] (paper, equation ``EquationRiskSensitivePolicy``), with
U = alpha E + (1 - alpha) R_rho (``EquationUtilityFunction``) and Z^pi(s, a) the discounted
return of taking ``a`` in ``s`` and following ``pi`` afterwards. :func:`per_decision_fixed_point`
finds the policy that is greedy on its own laws by policy iteration on the exact laws, and
:func:`per_decision_switch_points` the alphas at which its path from the start changes.

Static: the utility of the return of the whole episode, U[sum_t gamma^t r_t],
maximised over policies as a whole (:func:`static_optimum`). The two differ because
U is not additive: the per-decision criterion judges every state's future alone, whatever
the episode has already earned (``TwoStage`` is a world built to show it).

Everything here is a pure function of its arguments (results are cached by those
arguments); utilities come from :class:`rs_lightning.risk.Utility`. ``env`` is a short name
("risky_grid_world"), gymnasium id, GridWorld class or instance, as for
:func:`~rs_lightning.references.exact.exact_return`: an instance brings its own ``max_steps`` and
``trap_terminal`` (``RiskyGridWorld(trap_terminal=True)``), a name or class the defaults.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch

from rs_lightning.envs.grid_worlds import (
    ACTION_NAMES,
    CELLS,
    REWARD_STD,
    RIGHT,
    START,
    Cell,
    GridWorld,
)
from rs_lightning.references.exact import (
    ExactReturn,
    GaussianMixture,
    _resolve_env,
    exact_return,
)
from rs_lightning.references.entropic import EntropicOptimum, entropic_programme
from rs_lightning.references.policy_iteration import (
    CYCLE,
    MAX_ITERATIONS,
    Iteration,
    PolicyKey,  # the action of every cell, in the order of CELLS
    SwitchPoint,
    greedy,
    iterate,
    path_switch_points,
    settled_path,
)
from rs_lightning.risk import ReturnDistribution, Utility, combine_utility, from_cdf
from rs_lightning.risk.measures import spectrum

Env = Union[str, type[GridWorld], GridWorld]
# Model settings that decide the laws, hashable for the caches: (class, max_steps, trap_terminal).
_ModelKey = tuple[type, int, Optional[bool]]

N_ACTIONS = len(ACTION_NAMES)
PATH_NAMES: dict[int, str] = {+1: "green", -1: "orange", 0: "neither"}  # by R_s
# The alpha grid of sweeps: 0 to 1 in steps of 0.001.
ALPHA_GRID: tuple[float, ...] = tuple(np.round(np.linspace(0.0, 1.0, 1001), 3).tolist())
# Utilities closer than this are ties: VaR is found by bisection to about 1e-15.
_TIE = 1e-12

# --------------------------------------------------------------------------- utility of a law

# Risk measures with a closed form on a Gaussian mixture; others go through a fine CDF grid.
CLOSED_FORM_RISKS = ("var", "cvar", "spectral")
GRID_POINTS = 4001
TAIL_SIGMAS = 8.0


def mixture_as_distribution(
    mixture: GaussianMixture, points: int = GRID_POINTS
) -> ReturnDistribution:
    """A Gaussian mixture as the common discrete form, through its CDF on a fine grid that
    covers every component to ``TAIL_SIGMAS`` standard deviations."""
    lo = float(np.min(mixture.means - TAIL_SIGMAS * mixture.stds))
    hi = float(np.max(mixture.means + TAIL_SIGMAS * mixture.stds))
    grid = np.linspace(lo, hi, points)
    return from_cdf(torch.from_numpy(grid), torch.from_numpy(np.asarray(mixture.cdf(grid))))


def mixture_risk(mixture: GaussianMixture, utility: Utility) -> float:
    """R[mixture] for the utility's risk measure: closed form for VaR / CVaR / E and a
    spectral measure (its CVaRs), else the registered measure applied to the mixture on a
    fine grid."""
    if utility.risk == "expectation":
        return mixture.mean()
    if utility.risk == "spectral":
        levels, weights = spectrum(utility.params["levels"], utility.params["weights"])
        return sum(w * mixture.risk(rho, "cvar") for rho, w in zip(levels, weights))
    if utility.risk in CLOSED_FORM_RISKS:
        return mixture.risk(utility.params["rho"], utility.risk)
    if utility.risk == "entropic":  # -1/beta log sum_i w_i exp(-beta mu_i + beta^2 sigma_i^2 / 2)
        beta = float(utility.params["beta"])
        terms = np.log(mixture.weights) - beta * mixture.means + 0.5 * (beta * mixture.stds) ** 2
        top = terms.max()
        return float(-(top + np.log(np.exp(terms - top).sum())) / beta)
    return float(utility.risk_value(mixture_as_distribution(mixture)))


def mixture_utility(mixture: GaussianMixture, utility: Utility) -> float:
    """U[mixture] = alpha E + (1 - alpha) R (paper, ``EquationUtilityFunction``)."""
    if utility.alpha == 1.0:  # R is not needed (nor, maybe, its parameters)
        return mixture.mean()
    return float(combine_utility(utility.alpha, mixture.mean(), mixture_risk(mixture, utility)))


@dataclass(frozen=True)
class EpisodeReport:
    """What ``eval.json`` reports of a policy's return, exactly: E, VaR_rho, CVaR_rho, the
    utility U, and the law of R_s (+1 green, -1 orange, 0 neither)."""

    expectation: float
    value_at_risk: float
    conditional_value_at_risk: float
    utility: float
    risk_outcome_probs: dict[int, float]

    @property
    def path(self) -> str:
        return path_of(self.risk_outcome_probs)


def path_of(risk_outcome_probs: Mapping[int, float]) -> str:
    """"green", "orange" or "neither": the most probable R_s of an episode (the grid worlds'
    risk outcome: a goal, or the trap's shortcut, ends most episodes of a deterministic
    policy; ties go to the order green, orange, neither)."""
    best = max(PATH_NAMES, key=lambda k: (risk_outcome_probs.get(k, 0.0), k == 1, k == -1))
    return PATH_NAMES[best]


def episode_report(
    law: ExactReturn, utility: Utility, rho: Optional[float] = None
) -> EpisodeReport:
    """E, VaR_rho, CVaR_rho and U of an exact law; ``rho`` defaults to the utility's."""
    rho = utility.params.get("rho", 0.1) if rho is None else rho
    mixture = law.mixture
    return EpisodeReport(
        expectation=mixture.mean(),
        value_at_risk=mixture.value_at_risk(rho),
        conditional_value_at_risk=mixture.conditional_value_at_risk(rho),
        utility=mixture_utility(mixture, utility),
        risk_outcome_probs=dict(law.risk_outcome_probs),
    )


# --------------------------------------------------------------------------- shared helpers


def _model_key(env: Env) -> _ModelKey:
    """An instance keeps its own max_steps / trap_terminal; a name or class the defaults."""
    model = _resolve_env(env, None, None)
    return type(model), model.max_steps, getattr(model, "trap_terminal", None)


def _model(key: _ModelKey) -> GridWorld:
    return _resolve_env(*key)


def policy_key(policy: Mapping[Cell, int]) -> PolicyKey:
    return tuple(int(policy[cell]) for cell in CELLS)


def policy_of(key: PolicyKey) -> dict[Cell, int]:
    return dict(zip(CELLS, key))


def _risk_key(utility: Utility) -> tuple:
    """What the table of R depends on: the measure and its parameters, not alpha; at
    alpha = 1 R plays no part and E stands in (a utility may then have no rho)."""
    if utility.alpha == 1.0:
        return "expectation", ()
    return utility.risk, tuple(sorted(utility.params.items()))


def _utility_template(risk_key: tuple) -> Utility:
    """A utility with the measure of ``risk_key``, for R alone (alpha does not matter)."""
    risk, params = risk_key
    return Utility(0.0, risk, dict(params))


# --------------------------------------------------------------------------- per-decision


@dataclass(frozen=True, eq=False)
class ActionStatistics:
    """E and R of Z^pi(s, a) for every cell (rows, in the order of CELLS) and action, and
    R_s's law of the episode from the start under pi."""

    expectation: np.ndarray  # [cells, actions]
    risk: np.ndarray  # [cells, actions]
    start_outcomes: dict[int, float]


def action_laws(
    env: Env,
    policy: Mapping[Cell, int],
    *,
    gamma: float,
) -> dict[tuple[Cell, int], ExactReturn]:
    """Z^pi(s, a) for every cell s and action a: the exact law of the discounted return of
    taking a in s (flag clear, the whole time limit ahead) and following ``policy`` after,
    the law the agent's distribution learns (paper, ``EquationDistributionalBellman``)."""
    model = _model(_model_key(env))
    return {
        (cell, action): exact_return(model, policy, gamma=gamma, start=cell, first_action=action)
        for cell in CELLS
        for action in range(N_ACTIONS)
    }


@functools.lru_cache(maxsize=4096)
def _action_statistics(
    model_key: _ModelKey, key: PolicyKey, gamma: float, risk_key: tuple
) -> ActionStatistics:
    """Cached by policy: a sweep over alpha meets the same few policies again and again, and
    E and R do not depend on alpha."""
    laws = action_laws(_model(model_key), policy_of(key), gamma=gamma)
    template = _utility_template(risk_key)
    shape = (len(CELLS), N_ACTIONS)
    expectation, risk = np.empty(shape), np.empty(shape)
    for (cell, action), law in laws.items():
        index = CELLS.index(cell)
        expectation[index, action] = law.mean()
        risk[index, action] = mixture_risk(law.mixture, template)
    start_law = laws[(START, key[CELLS.index(START)])]
    return ActionStatistics(expectation, risk, dict(start_law.risk_outcome_probs))


def improve(
    env: Env,
    policy: Mapping[Cell, int],
    utility: Utility,
    *,
    gamma: float,
) -> dict[Cell, int]:
    """One step of utility-greedy policy improvement: pi'(s) = argmax_a U[Z^pi(s, a)]
    (paper, ``EquationRiskSensitivePolicy``) in every cell; ties keep pi(s)."""
    key = policy_key(policy)
    return policy_of(greedy(_action_values(_model_key(env), float(gamma), utility)(key), key,
                            _TIE))


def _action_values(model_key: _ModelKey, gamma: float, utility: Utility
                   ) -> Callable[[PolicyKey], np.ndarray]:
    """pi -> U[Z^pi(s, a)] for every cell and action, from the cached E and R."""
    risk_key = _risk_key(utility)

    def values(key: PolicyKey) -> np.ndarray:
        stats = _action_statistics(model_key, key, gamma, risk_key)
        return combine_utility(utility.alpha, stats.expectation, stats.risk)

    return values


def _iterate(model_key: _ModelKey, utility: Utility, gamma: float, initial: PolicyKey,
             max_iterations: int = MAX_ITERATIONS) -> tuple[Iteration, str]:
    """Policy iteration on the exact laws, and the path from the start where it settled."""
    iteration = iterate(_action_values(model_key, gamma, utility), initial, tie=_TIE,
                        max_iterations=max_iterations)
    risk_key = _risk_key(utility)
    path = settled_path(iteration, lambda key: path_of(
        _action_statistics(model_key, key, gamma, risk_key).start_outcomes))
    return iteration, path


def _initial_key(initial_policy: Optional[Mapping[Cell, int]]) -> PolicyKey:
    """Policy iteration starts from ``initial_policy``, by default RIGHT everywhere."""
    return policy_key(initial_policy) if initial_policy else (RIGHT,) * len(CELLS)


@dataclass(frozen=True)
class PerDecisionFixedPoint:
    """The fixed point of utility-greedy policy iteration, and its episode from the start.

    ``undiscounted`` is the episode score S (what ``eval.json`` reports), ``discounted``
    the return sum_t gamma^t r_t the agent's Z(start, pi(start)) describes.
    """

    policy: dict[Cell, int]  # at a cycle, the first of its policies
    path: str  # at a cycle, the path its policies share, else CYCLE
    iterations: int
    cycle: tuple[dict[Cell, int], ...]  # empty: a fixed point; else the repeating policies
    undiscounted: EpisodeReport
    discounted: EpisodeReport

    @property
    def converged(self) -> bool:
        return not self.cycle


def per_decision_fixed_point(
    env: Env,
    utility: Utility,
    *,
    gamma: float,
    initial_policy: Optional[Mapping[Cell, int]] = None,
    rho: Optional[float] = None,
    max_iterations: int = MAX_ITERATIONS,
) -> PerDecisionFixedPoint:
    """The policy the paper's method converges to when it learns the laws exactly:
    pi = argmax_a U[Z^pi(s, a)] in every cell (paper, the equations of U*, Z* and pi* after
    ``EquationRiskSensitivePolicy``), by policy iteration on the exact laws from
    ``initial_policy`` (default: RIGHT everywhere).

    Unlike expected-value policy iteration, nothing guarantees convergence (U is not
    additive over steps): a cycle is reported in ``cycle`` instead of a fixed point.
    E, VaR / CVaR at ``rho`` (default: the utility's) and U of the episode from the start
    are given for the undiscounted score S and for the discounted return.
    """
    model_key = _model_key(env)
    iteration, path = _iterate(model_key, utility, float(gamma), _initial_key(initial_policy),
                               max_iterations)
    policy = policy_of(iteration.policy)
    model = _model(model_key)
    reports = [
        episode_report(exact_return(model, policy, gamma=g), utility, rho) for g in (1.0, gamma)
    ]
    return PerDecisionFixedPoint(
        policy=policy,
        path=path,
        iterations=iteration.steps,
        cycle=tuple(policy_of(k) for k in iteration.cycle),
        undiscounted=reports[0],
        discounted=reports[1],
    )


# --------------------------------------------------------------------------- switch points


def per_decision_switch_points(
    env: Env,
    utility: Utility,
    *,
    gamma: float,
    initial_policy: Optional[Mapping[Cell, int]] = None,
    alphas: Sequence[float] = ALPHA_GRID,
    tolerance: float = 1e-4,
) -> list[SwitchPoint]:
    """The alphas at which the per-decision fixed point's path from the start changes
    (``utility.alpha`` is ignored; every alpha starts from the same ``initial_policy``, so
    that no alpha inherits the previous one's policy). Cached laws make a sweep of the
    1001-point grid take about a second.

    The fixed point need not be unique: on risky transitions (VaR_0.1, alpha about 0.67 to
    0.76) iteration from the green path stays green and from RIGHT everywhere goes orange,
    and with CVaR_0.1 near alpha 0.8 it cycles between a green and an orange policy
    (path CYCLE). Sweeps from several initial policies bracket such regions."""
    model_key = _model_key(env)
    initial = _initial_key(initial_policy)

    def path_at(alpha: float) -> str:
        return _iterate(model_key, dataclasses.replace(utility, alpha=alpha), float(gamma),
                        initial)[1]

    return path_switch_points(path_at, alphas, tolerance)


# --------------------------------------------------------------------------- static objective


def reachable_policies(
    env: Env) -> list[dict[Cell, int]]:
    """Every deterministic policy Markov in the cell, once per behaviour from the start:
    actions are chosen only in cells the policy itself can reach from the start (goals end
    the episode, so they are never decided), the others are RIGHT. Two policies that agree
    on the cells they reach have the same law, so this is the whole search space."""
    model = _model(_model_key(env))
    found: list[dict[Cell, int]] = []

    def undecided_reached(policy: dict[Cell, int]) -> list[Cell]:
        seen, stack, undecided = {START}, [START], []
        while stack:
            cell = stack.pop()
            if cell not in policy:
                undecided.append(cell)
                continue
            for flag in (False, True):  # the flag never moves the agent, but may end it
                for out in model.outcomes(cell, policy[cell], flag):
                    if not out.terminal and out.next_cell not in seen:
                        seen.add(out.next_cell)
                        stack.append(out.next_cell)
        return undecided

    def extend(policy: dict[Cell, int]) -> None:
        undecided = undecided_reached(policy)
        if not undecided:
            found.append({cell: policy.get(cell, RIGHT) for cell in CELLS})
            return
        cell = min(undecided)
        for action in range(N_ACTIONS):
            extend({**policy, cell: action})

    extend({})
    return found


@dataclass(frozen=True, eq=False)
class _StaticTable:
    keys: tuple[PolicyKey, ...]
    expectation: np.ndarray
    risk: np.ndarray
    outcomes: tuple[dict[int, float], ...]  # R_s's law under each policy

    def best(self, utility: Utility) -> int:
        """The index of the policy of highest U (the first of ties)."""
        return int(np.argmax(combine_utility(utility.alpha, self.expectation, self.risk)))


@functools.lru_cache(maxsize=64)
def _static_table(model_key: _ModelKey, gamma: float, risk_key: tuple) -> _StaticTable:
    """E and R of the episode's return under every policy of :func:`reachable_policies`
    (alpha free: the optimum of any alpha is an argmax over this table)."""
    model = _model(model_key)
    policies = reachable_policies(model)
    template = _utility_template(risk_key)
    expectation, risk = np.empty(len(policies)), np.empty(len(policies))
    outcomes = []
    for i, policy in enumerate(policies):
        law = exact_return(model, policy, gamma=gamma)
        expectation[i] = law.mean()
        risk[i] = mixture_risk(law.mixture, template)
        outcomes.append(dict(law.risk_outcome_probs))
    keys = tuple(policy_key(p) for p in policies)
    return _StaticTable(keys, expectation, risk, tuple(outcomes))


@dataclass(frozen=True)
class StaticOptimum:
    """The best deterministic cell-Markov policy for U of the episode's return, among
    ``policies_searched`` distinct behaviours from the start."""

    policy: dict[Cell, int]
    path: str
    report: EpisodeReport
    policies_searched: int

    @property
    def utility(self) -> float:
        return self.report.utility


def static_optimum(
    env: Env,
    utility: Utility,
    *,
    gamma: float,
    rho: Optional[float] = None,
) -> StaticOptimum:
    """argmax_pi U[sum_t gamma^t r_t] of the whole episode from the start (gamma = 1: the
    score S), by exhaustive search over deterministic policies Markov in the cell (the
    agent's observation): 58 behaviours on risky rewards, 301 on risky transitions, 601 on
    the risky grid world, 43 on TwoStage; about 0.2, 0.6 and 3 s a world, gamma and risk
    measure on a shared 2-core machine (cached), after which every alpha is an argmax.

    The optimum over ALL policies is out of exact reach (measured): for a static VaR / CVaR
    the best policy may depend on the history through the return accumulated so far. The
    agent sees that return only through rewards with Gaussian noise, a continuous state;
    and even the noiseless decision states (cell, flag, step, sum of means so far) reachable
    in 10 steps number 61, 60, 403 and 134 on the four worlds, so a deterministic policy on
    them is one of 4^60 to 4^403, beyond enumeration. The cell-Markov optimum is a lower
    bound on the unrestricted one, and the fair comparison to the per-decision policy,
    which is cell-Markov too. Ties go to the first policy found.
    """
    model_key = _model_key(env)
    table = _static_table(model_key, float(gamma), _risk_key(utility))
    policy = policy_of(table.keys[table.best(utility)])
    law = exact_return(_model(model_key), policy, gamma=gamma)
    report = episode_report(law, utility, rho)
    return StaticOptimum(policy, report.path, report, len(table.keys))


@functools.lru_cache(maxsize=None)
def _entropic_optimum(model_key: _ModelKey, beta: float, gamma: float) -> EntropicOptimum:
    world = _model(model_key)
    cells = list(CELLS)
    index = {cell: i for i, cell in enumerate(cells)}
    actions = int(world.action_space.n)
    branches = [[world.outcomes(cell, a) for a in range(actions)] for cell in cells]
    width = max(len(b) for row in branches for b in row)
    shape = (len(cells), actions, width)
    probs, next_states = np.zeros(shape), np.zeros(shape, dtype=np.int64)
    terminal = np.ones(shape, dtype=bool)
    components: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
    for s, row in enumerate(branches):
        for a, outcomes in enumerate(row):
            for k, out in enumerate(outcomes):
                probs[s, a, k] = out.probability
                next_states[s, a, k] = index[tuple(out.next_cell)]
                terminal[s, a, k] = out.terminal
                weights, means = zip(*out.reward_components)
                components[s, a, k] = np.log(np.array(weights)), np.array(means)

    def log_factor(t: int) -> np.ndarray:
        # log E[exp(-beta gamma^t r)] of r ~ sum_c w_c N(mu_c, REWARD_STD^2)
        scale = beta * gamma**t
        out = np.zeros(shape)
        for key, (log_w, means) in components.items():
            terms = log_w - scale * means
            top = terms.max()
            out[key] = top + np.log(np.exp(terms - top).sum()) + 0.5 * (scale * REWARD_STD) ** 2
        return out

    start = np.zeros(len(cells))
    start[index[tuple(START)]] = 1.0
    return entropic_programme(probs, next_states, terminal, log_factor, start,
                              world.max_steps, beta)


def static_entropic_optimum(env: Env, beta: float, *, gamma: float) -> EntropicOptimum:
    """max -1/beta log E[exp(-beta S)] of the episode's discounted return over every policy
    (:mod:`~rs_lightning.references.entropic`): Markov in (cell, step), as the flag of the
    risky grid world changes R_s only, never a reward or a move; ``policy[t, i]`` is the
    action at step t in the i-th cell of ``CELLS``."""
    return _entropic_optimum(_model_key(env), float(beta), float(gamma))


def static_utility(
    env: Env,
    policy: Mapping[Cell, int],
    utility: Utility,
    *,
    gamma: float,
) -> float:
    """U[sum_t gamma^t r_t] of ``policy``'s whole episode from the start, exactly."""
    law = exact_return(env, policy, gamma=gamma)
    return mixture_utility(law.mixture, utility)


def static_gap(
    env: Env,
    policy: Mapping[Cell, int],
    utility: Utility,
    *,
    gamma: float,
) -> float:
    """How much static utility ``policy`` leaves on the table: U of the cell-Markov static
    optimum minus U of ``policy`` (>= 0 up to float error for a cell-Markov policy)."""
    optimum = static_optimum(env, utility, gamma=gamma)
    return optimum.utility - static_utility(env, policy, utility, gamma=gamma)


def static_switch_points(
    env: Env,
    utility: Utility,
    *,
    gamma: float,
    alphas: Sequence[float] = ALPHA_GRID,
    tolerance: float = 1e-4,
) -> list[SwitchPoint]:
    """The alphas at which the static optimum's path from the start changes."""
    model_key = _model_key(env)

    def path_at(alpha: float) -> str:
        at_alpha = dataclasses.replace(utility, alpha=alpha)
        table = _static_table(model_key, float(gamma), _risk_key(at_alpha))
        return path_of(table.outcomes[table.best(at_alpha)])

    return path_switch_points(path_at, alphas, tolerance)


__all__ = [
    "ALPHA_GRID",
    "CLOSED_FORM_RISKS",
    "ActionStatistics",
    "CYCLE",
    "EpisodeReport",
    "GRID_POINTS",
    "MAX_ITERATIONS",
    "PATH_NAMES",
    "PerDecisionFixedPoint",
    "StaticOptimum",
    "SwitchPoint",
    "TAIL_SIGMAS",
    "action_laws",
    "episode_report",
    "improve",
    "mixture_as_distribution",
    "mixture_risk",
    "mixture_utility",
    "path_of",
    "path_switch_points",
    "per_decision_fixed_point",
    "per_decision_switch_points",
    "policy_key",
    "policy_of",
    "reachable_policies",
    "static_gap",
    "static_optimum",
    "static_switch_points",
    "static_utility",
]
