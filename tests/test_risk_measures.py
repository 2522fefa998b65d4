"""The risk measures beyond VaR and CVaR against closed forms and numerical integration.

Oracles are independent of the package:

- Wang of N(mu, sigma) is mu + eta * sigma (the fraction map shifts every Gaussian quantile by
  eta sigma); the entropic measure of a mixture is -1/beta log sum_i w_i exp(-beta mu_i +
  beta^2 sigma_i^2 / 2) (so mu - beta sigma^2 / 2 for a Gaussian); mean-variance from the
  mixture's exact moments;
- every distortion (Wang, power, CPW) on Gaussians and mixtures by scipy quadrature of its
  definition, integral_0^1 VaR_beta(tau) d tau, with the quantile from ``Mixture``.

Tolerances from the representation. ``from_cdf`` on a grid of step h is a law D with a
coupling |D - Z| <= h/2 (the mass of each cell sits at its midpoint; beyond the +-8 sigma grid
there is ~1e-15 of mass). Every monotone, translation-equivariant measure (the distortions,
the entropic) then differs from its true value by at most h/2. For mean-variance,
|sd(D) - sd(Z)| <= ||D - Z||_2 <= h/2, so |Var(D) - Var(Z)| <= (h/2)(2 sd + h/2).
``from_samples`` (entropic, mean-variance): 5 Monte Carlo standard errors of the plug-in
estimate (delta method).
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, special

from rs_lightning.config.schema import validate
from rs_lightning.errors import ConfigError
from rs_lightning.risk import (
    RISK_MEASURES,
    ReturnDistribution,
    Utility,
    conditional_value_at_risk,
    cpw,
    entropic,
    expectation,
    from_atoms,
    from_quantiles,
    from_samples,
    mean_variance,
    power,
    spectral,
    value_at_risk,
    wang,
)
from rs_lightning.risk.measures import (
    MAX_SCALE_PARAMETER,
    MIN_LEVEL,
    declared_parameter,
)
from tests.test_risk import (
    CASES,
    DTYPES,
    EXACT,
    GAUSSIANS,
    GREEDY_PAIRS,
    SLACK,
    Mixture,
    as_float,
    assert_close,
    batched_dists,
    cdf_dist,
    property_dists,
    sample_array,
    sample_dist,
)

# --------------------------------------------------------------------------------------------
# Oracles
# --------------------------------------------------------------------------------------------


def wang_beta(eta):
    return lambda t: special.ndtr(special.ndtri(t) + eta)


def power_beta(eta):
    p = 1.0 / (1.0 + abs(eta))
    return (lambda t: t**p) if eta >= 0 else (lambda t: 1.0 - (1.0 - t) ** p)


def cpw_beta(eta):
    return lambda t: t**eta / (t**eta + (1.0 - t) ** eta) ** (1.0 / eta)


BETAS = {"wang": wang_beta, "power": power_beta, "cpw": cpw_beta}
DISTORTIONS = {"wang": wang, "power": power, "cpw": cpw}
PARAMS = {
    "wang": [-0.75, -0.2, 0.5],
    "power": [-2.0, -0.5, 1.5],
    "cpw": [0.4, 0.71, 1.3],
}
DISTORTION_CASES = [(name, eta) for name, etas in PARAMS.items() for eta in etas]


def inverse_beta(name, eta):
    """g = beta^-1, the distortion of the levels: closed form, or root-finding for CPW."""
    if name == "wang":
        return lambda u: special.ndtr(special.ndtri(u) - eta)
    if name == "power":
        k = 1.0 + abs(eta)
        return (lambda u: u**k) if eta >= 0 else (lambda u: 1.0 - (1.0 - u) ** k)
    beta = cpw_beta(eta)

    def g(u: float) -> float:
        if u <= 0.0 or u >= 1.0:
            return float(u > 0.0)
        return optimize.brentq(lambda t: beta(t) - u, 0.0, 1.0, xtol=1e-15, rtol=1e-15)

    return g


@functools.lru_cache(maxsize=None)
def distortion_oracle(case: str, name: str, eta: float) -> float:
    """R = E_tau[VaR_beta(tau)] as the Choquet integral over returns,
    R = lo + integral_lo^hi (1 - g(F(z))) dz with g = beta^-1, by adaptive quadrature (a
    different formula from the package's sum over atoms; ``lo`` and ``hi`` 10 sigma out)."""
    m, g = CASES[case], inverse_beta(name, eta)
    lo, hi = m.lo - 2 * m.sigma.max(), m.hi + 2 * m.sigma.max()
    breaks = sorted(set(np.round(m.mu, 6)))
    value, error = integrate.quad(
        lambda z: 1.0 - g(float(m.cdf(z))), lo, hi, points=breaks, limit=400, epsabs=1e-11
    )
    assert error < 1e-5  # far below the tolerances it is compared with (>= 1e-3)
    return lo + value


def quantile_oracle(mu: float, sigma: float, name: str, eta: float) -> float:
    """The definition, integral_0^1 VaR_beta(tau) d tau, for a Gaussian."""
    beta = BETAS[name](eta)
    value, _ = integrate.quad(
        lambda t: mu + sigma * special.ndtri(beta(t)), 0.0, 1.0, limit=400, epsabs=1e-11
    )
    return value


def entropic_oracle(m: Mixture, beta: float) -> float:
    exponents = -beta * m.mu + 0.5 * beta**2 * m.sigma**2
    return float(-special.logsumexp(exponents, b=m.w) / beta)


def mean_variance_oracle(m: Mixture, lam: float) -> float:
    return m.mean - lam * m.scale**2


# --------------------------------------------------------------------------------------------
# The oracles themselves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eta", PARAMS["wang"])
@pytest.mark.parametrize("name", list(GAUSSIANS))
def test_oracle_wang_of_gaussian_is_mu_plus_eta_sigma(name, eta):
    mu, sigma = GAUSSIANS[name]
    assert distortion_oracle(f"gauss-{name}", "wang", eta) == pytest.approx(
        mu + eta * sigma, abs=1e-7
    )


@pytest.mark.parametrize("name, eta", DISTORTION_CASES)
def test_oracle_choquet_form_equals_the_definition(name, eta):
    """Integrating 1 - g(F) over returns and VaR_beta(tau) over tau agree: g = beta^-1 is the
    right distortion for the fraction map beta (eta < 0 averse for Wang and power)."""
    for key, (mu, sigma) in GAUSSIANS.items():
        by_levels = quantile_oracle(mu, sigma, name, eta)
        assert distortion_oracle(f"gauss-{key}", name, eta) == pytest.approx(by_levels, abs=1e-6)


def test_oracle_entropic_of_gaussian_is_mu_minus_beta_sigma2_over_2():
    for mu, sigma in GAUSSIANS.values():
        for beta in (-1.0, 0.5, 2.0):
            closed = mu - beta * sigma**2 / 2
            assert entropic_oracle(Mixture([1.0], [mu], [sigma]), beta) == pytest.approx(closed)
            # and by quadrature of E[exp(-beta Z)]
            m = Mixture([1.0], [mu], [sigma])
            mgf, _ = integrate.quad(
                lambda z: math.exp(-beta * z) * float(m.pdf(z)), m.lo - 10, m.hi + 10, limit=200
            )
            assert -math.log(mgf) / beta == pytest.approx(closed, abs=1e-7)


# --------------------------------------------------------------------------------------------
# Continuous laws through the CDF representation and through samples
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, eta", DISTORTION_CASES)
@pytest.mark.parametrize("case", list(CASES))
def test_distortions_from_cdf_within_half_a_grid_step(case, name, eta, dtype):
    m = CASES[case]
    dist, h = cdf_dist(case, dtype)
    slack = SLACK[dtype] * (1 + abs(m.mean) + m.scale)
    got = as_float(DISTORTIONS[name](dist, eta=eta))
    assert abs(got - distortion_oracle(case, name, eta)) <= h / 2 + slack


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CASES))
def test_entropic_and_mean_variance_from_cdf(case, dtype):
    m = CASES[case]
    dist, h = cdf_dist(case, dtype)
    slack = SLACK[dtype] * (1 + abs(m.mean) + m.scale)
    for beta in (-0.7, 0.3, 1.0, 2.0):
        got = as_float(entropic(dist, beta=beta))
        # float32 sums of exp(-beta z) carry a relative round-off of ~1e-6 per term.
        tol = h / 2 + slack * (1 + abs(beta) * m.scale) / min(1.0, abs(beta))
        assert abs(got - entropic_oracle(m, beta)) <= tol, beta
    for lam in (-0.5, 0.5, 2.0):
        got = as_float(mean_variance(dist, lam=lam))
        tol = h / 2 + abs(lam) * (h / 2) * (2 * m.scale + h / 2) + slack * (1 + abs(lam) * m.scale)
        assert abs(got - mean_variance_oracle(m, lam)) <= tol, lam


@pytest.mark.parametrize("case", ["gauss-negative-wide", "risky-orange", "three-component"])
def test_entropic_and_mean_variance_from_samples(case):
    m = CASES[case]
    x = sample_array(case)
    dist = sample_dist(case, torch.float64)
    n = x.size
    for beta in (-0.5, 0.5):
        w = np.exp(-beta * x)
        se = np.std(w) / np.mean(w) / abs(beta) / math.sqrt(n)  # delta method
        assert abs(as_float(entropic(dist, beta=beta)) - entropic_oracle(m, beta)) <= 5 * se
    lam = 0.5
    se = np.std(x - lam * (x - x.mean()) ** 2) / math.sqrt(n)
    assert abs(as_float(mean_variance(dist, lam=lam)) - mean_variance_oracle(m, lam)) <= 5 * se


# --------------------------------------------------------------------------------------------
# Discrete laws by hand, identities, properties
# --------------------------------------------------------------------------------------------

COIN = from_atoms(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([0.5, 0.5]).double())


def test_two_atom_law_by_hand():
    """Z in {0, 1} with equal odds: a distortion gives the atom 1 the weight 1 - g(1/2)."""
    eta = -0.75  # Wang: 1 - Phi(Phi^-1(1/2) - eta) = Phi(eta)
    assert as_float(wang(COIN, eta=eta)) == pytest.approx(special.ndtr(eta), abs=1e-12)
    eta = -2.0  # power: g(u) = 1 - (1 - u)^3 -> 1 - g(1/2) = 1/8
    assert as_float(power(COIN, eta=eta)) == pytest.approx(0.125, abs=1e-12)
    eta = 2.0  # power: g(u) = u^3 -> 7/8
    assert as_float(power(COIN, eta=eta)) == pytest.approx(0.875, abs=1e-12)
    eta = 0.71  # CPW: 1 - beta^-1(1/2)
    inverse = optimize.brentq(lambda t: cpw_beta(eta)(t) - 0.5, 0, 1, xtol=1e-15)
    assert as_float(cpw(COIN, eta=eta)) == pytest.approx(1 - inverse, abs=1e-9)
    beta = 1.5
    expected = -math.log(0.5 + 0.5 * math.exp(-beta)) / beta
    assert as_float(entropic(COIN, beta=beta)) == pytest.approx(expected, abs=1e-12)
    assert as_float(mean_variance(COIN, lam=2.0)) == pytest.approx(0.5 - 2.0 * 0.25, abs=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_neutral_parameters_give_the_expectation(dtype):
    tol = dict(rtol=0, atol=10 * EXACT[dtype])
    for name, dist in property_dists(dtype).items():
        mean = expectation(dist)
        assert_close(wang(dist, eta=0.0), mean, **tol, msg=name)
        assert_close(power(dist, eta=0.0), mean, **tol, msg=name)
        assert_close(cpw(dist, eta=1.0), mean, **tol, msg=name)
        assert_close(mean_variance(dist, lam=0.0), mean, **tol, msg=name)
        # entropic -> E as beta -> 0: E - entropic = beta Var / 2 + O(beta^2)
        beta = 1e-4 if dtype == torch.float64 else 1e-2
        variance = mean_variance(dist, lam=-1.0) - mean
        gap = mean - entropic(dist, beta=beta)
        assert ((gap - beta * variance / 2).abs() <= beta * variance / 4 + 1e-4).all(), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_risk_aversion_orders_the_measures(dtype):
    """More risk-averse parameters never give a larger value; averse < E < seeking."""
    eps = 10 * EXACT[dtype]
    for name, dist in property_dists(dtype).items():
        mean = expectation(dist)
        for fn, averse_to_seeking in (
            (wang, [-1.5, -0.75, -0.1, 0.0, 0.3, 1.0]),
            (power, [-3.0, -1.0, 0.0, 0.5, 2.0]),
        ):
            values = [fn(dist, eta=eta) for eta in averse_to_seeking]
            for lower, higher in zip(values, values[1:]):
                assert (lower <= higher + eps).all(), (name, fn.__name__)
        values = [entropic(dist, beta=b) for b in (3.0, 1.0, 0.1, -0.1, -1.0)]
        for lower, higher in zip(values, values[1:]):
            assert (lower <= higher + eps).all(), name
        assert (entropic(dist, beta=1.0) <= mean + eps).all()
        assert (mean_variance(dist, lam=1.0) <= mean + eps).all()
        # Any distortion lies within the support.
        lo = dist.values.masked_fill(dist.probs <= 0, float("inf")).amin(-1)
        hi = dist.values.masked_fill(dist.probs <= 0, float("-inf")).amax(-1)
        for value in (wang(dist, eta=-3.0), power(dist, eta=-5.0), cpw(dist, eta=0.3)):
            assert (lo - eps <= value).all() and (value <= hi + eps).all(), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shift, scale", [(2.5, 1.0), (-7.0, 2.0), (1.0, 0.25)])
def test_translation_and_scaling(shift, scale, dtype):
    """Distortions are translation and positive-scale equivariant; the entropic measure is
    translation equivariant with beta -> beta / scale under scaling; mean-variance shifts."""
    tol = dict(rtol=1e3 * EXACT[dtype], atol=1e3 * EXACT[dtype])
    for name, dist in property_dists(dtype).items():
        moved = from_atoms(dist.values * scale + shift, dist.probs)
        for fn, params in ((wang, {"eta": -0.75}), (power, {"eta": -2.0}), (cpw, {"eta": 0.71})):
            assert_close(fn(moved, **params), fn(dist, **params) * scale + shift, **tol, msg=name)
        expected = entropic(dist, beta=0.7 * scale) * scale + shift
        assert_close(entropic(moved, beta=0.7), expected, **tol, msg=name)
        expected = mean_variance(dist, lam=0.3 * scale) * scale + shift
        assert_close(mean_variance(moved, lam=0.3), expected, **tol, msg=name)


def test_entropic_is_stable_for_large_beta_and_ignores_zero_mass_atoms():
    dist = from_atoms(
        torch.tensor([-50.0, 0.0, 1.0, 200.0]), torch.tensor([0.0, 0.5, 0.5, 0.0])
    )
    for beta in (100.0, -100.0, 500.0):
        value = as_float(entropic(dist, beta=beta))
        expected = -(math.log(0.5) + special.logsumexp([0.0, -beta])) / beta
        assert value == pytest.approx(expected, abs=1e-5)
    logits = torch.zeros(5, requires_grad=True)
    probs = torch.cat([torch.zeros(1), logits.softmax(-1)])
    values = torch.tensor([-50.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    (grad,) = torch.autograd.grad(entropic(ReturnDistribution(values, probs), beta=3.0), logits)
    assert torch.isfinite(grad).all()


# --------------------------------------------------------------------------------------------
# Fraction maps (the native route of a quantile agent) agree with the measures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "risk, params",
    [("expectation", {}), ("var", {"rho": 0.1}), ("var", {"rho": 0.37}), ("cvar", {"rho": 0.1}),
     ("wang", {"eta": -0.75}), ("wang", {"eta": 0.5}), ("power", {"eta": -2.0}),
     ("power", {"eta": 1.0}), ("cpw", {"eta": 0.71}),
     ("spectral", {"levels": (0.1, 0.3), "weights": (0.5, 0.5)}),
     ("spectral", {"levels": (0.05, 0.5, 1.0), "weights": (0.2, 0.3, 0.5)})],
)  # fmt: skip
def test_fraction_map_reproduces_the_measure(risk, params):
    """R[Z] = integral_0^1 VaR_beta(tau)[Z] d tau, by the midpoint rule on a fine grid of
    tau, for a smooth law (the risky-orange mixture as 2,000 quantiles)."""
    quantiles = torch.tensor(
        [CASES["risky-orange"].quantile((i + 0.5) / 2000) for i in range(2000)], dtype=torch.float64
    )
    dist = from_quantiles(quantiles)
    beta = Utility(0.0, risk, params).fraction_map()
    taus = (torch.arange(200_000, dtype=torch.float64) + 0.5) / 200_000
    # VaR_u of 2,000 equal quantiles: the ceil(2000 u)-th one.
    index = (beta(taus) * 2000).ceil().clamp(1, 2000).long() - 1
    native = float(dist.values[index].mean())
    assert native == pytest.approx(as_float(RISK_MEASURES[risk](dist, **params)), abs=2e-3)


@pytest.mark.parametrize("eta", [0.28, 0.71, 1.3, 5.0])
def test_cpw_distortion_inverts_the_fraction_map(eta):
    """The table-and-secant inverse of CPW's beta against root-finding, tails included."""
    from rs_lightning.risk.measures import cpw_distortion

    generator = torch.Generator().manual_seed(0)
    u = torch.cat([
        torch.linspace(0, 1, 501, dtype=torch.float64),
        torch.tensor([1e-12, 1e-8, 1e-5, 1 - 1e-9], dtype=torch.float64),
        torch.rand(200, dtype=torch.float64, generator=generator) ** 4,
    ])  # fmt: skip
    got = cpw_distortion(u, eta)
    g = inverse_beta("cpw", eta)
    expected = torch.tensor([g(float(v)) for v in u], dtype=torch.float64)
    assert (got - expected).abs().max() < 1e-8
    assert (got[:501].diff() >= 0).all() and got[0] == 0 and got[500] == 1


def test_mean_variance_and_entropic_have_no_fraction_map():
    assert Utility(0.5, "mean_variance", {"lam": 0.5}).fraction_map() is None
    assert Utility(0.5, "entropic", {"beta": 1.0}).fraction_map() is None
    cvar_map = Utility(0.5, "cvar", {"rho": 0.25}).fraction_map()
    assert cvar_map(torch.tensor([0.4], dtype=torch.float64)).item() == pytest.approx(0.1)


# --------------------------------------------------------------------------------------------
# Batching, the utility, the config
# --------------------------------------------------------------------------------------------

NEW_MEASURES = {
    "wang": functools.partial(wang, eta=-0.75),
    "power": functools.partial(power, eta=-2.0),
    "cpw": functools.partial(cpw, eta=0.71),
    "entropic": functools.partial(entropic, beta=1.0),
    "mean_variance": functools.partial(mean_variance, lam=0.5),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("measure", list(NEW_MEASURES))
def test_batched_rows_equal_single_rows(measure, dtype):
    fn = NEW_MEASURES[measure]
    for rep, dist in batched_dists(dtype).items():
        out = fn(dist)
        b, a = dist.values.shape[:2]
        assert out.shape == (b, a) and out.dtype == dtype, rep
        for i in range(b):
            for j in range(a):
                assert_close(out[i, j], fn(dist.select((i, j))), rtol=0, atol=EXACT[dtype])


# (pair, alpha, risk, params, action): action 0 is the safe one in every pair.
GREEDY_CASES = [
    ("safe", 0.0, "wang", {"eta": -0.75}, 0),
    ("safe", 0.0, "wang", {"eta": 0.0}, 1),  # E: 1.25 > 1
    ("safe", 0.0, "power", {"eta": -2.0}, 0),  # 1/8 * 3 + 7/8 * -0.5 < 1
    ("safe", 0.0, "power", {"eta": 2.0}, 1),
    ("safe", 0.0, "mean_variance", {"lam": 0.5}, 0),  # 1.25 - 0.5 * 3.0625 < 1
    ("safe", 0.0, "mean_variance", {"lam": 0.05}, 1),
    ("safe", 0.0, "entropic", {"beta": 1.0}, 0),
    ("safe", 0.0, "entropic", {"beta": -1.0}, 1),
    ("safe", 1.0, "entropic", {"beta": 1.0}, 1),  # alpha = 1: E
    ("risky-rewards", 0.0, "wang", {"eta": -0.75}, 0),
    ("risky-rewards", 0.5, "entropic", {"beta": 2.0}, 0),
    ("risky-rewards", 0.0, "cpw", {"eta": 0.71}, 1),  # CPW overweights the good tail too
    ("orange-cdf", 0.0, "wang", {"eta": -0.75}, 0),
    ("orange-cdf", 0.0, "power", {"eta": -2.0}, 0),
    ("orange-cdf", 0.0, "mean_variance", {"lam": 0.5}, 0),
    ("orange-cdf", 0.5, "entropic", {"beta": 1.0}, 0),
    ("orange-cdf", 0.0, "wang", {"eta": 0.75}, 1),
]


@pytest.mark.parametrize(
    "pair_name, alpha, risk, params, action",
    GREEDY_CASES,
    ids=[f"{c[0]}-alpha{c[1]}-{c[2]}{list(c[3].values())[0]}" for c in GREEDY_CASES],
)
def test_utility_picks_the_expected_action(pair_name, alpha, risk, params, action):
    dist = GREEDY_PAIRS[pair_name]
    utility = Utility(alpha, risk, params)
    assert utility.greedy(dist).tolist() == [action]
    # and it is the argmax of alpha E + (1 - alpha) R computed by hand
    by_hand = alpha * expectation(dist) + (1 - alpha) * RISK_MEASURES[risk](dist, **params)
    assert utility(dist)[0].tolist() == pytest.approx(by_hand[0].tolist())


def test_cpw_of_risky_rewards_by_hand():
    """The orange atoms (-1.2 w.p. 0.25, 0.8 w.p. 0.75) against a sure 0: CPW gives -1.2 the
    weight beta^-1(0.25) and 0.8 the rest."""
    g = optimize.brentq(lambda t: cpw_beta(0.71)(t) - 0.25, 0, 1, xtol=1e-14)
    value = Utility(0.0, "cpw", {"eta": 0.71})(GREEDY_PAIRS["risky-rewards"])[0, 1]
    assert float(value) == pytest.approx(-1.2 * g + 0.8 * (1 - g), abs=1e-5)


@pytest.mark.parametrize("levels, weights", [((0.1,), (1.0,)), ((0.05, 0.25), (0.3, 0.7)),
                                            ((0.01, 0.2, 1.0), (0.1, 0.4, 0.5))])
def test_spectral_of_a_gaussian_is_its_weighted_lower_tail_means(levels, weights):
    """sum_i w_i CVaR_rho_i of N(mu, sigma), CVaR_rho = mu - sigma phi(Phi^-1(rho)) / rho in
    closed form, against the measure on 20,000 quantiles of it; a level of 1 is E."""
    mu, sigma = 0.3, 1.7
    fractions = (np.arange(20_000) + 0.5) / 20_000
    dist = from_quantiles(torch.tensor(mu + sigma * special.ndtri(fractions)))
    closed = sum(w * (mu - sigma * math.exp(-special.ndtri(rho) ** 2 / 2)
                      / math.sqrt(2 * math.pi) / rho)
                 for rho, w in zip(levels, weights))
    assert float(spectral(dist, levels=levels, weights=weights)) == pytest.approx(closed, abs=2e-3)


def test_spectral_is_a_distortion_between_its_cvars():
    """A mixture of CVaRs: between the lowest and highest level's CVaR, translation
    equivariant and positively homogeneous; one level is that CVaR exactly."""
    dist = from_samples(torch.tensor([-4.0, -1.0, 0.0, 0.5, 2.0, 3.0, 7.0], dtype=torch.float64))
    value = float(spectral(dist, levels=(0.2, 0.6), weights=(0.5, 0.5)))
    low, high = (float(conditional_value_at_risk(dist, rho)) for rho in (0.2, 0.6))
    assert low < value < high and value == pytest.approx(0.5 * low + 0.5 * high)
    moved = ReturnDistribution(2.5 * dist.values - 1.0, dist.probs)
    assert float(spectral(moved, levels=(0.2, 0.6), weights=(0.5, 0.5))) == pytest.approx(
        2.5 * value - 1.0)
    assert torch.equal(spectral(dist, levels=(0.3,), weights=(1.0,)),
                       conditional_value_at_risk(dist, 0.3))


@pytest.mark.parametrize("risk", ["wang", "cpw", "power", "mean_variance", "entropic"])
def test_risk_config_composes_and_reaches_the_utility(compose, risk):
    settings = validate(compose([f"risk={risk}"]))
    assert settings.utility.risk == risk
    assert len(settings.utility.params) == 1


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["risk=cpw", "risk.eta=0.2"], "risk.eta"),
        (["risk=wang", "risk.eta=abc"], "risk.eta"),
        (["risk=power", "risk.eta=.inf"], "risk.eta"),
        (["risk=entropic", "risk.beta=0"], "risk.beta"),
        (["risk=mean_variance", "risk.lam=nan"], "risk.lam"),
        (["risk=var", "risk.rho=1.5"], "risk.rho"),
        (["risk=wang", "~risk.eta"], "risk"),
        (["risk=spectral", "risk.levels=[0.3,0.1]"], "risk.levels"),
        (["risk=spectral", "risk.levels=[0.1,1.5]"], "risk.levels"),
        (["risk=spectral", "risk.weights=[0.5,0.6]"], "risk.weights"),
        (["risk=spectral", "risk.weights=[1.0]"], "risk.weights"),
    ],
)
def test_bad_risk_parameters_name_the_key(compose, overrides, key):
    with pytest.raises(ConfigError) as error:
        validate(compose(overrides))
    assert error.value.key == key
    assert str(error.value).startswith(key) and "\n" not in str(error.value)


def test_var_and_cvar_keep_their_values():
    """The refactored distortion helper leaves VaR / CVaR untouched (regression anchor)."""
    dist = GREEDY_PAIRS["orange-cdf"]
    assert float(value_at_risk(dist, 0.1)[0, 1]) < 0 < float(value_at_risk(dist, 0.1)[0, 0])
    assert float(conditional_value_at_risk(dist, 0.1)[0, 1]) < -1.0


# ------------------------------------------------------- high-precision references
HIGH_PRECISION_LAW = ([-2.0, -1.0, 0.5, 1.3], [0.1, 0.2, 0.3, 0.4])


def entropic_reference(beta: float) -> float:
    """-1/beta log E[exp(-beta Z)] of HIGH_PRECISION_LAW with 50 significant digits."""
    import mpmath

    atoms, probs = HIGH_PRECISION_LAW
    with mpmath.workdps(50):
        b = mpmath.mpf(beta)
        mean = sum(mpmath.mpf(p) * mpmath.exp(-b * mpmath.mpf(a)) for a, p in zip(atoms, probs))
        return float(-mpmath.log(mean) / b)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-6), (torch.float64, 1e-8)])
@pytest.mark.parametrize("beta", [1e-8, -1e-8, 1e-4, 0.5, 1.0, -1.0, 10.0, -10.0, 1e3, 1e6,
                                  -1e6])
def test_entropic_matches_a_high_precision_reference_across_beta(dtype, tolerance, beta):
    """From |beta| = 1e-8 (the mean, where exp rounds every term to 1 in float32) to 1e6 (the
    worst or best atom), scalar and per-row beta alike."""
    atoms, probs = HIGH_PRECISION_LAW
    dist = ReturnDistribution(torch.tensor(atoms, dtype=dtype), torch.tensor(probs, dtype=dtype))
    expected = entropic_reference(beta)
    assert float(entropic(dist, beta)) == pytest.approx(expected, abs=tolerance)
    rows = ReturnDistribution(dist.values.expand(3, -1), dist.probs.expand(3, -1))
    per_row = entropic(rows, torch.full((3,), beta, dtype=dtype))
    assert per_row.tolist() == pytest.approx([expected] * 3, abs=tolerance)


def cpw_reference(eta: float) -> float:
    """CPW of HIGH_PRECISION_LAW with 60 significant digits: sum_k z_k (g(F_k) - g(F_{k-1})),
    g = beta^-1 by bisection on log beta."""
    import mpmath

    atoms, probs = HIGH_PRECISION_LAW
    with mpmath.workdps(60):
        e = mpmath.mpf(eta)

        def log_beta(tau):
            a, b = e * mpmath.log(tau), e * mpmath.log(1 - tau)
            top = max(a, b)
            return a - (top + mpmath.log(mpmath.exp(a - top) + mpmath.exp(b - top))) / e

        def g(level):
            if level >= 1:
                return mpmath.mpf(1)
            low, high, target = mpmath.mpf(0), mpmath.mpf(1), mpmath.log(level)
            for _ in range(200):
                middle = (low + high) / 2
                low, high = (middle, high) if log_beta(middle) < target else (low, middle)
            return (low + high) / 2

        total, previous, cumulative = mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(0)
        for atom, p in zip(atoms, probs):
            cumulative += mpmath.mpf(p)
            current = g(cumulative)
            total += mpmath.mpf(atom) * (current - previous)
            previous = current
        return float(total)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 2e-6), (torch.float64, 1e-9)])
@pytest.mark.parametrize("eta", [0.28, 0.71, 2.0, 5.0, 150.0, 1e3, 1e6, 1e300])
def test_cpw_matches_a_high_precision_reference_across_eta(dtype, tolerance, eta):
    """From the smallest eta it accepts to 1e300: above about 150, beta is below the
    smallest float over most of [0, 1], and CPW tends to the worst atom."""
    atoms, probs = HIGH_PRECISION_LAW
    dist = ReturnDistribution(torch.tensor(atoms, dtype=dtype), torch.tensor(probs, dtype=dtype))
    assert float(cpw(dist, eta)) == pytest.approx(cpw_reference(eta), abs=tolerance)


def distortion_reference(g) -> float:
    """sum_k z_k (g(F_k) - g(F_{k-1})) of HIGH_PRECISION_LAW with 60 significant digits, g
    a function of an mpmath level (F of the last atom is exactly 1)."""
    import mpmath

    atoms, probs = HIGH_PRECISION_LAW
    with mpmath.workdps(60):
        total, cumulative, previous = mpmath.mpf(0), mpmath.mpf(0), g(mpmath.mpf(0))
        for k, (atom, p) in enumerate(zip(atoms, probs)):
            cumulative = mpmath.mpf(1) if k == len(atoms) - 1 else cumulative + mpmath.mpf(p)
            current = g(cumulative)
            total += mpmath.mpf(atom) * (current - previous)
            previous = current
        return float(total)


def wang_reference(eta: float) -> float:
    import mpmath

    def g(u):  # Phi(Phi^-1(u) - eta); beyond +-1e4 Phi is 0 or 1 to far below any float
        if u <= 0 or u >= 1:
            return u
        shifted = mpmath.sqrt(2) * mpmath.erfinv(2 * u - 1) - mpmath.mpf(eta)
        return mpmath.ncdf(max(min(shifted, mpmath.mpf(1e4)), mpmath.mpf(-1e4)))

    return distortion_reference(g)


def power_reference(eta: float) -> float:
    import mpmath

    exponent = 1 + abs(mpmath.mpf(eta))
    return distortion_reference(lambda u: u ** exponent if eta >= 0 else 1 - (1 - u) ** exponent)


def cvar_reference(rho: float) -> float:
    import mpmath

    return distortion_reference(lambda u: min(u / mpmath.mpf(rho), mpmath.mpf(1)))


def var_reference(rho: float) -> float:
    """The lower rho-quantile, with F summed exactly (no level near a jump is asked)."""
    from fractions import Fraction

    atoms, probs = HIGH_PRECISION_LAW
    cumulative = Fraction(0)
    for atom, p in zip(atoms, probs):
        cumulative += Fraction(str(p))
        if cumulative >= Fraction(rho):
            return atom
    return atoms[-1]


def mean_variance_reference(lam: float) -> float:
    import mpmath

    atoms, probs = HIGH_PRECISION_LAW
    with mpmath.workdps(60):
        mean = sum(mpmath.mpf(a) * mpmath.mpf(p) for a, p in zip(atoms, probs))
        variance = sum(mpmath.mpf(p) * (mpmath.mpf(a) - mean) ** 2 for a, p in zip(atoms, probs))
        return float(mean - mpmath.mpf(lam) * variance)


HIGH_PRECISION_CASES = {
    # measure: (function, reference, parameters spanning the whole accepted range)
    "var": (value_at_risk, var_reference,
            [MIN_LEVEL, 1e-30, 1e-8, 0.05, 0.1 - 2e-6, 0.25, 0.3 + 2e-6, 0.5, 0.9, 1.0]),
    "cvar": (conditional_value_at_risk, cvar_reference,
             [MIN_LEVEL, 1e-30, 1e-8, 0.05, 0.1, 0.25, 0.3, 0.5, 0.9, 1.0]),
    "wang": (wang, wang_reference,
             [-1e300, -1e4, -40.0, -3.0, -0.75, -1e-8, 0.0, 1e-8, 0.75, 3.0, 40.0, 1e300]),
    "power": (power, power_reference,
              [-1e300, -1e6, -100.0, -2.0, -1e-8, 0.0, 1e-8, 2.0, 100.0, 1e6, 1e300]),
    "mean_variance": (mean_variance, mean_variance_reference,
                      [-MAX_SCALE_PARAMETER, -1e6, -1.0, 0.0, 1e-8, 1.0, 1e6,
                       MAX_SCALE_PARAMETER]),
}


@pytest.mark.parametrize("dtype, relative", [(torch.float32, 2e-6), (torch.float64, 1e-10)])
@pytest.mark.parametrize("name, parameter", [
    (name, parameter) for name, (_, _, parameters) in HIGH_PRECISION_CASES.items()
    for parameter in parameters])
def test_every_measure_matches_a_high_precision_reference_across_its_range(
        name, parameter, dtype, relative):
    """From the smallest accepted level or the largest accepted size of a parameter to the
    other end, scalar and per-row alike (the entropic measure and CPW have their own tests
    above)."""
    function, reference, _ = HIGH_PRECISION_CASES[name]
    atoms, probs = HIGH_PRECISION_LAW
    dist = ReturnDistribution(torch.tensor(atoms, dtype=dtype), torch.tensor(probs, dtype=dtype))
    expected = reference(parameter)
    tolerance = relative * max(1.0, abs(expected))
    assert float(function(dist, parameter)) == pytest.approx(expected, abs=tolerance)
    if abs(parameter) <= torch.finfo(dtype).max:  # a row tensor holds the parameter
        rows = ReturnDistribution(dist.values.expand(3, -1), dist.probs.expand(3, -1))
        per_row = function(rows, torch.full((3,), parameter, dtype=torch.float64))
        assert per_row.tolist() == pytest.approx([expected] * 3, abs=tolerance)


def test_a_var_level_within_the_float_tolerance_of_a_jump_counts_as_reached():
    atoms, probs = HIGH_PRECISION_LAW
    dist = ReturnDistribution(torch.tensor(atoms), torch.tensor(probs))
    assert float(value_at_risk(dist, 0.3 + 5e-7)) == -1.0  # F(-1) = 0.3: the documented rule
    assert float(value_at_risk(dist, 0.3 + 2e-6)) == 0.5


@pytest.mark.parametrize("name, parameter, message", [
    ("var", MIN_LEVEL / 2, "risk.rho: the risk level must lie in"),
    ("cvar", 1e-300, "risk.rho: the risk level must lie in"),
    ("mean_variance", 1e300, "risk.lam: must lie in [-1e+10, 1e+10]"),
    ("mean_variance", -2 * MAX_SCALE_PARAMETER, "risk.lam: must lie in"),
    ("entropic", 1e300, "risk.beta: must lie in [-1e+10, 1e+10]"),
    ("entropic", -1e11, "risk.beta: must lie in"),
])
def test_parameters_beyond_the_exact_range_are_refused_in_one_line(name, parameter, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Utility(0.5, name, {declared_parameter(name): parameter})
