"""Exact references of the per-decision and static objectives on small tabular environments.

gymnasium's toy-text environments (and this project's slippery cliff walking) publish their
model: ``env.unwrapped.P[s][a]`` is a list of ``(probability, next_state, reward,
terminated)``. On such a model this module computes, in the environment's reward units:

- :func:`learner_laws`: the law of the discounted return Z^pi(s, a) of a stationary
  deterministic policy, the fixed point of the distributional Bellman operator with the
  run's gamma. A time limit is bootstrapped through, as the learner does with gymnasium's
  truncation, so this is the law the agent's Z(s, a) converges to;
- :func:`episode_law`: the law of the discounted return sum_t gamma^t r_t of the episode
  from the start distribution, time limit included (the static objective's return);
- :func:`per_decision_fixed_point`: pi(s) = argmax_a U[Z^pi(s, a)] by utility-greedy
  policy iteration, cycles reported (as :mod:`rs_lightning.references.exact_policies` on the
  grid worlds);
- :func:`static_optimum`: max U of the episode's discounted return over history-dependent
  policies, for the expectation (finite-horizon value iteration) and for
  U = alpha E + (1 - alpha) CVaR_rho (Bauerle & Ott's augmented state, below); bounds on it
  for U = alpha E + (1 - alpha) VaR_rho (below).

**Exact where every episode is finite.** Where no state can follow itself (the model's
graph of non-terminal outcomes is acyclic, :func:`is_exact`: the finite-horizon worlds whose
state holds the period, trading and the American put), every figure above is computed on
the exact laws by :mod:`.tabular_exact`: the atoms are the exact discounted returns, the
per-decision iteration's ties are exact ties (the current action is kept), the static CVaR
optimum is exact, and the static VaR optimum is exact where a search over the tree of
histories closes the gap between its two bounds, else an interval (a policy's value below,
weak duality above). Where states can repeat but a time limit ends every episode (cliff
walking, FrozenLake: :func:`is_bounded`), every figure is a sound interval from
:mod:`.tabular_bounds`: a policy's (the per-decision fixed point's, the random policy's, a
run's) from two laws that bound its law stochastically, the static optima from threshold
programmes read at the grid point below and above. The rest of this docstring is about the
grid that remains: the laws the per-decision iteration decides on there (so its fixed point
is that iteration's), and the figures of models without a time limit, which are estimates,
as ``eval.json`` says (``<key>_kind``, :func:`references`).

Laws live on a fixed uniform grid of atoms (:class:`ReturnGrid`, spacing ``delta``) that
covers every discounted return the model allows. A value r + gamma z that falls between two
atoms is split between them so that its mean is kept (the categorical projection of C51).
Error bound: couple the projected law with the true return along each trajectory; each step
adds a rounding error of mean zero and size below ``delta``, discounted by gamma^t. So

- E is exact (up to float error, the iteration's tolerance, and values that the grid's ends
  clip, which stay within one atom of them);
- every trajectory's value moves by at most delta * sum_{t < T} gamma^t <= delta / (1 - gamma)
  (T its length), hence VaR_rho and CVaR_rho move by at most that too (both are monotone and
  shift with a constant); the root mean square of the move is at most
  delta / (2 sqrt(1 - gamma^2)) (the errors are martingale differences of variance below
  delta^2 / 4), which bounds the Wasserstein-1 distance and so CVaR_rho's error by that
  divided by rho. :func:`grid_error_bounds` gives both.

Static CVaR (Bauerle & Ott 2011, via Rockafellar & Uryasev):
alpha E[S] + (1 - alpha) CVaR_rho[S] = max_b E[alpha S + (1 - alpha) (b - (b - S)^+ / rho)].
For a threshold b, the remainder of the episode after return c and discount gamma^t faces
the threshold y = (b - c) / gamma^t, and
W_t(s, y) = max_a sum p [alpha r + (terminal ? -kappa (y - r)^+ : gamma W_{t+1}(s', (y - r) / gamma))],
kappa = (1 - alpha) / rho, W_H(s, y) = -kappa y^+ at the time limit H. The optimum is then
max_b (1 - alpha) b + E_{s0}[W_0(s0, b)]: the best policy of (state, step, return so far),
which is what ``objective=static`` can represent (it sees the return so far and gamma^t).
W is kappa-Lipschitz in y and is linearly interpolated on a grid of y (:func:`threshold_grid`,
dense where the returns lie), so the optimum is within kappa delta_y / (2 (1 - gamma)) of the
DP's value, delta_y the widest spacing the thresholds meet (a loose bound; measured on cliff
walking: 1001, 2001 and 4001 thresholds give -15.920, -15.905 and -15.898, halving the
difference each time, so 2001 is about 0.015 below the limit). Interpolated, that value is an
estimate. :func:`static_cvar_bounds` gives two sound bounds on this grid: W_t(s, y) does not
increase with y, so reading each next threshold at the grid point above (below) gives at
most (at least) the programme's value at every grid point (with a time limit
:func:`static_optimum` uses the tighter ones of :mod:`.tabular_bounds`, whose thresholds
move only at exceptional rewards: [-15.8902, -15.8892] on cliff walking against this
grid's [-15.925, -15.849] with 8001 thresholds).

Static spectral risk, alpha E[S] + (1 - alpha) sum_i w_i CVaR_rho_i[S] with two levels: the
same with two thresholds, max_b E[alpha S + (1 - alpha) sum_i w_i (b_i - (b_i - S)^+ / rho_i)].
For a fixed offset e = b_2 - b_1 the programme above runs on y, the remainder's threshold of
b_2 (that of b_1 is y - e / gamma^t), with the same ends: below every return neither is
crossed, and the grid reaches high + e / gamma^H, above which both always are; the best b_2 is
read off its grid as before. The offset is searched (a coarse grid over the returns' spread,
then a local refinement, :func:`static_spectral_optimum`), so the value is a policy's (a
lower bound on the optimum) and the optimum when the search finds the best offset; on the
small instances of ``tests/test_benchmark_worlds.py`` it meets the brute force over every
policy within the threshold grid's error.

Static VaR: alpha E[S] + (1 - alpha) VaR_rho[S] has no expected-utility form, and its best
deterministic policy is a chance-constrained programme (the best alpha E among the policies
with P(S < y) <= rho, then the best y: such a policy has VaR_rho >= y); it is bounded from
both sides instead. For a penalty lambda, the policy of (state, step, remaining threshold)
maximising E[alpha S - lambda 1{S < y}] comes from the same backward recursion as the CVaR
one (the penalty of step t grows as gamma^-t: the indicator does not shrink with the
discount, :func:`_shortfall_programme`), with its E[S] and P(S < y) for every start
threshold y. Weak duality makes alpha E - lambda P + lambda rho an upper bound on the best
alpha E of the feasible policies for any lambda, so the least over a range of lambdas
(``VAR_PENALTY_EXPONENTS``) bounds the optimum from above; each policy met with
P(S < y) <= rho attains at least alpha E + (1 - alpha) y, and the best of them, of the
per-decision fixed point and of a learned policy bound it from below. With alpha = 0 the
two meet (the least shortfall probability is an expected-utility programme). Both hold on
the threshold grid (501 points: a threshold between two points is rounded to one of them
at random, keeping its mean), within about its spacing of the true problem's: on cliff
walking with alpha 0.5 and VaR_0.1 the optimum lies in [-15.189, -15.156] (the lower end is
the per-decision policy one row up), and with alpha 0 both ends are -15.913.
Everything is pure numpy / torch on the model's arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rs_lightning.references import tabular_bounds, tabular_exact
from rs_lightning.references.tabular_bounds import (expected_q, optimal_expectation,
                                                    return_bounds, value_horizon)
from rs_lightning.references.entropic import entropic_programme
from rs_lightning.references.policy_iteration import (
    CYCLE,
    MAX_ITERATIONS,
    iterate,
    settled_path,
)
from rs_lightning.risk import ReturnDistribution, Utility
from rs_lightning.risk.measures import spectrum

# Environments with more states than this get no references: the laws cost states x atoms
# a sweep (cliff walking's 48 and FrozenLake 8x8's 64 take seconds, Taxi's 500 minutes).
MAX_STATES = 100
# The return grid's spacing: at most 1/20 of the smallest reward size and 1/2000 of the
# returns' range, with at most MAX_ATOMS atoms (the laws' cost is states x atoms a sweep).
# Cliff walking: [-500, 0] in steps of 0.05; FrozenLake: [0, 1] in steps of 0.0005.
MIN_ATOMS = 2001
MAX_ATOMS = 10001
REWARD_FRACTION = 20
# Points of the threshold grid of the static CVaR dynamic programme, and of the two that
# bound its optimum (static_cvar_bounds: cliff walking's interval is about 0.08 wide).
THRESHOLDS = 2001
CVAR_BOUND_THRESHOLDS = 8001
# The static spectral programme: its threshold grid (one programme per offset searched), the
# offsets of the coarse search and the halvings of its local refinement.
SPECTRAL_THRESHOLDS = 1001
SPECTRAL_OFFSETS = 17
SPECTRAL_REFINEMENTS = 6
# The static VaR programme: its threshold grid, and the penalties of its Lagrangian,
# (return range) x 2^k, besides 0 (module docstring, "Static VaR").
VAR_THRESHOLDS = 501
VAR_PENALTY_EXPONENTS = tuple(range(-8, 5))
# The learner's laws are iterated until no atom's CDF moves by more than this.
TOLERANCE = 1e-8
MAX_SWEEPS = 3000
# Utilities closer than this are ties (kept as the current action in policy iteration).
_TIE = 1e-9


@dataclass(frozen=True, eq=False)
class TabularModel:
    """A finite MDP as arrays: ``probs[s, a, k]`` of outcome k, its ``next_states``,
    ``rewards`` and ``terminal`` flag (outcomes padded with probability 0); ``start`` the
    initial state distribution; ``horizon`` the time limit (None: none)."""

    probs: np.ndarray
    next_states: np.ndarray
    rewards: np.ndarray
    terminal: np.ndarray
    start: np.ndarray
    horizon: int | None
    shape: tuple[int, int] | None = None  # rows and columns of a grid of states

    @property
    def n_states(self) -> int:
        return self.probs.shape[0]

    @property
    def n_actions(self) -> int:
        return self.probs.shape[1]


def model_from_transitions(
    transitions: dict, start: np.ndarray, horizon: int | None,
    shape: tuple[int, int] | None = None,
) -> TabularModel:
    """A :class:`TabularModel` of gymnasium's ``P[s][a] = [(p, s', r, terminated), ...]``."""
    n_states = len(transitions)
    n_actions = len(transitions[0])
    width = max(len(transitions[s][a]) for s in range(n_states) for a in range(n_actions))
    probs = np.zeros((n_states, n_actions, width))
    next_states = np.zeros((n_states, n_actions, width), dtype=np.int64)
    rewards = np.zeros((n_states, n_actions, width))
    terminal = np.ones((n_states, n_actions, width), dtype=bool)
    for s in range(n_states):
        for a in range(n_actions):
            for k, (p, s2, r, done) in enumerate(transitions[s][a]):
                probs[s, a, k] = p
                next_states[s, a, k] = int(s2)
                rewards[s, a, k] = r
                terminal[s, a, k] = bool(done)
    start = np.asarray(start, dtype=np.float64)
    return TabularModel(probs, next_states, rewards, terminal, start / start.sum(), horizon,
                        shape)


def tabular_model(env, horizon: int | None = None,
                  max_states: int = MAX_STATES) -> TabularModel | None:
    """The model of a gymnasium environment with Discrete observations and actions (both
    starting at 0), ``unwrapped.P`` and an initial state distribution, at most
    ``max_states`` states; else None. ``horizon`` defaults to the spec's time limit."""
    import gymnasium as gym

    unwrapped = env.unwrapped
    observations, actions = unwrapped.observation_space, unwrapped.action_space
    if not (isinstance(observations, gym.spaces.Discrete)
            and isinstance(actions, gym.spaces.Discrete)):
        return None
    if int(observations.start) != 0 or int(actions.start) != 0:
        return None
    transitions = getattr(unwrapped, "P", None)
    start = getattr(unwrapped, "initial_state_distrib", None)
    if not isinstance(transitions, dict) or start is None or int(observations.n) > max_states:
        return None
    if len(transitions) != int(observations.n):
        return None
    if horizon is None and env.spec is not None:
        horizon = env.spec.max_episode_steps
    shape = getattr(unwrapped, "shape", None)
    if shape is None and hasattr(unwrapped, "nrow"):
        shape = (int(unwrapped.nrow), int(unwrapped.ncol))
    return model_from_transitions(transitions, start, horizon,
                                  tuple(int(n) for n in shape) if shape else None)


def is_exact(model: TabularModel) -> bool:
    """Whether the model's laws are computed exactly (:mod:`.tabular_exact`): no state can
    follow itself in an episode, so every return law has finitely many atoms."""
    return _cached_acyclic(_model_key(model))


# --------------------------------------------------------------------------- return grid


@dataclass(frozen=True, eq=False)
class ReturnGrid:
    """``atoms`` equally spaced returns from ``low`` to ``high``."""

    low: float
    high: float
    atoms: int
    _shifts: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def delta(self) -> float:
        return (self.high - self.low) / (self.atoms - 1)

    @functools.cached_property
    def values(self) -> torch.Tensor:
        return torch.linspace(self.low, self.high, self.atoms, dtype=torch.float64)

    def split(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The lower atom index of every point and the share that goes to the atom above
        (the mean-keeping categorical projection; points outside go to the end atoms)."""
        position = ((points - self.low) / self.delta).clamp(0.0, self.atoms - 1.0)
        lower = position.floor().clamp(max=self.atoms - 2)
        return lower.long(), position - lower

    def dirac(self, points: torch.Tensor) -> torch.Tensor:
        """Point masses at ``points[...]`` projected on the grid -> ``[..., atoms]``."""
        lower, share = self.split(points)
        out = torch.zeros(*points.shape, self.atoms, dtype=torch.float64)
        out.scatter_add_(-1, lower[..., None], (1.0 - share)[..., None])
        out.scatter_add_(-1, lower[..., None] + 1, share[..., None])
        return out

    def shifted(self, laws: torch.Tensor, reward: float, gamma: float) -> torch.Tensor:
        """The law of reward + gamma Z for every law ``laws[..., atoms]`` of Z."""
        lower, share = self._shift(float(reward), float(gamma))
        out = torch.zeros_like(laws)
        out.index_add_(-1, lower, laws * (1.0 - share))
        out.index_add_(-1, lower + 1, laws * share)
        return out

    def _shift(self, reward: float, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Cached: a law is shifted by the same few rewards at every sweep."""
        key = (reward, gamma)
        if key not in self._shifts:
            self._shifts[key] = self.split(reward + gamma * self.values)
        return self._shifts[key]

    def distribution(self, laws: torch.Tensor) -> ReturnDistribution:
        return ReturnDistribution(self.values.expand_as(laws), laws)


def model_grid(model: TabularModel, gamma: float, atoms: int | None = None) -> ReturnGrid:
    """The grid of every return the model allows; ``atoms`` defaults to the spacing rule
    above (MIN_ATOMS, MAX_ATOMS, REWARD_FRACTION)."""
    low, high = return_bounds(model, gamma)
    if high - low < 1e-12:
        high = low + 1.0
    if atoms is None:
        sizes = np.abs(model.rewards[(model.probs > 0) & (model.rewards != 0)])
        unit = float(sizes.min()) if sizes.size else high - low
        spacing = min((high - low) / (MIN_ATOMS - 1), unit / REWARD_FRACTION)
        atoms = min(MAX_ATOMS, math.ceil((high - low) / spacing - 1e-9) + 1)
    return ReturnGrid(low, high, atoms)


def grid_error_bounds(grid: ReturnGrid, gamma: float, rho: float,
                      horizon: int | None = None) -> dict[str, float]:
    """Bounds on the error the grid brings to E, VaR_rho and CVaR_rho of a law (module
    docstring): the pathwise bound delta sum_t gamma^t, and for CVaR also the root mean
    square bound over rho."""
    steps = math.inf if horizon is None else horizon
    pathwise = grid.delta * (1.0 - gamma ** steps) / (1.0 - gamma)
    rms = grid.delta / (2.0 * math.sqrt(1.0 - gamma ** 2))
    return {"expectation": 0.0, "var": pathwise, "cvar": min(pathwise, rms / rho)}


# --------------------------------------------------------------------------- laws of a policy


def _bellman(model: TabularModel, grid: ReturnGrid, gamma: float, laws: torch.Tensor,
             actions: np.ndarray) -> torch.Tensor:
    """The law of r + gamma Z(s') (r alone at a terminal outcome) after taking
    ``actions[i]`` in state i, for state laws ``laws[s, atoms]`` of the continuation;
    ``actions`` may have extra leading dimensions -> ``[..., states, atoms]``."""
    return _transition_operator(model, actions).apply(grid, gamma, laws)


@dataclass(frozen=True, eq=False)
class _TransitionOperator:
    """The outcomes of a choice of action per row, grouped by reward: a sparse matrix of
    the probabilities of going on to each state, and the probability of ending."""

    shape: tuple[int, ...]
    by_reward: tuple[tuple[float, torch.Tensor, torch.Tensor], ...]

    def apply(self, grid: ReturnGrid, gamma: float, laws: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(int(np.prod(self.shape)), grid.atoms, dtype=torch.float64)
        for reward, going, ending in self.by_reward:
            if going._nnz():  # a reward only met on ending outcomes shifts nothing
                out += going @ grid.shifted(laws, reward, gamma)
            ended = grid.dirac(torch.tensor(reward, dtype=torch.float64))
            out += ending[:, None] * ended
        return out.reshape(*self.shape, grid.atoms)


def _transition_operator(model: TabularModel, actions: np.ndarray) -> _TransitionOperator:
    states = np.broadcast_to(np.arange(model.n_states), actions.shape)
    probs = model.probs[states, actions].reshape(-1, model.probs.shape[-1])  # [rows, K]
    next_states = model.next_states[states, actions].reshape(probs.shape)
    rewards = model.rewards[states, actions].reshape(probs.shape)
    terminal = model.terminal[states, actions].reshape(probs.shape)
    rows = np.broadcast_to(np.arange(len(probs))[:, None], probs.shape)
    groups = []
    for reward in np.unique(rewards[probs > 0]):
        chosen = (rewards == reward) & (probs > 0)
        going = chosen & ~terminal
        matrix = torch.sparse_coo_tensor(
            torch.from_numpy(np.stack([rows[going], next_states[going]])),
            torch.from_numpy(probs[going]), (len(probs), model.n_states),
            check_invariants=True,
        ).coalesce()
        ending = torch.from_numpy(np.where(chosen & terminal, probs, 0.0).sum(1))
        groups.append((float(reward), matrix, ending))
    return _TransitionOperator(tuple(actions.shape), tuple(groups))


def expected_values(model: TabularModel, policy: np.ndarray, gamma: float) -> np.ndarray:
    """V^pi(s) with no time limit, by a linear solve."""
    states = np.arange(model.n_states)
    probs = model.probs[states, policy]
    going = np.where(model.terminal[states, policy], 0.0, probs)
    transition = np.zeros((model.n_states, model.n_states))
    np.add.at(transition, (states[:, None].repeat(probs.shape[1], 1),
                           model.next_states[states, policy]), going)
    reward = (probs * model.rewards[states, policy]).sum(1)
    return np.linalg.solve(np.eye(model.n_states) - gamma * transition, reward)


@dataclass(frozen=True, eq=False)
class LearnerLaws:
    """Z^pi(s, a) for every state and action (``laws[s, a, atoms]`` on ``grid``) and the
    sweeps the fixed point took."""

    grid: ReturnGrid
    laws: torch.Tensor
    sweeps: int

    def distribution(self) -> ReturnDistribution:
        return self.grid.distribution(self.laws)


def learner_laws(model: TabularModel, policy: np.ndarray, gamma: float,
                 grid: ReturnGrid | None = None, tolerance: float = TOLERANCE,
                 max_sweeps: int = MAX_SWEEPS) -> LearnerLaws:
    """The law of the discounted return of taking a in s and following ``policy`` after,
    with no time limit (the learner bootstraps through truncation): the projected
    distributional Bellman operator iterated from point masses at the exact means V^pi(s)
    (so that paths that never end start right on average) until no CDF moves by more than
    ``tolerance``."""
    grid = grid or model_grid(model, gamma)
    policy = np.asarray(policy, dtype=np.int64)
    laws = grid.dirac(torch.from_numpy(expected_values(model, policy, gamma)))
    sweeps, operator = 0, _transition_operator(model, policy)
    for sweeps in range(1, max_sweeps + 1):
        new = operator.apply(grid, gamma, laws)
        # Checked every few sweeps: the CDFs cost as much as a sweep.
        if sweeps % 5 == 0 and float((new - laws).cumsum(-1).abs().max()) < tolerance:
            laws = new
            break
        laws = new
    every_action = np.broadcast_to(np.arange(model.n_actions)[:, None],
                                   (model.n_actions, model.n_states))
    first = _bellman(model, grid, gamma, laws, every_action)  # [A, S, atoms]
    return LearnerLaws(grid, first.transpose(0, 1).contiguous(), sweeps)


def episode_law(model: TabularModel, policy: np.ndarray, gamma: float,
                grid: ReturnGrid | None = None,
                horizon: int | None = None) -> ReturnDistribution:
    """The law of the episode's discounted return sum_t gamma^t r_t from the start
    distribution under ``policy``, the time limit ``horizon`` (default: the model's)
    ending it; with no time limit, the learner's law of the start state."""
    policy = np.asarray(policy, dtype=np.int64)
    if horizon is None and is_exact(model):
        values, probs = tabular_exact.episode_law(model, policy, gamma)
        return ReturnDistribution(torch.from_numpy(values), torch.from_numpy(probs))
    grid = grid or model_grid(model, gamma)
    horizon = model.horizon if horizon is None else horizon
    start = torch.from_numpy(model.start)
    if horizon is None:
        learned = learner_laws(model, policy, gamma, grid).laws
        state_laws = learned[np.arange(model.n_states), policy]
    else:
        state_laws = grid.dirac(torch.zeros(model.n_states, dtype=torch.float64))
        operator = _transition_operator(model, policy)
        for _ in range(horizon):
            state_laws = operator.apply(grid, gamma, state_laws)
    return grid.distribution(start @ state_laws)


def law_utility(law: ReturnDistribution, utility: Utility) -> torch.Tensor:
    """U of laws on the grid, through the risk module's one definition."""
    return utility(law)


def static_utility(model: TabularModel, policy: np.ndarray, utility: Utility, gamma: float,
                   grid: ReturnGrid | None = None) -> float:
    """U[sum_t gamma^t r_t] of ``policy``'s episode from the start."""
    return float(law_utility(episode_law(model, policy, gamma, grid), utility))


def uniform_random_utility(model: TabularModel, utility: Utility, gamma: float) -> float:
    """U[sum_t gamma^t r_t] of the policy that draws every action with probability
    1 / A in every state: the static utility of a one-action model whose outcomes are
    those of every action, each weighted 1 / A."""
    return static_utility(*_uniform_random_model(model), utility, gamma)


def _uniform_random_model(model: TabularModel) -> tuple[TabularModel, np.ndarray]:
    """A one-action model whose outcomes are those of every action, each weighted 1 / A,
    and its only policy."""
    n_states, n_actions, width = model.probs.shape

    def merged(array: np.ndarray) -> np.ndarray:
        return array.reshape(n_states, 1, n_actions * width)

    random_model = TabularModel(merged(model.probs) / n_actions, merged(model.next_states),
                                merged(model.rewards), merged(model.terminal), model.start,
                                model.horizon, model.shape)
    return random_model, np.zeros(n_states, dtype=np.int64)


def uniform_random_reference(model: TabularModel, utility: Utility, gamma: float
                             ) -> tuple[float, float, float, str]:
    """:func:`uniform_random_utility` with the interval that holds its true value and its
    kind: exact where :func:`is_exact`, an interval where :func:`is_bounded` (the value is
    its lower end), else an estimate within the grid's error bound."""
    if is_bounded(model, utility):
        low, high = _cached_policy_bounds(_model_key(model), gamma, None, _utility_key(utility))
        return low, low, high, EXACT if high - low <= _MEETING else INTERVAL
    value = uniform_random_utility(model, utility, gamma)
    fields = _estimate_fields("random", model, utility, gamma)
    error = fields.get("random_error")
    if fields["random_kind"] == EXACT:
        return value, value, value, EXACT
    if error is None:
        return value, -math.inf, math.inf, ESTIMATE
    return value, value - error, value + error, ESTIMATE


# --------------------------------------------------------------------------- per-decision


def nominal_path(model: TabularModel, policy: np.ndarray, max_length: int | None = None
                 ) -> list[int]:
    """The states ``policy`` visits from the most likely start when every step takes its
    most likely outcome, until a terminal outcome, a repeated state or the time limit."""
    state = int(np.argmax(model.start))
    path = [state]
    limit = max_length or model.horizon or 10 * model.n_states
    for _ in range(limit):
        a = int(policy[state])
        k = int(np.argmax(model.probs[state, a]))
        ended = bool(model.terminal[state, a, k])
        state = int(model.next_states[state, a, k])
        path.append(state)
        if ended or path.count(state) > 1:
            break
    return path


def describe_path(model: TabularModel, path: list[int]) -> str:
    """A path as ``row,column`` cells (grid-shaped states) or state indices, space-separated."""
    if model.shape is None:
        return " ".join(str(s) for s in path)
    return " ".join(f"{s // model.shape[1]},{s % model.shape[1]}" for s in path)


def action_utilities(model: TabularModel, policy: np.ndarray, utility: Utility, gamma: float,
                     grid: ReturnGrid | None = None) -> np.ndarray:
    """U[Z^pi(s, a)] for every state and action -> ``[S, A]``: exact where
    :func:`is_exact`, else on the grid."""
    if is_exact(model):
        laws = tabular_exact.action_laws(model, np.asarray(policy, dtype=np.int64), gamma)
        values, probs = tabular_exact.padded([law for row in laws for law in row])
        shape = (model.n_states, model.n_actions, values.shape[-1])
        exact = ReturnDistribution(torch.from_numpy(values).reshape(shape),
                                   torch.from_numpy(probs).reshape(shape))
        return law_utility(exact, utility).numpy()
    laws = learner_laws(model, policy, gamma, grid)
    return law_utility(laws.distribution(), utility).numpy()


@dataclass(frozen=True)
class PerDecisionFixedPoint:
    policy: tuple[int, ...]  # at a cycle, the first of its policies
    iterations: int
    cycle: tuple[tuple[int, ...], ...]  # empty at a fixed point
    path: str  # the nominal path from the start, or CYCLE where a cycle's paths differ
    static_utility: float

    @property
    def converged(self) -> bool:
        return not self.cycle


def expectation_optimal_policy(model: TabularModel, gamma: float) -> np.ndarray:
    """A stationary policy maximising E with no time limit (value iteration)."""
    values = np.zeros(model.n_states)
    for _ in range(100_000):
        q = expected_q(model, values, gamma)
        new = q.max(1)
        if np.abs(new - values).max() < 1e-12:
            break
        values = new
    return expected_q(model, values, gamma).argmax(1)


def per_decision_fixed_point(model: TabularModel, utility: Utility, gamma: float,
                             initial: np.ndarray | None = None,
                             grid: ReturnGrid | None = None,
                             max_iterations: int = MAX_ITERATIONS) -> PerDecisionFixedPoint:
    """The policy greedy on its own laws, pi(s) = argmax_a U[Z^pi(s, a)], by policy
    iteration from ``initial`` (default: the expectation-optimal policy); a cycle of
    policies is reported (U is not additive over steps, so nothing guarantees a fixed
    point)."""
    grid = grid or (None if is_exact(model) else model_grid(model, gamma))
    start = (expectation_optimal_policy(model, gamma) if initial is None
             else np.asarray(initial, dtype=np.int64))
    iteration = iterate(
        lambda key: action_utilities(model, np.asarray(key), utility, gamma, grid), start,
        tie=_TIE, max_iterations=max_iterations)
    final = np.asarray(iteration.policy)
    return PerDecisionFixedPoint(
        policy=iteration.policy, iterations=iteration.steps, cycle=iteration.cycle,
        path=settled_path(iteration,
                          lambda key: describe_path(model, nominal_path(model, np.array(key)))),
        static_utility=static_utility(model, final, utility, gamma, grid),
    )


# --------------------------------------------------------------------------- static optimum


@dataclass(frozen=True)
class StaticOptimum:
    """max U of the episode's discounted return over policies of (state, step, return so
    far); ``threshold`` is the optimal b of the CVaR form, or the VaR level the best policy
    found guarantees (None for the expectation). With VaR, ``utility`` is what that policy
    attains (a lower bound) and ``upper`` the Lagrangian bound above the optimum (None for
    the others, whose ``utility`` is the optimum itself). ``kind``: what the figure is
    (:data:`EXACT`, :data:`INTERVAL`: the optimum lies in [``utility``, ``upper``], or
    :data:`ESTIMATE`: on a grid, ``upper`` too where given)."""

    utility: float
    threshold: float | None
    upper: float | None = None
    kind: str = "estimate"


def static_cvar_optimum(model: TabularModel, alpha: float, rho: float, gamma: float,
                        thresholds: int = THRESHOLDS) -> StaticOptimum:
    """max over policies of (state, step, return so far) of
    alpha E[S] + (1 - alpha) CVaR_rho[S], S = sum_{t < H} gamma^t r_t (module docstring)."""
    if is_exact(model):
        return StaticOptimum(*tabular_exact.static_cvar(model, alpha, rho, gamma), kind=EXACT)
    grid = _threshold_setup(model, gamma, thresholds)
    totals = (1.0 - alpha) * grid.ys + _cvar_programme(grid, alpha, rho, gamma, "linear")
    best = int(np.argmax(totals))
    return StaticOptimum(float(totals[best]), float(grid.ys[best]))


def static_cvar_bounds(model: TabularModel, alpha: float, rho: float, gamma: float,
                       thresholds: int = THRESHOLDS) -> tuple[float, float]:
    """Two sound bounds on the static CVaR optimum of a model with a time limit, from the
    threshold grid: W_t(s, y) does not increase with y (a higher threshold is crossed more),
    so reading the next threshold at the grid point above gives at most the programme's
    value at every grid point, and at the point below at least. The optimum,
    max_b (1 - alpha) b + E W_0(s0, b), is then at least the first programme's best grid
    point and at most max_i (1 - alpha) y_{i+1} + E W_0(s0, y_i) of the second."""
    grid = _threshold_setup(model, gamma, thresholds)
    ys = grid.ys
    below = (1.0 - alpha) * ys + _cvar_programme(grid, alpha, rho, gamma, "up")
    above = _cvar_programme(grid, alpha, rho, gamma, "down")
    # Above the grid every return is below b: the objective's slope in b is
    # (1 - alpha) - kappa < 0 there, so the top point bounds it.
    upper = max(float(np.max((1.0 - alpha) * ys[1:] + above[:-1])),
                float((1.0 - alpha) * ys[-1] + above[-1]))
    return float(below.max()), upper


def _cvar_programme(grid: _ThresholdGrid, alpha: float, rho: float, gamma: float,
                    rounding: str) -> np.ndarray:
    """E_{s0} W_0(s0, y) on the grid's thresholds (module docstring, "Static CVaR")."""
    model, ys = grid.model, grid.ys
    kappa = (1.0 - alpha) / rho
    ended = np.stack([alpha * r - kappa * np.maximum(ys - r, 0.0) for r in grid.rewards])
    w = -kappa * np.maximum(ys, 0.0)[None, :].repeat(model.n_states, 0)  # W_H
    for t in range(grid.horizon - 1, -1, -1):
        mean = grid.best_mean[t + 1][:, None]
        outcome_values = np.empty((len(grid.rewards), model.n_states + 1, len(ys)))
        for i, r in enumerate(grid.rewards):
            value = grid.at_next_threshold(w, i, alpha * mean,
                                           (alpha + kappa) * mean - kappa * grid.queries[i],
                                           rounding)
            outcome_values[i, :-1] = alpha * r + gamma * value
            outcome_values[i, -1] = ended[i]
        w = grid.action_values(outcome_values).max(1)
    return model.start @ w


def _spectral_programme(grid: _ThresholdGrid, alpha: float, kappas: np.ndarray,
                        weights: np.ndarray, offset: float, gamma: float
                        ) -> tuple[float, float]:
    """The best alpha E[S] + (1 - alpha) sum_i w_i (b_i - E[(b_i - S)^+] / rho_i) over
    policies of (state, step, return so far) and over b_2 on the grid, with b_1 = b_2 -
    ``offset`` (module docstring): (its value, that b_2). ``kappas`` = (1 - alpha) w / rho."""
    model, ys = grid.model, grid.ys
    shifts = np.array([offset, 0.0])  # b_2 - b_i

    def penalty(levels: np.ndarray, t: int) -> np.ndarray:
        """sum_i kappa_i (y_i)^+ at step t, y_i = levels - shift_i / gamma^t."""
        return sum(k * np.maximum(levels - e * gamma ** -t, 0.0) for k, e in zip(kappas, shifts))

    w = np.repeat(-penalty(ys, grid.horizon)[None, :], model.n_states, 0)  # W_H
    total_kappa = float(kappas.sum())
    for t in range(grid.horizon - 1, -1, -1):
        mean = grid.best_mean[t + 1][:, None]
        outcome_values = np.empty((len(grid.rewards), model.n_states + 1, len(ys)))
        for i, r in enumerate(grid.rewards):
            query = grid.queries[i]  # the remainder's threshold of b_2 after reward r
            crossed = sum(k * (query - e * gamma ** -(t + 1)) for k, e in zip(kappas, shifts))
            value = grid.at_next_threshold(w, i, alpha * mean,
                                           (alpha + total_kappa) * mean - crossed)
            outcome_values[i, :-1] = alpha * r + gamma * value
            outcome_values[i, -1] = alpha * r - penalty(ys - r, t)
        w = grid.action_values(outcome_values).max(1)
    totals = (1.0 - alpha) * (weights.sum() * ys - weights[0] * offset) + model.start @ w
    best = int(np.argmax(totals))
    return float(totals[best]), float(ys[best])


def static_spectral_optimum(model: TabularModel, alpha: float, levels: tuple[float, ...],
                            weights: tuple[float, ...], gamma: float,
                            thresholds: int = SPECTRAL_THRESHOLDS) -> StaticOptimum | None:
    """max over policies of (state, step, return so far) of alpha E[S] + (1 - alpha)
    sum_i w_i CVaR_rho_i[S] (module docstring, "Static spectral risk"): one level is the
    CVaR programme, two search the offset b_2 - b_1, more get None. ``threshold`` is b_2."""
    if len(levels) == 1:
        return static_cvar_optimum(model, alpha, levels[0], gamma)
    if len(levels) > 2:
        return None
    kappas = (1.0 - alpha) * np.asarray(weights) / np.asarray(levels)
    low, high = return_bounds(model, gamma)
    horizon = value_horizon(model, gamma)
    spread = high - low
    # Above high + spread / gamma^H every threshold of any offset is above every return.
    grid = _threshold_setup(model, gamma, thresholds, reach=spread * gamma ** -horizon)
    start_value = float(model.start @ grid.best_mean[0])  # optimal_expectation's, as computed
    # The offsets b_2 - b_1 = VaR_rho_2 - VaR_rho_1 of the best law: between 0 and the width
    # of the returns' likely range (threshold_grid's fine part), then refined around the best.
    likely = min(spread, 3.0 * max(abs(start_value), high - start_value) + high - start_value)
    found: dict[float, tuple[float, float]] = {}

    def evaluate(offset: float) -> None:
        offset = float(min(max(offset, 0.0), spread))
        if offset not in found:
            found[offset] = _spectral_programme(grid, alpha, kappas, np.asarray(weights),
                                                offset, gamma)

    step = likely / (SPECTRAL_OFFSETS - 1)
    for offset in np.linspace(0.0, likely, SPECTRAL_OFFSETS):
        evaluate(offset)
    for _ in range(SPECTRAL_REFINEMENTS):
        best = max(found, key=lambda e: found[e][0])
        step /= 2.0
        evaluate(best - step)
        evaluate(best + step)
    best = max(found, key=lambda e: found[e][0])
    return StaticOptimum(*found[best])


@dataclass(frozen=True, eq=False)
class _ThresholdGrid:
    """What the threshold programmes share: the thresholds ``ys``, the horizon, the
    expectation-optimal values by step, and, per reward r, where the next state's threshold
    (y - r) / gamma falls on the grid (``positions[i]``: lower neighbour, share of the upper
    one, below / above every return)."""

    model: TabularModel
    ys: np.ndarray
    low: float  # the returns' range (return_bounds)
    high: float
    horizon: int
    best_mean: np.ndarray
    rewards: np.ndarray
    queries: list[np.ndarray]
    positions: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    reward_index: np.ndarray
    leads_to: np.ndarray

    def at_next_threshold(self, values: np.ndarray, i: int, never, always,
                          rounding: str = "linear") -> np.ndarray:
        """``values[S, Y]`` (a function of the threshold) read at each next threshold
        (y - r_i) / gamma, linearly between grid points, or at the grid point below
        (``rounding="down"``) or above (``"up"``); ``never`` / ``always`` where that
        threshold lies below / above every return (never / always crossed)."""
        lower, share, below, above = self.positions[i]
        if rounding == "linear":
            value = values[:, lower] * (1.0 - share) + values[:, lower + 1] * share
        else:
            value = values[:, lower + ((share > 0.0) if rounding == "up" else (share >= 1.0))]
        value = np.where(below[None, :], never, value)
        return np.where(above[None, :], always, value)

    def action_values(self, outcome_values: np.ndarray) -> np.ndarray:
        """Sum over outcomes of p x the value of the outcome -> ``[S, A, Y]``, from each
        reward's values ``outcome_values[R, S + 1, Y]`` (row S: the episode ended)."""
        model = self.model
        q = np.zeros((model.n_states, model.n_actions, len(self.ys)))
        for k in range(model.probs.shape[-1]):
            q += (model.probs[..., k, None]
                  * outcome_values[self.reward_index[..., k], self.leads_to[..., k]])
        return q


def _threshold_setup(model: TabularModel, gamma: float, thresholds: int,
                     reach: float = 0.0) -> _ThresholdGrid:
    """The grid of :func:`threshold_grid`, continued ``reach`` above the returns' range
    (a tenth more points, evenly); above its top a threshold counts as always crossed."""
    horizon = value_horizon(model, gamma)
    low, high = return_bounds(model, gamma)
    start_value, best_mean = optimal_expectation(model, gamma)
    ys = threshold_grid(low, high, start_value, thresholds)
    if reach > 0.0:
        ys = np.unique(np.concatenate([ys, np.linspace(high, high + reach, thresholds // 10)]))
    top = float(ys[-1])
    rewards = np.unique(model.rewards[model.probs > 0])
    queries = [(ys - r) / gamma for r in rewards]
    positions = []
    for q in queries:
        lower = np.clip(np.searchsorted(ys, q, side="right") - 1, 0, len(ys) - 2)
        share = np.clip((q - ys[lower]) / (ys[lower + 1] - ys[lower]), 0.0, 1.0)
        positions.append((lower, share, q < low, q > top))
    # Each outcome's reward (its index in ``rewards``) and where it leads: a terminal
    # outcome leads to a row n_states that holds the value of ending with that reward.
    reward_index = np.searchsorted(rewards, model.rewards).clip(0, len(rewards) - 1)
    leads_to = np.where(model.terminal, model.n_states, model.next_states)
    return _ThresholdGrid(model, ys, low, high, horizon, best_mean, rewards, queries,
                          positions, reward_index, leads_to)


def _shortfall_programme(grid: _ThresholdGrid, alpha: float, gamma: float, penalty: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """For every start threshold y, the policy of (state, step, remaining threshold) that
    maximises E[alpha S - penalty 1{S < y}]: its E[S] and P(S < y), averaged over the start
    distribution -> two arrays over ``grid.ys``.

    After t steps and return c, S < y is S_t < y_t = (y - c) / gamma^t for the rest S_t of
    the episode, and alpha S = alpha c + gamma^t alpha S_t: the rest maximises
    E[alpha S_t - penalty gamma^-t 1{S_t < y_t}], a criterion each later step keeps (the
    policy's E and P are carried, not one value, because the two parts discount apart).
    """
    model, ys = grid.model, grid.ys
    short_now = (ys > 0.0).astype(float)  # at the time limit the rest of the return is 0
    e = np.zeros((model.n_states, len(ys)))
    p = np.repeat(short_now[None, :], model.n_states, 0)
    for t in range(grid.horizon - 1, -1, -1):
        mean = grid.best_mean[t + 1][:, None]
        next_e = np.empty((len(grid.rewards), model.n_states + 1, len(ys)))
        next_p = np.empty_like(next_e)
        for i, r in enumerate(grid.rewards):
            # Never short below the returns' range, always above it: the rest of the episode
            # then only maximises E (the expectation-optimal values).
            next_e[i, :-1] = r + gamma * grid.at_next_threshold(e, i, mean, mean)
            next_p[i, :-1] = grid.at_next_threshold(p, i, 0.0, 1.0)
            next_e[i, -1] = r
            next_p[i, -1] = (r < ys).astype(float)
        q_e, q_p = grid.action_values(next_e), grid.action_values(next_p)
        best = (alpha * q_e - penalty * gamma ** -t * q_p).argmax(1)[:, None, :]
        e = np.take_along_axis(q_e, best, 1)[:, 0]
        p = np.take_along_axis(q_p, best, 1)[:, 0]
    return model.start @ e, model.start @ p


def static_var_optimum(model: TabularModel, alpha: float, rho: float, gamma: float,
                       thresholds: int = VAR_THRESHOLDS) -> StaticOptimum:
    """Bounds on max over policies of (state, step, return so far) of
    alpha E[S] + (1 - alpha) VaR_rho[S] (module docstring, "Static VaR"): on the exact laws
    where :func:`is_exact`, else on the threshold grid."""
    if is_exact(model):
        low, high = return_bounds(model, gamma)
        bounds = tabular_exact.static_var(model, alpha, rho, gamma, max(high - low, 1e-12))
        return StaticOptimum(bounds.lower, bounds.level, bounds.upper,
                             kind=EXACT if bounds.exact else INTERVAL)
    grid = _threshold_setup(model, gamma, thresholds)
    ys = grid.ys
    scale = max(grid.high - grid.low, 1e-12)
    upper = np.full(len(ys), np.inf)
    best, level = -np.inf, None
    for penalty in [0.0] + [scale * 2.0 ** k for k in VAR_PENALTY_EXPONENTS]:
        e, p = _shortfall_programme(grid, alpha, gamma, penalty)
        # Weak duality: any penalty bounds the best alpha E of the policies with
        # P(S < y) <= rho from above.
        upper = np.minimum(upper, alpha * e - penalty * p + penalty * rho)
        # A policy with P(S < y) <= rho has VaR_rho[S] >= y: it attains at least this.
        feasible = p <= rho * (1.0 - 1e-9)
        if feasible.any():
            candidates = np.where(feasible, alpha * e + (1.0 - alpha) * ys, -np.inf)
            j = int(np.argmax(candidates))
            if candidates[j] > best:
                best, level = float(candidates[j]), float(ys[j])
    upper_value = float(np.max((1.0 - alpha) * ys + upper))
    return StaticOptimum(best, level, max(upper_value, best))


def threshold_grid(low: float, high: float, start_value: float, points: int = THRESHOLDS
                   ) -> np.ndarray:
    """The thresholds y of the static CVaR programme: a quarter of the points spread over
    every return the model allows, the rest where the episode's returns lie (from the
    expectation-optimal start value V0 down by three times max(|V0|, high - V0))."""
    reach = 3.0 * max(abs(start_value), high - start_value)
    fine_low = max(low, start_value - reach)
    coarse = np.linspace(low, high, points // 4)
    fine = np.linspace(fine_low, high, points - points // 4)
    return np.unique(np.concatenate([coarse, fine]))


def static_optimum(model: TabularModel, utility: Utility, gamma: float
                   ) -> StaticOptimum | None:
    """The static optimum for the expectation, for alpha E + (1 - alpha) CVaR_rho and for
    a spectral measure of at most two levels, and bounds on it for alpha E + (1 - alpha)
    VaR_rho; None for other measures."""
    if utility.alpha == 1.0 or utility.risk == "expectation":
        return StaticOptimum(optimal_expectation(model, gamma)[0], None, kind=EXACT)
    if is_bounded(model, utility) and utility.risk in ("cvar", "var", "spectral"):
        return _bounded_static_optimum(model, utility, gamma)
    if utility.risk == "cvar":
        return static_cvar_optimum(model, utility.alpha, float(utility.params["rho"]), gamma)
    if utility.risk == "var":
        return static_var_optimum(model, utility.alpha, float(utility.params["rho"]), gamma)
    if utility.risk == "spectral":
        return static_spectral_optimum(model, utility.alpha, *spectrum(
            utility.params["levels"], utility.params["weights"]), gamma)
    if utility.risk == "entropic" and utility.alpha == 0.0:
        return static_entropic_optimum(model, float(utility.params["beta"]), gamma)
    return None


def _bounded_static_optimum(model: TabularModel, utility: Utility, gamma: float
                            ) -> StaticOptimum | None:
    """The static optimum's sound interval where :func:`is_bounded`
    (:mod:`.tabular_bounds`), its lower end at least the expectation-optimal policy's and the
    per-decision fixed point's lower ends."""
    key, utility_key = _model_key(model), _utility_key(utility)
    lower = max(_cached_policy_bounds(key, gamma, tuple(map(int, policy)), utility_key)[0]
                for policy in (expectation_optimal_policy(model, gamma),
                               _cached_fixed_point(key, gamma, utility_key).policy))
    if utility.risk == "var":
        low, high = tabular_bounds.static_var_bounds(
            model, utility.alpha, float(utility.params["rho"]), gamma, lower)
    else:
        levels, weights = spectrum(utility.params["levels"], utility.params["weights"]) if (
            utility.risk == "spectral") else ((float(utility.params["rho"]),), (1.0,))
        if len(levels) > 2:
            return None
        low, high = tabular_bounds.static_spectral_bounds(model, utility.alpha, levels,
                                                          weights, gamma, lower)
    return StaticOptimum(low, None, high, kind=EXACT if high - low <= _MEETING else INTERVAL)


def static_entropic_optimum(model: TabularModel, beta: float, gamma: float) -> StaticOptimum:
    """max -1/beta log E[exp(-beta S)], S = sum_{t < H} gamma^t r_t, over policies of the
    history: Markov in (state, step) (:mod:`~rs_lightning.references.entropic`). Exact with
    a time limit; without one the steps after H (:func:`value_horizon`) weigh gamma^H below 1e-9
    of the returns' range and are left out (an estimate)."""
    best = entropic_programme(model.probs, model.next_states, model.terminal,
                              lambda t: -beta * gamma**t * model.rewards, model.start,
                              value_horizon(model, gamma), beta)
    return StaticOptimum(best.utility, None, kind=EXACT if model.horizon is not None
                         else ESTIMATE)


# --------------------------------------------------------------------------- references

# Risk measures whose per-decision fixed point and static optimum are computed.
REFERENCE_RISKS = ("expectation", "var", "cvar", "spectral")


# What a figure is (``<key>_kind`` in eval.json): "exact" (to float precision), "interval"
# (the true value lies between ``<key>``, which a policy attains, and ``<key>_upper``) or
# "estimate" (a grid's value; ``<key>_error`` bounds its distance to the true value where a
# bound is known).
EXACT, INTERVAL, ESTIMATE = "exact", "interval", "estimate"
# Bounds closer than this are one exact value.
_MEETING = 1e-9


def references(model: TabularModel, policy: np.ndarray, utility: Utility, gamma: float
               ) -> dict[str, Any]:
    """What ``eval.json`` carries on a tabular environment (the grid worlds' keys):
    ``exact_static_utility`` of ``policy`` and the policy itself (``greedy_actions``, one
    action a state); with E, VaR or CVaR also ``per_decision_path``,
    ``per_decision_static_utility``, ``static_optimum`` and ``static_gap``. Every figure
    ``<key>`` has a ``<key>_kind`` (EXACT, INTERVAL, ESTIMATE); where the static optimum is
    an interval, ``static_optimum`` is its lower end (with VaR the best policy examined),
    so ``static_gap`` is too, and ``static_optimum_upper`` / ``static_gap_upper`` the upper
    ends."""
    policy = np.asarray(policy, dtype=np.int64)
    out: dict[str, Any] = {"greedy_actions": policy.tolist()}
    out.update(_policy_figure("exact_static_utility", model, policy, utility, gamma))
    own = out["exact_static_utility"]  # a bounded figure's lower end
    own_upper = out.get("exact_static_utility_upper", own)
    out.update(policy_free_references(model, utility, gamma))
    if "static_optimum_upper" in out and _policies_bound(out["static_optimum_kind"], model):
        # the learned policy is one more policy
        out["static_optimum"] = max(out["static_optimum"], own)
        if out["static_optimum_upper"] - out["static_optimum"] <= _MEETING:
            out["static_optimum_kind"] = EXACT
    if "static_optimum_upper" in out:
        out["static_gap_upper"] = out["static_optimum_upper"] - own
    if "static_optimum" in out:
        out["static_gap"] = max(out["static_optimum"] - own_upper, 0.0)
    return out


def policy_free_references(model: TabularModel, utility: Utility, gamma: float
                           ) -> dict[str, Any]:
    """The references of :func:`references` that need no learned policy (what a static
    run, whose policy is not one of the states alone, gets): with E, VaR or CVaR
    ``per_decision_path`` and ``per_decision_static_utility`` (the fixed point reached by
    policy iteration from the expectation-optimal policy: where several exist, that one);
    ``static_optimum`` (with VaR ``static_optimum_upper`` too: an interval's upper end),
    each with its kind."""
    key = _model_key(model)
    if utility.alpha < 1.0 and utility.risk not in REFERENCE_RISKS:
        best = _cached_optimum(key, gamma, _utility_key(utility))  # the entropic one at 0
        return {} if best is None else {"static_optimum": best.utility,
                                         "static_optimum_kind": best.kind}
    fixed_point = _cached_fixed_point(key, gamma, _utility_key(utility))
    out: dict[str, Any] = {"per_decision_path": fixed_point.path,
                           "per_decision_start": "expectation-optimal policy"}
    out.update(_policy_figure("per_decision_static_utility", model,
                              np.array(fixed_point.policy), utility, gamma,
                              fixed_point.static_utility))
    best = _cached_optimum(key, gamma, _utility_key(utility))
    if best is not None:
        out["static_optimum"], kind = best.utility, best.kind
        if best.upper is not None:
            if _policies_bound(kind, model):  # the fixed point is one more policy
                out["static_optimum"] = max(best.utility, out["per_decision_static_utility"])
            out["static_optimum_upper"] = max(best.upper, out["static_optimum"])
            if kind == INTERVAL and out["static_optimum_upper"] - out["static_optimum"] <= _MEETING:
                kind = EXACT
        out["static_optimum_kind"] = kind
    return out


def _policies_bound(kind: str, model: TabularModel) -> bool:
    """Whether a policy's static utility (the lower end of its interval) raises the lower
    end of the static optimum's bounds: where both are sound (the exact laws, or the bounds
    of :mod:`.tabular_bounds`: a policy's figure is then an interval too), or both
    estimates (VaR's bounds on a grid without a time limit)."""
    return kind == ESTIMATE or (kind == INTERVAL and (is_exact(model)
                                                      or model.horizon is not None))


# Measures monotone in the return law's stochastic order: a law below another has no more
# of them, so the two laws of tabular_bounds bound them.
MONOTONE_RISKS = ("expectation", "var", "cvar", "spectral", "entropic")


def is_bounded(model: TabularModel, utility: Utility | None = None) -> bool:
    """Whether the model's figures are sound intervals (:mod:`.tabular_bounds`): its laws
    are not finite (:func:`is_exact` is not) but it has a time limit, and the utility is
    monotone."""
    return (not is_exact(model) and model.horizon is not None
            and (utility is None or utility.alpha == 1.0 or utility.risk in MONOTONE_RISKS))


def _policy_figure(key: str, model: TabularModel, policy: np.ndarray, utility: Utility,
                   gamma: float, value: float | None = None) -> dict[str, Any]:
    """``<key>``: U of a stationary policy's episode return, with its kind: exact on the
    exact laws; an interval where :func:`is_bounded` (``<key>`` its lower end,
    ``<key>_upper``); else the grid's estimate (``value`` where already computed)."""
    if is_bounded(model, utility):
        low, high = _cached_policy_bounds(_model_key(model), gamma, tuple(map(int, policy)),
                                          _utility_key(utility))
        if high - low <= _MEETING:
            return {key: low, f"{key}_kind": EXACT}
        return {key: low, f"{key}_upper": high, f"{key}_kind": INTERVAL}
    if value is None:
        value = static_utility(model, policy, utility, gamma,
                               None if is_exact(model) else _cached_grid(_model_key(model),
                                                                         gamma))
    return {key: value, **_estimate_fields(key, model, utility, gamma)}


def _estimate_fields(key: str, model: TabularModel, utility: Utility, gamma: float
                     ) -> dict[str, Any]:
    """``<key>_kind`` of a fixed policy's static utility: exact on the exact laws, else an
    estimate on the grid with the grid's bound on its error (:func:`grid_error_bounds`)."""
    if is_exact(model):
        return {f"{key}_kind": EXACT}
    out: dict[str, Any] = {f"{key}_kind": ESTIMATE}
    if utility.alpha < 1.0 and utility.risk in ("var", "cvar"):
        bounds = grid_error_bounds(_cached_grid(_model_key(model), gamma), gamma,
                                   float(utility.params["rho"]), model.horizon)
        out[f"{key}_error"] = (1.0 - utility.alpha) * bounds[utility.risk]
    elif utility.alpha == 1.0 or utility.risk == "expectation":
        out[f"{key}_error"] = 0.0
    return out


# Caches keyed by the model's content: a process that runs many jobs of one world setting
# (a benchmark's worker) computes its references once, though each job reads its own model.
_MODELS: dict[str, TabularModel] = {}
_DIGESTS: "weakref.WeakKeyDictionary[TabularModel, str]" = weakref.WeakKeyDictionary()


def _model_key(model: TabularModel) -> str:
    digest = _DIGESTS.get(model)
    if digest is None:
        content = hashlib.sha256(repr((model.horizon, model.shape)).encode())
        for array in (model.probs, model.next_states, model.rewards, model.terminal, model.start):
            content.update(f"{array.dtype.str}{array.shape}".encode())
            content.update(np.ascontiguousarray(array).tobytes())
        digest = _DIGESTS[model] = content.hexdigest()
    _MODELS.setdefault(digest, model)
    return digest


def _utility_key(utility: Utility) -> tuple:
    return utility.alpha, utility.risk, tuple(sorted(utility.params.items()))


def _utility_of(key: tuple) -> Utility:
    alpha, risk, params = key
    return Utility(alpha, risk, dict(params))


@functools.lru_cache(maxsize=None)
def _cached_acyclic(model_key: str) -> bool:
    return tabular_exact.is_acyclic(_MODELS[model_key])


@functools.lru_cache(maxsize=16)
def _cached_grid(model_key: str, gamma: float) -> ReturnGrid:
    return model_grid(_MODELS[model_key], gamma)


@functools.lru_cache(maxsize=64)
def _cached_law_bounds(model_key: str, gamma: float, policy: tuple[int, ...] | None
                       ) -> tabular_bounds.LawBounds:
    """:func:`tabular_bounds.episode_law_bounds` of a policy (None: the uniform-random)."""
    model = _MODELS[model_key]
    if policy is None:
        return tabular_bounds.episode_law_bounds(*_uniform_random_model(model), gamma)
    return tabular_bounds.episode_law_bounds(model, np.array(policy), gamma)


@functools.lru_cache(maxsize=256)
def _cached_policy_bounds(model_key: str, gamma: float, policy: tuple[int, ...] | None,
                          utility_key: tuple) -> tuple[float, float]:
    return tabular_bounds.utility_bounds(_cached_law_bounds(model_key, gamma, policy),
                                         _utility_of(utility_key))


@functools.lru_cache(maxsize=64)
def _cached_fixed_point(model_key: str, gamma: float, utility_key: tuple
                        ) -> PerDecisionFixedPoint:
    return per_decision_fixed_point(_MODELS[model_key], _utility_of(utility_key), gamma,
                                    grid=_cached_grid(model_key, gamma))


@functools.lru_cache(maxsize=64)
def _cached_optimum(model_key: str, gamma: float, utility_key: tuple
                    ) -> StaticOptimum | None:
    return static_optimum(_MODELS[model_key], _utility_of(utility_key), gamma)


__all__ = [
    "CYCLE", "MAX_ATOMS", "MAX_STATES", "MIN_ATOMS", "LearnerLaws", "PerDecisionFixedPoint",
    "ReturnGrid",
    "StaticOptimum", "TabularModel", "action_utilities", "describe_path", "episode_law",
    "expectation_optimal_policy", "expected_values", "grid_error_bounds", "learner_laws",
    "model_from_transitions", "model_grid", "nominal_path", "optimal_expectation",
    "static_cvar_bounds",
    "per_decision_fixed_point", "references", "return_bounds", "static_cvar_optimum",
    "static_entropic_optimum", "static_optimum", "static_spectral_optimum", "static_utility",
    "static_var_optimum",
    "tabular_model", "uniform_random_reference", "uniform_random_utility",
]
