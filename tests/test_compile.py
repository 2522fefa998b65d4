"""hardware.compile: the compiled update equals the eager one within float tolerance, a run
compiles a bounded number of graphs (not one per step), and a compiled run resumes exactly.

Compiling takes seconds to a minute a function on a CPU: the default suite compiles DQN's
update; every other agent's, with -m slow."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch._dynamo.utils import counters

from rs_lightning.agents import AGENTS
from rs_lightning.agents.members import make_members
from rs_lightning.app.train import run
from rs_lightning.engine.build import compile_members
from rs_lightning.risk import Utility
from rs_lightning.types import Transitions
from tests.test_parallel_seeds import agent_of

# Every replay agent that compiles: DQN by default, the others with -m slow (a compilation
# each). The UMNN agents stay eager (their compiled_methods are empty).
REPLAY = sorted(name for name, (cls, _) in AGENTS.items() if not getattr(cls, "on_policy", False))
COMPILED = [name for name in REPLAY if AGENTS[name][0].compiled_methods]
CASES = [name if name == "dqn" else pytest.param(name, marks=pytest.mark.slow)
         for name in COMPILED]


def replay_batch(continuous: bool, generator: torch.Generator) -> Transitions:
    """32 transitions of the 3 x 3 grid's cells (repeating states, as the UMNN agents' distinct
    rows expect), a few terminal."""
    obs = torch.randint(0, 3, (1, 32, 2), generator=generator).float()
    next_obs = torch.randint(0, 3, (1, 32, 2), generator=generator).float()
    if continuous:
        action = torch.rand(1, 32, 2, generator=generator) * 2.0 - 1.0
    else:
        action = torch.randint(0, 4, (1, 32), generator=generator)
    terminated = (torch.rand(1, 32, generator=generator) < 0.2).float()
    reward = torch.randn(1, 32, generator=generator) * 0.3
    return Transitions(obs, action, reward, next_obs, terminated, 0.9 * (1.0 - terminated))


def loss_and_gradients(members, batch, choose_action):
    members.zero_gradients()
    losses, _ = members.loss(batch, members, choose_action)
    losses.sum().backward()
    return losses.detach(), [p.grad.clone() for p in members.parameters() if p.grad is not None]


@pytest.mark.parametrize("name", CASES)
def test_compiled_loss_and_gradients_equal_the_eager_ones(name):
    """Three updates' losses and gradients of the compiled members against an eager copy of
    the same members (random draws inside the loss fall back to eager's generator)."""
    # Inductor's own patch, not monkeypatch: pytest >= 9.2 undoes a module attribute that is
    # not in the module's __dict__ by deleting it, which hides the setting for later compiles.
    with torch._inductor.config.patch(fallback_random=True):
        compiled_equals_eager(name)


def compiled_equals_eager(name):
    torch._dynamo.reset()
    settings = {"hidden_sizes": [16, 16]}
    if name in ("rs_umdqn_c", "umdqn_kl", "umdqn_w"):
        settings.update(integrand_hidden_sizes=[16, 16], conditioner_hidden_sizes=[16])
    eager = make_members([agent_of(name, 0, **settings)])
    compiled = copy.deepcopy(eager)
    compile_members(compiled, "cpu")
    choose_action = Utility(0.5, "cvar", {"rho": 0.25}).greedy
    generator = torch.Generator().manual_seed(0)
    continuous = AGENTS[name][0].continuous_actions
    for _ in range(3):
        batch = replay_batch(continuous, generator)
        torch.manual_seed(1)
        expected, expected_grads = loss_and_gradients(eager, batch, choose_action)
        torch.manual_seed(1)
        got, grads = loss_and_gradients(compiled, batch, choose_action)
        assert torch.allclose(got, expected, rtol=1e-4, atol=1e-6), (got, expected)
        assert len(grads) == len(expected_grads)
        for g, e in zip(grads, expected_grads):
            assert torch.allclose(g, e, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", COMPILED)
def test_each_compiled_function_traces_as_one_graph(name):
    """What hardware.compile compiles of an agent (its loss, or an actor-critic's loss past its
    draws, and its return distribution) traces as one graph, with no break: a break splits the
    update into graphs of their own (a CUDA graph each) and reads back to the host between
    them. Tracing only (torch._dynamo.explain), no compilation: a second or two each."""
    settings = {"hidden_sizes": [16, 16]}
    members = make_members([agent_of(name, 0, **settings)])
    agent = members.networks()[0]
    continuous = AGENTS[name][0].continuous_actions
    batch = replay_batch(continuous, torch.Generator().manual_seed(0))
    batch = Transitions(*(field[0] for field in batch))  # one network's rows
    choose_action = Utility(0.5, "cvar", {"rho": 0.25}).greedy
    loss_name, distribution_name = agent.compiled_methods
    arguments = (batch, agent, choose_action)
    if loss_name != "loss":  # an actor-critic's draws at the next states and the states
        arguments += (torch.randn(batch.obs.shape[:-1] + (agent.problem.action_dim,)),) * 2
    for function, args in ((getattr(agent, loss_name), arguments),
                           (getattr(agent, distribution_name), (batch.obs,))):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(function)(*args)
        reasons = [str(reason.reason).splitlines()[0] for reason in explained.break_reasons]
        assert explained.graph_count == 1 and not reasons, (function.__name__, reasons)


@pytest.mark.parametrize("name", sorted(set(REPLAY) - set(COMPILED)))
def test_an_agent_that_stays_eager_says_so(name, capsys):
    """The UMNN agents' lattice is sized by each batch's distinct states: under
    hardware.compile they run eager, and the run says so in one line rather than silently."""
    members = make_members([agent_of(name, 0, hidden_sizes=[16, 16])])
    agent = members.networks()[0]
    loss, distribution = agent.loss, agent.return_distribution
    compile_members(members, "cpu")
    assert agent.loss == loss and agent.return_distribution == distribution  # untouched
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"[rs_lightning] hardware.compile: agent={name} runs eager: ")
    assert "distinct states" in line and "\n" not in line


def compiled_run(compose, folder, *extra):
    return run(compose(["agent=dqn", "debug=quick", "logger=none", "callbacks.progress_bar=false",
                        "hardware.compile=true", "evaluation.episodes=50", *extra]),
               run_dir=folder)


def test_a_compiled_run_compiles_a_few_graphs_not_one_a_step(compose, tmp_path):
    """60 updates (and their acting, and an evaluation) of a compiled DQN run: each compiled
    function compiles once, and once more where an evaluation's batch of environments gives
    the acting a new shape; a recompilation per step would make it dozens."""
    torch._dynamo.reset()
    counters.clear()
    compiled_run(compose, tmp_path / "run", "trainer.max_steps=60", "evaluation.every_n_steps=30")
    graphs = counters["stats"]["unique_graphs"]
    assert 2 <= graphs <= 6, dict(counters["stats"])


@pytest.mark.slow
def test_a_compiled_run_resumes_to_the_same_results(compose, tmp_path):
    """A compiled DQN run resumed from its checkpoint at update 50 ends as the uninterrupted
    compiled run does."""
    torch._dynamo.reset()
    extra = ["trainer.max_steps=100", "trainer.checkpoint_every_n_steps=50",
             "evaluation.every_n_steps=0"]
    full = compiled_run(compose, tmp_path / "full", *extra)
    checkpoint = tmp_path / "full" / "checkpoints" / "step0000050.ckpt"
    assert checkpoint.exists()
    resumed = compiled_run(compose, tmp_path / "resumed", *extra, f"ckpt_path={checkpoint}")
    assert json.loads((tmp_path / "resumed" / "eval.json").read_text()) == \
        json.loads((tmp_path / "full" / "eval.json").read_text())
    assert resumed == full
