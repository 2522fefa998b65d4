"""The typed schema behind the YAML config, and its validation.

Defaults live only in ``conf/`` (one source of truth); these dataclasses give every key its
type and its allowed range. :func:`validate` turns a composed config into typed objects or
raises :class:`ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rs_lightning.agents import AGENTS, AgentConfig
from rs_lightning.agents.networks import NetworkConfig
from rs_lightning.config.derived_defaults import register_resolvers
from rs_lightning.config.plugins import import_plugins
from rs_lightning.envs.device_worlds import ENV_BACKENDS
from rs_lightning.envs.gym_support import OBSERVATION_NORMALIZATIONS
from rs_lightning.errors import ConfigError
from rs_lightning.objectives import OBJECTIVES, Objective
from rs_lightning.risk import RISK_MEASURES, Utility
from rs_lightning.types import Problem

register_resolvers()  # the rs.* interpolations of conf/ (derived defaults)


def _require(ok: bool, key: str, allowed: str, value: Any) -> None:
    if not ok:
        raise ConfigError(key, f"must be {allowed}, got {value!r}")


def _one_of(key: str, value: Any, allowed) -> None:
    _require(value in allowed, key, "one of " + ", ".join(map(str, allowed)), value)


def _at_most(key: str, value: int, limit: int, why: str) -> None:
    _require(value <= limit, key, f"at most {limit} ({why})", value)


# Bounds checked before anything is allocated (docs/guides/resume.md, "Bounds checked before anything is allocated"): the seeds NumPy and
# Lightning accept, the largest magnitude of a return support in float32 arithmetic with
# steps of order 1, and counts past which a run would only be slow for minutes, then fail.
SEED_LIMIT = 2**32  # numpy.random.seed and pytorch_lightning.seed_everything: [0, 2^32)
RETURN_LIMIT = 1e6
MAX_PARALLEL_SEEDS = 256
MAX_NUM_ENVS = 4096
MAX_BATCH_ENVS = 65536
MAX_TORCH_THREADS = 1024
MAX_N_STEP = 1000


def check_finite(node: Any, key: str = "") -> None:
    """ConfigError naming the first float below ``node`` (a dataclass, dict or list) that is
    infinite or NaN: no key of the config takes one."""
    if dataclasses.is_dataclass(node):
        items = ((f.name, getattr(node, f.name)) for f in dataclasses.fields(node))
    elif isinstance(node, dict):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        items = ((f"[{i}]", value) for i, value in enumerate(node))
    else:
        if isinstance(node, float) and not math.isfinite(node):
            raise ConfigError(key, f"must be a finite number, got {node}")
        return
    for name, value in items:
        if key.endswith("env") and name in ("kwargs", "training_kwargs"):
            continue  # the environment's own arguments: gymnasium checks them
        sub = f"{key}{name}" if name.startswith("[") else f"{key}.{name}" if key else str(name)
        check_finite(value, sub)


@dataclass
class EnvSection:
    id: str = MISSING  # a registered gymnasium id
    kwargs: Dict[str, Any] = field(default_factory=dict)  # passed to gymnasium.make
    # Merged over kwargs for the copies that collect experience, never for an evaluation:
    # training conditions that must not change what is measured (exploring starts).
    training_kwargs: Dict[str, Any] = field(default_factory=dict)
    gamma: float = MISSING
    reward_clip: Optional[float] = MISSING  # |r| clipped for learning; null: no clipping
    return_min: float = MISSING  # support of the learnt return distribution
    return_max: float = MISSING
    grid_size: Optional[int] = None  # grid worlds: write policy.json for every cell
    # Keys of any gymnasium environment (docs/guides/environments.md, "Any gymnasium environment").
    reward_scale: float = MISSING  # rewards are multiplied by it (then clipped) for learning
    max_episode_steps: Optional[int] = MISSING  # time limit (truncation); null: the env's own
    observation_normalization: str = MISSING  # none | bounds (finite Box bounds onto [-1, 1])
    num_envs: int = MISSING  # environment copies stepped together for collection (SyncVectorEnv)
    backend: str = MISSING  # gymnasium | torch: the package's worlds as tensors on the device

    def check(self) -> None:
        _require(0.0 <= self.gamma < 1.0, "env.gamma", "in [0, 1)", self.gamma)
        _require(0 < self.reward_scale <= RETURN_LIMIT, "env.reward_scale",
                 f"positive and at most {RETURN_LIMIT:g}", self.reward_scale)
        if self.max_episode_steps is not None:
            _require(self.max_episode_steps > 0, "env.max_episode_steps", "a positive integer or null",
                     self.max_episode_steps)
        _one_of("env.observation_normalization", self.observation_normalization,
                OBSERVATION_NORMALIZATIONS)
        _require(self.num_envs >= 1, "env.num_envs", "a positive integer", self.num_envs)
        _one_of("env.backend", self.backend, ENV_BACKENDS)
        _at_most("env.num_envs", self.num_envs, MAX_NUM_ENVS,
                 "copies stepped one after the other in this process")
        if self.reward_clip is not None:
            _require(self.reward_clip > 0, "env.reward_clip", "positive or null", self.reward_clip)
        for key in ("return_min", "return_max"):
            value = getattr(self, key)
            _require(abs(value) <= RETURN_LIMIT, f"env.{key}",
                     f"within [-{RETURN_LIMIT:g}, {RETURN_LIMIT:g}] (scaled units: shrink large "
                     "returns with env.reward_scale)", value)
        _require(
            self.return_min < self.return_max,
            "env.return_min",
            f"below env.return_max={self.return_max}",
            self.return_min,
        )


# stop: end the run with an error naming the step (the last good checkpoint stays);
# skip: drop that update (no parameter change) and count it.
NON_FINITE_ACTIONS = ("stop", "skip")
LR_SCHEDULES = ("constant", "linear")  # rs_lightning.engine.learner.learning_rate


@dataclass
class LearningSection:
    batch_size: int = MISSING
    replay_capacity: int = MISSING
    warmup_steps: int = MISSING  # environment steps before the first update
    lr: float = MISSING
    lr_schedule: str = MISSING  # constant | linear (to 0 at trainer.max_steps)
    adam_eps: float = MISSING
    fused_adam: bool = MISSING
    grad_clip_norm: float = MISSING
    target_update_period: int = MISSING  # gradient updates between target copies
    epsilon_start: float = MISSING
    epsilon_end: float = MISSING
    epsilon_decay: float = MISSING  # in environment steps
    epsilon_schedule: str = MISSING  # exponential | linear
    on_non_finite: str = MISSING  # stop | skip: what a NaN / inf loss or gradient does
    updates_per_step: float = MISSING  # gradient updates per environment step (0.125: 1 per 8)
    n_step: int = MISSING  # steps of the discounted return in each stored transition
    # Each target update moves the target weights this share of the way toward the learned
    # ones: 1 copies them (DQN), 0.005 every update is SAC's Polyak averaging.
    target_update_rate: float = MISSING

    def check(self) -> None:
        for key in ("batch_size", "replay_capacity", "target_update_period"):
            value = getattr(self, key)
            _require(value > 0, f"learning.{key}", "a positive integer", value)
        _require(self.warmup_steps >= 0, "learning.warmup_steps", ">= 0", self.warmup_steps)
        _require(
            self.batch_size <= self.replay_capacity,
            "learning.batch_size",
            f"at most learning.replay_capacity={self.replay_capacity}",
            self.batch_size,
        )
        for key in ("lr", "adam_eps", "grad_clip_norm", "epsilon_decay"):
            value = getattr(self, key)
            _require(value > 0, f"learning.{key}", "positive", value)
        for key in ("epsilon_start", "epsilon_end"):
            value = getattr(self, key)
            _require(0.0 <= value <= 1.0, f"learning.{key}", "in [0, 1]", value)
        _one_of("learning.epsilon_schedule", self.epsilon_schedule, ("exponential", "linear"))
        _one_of("learning.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _one_of("learning.on_non_finite", self.on_non_finite, NON_FINITE_ACTIONS)
        # Read as a fraction of denominator up to 10^6 (rs_lightning.engine.experience).
        _require(math.isfinite(self.updates_per_step) and self.updates_per_step >= 1e-6,
                 "learning.updates_per_step", "a positive number (at least 1e-6; 0.125: one "
                 "update every 8 environment steps)", self.updates_per_step)
        _require(0.0 < self.target_update_rate <= 1.0, "learning.target_update_rate",
                 "in (0, 1] (1: copy the weights; 0.005: Polyak averaging)",
                 self.target_update_rate)
        _require(self.n_step >= 1, "learning.n_step", "a positive integer (1: one-step returns)",
                 self.n_step)
        _at_most("learning.n_step", self.n_step, min(MAX_N_STEP, self.replay_capacity),
                 f"each copy's window of n steps costs O(n) a step; at most {MAX_N_STEP} and "
                 f"learning.replay_capacity={self.replay_capacity}")
        _at_most("learning.warmup_steps", self.warmup_steps, self.replay_capacity,
                 f"learning.replay_capacity={self.replay_capacity}: the transitions beyond it "
                 "would be overwritten before the first update")


@dataclass
class EvaluationSection:
    episodes: int = MISSING  # Monte Carlo episodes of the final evaluation
    every_n_steps: int = MISSING  # 0: only at the end
    episodes_during_training: int = MISSING
    batch_envs: int = MISSING  # environments stepped side by side

    def check(self) -> None:
        for key in ("episodes", "episodes_during_training", "batch_envs"):
            value = getattr(self, key)
            _require(value > 0, f"evaluation.{key}", "a positive integer", value)
        _require(self.every_n_steps >= 0, "evaluation.every_n_steps", ">= 0", self.every_n_steps)
        _at_most("evaluation.batch_envs", self.batch_envs, MAX_BATCH_ENVS,
                 "environments stepped side by side")


@dataclass
class TrainerSection:
    max_steps: int = MISSING  # gradient updates
    log_every_n_steps: int = MISSING
    checkpoint_every_n_steps: int = MISSING  # 0: only the final checkpoint
    checkpoint_every_minutes: float = MISSING  # last.ckpt on a wall-clock period (0: none)
    stop_at_return: Optional[float] = MISSING  # end at the first evaluation reaching it
    max_time: Optional[str] = MISSING  # wall-clock budget: seconds, HH:MM:SS or DD:HH:MM:SS

    def check(self) -> None:
        _require(self.max_steps > 0, "trainer.max_steps", "a positive integer", self.max_steps)
        _require(
            self.log_every_n_steps > 0,
            "trainer.log_every_n_steps",
            "a positive integer",
            self.log_every_n_steps,
        )
        _require(
            self.checkpoint_every_n_steps >= 0,
            "trainer.checkpoint_every_n_steps",
            ">= 0",
            self.checkpoint_every_n_steps,
        )
        _require(math.isfinite(self.checkpoint_every_minutes) and self.checkpoint_every_minutes >= 0,
                 "trainer.checkpoint_every_minutes", "a number of minutes >= 0",
                 self.checkpoint_every_minutes)
        if self.max_time is not None:
            max_time_seconds(self.max_time)
        if self.stop_at_return is not None:
            _require(math.isfinite(self.stop_at_return), "trainer.stop_at_return",
                     "a finite number or null", self.stop_at_return)


def max_time_seconds(text: str) -> float:
    """``trainer.max_time`` in seconds: a number of seconds, ``HH:MM:SS`` or ``DD:HH:MM:SS``
    (ConfigError otherwise)."""
    parts = str(text).strip().split(":")
    units = (1, 60, 3600, 86400)
    try:
        if len(parts) not in (1, 3, 4) or any(not p.strip() for p in parts):
            raise ValueError
        seconds = sum(float(p) * unit for p, unit in zip(reversed(parts), units))
    except ValueError:
        seconds = float("nan")
    _require(math.isfinite(seconds) and seconds > 0, "trainer.max_time",
             "a positive number of seconds, HH:MM:SS or DD:HH:MM:SS, or null", text)
    return seconds


ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")
# The agents, buffers, targets and risk measures compute in float32 (mixed precision runs its
# matrix products in 16 bits within it): no float64 setting.
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")


@dataclass
class HardwareSection:
    accelerator: str = MISSING
    devices: int = MISSING
    precision: str = MISSING
    torch_threads: int = MISSING  # CPU threads for torch; 1 is fastest for small models
    compile: bool = MISSING  # torch.compile the agent

    def check(self) -> None:
        _one_of("hardware.accelerator", self.accelerator, ACCELERATORS)
        _one_of("hardware.precision", self.precision, PRECISIONS)
        # One run is one environment stream and one learner: it uses one device. Several
        # GPUs serve several runs at once (hydra/launcher=joblib, one job per GPU).
        _require(self.devices == 1, "hardware.devices", "1 (one device per run)", self.devices)
        _require(
            self.torch_threads >= 1, "hardware.torch_threads", "a positive integer", self.torch_threads
        )
        _at_most("hardware.torch_threads", self.torch_threads, MAX_TORCH_THREADS, "CPU threads")
        if self.accelerator in ("gpu", "cuda"):
            available = torch.cuda.device_count()
            if available == 0:
                raise ConfigError(
                    "hardware", "a GPU option was chosen but this machine has no CUDA device; "
                    "use hardware=cpu"
                )
        if self.accelerator == "mps" and not torch.backends.mps.is_available():
            raise ConfigError("hardware.accelerator", "mps needs Apple's Metal (MPS) device, "
                              "which this machine lacks; use hardware=cpu (or auto)")


LOGGER_BACKENDS = ("wandb", "csv", "tensorboard", "none")


@dataclass
class LoggerSection:
    backend: str = MISSING  # wandb | csv | tensorboard | none
    project: str = MISSING
    entity: Optional[str] = MISSING
    offline: bool = MISSING  # W&B offline mode: no account, `wandb sync` later
    group: Optional[str] = MISSING  # null: the sweep's folder name in a multirun
    tags: List[str] = field(default_factory=list)
    # Seconds to reach the W&B server when online; past them the run logs offline instead.
    online_timeout: float = MISSING
    # W&B: the final evaluation logs a video of one episode of the greedy policy.
    video: bool = MISSING

    def check(self) -> None:
        _one_of("logger.backend", self.backend, LOGGER_BACKENDS)
        if self.backend == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("logger.backend", "tensorboard needs the tensorboard package: "
                              "pip install 'rs-lightning[tensorboard]'")
        _require(self.online_timeout > 0, "logger.online_timeout", "positive (seconds)",
                 self.online_timeout)


@dataclass
class CallbacksSection:
    progress_bar: bool = MISSING
    progress_refresh_seconds: float = MISSING


@dataclass
class FaultInjectionSection:
    """Hooks for the tests of the fault handling: they break a run on purpose (null: off)."""

    nan_loss_at_step: Optional[int] = MISSING  # the loss of this update becomes NaN
    nan_parameters_at_step: Optional[int] = MISSING  # the parameters become NaN after it

    def check(self) -> None:
        for key in ("nan_loss_at_step", "nan_parameters_at_step"):
            value = getattr(self, key)
            if value is not None:
                _require(value > 0, f"fault_injection.{key}", "a positive step or null", value)


# What a job can return to a sweeper (train.py): a metric of eval.json; the grid worlds
# (env.grid_size set) also have the risk outcome and the exact metrics.
OBJECTIVE_METRICS = ("utility", "expectation", "var", "cvar")
GRID_OBJECTIVE_METRICS = ("risk_outcome", "exact_utility", "exact_expectation", "exact_var",
                          "exact_cvar", "exact_risk_outcome")
OBJECTIVE_EVALUATIONS = ("final", "best")


@dataclass
class ObjectiveSection:
    metric: str = MISSING
    evaluation: str = MISSING  # final: eval.json; best: the best periodic or final evaluation

    def check(self, grid_world: bool) -> None:
        if self.metric in GRID_OBJECTIVE_METRICS and not grid_world:
            raise ConfigError("search_objective.metric", f"{self.metric!r} exists only on the grid "
                              "worlds (exact_* and risk_outcome); allowed here: "
                              + ", ".join(OBJECTIVE_METRICS))
        _one_of("search_objective.metric", self.metric, OBJECTIVE_METRICS + GRID_OBJECTIVE_METRICS)
        _one_of("search_objective.evaluation", self.evaluation, OBJECTIVE_EVALUATIONS)


@dataclass
class LimitsSection:
    """Budgets a run is checked against before it allocates anything (docs/guides/resume.md, "Bounds checked before anything is allocated")."""

    # Integration nodes per state of a UMNN agent's lattice on the return support
    # (agents.umnn.lattice_nodes): its evaluation's time and memory grow with it.
    lattice_nodes: int = MISSING
    # The run's estimated memory (replay, networks, lattice) may use this share of the
    # memory available when it starts (MemAvailable; the GPU's free memory on a GPU).
    memory_fraction: float = MISSING

    def check(self) -> None:
        _require(self.lattice_nodes > 0, "limits.lattice_nodes", "a positive integer",
                 self.lattice_nodes)
        _require(0 < self.memory_fraction <= 1, "limits.memory_fraction", "in (0, 1]",
                 self.memory_fraction)


@dataclass
class StaticObjectiveSection:
    """The thresholds of ``objective=static`` (docs/guides/objectives.md)."""

    uniform_share: float = MISSING  # training episodes whose threshold is drawn uniformly
    thresholds: int = MISSING  # candidate thresholds searched at an episode's start

    def check(self) -> None:
        _require(0.0 <= self.uniform_share <= 1.0, "static_objective.uniform_share", "in [0, 1]",
                 self.uniform_share)
        _require(2 <= self.thresholds <= 4096, "static_objective.thresholds",
                 "an integer in [2, 4096]", self.thresholds)


@dataclass
class TrainConfig:
    plugins: List[str] = MISSING  # the project's own modules, imported first (config/plugins.py)
    seed: int = MISSING
    parallel_seeds: int = MISSING  # seeds seed .. seed + K - 1 side by side in one process
    alpha: float = MISSING  # U = alpha E + (1 - alpha) R
    rho: float = MISSING  # level of VaR / CVaR
    ckpt_path: Optional[str] = MISSING  # resume from this Lightning checkpoint
    env: EnvSection = MISSING
    agent: Dict[str, Any] = MISSING  # typed by the agent's own config class
    risk: Dict[str, Any] = MISSING  # name + the measure's parameters
    learning: LearningSection = MISSING
    evaluation: EvaluationSection = MISSING
    trainer: TrainerSection = MISSING
    hardware: HardwareSection = MISSING
    logger: LoggerSection = MISSING
    callbacks: CallbacksSection = MISSING
    fault_injection: FaultInjectionSection = MISSING
    limits: LimitsSection = MISSING
    search_objective: ObjectiveSection = MISSING
    network: NetworkConfig = MISSING  # the state torso of every agent (conf/network/)
    # The settings a risk-conditioned agent trains on (agent.risk_conditioned).
    risk_conditioning: Dict[str, Any] = MISSING
    objective: str = MISSING  # what the agent optimises (rs_lightning.objectives)
    static_objective: StaticObjectiveSection = MISSING

    def check(self) -> None:
        _require(0.0 <= self.alpha <= 1.0, "alpha", "in [0, 1]", self.alpha)
        _require(0.0 < self.rho < 1.0, "rho", "in (0, 1), excluding both ends", self.rho)
        _require(self.seed >= 0, "seed", "a non-negative integer", self.seed)
        _require(self.parallel_seeds >= 1, "parallel_seeds", "a positive integer", self.parallel_seeds)
        _at_most("parallel_seeds", self.parallel_seeds, MAX_PARALLEL_SEEDS,
                 "members trained side by side in one process")
        for section in (
            self.env, self.learning, self.evaluation, self.trainer, self.hardware, self.logger,
            self.fault_injection, self.limits,
        ):
            section.check()
        if self.trainer.stop_at_return is not None:
            _require(self.evaluation.every_n_steps > 0, "trainer.stop_at_return",
                     "null without periodic evaluations (it is checked at each one: set "
                     "evaluation.every_n_steps > 0)", self.trainer.stop_at_return)

        # The largest seed the run derives: its members' seeds seed .. seed + K - 1, each
        # seeding its environment copies with + 0 .. num_envs - 1 and its generators with
        # + 1 and + 2 (rs_lightning.engine.experience, engine.behaviour).
        largest = self.seed + self.parallel_seeds - 1 + max(self.env.num_envs - 1, 2)
        _require(largest < SEED_LIMIT, "seed",
                 f"such that every seed the run derives (up to seed + parallel_seeds - 1 + "
                 f"{largest - self.seed - self.parallel_seeds + 1} = {largest}) stays below 2^32 "
                 f"= {SEED_LIMIT}, NumPy's range", self.seed)

        self.search_objective.check(grid_world=bool(self.env.grid_size))
        _one_of("objective", self.objective, selectable_objectives())
        self.static_objective.check()
        _check_section(self.network.check)


def _check_section(check, *args) -> None:
    """A core config's check (ValueError "key: message") as a ConfigError naming the key."""
    try:
        check(*args)
    except ValueError as error:
        key, _, message = str(error).partition(": ")
        raise ConfigError(key if message else "config", message or str(error)) from None


@dataclass
class ValidatedConfig:
    """A checked config: the typed sections plus the agent's config and the utility."""

    train: TrainConfig
    agent: AgentConfig
    utility: Utility
    objective: Objective  # what the run optimises (rs_lightning.objectives)

    def agent_problem(self, problem: Problem) -> Problem:
        """The problem as the agent sees it: the objective may append features to the
        observation (a risk-conditioned network takes the setting's, a static one
        (c, gamma^t, b)), after checking that the agent can act in its actions."""
        check_action_space(self.agent.name, self.train.env.id, problem)
        _check_section(self.train.network.check_problem, problem)
        return self.objective.network_problem(problem)


def check_rollouts(agent: AgentConfig, train: TrainConfig) -> None:
    """ConfigError naming the key unless an on-policy agent's rollouts can be cut into its
    minibatches (env.num_envs x agent.rollout_steps steps), and it learns at one setting (a
    rollout bootstraps its states at the setting each copy acts at)."""
    if not AGENTS[agent.name][0].on_policy:
        return
    if agent.risk_conditioned:
        raise ConfigError("agent.risk_conditioned", f"agent={agent.name} learns from rollouts "
                          "at the run's own setting; risk_conditioned=true needs a replay agent")
    try:
        agent.minibatch_size(train.env.num_envs)
    except ValueError as error:
        key, _, message = str(error).partition(": ")
        raise ConfigError(key, message) from None


def check_action_space(agent: str, env_id: str, problem: Problem) -> None:
    """ConfigError naming ``agent`` when it cannot act in the environment's actions."""
    continuous = AGENTS[agent][0].continuous_actions  # None: either kind (PPO)
    if continuous is None or continuous == problem.continuous:
        return
    allowed = ", ".join(sorted(n for n, (cls, _) in AGENTS.items()
                               if cls.continuous_actions in (None, problem.continuous)))
    if problem.continuous:
        raise ConfigError("agent", f"{agent} picks among discrete actions, and {env_id!r} has "
                          f"continuous ones (a Box); allowed: {allowed}")
    raise ConfigError("agent", f"{agent} acts in a continuous box, and {env_id!r} has "
                      f"{problem.n_actions} discrete actions; allowed: {allowed}")


def _structured(schema_class, node, root: str = "") -> Any:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema_class), node)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None) or root or "config"
        if root and not key.startswith(root):
            key = f"{root}.{key}"
        message = omegaconf_message(str(error).split("\n")[0], getattr(error, "value", None))
        if key in MISSING_HINTS and "value is required" in message:
            message = f"a value is required here: {MISSING_HINTS[key]}"
        raise ConfigError(key, message) from None


# Keys newer than the presets users may have written: what to add to such a preset.
MISSING_HINTS = {
    "env.backend": "gymnasium (any environment) or torch (the package's own worlds); an env "
                   "preset of your own written before it existed adds `backend: gymnasium`",
}


_TYPE_NAMES = {"Float": "a number", "Integer": "an integer", "Boolean": "true or false",
               "String": "a string"}


def omegaconf_message(message: str, value: Any = None) -> str:
    """OmegaConf's wording of a type or key error, in the words of the other checks
    (``value``: the value refused, where OmegaConf kept it)."""
    if re.match(r"Invalid value assigned: \w+ is not a ListConfig, list or tuple", message):
        shown = f", got {value!r}" if value is not None else ""
        return f"must be a list{shown} (on the command line: key=[64] or key=[256,256])"
    converted = re.match(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", message)
    if converted:
        value, type_name = converted.groups()
        return f"must be {_TYPE_NAMES.get(type_name, type_name)}, got {value!r}"
    not_bool = re.match(r"Value '(.*)' is not a valid bool", message)
    if not_bool:
        return f"must be true or false, got {not_bool.group(1)!r}"
    if re.search(r"missing mandatory value", message):
        return "a value is required here (give it on the command line as key=value)"
    if re.match(r"Key '.*' not in '\w+'", message):
        return "unknown key (the keys are those of conf/train.yaml and its group files)"
    return message


def agent_config_from(node) -> AgentConfig:
    """The typed, checked config of the agent named by ``node.name``."""
    name = node.get("name") if node is not None else None
    if name not in AGENTS:
        raise ConfigError(
            "agent", f"unknown agent {name!r}; allowed: {', '.join(sorted(AGENTS))}"
        )
    _, config_class = AGENTS[name]
    config = _structured(config_class, node, root="agent")
    try:
        config.check()
    except ValueError as error:
        key, _, message = str(error).partition(": ")
        raise ConfigError(key if message else "agent", message or str(error)) from None
    return config


def utility_from(risk_node, alpha: float) -> Utility:
    # A list parameter (a spectral measure's levels) as a tuple: the utility is hashable.
    params = {key: tuple(value) if isinstance(value, (list, tuple, ListConfig)) else value
              for key, value in dict(risk_node).items()}
    name = params.pop("name", None)
    if name not in RISK_MEASURES:
        raise ConfigError(
            "risk", f"unknown risk measure {name!r}; allowed: {', '.join(sorted(RISK_MEASURES))}"
        )
    try:
        return Utility(alpha=alpha, risk=name, params=params)
    except ValueError as error:
        # A measure's own parameter check names its key: "risk.eta: must be ...".
        key, _, message = str(error).partition(": ")
        if key.startswith("risk.") and message:
            raise ConfigError(key, message) from None
        raise ConfigError("risk", str(error)) from None


def selectable_objectives() -> list[str]:
    """The values of the ``objective`` key: every registered objective but the
    risk-conditioned one, which ``agent.risk_conditioned=true`` chooses."""
    return [name for name in OBJECTIVES if name != "conditioned"]


def objective_from(train: TrainConfig, agent: AgentConfig, utility: Utility) -> Objective:
    """The objective a checked config names (``objective``; the risk-conditioned one for
    ``agent.risk_conditioned=true``, whose networks see the setting)."""
    name = train.objective
    refusal = objective_refusal(agent.name, name, agent.risk_conditioned, utility)
    if refusal is not None:
        raise ConfigError("objective", refusal)
    objective_class = OBJECTIVES["conditioned" if agent.risk_conditioned else name]
    return objective_class.from_config(utility, train)


def objective_refusal(agent_name: str, objective: str, risk_conditioned: bool = False,
                      utility: Optional[Utility] = None) -> Optional[str]:
    """Why ``objective`` cannot train the agent ``agent_name`` (what the ConfigError of
    :func:`objective_from` says), or None where it can; with ``utility`` also the refusals
    that depend on the setting. The one statement of the rule; the benchmark's sweep leaves
    the refused pairs out by it."""
    if risk_conditioned:
        if objective != "per_decision":
            return (f"{objective} does not combine with agent.risk_conditioned=true "
                    "(allowed: per_decision)")
        objective = "conditioned"
    objective_class = OBJECTIVES[objective]
    agent_class = AGENTS[agent_name][0]
    if objective_class.refuses_continuous_actions and agent_class.continuous_actions:
        return (f"{objective} is not defined for agent={agent_name}: "
                f"{objective_class.refuses_continuous_actions} (allowed: per_decision)")
    if objective_class.needs_distribution and not agent_class.distributional:
        return (f"{objective} needs a distributional agent; agent={agent_name} learns a "
                "point value (allowed: per_decision)")
    return agent_class.objective_refusal(objective, utility)


def validate(cfg: DictConfig) -> ValidatedConfig:
    """Check a composed config; raise :class:`ConfigError` on the first problem found."""
    # The project's own components register themselves first: they are checked as the
    # built-in ones are (the allowed names come from the registries).
    import_plugins(OmegaConf.select(cfg, "plugins", default=None))
    train: TrainConfig = _structured(TrainConfig, cfg)
    check_finite(train)
    train.check()
    agent = agent_config_from(OmegaConf.create(train.agent))
    agent.network = train.network  # one torso setting for every agent (agents/networks.py)
    check_rollouts(agent, train)
    utility = utility_from(train.risk, train.alpha)
    objective = objective_from(train, agent, utility)
    return ValidatedConfig(train=train, agent=agent, utility=utility, objective=objective)
