"""Distributional actor-critics for continuous actions: the critic learns the return law
Z(s, a), the actor maximises the utility U = alpha E + (1 - alpha) R_rho of that law.

The pieces, each a pure function tested against hand values (``tests/test_actor_critic.py``):

- the squashed Gaussian actor (:func:`squashed_gaussian`): u = mu(s) + sigma(s) xi with
  xi ~ N(0, I), the action a = tanh(u) in (-1, 1)^d, and its log-density by the change of
  variables, log pi(a | s) = log N(u; mu, sigma) - sum_i log(1 - tanh(u_i)^2), the
  correction written 2 (log 2 - u - softplus(-2u)) so that it stays finite where tanh
  saturates;
- C critics, each M quantiles of Z(s, a) at the midpoint fractions (2i + 1) / (2M), learnt by
  the quantile Huber loss against (:func:`critic_targets`)
  ``r + gamma^m (z_j(s', a') - temperature log pi(a' | s'))`` with a' ~ pi(. | s'): the
  actor's next action, and z_j the atoms of the target critics' law by the agent's rule
  (:meth:`ActorCritic.target_atoms`: TQC's truncated mixture, DSAC's pessimistic law);
- the actor minimises E[temperature log pi(a | s) - U(Z(s, a))], a ~ pi(. | s)
  reparameterised, U evaluated by the run's objective (``choose_action.utility_of``: the
  risk module, so every measure with a quantile form applies: VaR, CVaR, Wang, CPW, power,
  mean-variance, entropic) on the critics' law (:meth:`ActorCritic.actor_atoms`);
- the temperature: log(temperature) minimises -log(temperature) (log pi + H) with the target
  entropy H = -d by default (:func:`temperature_loss`).

Where the risk enters: the actor's objective only. The target's next action comes from the
actor, which maximises U, so the risk shapes the target through the policy it evaluates, as
the paper's risk-greedy target action does for a discrete agent; the target law is that
policy's (entropy-regularised) return law, so the critic estimates Z^pi and any measure can
be read from it afterwards (and a risk-conditioned actor reads it at every setting).

One loss, one optimizer, as every agent here: the three losses are summed; the actor's goes
through the critics with their parameters detached (``torch.func.functional_call``), so each
part's gradient reaches its own parameters only.

As the discrete agents show Z(s, a) of every action, these show the law of the one action
they take, Z(s, pi(s)) at the actor's mean action (``Problem.n_actions`` is 1): evaluations,
reports and the Python API read it as they read any agent's.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rs_lightning.agents.base import (
    ATOMS_WHY,
    MAX_ATOMS,
    MAX_CRITICS,
    MISSING,
    Agent,
    AgentConfig,
    ChooseAction,
    check_count,
    mlp,
)
from rs_lightning.agents.quantile_loss import (
    check_quantile_loss,
    huber_threshold,
    midpoint_fractions,
    quantile_huber_loss,
)
from rs_lightning.errors import ConfigError
from rs_lightning.risk import ReturnDistribution, from_quantiles
from rs_lightning.types import Problem, Transitions

# The actor's log standard deviation is kept in this range (a common choice for SAC: a
# collapsed or exploding sigma would make log pi non-finite).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def squashed_gaussian(mean: Tensor, log_std: Tensor, noise: Tensor) -> tuple[Tensor, Tensor]:
    """The action tanh(mean + exp(log_std) noise) ``[..., d]`` and its log-density under the
    squashed Gaussian ``[...]`` (module docstring)."""
    u = mean + log_std.exp() * noise
    # (u - mean) / sigma is the noise itself: the Gaussian's log-density needs no division.
    gaussian = (-0.5 * noise.square() - log_std - 0.5 * math.log(2.0 * math.pi)).sum(-1)
    log_jacobian = (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), gaussian - log_jacobian


def critic_targets(reward: Tensor, discount: Tensor, atoms: Tensor, next_log_prob: Tensor,
                   temperature: Tensor | float) -> Tensor:
    """The target samples r + gamma^m (z_j - temperature log pi(a' | s')) ``[..., B, n]``
    from ``reward[..., B]``, ``discount[..., B]`` (gamma^m, 0 where terminated), the next
    state-action's atoms ``[..., B, n]`` and ``next_log_prob[..., B]``; ``temperature``
    broadcasts against ``[..., B]``."""
    soft = atoms - (temperature * next_log_prob).unsqueeze(-1)
    return reward.unsqueeze(-1) + discount.unsqueeze(-1) * soft


def truncated_mixture(quantiles: Tensor, dropped_per_critic: int) -> Tensor:
    """TQC's target law: the C critics' M quantiles ``[..., C, M]`` pooled and sorted, less
    the C * ``dropped_per_critic`` largest -> ``[..., C * (M - dropped)]`` (ascending)."""
    critics, per_critic = quantiles.shape[-2:]
    pooled = quantiles.flatten(-2).sort(-1).values
    return pooled[..., :critics * (per_critic - dropped_per_critic)]


def pessimistic_quantiles(quantiles: Tensor) -> Tensor:
    """Quantile by quantile the smallest of the C critics' sorted quantiles ``[..., C, M]``
    -> ``[..., M]`` (ascending: a quantile function itself), the twin-critic guard against
    overestimation."""
    return quantiles.sort(-1).values.min(-2).values


def temperature_loss(log_temperature: Tensor, log_prob: Tensor, target_entropy: float) -> Tensor:
    """-log(temperature) (log pi + H), the batch mean ``[...]``: the temperature rises while
    the policy's entropy -log pi is below H and falls while above."""
    return -(log_temperature * (log_prob.detach() + target_entropy).mean(-1))


@dataclass
class ActorCriticConfig(AgentConfig):
    """Settings shared by the actor-critics (values in ``conf/agent/<name>.yaml``);
    ``hidden_sizes``: the actor's and each critic's MLP."""

    NETWORK_SIZES = ("hidden_sizes", "n_critics", "n_quantiles")
    n_critics: int = MISSING  # C
    n_quantiles: int = MISSING  # M per critic, at fractions (2i + 1) / (2M)
    kappa: Optional[float] = MISSING  # Huber threshold (null: share of the return support)
    initial_temperature: float = MISSING  # the entropy temperature's start
    target_entropy: Optional[float] = MISSING  # H; null: -d (minus the action dimension)

    def check(self) -> None:
        super().check()
        check_quantile_loss(self.n_quantiles, self.kappa)
        check_count("n_critics", self.n_critics, 1, MAX_CRITICS,
                    "each critic is a network evaluated after the other")
        if self.n_critics * self.n_quantiles > MAX_ATOMS:
            raise ValueError(f"agent.n_quantiles: the critics' pooled atoms, n_critics x "
                             f"n_quantiles = {self.n_critics} x {self.n_quantiles}, must be at "
                             f"most {MAX_ATOMS} ({ATOMS_WHY}), got {self.n_quantiles}")
        if not (math.isfinite(self.initial_temperature) and self.initial_temperature > 0):
            raise ValueError(f"agent.initial_temperature: must be a positive number, got "
                             f"{self.initial_temperature}")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            raise ValueError(f"agent.target_entropy: must be a number or null (-d), got "
                             f"{self.target_entropy}")


class Critics(nn.Module):
    """C quantile critics of a state-action pair: ``(obs[..., D], action[..., d])`` ->
    ``[..., C, M]`` (unsorted)."""

    def __init__(self, problem: Problem, config: ActorCriticConfig) -> None:
        super().__init__()
        sizes = [problem.obs_dim + problem.action_dim, *config.hidden_sizes, config.n_quantiles]
        self.critics = nn.ModuleList(mlp(sizes) for _ in range(config.n_critics))

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        x = torch.cat([obs, action], dim=-1)
        return torch.stack([critic(x) for critic in self.critics], dim=-2)


class ActorCritic(Agent):
    """The shared actor-critic (module docstring); a subclass says how the critics' atoms
    make the target law and the law the actor maximises U of."""

    config: ActorCriticConfig
    # The loss's actions are drawn from a generator of the agent's own (one per member when
    # stacked, part of its state), so stacked members draw what each seed's run alone draws.
    supports_members = True
    continuous_actions = True
    compiled_methods = ("loss_given_noise", "return_distribution")

    def __init__(self, config: ActorCriticConfig, problem: Problem) -> None:
        super().__init__(config, problem)
        if not problem.continuous:
            raise ValueError(f"agent.name: {config.name} acts in a continuous box, and this "
                             f"environment has {problem.n_actions} discrete actions")
        if config.network is not None and config.network.name != "mlp":
            raise ConfigError("network.name", f"agent={config.name} reads flat observations "
                              f"(network=mlp), got {config.network.name!r}")
        d = problem.action_dim
        self.actor = mlp([problem.obs_dim, *config.hidden_sizes, 2 * d])
        self.critics = Critics(problem, config)
        self.log_temperature = nn.Parameter(torch.tensor(math.log(config.initial_temperature)))
        self.target_entropy = (-float(d) if config.target_entropy is None
                               else float(config.target_entropy))
        self.register_buffer("fractions", midpoint_fractions(config.n_quantiles),
                             persistent=False)
        self.kappa = huber_threshold(config.kappa, problem)
        # Seeded from the global generator after the weights, so that they are those drawn
        # after seeding it (build_members seeds it with the member's seed).
        seed = int(torch.randint(2**62, (), dtype=torch.int64, device="cpu"))
        self.noise_generators = [torch.Generator().manual_seed(seed)]

    # ------------------------------------------------------------------ the laws
    @abstractmethod
    def target_atoms(self, quantiles: Tensor) -> Tensor:
        """The target critics' quantiles ``[..., C, M]`` -> the atoms of the target law
        ``[..., n]``, ascending."""

    @abstractmethod
    def actor_atoms(self, quantiles: Tensor) -> Tensor:
        """The critics' quantiles ``[..., C, M]`` -> the equally weighted atoms of the law
        whose utility the actor maximises ``[..., n]``."""

    def action_law(self, obs: Tensor, action: Tensor) -> ReturnDistribution:
        """Z(s, a) of given actions as the actor sees it: ``[..., B, 1, n]``."""
        law = from_quantiles(self.actor_atoms(self.critics(obs, action)))
        return ReturnDistribution(law.values.unsqueeze(-2), law.probs.unsqueeze(-2))

    def left_out_of_target(self) -> list[nn.Module | nn.Parameter]:
        # The target law reads the target critics only; the next action is the actor's own.
        return [self.actor, self.log_temperature]

    # --------------------------------------------------------------- the actor
    def policy(self, obs: Tensor, noise: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The actor's action ``[..., B, d]`` and its log-density ``[..., B]``; ``noise``
        None: the mean action tanh(mu(s)) (no density)."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        if noise is None:
            return torch.tanh(mean), None
        return squashed_gaussian(mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), noise)

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """Z(s, pi(s)) at the mean action: ``[..., B, 1, n]`` (one action, the agent's)."""
        return self.action_law(obs, self.policy(obs, None)[0])

    @torch.no_grad()
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        """The mean action tanh(mu(s)) ``[..., B, d]``: the actor maximised U already (a
        risk-conditioned actor sees the setting in ``obs``)."""
        return self.policy(obs, None)[0]

    @torch.no_grad()
    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        return self.policy(obs, noise)[0]

    def _noise(self, obs: Tensor) -> Tensor:
        """Standard normal noise ``[..., B, d]`` for the states ``obs[..., B, D]``: member k's
        rows from member k's generator (drawn on the CPU, so that every device draws the
        same numbers)."""
        shape = (obs.shape[-2], self.problem.action_dim)
        draws = [torch.randn(shape, generator=g) for g in self.noise_generators]
        noise = draws[0] if self.members is None else torch.stack(draws)
        return noise.to(obs.device)

    def get_extra_state(self) -> Tensor:
        """The noise generators' states: ``[S]``, or ``[K, S]`` for K stacked members (a
        tensor, so that member k's is a slice, as its parameters are)."""
        states = [g.get_state() for g in self.noise_generators]
        return states[0] if self.members is None else torch.stack(states)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # A checkpoint written before the agents kept their noise generator has none: the
        # weights load, and the loss's draws go on from this agent's own generator.
        state_dict.setdefault(f"{prefix}_extra_state", self.get_extra_state())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_extra_state(self, state: Tensor) -> None:
        rows = [state] if state.dim() == 1 else list(state)
        self.noise_generators = [torch.Generator() for _ in rows]
        for generator, row in zip(self.noise_generators, rows):
            # A copy of its own: torch 2.13's set_state crashes the process on a row of a
            # larger tensor (a view with a storage offset).
            generator.set_state(row.cpu().clone())

    # ---------------------------------------------------------------- the loss
    def loss(self, batch: Transitions, target: Agent, choose_action: ChooseAction
             ) -> tuple[Tensor, dict[str, Tensor]]:
        assert isinstance(target, ActorCritic)
        # The draws first (the next states' sample, then the states'), so that what is left
        # is one graph when compiled: the members' generators do not trace.
        next_noise, noise = self._noise(batch.next_obs), self._noise(batch.obs)
        return self.loss_given_noise(batch, target, choose_action, next_noise, noise)

    def loss_given_noise(self, batch: Transitions, target: "ActorCritic",
                         choose_action: ChooseAction, next_noise: Tensor, noise: Tensor
                         ) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`loss` with the actor's standard normal draws at the next states and at the
        states given (what ``hardware.compile`` compiles)."""
        # One temperature per member ([] or [K]), against the batch rows [..., B].
        temperature = self.log_temperature.exp().detach().unsqueeze(-1)

        # The critics: quantile regression on the target with the actor's next action.
        with torch.no_grad():
            next_action, next_log_prob = self.policy(batch.next_obs, next_noise)
            atoms = self.target_atoms(target.critics(batch.next_obs, next_action))
            targets = critic_targets(batch.reward, batch.discount, atoms, next_log_prob,
                                     temperature)
        quantiles = self.critics(batch.obs, batch.action)  # [..., B, C, M]
        targets = targets.unsqueeze(-2).expand(*quantiles.shape[:-1], -1).contiguous()
        critic_loss = quantile_huber_loss(quantiles, self.fractions, targets, self.kappa,
                                          targets_sorted=True).sum(-1).mean(-1)

        # The actor: U of the critics' law at its own sample, less the entropy bonus; the
        # critics' parameters are constants here.
        action, log_prob = self.policy(batch.obs, noise)
        frozen = {name: p.detach() for name, p in self.critics.named_parameters()}
        critic_quantiles = torch.func.functional_call(self.critics, frozen, (batch.obs, action))
        law = from_quantiles(self.actor_atoms(critic_quantiles))
        utility = choose_action.utility_of(ReturnDistribution(
            law.values.unsqueeze(-2), law.probs.unsqueeze(-2))).squeeze(-1)  # [..., B]
        actor_loss = (temperature * log_prob - utility).mean(-1)

        alpha_loss = temperature_loss(self.log_temperature, log_prob, self.target_entropy)
        metrics = {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "temperature": temperature.squeeze(-1),
            "entropy": -log_prob.detach().mean(-1),
            "utility": utility.detach().mean(-1),
        }
        return critic_loss + actor_loss + alpha_loss, metrics
