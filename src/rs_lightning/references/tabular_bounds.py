"""Sound bounds on return laws and static optima of tabular worlds whose episodes can revisit
states (cliff walking), where the laws have too many atoms to be computed exactly.

Most rewards of such a world are one value, the **baseline** r_b (cliff walking: -1 a step;
a fall, -5, is the exception). The return of an episode that ends at step T is
S = r_b G(T) + D, G(T) = sum_{t < T} gamma^t, and the **deviation** D = sum_t gamma^t
(r_t - r_b) only moves at the exceptional rewards. Laws and thresholds are carried on a
uniform grid of D (or of a threshold less D), so rounding happens only there, and always
in one direction:

- :func:`episode_law_bounds`: a stationary policy's law of the episode's discounted return
  from the start, forward in time, each deviation rounded down for one law and up for the
  other: every episode's return in the first is at most its true one and in the second at
  least, so the first law is stochastically below the true law and the second above, and
  every monotone measure (E, VaR, CVaR, spectral) of the true law lies between theirs
  (:func:`utility_bounds`). Cliff walking's per-decision and random-policy figures are such
  intervals, their width the grid's spacing times the falls of an episode's tail.
- :func:`static_cvar_bounds` and :func:`static_var_bounds`: Bauerle & Ott's programme over
  policies of the history on the state (step, state, w), w = b - D_t the threshold b less the
  deviation so far (the part of b the rest of the episode has to reach): w moves only at an
  exceptional reward, to w - gamma^t (r - r_b), and is read at the grid point below (above).
  The programme's value does not increase with w, so reading below bounds the optimum from
  above and reading above from below; the VaR programme's lower end is attained by a policy
  that acts on the rounded threshold (its shortfall is at most the one counted, its mean is
  exact), its upper end holds by weak duality.

A threshold b of the static optimum is only worth searching where
(1 - alpha) b + alpha E* reaches a lower bound L already known (E* the best mean), since
the programme's value is at most alpha E*: the thresholds run from (L - alpha E*) / (1 -
alpha) to the highest return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse
import torch

from rs_lightning.references.tabular_exact import LEVEL_TOLERANCE, Law, merged
from rs_lightning.risk import ReturnDistribution, Utility

# The deviation grid's spacing: this fraction of the smallest exceptional reward step
# (cliff walking: 4 x 5e-4 = 2e-3), made coarser where the grid would pass MAX_CELLS.
SPACING_FRACTION = 5e-4
MAX_CELLS = 400_000
# The static programmes' threshold grid: at most this many points (cliff walking: 16,000
# at the spacing above).
MAX_THRESHOLDS = 40_000
# Penalties of the VaR Lagrangian: (returns' range) x 2^(k / 4) for these k, besides 0.
VAR_PENALTY_STEPS = tuple(range(-40, 12))
# Mass a step may move to the returns' extremes from the tails of the deviations (the
# laws' widths then follow the likely deviations, not every possible one).
NEGLIGIBLE = 1e-14
# A shift within this (relative) of a whole number of cells still rounds the safe way.
_ROUNDING_MARGIN = 1e-9


def baseline_reward(model) -> float:
    """The reward of the most outcomes of positive probability."""
    values, counts = np.unique(model.rewards[model.probs > 0], return_counts=True)
    return float(values[np.argmax(counts)])


def _steps(model, gamma: float) -> int:
    if model.horizon is not None:
        return int(model.horizon)
    return math.ceil(math.log(1e-12) / math.log(gamma))


def _spacing(model, gamma: float, steps: int) -> float:
    deviations = model.rewards[model.probs > 0] - baseline_reward(model)
    sizes = np.abs(deviations[deviations != 0.0])
    unit = float(sizes.min()) if sizes.size else 1.0
    reach = float(np.abs(deviations).max(initial=0.0)) * (1.0 - gamma ** steps) / (1.0 - gamma)
    return max(unit * SPACING_FRACTION, reach / MAX_CELLS, 1e-12)


def _shift(amount: float, spacing: float, direction: int) -> int:
    """``amount / spacing`` rounded down (direction -1) or up (+1), with a margin, so that
    the rounded shift is never on the wrong side of the true one."""
    if amount == 0.0:
        return 0
    cells = amount / spacing
    margin = _ROUNDING_MARGIN * max(1.0, abs(cells))
    return math.floor(cells - margin) if direction < 0 else math.ceil(cells + margin)


@dataclass(frozen=True)
class LawBounds:
    """Two laws of the episode's return: ``lower`` stochastically below the true one,
    ``upper`` above (each a sorted ``(values, probs)``)."""

    lower: Law
    upper: Law


def episode_law_bounds(model, policy: np.ndarray, gamma: float,
                       spacing: float | None = None) -> LawBounds:
    """Bounds on the law of sum_{t < H} gamma^t r_t from the start under the stationary
    ``policy`` (H the time limit; without one, the laws run until gamma^H is below 1e-12 and
    the rest is bounded by the returns' range), by a forward pass over (state, deviation)."""
    steps = _steps(model, gamma)
    baseline = baseline_reward(model)
    spacing = spacing or _spacing(model, gamma, steps)
    states = np.arange(model.n_states)
    policy = np.asarray(policy, dtype=np.int64)
    probs = model.probs[states, policy]
    next_states = model.next_states[states, policy]
    rewards = model.rewards[states, policy]
    terminal = model.terminal[states, policy]
    groups = []  # per reward: the matrix of going on (to, from), the vector of ending
    for reward in np.unique(rewards[probs > 0]):
        chosen = (rewards == reward) & (probs > 0)
        on = chosen & ~terminal
        # sparse: a state leads to a few states, and the laws are wide
        going = scipy.sparse.csr_matrix(
            (probs[on], (next_states[on], np.broadcast_to(states[:, None], probs.shape)[on])),
            shape=(model.n_states, model.n_states))  # [to, from]
        ending = np.where(chosen & terminal, probs, 0.0).sum(1)
        groups.append((float(reward), going, ending))
    tail = (0.0, 0.0) if model.horizon is not None else _tail(model, gamma, steps)
    return LawBounds(*(_forward(model, groups, gamma, steps, baseline, spacing, direction,
                                tail[(direction + 1) // 2])
                       for direction in (-1, 1)))


def _tail(model, gamma: float, steps: int) -> tuple[float, float]:
    low, high = return_bounds(model, gamma)
    return gamma ** steps * low, gamma ** steps * high


def _forward(model, groups, gamma: float, steps: int, baseline: float, spacing: float,
             direction: int, tail: float) -> Law:
    """One of the two bounding laws: every deviation rounded in ``direction``; the
    deviations whose mass together stays below NEGLIGIBLE a step are moved to the lowest
    (direction -1) or highest return any episode can have."""
    extreme = return_bounds(model, gamma)[(direction + 1) // 2]
    mass = model.start[:, None].astype(np.float64)  # [S, cells], cell j = deviation (lo + j)
    lo = 0
    values, probs = [], []
    base_sum = 0.0  # r_b G(t)
    moved = 0.0
    for t in range(steps):
        discount = gamma ** t
        pieces = []
        for reward, going, ending in groups:
            shift = _shift(discount * (reward - baseline), spacing, direction)
            ended = ending @ mass
            if ended.any():
                cells = np.flatnonzero(ended)
                values.append(base_sum + discount * baseline + (lo + shift + cells) * spacing)
                probs.append(ended[cells])
            if going.nnz:
                pieces.append((lo + shift, going @ mass))
        base_sum += discount * baseline
        if not pieces:
            mass = np.zeros((model.n_states, 0))
            break
        new_lo = min(start for start, _ in pieces)
        width = max(start + part.shape[1] for start, part in pieces) - new_lo
        mass = np.zeros((model.n_states, width))
        for start, part in pieces:
            mass[:, start - new_lo:start - new_lo + part.shape[1]] += part
        column = mass.sum(0)
        first = int(np.searchsorted(np.cumsum(column), NEGLIGIBLE, side="right"))
        last = width - int(np.searchsorted(np.cumsum(column[::-1]), NEGLIGIBLE, side="right"))
        if first >= last:
            first, last = 0, width
        moved += float(column[:first].sum() + column[last:].sum())
        mass = np.ascontiguousarray(mass[:, first:last])
        lo = new_lo + first
    left = mass.sum(0)
    cells = np.flatnonzero(left)
    if cells.size:
        values.append(base_sum + tail + (lo + cells) * spacing)
        probs.append(left[cells])
    if moved > 0.0:
        values.append(np.array([extreme])), probs.append(np.array([moved]))
    return merged(np.concatenate(values), np.concatenate(probs))


def utility_bounds(bounds: LawBounds, utility: Utility) -> tuple[float, float]:
    """U of the two bounding laws: the true law's U lies between (U is monotone)."""
    ends = []
    for values, probs in (bounds.lower, bounds.upper):
        law = ReturnDistribution(torch.from_numpy(values), torch.from_numpy(probs))
        ends.append(float(utility(law)))
    return ends[0], ends[1]


def policy_utility_bounds(model, policy: np.ndarray, utility: Utility, gamma: float
                          ) -> tuple[float, float]:
    """An interval that holds U of the episode's discounted return under ``policy``."""
    return utility_bounds(episode_law_bounds(model, policy, gamma), utility)


# ------------------------------------------------------------------ static programmes


@dataclass(frozen=True, eq=False)
class _Programme:
    """What the threshold programmes share: the grid of w (``ws``), the steps, the
    baseline, G(t), the best mean of the rest from each (step, state) in the episode's
    units (gamma^t times the remainder's), the rewards and where each outcome leads."""

    model: object
    gamma: float
    ws: np.ndarray
    spacing: float
    steps: int
    baseline: float
    base_sums: np.ndarray  # r_b G(t), t = 0..steps
    best_mean: np.ndarray  # [steps + 1, S]
    certain: np.ndarray  # [steps + 1, S]: above this w every episode from there is short
    rewards: np.ndarray
    outcomes: scipy.sparse.csr_matrix  # [(s, a), (reward, state or ended)]: probabilities

    def read(self, values: np.ndarray, t: int, i: int, direction: int, below, above
             ) -> tuple[np.ndarray, np.ndarray]:
        """``values[S, W]`` read at the next threshold w - gamma^t (r_i - r_b), rounded to
        the grid point below (direction -1) or above (+1), and the exact next thresholds;
        ``below(index, w)`` / ``above(index, w)`` give the value off the grid's ends."""
        amount = -self.gamma ** t * (self.rewards[i] - self.baseline)
        exact = self.ws + amount
        index = np.arange(len(self.ws)) + _shift(amount, self.spacing, direction)
        inside = np.clip(index, 0, len(self.ws) - 1)
        out = values[:, inside]
        if below is not None and (index < 0).any():
            out[:, index < 0] = below(index < 0, exact[index < 0])
        if (index >= len(self.ws)).any():
            high = index >= len(self.ws)
            out[:, high] = above(high, exact[high])
        return out, exact

    def action_values(self, outcome_values: np.ndarray) -> np.ndarray:
        """sum_k p_k (value of outcome k) -> ``[S, A, W]`` from ``outcome_values[R, S + 1,
        W]`` (row S: the episode ended)."""
        model = self.model
        flat = outcome_values.reshape(-1, outcome_values.shape[-1])
        return (self.outcomes @ flat).reshape(model.n_states, model.n_actions, -1)


def _programme(model, gamma: float, low: float, high: float) -> _Programme:
    steps = _steps(model, gamma)
    baseline = baseline_reward(model)
    spacing = max(_spacing(model, gamma, steps), (high - low) / (MAX_THRESHOLDS - 1))
    ws = low + spacing * np.arange(math.ceil((high - low) / spacing - 1e-9) + 1)
    _, remainder = optimal_expectation(model, gamma)
    best_mean = remainder[:steps + 1] * gamma ** np.arange(steps + 1)[:, None]
    rewards = np.unique(model.rewards[model.probs > 0])
    reward_index = np.searchsorted(rewards, model.rewards).clip(0, len(rewards) - 1)
    leads_to = np.where(model.terminal, model.n_states, model.next_states)
    rows = np.broadcast_to(np.arange(model.n_states * model.n_actions).reshape(
        model.n_states, model.n_actions, 1), model.probs.shape)
    outcomes = scipy.sparse.csr_matrix(
        (model.probs.ravel(), (rows.ravel(), (reward_index * (model.n_states + 1)
                                              + leads_to).ravel())),
        shape=(model.n_states * model.n_actions, len(rewards) * (model.n_states + 1)))
    base_sums = baseline * np.concatenate([[0.0], np.cumsum(gamma ** np.arange(steps))])
    certain = base_sums[:, None] + _highest_remainders(model, gamma, steps)
    return _Programme(model, gamma, ws, spacing, steps, baseline, base_sums, best_mean,
                      certain, rewards, outcomes)


def _cvar_values(grid: _Programme, alpha: float, kappas: tuple[float, ...],
                 offsets: tuple[float, ...], direction: int) -> np.ndarray:
    """E_{s0} W_0(s0, w) on the grid, W_t(s, w) = max over policies of the rest of
    E[alpha sum_{u >= t} gamma^u r_u - sum_i kappa_i (w_T - offset_i - r_b G(T))^+], the
    thresholds read below (direction -1: at least W, an upper bound) or above (+1)."""
    model, ws = grid.model, grid.ws
    total_kappa = float(sum(kappas))

    def penalty(w: np.ndarray, t: int) -> np.ndarray:
        return sum(k * np.maximum(w - e - grid.base_sums[t], 0.0)
                   for k, e in zip(kappas, offsets))

    values = np.repeat(-penalty(ws, grid.steps)[None, :], model.n_states, 0)
    for t in range(grid.steps - 1, -1, -1):
        outcome_values = np.empty((len(grid.rewards), model.n_states + 1, len(ws)))
        for i, r in enumerate(grid.rewards):
            # Off the grid the value moves with w at a slope between 0 and -sum kappa, and
            # at -sum kappa where every episode from there is short.
            top, bottom = values[:, -1:], values[:, :1]
            certain = np.maximum(grid.certain[t + 1][:, None], ws[-1]) + max(offsets)

            def above(mask, w, top=top, certain=certain):
                if direction > 0:
                    return top - total_kappa * (w - ws[-1])
                return top - total_kappa * np.maximum(w - certain, 0.0)

            def below(mask, w, bottom=bottom):
                return bottom if direction > 0 else bottom + total_kappa * (ws[0] - w)

            read, exact = grid.read(values, t, i, direction, below, above)
            if t + 1 == grid.steps:
                read = -penalty(exact, t + 1)[None, :].repeat(model.n_states, 0)
            outcome_values[i, :-1] = alpha * grid.gamma ** t * r + read
            outcome_values[i, -1] = alpha * grid.gamma ** t * r - penalty(exact, t + 1)
        values = grid.action_values(outcome_values).max(1)
    return model.start @ values


def _threshold_range(model, gamma: float, alpha: float, lower: float
                     ) -> tuple[float, float, float]:
    """The thresholds worth searching, from (lower - alpha E*) / (1 - alpha) to the highest
    return an episode can have (no VaR is above it), and E*."""
    best, _ = optimal_expectation(model, gamma)
    return (lower - alpha * best) / (1.0 - alpha), highest_return(model, gamma), best


def highest_return(model, gamma: float) -> float:
    """The highest discounted return of an episode from the start (every outcome of
    positive probability counts, the time limit ends it)."""
    values = _highest_remainders(model, gamma, _steps(model, gamma))[0]
    return float(values[model.start > 0].max())


def _highest_remainders(model, gamma: float, steps: int) -> np.ndarray:
    """``[steps + 1, S]``: the highest sum_{u >= t} gamma^u r_u from state s at step t."""
    possible = model.probs > 0
    out = np.zeros((steps + 1, model.n_states))
    for t in range(steps - 1, -1, -1):
        going = np.where(model.terminal, 0.0, out[t + 1][model.next_states])
        out[t] = np.where(possible, gamma ** t * model.rewards + going, -np.inf).max((1, 2))
    return out


def static_cvar_bounds(model, alpha: float, rho: float, gamma: float, lower: float
                       ) -> tuple[float, float]:
    """Bounds on max over policies of the history of alpha E[S] + (1 - alpha) CVaR_rho[S]
    (module docstring); ``lower``: a lower bound already known (a policy's)."""
    return static_spectral_bounds(model, alpha, (rho,), (1.0,), gamma, lower)


def static_spectral_bounds(model, alpha: float, levels: tuple[float, ...],
                           weights: tuple[float, ...], gamma: float, lower: float,
                           offsets: int = 9, refinements: int = 5) -> tuple[float, float]:
    """Bounds on max over policies of the history of alpha E[S] + (1 - alpha) sum_i w_i
    CVaR_rho_i[S], one or two levels (rho_1 < rho_2), ``lower`` a lower bound known.

    Rockafellar & Uryasev's form with thresholds b_1 <= b_2 (the optimum's VaRs): for an
    offset e = b_2 - b_1 the programme runs on the threshold of b_2. Its value does not
    increase with b_1, so over offsets in [e_j, e_{j+1}] the optimum is at most the
    programme's at e_{j+1} plus (1 - alpha) w_1 (e_{j+1} - e_j); the offsets are refined
    where that bound is above the best value found."""
    b_low, b_high, best_mean = _threshold_range(model, gamma, alpha, lower)
    low, _ = return_bounds(model, gamma)
    b_low = max(b_low, low)
    b_high = max(b_high, b_low)
    grid = _programme(model, gamma, b_low, b_high)
    ws = grid.ws
    kappas = tuple((1.0 - alpha) * w / rho for w, rho in zip(weights, levels))
    total_weight = float(sum(weights))
    found: dict[float, tuple[float, float]] = {}
    # Below b_low: at most (1 - alpha) b_low + alpha E* <= lower.
    floor_bound = (1.0 - alpha) * total_weight * b_low + alpha * best_mean

    def evaluate(offset: float) -> tuple[float, float]:
        if offset not in found:
            shifts = (offset, 0.0) if len(levels) == 2 else (0.0,)
            linear = (1.0 - alpha) * (total_weight * ws - (weights[0] * offset
                                                          if len(levels) == 2 else 0.0))
            below = linear + _cvar_values(grid, alpha, kappas, shifts, +1)
            above = _cvar_values(grid, alpha, kappas, shifts, -1)
            # Between two grid points b_2 rises by one spacing: read the programme at the
            # lower one, the linear part at the upper one.
            step = (1.0 - alpha) * total_weight * grid.spacing
            found[offset] = (float(below.max()),
                             float(max(np.max(linear + above + step), floor_bound)))
        return found[offset]

    if len(levels) == 1:
        low_value, high_value = evaluate(0.0)
        return max(low_value, lower), max(high_value, low_value, lower)
    spread = b_high - low
    cells = [(float(e0), float(e1)) for e0, e1 in zip(np.linspace(0.0, spread, offsets)[:-1],
                                                      np.linspace(0.0, spread, offsets)[1:])]
    best = max(lower, evaluate(0.0)[0])
    for _ in range(refinements + 1):
        bounds = {}
        for e0, e1 in cells:
            value, top = evaluate(e1)
            best = max(best, value)
            bounds[(e0, e1)] = top + (1.0 - alpha) * weights[0] * (e1 - e0)
        open_cells = [c for c in cells if bounds[c] > best + 1e-9]
        if not open_cells:
            return best, best
        upper = max(bounds[c] for c in cells)
        cells = [half for e0, e1 in open_cells
                 for half in ((e0, 0.5 * (e0 + e1)), (0.5 * (e0 + e1), e1))]
    return best, max(upper, best)


def static_var_bounds(model, alpha: float, rho: float, gamma: float, lower: float
                      ) -> tuple[float, float]:
    """Bounds on max over deterministic policies of the history of alpha E[S] + (1 -
    alpha) VaR_rho[S] (module docstring); ``lower``: a lower bound already known (a
    policy's). The optimum is the largest over thresholds y of (1 - alpha) y + max
    {alpha E[S] : P(S < y) < rho'}; for a penalty lambda the programme maximising
    E[alpha S - lambda 1{S < y}] bounds the inner maximum by alpha E - lambda P + lambda rho'
    (read below), and its policy reading above is feasible where its P is below rho'."""
    level = rho - min(LEVEL_TOLERANCE, 0.5 * rho)
    b_low, b_high, best_mean = _threshold_range(model, gamma, alpha, lower)
    low, high = return_bounds(model, gamma)
    b_low = max(b_low, low)
    grid = _programme(model, gamma, b_low, max(b_high, b_low))
    ws = grid.ws
    scale = max(high - low, 1e-12)
    penalties = [0.0] + [scale * 2.0 ** (k / 4.0) for k in VAR_PENALTY_STEPS]
    bounds = np.stack([_shortfall_value(grid, alpha, penalty) + penalty * level
                       for penalty in penalties])
    upper = bounds.min(0)
    cells = (1.0 - alpha) * np.append(ws[1:], ws[-1]) + upper
    floor_bound = (1.0 - alpha) * b_low + alpha * best_mean
    # The policies of the penalties that bound the best threshold's cell, and of their
    # neighbours, are the likeliest feasible ones near the optimum.
    tight = int(np.argmin(bounds[:, int(np.argmax(cells))]))
    best = lower
    for j in range(max(tight - 1, 0), min(tight + 2, len(penalties))):
        mean, short = _shortfall_policy(grid, alpha, penalties[j])
        feasible = short < level
        if feasible.any():
            best = max(best, float(np.max(np.where(feasible, alpha * mean + (1.0 - alpha) * ws,
                                                   -np.inf))))
    return best, float(max(np.max(cells), floor_bound, best))


def _shortfall_value(grid: _Programme, alpha: float, penalty: float) -> np.ndarray:
    """E_{s0} of max over policies of E[alpha S - penalty 1{S < b}] for b on the grid, an
    upper bound (thresholds read below)."""
    model, ws = grid.model, grid.ws

    def short(w: np.ndarray, t: int) -> np.ndarray:
        return (w > grid.base_sums[t]).astype(float)

    values = np.repeat(-penalty * short(ws, grid.steps)[None, :], model.n_states, 0)
    for t in range(grid.steps - 1, -1, -1):
        outcome_values = np.empty((len(grid.rewards), model.n_states + 1, len(ws)))
        never = alpha * grid.best_mean[t + 1][:, None]
        for i, r in enumerate(grid.rewards):
            certain = grid.certain[t + 1][:, None]
            read, exact = grid.read(
                values, t, i, -1, lambda mask, w: never,
                lambda mask, w, top=values[:, -1:], certain=certain: np.where(
                    w > certain, np.minimum(top, never - penalty), top))
            if t + 1 == grid.steps:
                read = -penalty * short(exact, t + 1)[None, :].repeat(model.n_states, 0)
            outcome_values[i, :-1] = alpha * grid.gamma ** t * r + read
            outcome_values[i, -1] = alpha * grid.gamma ** t * r - penalty * short(exact, t + 1)
        values = grid.action_values(outcome_values).max(1)
    return model.start @ values


def _shortfall_policy(grid: _Programme, alpha: float, penalty: float
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The policy of (step, state, threshold read above) maximising E[alpha S - penalty
    1{S < b}]: its exact E[S] and a bound above its P(S < b), for b on the grid. Its own
    threshold is never below the true one, so a shortfall it does not count cannot happen."""
    model, ws = grid.model, grid.ws

    def short(w: np.ndarray, t: int) -> np.ndarray:
        return (w > grid.base_sums[t]).astype(float)

    mean = np.zeros((model.n_states, len(ws)))
    prob = np.repeat(short(ws, grid.steps)[None, :], model.n_states, 0)
    for t in range(grid.steps - 1, -1, -1):
        means = np.empty((len(grid.rewards), model.n_states + 1, len(ws)))
        probs = np.empty_like(means)
        best_next = grid.best_mean[t + 1][:, None]
        for i, r in enumerate(grid.rewards):
            # Above the grid the policy maximises E and counts every episode short.
            m, exact = grid.read(mean, t, i, +1, None, lambda mask, w: best_next)
            p, _ = grid.read(prob, t, i, +1, None, lambda mask, w: 1.0)
            if t + 1 == grid.steps:
                m = np.zeros_like(m)
                p = short(exact, t + 1)[None, :].repeat(model.n_states, 0)
            means[i, :-1] = grid.gamma ** t * r + m
            probs[i, :-1] = p
            means[i, -1] = grid.gamma ** t * r
            probs[i, -1] = short(exact, t + 1)
        q_mean, q_prob = grid.action_values(means), grid.action_values(probs)
        objective = alpha * q_mean - penalty * q_prob
        best = objective.argmax(1)[:, None, :]
        mean = np.take_along_axis(q_mean, best, 1)[:, 0]
        prob = np.take_along_axis(q_prob, best, 1)[:, 0]
    return model.start @ mean, model.start @ prob


# ------------------------------------------------------------------ the model's ranges
# The model's return range and best expectation, read here and by tabular_references
# (which imports this module, so they live here).
def return_bounds(model, gamma: float) -> tuple[float, float]:
    """The lowest and highest discounted return any policy can get from any state (no time
    limit; 0 included, the return of a truncated remainder): min / max value iteration
    over outcomes of positive probability, started from a valid bound, so every iterate
    stays one."""
    possible = model.probs > 0
    rewards = np.where(possible, model.rewards, np.nan)
    r_low, r_high = float(np.nanmin(rewards)), float(np.nanmax(rewards))
    low = np.full(model.n_states, min(r_low, 0.0) / (1.0 - gamma))
    high = np.full(model.n_states, max(r_high, 0.0) / (1.0 - gamma))
    for _ in range(100_000):
        go_on = np.where(model.terminal, 0.0, gamma)
        new_low = np.where(possible, model.rewards + go_on * low[model.next_states], np.inf)
        new_high = np.where(possible, model.rewards + go_on * high[model.next_states], -np.inf)
        new_low, new_high = new_low.min((1, 2)), new_high.max((1, 2))
        moved = max(np.abs(new_low - low).max(), np.abs(new_high - high).max())
        low, high = new_low, new_high
        if moved < 1e-9:
            break
    return min(float(low.min()), 0.0), max(float(high.max()), 0.0)


def expected_q(model, values: np.ndarray, gamma: float) -> np.ndarray:
    """E[r + gamma V(s')] of every (state, action) ``[S, A]`` for values ``values[S]``."""
    go_on = np.where(model.terminal, 0.0, gamma)
    return (model.probs * (model.rewards + go_on * values[model.next_states])).sum(-1)


def value_horizon(model, gamma: float) -> int:
    """The time limit, or, without one, the steps after which gamma^t of any return is
    below 1e-9 of the returns' range."""
    if model.horizon is not None:
        return int(model.horizon)
    return math.ceil(math.log(1e-9) / math.log(gamma))


def optimal_expectation(model, gamma: float) -> tuple[float, np.ndarray]:
    """max E[sum_{t < H} gamma^t r_t] from the start by finite-horizon value iteration
    (policies of state and step), and the values V_t(s) for t = 0..H -> ``[H + 1, S]``."""
    horizon = value_horizon(model, gamma)
    values = np.zeros((horizon + 1, model.n_states))
    for t in range(horizon - 1, -1, -1):
        values[t] = expected_q(model, values[t + 1], gamma).max(1)
    return float(model.start @ values[0]), values


__all__ = [
    "LawBounds", "baseline_reward", "episode_law_bounds", "expected_q", "optimal_expectation",
    "policy_utility_bounds", "return_bounds", "static_cvar_bounds", "static_spectral_bounds",
    "static_var_bounds", "utility_bounds", "value_horizon",
]
