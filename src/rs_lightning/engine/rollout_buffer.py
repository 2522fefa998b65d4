"""The rollout side of the collector (:class:`~rs_lightning.engine.experience.Buffer`): fixed-
length rollouts of K members' N environment copies x T steps, then epochs over shuffled
minibatches of them.

Each step of the copies stores, per member and copy, what the policy saw (the network's
input), the action as drawn, its log-probability and the critic's atoms, the learning
reward and how the step ended. After the T-th step the rollout is closed: the critic values
the states where a return is bootstrapped (the state each copy stopped in, and the last
state of every episode a time limit cut), generalised advantage estimation runs over the
rollout (:func:`~rs_lightning.agents.on_policy.generalized_advantages`, on the critic's
mean), and the N x T steps are served ``epochs`` times, each pass in ``minibatches``
minibatches of a fresh permutation drawn from the member's own generator (seeded
``seed + 1``), so that member k is served what a run of its seed alone is served. The next
rollout starts after the last minibatch.

The whole buffer is part of the checkpoint (the steps, the permutation of the pass under
way, how many minibatches were served and the generators): a run resumed after any update,
or from a SIGTERM in the middle of a rollout's collection, goes on exactly as the
uninterrupted one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from rs_lightning.agents.on_policy import generalized_advantages
from rs_lightning.types import RolloutBatch

# What a rollout stores at every step ([T, K, N, ...] each), then what closing it adds.
STEP_FIELDS = ("obs", "action", "log_prob", "value", "reward", "terminated", "truncated")
FIELDS = RolloutBatch._fields


class RolloutBuffer:
    """Rollouts of ``len(seeds)`` members' ``copies`` copies x ``steps`` steps (module
    docstring).

    Args:
        critic: the critic's atoms ``[K, R, n]`` of the states ``reached[K, R, D']`` as the
            copies showed them (the behaviour policy's, at the episode state's features):
            the bootstrap of the rollout's last states and of truncated episodes.
    """

    def __init__(self, seeds: Sequence[int], copies: int, steps: int, epochs: int,
                 minibatches: int, gamma: float, gae_lambda: float,
                 critic: Callable[[np.ndarray], Tensor]) -> None:
        if (copies * steps) % minibatches:
            raise ValueError(f"{minibatches} minibatches do not divide a rollout of "
                             f"{copies} x {steps} steps")
        self.members = len(seeds)
        self.copies = copies
        self.steps = steps
        self.epochs = epochs
        self.minibatches = minibatches
        self.minibatch_size = copies * steps // minibatches
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.critic = critic
        self.generators = [torch.Generator().manual_seed(int(seed) + 1) for seed in seeds]
        self.data: dict[str, Tensor] = {}  # allocated at the first step (shapes known then)
        self.reached: np.ndarray | None = None  # [T, K, N, D'] the states each step reached
        self.stored = 0  # steps of the rollout under collection
        self.served = 0  # minibatches served of the closed rollout
        self.ready = False  # a closed rollout is being served
        self.order = torch.zeros(self.members, 0, dtype=torch.long)  # the pass's permutation

    def __len__(self) -> int:
        """Steps held per member (N x T once the first rollout is closed)."""
        return self.copies * (self.steps if self.ready else self.stored)

    def needs_steps(self, env_steps: int) -> bool:
        """Whether the copies step before the next update: until a rollout is closed."""
        return not self.ready

    def _allocate(self, draw, reached: np.ndarray) -> None:
        T, K, N = self.steps, self.members, self.copies
        sample = draw.sample
        shapes = {
            "obs": (draw.inputs.shape[-1],), "action": tuple(sample.action.shape[2:]),
            "log_prob": (), "value": (sample.value.shape[-1],), "reward": (),
            "terminated": (), "truncated": (), "advantage": (), "returns": (),
        }
        self.data = {name: torch.zeros(T, K, N, *shapes[name],
                                       dtype=sample.action.dtype if name == "action"
                                       else torch.float32)
                     for name in FIELDS}
        self.reached = np.zeros((T, K, N, *reached.shape[1:]), dtype=np.float32)

    def store(self, step, draw, env_steps: int) -> None:
        """One step of every copy (a :class:`~rs_lightning.engine.rollout.RolloutStep` and
        the behaviour policy's :class:`~rs_lightning.engine.behaviour.Draw`); the T-th
        closes the rollout."""
        if not self.data:
            self._allocate(draw, step.reached)
        t, shape = self.stored, (self.members, self.copies)
        copies = step.copies
        row = {
            "obs": draw.inputs, "action": draw.sample.action, "log_prob": draw.sample.log_prob,
            "value": draw.sample.value, "reward": torch.from_numpy(step.learnt.reshape(shape)),
            "terminated": torch.from_numpy(copies.terminated.reshape(shape)),
            "truncated": torch.from_numpy((copies.ended & ~copies.terminated).reshape(shape)),
        }
        for name, value in row.items():
            self.data[name][t] = value.to("cpu", self.data[name].dtype)
        self.reached[t] = step.reached.reshape(*shape, *step.reached.shape[1:])
        self.stored += 1
        if self.stored == self.steps:
            self._close()

    def _close(self) -> None:
        """Bootstrap, advantages, and the first pass's permutation."""
        data = self.data
        T, K, N = self.steps, self.members, self.copies
        # The critic's mean at every state reached: one pass over the rollout (used where a
        # step ended by a time limit, and at the last step; elsewhere the next step's value).
        reached = self.reached.transpose(1, 0, 2, *range(3, self.reached.ndim))
        atoms = self.critic(reached.reshape(K, T * N, *reached.shape[3:]))
        bootstrap = atoms.mean(-1).to("cpu", torch.float32).view(K, T, N).transpose(0, 1)
        value = data["value"].mean(-1)  # [T, K, N]
        ended = data["terminated"] + data["truncated"]
        next_value = bootstrap.clone()
        follows = ended[:-1] == 0  # the next step continues the episode: its own value
        next_value[:-1] = torch.where(follows, value[1:], bootstrap[:-1])
        advantage, returns = generalized_advantages(
            data["reward"], value, next_value, data["terminated"], ended, self.gamma,
            self.gae_lambda)
        data["advantage"].copy_(advantage)
        data["returns"].copy_(returns)
        self.stored, self.served, self.ready = 0, 0, True

    def next_batch(self, env_steps: int) -> tuple[RolloutBatch, int]:
        """The next minibatch of every member ``[K, B, ...]`` and the environment step it
        follows (every step collected)."""
        if self.served % self.minibatches == 0:  # a new pass: a new permutation per member
            self.order = torch.stack([torch.randperm(self.copies * self.steps, generator=g)
                                      for g in self.generators])
        first = (self.served % self.minibatches) * self.minibatch_size
        index = self.order[:, first:first + self.minibatch_size]  # [K, B] of N x T steps
        batch = RolloutBatch(*(self._gather(self.data[name], index) for name in FIELDS))
        self.served += 1
        if self.served == self.epochs * self.minibatches:
            self.ready = False  # the next update asks for a new rollout
        return batch, env_steps

    def _gather(self, field: Tensor, index: Tensor) -> Tensor:
        """Rows ``index[K, B]`` (into each member's T x N steps, time first) of ``field``
        ``[T, K, N, ...]`` -> ``[K, B, ...]``."""
        members = field.transpose(0, 1).reshape(self.members, self.steps * self.copies,
                                                 *field.shape[3:])
        return torch.stack([members[k].index_select(0, index[k]) for k in range(self.members)])

    def rewards(self) -> Tensor:
        """The learning rewards held ``[K, steps]``."""
        if not self.data:
            return torch.zeros(self.members, 0)
        held = self.steps if self.ready else self.stored
        return self.data["reward"][:held].transpose(0, 1).reshape(self.members, -1)

    def truncate(self, reached: np.ndarray) -> None:
        """The copies' episodes restarted (a resume of copies whose state a checkpoint cannot
        hold): in a rollout stopped half collected (a SIGTERM between two steps), the last
        step of every episode in progress is cut as by a time limit, bootstrapped from the
        state it reached."""
        if not self.data or self.stored == 0:
            return
        last = self.stored - 1
        open_episodes = (self.data["terminated"][last] + self.data["truncated"][last]) == 0
        self.data["truncated"][last][open_episodes] = 1.0

    def state_dict(self, members: Sequence[int], copies: Sequence[int]) -> dict[str, Any]:
        chosen = list(members)
        return {
            "rollout": {
                "steps": self.steps, "epochs": self.epochs, "minibatches": self.minibatches,
                "stored": self.stored, "served": self.served, "ready": self.ready,
                "order": self.order[chosen].clone(),
                "generators": [self.generators[k].get_state() for k in chosen],
                "data": {name: value[:, chosen].clone() for name, value in self.data.items()},
                "reached": (None if self.reached is None
                            else torch.from_numpy(self.reached[:, chosen].copy())),
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["rollout"]
        if (saved["steps"], saved["epochs"], saved["minibatches"]) != (
                self.steps, self.epochs, self.minibatches):
            raise ValueError("the checkpoint's rollouts are of another agent.rollout_steps, "
                             "agent.epochs or agent.minibatches")
        self.stored, self.served, self.ready = saved["stored"], saved["served"], saved["ready"]
        self.order = saved["order"].clone()
        for generator, generator_state in zip(self.generators, saved["generators"], strict=True):
            generator.set_state(generator_state)
        self.data = {name: value.clone() for name, value in saved["data"].items()}
        self.reached = None if saved["reached"] is None else saved["reached"].numpy().copy()
