"""The contract between the Q-learning loop and a distributional agent.

An agent is a network of the return distribution Z(s, a) plus its learning rule. It knows
nothing of risk: the loop hands it ``choose_action`` (:class:`ChooseAction`: the utility's
argmax, from a return distribution to actions), which it must use to pick the target action of
the distributional Bellman target. Acting goes through :meth:`Agent.return_distribution` too, so
the same risk measure decides both (the paper's two changes, and nothing else).

To add an agent: write one module in this package with a config dataclass derived from
:class:`AgentConfig` and a class derived from :class:`Agent`, decorate the class with
``@register_agent("name", NameConfig)``, and add ``conf/agent/name.yaml``. An on-policy
agent (an actor and a critic learned from rollouts) derives from
:class:`rs_lightning.agents.on_policy.OnPolicyAgent` instead, whose docstring is its contract.

Members (seeds trained together, :mod:`rs_lightning.agents.members`): an agent whose code
treats leading dimensions as independent (``...``-style indexing, reductions over the batch
dimension only, a loss of one value per member ``[K]``) says so with ``supports_members =
True``; its K members then run as one network whose every parameter has a leading dimension
K, and its layers (:class:`Linear`) as batched matrix products. Any other agent runs its
members one after the other; both give the engine the same interface.

Discount: the gamma of a target (r + gamma Z(s', a*)) is each transition's own
``batch.discount``, gamma^m for a transition of m steps (``learning.n_step``: r is then the
discounted sum of the m rewards and s' the state m steps later), 0 where it terminated.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, List, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rs_lightning.risk import ReturnDistribution, Utility
from rs_lightning.types import Problem, Transitions

# The default of a config field whose value lives in conf/agent/*.yaml: the config loader
# (OmegaConf) reads this string as "required", and the YAML fills it.
MISSING = "???"

# Sizes past which a run would only allocate for minutes, then fail: refused in one line before
# anything is built (the memory check, rs_lightning.engine.resources, weighs what they allow).
MAX_LAYER_WIDTH = 65536  # units of one hidden layer
MAX_HIDDEN_LAYERS = 64  # layers of one hidden_sizes list
# Atoms of one law (atoms, quantiles, fractions, returns, cosine features): the losses compare
# every pair of a batch's atoms, batch x N x N numbers.
MAX_ATOMS = 1024
ATOMS_WHY = "the losses compare every pair of atoms"
MAX_CRITICS = 64  # an actor-critic's critics, each a network evaluated after the other


def check_count(key: str, value: int, smallest: int, largest: int, why: str = "") -> None:
    """ValueError ``"agent.key: must be ..."`` unless ``smallest <= value <= largest``."""
    if not smallest <= value <= largest:
        reason = f" ({why})" if why else ""
        raise ValueError(f"agent.{key}: must be an integer in [{smallest}, {largest}]"
                         f"{reason}, got {value}")


def check_layer_sizes(key: str, sizes: List[int], allow_empty: bool = False) -> None:
    """ValueError naming ``agent.key`` unless ``sizes`` is a list of at most
    ``MAX_HIDDEN_LAYERS`` widths in [1, ``MAX_LAYER_WIDTH``] (empty only where allowed)."""
    sizes = list(sizes)
    if (not sizes and not allow_empty) or any(h <= 0 for h in sizes):
        raise ValueError(f"agent.{key}: must be a {'' if allow_empty else 'non-empty '}list of "
                         f"positive sizes, got {sizes}")
    if len(sizes) > MAX_HIDDEN_LAYERS or any(h > MAX_LAYER_WIDTH for h in sizes):
        shown = sizes if len(sizes) <= MAX_HIDDEN_LAYERS else f"{len(sizes)} layers"
        raise ValueError(f"agent.{key}: must hold at most {MAX_HIDDEN_LAYERS} layers of at most "
                         f"{MAX_LAYER_WIDTH} units each, got {shown}")


class ChooseAction(Protocol):
    """The utility's argmax: a ``[B, A, K]`` return distribution -> the actions ``[B]`` that
    maximise the utility. The loop passes ``utility.greedy``
    (:class:`~rs_lightning.risk.UtilityArgmax`)."""

    @property
    def utility(self) -> Utility | None:
        """The utility maximised, for an agent that evaluates it its own way (IQN's native
        route); None for a rule that is not a utility's argmax."""

    def __call__(self, dist: ReturnDistribution) -> Tensor: ...

    def utility_of(self, dist: ReturnDistribution) -> Tensor:
        """U of each law (``[..., B, A, K]`` -> ``[..., B, A]``), differentiable: what an
        actor-critic's actor maximises."""


def rows_of(choose_action: ChooseAction, index) -> ChooseAction:
    """The rule for the rows ``index`` of the batch it was made for: a risk-conditioned rule
    holds one setting per transition (``select``); any other rule is the same for every row.
    An agent that hands ``choose_action`` only some rows (UMDQN's bootstrapped ones) or a
    loop over members passes it through here."""
    select = getattr(choose_action, "select", None)
    return choose_action if select is None else select(index)


@dataclass
class AgentConfig:
    """Fields every agent config has. Subclasses add the model's own settings.

    Fields have no defaults here: the values live in ``conf/agent/<name>.yaml``.
    """

    name: str = MISSING
    hidden_sizes: List[int] = MISSING
    # The network also takes the risk setting (rs_lightning.risk.conditioning).
    risk_conditioned: bool = MISSING
    # The state torso (rs_lightning.agents.networks.NetworkConfig), from the top-level
    # ``network`` section (conf/network/*.yaml), set by the config check; None: the MLP.
    network: Any = None

    # Fields the config check fills from other sections, absent from conf/agent/*.yaml.
    FILLED_BY_CHECK: ClassVar[tuple[str, ...]] = ("network",)
    # The fields that size the networks (what the memory check tells a user to lower).
    NETWORK_SIZES: ClassVar[tuple[str, ...]] = ("hidden_sizes",)

    @classmethod
    def yaml_fields(cls) -> set[str]:
        """The fields an agent's YAML file holds."""
        return {f.name for f in dataclasses.fields(cls)} - set(cls.FILLED_BY_CHECK)

    def check(self) -> None:
        """Raise ``ValueError("key: what is allowed")`` for values out of range."""
        check_layer_sizes("hidden_sizes", self.hidden_sizes)

    def lattice_nodes(self, return_min: float, return_max: float) -> float:
        """Integration nodes per state the agent evaluates on this return support (0: it
        integrates nothing). A float: a tiny step gives a count too large for an int."""
        return 0.0


class Agent(nn.Module, ABC):
    """A distributional value network and its loss."""

    # Whether the agent's code runs K stacked members at once (module docstring).
    supports_members: bool = False
    # Whether Z is a law and not a point (DQN's Dirac): objective=static needs one.
    distributional: bool = True
    # Whether it acts in a continuous box [-1, 1]^d (an actor-critic,
    # rs_lightning.agents.actor_critic) rather than among Problem.n_actions actions.
    continuous_actions: bool = False
    # Whether its laws live on [return_min, return_max] (atoms or a grid there), piling at
    # the ends what lies beyond; quantile agents' atoms go wherever the returns are.
    fixed_support: bool = False
    # Whether it learns from rollouts of its own policy (rs_lightning.agents.on_policy)
    # rather than from a replay memory.
    on_policy: bool = False
    # What hardware.compile compiles of it: what runs every step and traces as one graph
    # (an actor-critic's loss draws its noise outside the compiled part); () keeps it eager.
    compiled_methods: tuple[str, ...] = ("loss", "return_distribution")
    # Why it stays eager, where compiled_methods is empty (hardware.compile says so).
    eager_reason: str = ""

    def __init__(self, config: AgentConfig, problem: Problem) -> None:
        config.check()
        super().__init__()
        self.config = config
        self.problem = problem
        self.members: int | None = None  # K when the parameters are stacked members

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

    @staticmethod
    def objective_refusal(objective: str, utility: Utility | None) -> str | None:
        """Why this agent cannot follow ``objective`` at ``utility``, beyond the rules every
        agent meets (:func:`rs_lightning.config.schema.objective_refusal`); None where it
        can. ``utility`` None asks what it refuses at every setting."""
        return None

    def left_out_of_target(self) -> list[nn.Module | nn.Parameter]:
        """The parts a target copy of this agent leaves out: those its loss never reads of
        ``target`` (an actor-critic's actor and temperature); none by default."""
        return []

    @torch.no_grad()
    def greedy_action(self, obs: Tensor, choose_action: ChooseAction) -> Tensor:
        """The action maximising the utility in each state of ``obs`` -> ``[B]``."""
        return choose_action(self.return_distribution(obs))

    def sample_action(self, obs: Tensor, noise: Tensor) -> Tensor:
        """An exploratory continuous action per state (actor-critics only)."""
        raise TypeError(f"agent {self.config.name!r} acts among discrete actions")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``x W^T + b`` for one network (``weight[out, in]``) or K stacked members
    (``weight[K, out, in]``, ``bias[K, out]``, ``x[K, B, ..., in]``: member k's rows at k;
    an input shared by the members is passed expanded, ``x.expand(K, *x.shape)``)."""
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    members = weight.shape[0]
    if x.dim() < 3 or x.shape[0] != members:
        raise ValueError(
            f"stacked members: the input must be [{members}, B, ..., in], got {list(x.shape)}"
        )
    rows = x.reshape(members, -1, x.shape[-1])
    if (torch.is_grad_enabled() and not torch.is_autocast_enabled(rows.device.type)
            and (rows.requires_grad or weight.requires_grad
                 or (bias is not None and bias.requires_grad))):
        out = _StackedLinear.apply(rows, weight, bias)
    else:  # no gradient to take (acting, target networks), or autocast's casts: the same
        # product without the autograd.Function, whose call costs 20-30 us on a CPU
        out = (torch.bmm(rows, weight.transpose(1, 2)) if bias is None
               else torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2)))
    return out.view(*x.shape[:-1], weight.shape[1])


class _StackedLinear(torch.autograd.Function):
    """K members' ``x W^T + b`` with ``F.linear``'s backward, member by member.

    Autograd's rule for ``baddbmm`` takes the weight's gradient as ``x^T g`` (``[K, in,
    out]``) and transposes it into the weight's layout; ``F.linear`` takes it as ``g^T x``
    (``[out, in]``), a product whose sums run in another order. Taken here as ``F.linear``
    does, with its input's and bias's gradients, each member's gradient is a single run's
    to the bit on a CPU (and the transposing copy is saved).

    The context is set in ``forward`` (not a ``setup_context``): with one, every call binds
    its arguments through ``inspect.signature``, about 8 % of a stacked C51 update."""

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(rows, weight)
        if bias is None:
            return torch.bmm(rows, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, weight = ctx.saved_tensors
        grad_rows = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_rows = torch.bmm(grad, weight)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.bmm(grad.transpose(1, 2), rows)
        if ctx.needs_input_grad[2]:
            grad_bias = grad.sum(1)
        return grad_rows, grad_weight, grad_bias


class Linear(nn.Linear):
    """``nn.Linear`` that also runs K stacked members (see :func:`linear`)."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def mlp(sizes: list[int], activate_last: bool = False) -> nn.Sequential:
    """Linear layers of the given sizes with ReLU between them."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(Linear(n_in, n_out))
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
