"""Risk conditioning: one network for every risk setting (alpha and the measure's parameter).

A risk-conditioned agent learns Z(s, a | setting), the law of the return when acting greedily
on the utility U_setting = alpha E + (1 - alpha) R_param from s' on. The setting reaches the
network as features appended to the observation, so that every agent's torso merges them with
the state in its first layer: the cosine features cos(pi i x), i = 1..n, of alpha and of the
parameter mapped onto [0, 1] by its training range (the embedding IQN uses for its fractions).

:class:`RiskConditioning` is the ``risk_conditioning`` config section made pure: where
settings are drawn from, their features, and the utility rules of a batch of settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from rs_lightning.risk.measures import (
    RISK_MEASURES,
    RowUtility,
    RowUtilityArgmax,
    Utility,
    declared_parameter,
)

DRAWS = ("uniform", "values")  # uniform on [low, high], or uniform among listed values
ACTING = ("episode", "fixed")  # a setting per episode and env copy, or the run's own


@dataclass(frozen=True)
class RiskConditioning:
    """Where the settings of a risk-conditioned run come from, and what the network sees.

    ``alpha`` and ``values`` (of the measure's ``parameter``) are ``(low, high)`` for
    ``draw: uniform`` and the listed values for ``draw: values``.
    """

    risk: str
    alpha: tuple[float, ...]
    values: tuple[float, ...]
    draw: str = "uniform"
    n_cosines: int = 8
    acting: str = "episode"
    # None: a setting per replayed transition; m: m settings per batch, each shared by a
    # block of consecutive rows (fewer distinct (state, setting) rows: less work for agents
    # that compute each distinct row once, such as RS-UMDQN-C).
    settings_per_batch: int | None = None

    def __post_init__(self) -> None:
        if self.risk not in RISK_MEASURES:
            raise ValueError(f"risk: unknown risk measure {self.risk!r}")
        if declared_parameter(self.risk) is None:
            raise ValueError(f"risk_conditioning: risk={self.risk} declares no parameter to "
                             "condition on; use a measure with one (var, cvar, wang, ...)")
        if not getattr(RISK_MEASURES[self.risk], "per_row", False):
            raise ValueError(f"risk_conditioning: risk={self.risk} takes no parameter per row "
                             "(a cached table per value); allowed: " + ", ".join(
                                 sorted(n for n, f in RISK_MEASURES.items()
                                        if getattr(f, "per_row", False))))
        if self.draw not in DRAWS:
            raise ValueError(f"risk_conditioning.draw: must be one of {', '.join(DRAWS)}, "
                             f"got {self.draw!r}")
        if self.acting not in ACTING:
            raise ValueError(f"risk_conditioning.acting: must be one of {', '.join(ACTING)}, "
                             f"got {self.acting!r}")
        if isinstance(self.n_cosines, bool) or not self.n_cosines >= 1:
            raise ValueError(f"risk_conditioning.n_cosines: must be a positive integer, got "
                             f"{self.n_cosines!r}")
        if self.settings_per_batch is not None and (
                isinstance(self.settings_per_batch, bool)
                or not isinstance(self.settings_per_batch, int) or self.settings_per_batch < 1):
            raise ValueError("risk_conditioning.settings_per_batch: must be null (one per "
                             f"transition) or a positive integer, got {self.settings_per_batch!r}")
        self._check_values("alpha", self.alpha, lambda a: 0.0 <= a <= 1.0, "in [0, 1]")
        name = self.parameter
        if name == "rho":
            self._check_values(name, self.values, lambda r: 0.0 < r <= 1.0, "in (0, 1]")
        else:
            self._check_values(name, self.values, math.isfinite, "finite")
        for value in self.values:  # the measure's own checks (e.g. cpw's eta >= 0.28)
            try:
                Utility(0.0, self.risk, {name: float(value)})
            except ValueError as error:
                message = str(error).partition(": ")[2] or str(error)
                raise ValueError(f"risk_conditioning.{name}: {message}") from None

    def _check_values(self, key: str, values, ok, allowed: str) -> None:
        shown = list(values)
        if self.draw == "uniform" and len(shown) != 2:
            raise ValueError(f"risk_conditioning.{key}: must be [low, high] for draw=uniform, "
                             f"got {shown}")
        if not shown:
            raise ValueError(f"risk_conditioning.{key}: must list at least one value")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and ok(v)
                   for v in shown):
            raise ValueError(f"risk_conditioning.{key}: every value must be {allowed}, "
                             f"got {shown}")
        if self.draw == "uniform" and shown[0] > shown[1]:
            raise ValueError(f"risk_conditioning.{key}: low must not exceed high, got {shown}")

    @property
    def parameter(self) -> str:
        """The measure's parameter the network is conditioned on (``rho``, ``eta``, ...)."""
        return declared_parameter(self.risk)  # type: ignore[return-value]

    @property
    def n_features(self) -> int:
        return 2 * self.n_cosines

    def bounds(self, key: str) -> tuple[float, float]:
        """The smallest and largest value of ``alpha`` or of the parameter drawn in training."""
        values = self.alpha if key == "alpha" else self.values
        return float(min(values)), float(max(values))

    def sample(self, generator: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``size`` settings ``(alpha[size], parameter[size])`` (float64), alpha drawn first."""
        drawn = []
        for values in (self.alpha, self.values):
            if self.draw == "uniform":
                drawn.append(generator.uniform(values[0], values[1], size))
            else:
                drawn.append(np.asarray(values, dtype=np.float64)[
                    generator.integers(len(values), size=size)])
        return drawn[0], drawn[1]

    def sample_batch(self, generator: np.random.Generator, size: int
                     ) -> tuple[np.ndarray, np.ndarray]:
        """The settings of a replayed batch of ``size`` rows: one per row, or
        ``settings_per_batch`` drawn and each repeated over a block of consecutive rows."""
        drawn = min(self.settings_per_batch or size, size)
        alpha, parameter = self.sample(generator, drawn)
        block = np.arange(size) * drawn // size
        return alpha[block], parameter[block]

    def features(self, alpha: Tensor, parameter: Tensor) -> Tensor:
        """The network's input of the settings ``alpha[...]``, ``parameter[...]`` ->
        ``[..., 2 n_cosines]`` float32: cos(pi i x) for alpha and for the parameter mapped
        onto [0, 1] by its training bounds (module docstring)."""
        low, high = self.bounds(self.parameter)
        scaled = (parameter - low) / (high - low) if high > low else torch.zeros_like(parameter)
        frequencies = math.pi * torch.arange(1, self.n_cosines + 1, dtype=torch.float32,
                                             device=alpha.device)
        x = torch.stack([alpha, scaled], dim=-1).to(torch.float32)  # [..., 2]
        return torch.cos(x.unsqueeze(-1) * frequencies).flatten(-2)

    def choose_action(self, alpha: Tensor, parameter: Tensor) -> RowUtilityArgmax:
        """argmax_a U of each row's own setting (the agents' ``choose_action``)."""
        return RowUtilityArgmax(RowUtility(alpha, self.risk, parameter))

    def utility(self, alpha: float, parameter: float) -> Utility:
        """The utility of one setting."""
        return Utility(float(alpha), self.risk, {self.parameter: float(parameter)})

    def check_setting(self, alpha: float, parameter: float) -> None:
        """Refuse a setting outside the ranges the network was trained on (one line)."""
        for key, value in (("alpha", alpha), (self.parameter, parameter)):
            low, high = self.bounds(key)
            if not low - 1e-12 <= value <= high + 1e-12:
                raise ValueError(f"{key}={value} lies outside the range this run was trained "
                                 f"on, risk_conditioning.{key} = [{low}, {high}]")


def widen(obs: Tensor, features: Tensor) -> Tensor:
    """The observations ``obs[..., D]`` with the setting features ``[..., F]`` appended
    (features of one setting, ``[F]``, are shared by every row)."""
    if features.dim() == 1:
        features = features.expand(*obs.shape[:-1], -1)
    return torch.cat([obs, features.to(obs.dtype)], dim=-1)
