"""The behaviour policy the collector owns: the members, the objective's acting rule and
an exploration rule with one generator per member (:class:`BehaviourPolicy`): epsilon-greedy
on the objective's rule for discrete actions (:class:`EpsilonGreedy`), the actor's own
sample for continuous ones (:class:`ActorSampling`), an on-policy agent's own draw
(:class:`PolicyNoise`, which also gives the collector each action's log-probability and the
critic's atoms).

Copy i of member k at environment step t acts with the epsilon of step t + i and draws from
member k's generator in the order of i (a uniform, then an action where it explores), so a
member with N copies acts as N steps of one environment would, and member k as the run of
its seed alone. The greedy actions of all members and copies come from one forward pass.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from torch import Tensor

from rs_lightning.agents.members import Members
from rs_lightning.objectives import EpisodeState, Objective
from rs_lightning.risk import ReturnDistribution
from rs_lightning.types import PolicySample


def exploration_rate(env_step: int, start: float, end: float, decay: float, schedule: str) -> float:
    """epsilon after ``env_step`` environment steps.

    ``exponential``: end + (start - end) * exp(-t / decay) (the authors' schedule);
    ``linear``: from start to end over ``decay`` steps, then constant.
    """
    if schedule == "exponential":
        return end + (start - end) * math.exp(-env_step / decay)
    return end + (start - end) * max(0.0, 1.0 - env_step / decay)


class MemberExploration:
    """What a behaviour policy keeps: one exploration generator per member (seeded
    ``seed + 2``) and the share of random actions it last took (``epsilon``), checkpointed
    per member."""

    def __init__(self, seeds: list[int], epsilon: float) -> None:
        self.generators = [np.random.default_rng(seed + 2) for seed in seeds]
        self.epsilon = epsilon

    def state_dict(self, members: list[int] | None = None) -> dict[str, Any]:
        chosen = range(len(self.generators)) if members is None else members
        return {"generators": [self.generators[k].bit_generator.state for k in chosen],
                "epsilon": self.epsilon}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["generators"]) != len(self.generators):
            raise ValueError("the checkpoint's exploration state is of another number of members")
        for generator, generator_state in zip(self.generators, state["generators"]):
            generator.bit_generator.state = generator_state
        self.epsilon = state["epsilon"]


class EpsilonGreedy(MemberExploration):
    """Epsilon-greedy actions ``[K, N]`` for the observations ``[K, N, ...]`` of K members'
    N copies (NumPy arrays; module docstring). ``learning`` holds the schedule
    (``epsilon_*`` keys)."""

    explores_by_epsilon = True  # the training logs and the progress line show epsilon

    def __init__(self, seeds: list[int], n_actions: int, learning) -> None:
        super().__init__(seeds, learning.epsilon_start)
        self.n_actions = n_actions
        self.learning = learning

    def rate(self, env_step: int) -> float:
        cfg = self.learning
        return exploration_rate(env_step, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay,
                                cfg.epsilon_schedule)

    def __call__(self, obs: np.ndarray, env_step: int, policy: Callable[..., np.ndarray]
                 ) -> np.ndarray:
        """``policy(obs[K, N, ...]) -> [K, N]``, the greedy actions, is called once, if any
        copy acts greedily."""
        copies = obs.shape[1]
        rates = [self.rate(env_step + i) for i in range(copies)]
        self.epsilon = rates[-1]
        explored: list[tuple[int, int, int]] = []  # (member, copy, random action)
        for k, generator in enumerate(self.generators):
            for i, epsilon in enumerate(rates):
                if generator.random() < epsilon:
                    explored.append((k, i, int(generator.integers(self.n_actions))))
        if len(explored) == obs.shape[0] * copies:  # nobody acts greedily: no forward pass
            actions = np.empty(obs.shape[:2], dtype=np.int64)
        else:
            actions = np.array(policy(obs), dtype=np.int64, copy=True)
        for k, i, action in explored:
            actions[k, i] = action
        return actions


class ActorSampling(MemberExploration):
    """Continuous actions ``[K, N, d]`` in [-1, 1]^d: uniform draws during the warm-up (the
    first ``learning.warmup_steps`` environment steps, before any update, as SAC's
    random start), then the actor's own sample, ``policy(obs, noise)``, whose standard
    normal ``noise[K, N, d]`` is drawn from member k's generator in the order of its
    copies (so a member acts as a run of its seed alone, and a resume repeats the draws).
    ``epsilon`` reads 1 while the actions are uniform, 0 after: no exploration rate, so it
    is neither logged nor shown."""

    explores_by_epsilon = False

    def __init__(self, seeds: list[int], action_dim: int, learning) -> None:
        super().__init__(seeds, 1.0)
        self.action_dim = action_dim
        self.warmup_steps = learning.warmup_steps

    def __call__(self, obs: np.ndarray, env_step: int, policy: Callable[..., np.ndarray]
                 ) -> np.ndarray:
        shape = (obs.shape[1], self.action_dim)
        if env_step < self.warmup_steps:
            self.epsilon = 1.0
            return np.stack([g.uniform(-1.0, 1.0, shape) for g in self.generators]
                            ).astype(np.float32)
        self.epsilon = 0.0
        noise = np.stack([g.standard_normal(shape) for g in self.generators]).astype(np.float32)
        return np.asarray(policy(obs, noise), dtype=np.float32)


class PolicyNoise(MemberExploration):
    """An on-policy agent's draw: the noise its :meth:`~rs_lightning.agents.on_policy.
    OnPolicyAgent.sample` turns into actions, ``[K, N, 1]`` uniform in [0, 1) for discrete
    actions, ``[K, N, d]`` standard normal for continuous ones, member k's rows from its own
    generator in the order of its copies. No exploration rate (``epsilon`` 0)."""

    explores_by_epsilon = False

    def __init__(self, seeds: list[int], action_dim: int) -> None:
        super().__init__(seeds, 0.0)
        self.action_dim = action_dim

    def noise(self, copies: int) -> np.ndarray:
        if self.action_dim == 0:
            return np.stack([g.random((copies, 1)) for g in self.generators]).astype(np.float32)
        return np.stack([g.standard_normal((copies, self.action_dim))
                         for g in self.generators]).astype(np.float32)


def make_exploration(seeds: list[int], problem, learning, on_policy: bool = False
                     ) -> MemberExploration:
    """The exploration rule of a problem's actions (module docstring)."""
    if on_policy:
        return PolicyNoise(seeds, problem.action_dim)
    if problem.continuous:
        return ActorSampling(seeds, problem.action_dim, learning)
    return EpsilonGreedy(seeds, problem.n_actions, learning)


class Draw(NamedTuple):
    """What the behaviour policy decided for the copies' observations ``[K, N, D']``."""

    actions: np.ndarray  # [K, N] (continuous: [K, N, d]), what the copies are stepped with
    inputs: Tensor | None = None  # [K, N, D''] the network's input (on-policy: stored)
    sample: PolicySample | None = None  # on-policy: as sampled, log-probabilities, critic atoms


class BehaviourPolicy:
    """The members acting on the objective's rule with an exploration rule: what the
    collector is handed, and all it calls (nothing of the LightningModule). It holds the
    members (the objects the learner updates), so it acts with the current weights on their
    device."""

    def __init__(self, members: Members, objective: Objective,
                 exploration: MemberExploration) -> None:
        self.members = members
        self.objective = objective
        self.exploration = exploration

    @property
    def device(self) -> torch.device:
        # The members' listed parameters stay the same objects when the module moves.
        return self.members.parameter_list()[0].device

    @torch.no_grad()
    def network(self, obs: Tensor) -> ReturnDistribution:
        """The members' Z of observations ``[K, B, D']`` (an episode state's start rule)."""
        return self.members.return_distribution(obs)

    def _inputs(self, obs: np.ndarray, state: EpisodeState):
        obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32))
        device = self.device
        if device.type != "cpu":
            obs_t = obs_t.to(device)
        return self.objective.acting_rule(obs_t, state, self.network)

    def act(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> np.ndarray:
        """Actions ``[K, N]`` (continuous: ``[K, N, d]``) for ``obs[K, N, ...]`` after
        ``env_step`` environment steps of each member: epsilon-greedy, or the actor's sample;
        every member and copy in one forward pass, without gradients."""
        return self.exploration(obs, env_step, lambda o, noise=None: self._policy(o, state, noise))

    def draw(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> Draw:
        return Draw(self.act(obs, env_step, state))

    @torch.no_grad()
    def _policy(self, obs: np.ndarray, state: EpisodeState, noise: np.ndarray | None
                ) -> np.ndarray:
        """The greedy actions (``noise`` None), or an actor's sample with ``noise``."""
        inputs, choose_action = self._inputs(obs, state)
        if noise is None:
            return self.members.greedy_action(inputs, choose_action).cpu().numpy()
        return self.members.sample_action(inputs, torch.from_numpy(noise).to(inputs.device)
                                          ).cpu().numpy()


class OnPolicyBehaviour(BehaviourPolicy):
    """On-policy members drawing from their own policy (:class:`PolicyNoise`): besides the
    actions, what a rollout keeps of each step (the network's input, the log-probability of
    the action drawn and the critic's atoms)."""

    exploration: PolicyNoise

    @torch.no_grad()
    def draw(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> Draw:
        inputs, _ = self._inputs(obs, state)
        noise = torch.from_numpy(self.exploration.noise(obs.shape[1])).to(inputs.device)
        sample = self.members.sample(inputs, noise)
        actions = sample.action
        if actions.is_floating_point():  # the box the copies take; stored as drawn
            actions = actions.clamp(-1.0, 1.0)
        return Draw(actions.cpu().numpy(), inputs, sample)

    def act(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> np.ndarray:
        return self.draw(obs, env_step, state).actions

    @torch.no_grad()
    def bootstrap(self, reached: np.ndarray, state: EpisodeState) -> Tensor:
        """The critic's atoms ``[K, R, n]`` of the states ``reached[K, R, D']`` the copies
        reached (as :meth:`~rs_lightning.engine.rollout.Rollout.observe` shows states: the
        episode state's features appended), for a rollout's bootstrap."""
        inputs, _ = self._inputs(reached, state)
        return self.members.return_distribution(inputs).values[..., 0, :]


def make_behaviour(members: Members, objective: Objective, seeds: list[int], learning
                   ) -> BehaviourPolicy:
    """The behaviour policy of a run's members (module docstring)."""
    on_policy = members.networks()[0].on_policy
    exploration = make_exploration(seeds, members.problem, learning, on_policy)
    return (OnPolicyBehaviour if on_policy else BehaviourPolicy)(members, objective, exploration)
