"""The members' gradients held in one flat buffer per agent (FlatGradients): the same
clipped gradients and Adam steps as zero_grad(set_to_none=True) and clip_grad_norm_."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from rs_lightning.agents.members import FlatGradients, LoopedMembers
from rs_lightning.risk import Utility
from rs_lightning.types import Transitions
from tests.conftest import replay_agents
from tests.test_parallel_seeds import agent_of


def batch_of(seed: int, size: int = 16, continuous: bool = False) -> Transitions:
    gen = torch.Generator().manual_seed(seed)
    return Transitions(
        obs=torch.randint(0, 3, (size, 2), generator=gen).float(),
        action=(torch.rand(size, 2, generator=gen) * 2 - 1 if continuous
                else torch.randint(0, 4, (size,), generator=gen)),
        reward=torch.randn(size, generator=gen),
        next_obs=torch.randint(0, 3, (size, 2), generator=gen).float(),
        terminated=(torch.rand(size, generator=gen) < 0.2).float(),
        discount=torch.full((size,), 0.9),
    )


@pytest.mark.parametrize("name", replay_agents())
def test_flat_gradients_train_as_clip_grad_norm_does(name):
    """Five updates of an agent through LoopedMembers (flat buffer, from the first clipping
    on) and through plain torch calls end with identical weights, to the last bit; the
    reported norms are identical too. A small max norm makes every update clip."""
    agent = agent_of(name, 0)
    members = LoopedMembers([agent])
    target = copy.deepcopy(members)
    plain = copy.deepcopy(agent)
    choose = Utility(0.5, "cvar", {"rho": 0.25}).greedy
    optimizers = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in (members, plain)]
    for update in range(5):
        batch = batch_of(update, continuous=agent.continuous_actions)
        torch.manual_seed(update)  # agents that sample (IQN's fractions) draw the same
        losses, _ = members.loss(Transitions(*(f.unsqueeze(0) for f in batch)), target, choose)
        members.zero_gradients()
        losses.sum().backward()
        norm = members.clip_gradients(0.01)
        optimizers[0].step()

        torch.manual_seed(update)
        loss, _ = plain.loss(batch, target.agents[0], choose)
        optimizers[1].zero_grad(set_to_none=True)
        loss.backward()
        expected = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.01, foreach=True)
        optimizers[1].step()
        assert torch.equal(norm, expected.unsqueeze(0))
    for (key, value), (_, other) in zip(members.agents[0].state_dict().items(),
                                        plain.state_dict().items()):
        assert torch.equal(value, other), key
    gradients = members._member_gradients()[0]
    assert gradients.flat is not None  # the buffer was made and used
    assert all(p.grad is view for p, view in zip(agent.parameters(), gradients.views))


def test_dropped_gradients_are_attached_again():
    """A skipped update drops the gradients (zero_grad(set_to_none=True)): the optimizer
    leaves the parameters alone, and the next zeroing attaches the buffer's views again."""
    net = torch.nn.Linear(3, 2)
    gradients = FlatGradients(list(net.parameters()))
    gradients.zero()
    F.mse_loss(net(torch.ones(4, 3)), torch.zeros(4, 2)).backward()
    gradients.clip(1.0)
    flat = gradients.flat
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    optimizer.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in net.parameters()]
    optimizer.step()
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before))
    gradients.zero()
    assert all(p.grad is view for p, view in zip(net.parameters(), gradients.views))
    F.mse_loss(net(torch.ones(4, 3)), torch.zeros(4, 2)).backward()
    assert gradients.flat is flat and float(flat.abs().sum()) > 0  # backward added into it


def test_a_parameter_without_gradient_keeps_the_usual_path():
    """A parameter the loss leaves out keeps no gradient: no buffer is made, so Adam skips
    that parameter as it does after zero_grad(set_to_none=True)."""
    used, unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    parameters = [*used.parameters(), *unused.parameters()]
    gradients = FlatGradients(parameters)
    optimizer = torch.optim.Adam(parameters, lr=0.1)
    kept = [p.detach().clone() for p in unused.parameters()]
    for _ in range(2):
        gradients.zero()
        F.mse_loss(used(torch.ones(4, 3)), torch.ones(4, 2) * 5).backward()
        norm = gradients.clip(0.5)
        optimizer.step()
        assert gradients.flat is None and float(norm) > 0.5
        assert all(p.grad is None for p in unused.parameters())
    assert all(torch.equal(p, k) for p, k in zip(unused.parameters(), kept))


def test_a_moved_module_gets_a_new_buffer():
    """Moving the parameters (``module.to``, here to another dtype as a stand-in for another
    device) moves their gradients out of the buffer: the next zeroing starts over."""
    net = torch.nn.Linear(3, 2)
    gradients = FlatGradients(list(net.parameters()))
    for _ in range(2):
        gradients.zero()
        F.mse_loss(net(torch.ones(4, 3)), torch.zeros(4, 2)).backward()
        gradients.clip(1.0)
    assert gradients.flat is not None
    net.to(torch.float64)
    fresh = copy.deepcopy(net)
    x, y = torch.ones(4, 3, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.float64)
    gradients.zero()
    F.mse_loss(net(x), y).backward()
    fresh.zero_grad(set_to_none=True)
    F.mse_loss(fresh(x), y).backward()
    # Zeroed, not added to the gradients that moved with the module.
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(net.parameters(), fresh.parameters()))
    gradients.clip(1.0)
    assert gradients.flat.dtype == torch.float64
    assert all(p.grad is view for p, view in zip(net.parameters(), gradients.views))
