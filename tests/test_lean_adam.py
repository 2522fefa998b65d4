"""LeanAdam: torch's fused Adam step without its per-step Python, the same numbers to the
bit, and the full step wherever something hooks into it."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

from rs_lightning.engine import learner
from rs_lightning.engine.learner import LeanAdam


def network(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def backward(net: torch.nn.Module, x: torch.Tensor, set_to_none: bool) -> None:
    for p in net.parameters():
        if set_to_none or p.grad is None:
            p.grad = None
        else:
            p.grad.zero_()  # the gradients stay the same tensors (as FlatGradients keeps them)
    net(x).pow(2).mean().backward()


def test_lean_steps_are_torchs_fused_adam_to_the_bit(monkeypatch):
    full_steps = []
    original = learner._ADAM_STEP_WITH_HOOKS
    monkeypatch.setattr(learner, "_ADAM_STEP_WITH_HOOKS",
                        lambda *args, **kwargs: full_steps.append(1) or original(*args, **kwargs))
    for set_to_none in (False, True):
        full_steps.clear()
        torch_net, lean_net = network(), network()
        options = dict(lr=1e-3, eps=1e-5, weight_decay=0.01, fused=True)
        torch_adam = torch.optim.Adam(torch_net.parameters(), **options)
        lean_adam = LeanAdam(lean_net.parameters(), **options)
        x = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
        for step in range(40):
            for net, optimizer in ((torch_net, torch_adam), (lean_net, lean_adam)):
                backward(net, x, set_to_none)
                optimizer.step()
                if step == 15:  # a learning-rate schedule writes the groups
                    optimizer.param_groups[0]["lr"] = 3e-4
            if step == 25:  # a resumed run loads a saved state: new moment tensors
                lean_adam.load_state_dict(copy.deepcopy(lean_adam.state_dict()))
        for p, q in zip(torch_net.parameters(), lean_net.parameters()):
            assert torch.equal(p, q)
        saved, lean_saved = torch_adam.state_dict(), lean_adam.state_dict()
        assert saved["param_groups"] == lean_saved["param_groups"]
        for index, state in saved["state"].items():
            for name, value in state.items():
                assert torch.equal(value, lean_saved["state"][index][name]), (index, name)
        # The full step only once: the first, which makes the state (a load keeps it lean).
        assert len(full_steps) == 1


def test_a_closure_runs_first_and_hooks_get_the_full_step():
    net = network()
    adam = LeanAdam(net.parameters(), lr=1e-3, fused=True)
    x = torch.randn(8, 4)
    calls = []

    def closure():
        calls.append("closure")
        backward(net, x, set_to_none=False)
        return 7.0

    assert adam.step(closure) == 7.0 and adam.step(closure) == 7.0
    assert calls == ["closure", "closure"]
    handle = adam.register_step_pre_hook(lambda *args: calls.append("pre-hook"))
    adam.step(closure)
    assert calls[2:] == ["pre-hook", "closure"]
    handle.remove()
    adam.step(closure)
    assert calls[4:] == ["closure"]


def test_make_optimizer_takes_it_for_fused_adam_only():
    net = network()

    class Members(torch.nn.Module):  # make_optimizer reads parameters() only
        def __init__(self):
            super().__init__()
            self.net = net

    fused = learner.make_optimizer(Members(), SimpleNamespace(lr=1e-3, adam_eps=1e-5,
                                                              fused_adam=True))
    plain = learner.make_optimizer(Members(), SimpleNamespace(lr=1e-3, adam_eps=1e-5,
                                                              fused_adam=False))
    assert type(fused) is LeanAdam and type(plain) is torch.optim.Adam


def test_what_replaces_a_parameter_state_or_setting_is_seen():
    """A copy, a parameter swapped into a group, a state tensor written anew or a setting
    changed on a live group: LeanAdam steps as torch's Adam then does."""
    import pickle

    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(2))

    def pair():
        nets = network(), network()
        return nets, [cls(net.parameters(), lr=1e-3, fused=True)
                      for cls, net in zip((torch.optim.Adam, LeanAdam), nets)]

    def step_both(nets, optimizers):
        for net, optimizer in zip(nets, optimizers):
            backward(net, x, set_to_none=False)
            optimizer.step()

    def assert_same(nets, optimizers):
        for p, q in zip(*(net.parameters() for net in nets)):
            assert torch.equal(p, q)
        for (_, a), (_, b) in zip(*(sorted(o.state_dict()["state"].items()) for o in optimizers)):
            assert all(torch.equal(a[name], b[name]) for name in a)

    nets, optimizers = pair()
    step_both(nets, optimizers)
    step_both(nets, optimizers)
    for copied in (copy.deepcopy(optimizers[1]), pickle.loads(pickle.dumps(optimizers[1]))):
        copied.step()  # a copy steps its own tensors (it gathers anew)
    for optimizer in optimizers:  # a state entry written anew
        state = optimizer.state[optimizer.param_groups[0]["params"][0]]
        state["step"] = torch.tensor(100.0)
        state["exp_avg_sq"] = state["exp_avg_sq"].clone()
    step_both(nets, optimizers)
    assert_same(nets, optimizers)
    for net, optimizer in zip(nets, optimizers):  # a parameter swapped into the group
        old = optimizer.param_groups[0]["params"][0]
        new = torch.nn.Parameter(old.detach().clone())
        new.grad = old.grad
        optimizer.state[new] = optimizer.state.pop(old)
        optimizer.param_groups[0]["params"][0] = new
        net[0].weight = new
    step_both(nets, optimizers)
    assert_same(nets, optimizers)
    for optimizer in optimizers:  # AdamW's decoupled decay on a live group
        optimizer.param_groups[0].update(weight_decay=0.1, decoupled_weight_decay=True)
    step_both(nets, optimizers)
    assert_same(nets, optimizers)


def test_members_adam_keeps_its_views_and_steps_to_the_bit(monkeypatch):
    """Stacked members' Adam: the kept views and counts take the same steps as viewing and
    counting anew each step (its step before), with gradients new after every backward, a
    learning-rate change and a loaded state."""
    from functools import partial

    from rs_lightning.agents.members import member_views
    from rs_lightning.engine.learner import MembersAdam

    def stacked(seed: int) -> list[torch.nn.Parameter]:
        generator = torch.Generator().manual_seed(seed)
        # [3, 16, 4]: a member's slice is 64 elements (whole); [3, 5] and [3, 3, 16]: not.
        return [torch.nn.Parameter(torch.randn(shape, generator=generator))
                for shape in ((3, 16, 4), (3, 5), (3, 3, 16))]

    fresh_steps = []
    original = MembersAdam._step_group

    def counted(self, group):
        fresh_steps.append(self)
        return original(self, group)

    monkeypatch.setattr(MembersAdam, "_step_group", counted)
    runs = []
    for kept in (False, True):
        params = stacked(0)
        members = SimpleNamespace(parameters=lambda params=params: iter(params),
                                  elementwise_views=partial(member_views, members=3))
        optimizer = MembersAdam(members, lr=1e-3, eps=1e-5, weight_decay=0.01, fused=True)
        if not kept:  # the step before: everything viewed and counted anew each step
            monkeypatch.setattr(optimizer, "_views_of", lambda group: None)
        x = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
        for step in range(40):
            for p in params:
                p.grad = None  # as stacked members clear them: new gradients each backward
            loss = sum((p.flatten(1) * x[:, :p[0].numel()]).sin().sum() for p in params)
            loss.backward()
            optimizer.step()
            if step == 15:
                optimizer.param_groups[0]["lr"] = 3e-4
            if step == 25:
                optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))
        runs.append((params, optimizer.state_dict()))
    (before, saved), (after, kept_saved) = runs
    for p, q in zip(before, after):
        assert torch.equal(p, q)
    for index, state in saved["state"].items():
        for name, value in state.items():
            assert torch.equal(value, kept_saved["state"][index][name]), (index, name)
    assert float(kept_saved["state"][0]["step"]) == 40
    # The kept run stepped anew only at its first step (which makes the state).
    kept_optimizer_steps = [o for o in fresh_steps if o is not fresh_steps[0]]
    assert len(kept_optimizer_steps) == 1
