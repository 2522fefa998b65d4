"""A run's budgets, checked before anything is allocated: a UMNN agent's integration lattice
(``limits.lattice_nodes`` nodes per state) and its memory, estimated and compared with what the
machine has (``limits.memory_fraction`` of it). A replay capacity, rollouts, a network or a
lattice too large is refused in one line instead of running for minutes, failing or swapping.

The estimates are lower bounds of the largest allocations, not of everything a run holds.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rs_lightning.agents import AGENTS
from rs_lightning.config.schema import ValidatedConfig
from rs_lightning.errors import ConfigError
from rs_lightning.types import Problem

FLOAT_BYTES = 4
# A network's parameters are held five times while training: online, target, gradient and
# Adam's two moments.
TRAINING_COPIES = 5


def check_lattice(run_config: ValidatedConfig) -> None:
    """ConfigError if the agent's integration lattice has more nodes per state than
    ``limits.lattice_nodes`` (agents without a lattice have none)."""
    agent, env, limits = run_config.agent, run_config.train.env, run_config.train.limits
    nodes = agent.lattice_nodes(env.return_min, env.return_max)
    if nodes <= limits.lattice_nodes:
        return
    low, high, keys = agent.lattice_span(env.return_min, env.return_max)
    span = max(high, 0.0) - min(low, 0.0)
    raise ConfigError(
        "agent.integration_step",
        f"the UMNN lattice would have {count(nodes)} nodes per state ({keys} span {span:g} "
        f"every {agent.integration_step:g}), over limits.lattice_nodes={limits.lattice_nodes};"
        f" raise agent.integration_step to at least {round_up(span / max(limits.lattice_nodes - 1, 1)):g}, "
        f"narrow {keys} or raise limits.lattice_nodes")


def count(value: float) -> str:
    """A count as people write it: 10,001, or 4e+09 past a trillion."""
    return f"{round(value):,}" if value < 1e12 else f"{value:.3g}"


def round_up(value: float, digits: int = 2) -> float:
    """``value`` rounded up to ``digits`` significant digits (a step that keeps within budget)."""
    scale = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return math.ceil(value / scale - 1e-9) * scale


def replay_bytes(run_config: ValidatedConfig, problem: Problem) -> int:
    """Every member's replay memory (rs_lightning.engine.replay): observation and next observation
    in float32 (one byte each for whole numbers in 0..255, ``problem.obs_uint8``), action in
    int64, reward and termination in float32, for each transition."""
    train = run_config.train
    obs_bytes = 1 if problem.obs_uint8 else FLOAT_BYTES
    per_transition = 2 * problem.obs_dim * obs_bytes + 8 + 2 * FLOAT_BYTES
    return train.learning.replay_capacity * train.parallel_seeds * per_transition


def rollout_bytes(run_config: ValidatedConfig, problem: Problem) -> int:
    """Every member's rollout (rs_lightning.engine.rollout_buffer): N copies x T steps of
    the observation seen and the state reached in float32, the action, and seven numbers
    (log-probability, reward, ends, advantage, return, a value), the critic's atoms left
    out."""
    train = run_config.train
    per_step = (2 * problem.obs_dim + max(problem.action_dim, 1) + 7) * FLOAT_BYTES
    steps = run_config.agent.rollout_steps * train.env.num_envs
    return steps * train.parallel_seeds * per_step


def buffer_bytes(run_config: ValidatedConfig, problem: Problem) -> dict[str, int]:
    """The collector's buffer, under the key that sizes it: the replay memory, or an
    on-policy agent's rollouts."""
    if AGENTS[run_config.agent.name][0].on_policy:
        return {"agent.rollout_steps": rollout_bytes(run_config, problem)}
    return {"learning.replay_capacity": replay_bytes(run_config, problem)}


def network_bytes(run_config: ValidatedConfig, problem: Problem) -> int:
    """The members' networks while training, counted on the meta device (no memory used)."""
    agent_class = AGENTS[run_config.agent.name][0]
    with torch.device("meta"):
        agent = agent_class(run_config.agent, problem)
    numbers = sum(p.numel() for p in agent.parameters())
    buffers = sum(b.numel() for b in agent.buffers())
    return run_config.train.parallel_seeds * (TRAINING_COPIES * numbers + buffers) * FLOAT_BYTES


def lattice_bytes(run_config: ValidatedConfig) -> int:
    """A UMNN agent's integrand on its lattice (agents.umnn.lattice_nodes, the rule of
    ``limits.lattice_nodes``): each hidden layer's activations at every node for every
    state of an evaluation batch or a training batch, for every member."""
    train, agent = run_config.train, run_config.agent
    nodes = agent.lattice_nodes(train.env.return_min, train.env.return_max)
    if not nodes:
        return 0
    states = max(train.learning.batch_size, train.evaluation.batch_envs)
    width = sum(agent.integrand_hidden_sizes)
    return int(nodes * states * width * FLOAT_BYTES * train.parallel_seeds)


def host_memory() -> tuple[int, str] | None:
    """The memory of this machine a run may take and where the figure comes from; None if
    unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available), "psutil's available memory"


def gpu_memory() -> tuple[int, str] | None:
    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return int(free), "free GPU memory"


def human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000:
            return f"{size:.3g} {unit}"
        size /= 1000
    return f"{size:.3g} PB"


_WHAT = {"learning.replay_capacity": "the replay memory", "agent.rollout_steps": "the rollouts",
         "agent.hidden_sizes": "the networks",
         "agent.integration_step": "the UMNN lattice"}


def check_resources(run_config: ValidatedConfig, problem: Problem) -> None:
    """Every budget of the run (ConfigError naming the key of the first one exceeded)."""
    check_lattice(run_config)
    check_memory(run_config, problem)


def check_memory(run_config: ValidatedConfig, problem: Problem,
                 host: tuple[int, str] | None = None, gpu: tuple[int, str] | None = None) -> None:
    """ConfigError naming the key of the largest estimate where the run's estimated memory
    exceeds ``limits.memory_fraction`` of the available memory (``host`` and ``gpu``:
    measured here unless given). The replay memory (or the rollouts) lives in the host's
    memory, the networks and the lattice on the run's device."""
    train = run_config.train
    replay = buffer_bytes(run_config, problem)
    model = {"agent.hidden_sizes": network_bytes(run_config, problem),
             "agent.integration_step": lattice_bytes(run_config)}
    on_gpu = train.hardware.accelerator in ("gpu", "cuda")
    host = host or host_memory()
    if on_gpu:
        _check_within(replay, host, run_config)
        _check_within(model, gpu or gpu_memory(), run_config)
    else:
        _check_within({**replay, **model}, host, run_config)


def _check_within(estimates: dict[str, int], available: tuple[int, str] | None,
                  run_config: ValidatedConfig) -> None:
    if available is None:
        return
    fraction = run_config.train.limits.memory_fraction
    limit = fraction * available[0]
    total = sum(estimates.values())
    if total <= limit:
        return
    key, largest = max(estimates.items(), key=lambda item: item[1])
    members = run_config.train.parallel_seeds
    lower = key
    if key == "agent.hidden_sizes":  # the networks: every key that sizes them
        sizes = [f"agent.{name}" for name in run_config.agent.NETWORK_SIZES]
        lower = ", ".join(sizes[:-1]) + " or " + sizes[-1] if len(sizes) > 1 else sizes[0]
    raise ConfigError(
        key, f"the run needs about {human(total)} ({_WHAT[key]}: {human(largest)}"
        + (f" for parallel_seeds={members}" if members > 1 else "")
        + f"), more than limits.memory_fraction={fraction:g} of the {human(available[0])} "
        f"available ({available[1]}), {human(limit)}; lower {lower}")
