"""The contract between the Q-learning loop and a distributional agent.

An agent is a network of the return distribution Z(s, a) plus its learning rule. It knows
nothing of risk: the loop hands it ``choose_action``, a function from a return distribution
to the actions maximising the utility, which it must use to pick the target action of the
distributional Bellman target. Acting goes through :meth:`Agent.return_distribution` too, so
the same risk measure decides both (the paper's two changes, and nothing else).

To add an agent: write one module in this package with a config dataclass derived from
:class:`AgentConfig` and a class derived from :class:`Agent`, decorate the class with
``@register_agent("name", NameConfig)``, and add ``conf/agent/name.yaml``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, List, NamedTuple

import torch
from omegaconf import MISSING
from torch import Tensor, nn

from rs_lightning.risk import ReturnDistribution


class Transitions(NamedTuple):
    """A batch of transitions sampled from the replay memory."""

    obs: Tensor  # [B, obs_dim] float32
    action: Tensor  # [B] int64
    reward: Tensor  # [B] float32, already clipped
    next_obs: Tensor  # [B, obs_dim] float32
    terminated: Tensor  # [B] float32: 1 where no bootstrapping (terminal transition)


ChooseAction = Callable[[ReturnDistribution], Tensor]


@dataclass
class AgentConfig:
    """Fields every agent config has. Subclasses add the model's own settings.

    Fields have no defaults here: the values live in ``conf/agent/<name>.yaml``.
    """

    name: str = MISSING
    hidden_sizes: List[int] = MISSING

    def check(self) -> None:
        """Raise ``ValueError("key: what is allowed")`` for values out of range."""
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(
                f"agent.hidden_sizes: must be a non-empty list of positive sizes, got "
                f"{list(self.hidden_sizes)}"
            )


@dataclass(frozen=True)
class Problem:
    """What an agent needs to know of the environment and of the learning setting."""

    obs_dim: int
    n_actions: int
    gamma: float
    return_min: float
    return_max: float

    def check_return_support(self) -> None:
        """For agents whose representation lives on [return_min, return_max]."""
        if not self.return_max > self.return_min:
            raise ValueError(
                f"problem: return_max must exceed return_min, got "
                f"[{self.return_min}, {self.return_max}]"
            )


class Agent(nn.Module, ABC):
    """A distributional value network and its loss."""

    def __init__(self, config: AgentConfig, problem: Problem) -> None:
        config.check()
        super().__init__()
        self.config = config
        self.problem = problem

    @abstractmethod
    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """Z(s, a) for every action, in the common form: shape ``[B, A, K]``."""

    @abstractmethod
    def loss(
        self, batch: Transitions, target: "Agent", choose_action: ChooseAction
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The training loss on ``batch`` and extra metrics to log (detached scalars).

        ``target`` is the target network (same class, frozen); ``choose_action`` maps the
        target network's ``[B', A, K]`` distribution at next states to the target actions
        ``[B']``. An agent may pass only the rows it needs (``B' <= B``: e.g. UMDQN-C skips
        terminal transitions, whose target does not depend on the next state).
        """

    @torch.no_grad()
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        """The action maximising the utility in each state of ``obs`` -> ``[B]``."""
        return choose_action(self.return_distribution(obs))


def mlp(sizes: list[int], activate_last: bool = False) -> nn.Sequential:
    """Linear layers of the given sizes with ReLU between them."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2 or activate_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


AGENTS: dict[str, tuple[type[Agent], type[AgentConfig]]] = {}


def register_agent(name: str, config_class: type[AgentConfig]):
    """Class decorator: make ``agent=name`` build this class with ``config_class``."""

    def register(cls: type[Agent]) -> type[Agent]:
        if name in AGENTS:
            raise ValueError(f"agent {name!r} is registered twice")
        AGENTS[name] = (cls, config_class)
        return cls

    return register
