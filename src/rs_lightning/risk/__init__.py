"""Risk measures as pure tensor functions of a common return-distribution form.

To add a measure: write ``fn(dist, **params) -> Tensor`` decorated with
``@risk_measure("name")`` in a module of this package, import it below, and add
``conf/risk/name.yaml`` with ``name: name`` and the parameters.
"""

from rs_lightning.risk.distribution import (
    ReturnDistribution,
    dirac,
    from_atoms,
    from_cdf,
    from_quantiles,
    from_samples,
)
from rs_lightning.risk.measures import (
    RISK_MEASURES,
    RowUtility,
    RowUtilityArgmax,
    Utility,
    UtilityArgmax,
    combine_utility,
    conditional_value_at_risk,
    cpw,
    declared_parameter,
    distortion_risk,
    entropic,
    expectation,
    mean_variance,
    power,
    risk_measure,
    spectral,
    value_at_risk,
    wang,
)

__all__ = [
    "RISK_MEASURES",
    "ReturnDistribution",
    "RowUtility",
    "RowUtilityArgmax",
    "Utility",
    "UtilityArgmax",
    "combine_utility",
    "conditional_value_at_risk",
    "cpw",
    "declared_parameter",
    "dirac",
    "distortion_risk",
    "entropic",
    "expectation",
    "from_atoms",
    "from_cdf",
    "from_quantiles",
    "from_samples",
    "mean_variance",
    "power",
    "risk_measure",
    "spectral",
    "value_at_risk",
    "wang",
]
