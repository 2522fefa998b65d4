"""Risk measures and return-distribution constructors against closed forms.

The oracles are independent of the package: Gaussian VaR/CVaR in closed form, mixture VaR by
root-finding on the mixture CDF (scipy ``brentq``) and mixture CVaR from the closed-form
partial expectation E[Z 1{Z <= v}] = sum_i w_i (mu_i Phi(a_i) - sigma_i phi(a_i)).

Tolerances are derived from the representation (plus a small round-off slack per dtype):

- ``from_cdf`` on a grid of step h: the discrete quantile function is within h/2 of the true
  one at every level, so VaR is within h/2; E is a midpoint rule, error O(h^2), and so is
  CVaR up to the split cell, error O(h^2 / rho) (the smaller of the two bounds is used).
- ``from_quantiles`` with N quantiles at tau_i = (2i+1)/(2N): the discrete VaR is the true
  quantile at a level within 1/(2N) of rho; the CVaR error is bounded by the L1 distance of
  the step quantile function to the true one over (0, rho).
- ``from_samples``: the sample rho-quantile lies between the true quantiles at
  rho -+ 5 binomial standard errors; E and CVaR are within 5 standard errors (CVaR's from its
  influence function).

VaR is compared as "the true quantile at some level in an interval, up to the grid step",
because a mixture's CDF can be flat (the risky-rewards return at rho = 0.25 sits in a gap
where the density is ~1e-8, so any representation may legitimately land anywhere on the
plateau) and the implementation accepts a level reached within ``LEVEL_TOL`` of rho.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, optimize, special, stats

from rs_lightning.risk import (
    RISK_MEASURES,
    ReturnDistribution,
    Utility,
    combine_utility,
    conditional_value_at_risk,
    dirac,
    distortion_risk,
    expectation,
    from_atoms,
    from_cdf,
    from_quantiles,
    from_samples,
    risk_measure,
    value_at_risk,
)

RHOS = [0.01, 0.05, 0.1, 0.25, 0.5, 0.9]
DTYPES = [torch.float32, torch.float64]
# How far below rho a level may be taken as reached (float rounding of cumulative sums).
LEVEL_TOL = 2e-6
# Round-off allowance per dtype, in units of the distribution's scale.
SLACK = {torch.float32: 2e-5, torch.float64: 1e-9}
# Tolerance for answers that are exact up to float round-off.
EXACT = {torch.float32: 1e-5, torch.float64: 1e-12}


# --------------------------------------------------------------------------------------------
# Oracles
# --------------------------------------------------------------------------------------------


class Mixture:
    """A Gaussian mixture sum_i w_i N(mu_i, sigma_i) with closed-form tail quantities."""

    def __init__(self, weights, mus, sigmas):
        self.w = np.asarray(weights, dtype=float)
        self.mu = np.asarray(mus, dtype=float)
        self.sigma = np.asarray(sigmas, dtype=float)
        assert abs(self.w.sum() - 1.0) < 1e-12

    @property
    def mean(self) -> float:
        return float(self.w @ self.mu)

    @property
    def scale(self) -> float:
        return float(np.sqrt(self.w @ (self.sigma**2 + self.mu**2) - self.mean**2))

    @property
    def tv(self) -> float:
        """An upper bound on the total variation of the density: sum_i w_i 2 phi(0) / sigma_i."""
        return float((self.w * 2 * stats.norm.pdf(0.0) / self.sigma).sum())

    @property
    def lo(self) -> float:
        return float((self.mu - 8 * self.sigma).min())

    @property
    def hi(self) -> float:
        return float((self.mu + 8 * self.sigma).max())

    def cdf(self, z):
        z = np.asarray(z, dtype=float)[..., None]
        return (self.w * special.ndtr((z - self.mu) / self.sigma)).sum(-1)

    def pdf(self, z):
        z = np.asarray(z, dtype=float)[..., None]
        return (self.w * stats.norm.pdf((z - self.mu) / self.sigma) / self.sigma).sum(-1)

    @functools.lru_cache(maxsize=None)
    def quantile(self, u: float) -> float:
        """VaR_u: the root of F(z) = u (F is continuous and strictly increasing)."""
        if u <= 0.0:
            return -math.inf
        if u >= 1.0:
            return math.inf
        lo, hi = self.lo - 10 * self.sigma.max(), self.hi + 10 * self.sigma.max()
        return optimize.brentq(lambda z: float(self.cdf(z)) - u, lo, hi, xtol=1e-13, rtol=1e-14)

    def partial_expectation(self, u: float) -> float:
        """integral_0^u VaR_s ds = E[Z 1{Z <= VaR_u}], in closed form."""
        if u <= 0.0:
            return 0.0
        v = self.quantile(u)
        a = (v - self.mu) / self.sigma
        per_component = self.mu * special.ndtr(a) - self.sigma * stats.norm.pdf(a)
        return float((self.w * per_component).sum())

    def var(self, rho: float) -> float:
        return self.quantile(rho)

    def cvar(self, rho: float) -> float:
        return self.partial_expectation(rho) / rho


def gaussian_var(mu: float, sigma: float, rho: float) -> float:
    return mu + sigma * stats.norm.ppf(rho)


def gaussian_cvar(mu: float, sigma: float, rho: float) -> float:
    return mu - sigma * stats.norm.pdf(stats.norm.ppf(rho)) / rho


GAUSSIANS = {
    "std": (0.0, 1.0),
    "shifted-narrow": (1.5, 0.5),
    "negative-wide": (-2.0, 3.0),
}
MIXTURES = {
    # The paper's risky-rewards "orange" return: a likely good outcome and a rare bad one.
    "risky-orange": Mixture([0.75, 0.25], [0.8, -1.2], [0.173, 0.173]),
    "three-component": Mixture([0.5, 0.3, 0.2], [0.0, 2.0, -3.0], [1.0, 0.5, 0.7]),
}
CASES = {f"gauss-{k}": Mixture([1.0], [mu], [s]) for k, (mu, s) in GAUSSIANS.items()} | MIXTURES


def as_float(x: torch.Tensor) -> float:
    assert x.dim() == 0, x.shape
    assert torch.isfinite(x), x
    return float(x)


def assert_close(actual, expected, rtol=None, atol=None, msg=""):
    """Elementwise |actual - expected| <= atol + rtol |expected| (torch's default tolerances).

    A local helper: the first call of torch.testing.assert_close costs seconds of imports."""
    assert actual.shape == expected.shape, (msg, actual.shape, expected.shape)
    if not actual.is_floating_point():
        assert torch.equal(actual, expected), (msg, actual, expected)
        return
    default = (1.3e-6, 1e-5) if actual.dtype == torch.float32 else (1e-7, 1e-7)
    rtol = default[0] if rtol is None else rtol
    atol = default[1] if atol is None else atol
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    assert (err <= bound).all(), f"{msg}: max error {float(err.max())}: {actual} vs {expected}"


def assert_var_in_level_interval(got, oracle, lo_level, hi_level, slack):
    """``got`` must lie in [VaR_lo_level - slack, VaR_hi_level + slack]."""
    lo = oracle.quantile(max(lo_level, 0.0)) - slack
    hi = oracle.quantile(min(hi_level, 1.0)) + slack
    assert lo <= got <= hi, f"VaR {got} not in [{lo}, {hi}] (levels {lo_level}, {hi_level})"


# --------------------------------------------------------------------------------------------
# The oracles themselves
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(GAUSSIANS))
def test_oracle_mixture_reduces_to_gaussian_closed_form(name, rho):
    mu, sigma = GAUSSIANS[name]
    m = Mixture([1.0], [mu], [sigma])
    assert m.var(rho) == pytest.approx(gaussian_var(mu, sigma, rho), abs=1e-10)
    assert m.cvar(rho) == pytest.approx(gaussian_cvar(mu, sigma, rho), abs=1e-10)


@pytest.mark.parametrize("rho", [0.05, 0.25, 0.9])
@pytest.mark.parametrize("name", list(MIXTURES))
def test_oracle_mixture_cvar_matches_quadrature_of_quantile(name, rho):
    """The closed-form mixture CVaR equals (1/rho) integral_0^rho VaR_u du numerically."""
    m = MIXTURES[name]
    assert m.cdf(m.var(rho)) == pytest.approx(rho, abs=1e-12)
    # Integrate z f(z) up to VaR (smooth), rather than the quantile function (singular at 0).
    tail, _ = integrate.quad(lambda z: z * float(m.pdf(z)), m.lo - 5, m.var(rho), limit=200)
    assert m.cvar(rho) == pytest.approx(tail / rho, abs=1e-7)


# --------------------------------------------------------------------------------------------
# Continuous distributions through each representation
# --------------------------------------------------------------------------------------------

GRID_STEP = {"gauss-std": 0.01, "gauss-shifted-narrow": 0.005, "gauss-negative-wide": 0.03,
             "risky-orange": 0.004, "three-component": 0.01}  # fmt: skip


@functools.lru_cache(maxsize=None)
def cdf_dist(name: str, dtype: torch.dtype) -> tuple[ReturnDistribution, float]:
    m = CASES[name]
    h = GRID_STEP[name]
    k = int(math.ceil((m.hi - m.lo) / h)) + 1
    grid = m.lo + h * np.arange(k)
    dist = from_cdf(torch.tensor(grid, dtype=dtype), torch.tensor(m.cdf(grid), dtype=dtype))
    assert dist.values.shape == (k + 1,)
    return dist, h


def cdf_cvar_tol(m: Mixture, h: float, rho: float) -> float:
    """CVaR error bound for ``from_cdf`` with step h. First order: the discrete quantile
    function is within h/2 everywhere. Second order: each whole cell below VaR errs by
    int (m - z) f(z) dz <= h^3/12 max|f'| (summing to <= 2 h^2/12 TV(f)), and the split cell
    by at most (h/2) * its mass <= (h/2) h max f, with max f <= TV/2; all divided by rho."""
    return min(h / 2, h**2 / rho * m.tv * (2 / 12 + 1 / 4))


N_QUANTILES = 200
# Below torch's parallel grain size (32768): no thread start-up per op on a busy machine.
N_SAMPLES = 30_000


@functools.lru_cache(maxsize=None)
def quantile_dist(name: str, dtype: torch.dtype) -> ReturnDistribution:
    m = CASES[name]
    taus = (2 * np.arange(N_QUANTILES) + 1) / (2 * N_QUANTILES)
    q = np.array([m.quantile(t) for t in taus])
    # Reversed on purpose: from_quantiles must sort.
    return from_quantiles(torch.tensor(q[::-1].copy(), dtype=dtype))


@functools.lru_cache(maxsize=None)
def sample_array(name: str) -> np.ndarray:
    m = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name) + 1234)
    comp = rng.choice(len(m.w), size=N_SAMPLES, p=m.w)
    return rng.normal(m.mu[comp], m.sigma[comp])


@functools.lru_cache(maxsize=None)
def sample_dist(name: str, dtype: torch.dtype) -> ReturnDistribution:
    return from_samples(torch.tensor(sample_array(name), dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(GAUSSIANS))
def test_gaussian_from_cdf_within_grid_tolerance(name, rho, dtype):
    mu, sigma = GAUSSIANS[name]
    dist, h = cdf_dist(f"gauss-{name}", dtype)
    slack = SLACK[dtype] * (1 + abs(mu) + sigma)
    # A level within LEVEL_TOL of rho moves the quantile by at most LEVEL_TOL / density.
    level_shift = LEVEL_TOL * sigma / stats.norm.pdf(stats.norm.ppf(rho))
    var = as_float(value_at_risk(dist, rho))
    assert abs(var - gaussian_var(mu, sigma, rho)) <= h / 2 + level_shift + slack
    cvar = as_float(conditional_value_at_risk(dist, rho))
    cvar_tol = cdf_cvar_tol(CASES[f"gauss-{name}"], h, rho)
    assert abs(cvar - gaussian_cvar(mu, sigma, rho)) <= cvar_tol + slack
    # Midpoint rule: a cell's error is int (z - m)(f(z) - f(m)) dz <= h^3/12 max_cell |f'|,
    # summing to about h^2/12 * TV(f) (doubled for the upper Riemann sum), TV = 2 max f.
    tv = CASES[f"gauss-{name}"].tv
    assert abs(as_float(expectation(dist)) - mu) <= h**2 / 12 * 2 * tv + slack


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(GAUSSIANS))
def test_gaussian_from_quantiles_within_quantile_spacing(name, rho, dtype):
    mu, sigma = GAUSSIANS[name]
    dist = quantile_dist(f"gauss-{name}", dtype)
    n = N_QUANTILES
    ppf = lambda u: gaussian_var(mu, sigma, u)  # noqa: E731
    slack = SLACK[dtype] * (1 + abs(mu) + sigma)
    var_true = gaussian_var(mu, sigma, rho)
    # The chosen atom is the true quantile at a level within 1/(2N) of rho.
    var_tol = max(ppf(rho + 0.5 / n) - var_true, var_true - ppf(rho - 0.5 / n - LEVEL_TOL))
    assert abs(as_float(value_at_risk(dist, rho)) - var_true) <= var_tol + slack
    # CVaR: (1/rho) * L1 distance of the step quantile function to the true one on (0, rho).
    # Cell 0 exactly (via the partial expectation P(u) = -sigma phi(Phi^-1(u)) + mu u), the
    # other cells bounded by their quantile increase (telescoping).
    partial = lambda u: mu * u - sigma * stats.norm.pdf(stats.norm.ppf(u))  # noqa: E731
    cell0 = partial(1 / n) - 2 * partial(0.5 / n)
    j = math.ceil(rho * n) - 1
    rest = (ppf(min((j + 1) / n, 1 - 1e-12)) - ppf(1 / n)) / n
    cvar_tol = (cell0 + rest) / rho
    got = as_float(conditional_value_at_risk(dist, rho))
    assert abs(got - gaussian_cvar(mu, sigma, rho)) <= cvar_tol + slack
    # The quantiles are symmetric about mu, so their mean is mu up to round-off.
    assert as_float(expectation(dist)) == pytest.approx(mu, abs=slack + 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(GAUSSIANS))
def test_gaussian_from_samples_within_monte_carlo_error(name, rho, dtype):
    mu, sigma = GAUSSIANS[name]
    x = sample_array(f"gauss-{name}")
    dist = sample_dist(f"gauss-{name}", dtype)
    n = x.size
    slack = SLACK[dtype] * (1 + abs(mu) + sigma)
    var_true = gaussian_var(mu, sigma, rho)
    se_level = math.sqrt(rho * (1 - rho) / n)
    var_tol = max(
        gaussian_var(mu, sigma, rho + 5 * se_level) - var_true,
        var_true - gaussian_var(mu, sigma, rho - 5 * se_level),
    )
    assert abs(as_float(value_at_risk(dist, rho)) - var_true) <= var_tol + slack
    # Influence function of CVaR_rho: (z - VaR) 1{z <= VaR} / rho (+ constants).
    se_cvar = np.std(np.minimum(x - var_true, 0.0) / rho) / math.sqrt(n)
    got = as_float(conditional_value_at_risk(dist, rho))
    assert abs(got - gaussian_cvar(mu, sigma, rho)) <= 5 * se_cvar + slack
    assert abs(as_float(expectation(dist)) - mu) <= 5 * sigma / math.sqrt(n) + slack


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(MIXTURES))
def test_mixture_from_cdf(name, rho, dtype):
    m = MIXTURES[name]
    dist, h = cdf_dist(name, dtype)
    slack = SLACK[dtype] * (1 + abs(m.mean) + m.scale)
    var = as_float(value_at_risk(dist, rho))
    assert_var_in_level_interval(var, m, rho - LEVEL_TOL, rho, h / 2 + slack)
    # The same as a distance: half a step plus the level tolerance over the density (vacuous
    # only for the risky-orange plateau at rho = 0.25, which the interval check covers).
    level_shift = LEVEL_TOL / float(m.pdf(m.var(rho)))
    assert abs(var - m.var(rho)) <= h / 2 + level_shift + slack
    cvar = as_float(conditional_value_at_risk(dist, rho))
    assert abs(cvar - m.cvar(rho)) <= cdf_cvar_tol(m, h, rho) + slack
    assert abs(as_float(expectation(dist)) - m.mean) <= h**2 / 12 * 2 * m.tv + slack


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(MIXTURES))
def test_mixture_from_quantiles(name, rho, dtype):
    m = MIXTURES[name]
    dist = quantile_dist(name, dtype)
    n = N_QUANTILES
    slack = SLACK[dtype] * (1 + abs(m.mean) + m.scale)
    var = as_float(value_at_risk(dist, rho))
    assert_var_in_level_interval(var, m, rho - 0.5 / n - LEVEL_TOL, rho + 0.5 / n, slack)
    cell0 = m.partial_expectation(1 / n) - 2 * m.partial_expectation(0.5 / n)
    j = math.ceil(rho * n) - 1
    rest = (m.quantile(min((j + 1) / n, 1 - 1e-12)) - m.quantile(1 / n)) / n
    got = as_float(conditional_value_at_risk(dist, rho))
    assert abs(got - m.cvar(rho)) <= (cell0 + rest) / rho + slack


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("name", list(MIXTURES))
def test_mixture_from_samples(name, rho, dtype):
    m = MIXTURES[name]
    x = sample_array(name)
    dist = sample_dist(name, dtype)
    n = x.size
    slack = SLACK[dtype] * (1 + abs(m.mean) + m.scale)
    se_level = math.sqrt(rho * (1 - rho) / n)
    var = as_float(value_at_risk(dist, rho))
    assert_var_in_level_interval(var, m, rho - 5 * se_level, rho + 5 * se_level, slack)
    se_cvar = np.std(np.minimum(x - m.var(rho), 0.0) / rho) / math.sqrt(n)
    got = as_float(conditional_value_at_risk(dist, rho))
    assert abs(got - m.cvar(rho)) <= 5 * se_cvar + slack
    assert abs(as_float(expectation(dist)) - m.mean) <= 5 * m.scale / math.sqrt(n) + slack


def test_risky_orange_values_by_hand():
    """Anchor the risky-rewards return: E = 0.75 * 0.8 - 0.25 * 1.2 = 0.3, and its low tail
    is the bad component (VaR_0.1 = -1.2 + 0.173 Phi^-1(0.4))."""
    m = MIXTURES["risky-orange"]
    dist, h = cdf_dist("risky-orange", torch.float32)
    assert as_float(expectation(dist)) == pytest.approx(0.3, abs=1e-4)
    assert m.var(0.1) == pytest.approx(-1.2 + 0.173 * stats.norm.ppf(0.4), abs=1e-6)
    assert as_float(value_at_risk(dist, 0.1)) == pytest.approx(m.var(0.1), abs=h / 2 + 1e-5)
    # The gap between the components: VaR_0.25 is there, far above the bad component.
    assert -0.6 < m.var(0.25) < 0.2


# --------------------------------------------------------------------------------------------
# Discrete distributions: exact answers by hand
# --------------------------------------------------------------------------------------------

TEN_VALUES = [-4.5, -3.0, -1.25, 0.0, 0.5, 1.0, 2.75, 3.0, 7.5, 10.0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", range(1, 11))
def test_ten_equal_atoms_level_on_cumulative_boundary(k, dtype):
    """rho = k/10 is exactly on a boundary: VaR is the k-th atom, CVaR the mean of the first k,
    whichever way float rounding of the cumulative sum goes."""
    rho = k / 10
    perm = [3, 7, 0, 9, 1, 5, 8, 2, 6, 4]  # unsorted input
    values = torch.tensor([TEN_VALUES[i] for i in perm], dtype=dtype)
    for dist in (from_atoms(values, torch.ones(10, dtype=dtype)), from_quantiles(values)):
        assert as_float(value_at_risk(dist, rho)) == TEN_VALUES[k - 1]
        cvar = as_float(conditional_value_at_risk(dist, rho))
        assert cvar == pytest.approx(np.mean(TEN_VALUES[:k]), abs=EXACT[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "probs, rho, var",
    [
        # On a boundary. After normalisation, some cumulative sums round *below* rho:
        # float32 for [0.1, 0.6, 0.1, 0.2] at 0.1, 0.7, 0.8; float64 for [0.1, 0.7, 0.2] at 0.8
        # and [0.2, 0.4, 0.3, 0.1] at 0.2, 0.6, 0.9. The boundary atom must still be chosen.
        ([0.1, 0.6, 0.1, 0.2], 0.1, 1.0),
        ([0.1, 0.6, 0.1, 0.2], 0.7, 2.0),
        ([0.1, 0.6, 0.1, 0.2], 0.8, 3.0),
        ([0.1, 0.7, 0.2], 0.8, 2.0),
        ([0.2, 0.4, 0.3, 0.1], 0.2, 1.0),
        ([0.2, 0.4, 0.3, 0.1], 0.6, 2.0),
        ([0.2, 0.4, 0.3, 0.1], 0.9, 3.0),
        ([0.7, 0.2, 0.1], 0.7, 1.0),
        ([0.7, 0.2, 0.1], 0.9, 2.0),
        ([0.1, 0.2, 0.7], 0.3, 2.0),
        ([0.2, 0.3, 0.5], 0.5, 2.0),
        # Just past a boundary: the next atom.
        ([0.1, 0.2, 0.7], 0.101, 2.0),
        ([0.2, 0.3, 0.5], 0.501, 3.0),
        ([0.2, 0.3, 0.5], 1.0, 3.0),
    ],
)
def test_var_on_and_past_boundaries(probs, rho, var, dtype):
    values = torch.arange(1.0, len(probs) + 1, dtype=dtype)
    dist = from_atoms(values, torch.tensor(probs, dtype=dtype))
    assert as_float(value_at_risk(dist, rho)) == var


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "values, probs, rho, var, cvar",
    [
        ([0.0, 10.0], [0.5, 0.5], 0.6, 10.0, 10 * 0.1 / 0.6),  # splits the upper atom
        ([-1.0, 2.0, 5.0], [0.2, 0.5, 0.3], 0.5, 2.0, (0.2 * -1 + 0.3 * 2) / 0.5),
        ([-1.0, 2.0, 5.0], [0.2, 0.5, 0.3], 0.1, -1.0, -1.0),  # inside the first atom
        ([-1.0, 2.0, 5.0], [0.2, 0.5, 0.3], 1.0, 5.0, -0.2 + 1.0 + 1.5),  # CVaR_1 = E
        ([3.0, -1.0, 2.0], [0.2, 0.5, 0.3], 0.6, 2.0, (0.5 * -1 + 0.1 * 2) / 0.6),  # unsorted
        ([3.0, -1.0, 2.0], [0.2, 0.5, 0.3], 0.9, 3.0, (-0.5 + 0.6 + 0.1 * 3) / 0.9),
        ([1.0, 2.0], [2.0, 6.0], 0.5, 2.0, (0.25 * 1 + 0.25 * 2) / 0.5),  # normalised
    ],
)
def test_discrete_var_cvar_by_hand(values, probs, rho, var, cvar, dtype):
    dist = from_atoms(torch.tensor(values, dtype=dtype), torch.tensor(probs, dtype=dtype))
    tol = EXACT[dtype]
    assert as_float(value_at_risk(dist, rho)) == pytest.approx(var, abs=tol)
    assert as_float(conditional_value_at_risk(dist, rho)) == pytest.approx(cvar, abs=tol)


def test_from_atoms_sorts_and_normalises():
    # Unnormalised and unsorted; a negative weight (e.g. a projection's round-off) counts as 0.
    dist = from_atoms(torch.tensor([3.0, -1.0, 7.0, 2.0]), torch.tensor([2.0, 5.0, -0.5, 3.0]))
    assert dist.values.tolist() == [-1.0, 2.0, 3.0, 7.0]
    assert_close(dist.probs, torch.tensor([0.5, 0.3, 0.2, 0.0]))
    dist = ReturnDistribution(dist.values[:3], dist.probs[:3])
    assert_close(dist.cumulative, torch.tensor([0.5, 0.8, 1.0]))
    assert as_float(expectation(dist)) == pytest.approx(-0.5 + 0.6 + 0.6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "rho, var, cvar",
    [
        (1e-7, 0.0, 0.0),  # a tiny level must not return the zero-mass atom at -5
        (0.01, 0.0, 0.0),
        (0.5, 0.0, 0.0),
        (0.51, 2.0, 0.01 * 2 / 0.51),  # skips the zero-mass atom at 1
        (0.75, 2.0, 0.25 * 2 / 0.75),
        (1.0, 2.0, 1.0),  # never the zero-mass atom at 100
    ],
)
def test_zero_probability_atoms_are_never_selected(rho, var, cvar, dtype):
    values = torch.tensor([-5.0, 0.0, 1.0, 2.0, 100.0], dtype=dtype)
    probs = torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0], dtype=dtype)
    dist = from_atoms(values, probs)
    assert as_float(value_at_risk(dist, rho)) == var
    assert as_float(conditional_value_at_risk(dist, rho)) == pytest.approx(cvar, abs=1e-6)
    assert as_float(expectation(dist)) == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [-2.5, 0.0, 3.7])
def test_dirac(value, dtype):
    dist = dirac(torch.tensor(value, dtype=dtype))
    assert dist.values.shape == (1,)
    assert as_float(expectation(dist)) == pytest.approx(value)
    for rho in RHOS + [1e-7, 1.0]:
        assert as_float(value_at_risk(dist, rho)) == pytest.approx(value)
        assert as_float(conditional_value_at_risk(dist, rho)) == pytest.approx(value)


def test_from_cdf_layout():
    """K + 1 atoms: grid[0] with F(grid[0]), interval midpoints with the increase, grid[-1] with
    the mass above; a non-monotone or out-of-range CDF is repaired."""
    grid = torch.tensor([0.0, 1.0, 2.0, 4.0], dtype=torch.float64)
    cdf = torch.tensor([0.1, 0.4, 0.3, 1.2], dtype=torch.float64)  # dips, then exceeds 1
    dist = from_cdf(grid, cdf)
    assert dist.values.tolist() == [0.0, 0.5, 1.5, 3.0, 4.0]
    assert_close(dist.probs, torch.tensor([0.1, 0.3, 0.0, 0.6, 0.0], dtype=torch.float64))
    assert (dist.probs >= 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_cdf_uniform(dtype):
    """A CDF linear between grid points (uniform on [a, b], grid wider than the support):
    E is exact; VaR and CVaR are within half a step; a tiny level never returns the empty
    grid[0] atom below the support."""
    a, b = -1.0, 3.0
    grid = torch.linspace(-2.0, 4.0, 61, dtype=dtype)  # step 0.1
    h = 0.1
    dist = from_cdf(grid, ((grid - a) / (b - a)).clamp(0, 1))
    exact = EXACT[dtype]
    assert as_float(expectation(dist)) == pytest.approx((a + b) / 2, abs=exact)
    for rho in RHOS + [1e-7, 1.0]:
        var = as_float(value_at_risk(dist, rho))
        assert abs(var - (a + rho * (b - a))) <= h / 2 + exact, rho
        cvar = as_float(conditional_value_at_risk(dist, rho))
        assert abs(cvar - (a + rho * (b - a) / 2)) <= h / 2 + exact, rho


@pytest.mark.parametrize("rho", [0.0, -0.1, 1.5, 5])
def test_invalid_level_raises(rho):
    dist = from_atoms(torch.tensor([0.0, 1.0]), torch.tensor([0.5, 0.5]))
    with pytest.raises(ValueError, match="rho"):
        value_at_risk(dist, rho)
    with pytest.raises(ValueError, match="rho"):
        conditional_value_at_risk(dist, rho)


# --------------------------------------------------------------------------------------------
# Batching
# --------------------------------------------------------------------------------------------

B, A, K = 4, 3, 9


def batched_dists(dtype):
    """[B, A, K]-shaped distributions of every representation, rows deliberately different."""
    g = torch.Generator().manual_seed(0)
    spread = torch.arange(1, A + 1, dtype=dtype).view(1, A, 1)
    values = torch.randn(B, A, K, generator=g, dtype=dtype) * spread
    probs = torch.rand(B, A, K, generator=g, dtype=dtype)
    probs[0, 1, :3] = 0.0  # zero-mass atoms in one row
    grid = torch.linspace(-3, 3, K, dtype=dtype)  # shared 1-D grid, broadcast against cdf
    mus = torch.randn(B, A, 1, generator=g, dtype=dtype)
    cdf = torch.sigmoid((grid - mus) / 0.5)
    return {
        "atoms": from_atoms(values, probs),
        "quantiles": from_quantiles(values),
        "samples": from_samples(values),
        "cdf": from_cdf(grid, cdf),
        "dirac": dirac(values[..., 0]),
    }


MEASURES = {
    "expectation": expectation,
    **{f"var{r}": functools.partial(value_at_risk, rho=r) for r in (0.1, 0.3, 0.5)},
    **{f"cvar{r}": functools.partial(conditional_value_at_risk, rho=r) for r in (0.1, 0.3, 0.5)},
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("measure", list(MEASURES))
def test_batched_rows_equal_single_row_results(measure, dtype):
    fn = MEASURES[measure]
    for rep, dist in batched_dists(dtype).items():
        out = fn(dist)
        assert out.shape == (B, A), (rep, out.shape)
        assert out.dtype == dtype
        for b in range(B):
            for a in range(A):
                single = fn(dist.select((b, a)))
                assert single.shape == ()
                assert_close(out[b, a], single, rtol=0, atol=0, msg=f"{rep} {b} {a}")
        # A [B*A, K] flattening gives the same numbers too.
        flat = ReturnDistribution(dist.values.reshape(B * A, -1), dist.probs.reshape(B * A, -1))
        assert_close(fn(flat).view(B, A), out, rtol=0, atol=0)


def test_gather_actions_and_select():
    dist = batched_dists(torch.float64)["atoms"]
    actions = torch.tensor([2, 0, 1, 2])
    chosen = dist.gather_actions(actions)
    assert chosen.values.shape == (B, K)
    for b in range(B):
        assert_close(chosen.values[b], dist.values[b, actions[b]])
        assert_close(chosen.probs[b], dist.probs[b, actions[b]])
    assert dist.select(1).values.shape == (A, K)


# --------------------------------------------------------------------------------------------
# Utility and greedy action selection
# --------------------------------------------------------------------------------------------


def pair(*actions):
    """A [1, A, K] distribution from per-action (values, probs), padded with zero-mass atoms."""
    k = max(len(v) for v, _ in actions)
    values, probs = [], []
    for v, p in actions:
        values.append(list(v) + [v[-1]] * (k - len(v)))
        probs.append(list(p) + [0.0] * (k - len(p)))
    return from_atoms(torch.tensor([values]), torch.tensor([probs]))


# Action 0: a sure 1.0. Action 1: 3.0 or -0.5 with equal odds (E = 1.25, VaR_0.1 = -0.5,
# CVaR_0.1 = -0.5). U_1 = 1.75 alpha - 0.5 crosses U_0 = 1 at alpha = 6/7.
SAFE_VS_RISKY = pair(([1.0], [1.0]), ([-0.5, 3.0], [0.5, 0.5]))
# The paper's risky rewards, as atoms: "orange" 0.8 w.p. 0.75, -1.2 w.p. 0.25 (E = 0.3) against
# a sure 0.0. VaR_0.1: orange -1.2 < 0.
RISKY_REWARDS = pair(([0.0], [1.0]), ([-1.2, 0.8], [0.25, 0.75]))


def _orange_vs_safe_cdf() -> ReturnDistribution:
    """The same choice through learnt-CDF form: action 0 ~ N(0.2, 0.1) (safe, lower mean),
    action 1 ~ the risky-orange mixture (E = 0.3, a fat low tail); one shared grid."""
    grid = np.linspace(-3.0, 2.5, 1101)
    cdfs = [Mixture([1.0], [0.2], [0.1]).cdf(grid), MIXTURES["risky-orange"].cdf(grid)]
    f32 = torch.float32
    return from_cdf(torch.tensor(grid, dtype=f32), torch.tensor(np.stack(cdfs)[None], dtype=f32))


ORANGE_VS_SAFE_CDF = _orange_vs_safe_cdf()
GREEDY_PAIRS = {
    "safe": SAFE_VS_RISKY,
    "risky-rewards": RISKY_REWARDS,
    "orange-cdf": ORANGE_VS_SAFE_CDF,
}
GREEDY_CASES = [
    ("safe", 0.0, "var", {"rho": 0.1}, 0),
    ("safe", 0.0, "cvar", {"rho": 0.1}, 0),
    ("safe", 1.0, "var", {"rho": 0.1}, 1),
    ("safe", 1.0, "var", {}, 1),  # alpha = 1 never evaluates the risk measure
    ("safe", 0.8, "var", {"rho": 0.1}, 0),  # U_1 = 0.9 < 1
    ("safe", 0.9, "var", {"rho": 0.1}, 1),  # U_1 = 1.075 > 1
    ("safe", 0.0, "var", {"rho": 0.6}, 1),  # VaR_0.6 of action 1 is 3.0
    ("safe", 0.0, "expectation", {}, 1),
    ("risky-rewards", 0.0, "var", {"rho": 0.1}, 0),
    ("risky-rewards", 0.0, "cvar", {"rho": 0.5}, 0),  # CVaR_0.5 = (-0.3 + 0.2) / 0.5 < 0
    ("risky-rewards", 0.0, "var", {"rho": 0.3}, 1),  # past the bad atom: 0.8
    ("risky-rewards", 1.0, "cvar", {"rho": 0.1}, 1),
    ("risky-rewards", 0.5, "var", {"rho": 0.1}, 0),  # 0.15 - 0.6 < 0
    ("orange-cdf", 0.0, "var", {"rho": 0.1}, 0),
    ("orange-cdf", 0.0, "cvar", {"rho": 0.25}, 0),
    ("orange-cdf", 0.5, "cvar", {"rho": 0.1}, 0),
    ("orange-cdf", 1.0, "cvar", {"rho": 0.1}, 1),
    ("orange-cdf", 0.0, "var", {"rho": 0.5}, 1),  # the median favours the orange mode
]


@pytest.mark.parametrize(
    "pair_name, alpha, risk, params, action",
    GREEDY_CASES,
    ids=[f"{c[0]}-alpha{c[1]}-{c[2]}{c[3].get('rho', '')}" for c in GREEDY_CASES],
)
def test_greedy_picks_expected_action(pair_name, alpha, risk, params, action):
    assert Utility(alpha, risk, params).greedy(GREEDY_PAIRS[pair_name]).tolist() == [action]


def test_greedy_batched_rows_pick_their_own_action():
    dist = ReturnDistribution(
        torch.cat([SAFE_VS_RISKY.values, SAFE_VS_RISKY.values.flip(1)]),
        torch.cat([SAFE_VS_RISKY.probs, SAFE_VS_RISKY.probs.flip(1)]),
    )
    assert Utility(0.0, "cvar", {"rho": 0.1}).greedy(dist).tolist() == [0, 1]
    assert Utility(1.0, "cvar", {"rho": 0.1}).greedy(dist).tolist() == [1, 0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("risk", ["var", "cvar"])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_utility_is_alpha_mixture(alpha, risk, dtype):
    dist = batched_dists(dtype)["atoms"]
    u = Utility(alpha, risk, {"rho": 0.25})
    r = RISK_MEASURES[risk](dist, rho=0.25)
    out = u(dist)
    assert out.shape == (B, A)
    assert_close(out, alpha * expectation(dist) + (1 - alpha) * r)
    if alpha == 0.0:
        assert_close(out, r, rtol=0, atol=0)
    if alpha == 1.0:
        assert_close(out, expectation(dist), rtol=0, atol=0)
    assert_close(u.greedy(dist), out.argmax(-1))


def test_combine_utility_leaves_out_the_part_without_weight():
    """One formula for floats (the exact laws) and tensors (the agents); at alpha 0 or 1 the
    other part need not exist and cannot turn U into NaN."""
    assert combine_utility(0.25, 2.0, -2.0) == 0.25 * 2.0 + 0.75 * -2.0
    assert combine_utility(1.0, 2.0, None) == combine_utility(1.0, 2.0, -math.inf) == 2.0
    assert combine_utility(0.0, None, -2.0) == combine_utility(0.0, math.inf, -2.0) == -2.0
    mean, risk = torch.tensor([1.0, 2.0]), torch.tensor([-1.0, 0.5])
    assert torch.equal(combine_utility(0.5, mean, risk), 0.5 * mean + 0.5 * risk)


def test_registry_has_builtin_measures():
    assert {"expectation", "var", "cvar"} <= set(RISK_MEASURES)
    assert RISK_MEASURES["var"] is value_at_risk
    assert RISK_MEASURES["cvar"] is conditional_value_at_risk


def test_utility_unknown_risk_names_allowed_values():
    with pytest.raises(ValueError, match="allowed") as err:
        Utility(0.5, "cvarr", {"rho": 0.1})
    message = str(err.value)
    assert "'cvarr'" in message
    allowed = set(message.split("allowed: ")[1].split(", "))
    assert {"cvar", "var", "expectation"} <= allowed


@pytest.mark.parametrize(
    "risk, params, unknown, allowed",
    [("var", {"alpha": 0.1}, "alpha", "rho"), ("cvar", {"rho": 0.1, "beta": 1}, "beta", "rho"),
     ("expectation", {"rho": 0.1}, "rho", "(none)")],
)  # fmt: skip
def test_utility_unknown_parameter_names_allowed_values(risk, params, unknown, allowed):
    with pytest.raises(ValueError, match="allowed") as err:
        Utility(0.5, risk, params)
    assert f"parameter {unknown}" in str(err.value)
    assert str(err.value).endswith(f"allowed: {allowed}")


def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match="twice"):
        risk_measure("var")(lambda dist: dist.values.sum(-1))
    assert RISK_MEASURES["var"] is value_at_risk


# --------------------------------------------------------------------------------------------
# Distortion risk
# --------------------------------------------------------------------------------------------


def property_dists(dtype):
    """A few distributions for identity/property checks, all [B, A, K] or 1-D."""
    dists = dict(batched_dists(dtype))
    dists["gauss-cdf"] = cdf_dist("gauss-std", dtype)[0]
    dists["orange-quantiles"] = quantile_dist("risky-orange", dtype)
    dists["zero-mass"] = from_atoms(
        torch.tensor([-5.0, 0.0, 1.0, 2.0, 100.0], dtype=dtype),
        torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0], dtype=dtype),
    )
    return dists


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS + [1.0])
def test_distortion_risk_reproduces_expectation_and_cvar(rho, dtype):
    tol = dict(rtol=0, atol=EXACT[dtype])
    for name, dist in property_dists(dtype).items():
        assert_close(distortion_risk(dist, lambda u: u), expectation(dist), **tol, msg=name)
        cvar = distortion_risk(dist, lambda u: (u / rho).clamp(max=1.0))
        assert_close(cvar, conditional_value_at_risk(dist, rho), **tol, msg=name)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_ordering_and_monotonicity_in_rho(dtype):
    levels = [1e-4] + RHOS + [0.99, 1.0]
    eps = EXACT[dtype]
    for name, dist in property_dists(dtype).items():
        mean = expectation(dist)
        support_lo = dist.values.masked_fill(dist.probs <= 0, float("inf")).amin(-1)
        support_hi = dist.values.masked_fill(dist.probs <= 0, float("-inf")).amax(-1)
        prev_var = prev_cvar = None
        for rho in levels:
            var = value_at_risk(dist, rho)
            cvar = conditional_value_at_risk(dist, rho)
            assert (support_lo - eps <= cvar).all(), name
            assert (cvar <= var + eps).all(), (name, rho)
            assert (cvar <= mean + eps).all(), (name, rho)
            assert (var <= support_hi).all() and (var >= support_lo).all(), (name, rho)
            if prev_var is not None:
                assert (prev_var <= var).all(), (name, rho)
                assert (prev_cvar <= cvar + eps).all(), (name, rho)
            prev_var, prev_cvar = var, cvar
        assert_close(conditional_value_at_risk(dist, 1.0), mean, rtol=0, atol=eps)
        # VaR_1 is the top of the support, up to atoms whose total mass is below the level
        # tolerance (the far tail of a CDF on a wide grid).
        var1 = value_at_risk(dist, 1.0)
        upper_tail = 1.0 - dist.cumulative + dist.probs  # P(Z >= v_k)
        significant_hi = dist.values.masked_fill(upper_tail <= LEVEL_TOL, float("-inf")).amax(-1)
        assert (significant_hi <= var1).all() and (var1 <= support_hi).all(), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("shift, scale", [(2.5, 1.0), (-7.0, 1.0), (0.0, 3.0), (1.0, 0.25)])
def test_translation_and_positive_scaling_equivariance(shift, scale, rho, dtype):
    tol = dict(rtol=EXACT[dtype], atol=EXACT[dtype])
    for name, dist in property_dists(dtype).items():
        moved = from_atoms(dist.values * scale + shift, dist.probs)
        for fn in (expectation, functools.partial(value_at_risk, rho=rho),
                   functools.partial(conditional_value_at_risk, rho=rho)):  # fmt: skip
            assert_close(fn(moved), fn(dist) * scale + shift, **tol, msg=name)
    # Through the CDF representation: shifting and scaling the grid.
    m = CASES["gauss-std"]
    grid = np.linspace(-8, 8, 321)
    cdf = torch.tensor(m.cdf(grid), dtype=dtype)
    base = from_cdf(torch.tensor(grid, dtype=dtype), cdf)
    moved = from_cdf(torch.tensor(grid * scale + shift, dtype=dtype), cdf)
    assert_close(value_at_risk(moved, rho), value_at_risk(base, rho) * scale + shift, **tol)
    cvar_base = conditional_value_at_risk(base, rho)
    assert_close(conditional_value_at_risk(moved, rho), cvar_base * scale + shift, **tol)


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rho", [0.05, 0.25])
def test_gradients_through_from_cdf(rho, dtype):
    """A learnt logistic CDF F(z) = sigmoid((z - mu) / s). E and CVaR are translation
    equivariant, so d/dmu of both is 1; E does not depend on s; CVaR_rho = mu + s c(rho), so
    d CVaR / d log s = CVaR - mu. The discretised CVaR's derivative matches these up to O(h/s)
    (its kinks at grid points), and matches its own finite differences closely."""
    grid = torch.linspace(-12, 12, 961, dtype=dtype)  # h = 0.025, s = 0.5

    def measures(mu, log_s):
        dist = from_cdf(grid, torch.sigmoid((grid - mu) / log_s.exp()))
        return dist, expectation(dist), conditional_value_at_risk(dist, rho)

    mu = torch.tensor(0.3, dtype=dtype, requires_grad=True)
    log_s = torch.tensor(math.log(0.5), dtype=dtype, requires_grad=True)
    dist, e, cvar = measures(mu, log_s)
    e_mu, e_s = torch.autograd.grad(e, (mu, log_s), retain_graph=True)
    c_mu, c_s = torch.autograd.grad(cvar, (mu, log_s), retain_graph=True)
    for g in (e_mu, e_s, c_mu, c_s):
        assert torch.isfinite(g)
    assert float(e_mu) == pytest.approx(1.0, abs=1e-3)
    assert float(e_s) == pytest.approx(0.0, abs=1e-3)
    assert float(c_mu) == pytest.approx(1.0, abs=0.05)
    assert float(c_s) == pytest.approx(float(cvar.detach() - mu.detach()), abs=0.05)
    if dtype == torch.float64:  # autograd == finite differences of the discretised CVaR
        step = 1e-4
        with torch.no_grad():
            fd_s = (measures(mu, log_s + step)[2] - measures(mu, log_s - step)[2]) / (2 * step)
        assert float(c_s) == pytest.approx(float(fd_s), rel=1e-5)
    # Utility and distortion paths carry gradients too.
    u = Utility(0.5, "cvar", {"rho": rho})(dist)
    (g_mu,) = torch.autograd.grad(u, mu, retain_graph=True)
    assert float(g_mu) == pytest.approx(0.5 * float(e_mu) + 0.5 * float(c_mu), rel=1e-5)
    d = distortion_risk(dist, lambda v: (v / rho).clamp(max=1.0))
    (g_mu,) = torch.autograd.grad(d, mu)
    assert float(g_mu) == pytest.approx(float(c_mu), rel=1e-4)


def test_jacobian_matches_finite_differences():
    """Central differences agree with autograd for E and CVaR as functions of CDF logits
    (a hand-rolled gradcheck; rho = 0.3 is not on a cumulative boundary, so the discrete
    CVaR is smooth here)."""
    grid = torch.linspace(-2, 2, 7, dtype=torch.float64)
    logits = torch.linspace(-3, 3, 7, dtype=torch.float64).add(0.1)

    def measures(x):
        dist = from_cdf(grid, torch.sigmoid(x))
        return torch.stack([expectation(dist), conditional_value_at_risk(dist, 0.3)])

    x = logits.clone().requires_grad_()
    out = measures(x)
    jac = torch.stack([torch.autograd.grad(out[i], x, retain_graph=True)[0] for i in range(2)])
    step = 1e-6
    basis = torch.eye(7, dtype=torch.float64)
    fd = torch.stack(
        [(measures(logits + step * e) - measures(logits - step * e)) / (2 * step) for e in basis],
        dim=1,
    )
    assert jac.abs().sum() > 0
    assert_close(jac, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_finite_with_flat_or_nonmonotone_cdf(dtype):
    """cummax/clamp repair of a messy learnt CDF must not produce NaN gradients."""
    grid = torch.linspace(-1, 1, 6, dtype=dtype)
    raw = torch.tensor([-0.1, 0.2, 0.2, 0.15, 0.9, 1.3], dtype=dtype, requires_grad=True)
    dist = from_cdf(grid, raw)
    loss = expectation(dist)
    loss = loss + conditional_value_at_risk(dist, 0.5) + conditional_value_at_risk(dist, 0.05)
    (g,) = torch.autograd.grad(loss, raw)
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_through_atoms_and_quantiles(dtype):
    # C51-style softmax probabilities on fixed atoms.
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 3, 11, dtype=dtype, generator=gen).requires_grad_()
    support = torch.linspace(-5, 5, 11, dtype=dtype)
    dist = from_atoms(support, logits.softmax(-1))
    loss = conditional_value_at_risk(dist, 0.1).sum() + expectation(dist).sum()
    (g,) = torch.autograd.grad(loss, logits)
    assert torch.isfinite(g).all() and g.abs().sum() > 0
    # QR-style quantiles: d CVaR / d q_i is the tail weight of atom i over rho.
    q = torch.linspace(-1, 1, 10, dtype=dtype).requires_grad_()
    (g,) = torch.autograd.grad(conditional_value_at_risk(from_quantiles(q), 0.25), q)
    expected = torch.tensor([0.4, 0.4, 0.2] + [0.0] * 7, dtype=dtype)
    assert_close(g, expected)
    (g,) = torch.autograd.grad(value_at_risk(from_quantiles(q), 0.25), q)
    assert_close(g, torch.eye(10, dtype=dtype)[2])


def test_mass_at_the_ends_of_a_support():
    from rs_lightning.risk import from_atoms

    dist = from_atoms(torch.tensor([[-2.0, -1.0, 0.0, 1.0, 2.0], [-3.0, -1.0, 0.0, 1.0, 1.999]]),
                      torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2], [0.05, 0.25, 0.3, 0.2, 0.2]]))
    lower, upper = dist.mass_at_each_end(-2.0, 2.0)
    assert torch.allclose(lower + upper, torch.tensor([0.3, 0.25]))  # 1.999 is within 0.004 of 2
    assert torch.allclose(lower, torch.tensor([0.1, 0.05]))
    assert torch.allclose(upper, torch.tensor([0.2, 0.2]))
    assert torch.allclose(sum(dist.mass_at_each_end(-5.0, 5.0)), torch.zeros(2))
