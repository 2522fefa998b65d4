"""Risk measures and the risk-based utility, as pure batched tensor functions.

Each measure maps a :class:`ReturnDistribution` of shape ``[..., K]`` to a tensor ``[...]``.
A new measure is one function decorated with :func:`risk_measure` (here or in a module of
this package) and one file in ``conf/risk/``; its keyword parameters are the config keys.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch
from torch import Tensor

from rs_lightning.risk.distribution import ReturnDistribution

# Cumulative probabilities are float sums: 0.1 may come out as 0.09999999. A level rho is
# taken as reached within this tolerance, so that VaR_0.1 of ten equal atoms is the first one.
_LEVEL_TOLERANCE = 1e-6

RiskMeasure = Callable[..., Tensor]
RISK_MEASURES: dict[str, RiskMeasure] = {}


def risk_measure(
    name: str, fraction_map: Callable[..., Tensor] | None = None, per_row: bool = False
) -> Callable[[RiskMeasure], RiskMeasure]:
    """Register ``fn(dist, **params) -> Tensor`` under ``name`` (the ``risk=`` option).

    ``fraction_map(tau, **params)``, for a distortion risk measure only: the map beta of
    R[Z] = E_{tau ~ U(0, 1)}[VaR_beta(tau)[Z]] (Dabney et al., 2018), which lets an agent with
    a quantile function (IQN) evaluate the measure natively by sampling distorted fractions.

    ``per_row``: the measure also takes its parameter as a tensor of the shape of its output
    ``dist.values.shape[:-1]`` (one parameter per distribution; risk-conditioned agents,
    :mod:`rs_lightning.risk.conditioning`). A float keeps the scalar computation as it is.
    """

    def register(fn: RiskMeasure) -> RiskMeasure:
        if name in RISK_MEASURES:
            raise ValueError(f"risk measure {name!r} is registered twice")
        fn.fraction_map = fraction_map  # type: ignore[attr-defined]
        fn.per_row = per_row  # type: ignore[attr-defined]
        RISK_MEASURES[name] = fn
        return fn

    return register


@risk_measure("expectation", fraction_map=lambda tau: tau)
def expectation(dist: ReturnDistribution) -> Tensor:
    """E[Z]."""
    return (dist.values * dist.probs).sum(-1)


# The smallest risk level: the smallest normal float32. Below it a level rounds to zero or
# loses its digits in the networks' float32 (CVaR_1e-300 came out as NaN).
MIN_LEVEL = 1.1754943508222875e-38


def _check_level(rho: float | Tensor) -> None:
    """A risk level must lie in [MIN_LEVEL, 1]: outside it VaR and CVaR are silently
    meaningless (rho = 0 divides by zero, rho > 1 rescales the mean)."""
    if isinstance(rho, Tensor):
        valid = (rho >= MIN_LEVEL) & (rho <= 1.0)
        if not bool(valid.all()):
            bad = rho[~valid].flatten()[0].item()
            raise ValueError(f"risk.rho: the risk level must lie in [{MIN_LEVEL:.4g}, 1], "
                             f"got {bad!r}")
        return
    if not MIN_LEVEL <= float(rho) <= 1.0:
        raise ValueError(f"risk.rho: the risk level must lie in [{MIN_LEVEL:.4g}, 1], "
                         f"got {rho!r}")


def _per_atom(parameter: Tensor, like: Tensor) -> Tensor:
    """A per-row parameter ``[...]`` as ``[..., 1]`` in the dtype of ``like[..., K]``, to
    broadcast over the atoms."""
    return parameter.to(like.dtype).unsqueeze(-1)


def _lower_cumulative(dist: ReturnDistribution) -> tuple[Tensor, Tensor]:
    """P(Z < v_k) and P(Z <= v_k) for every atom k."""
    upper = dist.cumulative
    lower = torch.cat([torch.zeros_like(upper[..., :1]), upper[..., :-1]], dim=-1)
    return lower, upper


@risk_measure("var", fraction_map=lambda tau, rho: torch.full_like(tau, rho), per_row=True)
def value_at_risk(dist: ReturnDistribution, rho: float | Tensor) -> Tensor:
    """VaR_rho[Z] = inf {z : F(z) >= rho}, the lower rho-quantile (paper, section 3.2).

    F is a float sum, so a level within min(1e-6, rho / 2) above a jump of F counts as
    reached by it: VaR is discontinuous there, and float error decides either side."""
    _check_level(rho)
    cumulative = dist.cumulative.contiguous()
    # The tolerance is capped at half of rho: the level stays positive, so that atoms with
    # zero cumulative probability (zero-mass atoms below the support) are never returned.
    if isinstance(rho, Tensor):
        rows = _per_atom(rho, cumulative)
        level = (rows - (0.5 * rows).clamp(max=_LEVEL_TOLERANCE)).expand_as(cumulative[..., :1])
        level = level.contiguous()
    else:
        level = torch.full_like(cumulative[..., :1], rho - min(_LEVEL_TOLERANCE, 0.5 * rho))
    index = torch.searchsorted(cumulative, level).clamp_(max=cumulative.shape[-1] - 1)
    return dist.values.gather(-1, index).squeeze(-1)


@risk_measure("cvar", fraction_map=lambda tau, rho: rho * tau, per_row=True)
def conditional_value_at_risk(dist: ReturnDistribution, rho: float | Tensor) -> Tensor:
    """CVaR_rho[Z] = (1 / rho) * integral_0^rho VaR_u[Z] du, the mean of the worst rho tail.

    For a continuous distribution this is E[Z | Z <= VaR_rho[Z]] (the paper's definition);
    for atoms it splits the atom at VaR_rho so that exactly rho of mass is averaged.
    """
    _check_level(rho)
    lower, upper = _lower_cumulative(dist)
    if isinstance(rho, Tensor):
        tail_mass = (torch.minimum(upper, _per_atom(rho, upper)) - lower).clamp_(min=0.0)
        return (dist.values * tail_mass).sum(-1) / rho.to(upper.dtype)
    tail_mass = (upper.clamp(max=rho) - lower).clamp_(min=0.0)
    return (dist.values * tail_mass).sum(-1) / rho


def distortion_risk(dist: ReturnDistribution, distortion: Callable[[Tensor], Tensor]) -> Tensor:
    """integral of VaR_u[Z] d g(u) for a distortion g: [0, 1] -> [0, 1], non-decreasing,
    g(0) = 0, g(1) = 1. E is g(u) = u; CVaR_rho is g(u) = min(u / rho, 1).

    g is evaluated once per atom: P(Z < v_k) is P(Z <= v_{k-1}), so g of the lower cumulative
    sums is g of the upper ones shifted by one (which matters for a g without closed form)."""
    upper = dist.cumulative
    g_upper = distortion(upper)
    g_lower = torch.cat([distortion(torch.zeros_like(upper[..., :1])), g_upper[..., :-1]], -1)
    return (dist.values * (g_upper - g_lower)).sum(-1)


# --------------------------------------------------------------------------------------------
# Distortion risk measures, in the convention of Dabney et al. (2018, IQN): R[Z] is the mean of
# the quantile function at distorted fractions, E_{tau ~ U(0, 1)}[VaR_beta(tau)[Z]], for an
# increasing map beta of [0, 1] onto itself. beta below the identity weights the low returns
# more (risk-averse). As an integral over levels this is integral VaR_u d g(u) with the
# distortion g = beta^-1 (the CDF of beta(tau)), which :func:`distortion_risk` evaluates on
# any distribution of the common form.


def _check_finite(key: str, value: float | Tensor, bound: float = math.inf) -> None:
    """A finite number, and at most ``bound`` in size."""
    if isinstance(value, Tensor):
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"risk.{key}: must be a finite number, got a non-finite row")
        if bool((value.abs() > bound).any()):
            raise ValueError(f"risk.{key}: must lie in [-{bound:g}, {bound:g}], got "
                             f"{value[value.abs() > bound].flatten()[0].item()!r}")
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"risk.{key}: must be a finite number, got {value!r}")
    if abs(value) > bound:
        raise ValueError(f"risk.{key}: must lie in [-{bound:g}, {bound:g}], got {value!r}")


# Wang's shift acts through Phi(Phi^-1(u) - eta), and Phi^-1 of a float level lies within
# +-38.5: a shift beyond WANG_SATURATION puts every level at 0 or 1 exactly, in float32 and
# float64 alike. Larger shifts are taken as it, which keeps inf - inf (a NaN) out of the sum.
WANG_SATURATION = 1e4


def _wang_shift(eta: float | Tensor) -> float | Tensor:
    if isinstance(eta, Tensor):
        return eta.clamp(-WANG_SATURATION, WANG_SATURATION)
    return min(max(eta, -WANG_SATURATION), WANG_SATURATION)


def wang_fractions(tau: Tensor, eta: float) -> Tensor:
    """beta(tau) = Phi(Phi^-1(tau) + eta) (Wang, 2000): eta < 0 risk-averse, eta > 0 seeking."""
    return torch.special.ndtr(torch.special.ndtri(tau) + _wang_shift(eta))


@risk_measure("wang", fraction_map=wang_fractions, per_row=True)
def wang(dist: ReturnDistribution, eta: float | Tensor) -> Tensor:
    """Wang's transform: E[Z] at fractions Phi(Phi^-1(tau) + eta). For a Gaussian N(mu, sigma)
    it is mu + eta * sigma; eta < 0 is risk-averse, eta = 0 the expectation."""
    _check_finite("eta", eta)
    eta = _wang_shift(eta)
    if isinstance(eta, Tensor):
        eta = _per_atom(eta, dist.values)
    # g = beta^-1: Phi(Phi^-1(u) - eta).
    return distortion_risk(dist, lambda u: torch.special.ndtr(torch.special.ndtri(u) - eta))


def power_fractions(tau: Tensor, eta: float) -> Tensor:
    """beta(tau) = tau^(1 / (1 + |eta|)) if eta >= 0, else 1 - (1 - tau)^(1 / (1 + |eta|))
    (Dabney et al., 2018): eta < 0 risk-averse, eta > 0 risk-seeking."""
    exponent = 1.0 / (1.0 + abs(eta))
    if eta >= 0:
        return tau.pow(exponent)
    return 1.0 - (1.0 - tau).pow(exponent)


@risk_measure("power", fraction_map=power_fractions, per_row=True)
def power(dist: ReturnDistribution, eta: float | Tensor) -> Tensor:
    """The power distortion of Dabney et al. (2018): E[Z] at fractions ``power_fractions``.
    eta < 0 is risk-averse (the low fractions are oversampled), eta = 0 the expectation."""
    _check_finite("eta", eta)
    if isinstance(eta, Tensor):
        rows = _per_atom(eta, dist.values)
        exponent_rows = 1.0 + rows.abs()
        return distortion_risk(dist, lambda u: torch.where(
            rows >= 0, u.pow(exponent_rows), 1.0 - (1.0 - u).pow(exponent_rows)))
    exponent = 1.0 + abs(eta)  # g = beta^-1
    if eta >= 0:
        return distortion_risk(dist, lambda u: u.pow(exponent))
    return distortion_risk(dist, lambda u: 1.0 - (1.0 - u).pow(exponent))


# Below this the CPW weighting is not monotone (Ingersoll, 2008), so it is not a distortion.
CPW_MIN_ETA = 0.28


def cpw_log_fractions(tau: Tensor, eta: float) -> Tensor:
    """log beta(tau), beta(tau) = tau^eta / (tau^eta + (1 - tau)^eta)^(1 / eta): in log space
    throughout, so no power underflows however large eta is (-inf at tau = 0)."""
    a, b = eta * tau.log(), eta * (1.0 - tau).log()  # log tau^eta, log (1 - tau)^eta
    top = torch.maximum(a, b)  # a log-sum-exp by hand: faster than logaddexp on the CPU
    log_sum = top + ((a - top).exp() + (b - top).exp()).log()
    return a - log_sum / eta


def cpw_fractions(tau: Tensor, eta: float) -> Tensor:
    """beta(tau), the cumulative probability weighting of Tversky & Kahneman (1992), exact at
    0 and 1 (:func:`cpw_log_fractions`)."""
    return torch.exp(cpw_log_fractions(tau, eta))


@functools.lru_cache(maxsize=16)
def _cpw_table(eta: float, size: int = 2**14 + 1) -> tuple[Tensor, Tensor]:
    """log beta on a grid of tau (float64, CPU) to invert by table look-up; the grid is dense
    near 0 and 1 (tau = (1 - cos(pi x)) / 2, x evenly spaced), where beta is steepest."""
    x = torch.linspace(0.0, 1.0, size, dtype=torch.float64)
    tau = 0.5 * (1.0 - torch.cos(math.pi * x))
    tau[0], tau[-1] = 0.0, 1.0
    return tau, cpw_log_fractions(tau, eta)


def cpw_distortion(u: Tensor, eta: float) -> Tensor:
    """g = beta^-1 of the CPW fraction map at levels ``u``, in log space (for a large eta,
    beta is below the smallest float over most of [0, 1] while log beta is not): the
    bracketing cell of a table of log beta, linear inside it (near 0, where log beta is
    about eta log tau, that power law), then one secant step against log beta itself (error
    below 1e-8, tests/test_risk_measures.py). No gradient (only weights come out of it)."""
    if eta == 1.0:  # beta is the identity: E itself, exactly
        return u.detach().clone()
    tau, log_beta = (t.to(u.device) for t in _cpw_table(float(eta)))
    level = u.detach().double()
    work = level.clamp(min=torch.finfo(torch.float64).tiny).log()
    index = torch.searchsorted(log_beta, work, right=True).clamp_(1, tau.numel() - 1)
    low, high = tau[index - 1], tau[index]
    f_low, f_high = log_beta[index - 1], log_beta[index]
    share = ((work - f_low) / (f_high - f_low).clamp_min(1e-300)).clamp_(0.0, 1.0)
    first = torch.isinf(f_low)  # the cell from tau = 0: log beta ~ eta log tau there
    share = share.where(~first, torch.zeros_like(share))
    guess = torch.where(first, (work / eta).exp().clamp(max=1.0) * high, low + share * (high - low))
    f_guess = cpw_log_fractions(guess, eta)
    # Secant from the guess to the bracket end on the other side of the level.
    above = f_guess > work
    other, f_other = torch.where(above, low, high), torch.where(above, f_low, f_high)
    usable = (f_other != f_guess) & torch.isfinite(f_other) & torch.isfinite(f_guess)
    step = (work - f_guess) / (f_other - f_guess).where(usable, torch.ones_like(work))
    refined = (guess + step.clamp_(0.0, 1.0) * (other - guess)).where(usable, guess)
    refined = refined.where(level > 0, torch.zeros_like(refined))
    return refined.where(level < 1, torch.ones_like(refined)).to(u.dtype)


@risk_measure("cpw", fraction_map=cpw_fractions)
def cpw(dist: ReturnDistribution, eta: float) -> Tensor:
    """Cumulative probability weighting: E[Z] at fractions ``cpw_fractions`` (Dabney et al.
    use eta = 0.71). It overweights both tails; eta = 1 is the expectation."""
    _check_finite("eta", eta)
    if eta < CPW_MIN_ETA:
        raise ValueError(
            f"risk.eta: must be at least {CPW_MIN_ETA} (below, the weighting is not monotone), "
            f"got {eta!r}"
        )
    # g carries no gradient: gradients flow through the values, not through the
    # probabilities (acting and target actions need none).
    return distortion_risk(dist, lambda u: cpw_distortion(u, eta))


def spectrum(levels, weights) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The checked step spectrum of :func:`spectral`: ``levels`` strictly increasing in
    [MIN_LEVEL, 1], ``weights`` positive and summing to 1, one per level (as float tuples)."""
    levels = tuple(float(rho) for rho in levels)
    weights = tuple(float(w) for w in weights)
    if not levels or len(levels) != len(weights):
        raise ValueError(f"risk.weights: one weight per level, got {len(weights)} weights for "
                         f"{len(levels)} levels")
    for rho in levels:
        if not MIN_LEVEL <= rho <= 1.0:
            raise ValueError(f"risk.levels: each level must lie in [{MIN_LEVEL:.4g}, 1], "
                             f"got {rho!r}")
    if any(b <= a for a, b in itertools.pairwise(levels)):
        raise ValueError(f"risk.levels: must be strictly increasing, got {list(levels)}")
    if not all(math.isfinite(w) and w > 0 for w in weights) or abs(sum(weights) - 1.0) > 1e-9:
        raise ValueError(f"risk.weights: must be positive and sum to 1, got {list(weights)}")
    return levels, weights


def spectral_fractions(tau: Tensor, levels, weights) -> Tensor:
    """beta of a step spectrum: [0, 1] split into pieces of lengths w_i, tau in piece i
    mapped onto [0, rho_i] (so E over tau is sum_i w_i CVaR_rho_i)."""
    levels, weights = spectrum(levels, weights)
    rho = torch.tensor(levels, dtype=tau.dtype, device=tau.device)
    w = torch.tensor(weights, dtype=tau.dtype, device=tau.device)
    ends = w.cumsum(0)
    piece = torch.searchsorted(ends, tau.contiguous(), right=True).clamp_(max=len(levels) - 1)
    start = ends[piece] - w[piece]
    return (rho[piece] * (tau - start) / w[piece]).clamp(0.0, 1.0)


@risk_measure("spectral", fraction_map=spectral_fractions)
def spectral(dist: ReturnDistribution, levels, weights) -> Tensor:
    """sum_i w_i CVaR_rho_i[Z]: the spectral risk measure (Acerbi, 2002) of the step
    spectrum phi(u) = sum_i (w_i / rho_i) 1{u <= rho_i}, a weighted mean of the lower tails.
    Any spectral measure is a limit of these; ``levels`` (0.1, 1) with weights (w, 1 - w) is
    w CVaR_0.1 + (1 - w) E. Its static form has one threshold per level
    (:mod:`rs_lightning.risk.static`)."""
    levels, weights = spectrum(levels, weights)
    terms = [w * conditional_value_at_risk(dist, rho) for rho, w in zip(levels, weights)]
    return functools.reduce(torch.add, terms)


# --------------------------------------------------------------------------------------------
# Moment and utility-based measures (not distortions).


# The largest |lam| of mean-variance and |beta| of the entropic measure. Beyond it either
# measure is its limit to float32 precision on any return scale a run meets (the variance
# alone; the worst or best atom), and lam Var[Z], or beta itself, can overflow float32
# (lam = 1e300 gave -inf for every action, beta = 1e300 NaN).
MAX_SCALE_PARAMETER = 1e10


@risk_measure("mean_variance", per_row=True)
def mean_variance(dist: ReturnDistribution, lam: float | Tensor) -> Tensor:
    """E[Z] - lam * Var[Z] (Markowitz): lam > 0 penalises the spread of the return."""
    _check_finite("lam", lam, MAX_SCALE_PARAMETER)
    mean = expectation(dist)
    variance = (dist.probs * (dist.values - mean.unsqueeze(-1)).square()).sum(-1)
    if isinstance(lam, Tensor):
        lam = lam.to(variance.dtype)
    return mean - lam * variance


@risk_measure("entropic", per_row=True)
def entropic(dist: ReturnDistribution, beta: float | Tensor) -> Tensor:
    """-1/beta log E[exp(-beta Z)], the certainty equivalent of an exponential utility: beta > 0
    risk-averse, beta < 0 risk-seeking. For a Gaussian N(mu, sigma): mu - beta sigma^2 / 2.
    Evaluated as a log-sum-exp, so large |beta Z| does not overflow."""
    _check_finite("beta", beta, MAX_SCALE_PARAMETER)
    if bool((torch.as_tensor(beta) == 0).any()):
        raise ValueError(
            "risk.beta: must be non-zero (beta > 0 risk-averse, < 0 risk-seeking; the limit "
            "beta -> 0 is risk=expectation), got 0"
        )
    scalar_beta = beta
    if isinstance(beta, Tensor):
        scalar_beta = beta.to(dist.values.dtype)
        beta = _per_atom(beta, dist.values)
    exponent = -beta * dist.values
    # Shift by the largest exponent among atoms with mass (zero-mass atoms may lie anywhere);
    # the clamp only touches zero-mass atoms, whose terms are 0 either way (no 0 * inf).
    shift = exponent.masked_fill(dist.probs <= 0, -math.inf).amax(-1, keepdim=True).detach()
    # log E[exp(x)] = shift + log E[exp(x - shift)], E over the normalised weights. Near 1 the
    # mean is log1p of the mean of expm1: for a small |beta| every exp(x - shift) is
    # 1 - beta (z - z_top), which exp rounds to 1 in float32 (the measure came out as the
    # worst atom) and expm1 keeps; far below 1 (a heavy tail), the log of the mean itself.
    scaled = (exponent - shift).clamp(max=0.0)
    total = dist.probs.sum(-1)
    mean = (dist.probs * scaled.exp()).sum(-1) / total
    near_one = (dist.probs * scaled.expm1()).sum(-1) / total
    log_mean = torch.where(mean > 0.5, near_one.clamp(min=-0.5).log1p(), mean.log())
    return -(log_mean + shift.squeeze(-1)) / scalar_beta


Value = TypeVar("Value", float, Tensor)


def combine_utility(alpha: float | Tensor, mean: Value | None, risk: Value | None) -> Value:
    """U = alpha * E[Z] + (1 - alpha) * R[Z] (paper, section 3.3) from its two parts, floats or
    tensors alike: the one definition of the utility.

    At alpha 1 U is E alone, at alpha 0 R alone: the part without weight is left out rather
    than multiplied by 0, so it need not be evaluated (pass None; :attr:`Utility.uses_risk`)
    and an infinite value of it does not turn U into NaN. ``alpha`` may be a tensor of one
    alpha per row (:class:`RowUtility`), whose rows at 0 or 1 take the same ends.
    """
    if isinstance(alpha, Tensor):
        mixed = alpha * mean + (1.0 - alpha) * risk
        return torch.where(alpha == 1.0, mean, torch.where(alpha == 0.0, risk, mixed))
    if alpha == 1.0:
        assert mean is not None
        return mean
    if alpha == 0.0:
        assert risk is not None
        return risk
    assert mean is not None and risk is not None, "U needs both parts unless alpha is 0 or 1"
    return alpha * mean + (1.0 - alpha) * risk


@dataclass(frozen=True)
class Utility:
    """U[Z] = alpha * E[Z] + (1 - alpha) * R[Z] (paper, equation of section 3.3).

    ``risk`` is a registered measure and ``params`` its keyword parameters (for example rho).
    """

    alpha: float
    risk: str = "var"
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.risk not in RISK_MEASURES:
            raise ValueError(
                f"risk={self.risk!r} is not a registered risk measure; "
                f"allowed: {', '.join(sorted(RISK_MEASURES))}"
            )
        allowed = set(inspect.signature(RISK_MEASURES[self.risk]).parameters) - {"dist"}
        unknown = set(self.params) - allowed
        if unknown:
            raise ValueError(
                f"risk={self.risk!r} takes no parameter {', '.join(sorted(unknown))}; "
                f"allowed: {', '.join(sorted(allowed)) or '(none)'}"
            )
        if self.uses_risk:  # check the measure's parameters now, not mid-run
            missing = allowed - set(self.params)
            if missing:
                raise ValueError(
                    f"risk={self.risk!r} needs parameter {', '.join(sorted(missing))}"
                )
            # Each measure checks its own parameters (ValueError "risk.<key>: ..."): one
            # evaluation on a two-atom law runs those checks.
            probe = ReturnDistribution(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5]))
            self.risk_value(probe)

    @property
    def uses_expectation(self) -> bool:
        """Whether U depends on E[Z] (alpha != 0; :func:`combine_utility`)."""
        return self.alpha != 0.0

    @property
    def uses_risk(self) -> bool:
        """Whether U depends on R[Z] (alpha != 1): the risk measure is evaluated only then."""
        return self.alpha != 1.0

    def risk_value(self, dist: ReturnDistribution) -> Tensor:
        return RISK_MEASURES[self.risk](dist, **self.params)

    def fraction_map(self) -> Callable[[Tensor], Tensor] | None:
        """beta with R[Z] = E_{tau ~ U(0, 1)}[VaR_beta(tau)[Z]] if the risk measure is a
        distortion (VaR, CVaR, Wang, CPW, power, E), else None: what an agent with a quantile
        function needs to evaluate the measure natively (IQN's ``risk_route: native``)."""
        beta = getattr(RISK_MEASURES[self.risk], "fraction_map", None)
        if beta is None:
            return None
        return functools.partial(beta, **self.params)

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        if dist.values.shape[-1] == 1:
            # A point mass (DQN): every law-invariant measure of it is the point itself.
            return dist.values[..., 0]
        mean = expectation(dist) if self.uses_expectation else None
        risk = self.risk_value(dist) if self.uses_risk else None
        return combine_utility(self.alpha, mean, risk)

    @functools.cached_property
    def greedy(self) -> UtilityArgmax:
        """argmax_a U[Z(s, a)], the agents' ``choose_action``: ``utility.greedy(dist)`` maps a
        ``[B, A, K]`` distribution to actions ``[B]`` (made once: the loop asks every step)."""
        return UtilityArgmax(self)


@dataclass(frozen=True)
class UtilityArgmax:
    """argmax_a U[Z(s, a)]: a ``[B, A, K]`` distribution -> the actions ``[B]`` maximising the
    utility (``Utility.greedy``). It carries the utility, so that an agent can evaluate U its
    own way (IQN's native route: the agents' ``ChooseAction``)."""

    utility: Utility

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        return self.utility_of(dist).argmax(-1)

    def utility_of(self, dist: ReturnDistribution) -> Tensor:
        """U of each law of ``dist`` ``[..., K]`` -> ``[...]`` (differentiable: an actor
        maximises it)."""
        return self.utility(dist)

    def select(self, index) -> UtilityArgmax:
        """The rule for some rows of the batch (:meth:`RowUtilityArgmax.select`): one
        utility for every row, so itself."""
        return self


def declared_parameter(risk: str) -> str | None:
    """The one parameter a measure declares (``rho`` of VaR, ``eta`` of Wang's), or None."""
    names = [n for n in inspect.signature(RISK_MEASURES[risk]).parameters if n != "dist"]
    return names[0] if len(names) == 1 else None


@dataclass(frozen=True)
class RowUtility:
    """U = alpha E + (1 - alpha) R with a setting per distribution: ``alpha[...]`` and the
    measure's parameter ``parameter[...]`` (shape ``dist.values.shape[:-2]``: one setting
    per row of a ``[..., B, A, K]`` distribution, shared by its actions). Row by row it is
    :class:`Utility` at that row's setting (:func:`combine_utility`'s ends included: at
    alpha 0 or 1 the part without weight is left out)."""

    alpha: Tensor
    risk: str
    parameter: Tensor

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        alpha = self.alpha.unsqueeze(-1).to(dist.values.dtype)  # [..., B, 1]: over actions
        parameter = self.parameter.unsqueeze(-1).expand(dist.values.shape[:-1])
        risk = RISK_MEASURES[self.risk](dist, **{declared_parameter(self.risk): parameter})
        return combine_utility(alpha, expectation(dist), risk)


@dataclass(frozen=True)
class RowUtilityArgmax:
    """argmax_a of a :class:`RowUtility`: the target action of a risk-conditioned agent, whose
    every transition carries its own setting. ``utility`` is None: an agent's own route to a
    utility (IQN's native one) takes a single setting, so this rule takes the common route."""

    rows: RowUtility

    utility = None

    def __call__(self, dist: ReturnDistribution) -> Tensor:
        return self.utility_of(dist).argmax(-1)

    def utility_of(self, dist: ReturnDistribution) -> Tensor:
        """U of each law of a ``[..., B, A, K]`` distribution at its row's setting."""
        return self.rows(dist)

    def select(self, index) -> RowUtilityArgmax:
        """The rule for the rows ``index`` of the batch (a member ``k`` of ``[K, B]``
        settings, or the bootstrapped transitions of a batch)."""
        rows = self.rows
        return RowUtilityArgmax(RowUtility(rows.alpha[index], rows.risk, rows.parameter[index]))
