"""K agents of one class and config (seeds) as one: the members the engine trains together.

Every input of a :class:`Members` carries a leading member dimension (``obs[K, B, ...]``,
batch fields ``[K, B, ...]``) and so does every output (distributions ``[K, B, A, n]``,
actions ``[K, B]``, losses ``[K]``). Member k is an ordinary agent of its own (its initial
weights, its replay batch, its gradient clipped by its own norm; Adam's update is
elementwise), so member k follows the algorithm of a run of that seed alone.

Two ways to hold the members, one interface:

- :class:`StackedMembers` for agents with ``supports_members`` when K > 1: one network whose
  every parameter has a leading dimension K (:func:`stack_members`), one batched forward and
  backward pass for all members (on a CPU the same numbers as K separate networks, to the
  bit, for the layers of ``agents/base.py``, with the update's elementwise steps taken
  through :meth:`Members.elementwise_views`);
- :class:`LoopedMembers` otherwise: the K agents run one after the other. K = 1 always runs
  this way, so a single seed computes exactly what one plain agent computes.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from rs_lightning.agents.base import Agent, ChooseAction, rows_of
from rs_lightning.risk import ReturnDistribution
from rs_lightning.types import PolicySample, Problem, RolloutBatch, Transitions


def stack_members(agents: list[Agent]) -> Agent:
    """One agent holding ``agents`` (same class and config) as K stacked members.

    Every parameter becomes ``[K, *shape]``; buffers (fixed grids) are shared; an agent's
    extra state (a tensor: an actor-critic's noise generator) becomes ``[K, *shape]`` too.
    """
    first = agents[0]
    if not first.supports_members:
        raise ValueError(f"agent {first.config.name!r} cannot run stacked members")
    stacked = copy.deepcopy(first)
    members = [dict(agent.named_parameters()) for agent in agents]
    for name, _ in first.named_parameters():
        module_name, _, attribute = name.rpartition(".")
        module = stacked.get_submodule(module_name)
        value = torch.stack([parameters[name].detach() for parameters in members])
        setattr(module, attribute, nn.Parameter(value))
    stacked.members = len(agents)
    if _has_extra_state(first):
        stacked.set_extra_state(torch.stack([agent.get_extra_state() for agent in agents]))
    return stacked


def _has_extra_state(agent: Agent) -> bool:
    return type(agent).get_extra_state is not nn.Module.get_extra_state


def member_state(stacked: Agent, k: int) -> dict[str, Tensor]:
    """Member ``k`` of a stacked agent as the state dict of an ordinary agent."""
    state = stacked.state_dict()
    # Parameters and the extra state are per member; buffers are shared.
    stacked_names = {name for name, _ in stacked.named_parameters()}
    stacked_names |= {name for name in state if name.endswith("_extra_state")}
    return {
        name: (value[k] if name in stacked_names else value).clone()
        for name, value in state.items()
    }


def clip_member_gradients(parameters: list[Tensor], max_norm: float) -> Tensor:
    """Scale each member's gradient (index k of every stacked parameter) to norm at most
    ``max_norm``, as ``clip_grad_norm_`` does for one network; returns the K norms."""
    grads = [p.grad for p in parameters if p.grad is not None]
    # Member k's tensor norms as row k ([K, P]), reduced along the row: the order of the sums
    # of a single run's norm (a reduction across rows, dim 0 of [P, K], rounds otherwise).
    norms = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.reshape(len(g), -1), dim=1) for g in grads], dim=1),
        dim=1,
    )
    scale = clip_scale(norms, max_norm)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


# Elements a CPU kernel's vector loop takes at a time, at most (two AVX-512 vectors of
# float32); a tensor's last elements short of it go one by one, and rounding may differ
# there (a fused multiply-add in the vector loop, a multiply then an add in the scalar one).
VECTOR_SPAN = 64


def member_views(tensors: list[Tensor], members: int) -> list[Tensor]:
    """Stacked tensors ``[K, ...]`` as an elementwise kernel (Adam, Polyak averaging) should
    see them for member k to meet the loops a tensor of its own meets on a CPU: whole where a
    member's slice is a multiple of :data:`VECTOR_SPAN` elements (every element in a vector
    loop either way), else as the K slices (each with its own last elements)."""
    views: list[Tensor] = []
    for tensor in tensors:
        if tensor.device.type != "cpu" or (tensor.numel() // members) % VECTOR_SPAN == 0:
            views.append(tensor)
        else:
            views.extend(tensor.unbind(0))
    return views


def clip_scale(norm: Tensor, max_norm: float) -> Tensor:
    """The factor ``clip_grad_norm_`` scales a gradient of norm ``norm`` by:
    ``max_norm / (norm + 1e-6)``, at most 1 (elementwise for K members' norms)."""
    return (max_norm / (norm + 1e-6)).clamp_(max=1.0)


class FlatGradients:
    """One agent's gradients as views of one flat tensor, so that zeroing them is one
    operation and clipping them skips the per-call work of ``clip_grad_norm_`` (about a
    sixth of a DQN update on a CPU), with the same numbers to the last bit: the same norms
    of each tensor, their norm, and the same scale (:func:`clip_scale`).

    The buffer is made at the first clipping where every parameter has a gradient (until
    then, and for an agent whose loss leaves a parameter out, it is ``clip_grad_norm_`` as
    usual). Backward adds into a gradient that exists, so the views stay the gradients: a
    loss that left a parameter out only now and then would give it a zero gradient where
    ``zero_grad(set_to_none=True)`` leaves none, and Adam moves a parameter with a zero
    gradient by its momentum. Every agent here uses all its parameters in every loss.
    """

    def __init__(self, parameters: list[nn.Parameter]) -> None:
        self.parameters = parameters
        self.flat: Tensor | None = None
        self.views: list[Tensor] = []
        self.pointers: list[int] = []  # where each view's data starts

    def zero(self) -> None:
        """Zero the gradients (without a buffer: drop them, as set_to_none does)."""
        if self.flat is not None and not self._holds_gradients():
            self.flat, self.views, self.pointers = None, [], []  # a new one at the next clipping
        if self.flat is None:
            for p in self.parameters:
                p.grad = None
            return
        self.flat.zero_()
        for p, view in zip(self.parameters, self.views):
            if p.grad is not view:  # dropped by a skipped update: attach it again
                p.grad = view

    def _holds_gradients(self) -> bool:
        """Whether the buffer still holds the parameters' gradients: moving a module
        (``module.to``) replaces the data of its parameters and of their gradients."""
        first = self.parameters[0]
        return ((first.device, first.dtype) == (self.flat.device, self.flat.dtype)
                and all(view.data_ptr() == pointer
                        for view, pointer in zip(self.views, self.pointers)))

    def clip(self, max_norm: float) -> Tensor:
        """Scale the gradient to norm at most ``max_norm``; returns its norm (a 0-d tensor)."""
        if self.flat is None and not self._adopt():
            return torch.nn.utils.clip_grad_norm_(self.parameters, max_norm, foreach=True)
        # The per-tensor norms as clip_grad_norm_ takes them (one foreach call).
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(self.views)))
        self.flat.mul_(clip_scale(norm, max_norm))
        return norm

    def _adopt(self) -> bool:
        """Move the current gradients into one buffer, if every parameter has one of a
        common dtype and device."""
        grads = [p.grad for p in self.parameters]
        if any(g is None for g in grads) or len({(g.dtype, g.device) for g in grads}) != 1:
            return False
        self.flat = torch.cat([g.reshape(-1) for g in grads])
        self.views = [view.view_as(p) for p, view in
                      zip(self.parameters, self.flat.split([p.numel() for p in self.parameters]))]
        self.pointers = [view.data_ptr() for view in self.views]
        for p, view in zip(self.parameters, self.views):
            p.grad = view
        return True


class Members(nn.Module, ABC):
    """K agents of one class with a leading member dimension on every tensor (module
    docstring)."""

    def __init__(self, count: int, problem: Problem, config) -> None:
        super().__init__()
        self.count = count
        self.problem = problem
        self.config = config
        self._listed_parameters: list[nn.Parameter] | None = None  # parameter_list()

    @abstractmethod
    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """Z(s, a) of every member: ``obs[K, B, ...]`` -> ``[K, B, A, n]``."""

    @abstractmethod
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        """Each member's utility-greedy action: ``obs[K, B, ...]`` -> ``[K, B]``."""

    @abstractmethod
    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        """Each member's exploratory continuous action, an actor's sample with standard
        normal ``noise[K, B, d]``: ``obs[K, B, ...]`` -> ``[K, B, d]``."""

    @abstractmethod
    def sample(self, obs: Tensor, noise: Tensor) -> PolicySample:
        """Each on-policy member's draw (:meth:`~rs_lightning.agents.on_policy.OnPolicyAgent.
        sample`): ``obs[K, B, ...]``, ``noise[K, B, ...]`` -> fields ``[K, B, ...]``."""

    @abstractmethod
    def loss(self, batch: Transitions | RolloutBatch, target: "Members | None",
             choose_action: ChooseAction) -> tuple[Tensor, dict[str, Tensor]]:
        """Each member's loss on its own batch -> ``([K], {name: [K]})`` (``target`` None
        for on-policy members, which keep no target networks)."""

    @abstractmethod
    def clip_gradients(self, max_norm: float) -> Tensor:
        """Clip each member's gradient to norm ``max_norm``; returns the norms ``[K]``."""

    def zero_gradients(self) -> None:
        """Clear the gradients before a backward pass (as ``zero_grad(set_to_none=True)``)."""
        for p in self.parameter_list():
            p.grad = None

    def target_copy(self) -> Members:
        """Frozen target networks: a copy of the members without what their targets leave
        out (:meth:`~rs_lightning.agents.base.Agent.left_out_of_target`)."""
        left_out = {id(part): None for agent in self.networks()
                    for part in agent.left_out_of_target()}
        return copy.deepcopy(self, left_out).requires_grad_(False).eval()

    def parameter_list(self) -> list[nn.Parameter]:
        """The parameters, listed once: walking the modules for them every update costs a
        few percent of a DQN step (they stay the same objects when the module moves)."""
        if self._listed_parameters is None:
            self._listed_parameters = list(self.parameters())
        return self._listed_parameters

    def elementwise_views(self, tensors: list[Tensor]) -> list[Tensor]:
        """``tensors`` shaped as the parameters, as an elementwise kernel should take them
        so that each member is updated as a single run's agent is (:func:`member_views`)."""
        return tensors

    @abstractmethod
    def member_agent(self, k: int) -> Agent:
        """Member ``k`` as an ordinary agent (for evaluation; do not train it)."""

    @abstractmethod
    def networks(self) -> list[Agent]:
        """The agent objects that compute (for ``hardware.compile``)."""

    def member_state(self, k: int) -> dict[str, Tensor]:
        """Member ``k``'s weights as the state dict of an ordinary agent."""
        return {name: value.clone() for name, value in self.member_agent(k).state_dict().items()}


class StackedMembers(Members):
    """The members as one network with stacked parameters (``supports_members`` agents)."""

    def __init__(self, agents: list[Agent]) -> None:
        first = agents[0]
        super().__init__(len(agents), first.problem, first.config)
        self.network = stack_members(agents)
        # An ordinary agent of the same class and config, copied by member_agent; in a list
        # so that it is no submodule (nothing of it is trained or saved).
        self._template = [copy.deepcopy(first)]

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        return self.network.return_distribution(obs)

    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        return self.network.greedy_action(obs, choose_action)

    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        return self.network.sample_action(obs, noise)

    def sample(self, obs: Tensor, noise: Tensor) -> PolicySample:
        return self.network.sample(obs, noise)

    def loss(self, batch, target, choose_action):
        return self.network.loss(batch, None if target is None else target.network,
                                 choose_action)

    def clip_gradients(self, max_norm: float) -> Tensor:
        return clip_member_gradients(self.parameter_list(), max_norm)

    def elementwise_views(self, tensors: list[Tensor]) -> list[Tensor]:
        return member_views(tensors, self.count)

    def member_state(self, k: int) -> dict[str, Tensor]:
        return member_state(self.network, k)

    def member_agent(self, k: int) -> Agent:
        device = next(self.network.parameters()).device
        agent = copy.deepcopy(self._template[0]).to(device)
        agent.load_state_dict(member_state(self.network, k))
        return agent.eval()

    def networks(self) -> list[Agent]:
        return [self.network]


class LoopedMembers(Members):
    """The members as K agents run one after the other (any agent; always for K = 1)."""

    def __init__(self, agents: list[Agent]) -> None:
        first = agents[0]
        super().__init__(len(agents), first.problem, first.config)
        self.agents = nn.ModuleList(agents)
        # The same agents as a plain list for the per-step calls: indexing a ModuleList
        # formats a string key each time.
        self._agent_list = list(agents)
        # Each member's gradients, made at the first use (on the training device): walking
        # the modules for the parameters every update costs a few percent of a DQN step.
        self._gradients: list[FlatGradients] | None = None

    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        laws = [agent.return_distribution(obs[k]) for k, agent in enumerate(self.agents)]
        if len(laws) == 1:
            return ReturnDistribution(laws[0].values.unsqueeze(0), laws[0].probs.unsqueeze(0))
        return ReturnDistribution(torch.stack([law.values for law in laws]),
                                  torch.stack([law.probs for law in laws]))

    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        if self.count == 1:
            return self._agent_list[0].greedy_action(obs[0], rows_of(choose_action, 0)).unsqueeze(0)
        return torch.stack([agent.greedy_action(obs[k], rows_of(choose_action, k))
                            for k, agent in enumerate(self.agents)])

    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        return torch.stack([agent.sample_action(obs[k], noise[k])
                            for k, agent in enumerate(self._agent_list)])

    def sample(self, obs: Tensor, noise: Tensor) -> PolicySample:
        draws = [agent.sample(obs[k], noise[k]) for k, agent in enumerate(self._agent_list)]
        return PolicySample(*(torch.stack(field) for field in zip(*draws)))

    def loss(self, batch, target, choose_action):
        fields = type(batch)  # Transitions, or an on-policy RolloutBatch
        if self.count == 1:
            loss, metrics = self._agent_list[0].loss(
                fields(*(f[0] for f in batch)),
                None if target is None else target._agent_list[0], rows_of(choose_action, 0))
            return loss.unsqueeze(0), {name: v.unsqueeze(0) for name, v in metrics.items()}
        results = [agent.loss(fields(*(f[k] for f in batch)),
                              None if target is None else target.agents[k],
                              rows_of(choose_action, k))
                   for k, agent in enumerate(self.agents)]
        losses = torch.stack([loss for loss, _ in results])
        metrics = {name: torch.stack([m[name] for _, m in results]) for name in results[0][1]}
        return losses, metrics

    def _member_gradients(self) -> list[FlatGradients]:
        if self._gradients is None:
            self._gradients = [FlatGradients(list(agent.parameters())) for agent in self.agents]
        return self._gradients

    def zero_gradients(self) -> None:
        for gradients in self._member_gradients():
            gradients.zero()

    def clip_gradients(self, max_norm: float) -> Tensor:
        norms = [gradients.clip(max_norm) for gradients in self._member_gradients()]
        return norms[0].unsqueeze(0) if len(norms) == 1 else torch.stack(norms)

    def member_agent(self, k: int) -> Agent:
        return self.agents[k]

    def networks(self) -> list[Agent]:
        return list(self.agents)


def make_members(agents: list[Agent]) -> Members:
    """Stacked when there are several members of an agent that supports it, else looped."""
    if len(agents) > 1 and agents[0].supports_members:
        return StackedMembers(agents)
    return LoopedMembers(agents)
