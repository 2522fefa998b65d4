"""The risk-conditioned objective: one network for every risk setting (alpha and the
measure's parameter).

The network learns Z(s, a | setting), the law of the return when acting greedily on the
utility of that setting from s' on (:mod:`rs_lightning.risk.conditioning`: the setting's
features appended to the observation). In training each copy acts at a setting drawn for
its episode (``risk_conditioning.acting: episode``) or at the run's own (``fixed``), and
every replayed transition gets a setting drawn for it, whose utility picks its target
action. An evaluation acts at one setting, the run's own or any within the trained ranges.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from rs_lightning.errors import ConfigError
from rs_lightning.objectives.base import (
    BatchState,
    EpisodeState,
    Objective,
    register_objective,
)
from rs_lightning.risk import RISK_MEASURES, Utility, declared_parameter
from rs_lightning.risk.conditioning import RiskConditioning, widen

# Tag the generators of the risk settings, apart from any other use of a member's seed.
ACTING_SETTINGS_STREAM = 0xA5E7
LEARNING_SETTINGS_STREAM = 0x1EA5


class CopySettings(EpisodeState):
    """The setting each copy of each member acts at: ``alpha[K, N]``, ``parameter[K, N]``
    (float64). This base holds the run's own setting for every copy
    (``risk_conditioning.acting: fixed``)."""

    def __init__(self, alpha: float, parameter: float, members: int, copies: int) -> None:
        self.alpha = np.full((members, copies), alpha)
        self.parameter = np.full((members, copies), parameter)


class EpisodeSettings(CopySettings):
    """A setting drawn for every copy at the start, and anew for a copy whose episode ended
    (``risk_conditioning.acting: episode``). Member k draws from its own generator, in the
    order of its copies, so that it acts as the run of its seed alone would."""

    checkpoint_key = "settings"

    def __init__(self, conditioning: RiskConditioning, seeds: list[int], copies: int) -> None:
        self.conditioning = conditioning
        self.copies = copies
        self.generators = [np.random.default_rng([seed, ACTING_SETTINGS_STREAM])
                           for seed in seeds]
        drawn = [conditioning.sample(generator, copies) for generator in self.generators]
        self.alpha = np.stack([alpha for alpha, _ in drawn])  # [K, N]
        self.parameter = np.stack([parameter for _, parameter in drawn])  # [K, N]

    def advance(self, reward: np.ndarray, ended: np.ndarray) -> None:
        for j in np.flatnonzero(ended).tolist():  # member by member, copy by copy
            member, copy = divmod(j, self.copies)
            alpha, parameter = self.conditioning.sample(self.generators[member], 1)
            self.alpha[member, copy], self.parameter[member, copy] = alpha[0], parameter[0]
        return None

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        return {"generators": [self.generators[k].bit_generator.state for k in members],
                "alpha": self.alpha[members].tolist(),
                "parameter": self.parameter[members].tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        self.alpha = np.asarray(state["alpha"], dtype=np.float64)
        self.parameter = np.asarray(state["parameter"], dtype=np.float64)


class SettingGenerators(BatchState):
    """Member k's generator of the settings of its replayed transitions."""

    def __init__(self, seeds: list[int]) -> None:
        self.generators = [np.random.default_rng([seed, LEARNING_SETTINGS_STREAM])
                           for seed in seeds]

    def state_dict(self, members: list[int]) -> dict[str, Any]:
        return {"setting_generators": [self.generators[k].bit_generator.state
                                       for k in members]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for generator, generator_state in zip(self.generators,
                                              state.get("setting_generators", [])):
            generator.bit_generator.state = generator_state


@register_objective("conditioned")
class RiskConditioned(Objective):
    """The utility of each row's own setting, for a network that sees the setting."""

    def __init__(self, utility: Utility, conditioning: RiskConditioning) -> None:
        super().__init__(utility)
        self.conditioning = conditioning

    @classmethod
    def from_config(cls, utility, train) -> RiskConditioned:
        return cls(utility, conditioning_from(train.risk_conditioning, utility))

    @property
    def parameter(self) -> float:
        """The run's own value of the measure's parameter."""
        return float(self.utility.params[self.conditioning.parameter])

    def network_problem(self, problem):
        return dataclasses.replace(problem,
                                   obs_dim=problem.obs_dim + self.conditioning.n_features)

    def episode_state(self, seeds, copies, gamma, training=True) -> EpisodeState:
        if not training:
            return EpisodeState()  # an evaluation acts at one setting
        if self.conditioning.acting == "episode":
            return EpisodeSettings(self.conditioning, seeds, copies)
        return CopySettings(self.utility.alpha, self.parameter, len(seeds), copies)

    def acting_rule(self, obs, state, network):
        if isinstance(state, CopySettings):  # training: each copy's setting
            alpha, parameter = (torch.as_tensor(x, dtype=torch.float32, device=obs.device)
                                for x in (state.alpha, state.parameter))
            features = self.conditioning.features(alpha, parameter)
            return widen(obs, features), self.conditioning.choose_action(alpha, parameter)
        setting = torch.tensor([self.utility.alpha], device=obs.device)
        parameter = torch.tensor([self.parameter], device=obs.device)
        return (widen(obs, self.conditioning.features(setting, parameter)[0]),
                self.utility.greedy)

    def batch_state(self, seeds: list[int]) -> SettingGenerators:
        return SettingGenerators(seeds)

    def prepare_batch(self, transitions, state: SettingGenerators):
        """A setting drawn for each transition (member k's from its own generator), its
        features appended to both observations, and the rule choosing each transition's
        target action by its own setting's utility."""
        batch = transitions.obs.shape[1]
        drawn = [self.conditioning.sample_batch(generator, batch)
                 for generator in state.generators]
        device = transitions.obs.device
        alpha, parameter = (torch.as_tensor(np.stack(x), dtype=torch.float32, device=device)
                            for x in zip(*drawn))  # [K, B] each
        features = self.conditioning.features(alpha, parameter)
        widened = transitions._replace(obs=widen(transitions.obs, features),
                                       next_obs=widen(transitions.next_obs, features))
        return widened, self.conditioning.choose_action(alpha, parameter)

    def at(self, utility: Utility) -> RiskConditioned:
        self.conditioning.check_setting(utility.alpha,
                                        utility.params[self.conditioning.parameter])
        return RiskConditioned(utility, self.conditioning)


_CONDITIONING_KEYS = ("draw", "alpha", "n_cosines", "acting")


def conditioning_from(node: dict, utility: Utility) -> RiskConditioning:
    """The ``risk_conditioning`` section of a risk-conditioned run, checked; the run's own
    setting (``alpha`` and the measure's parameter) must lie in the ranges it trains on."""
    section = dict(node)
    parameter_names = {declared_parameter(m) for m in RISK_MEASURES} - {None}
    allowed = set(_CONDITIONING_KEYS) | parameter_names | {"settings_per_batch"}
    for key in section:
        if key not in allowed:
            raise ConfigError(f"risk_conditioning.{key}",
                              f"unknown key; allowed: {', '.join(sorted(allowed))}")
    for key in _CONDITIONING_KEYS:
        if key not in section:
            raise ConfigError(f"risk_conditioning.{key}", "a value is required here")
    name = declared_parameter(utility.risk)
    if name is None:
        raise ConfigError("risk_conditioning", f"risk={utility.risk} declares no parameter to "
                          "condition on; use a measure with one (var, cvar, wang, ...)")
    if section.get(name) is None:
        raise ConfigError(f"risk_conditioning.{name}", f"the range of risk={utility.risk}'s "
                          f"parameter is required, e.g. +risk_conditioning.{name}=[low,high]")

    def values(key: str) -> tuple:
        value = section[key]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"risk_conditioning.{key}",
                              f"must be a list ([low, high] or values), got {value!r}")
        return tuple(value)

    try:
        conditioning = RiskConditioning(
            risk=utility.risk, alpha=values("alpha"), values=values(name),
            draw=section["draw"], n_cosines=section["n_cosines"], acting=section["acting"],
            # optional: without the key, one per transition
            settings_per_batch=section.get("settings_per_batch"))
        conditioning.check_setting(utility.alpha, utility.params[name])
    except ValueError as error:
        key, _, message = str(error).partition(": ")
        if key.startswith("risk_conditioning") and message:
            raise ConfigError(key, message) from None
        raise ConfigError("risk_conditioning", str(error)) from None
    return conditioning
