"""Exact return laws and static optima on tabular worlds whose every episode is short.

Where no state can be visited twice in an episode (the model's graph of non-terminal outcomes
is acyclic, as on the finite-horizon worlds whose state holds the period: trading, the
American put), every law is finite and is computed exactly (:mod:`.tabular_references`
calls this module there):

- a law is its atoms, the exact set of discounted returns r_0 + gamma r_1 + ..., and their
  probabilities (:func:`merged`: two atoms are one only when equal to float precision),
  never projected on a grid;
- the static CVaR optimum over policies of the history is exact (:func:`static_cvar`): for
  each threshold b of Rockafellar & Uryasev's form, Bauerle & Ott's programme W_t(s, y) is a
  piecewise-linear function of the remainder's threshold y with finitely many knots, and is
  carried as one (:class:`PiecewiseLinear`: knots, values, the end slopes);
- static VaR over deterministic history-dependent policies is a chance-constrained
  programme: for each penalty lambda the programme maximising E[alpha S - lambda 1{S < y}]
  is a step function of y (:class:`Steps`), computed exactly with the E[S] and P(S < y) of its
  policy; every such policy with P(S < y) below the level attains alpha E + (1 - alpha) y
  (a lower bound attained by an explicit policy), and weak duality bounds the optimum from
  above at every y (:func:`static_var_bounds`). Both are exact statements about the exact
  laws. For the thresholds they leave open, :func:`static_var` searches every deterministic
  policy of the history through the Pareto frontier of (P(S < y), E[S]) on the tree of
  (step, state, return so far), which closes the gap where the tree is small (the American
  put); elsewhere (trading) the two bounds are the answer.

Every programme runs on the nodes (step, state) an episode can reach (:func:`reachable`),
so a time limit shorter than the longest path is honoured.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Two returns closer than this (relative to their size) are one atom: sums of the same
# rewards in another order differ by float rounding, which is far below this.
FLOAT_EQUAL = 1e-12
# The VaR level counts as reached within this (risk/measures.py's value_at_risk).
LEVEL_TOLERANCE = 1e-6
# Penalties of the VaR Lagrangian: (returns' range) x 2^(k / 4) for these k, besides 0.
VAR_PENALTY_STEPS = tuple(range(-48, 25))
# The exact VaR search (static_var) gives up, keeping the bounds, past these many atoms left
# open by the bounds or a Pareto frontier of more points than this.
MAX_OPEN_ATOMS = 64
MAX_FRONTIER = 4096

Law = tuple[np.ndarray, np.ndarray]  # sorted atoms, their probabilities


def merged(values: np.ndarray, probs: np.ndarray) -> Law:
    """The law of atoms ``values`` with ``probs``: sorted, atoms equal to float precision
    made one (the first one's value), zero probabilities dropped."""
    keep = probs > 0.0
    values, probs = values[keep], probs[keep]
    order = np.argsort(values, kind="stable")
    values, probs = values[order], probs[order]
    if values.size < 2:
        return values, probs
    new = np.empty(values.size, dtype=bool)
    new[0] = True
    new[1:] = np.diff(values) > FLOAT_EQUAL * np.maximum(1.0, np.abs(values[1:]))
    starts = np.flatnonzero(new)
    return values[starts], np.add.reduceat(probs, starts)


def is_acyclic(model) -> bool:
    """Whether no state can follow itself through non-terminal outcomes of positive
    probability under any actions (then every law is finite)."""
    going = (model.probs > 0) & ~model.terminal
    successors = [set(model.next_states[s][going[s]].tolist()) for s in range(model.n_states)]
    state = np.zeros(model.n_states, dtype=np.int8)  # 0 new, 1 on the path, 2 done
    for root in range(model.n_states):
        if state[root]:
            continue
        stack = [(root, iter(successors[root]))]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state[child] == 1:
                return False
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(successors[child])))
    return True


def steps_limit(model) -> int:
    """The time limit, or the number of states (no path of an acyclic model is longer)."""
    return int(model.horizon) if model.horizon is not None else model.n_states


def reachable(model) -> list[list[int]]:
    """The states an episode can be in at each step t < the time limit (any actions)."""
    going = (model.probs > 0) & ~model.terminal
    layers, current = [], sorted(np.flatnonzero(model.start > 0).tolist())
    for _ in range(steps_limit(model)):
        if not current:
            break
        layers.append(current)
        current = sorted(set(model.next_states[current][going[current]].tolist()))
    return layers


def _outcomes(model, s: int, a: int):
    """(probability, reward, next state or None where the outcome ends the episode)."""
    for k in np.flatnonzero(model.probs[s, a] > 0):
        ends = bool(model.terminal[s, a, k])
        yield (float(model.probs[s, a, k]), float(model.rewards[s, a, k]),
               None if ends else int(model.next_states[s, a, k]))


def _mixture(model, s: int, a: int, gamma: float, next_law) -> Law:
    """The law of r + gamma Z(s') (r alone where the outcome ends) after a in s, from the
    continuation laws ``next_law(s')``."""
    values, probs = [], []
    for p, r, s2 in _outcomes(model, s, a):
        if s2 is None:
            values.append(np.array([r])), probs.append(np.array([p]))
        else:
            z, q = next_law(s2)
            values.append(r + gamma * z), probs.append(p * q)
    return merged(np.concatenate(values), np.concatenate(probs))


def _topological(model) -> list[int]:
    """The states, every one after all the states its outcomes lead to."""
    going = (model.probs > 0) & ~model.terminal
    order, seen = [], set()

    def visit(s: int) -> None:
        stack = [(s, iter(sorted(set(model.next_states[s][going[s]].tolist()))))]
        seen.add(s)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                order.append(node)
                stack.pop()
            elif child not in seen:
                seen.add(child)
                stack.append((child, iter(sorted(set(
                    model.next_states[child][going[child]].tolist())))))

    for s in range(model.n_states):
        if s not in seen:
            visit(s)
    return order


def state_laws(model, policy: np.ndarray, gamma: float) -> list[Law]:
    """The exact law of Z^pi(s) with no time limit (acyclic model), every state."""
    laws: list[Law] = [None] * model.n_states  # type: ignore[list-item]
    for s in _topological(model):
        laws[s] = _mixture(model, s, int(policy[s]), gamma, laws.__getitem__)
    return laws


def action_laws(model, policy: np.ndarray, gamma: float) -> list[list[Law]]:
    """The exact law of Z^pi(s, a): a in s, ``policy`` after -> ``laws[s][a]``."""
    laws = state_laws(model, policy, gamma)
    return [[_mixture(model, s, a, gamma, laws.__getitem__) for a in range(model.n_actions)]
            for s in range(model.n_states)]


def episode_law(model, policy: np.ndarray, gamma: float) -> Law:
    """The exact law of sum_{t < H} gamma^t r_t from the start, H the time limit."""
    layers = reachable(model)
    later: dict[int, Law] = {}
    for t in range(len(layers) - 1, -1, -1):
        ending = t + 1 == steps_limit(model)
        truncated = (np.zeros(1), np.ones(1))
        now = {s: _mixture(model, s, int(policy[s]), gamma,
                           (lambda s2: truncated) if ending else later.__getitem__)
               for s in layers[t]}
        later = now
    starts = np.flatnonzero(model.start > 0)
    return merged(np.concatenate([later[s][0] for s in starts]),
                  np.concatenate([model.start[s] * later[s][1] for s in starts]))


def padded(laws: list[Law]) -> tuple[np.ndarray, np.ndarray]:
    """Laws of different sizes as ``values[n, K]``, ``probs[n, K]``: each padded with its
    last atom at probability 0 (which no measure of the risk module counts)."""
    width = max(len(v) for v, _ in laws)
    values = np.stack([np.pad(v, (0, width - len(v)), mode="edge") for v, _ in laws])
    probs = np.stack([np.pad(p, (0, width - len(p))) for _, p in laws])
    return values, probs


# ------------------------------------------------------------------ piecewise-linear


@dataclass(frozen=True)
class PiecewiseLinear:
    """f(y): linear between ``knots`` (sorted) with ``values`` there, slope ``left`` below
    the first knot and ``right`` above the last."""

    knots: np.ndarray
    values: np.ndarray
    left: float
    right: float

    def __call__(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        out = np.interp(y, self.knots, self.values)
        out = np.where(y < self.knots[0], self.values[0] + self.left * (y - self.knots[0]), out)
        return np.where(y > self.knots[-1],
                        self.values[-1] + self.right * (y - self.knots[-1]), out)

    def slope_between(self) -> np.ndarray:
        return np.diff(self.values) / np.diff(self.knots)

    def reparametrised(self, reward: float, gamma: float, alpha: float) -> PiecewiseLinear:
        """y -> alpha r + gamma f((y - r) / gamma): a step's reward ahead of the rest."""
        return PiecewiseLinear(reward + gamma * self.knots, alpha * reward + gamma * self.values,
                               self.left, self.right)


def hinge(at: float, base: float, slope: float) -> PiecewiseLinear:
    """y -> base + slope (y - at)^+."""
    return PiecewiseLinear(np.array([at]), np.array([base]), 0.0, slope)


def _union(knots: list[np.ndarray]) -> np.ndarray:
    return merged(np.concatenate(knots), np.ones(sum(len(k) for k in knots)))[0]


def _simplified(knots: np.ndarray, values: np.ndarray, left: float, right: float
                ) -> PiecewiseLinear:
    """Knots where the slope does not change dropped (they only cost time)."""
    if len(knots) > 2:
        slopes = np.concatenate([[left], np.diff(values) / np.diff(knots), [right]])
        scale = np.maximum(1.0, np.abs(slopes[1:]) + np.abs(slopes[:-1]))
        keep = np.abs(slopes[1:] - slopes[:-1]) > 1e-12 * scale
        if not keep.any():
            keep[0] = True
        knots, values = knots[keep], values[keep]
    return PiecewiseLinear(knots, values, left, right)


def weighted_sum(functions: list[PiecewiseLinear], weights: list[float]) -> PiecewiseLinear:
    knots = _union([f.knots for f in functions])
    values = sum(w * f(knots) for f, w in zip(functions, weights))
    return _simplified(knots, values, sum(w * f.left for f, w in zip(functions, weights)),
                       sum(w * f.right for f, w in zip(functions, weights)))


def maximum(functions: list[PiecewiseLinear]) -> PiecewiseLinear:
    """The pointwise maximum, with the knots where the best function changes."""
    if len(functions) == 1:
        return functions[0]
    knots = _union([f.knots for f in functions])
    crossings = [knots]
    for i in range(len(functions)):
        for j in range(i + 1, len(functions)):
            f, g = functions[i], functions[j]
            d = f(knots) - g(knots)
            change = np.flatnonzero(d[:-1] * d[1:] < 0)
            if change.size:
                x0, x1 = knots[change], knots[change + 1]
                crossings.append(x0 + (x1 - x0) * d[change] / (d[change] - d[change + 1]))
            for end, slope in ((0, f.left - g.left), (-1, f.right - g.right)):
                if slope != 0.0:
                    x = knots[end] - d[end] / slope
                    if (x < knots[0]) if end == 0 else (x > knots[-1]):
                        crossings.append(np.array([x]))
    knots = _union(crossings)
    values = np.max([f(knots) for f in functions], axis=0)
    # Beyond the end knots no two functions cross, so the best one at a point past them is
    # the best one all the way.
    low = np.array([f(knots[0] - 1.0) for f in functions])
    high = np.array([f(knots[-1] + 1.0) for f in functions])
    left = min(f.left for f, v in zip(functions, low) if v >= low.max() - 1e-12 * max(1, abs(low.max())))
    right = max(f.right for f, v in zip(functions, high) if v >= high.max() - 1e-12 * max(1, abs(high.max())))
    return _simplified(knots, values, left, right)


def static_cvar(model, alpha: float, rho: float, gamma: float) -> tuple[float, float]:
    """max over policies of the history of alpha E[S] + (1 - alpha) CVaR_rho[S], exactly:
    (the optimum, its threshold b, a VaR_rho of the optimal law).

    alpha E + (1 - alpha) CVaR_rho = max_b E[alpha S + (1 - alpha) (b - (b - S)^+ / rho)];
    W_t(s, y) = max_a sum p [alpha r + (ends ? -kappa (y - r)^+ : gamma W_{t+1}(s', (y - r) /
    gamma))], kappa = (1 - alpha) / rho, W_H = -kappa y^+, and the optimum is the largest
    value of (1 - alpha) b + E_{s0} W_0(s0, b), at a knot."""
    kappa = (1.0 - alpha) / rho
    layers = reachable(model)
    limit = steps_limit(model)
    truncated = hinge(0.0, 0.0, -kappa)
    later: dict[int, PiecewiseLinear] = {}
    for t in range(len(layers) - 1, -1, -1):
        now = {}
        for s in layers[t]:
            options = []
            for a in range(model.n_actions):
                parts, weights = [], []
                for p, r, s2 in _outcomes(model, s, a):
                    if s2 is None:
                        parts.append(hinge(r, alpha * r, -kappa))
                    else:
                        rest = truncated if t + 1 == limit else later[s2]
                        parts.append(rest.reparametrised(r, gamma, alpha))
                    weights.append(p)
                options.append(weighted_sum(parts, weights))
            now[s] = maximum(options)
        later = now
    starts = np.flatnonzero(model.start > 0)
    total = weighted_sum([later[s] for s in starts], [float(model.start[s]) for s in starts])
    objective = (1.0 - alpha) * total.knots + total.values
    best = int(np.argmax(objective))
    return float(objective[best]), float(total.knots[best])


# ------------------------------------------------------------------ step functions


@dataclass(frozen=True)
class Steps:
    """A policy's E[S] and P(S < y) as step functions of the threshold y: ``mean[i]`` and
    ``short[i]`` hold on (knots[i - 1], knots[i]] (the first below knots[0], the last above
    knots[-1]); S < y switches on just above each atom."""

    knots: np.ndarray
    mean: np.ndarray
    short: np.ndarray

    def at(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i = np.searchsorted(self.knots, y, side="left")
        return self.mean[i], self.short[i]

    def representatives(self) -> np.ndarray:
        """A point of every piece: each knot (the piece that ends there), then one above."""
        return np.concatenate([self.knots, [self.knots[-1] + 1.0]])

    def reparametrised(self, reward: float, gamma: float) -> Steps:
        """E and P of r + gamma S' against y: S' against (y - r) / gamma."""
        return Steps(reward + gamma * self.knots, reward + gamma * self.mean, self.short)


def _ending(reward: float) -> Steps:
    return Steps(np.array([reward]), np.array([reward, reward]), np.array([0.0, 1.0]))


def _shortfall(model, alpha: float, gamma: float, penalty: float) -> Steps:
    """The policy of (step, state, remaining threshold) maximising
    E[alpha S - penalty 1{S < y}] for every start threshold y, its E[S] and P(S < y).

    After t steps the rest S_t of the episode faces y_t = (y - c) / gamma^t and
    alpha S = alpha c + gamma^t alpha S_t, so the rest maximises
    E[alpha S_t - penalty gamma^-t 1{S_t < y_t}]. A tie keeps the lowest action."""
    layers = reachable(model)
    limit = steps_limit(model)
    truncated = _ending(0.0)
    later: dict[int, Steps] = {}
    for t in range(len(layers) - 1, -1, -1):
        weight = penalty * gamma ** -t
        now = {}
        for s in layers[t]:
            options = []
            for a in range(model.n_actions):
                parts, probs = [], []
                for p, r, s2 in _outcomes(model, s, a):
                    rest = (_ending(r) if s2 is None else
                            (truncated if t + 1 == limit else later[s2]).reparametrised(r, gamma))
                    parts.append(rest), probs.append(p)
                options.append(_mixed(parts, probs))
            knots = _union([o.knots for o in options])
            points = np.concatenate([knots, [knots[-1] + 1.0]])
            means, shorts = zip(*(o.at(points) for o in options))
            means, shorts = np.stack(means), np.stack(shorts)
            objective = alpha * means - weight * shorts
            scale = 1e-12 * np.maximum(1.0, np.abs(objective).max(0))
            best = np.argmax(objective >= objective.max(0) - scale, axis=0)
            columns = np.arange(len(points))
            now[s] = Steps(knots, means[best, columns], shorts[best, columns])
        later = now
    starts = np.flatnonzero(model.start > 0)
    return _mixed([later[s] for s in starts], [float(model.start[s]) for s in starts])


def _mixed(parts: list[Steps], probs: list[float]) -> Steps:
    knots = _union([s.knots for s in parts])
    points = np.concatenate([knots, [knots[-1] + 1.0]])
    mean = np.zeros(len(points))
    short = np.zeros(len(points))
    for part, p in zip(parts, probs):
        m, q = part.at(points)
        mean += p * m
        short += p * q
    return Steps(knots, mean, short)


@dataclass(frozen=True)
class VarBounds:
    """Bounds on max over deterministic policies of the history of
    alpha E[S] + (1 - alpha) VaR_rho[S]: ``lower`` is attained by a policy (``level``: the
    VaR it guarantees), ``upper`` holds by weak duality; ``exact`` when the search over the
    tree of histories closed the gap (then ``lower == upper``). ``atoms`` are the returns
    an episode can have, ``dual[i]`` bounds alpha E of the policies whose VaR is at least
    ``atoms[i]``."""

    lower: float
    level: float | None
    upper: float
    exact: bool = False
    atoms: np.ndarray | None = None
    dual: np.ndarray | None = None


def static_var_bounds(model, alpha: float, rho: float, gamma: float,
                      scale: float) -> VarBounds:
    """Bounds on the static VaR optimum (module docstring); ``scale`` the returns' range.

    VaR_rho[S] >= y exactly when P(S < y) < rho' (rho' = rho less the risk module's level
    tolerance), and VaR is an atom, so the optimum is the largest over atoms y of
    (1 - alpha) y + max {alpha E[S] : P(S < y) < rho'}. For every penalty lambda >= 0,
    alpha E - lambda P + lambda rho' of the penalised programme's policy is at least the
    latter (weak duality), so their least bounds it from above; each policy of the programme
    with P(S < y) < rho' attains at least alpha E + (1 - alpha) y."""
    level = rho - min(LEVEL_TOLERANCE, 0.5 * rho)
    upper, lower, best_level, atoms = None, -np.inf, None, None
    for penalty in [0.0] + [scale * 2.0 ** (k / 4.0) for k in VAR_PENALTY_STEPS]:
        steps = _shortfall(model, alpha, gamma, penalty)
        mean, short = steps.mean[:-1], steps.short[:-1]  # the pieces that end at an atom
        if atoms is None:
            atoms, upper = steps.knots, np.full(len(steps.knots), np.inf)
        bound = alpha * mean - penalty * short + penalty * level
        upper = np.minimum(upper, bound)
        feasible = short < level
        if feasible.any():
            values = np.where(feasible, alpha * mean + (1.0 - alpha) * steps.knots, -np.inf)
            j = int(np.argmax(values))
            if values[j] > lower:
                lower, best_level = float(values[j]), float(steps.knots[j])
    upper_value = float(np.max((1.0 - alpha) * atoms + upper))
    return VarBounds(float(lower), best_level, max(upper_value, float(lower)), False,
                     atoms, upper)


def static_var(model, alpha: float, rho: float, gamma: float, scale: float) -> VarBounds:
    """The static VaR optimum exactly where the search of :func:`_tree_frontier` stays
    small, else :func:`static_var_bounds`' bounds.

    The optimum is the largest over atoms y of (1 - alpha) y + alpha max {E[S] :
    P(S < y) < rho'}; the atoms whose dual bound is above the best policy found are the
    only ones that can beat it, and for each the Pareto frontier of (P(S < y), E[S]) over
    every deterministic policy of the history (:func:`_tree_frontier`) gives the inner
    maximum exactly."""
    bounds = static_var_bounds(model, alpha, rho, gamma, scale)
    level = rho - min(LEVEL_TOLERANCE, 0.5 * rho)
    ceiling = (1.0 - alpha) * bounds.atoms + bounds.dual
    order = np.argsort(-ceiling, kind="stable")
    open_atoms = order[ceiling[order] > bounds.lower + 1e-12]
    if len(open_atoms) > MAX_OPEN_ATOMS:
        return bounds
    best, best_level = bounds.lower, bounds.level
    for i in open_atoms:
        if ceiling[i] <= best + 1e-12:
            break
        y = float(bounds.atoms[i])
        frontier = _tree_frontier(model, gamma, y)
        if frontier is None:
            return bounds
        short, mean = frontier
        feasible = short < level
        if feasible.any():
            value = (1.0 - alpha) * y + alpha * float(mean[feasible].max())
            if value > best:
                best, best_level = value, y
    return VarBounds(best, best_level, best, True, bounds.atoms, bounds.dual)


def _pareto(short: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (P(S < y), E[S]) no other pair beats on both (less P, more E)."""
    order = np.lexsort((-mean, short))
    short, mean = short[order], mean[order]
    best_before = np.maximum.accumulate(mean)
    keep = np.ones(len(mean), dtype=bool)
    keep[1:] = mean[1:] > best_before[:-1] + 1e-12 * np.maximum(1.0, np.abs(mean[1:]))
    return short[keep], mean[keep]


def _tree_frontier(model, gamma: float, y: float) -> tuple[np.ndarray, np.ndarray] | None:
    """The Pareto frontier of (P(S < y), E[S]) over every deterministic policy of the
    history, S the episode's discounted return, or None where a frontier grows beyond
    MAX_FRONTIER. Histories that reach the same (step, state, return so far) face the same
    rest, so they share one frontier, and a policy of the history picks one point of it
    for each; an action's frontier is the sum over its outcomes of p times theirs."""
    limit = steps_limit(model)
    below = y - FLOAT_EQUAL * max(1.0, abs(y))
    memo: dict = {}

    def leaf(total: float):
        return np.array([float(total < below)]), np.array([total])

    def node(t: int, s: int, so_far: float, discount: float):
        key = (t, s, so_far)
        if key in memo:
            return memo[key]
        shorts, means = [], []
        for a in range(model.n_actions):
            short, mean = np.zeros(1), np.zeros(1)
            for p, r, s2 in _outcomes(model, s, a):
                total = so_far + discount * r
                if s2 is None or t + 1 == limit:
                    part = leaf(total)
                else:
                    part = node(t + 1, s2, total, discount * gamma)
                    if part is None:
                        return None
                short, mean = _pareto((short[:, None] + p * part[0][None, :]).ravel(),
                                      (mean[:, None] + p * part[1][None, :]).ravel())
                if len(short) > MAX_FRONTIER:
                    return None
            shorts.append(short), means.append(mean)
        memo[key] = _pareto(np.concatenate(shorts), np.concatenate(means))
        return memo[key]

    starts = np.flatnonzero(model.start > 0)
    short, mean = np.zeros(1), np.zeros(1)
    for s in starts:
        part = node(0, int(s), 0.0, 1.0)
        if part is None:
            return None
        p = float(model.start[s])
        short, mean = _pareto((short[:, None] + p * part[0][None, :]).ravel(),
                              (mean[:, None] + p * part[1][None, :]).ravel())
    return short, mean


__all__ = [
    "LEVEL_TOLERANCE", "Law", "PiecewiseLinear", "Steps", "VarBounds", "action_laws",
    "episode_law", "is_acyclic", "maximum", "merged", "padded", "reachable", "state_laws",
    "static_cvar", "static_var", "static_var_bounds", "weighted_sum",
]

