"""This project's own components, registered with rs-lightning when the module is imported
(``plugins: [my_components]`` in conf/experiment/risky_choice.yaml): a gymnasium
environment and a risk measure. Nothing of the installed package is edited.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rs_lightning.risk import ReturnDistribution, expectation, risk_measure

START, GAMBLE, END = 0, 1, 2  # the states
SURE, RISKY = 0, 1  # the choices at the start


class RiskyChoice(gym.Env):
    """Take a sure reward, or gamble: the gamble pays ``win`` with probability
    1 - ``loss_probability`` and ``loss`` otherwise, one step later. With the defaults the
    gamble is worth more on average (0.6 against 0.3; 0.54 discounted with gamma = 0.9) but
    loses 3 in its worst 10% of episodes: a risk-neutral agent gambles, a risk-averse one
    takes the sure reward.

    The model is published as gymnasium's toy-text environments publish theirs:
    ``P[s][a]`` lists ``(probability, next state, reward, terminated)``, and
    ``initial_state_distrib`` the start state's law, so rs-lightning computes the exact
    return laws and utilities of a trained policy on it.
    """

    # SURE, RISKY by name: what the Python API and the figures show for the actions.
    action_names = ("sure", "risky")

    def __init__(self, sure: float = 0.3, win: float = 1.0, loss: float = -3.0,
                 loss_probability: float = 0.1) -> None:
        if not 0.0 <= loss_probability <= 1.0:
            raise ValueError(f"loss_probability must be in [0, 1], got {loss_probability}")
        self.observation_space = gym.spaces.Discrete(3)
        self.action_space = gym.spaces.Discrete(2)
        gamble = [(1.0 - loss_probability, END, win, True), (loss_probability, END, loss, True)]
        stay = [(1.0, END, 0.0, True)]
        self.P = {START: {SURE: [(1.0, END, sure, True)], RISKY: [(1.0, GAMBLE, 0.0, False)]},
                  GAMBLE: {SURE: gamble, RISKY: gamble},
                  END: {SURE: stay, RISKY: stay}}
        self.initial_state_distrib = np.array([1.0, 0.0, 0.0])
        self.s = START

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.s = START
        return self.s, {}

    def step(self, action):
        outcomes = self.P[self.s][int(action)]
        pick = self.np_random.choice(len(outcomes), p=[p for p, *_ in outcomes])
        _, self.s, reward, terminated = outcomes[pick]
        return self.s, float(reward), terminated, False, {}


gym.register("my_project/RiskyChoice-v0", entry_point=RiskyChoice, max_episode_steps=10)


@risk_measure("semideviation")
def semideviation(dist: ReturnDistribution, lam: float) -> torch.Tensor:
    """E[Z] - lam * sqrt(E[(E[Z] - Z)_+^2]): the mean less ``lam`` times the lower
    semideviation (Markowitz's downside risk: only returns below the mean count)."""
    if lam < 0:
        raise ValueError(f"risk.lam: must be >= 0, got {lam}")
    mean = expectation(dist)
    shortfall = (mean.unsqueeze(-1) - dist.values).clamp_min(0.0)
    return mean - lam * (dist.probs * shortfall**2).sum(-1).clamp_min(1e-12).sqrt()
