"""The static objective: a risk measure of the whole episode's discounted return.

The paper's agents act per decision: at every state the action maximising U[Z(s, a)] of the
return from that state on. The static objective is U[S] of the whole episode's discounted
return S = sum_t gamma^t r_t. It becomes Markov on the augmented state (s, c, gamma^t, b)
(Baeuerle & Ott 2011; Lim & Malik, NeurIPS 2022): c the discounted return accumulated so far,
gamma^t the discount reached and b a threshold fixed for the episode, so that from x on
S = c + gamma^t Z(x, a). Everything here is in the units Z is learned in (rewards after
``env.reward_scale`` and ``env.reward_clip``).

The action rule at an augmented state, per measure of U = alpha E + (1 - alpha) R_rho:

- ``cvar``: CVaR_rho(S) = max_b b - E[(b - S)^+] / rho (Rockafellar & Uryasev), so
  U(S) = max_b E[h_b(S)], h_b(s) = alpha s + (1 - alpha)(b - (b - s)^+ / rho), and for a
  fixed b the argmax of E[h_b(c + gamma^t Z)] over actions is argmax E[alpha Z - (1 - alpha)
  (b~ - Z)^+ / rho], b~ = (b - c) / gamma^t: exact in the augmented MDP.
- ``spectral`` (sum_i w_i CVaR_rho_i): the same with one threshold per level, b = (b_1, ...,
  b_m): U(S) = max_b E[alpha S + (1 - alpha) sum_i w_i (b_i - (b_i - S)^+ / rho_i)], and the
  rule argmax E[alpha Z - (1 - alpha) sum_i w_i (b~_i - Z)^+ / rho_i]: exact too (the
  supremum representation of a spectral measure that QRSRM builds on, Moghimi & Ku, 2025).
  The best b_i is VaR_rho_i(S), so the candidates are non-decreasing in i.
- ``var``: VaR has no such expected-utility form. The rule is the shortfall-probability one,
  E[alpha S] - (1 - alpha) W P(S < b) / rho with W = return_max - return_min, i.e.
  argmax alpha E[Z] - (1 - alpha) (W / gamma^t) P(Z < b~) / rho: nearly lexicographic (keep
  the chance of ending below b small, then the expectation), an approximation of the static
  VaR objective.
- ``expectation`` (and alpha = 1 for any measure): the static rule is the per-decision one.
- every other measure (wang, power, cpw, entropic, mean_variance): the literal U applied to the
  shifted, scaled law c + gamma^t Z(x, a). For a distortion (translation-equivariant and
  positively homogeneous: wang, power, cpw) that choice equals the per-decision one at every
  (c, gamma^t); for entropic and mean_variance it changes with c and t.

The threshold of an episode: at its start x0 = (s0, 0, 1, b) the b of a grid over the support
maximising max_a of the threshold value (the rule's quantity with the b terms it drops:
cvar: alpha E[Z] + (1 - alpha)(b - E[(b - Z)^+] / rho), spectral: the same summed over the
levels with their weights; var: alpha E[Z] + (1 - alpha)(b - W (P(Z < b) - rho)^+ / rho)).
Thresholds carry a last axis of one entry per level (one for var and cvar).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from rs_lightning.risk.distribution import ReturnDistribution
from rs_lightning.risk.measures import Utility, expectation, spectrum

THRESHOLD_MEASURES = ("cvar", "var", "spectral")  # measures with a threshold (dual) form
# Candidate threshold vectors an episode's start may search (a spectral measure with m levels
# has C(G + m - 1, m) of them on a grid of G values).
MAX_CANDIDATES = 25_000


@dataclass(frozen=True)
class StaticObjective:
    """The static objective of a run: the utility, the return support [``return_min``,
    ``return_max``] (learning units), the share of training episodes whose threshold is drawn
    uniformly over the support (``uniform_share``; the others use the best one) and the
    number of candidate thresholds searched (``thresholds``)."""

    utility: Utility
    return_min: float
    return_max: float
    uniform_share: float = 0.5
    thresholds: int = 49

    @property
    def width(self) -> float:
        return self.return_max - self.return_min

    @property
    def has_threshold(self) -> bool:
        """Whether the rule depends on a threshold b (var, cvar, spectral with alpha < 1)."""
        return self.utility.risk in THRESHOLD_MEASURES and self.utility.alpha < 1.0

    @functools.cached_property  # read by the rules of every step: checked once
    def levels(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The levels rho_i of the thresholds and their weights w_i: ((rho,), (1,)) for var
        and cvar, the spectrum of a spectral measure."""
        params = self.utility.params
        if self.utility.risk == "spectral":
            return spectrum(params["levels"], params["weights"])
        return (float(params["rho"]),), (1.0,)

    @property
    def n_thresholds(self) -> int:
        """m, the thresholds an episode carries: one per level (one, at 0, without a rule
        that reads it)."""
        return len(self.levels[0]) if self.has_threshold else 1

    @property
    def n_features(self) -> int:
        """The augmented input's width: c, gamma^t and the m thresholds."""
        return 2 + self.n_thresholds

    # ------------------------------------------------------------- the network's input
    def features(self, accumulated: Tensor, discount: Tensor, threshold: Tensor) -> Tensor:
        """The augmented input ``[..., 2 + m]`` (float32): c and b divided by the support's
        width, gamma^t as it is (one place for the scaling; :meth:`decode` inverts it).
        ``threshold[..., m]`` (or ``[...]`` when m is 1)."""
        threshold = threshold.reshape(*accumulated.shape, self.n_thresholds)
        return torch.cat([torch.stack([accumulated / self.width, discount], dim=-1),
                          threshold / self.width], dim=-1).to(torch.float32)

    def decode(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(c ``[...]``, gamma^t ``[...]``, b ``[..., m]``) of augmented observations
        ``obs[..., D + 2 + m]``."""
        tail = obs[..., -self.n_features:].double()
        return tail[..., 0] * self.width, tail[..., 1], tail[..., 2:] * self.width

    def candidate_thresholds(self, device=None) -> Tensor:
        """The thresholds searched at an episode's start ``[G, m]`` (float64): a grid over
        the support, and with several levels every non-decreasing vector of its values."""
        if not self.has_threshold:
            return torch.zeros(1, 1, dtype=torch.float64, device=device)
        grid = torch.linspace(self.return_min, self.return_max, self.thresholds,
                              dtype=torch.float64, device=device)
        if self.n_thresholds == 1:
            return grid[:, None]
        vectors = itertools.combinations_with_replacement(range(self.thresholds),
                                                          self.n_thresholds)
        return grid[torch.tensor(list(vectors), device=device)]

    # ------------------------------------------------------------------ the rules
    def scores(self, dist: ReturnDistribution, accumulated: Tensor, discount: Tensor,
               threshold: Tensor) -> Tensor:
        """The rule's score of each action: ``dist[..., A, K]`` with one (c, gamma^t, b) per
        row (``[...]``, ``[...]``, ``[..., m]``) -> ``[..., A]`` (module docstring)."""
        return static_scores(dist, self, accumulated, discount, threshold)

    def threshold_values(self, dist: ReturnDistribution, threshold: Tensor) -> Tensor:
        """The value of thresholds b at an episode's start (c = 0, gamma^0 = 1), action by
        action: ``dist[..., A, K]``, ``threshold[..., m]`` -> ``[..., A]``."""
        return threshold_value(dist, self, threshold)

    def choose_action(self, accumulated: Tensor, discount: Tensor, threshold: Tensor
                      ) -> StaticArgmax:
        return StaticArgmax(self, accumulated, discount, threshold)

    def choose_action_at(self, obs: Tensor) -> StaticArgmax:
        """The rule for augmented observations ``obs[..., D + 2 + m]`` (their own c, gamma^t,
        b)."""
        return self.choose_action(*self.decode(obs))


def _shifted(dist: ReturnDistribution, accumulated: Tensor, discount: Tensor
             ) -> ReturnDistribution:
    """The law of c + gamma^t Z, one (c, gamma^t) per row of ``dist[..., A, K]``."""
    c = accumulated.to(dist.values.dtype)[..., None, None]
    g = discount.to(dist.values.dtype)[..., None, None]
    return ReturnDistribution(c + g * dist.values, dist.probs)


def _shortfall(dist: ReturnDistribution, levels: Tensor, objective: StaticObjective
               ) -> Tensor:
    """sum_i w_i E[(b_i - Z)^+] / rho_i: ``dist[..., A, K]`` against thresholds
    ``levels[..., m]`` (one vector per row, shared by its actions) -> ``[..., A]``."""
    rhos, weights = objective.levels
    shortfalls = ((dist.probs * (levels[..., i, None, None] - dist.values).clamp(min=0.0)).sum(-1)
                  for i in range(len(rhos)))
    return sum(w * shortfall / rho for shortfall, rho, w in zip(shortfalls, rhos, weights))


def static_scores(dist: ReturnDistribution, objective: StaticObjective, accumulated: Tensor,
                  discount: Tensor, threshold: Tensor) -> Tensor:
    """argmax over the last dimension of the result is the static rule (module docstring):
    ``dist[..., A, K]``, per-row ``accumulated`` and ``discount`` ``[...]`` and
    ``threshold[..., m]``."""
    utility = objective.utility
    if utility.alpha == 1.0 or utility.risk == "expectation":
        return expectation(dist)
    if utility.risk in THRESHOLD_MEASURES:
        dtype = dist.values.dtype
        g = discount.to(dtype)
        levels = (threshold.to(dtype) - accumulated.to(dtype)[..., None]) / g[..., None]  # b~
        mean = expectation(dist)
        if utility.risk == "var":
            below = (dist.probs * (dist.values < levels[..., 0, None, None])).sum(-1)
            penalty = (objective.width / g)[..., None] * below / objective.levels[0][0]
        else:
            penalty = _shortfall(dist, levels, objective)
        return utility.alpha * mean - (1.0 - utility.alpha) * penalty
    return utility(_shifted(dist, accumulated, discount))


def threshold_value(dist: ReturnDistribution, objective: StaticObjective, threshold: Tensor
                    ) -> Tensor:
    """The start's value of thresholds ``threshold[..., m]`` for each action of
    ``dist[..., A, K]`` (module docstring); for a measure without a threshold form, U[Z]
    (b plays no part)."""
    utility = objective.utility
    if utility.risk not in THRESHOLD_MEASURES or utility.alpha == 1.0:
        return utility(dist)
    b = threshold.to(dist.values.dtype)
    mean = expectation(dist)
    if utility.risk == "var":
        rho = objective.levels[0][0]
        below = (dist.probs * (dist.values < b[..., 0, None, None])).sum(-1)
        risk = b[..., 0, None] - objective.width * (below - rho).clamp(min=0.0) / rho
    else:
        weighted = sum(w * b[..., i] for i, w in enumerate(objective.levels[1]))
        risk = weighted[..., None] - _shortfall(dist, b, objective)
    return utility.alpha * mean + (1.0 - utility.alpha) * risk


@dataclass(frozen=True)
class StaticArgmax:
    """The static rule as an agent's ``choose_action``: a ``[..., B, A, K]`` distribution
    -> actions ``[..., B]``, each row at its own (c, gamma^t, b) (``[..., B]``, ``[..., B]``,
    ``[..., B, m]``).
    ``utility`` is None: an agent's own route to a utility (IQN's native one) evaluates U of
    Z, not this rule, so the common route is taken."""

    objective: StaticObjective
    accumulated: Tensor
    discount: Tensor
    threshold: Tensor

    utility = None

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        return self.objective.scores(dist, self.accumulated, self.discount,
                                     self.threshold).argmax(-1)

    def select(self, index) -> StaticArgmax:
        """The rule for the rows ``index`` (a member of ``[K, B]``, or some transitions)."""
        return StaticArgmax(self.objective, self.accumulated[index], self.discount[index],
                            self.threshold[index])


# --------------------------------------------------------------- policy gradients
# Measures whose static objective a policy gradient follows exactly (static_advantage): an
# expected utility for a fixed threshold (the threshold measures' dual forms), or a monotone
# transform of one (the entropic measure at alpha 0: maximising -1/beta log E[exp(-beta S)]
# is minimising E[exp(-beta S)]).
POLICY_GRADIENT_MEASURES = ("expectation", "cvar", "var", "spectral", "entropic")


def policy_gradient_refusal(utility: Utility) -> str | None:
    """Why a policy gradient cannot follow the static objective of ``utility``, or None."""
    if utility.alpha == 1.0 or utility.risk == "expectation":
        return None
    if utility.risk not in POLICY_GRADIENT_MEASURES:
        return (f"risk={utility.risk} has no expected-utility form a policy gradient can "
                f"follow; allowed: {', '.join(POLICY_GRADIENT_MEASURES)}")
    if utility.risk == "entropic" and utility.alpha != 0.0:
        return ("risk=entropic is followed through the exponential criterion at alpha 0 (or "
                f"the expectation at alpha 1), got alpha={utility.alpha}")
    return None


def static_advantage(objective: StaticObjective, sampled: Tensor, atoms: Tensor,
                     accumulated: Tensor, discount: Tensor, threshold: Tensor) -> Tensor:
    """The advantage of the static objective at augmented states x = (s, c, gamma^t, b):
    ``sampled[...]`` the return R observed from x on (a Monte Carlo sample of Z(x)),
    ``atoms[..., n]`` the critic's equally weighted atoms of Z(x), one (c, gamma^t, b) per
    row (``[...]``, ``[...]``, ``[..., m]``) -> ``[...]``.

    The objective is E[h(S)] with S = c + gamma^t R (for a threshold measure h = h_b of the
    dual form, fixed for the episode; module docstring). Its score-function gradient weighs
    the log-probability of the action at x by h(S) - E[h(c + gamma^t Z(x))], an estimate of
    zero mean whatever the action's law; divided by gamma^t it is in units of the return
    from x on, as the expectation's advantage R - E[Z] is (the usual policy-gradient
    convention of dropping the gamma^t weight of later states):

    - expectation (and alpha = 1): R - E[Z];
    - cvar, spectral, var: the static rule's score (:func:`static_scores`) of the point R
      minus that of the law Z(x): alpha (R - E[Z]) - (1 - alpha) sum_i w_i ((b~_i - R)^+ -
      E[(b~_i - Z)^+]) / rho_i with b~ = (b - c) / gamma^t: the terminal reward
      -(b - S)^+ / rho of Baeuerle and Ott's augmented state, read from the return;
    - entropic at alpha 0, the exponential criterion: h(S) = -exp(-beta S) / beta, so each
      episode's weight is exp(-beta S); taken relative to the certainty equivalent
      CE = -1 / (beta gamma^t) log E[exp(-beta gamma^t Z)] and divided by its slope there,
      (1 - exp(-beta gamma^t (R - CE))) / (beta gamma^t), which is R - CE to first order
      (the optimum is Markov in the state and gamma^t: the factor exp(-beta c) is common to
      every action).
    """
    utility = objective.utility
    dtype = torch.float64
    sampled, atoms = sampled.to(dtype), atoms.to(dtype)
    if utility.alpha == 1.0 or utility.risk == "expectation":
        return sampled - atoms.mean(-1)
    refusal = policy_gradient_refusal(utility)
    if refusal is not None:
        raise ValueError(refusal)
    g = discount.to(dtype)
    if utility.risk == "entropic":
        scale = float(utility.params["beta"]) * g
        log_mean = torch.logsumexp(-scale[..., None] * atoms, -1) - torch.log(
            torch.tensor(float(atoms.shape[-1]), dtype=dtype))
        certainty = -log_mean / scale
        return -torch.expm1(-scale * (sampled - certainty)) / scale
    point = ReturnDistribution(sampled[..., None, None], torch.ones_like(sampled)[..., None, None])
    law = ReturnDistribution(atoms[..., None, :].sort(-1).values,
                             torch.full_like(atoms[..., None, :], 1.0 / atoms.shape[-1]))
    return (static_scores(point, objective, accumulated, discount, threshold)
            - static_scores(law, objective, accumulated, discount, threshold))[..., 0]
