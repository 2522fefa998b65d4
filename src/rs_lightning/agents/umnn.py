"""The unconstrained monotonic neural network (UMNN, Wehenkel & Louppe, 2019) of the UMDQN
agents (Théate et al., 2021: UMDQN-C, UMDQN-KL, UMDQN-W), and its fast evaluation.

The network maps a state s and a scalar z to a function increasing in z, for every action a:

    h(z | s, a) = exp(c_a(s)) * integral_0^z f(t, h(s))_a dt + b_a(s)                  (UMNN)

with h(s) a state embedding, f > 0 an integrand network (ELU(x) + 1 output) and (b_a, c_a) an
offset and a log-scale from a conditioner network on h(s). The integrand is positive and the
scale exp(c) too, so h is increasing in z by construction. Each agent reads it its own way:
UMDQN-C as the CDF sigmoid(h) of the return z, UMDQN-KL as a normalising flow (CDF Phi(h)),
UMDQN-W as the quantile function of a fraction.

Fast evaluation. The authors evaluate the integral with a separate 51-node Clenshaw-Curtis
quadrature for every return, every sample and every action (seconds per update). Here:

- the integrand is evaluated once per distinct state of the batch, on an evenly spaced
  lattice of nodes k * integration_step anchored at 0 and covering every point the agent
  needs (:func:`covering_lattice`);
- the first integrand layer is split, W [z, h] + b = w_z z + (W_h h + b): the state part is
  computed once per state, the z part once per node;
- the running integral is accumulated with a cumulative Simpson rule whose every increment is
  positive (:func:`integral_table`), and read at any z by integrating the linear interpolant
  of the integrand inside an interval (:func:`interpolate_integral`): h is monotone by
  construction, exactly so in float arithmetic.

:func:`clenshaw_curtis` is the authors' quadrature, kept for the reference evaluation
(:meth:`rs_lightning.agents.umdqn_c.UMDQNC.cdf_by_quadrature`). Stacked members
(``parallel_seeds``): :func:`distinct_rows_of_members` and :func:`next_states_of_members`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rs_lightning.agents.base import (
    check_layer_sizes,
    MISSING,
    AgentConfig,
    Problem,
    Transitions,
    linear,
    mlp,
)
from rs_lightning.agents.networks import state_network

INTEGRATION_RULES = ("simpson", "trapezoid")


# Why the UMNN agents stay eager under hardware.compile: torch.compile recompiled their loss up
# to its limit and then ran it slower than eager on a CPU (benchmarks/RESULTS.md), and with
# torch 2.13 RS-UMDQN-C's and UMDQN-KL's compiled backward aborted the process on a CPU.
EAGER_UNDER_COMPILE = ("its integration lattice is sized by the distinct states of each "
                       "batch, which torch.compile recompiles for and runs slower than eager")


@dataclass
class UMNNConfig(AgentConfig):
    """The monotone network shared by the UMDQN family (UMDQN-C, -KL, -W).

    ``hidden_sizes`` (from :class:`AgentConfig`) are the state embedding h(s):
    obs_dim -> hidden_sizes, the last layer without activation (authors' code).
    """

    NETWORK_SIZES = ("hidden_sizes", "integrand_hidden_sizes", "conditioner_hidden_sizes")
    # Integrand f(z, h): (1 + embedding) -> integrand_hidden_sizes (ReLU) -> n_actions, ELU + 1.
    integrand_hidden_sizes: List[int] = MISSING
    # Conditioner on h: embedding -> conditioner_hidden_sizes (ReLU) -> 2 * n_actions.
    conditioner_hidden_sizes: List[int] = MISSING
    integration_rule: str = MISSING  # simpson | trapezoid: cumulative rule on the lattice
    integration_step: float = MISSING  # lattice spacing (in units of the integration variable)

    def check(self) -> None:
        super().check()
        for key in ("integrand_hidden_sizes", "conditioner_hidden_sizes"):
            check_layer_sizes(key, getattr(self, key))
        if self.integration_rule not in INTEGRATION_RULES:
            raise ValueError(
                f"agent.integration_rule: must be one of {', '.join(INTEGRATION_RULES)}, "
                f"got {self.integration_rule!r}"
            )
        if not self.integration_step > 0:
            raise ValueError(
                f"agent.integration_step: must be a positive float, got {self.integration_step}"
            )

    def lattice_span(self, return_min: float, return_max: float) -> tuple[float, float, str]:
        """The interval of the integration variable the lattice covers for every state, and
        the keys that set it: for a network of the return, the return support."""
        return return_min, return_max, "env.return_min/env.return_max"

    def lattice_nodes(self, return_min: float, return_max: float) -> float:
        low, high, _ = self.lattice_span(return_min, return_max)
        return lattice_nodes(low, high, self.integration_step)


# --------------------------------------------------------------------------------------------
# The maths, as pure functions.


def umnn_cdf(integral: Tensor, offset: Tensor, log_scale: Tensor) -> Tensor:
    """F = sigmoid(exp(c) * integral_0^z f + b): UMDQN-C's CDF, the UMNN through a sigmoid."""
    return torch.sigmoid(log_scale.exp() * integral + offset)


class Lattice(NamedTuple):
    """Evenly spaced integration nodes ``x_k = k * step`` for ``first <= k < first + size``.

    Every lattice is anchored at 0, the lower limit of the UMNN integral, so that 0 is a node
    and the nodes sit at the same returns from one batch to the next.
    """

    first: int
    step: float
    size: int

    def nodes(self, like: Tensor) -> Tensor:
        k = torch.arange(self.first, self.first + self.size, device=like.device, dtype=like.dtype)
        return k * self.step

    @property
    def origin(self) -> int:
        """The position of the node at 0."""
        return -self.first


def lattice_nodes(low: float, high: float, step: float) -> float:
    """The number of nodes of :func:`covering_lattice` for ``[low, high]`` (within the two
    it may add for Simpson's pairs), without building it: the one rule budgets and memory
    estimates use (``limits.lattice_nodes``)."""
    return (max(high, 0.0) - min(low, 0.0)) / step + 1.0


def covering_lattice(low: float, high: float, step: float, even: bool) -> Lattice:
    """The smallest lattice of spacing ``step`` covering ``[low, high]`` and 0.

    ``even``: an even number of intervals with 0 at an even position (Simpson pairs them).
    """
    first = min(math.floor(low / step + 1e-9), 0)
    last = max(math.ceil(high / step - 1e-9), 0, first + 1)
    if even:
        first -= first % 2
        last += (last - first) % 2
    return Lattice(first, step, last - first + 1)


class IntegralTable(NamedTuple):
    """``integral_0^x f`` on a lattice for a batch of curves (last dimension: the nodes).

    ``increment`` and ``lean`` describe each interval [x_k, x_{k+1}]: the integral over it and
    ``f_k / mean(f_k, f_{k+1})`` (in [0, 2]), which shapes the integral inside the interval.
    """

    lattice: Lattice
    integral: Tensor  # [..., K]  integral_0^{x_k} f
    increment: Tensor  # [..., K - 1]  integral_{x_k}^{x_{k+1}} f >= 0
    lean: Tensor  # [..., K - 1]

    def select(self, index: Tensor) -> "IntegralTable":
        """Curves ``index[R]`` of a table with one leading dimension -> ``[R, K]``."""
        return IntegralTable(
            self.lattice,
            self.integral.index_select(0, index),
            self.increment.index_select(0, index),
            self.lean.index_select(0, index),
        )


def integral_table(values: Tensor, lattice: Lattice, rule: str) -> IntegralTable:
    """Cumulative integration of ``f`` sampled on the lattice, ``values[..., K]``.

    - trapezoid: ``integral_{x_k}^{x_{k+1}} f = step * (f_k + f_{k+1}) / 2``;
    - simpson: on each pair of intervals Simpson's rule ``step / 3 * (f_0 + 4 f_1 + f_2)``
      (exact for cubics), shared between the two intervals in proportion to their trapezoid
      increments: both get the factor ``2/3 (f_0 + 4 f_1 + f_2) / (f_0 + 2 f_1 + f_2)``, which
      lies in [2/3, 4/3] (``K - 1`` must be even).

    Every increment is a positive, bounded multiple of ``f_k + f_{k+1}``, so the running
    integral never decreases whatever the network (f may underflow to 0 in float, never
    below): F is monotone by construction. The sums run outwards from the node z = 0, so the
    table does not depend on how far the lattice extends (no cancellation).
    """
    step = lattice.step
    pair_sums = values[..., 1:] + values[..., :-1]
    increment = (0.5 * step) * pair_sums
    if rule != "trapezoid":
        middle = values[..., 1::2]
        denominator = (pair_sums[..., 0::2] + pair_sums[..., 1::2]).clamp_min(1e-20)
        factor = (2.0 / 3.0) * (1.0 + 2.0 * middle / denominator)  # Simpson / trapezoid
        # Both intervals of a pair take their pair's factor (a view, not a repeated copy).
        increment = (increment.unflatten(-1, (-1, 2)) * factor.unsqueeze(-1)).flatten(-2)
    origin = lattice.origin
    above = increment[..., origin:].cumsum(-1)
    below = increment[..., :origin].flip(-1).cumsum(-1).flip(-1).neg()
    integral = torch.cat([below, torch.zeros_like(values[..., :1]), above], dim=-1)
    lean = 2.0 * values[..., :-1] / pair_sums.clamp_min(1e-20)
    return IntegralTable(lattice, integral, increment, lean)


def interpolate_integral(table: IntegralTable, z: Tensor, derivative: bool = False):
    """``integral_0^z f`` at arbitrary returns ``z[..., N]``; ``z``'s leading dimensions
    broadcast against the table's.

    Between nodes the integrand is taken linear: with ``z = x_k + t * step``, t in [0, 1],
    ``I(z) = I_k + (I_{k+1} - I_k) * share(t)`` where ``share(t) = t (t + lean_k (1 - t))``
    is the part of the interval's integral below z for a linear integrand. share rises from
    0 to 1 with derivative proportional to the interpolated integrand (>= 0), so I is
    increasing, continuous and equal to the table at the nodes. Beyond the lattice it
    continues linearly with the edge slope (still increasing).

    ``derivative``: also return dI/dz, the exact derivative of this interpolant (the linear
    interpolant of f, scaled by the rule's factor; >= 0), e.g. for a density (UMDQN-KL).
    """
    lattice = table.lattice
    position = z / lattice.step - lattice.first
    inside = position.clamp(0.0, lattice.size - 1)
    index = inside.floor().clamp_(max=lattice.size - 2)
    t = inside - index
    leading = _broadcast_leading(table.integral.shape[:-1], z.shape[:-1])
    index = index.long().expand(*leading, -1)

    def at(tensor: Tensor) -> Tensor:
        return tensor.expand(*leading, -1).gather(-1, index)

    increment, lean = at(table.increment), at(table.lean)
    share = (t * torch.addcmul(t, lean, 1.0 - t)).clamp_(max=1.0)
    integral = torch.addcmul(at(table.integral), increment, share)
    beyond = None if derivative else position - inside
    # Returns on the lattice (a covering lattice's every query) need no edge continuation:
    # adding 0 x the edge slope changes no bit.
    if beyond is not None and not bool(beyond.any()):
        return integral
    # d integral / d position = increment * share'(t), share'(t) = lean + 2 t (1 - lean)
    edge_slope = increment * torch.addcmul(lean, t, 1.0 - lean, value=2.0)
    integral = torch.addcmul(integral, position - inside if beyond is None else beyond, edge_slope)
    if derivative:
        return integral, edge_slope / lattice.step
    return integral


def _broadcast_leading(a: torch.Size, b: torch.Size) -> torch.Size:
    """``torch.broadcast_shapes(a, b)`` without its Python reference implementation's cost
    in the common cases (equal shapes, or one of them all ones)."""
    if a == b or all(n == 1 for n in b) and len(b) <= len(a):
        return a
    if all(n == 1 for n in a) and len(a) <= len(b):
        return b
    return torch.broadcast_shapes(a, b)


def clenshaw_curtis(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Clenshaw-Curtis nodes ``cos(pi k / n)`` on [-1, 1] and their weights (sum 2)."""
    n = n_nodes - 1
    k = np.arange(n_nodes)
    nodes = np.cos(np.pi * k / n)
    weights = np.zeros(n_nodes)
    for i in k:
        total = 0.0
        for j in range(1, n // 2 + 1):
            b = 1.0 if 2 * j == n else 2.0
            total += b / (4 * j * j - 1) * np.cos(2 * j * i * np.pi / n)
        weights[i] = (1.0 if i in (0, n) else 2.0) / n * (1.0 - total)
    return nodes, weights


def _full_precision(x: Tensor) -> Tensor:
    """Half-precision activations (mixed precision) to float32 before a running sum."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


# --------------------------------------------------------------------------------------------
# The network.


class MonotoneNetwork(nn.Module):
    """The UMNN (module docstring): embedding h(s), integrand f(z, h) > 0 and conditioner (b, c)."""

    def __init__(self, problem: Problem, config: UMNNConfig) -> None:
        super().__init__()
        n_actions = problem.n_actions
        embedding_size = config.hidden_sizes[-1]
        self.embedding = state_network(problem, config.network, config.hidden_sizes)
        self.integrand = mlp([1 + embedding_size, *config.integrand_hidden_sizes, n_actions])
        self.conditioner = mlp([embedding_size, *config.conditioner_hidden_sizes, 2 * n_actions])
        for module in self.modules():  # Xavier initialisation (Appendix B)
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def condition(self, embedding: Tensor) -> tuple[Tensor, Tensor]:
        """Offset b_a(s) and log-scale c_a(s), each ``[..., A]``."""
        offset, log_scale = self.conditioner(embedding).chunk(2, dim=-1)
        return offset, log_scale

    def integrand_at(self, z: Tensor, embedding: Tensor) -> Tensor:
        """f(z, h) by the plain network on ``[z, h]``: ``z[...]``, ``h[..., H]`` -> ``[..., A]``."""
        inputs = torch.cat([z.unsqueeze(-1), embedding.expand(*z.shape, -1)], dim=-1)
        return F.elu(self.integrand(inputs)) + 1.0

    def integrand_on_lattice(self, embedding: Tensor, nodes: Tensor) -> Tensor:
        """f(x_k, h_u) for every state u and node k: ``[U, H]``, ``[K]`` -> ``[U, A, K]``.

        The first layer is split, W [z, h] + b = w_z z + (W_h h + b): the state part is
        computed once per state and the z part once per node.
        Stacked members: ``embedding[M, U, H]`` -> ``[M, U, A, K]``.
        """
        first, *hidden_layers, last = [m for m in self.integrand if isinstance(m, nn.Linear)]
        # A strided column is slow in elementwise ops: [H1], or [M, 1, 1, H1] for members.
        z_weight = first.weight[..., 0].contiguous()
        if z_weight.dim() == 2:
            z_weight = z_weight[:, None, None, :]
        state_part = linear(embedding, first.weight[..., 1:], first.bias)  # [(M,) U, H1]
        hidden = torch.addcmul(state_part.unsqueeze(-2), nodes.view(-1, 1), z_weight).relu_()
        hidden = hidden.flatten(-3, -2)  # [(M,) U * K, H1]; in-place ReLUs spare a copy per layer
        for layer in hidden_layers:
            hidden = linear(hidden, layer.weight, layer.bias).relu_()
        values = F.elu(linear(hidden, last.weight, last.bias)).add_(1.0)  # [(M,) U * K, A]
        values = values.view(*embedding.shape[:-1], nodes.shape[0], -1).transpose(-1, -2)
        return _full_precision(values.contiguous())  # [(M,) U, A, K]


class StateCurves(NamedTuple):
    """Everything needed to read the UMNN (or UMDQN-C's F) at any z for a batch of states."""

    table: IntegralTable  # [U * A, K]: curve u * A + a is (distinct state u, action a)
    offset: Tensor  # [U * A]  b_a(s)
    log_scale: Tensor  # [U * A]  c_a(s)
    # [B]: the curves of batch row i are inverse[i] * A + a. Stacked members: [M, B], with
    # the curves of every member's distinct states in one table.
    inverse: Tensor
    n_actions: int

    def cdf(self, curve: Tensor, z: Tensor) -> Tensor:
        """F on curves ``curve[R]`` (index u * A + a) at returns ``z[R or 1, N]`` -> ``[R, N]``."""
        integral = interpolate_integral(self.table.select(curve), z)
        offset = self.offset.index_select(0, curve).unsqueeze(-1)
        log_scale = self.log_scale.index_select(0, curve).unsqueeze(-1)
        return umnn_cdf(integral, offset, log_scale)

    def monotone(self, curve: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """The UMNN itself, before any squashing: h(z) = exp(c) * integral_0^z f + b and its
        derivative exp(c) * f(z) > 0 on curves ``curve[R]`` at ``z[R or 1, N]`` -> two
        ``[R, N]`` (UMDQN-KL squashes h with Phi, UMDQN-W uses it as the quantile function)."""
        integral, slope = interpolate_integral(self.table.select(curve), z, derivative=True)
        offset = self.offset.index_select(0, curve).unsqueeze(-1)
        scale = self.log_scale.index_select(0, curve).unsqueeze(-1).exp()
        return scale * integral + offset, scale * slope

    def _rows_of(self, distinct: Tensor) -> Tensor:
        """``[U * A, N]`` values of the distinct curves -> ``[B, A, N]`` (``[M, B, A, N]``)."""
        rows = distinct.view(-1, self.n_actions, distinct.shape[-1])
        rows = rows.index_select(0, self.inverse.flatten())
        return rows.view(*self.inverse.shape, *rows.shape[1:])

    def monotone_of_all(self, z: Tensor) -> Tensor:
        """h(z) for every batch row and action at shared ``z[N]`` -> ``[B, A, N]``."""
        integral = interpolate_integral(self.table, z.unsqueeze(0))  # [U * A, N]
        distinct = self.log_scale.exp().unsqueeze(-1) * integral + self.offset.unsqueeze(-1)
        return self._rows_of(distinct)

    def cdf_of_rows(self, action: Tensor, z: Tensor) -> Tensor:
        """F(z | s_i, a_i) for every batch row i -> ``[B, N]`` (``[M, B, N]``; ``z`` is
        ``[1, N]`` or one row per batch row)."""
        curve = self.inverse * self.n_actions + action
        if curve.dim() == 1:
            return self.cdf(curve, z)
        rows = z.reshape(-1, z.shape[-1])
        return self.cdf(curve.flatten(), rows).view(*curve.shape, z.shape[-1])

    def cdf_of_all(self, z: Tensor) -> Tensor:
        """F(z | s_i, a) for every batch row and action at shared ``z[N]`` -> ``[B, A, N]``."""
        integral = interpolate_integral(self.table, z.unsqueeze(0))  # [U * A, N]
        distinct = umnn_cdf(integral, self.offset.unsqueeze(-1), self.log_scale.unsqueeze(-1))
        return self._rows_of(distinct)


def umnn_state_curves(
    network: MonotoneNetwork, obs: Tensor, lattice: Lattice, rule: str
) -> StateCurves:
    """Integrate the integrand once per distinct state of ``obs[B, D]`` on ``lattice``.

    A network of M stacked members takes ``obs[M, B, D]``: each member integrates once per
    distinct state of its own rows (:func:`distinct_rows_of_members`).
    """
    if obs.dim() == 2:
        distinct, inverse = distinct_rows(obs)
    else:
        distinct, inverse = distinct_rows_of_members(obs)
    embedding = network.embedding(distinct)
    offset, log_scale = network.condition(embedding)
    values = network.integrand_on_lattice(embedding, lattice.nodes(embedding))
    table = integral_table(values.flatten(0, -2), lattice, rule)
    return StateCurves(
        table,
        _full_precision(offset).flatten(),
        _full_precision(log_scale).flatten(),
        inverse,
        offset.shape[-1],
    )


def umnn_curves_covering(
    network: MonotoneNetwork, config: UMNNConfig, problem: Problem, obs: Tensor, low: float,
    high: float,
) -> StateCurves:
    """:func:`umnn_state_curves` on a lattice covering ``[low, high]`` and 0 (the lower limit
    of the UMNN integral). The lattice never extends further than 4 return ranges beyond the
    return range: past it the integral continues linearly (F stays monotone); only queries
    far out of reach of any Bellman target go there."""
    reach = 4.0 * (problem.return_max - problem.return_min)
    lattice = covering_lattice(
        max(low, problem.return_min - reach),
        min(high, problem.return_max + reach),
        config.integration_step,
        even=config.integration_rule == "simpson",
    )
    return umnn_state_curves(network, obs, lattice, config.integration_rule)


def shifted_return_range(problem: Problem, reward: Tensor, discount: Tensor) -> tuple[float, float]:
    """``[low, high]`` covering the return support and every shifted return (z - r_i) / d_i
    of a Bellman target, z in [return_min, return_max], over the bootstrapped rows' rewards
    ``r_i`` and discounts ``d_i`` (one host sync).

    A discount is a power gamma^m (m steps of an n-step return); the float32 tensor rounds
    it, so the bound uses the double-precision power gamma^m: one-step rows then give
    exactly the range (z - r) / gamma of the scalar discount, and the same lattice.
    """
    r_low, r_high, d_low, d_high = torch.stack([*torch.aminmax(reward), *torch.aminmax(discount)]).tolist()
    gamma = problem.gamma
    powers = [gamma ** round(math.log(d) / math.log(gamma)) for d in (d_low, d_high)]
    below, above = problem.return_min - r_high, problem.return_max - r_low
    # (z - r) / d is monotone in 1 / d: its extremes sit at the extreme discounts.
    return (min(problem.return_min, *(below / d for d in powers)),
            max(problem.return_max, *(above / d for d in powers)))


def distinct_rows_of_members(obs: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct rows of each member's ``obs[M, B, D]``, padded with zero rows to the
    largest count ``U`` -> ``[M, U, D]``, and the index ``[M, B]`` of each row among the
    ``M * U`` (member m's rows are ``m * U + u``)."""
    members, rows, width = obs.shape
    member = torch.arange(members, device=obs.device).repeat_interleave(rows)
    # One sort for all: rows keyed by their member come out grouped by member, in order.
    keyed = torch.cat([member.unsqueeze(1).to(obs.dtype), obs.flatten(0, 1)], dim=1)
    distinct, inverse = unique_rows(keyed)
    owner = distinct[:, 0].long()
    counts = torch.bincount(owner, minlength=members)
    slot = torch.arange(owner.shape[0], device=obs.device) - (counts.cumsum(0) - counts)[owner]
    padded = obs.new_zeros(members, int(counts.max()), width)
    padded[owner, slot] = distinct[:, 1:]
    return padded, (owner * padded.shape[1] + slot)[inverse].view(members, rows)


def next_states_of_members(batch: Transitions) -> tuple[Tensor, Tensor]:
    """The rows to bootstrap ``[M, B]`` of stacked members' ``batch`` and their next states
    ``[M, B, D]``, where a terminal row takes the next state of a bootstrapped row of its
    member: every row can go through the network (the rows to bootstrap differ between
    members) without integrating for a state whose values are not used."""
    bootstrap = batch.terminated == 0
    first = bootstrap.to(torch.int8).argmax(-1)  # [M]; a member without any: row 0
    stand_in = batch.next_obs[torch.arange(first.shape[0], device=first.device), first]
    return bootstrap, torch.where(bootstrap.unsqueeze(-1), batch.next_obs, stand_in.unsqueeze(1))


def distinct_rows(obs: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct rows of ``obs`` and the index of each row among them."""
    if obs.shape[0] == 1:
        return obs, torch.zeros(1, dtype=torch.long, device=obs.device)
    return unique_rows(obs)


# From this many rows and up to this many columns, sorting column by column beats
# torch.unique(dim=0), which compares rows one pair at a time (measured: benchmarks/RESULTS.md).
_SORTED_UNIQUE_MIN_ROWS = 64
_SORTED_UNIQUE_MAX_COLUMNS = 8


def unique_rows(rows: Tensor) -> tuple[Tensor, Tensor]:
    """``torch.unique(rows, dim=0, return_inverse=True)``: the distinct rows of ``rows[N, D]``
    in lexicographic order and the index of each row among them. Narrow rows are sorted
    with one stable argsort per column, last column first (a radix sort), and told apart
    from their predecessor in one comparison."""
    if rows.shape[0] < _SORTED_UNIQUE_MIN_ROWS or rows.shape[1] > _SORTED_UNIQUE_MAX_COLUMNS:
        return torch.unique(rows, dim=0, return_inverse=True)
    order = torch.argsort(rows[:, -1], stable=True)
    for column in range(rows.shape[1] - 2, -1, -1):
        order = order.index_select(0, torch.argsort(rows[order, column], stable=True))
    ordered = rows.index_select(0, order)
    starts = torch.ones(rows.shape[0], dtype=torch.bool, device=rows.device)
    starts[1:] = (ordered[1:] != ordered[:-1]).any(1)
    inverse = torch.empty_like(order)
    inverse[order] = starts.cumsum(0) - 1
    return ordered[starts], inverse
