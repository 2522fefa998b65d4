"""K seeds side by side in one process: ``parallel_seeds=K``.

Seeds ``s, s + 1, ..., s + K - 1`` (``s = seed``) are K members trained at once. Each member
has what a sequential run of its seed has: its environment (reset with its seed), its replay
memory (sampling generator ``seed + 1``), its exploration generator (``seed + 2``) and its
initial weights (drawn after seeding torch with its seed); the paper's grid worlds of all
members step together as tensors (:class:`GridWorldCopies`, the same transitions as K
environments stepped in turn). The K networks run as one stacked
agent (:func:`rs_lightning.agents.base.stack_members`): one batched forward pass acts for
all K, one batched update trains them, each member's gradient clipped by its own norm and
Adam's update being elementwise, so member k follows the algorithm of a sequential run with
seed ``s + k`` (the same numbers up to the rounding of batched products; an agent that draws
random numbers in its loss draws them from one shared stream).

Outputs: ``<run>/seed_<s + k>/`` holds member k's ``eval.json``, ``policy.json``,
``eval_history.jsonl``, ``config.yaml`` (the config of the equivalent sequential run),
``checkpoints/last.ckpt`` (loadable by :func:`rs_lightning.runs.load_run`) and its own W&B run;
``<run>/checkpoints/`` holds the stacked run's Lightning checkpoints (resume) and
``<run>/members.json``, written last, marks the run finished.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import IterableDataset

from rs_lightning.agents.base import Agent, Problem, Transitions, member_state, stack_members
from rs_lightning.callbacks import evaluate_during_training
from rs_lightning.data.datamodule import EnvCollector
from rs_lightning.data.replay import ReplayBuffer
from rs_lightning.data.vector_collection import learning_reward
from rs_lightning.envs.factory import make_env, observation_size
from rs_lightning.envs.grid_world_copies import GridWorldCopies, unwrapped_grid_world
from rs_lightning.errors import NumericalFault
from rs_lightning.module import (
    RiskSensitiveQLearning, TrainingClock, _numpy_global_state, exploration_rate,
    log_ended_episodes, make_optimizer, parameters_finite,
)
from rs_lightning.risk import Utility

# K observations ([K, obs_dim] array or tensor) and the environment step -> K actions.
StackedPolicy = Callable[[Any, int], list]


def member_seeds(seed: int, parallel_seeds: int) -> list[int]:
    return [seed + k for k in range(parallel_seeds)]


def member_folder(run_dir: Path, seed: int) -> Path:
    return Path(run_dir) / f"seed_{seed}"


class StackedBatch(NamedTuple):
    """One step's data for K members: ``transitions`` fields are ``[K, B, ...]``."""

    transitions: Transitions
    episode_returns: tuple[tuple[float, ...], ...]  # per member, episodes ended at this step
    episode_outcomes: tuple[tuple[float, ...], ...]
    env_steps: int  # environment steps of each member so far


class StackedReplay:
    """The members' replay memories over one storage ``[K, capacity, ...]``: each member's
    :class:`ReplayBuffer` writes into its slice and draws its own indices (the same draws as
    its ``sample``), and one gather per field takes the K batches."""

    FIELDS = ("obs", "action", "reward", "next_obs", "terminated")

    def __init__(self, replays: list[ReplayBuffer]) -> None:
        self.replays = replays
        self.storage = {}
        for name in self.FIELDS:
            stacked = torch.stack([getattr(replay, name) for replay in replays])
            self.storage[name] = stacked
            for k, replay in enumerate(replays):
                setattr(replay, name, stacked[k])  # a view: writes land in the storage
        self.rows = torch.arange(len(replays)).unsqueeze(1)

    def add(self, transitions: list[tuple]) -> None:
        """Store one transition ``(obs, action, reward, next_obs, terminated)`` per member,
        as each member's ``add`` would."""
        obs, action, reward, next_obs, terminated = zip(*transitions)
        self.add_batch(torch.as_tensor(np.stack(obs)), torch.tensor(action), torch.tensor(reward),
                       torch.as_tensor(np.stack(next_obs)),
                       torch.tensor(terminated, dtype=torch.float32))

    def add_batch(self, obs: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                  next_obs: torch.Tensor, terminated: torch.Tensor) -> None:
        """Store the members' transitions, given as tensors with a member dimension first,
        with one write per field. Members step together, so their memories share one write
        position."""
        replays = self.replays
        position = replays[0].position
        if any(replay.position != position for replay in replays):
            raise RuntimeError("the members' replay memories are out of step")
        storage = self.storage
        for name, value in (("obs", obs), ("action", action), ("reward", reward),
                            ("next_obs", next_obs), ("terminated", terminated)):
            storage[name][:, position] = value
        for replay in replays:
            replay.advance()

    def sample(self, batch_size: int) -> Transitions:
        index = torch.stack([
            torch.randint(replay.size, (batch_size,), generator=replay.generator)
            for replay in self.replays
        ])  # fmt: skip
        return Transitions(*(self.storage[name][self.rows, index] for name in self.FIELDS))


class StackedExperienceStream(IterableDataset):
    """One environment step of every member, then one replay batch of every member.

    With ``copies`` (the members' grid worlds as :class:`GridWorldCopies`) a step of all
    members is a few tensor operations; otherwise each member's environment steps in turn.
    """

    def __init__(self, collectors: list[EnvCollector], policy: StackedPolicy, batch_size: int,
                 warmup_steps: int, copies: GridWorldCopies | None = None) -> None:
        super().__init__()
        self.collectors = collectors
        self.replay = StackedReplay([c.replay for c in collectors])
        self.policy = policy
        self.batch_size = batch_size
        self.warmup_steps = max(warmup_steps, 1)
        self.copies = copies
        if copies is not None:
            first = collectors[0]
            self.reward_scale, self.reward_clip = first.reward_scale, first.reward_clip
            self.episode_returns = torch.tensor([c.episode_return for c in collectors],
                                                dtype=torch.float64)

    def step(self) -> None:
        collectors = self.collectors
        if self.copies is not None:
            return self._step_copies()
        actions = self.policy(np.stack([c.obs for c in collectors]), collectors[0].env_steps)
        self.replay.add([c.transition(a) for c, a in zip(collectors, actions)])

    def _step_copies(self) -> None:
        """:meth:`EnvCollector.transition` of every member at once (the same numbers)."""
        collectors, copies = self.collectors, self.copies
        obs = copies.obs()
        actions = torch.tensor(self.policy(obs, collectors[0].env_steps))
        step = copies.step(actions)
        learnt = learning_reward(step.reward, self.reward_scale, self.reward_clip)
        self.replay.add_batch(obs, actions, learnt.float(), step.next_obs, step.terminated.float())
        self.episode_returns += step.reward
        for collector in collectors:
            collector.env_steps += 1
        if bool(step.ended.any()):
            for k in step.ended.nonzero().flatten().tolist():
                collector = collectors[k]
                collector.ended_returns.append(float(self.episode_returns[k]))
                collector.ended_outcomes.append(float(step.risk_outcome[k]))
                collector.episodes += 1
            self.episode_returns.masked_fill_(step.ended, 0.0)

    def write_back(self) -> None:
        """Put the state of the grid world copies into the collectors and their environments
        (what a checkpoint saves)."""
        if self.copies is None:
            return
        self.copies.write_back()
        for collector, obs, episode_return in zip(
            self.collectors, self.copies.obs().numpy(), self.episode_returns.tolist()
        ):
            collector.obs = obs.copy()
            collector.episode_return = episode_return

    def __iter__(self):
        collectors = self.collectors
        while collectors[0].env_steps < self.warmup_steps:
            self.step()
        while True:
            self.step()
            ended = [c.pop_ended_episodes() for c in collectors]
            yield StackedBatch(
                self.replay.sample(self.batch_size),
                tuple(returns for returns, _ in ended),
                tuple(outcomes for _, outcomes in ended),
                collectors[0].env_steps,
            )


class StackedEnvDataModule(pl.LightningDataModule):
    """K environments and K replay memories, one per member seed."""

    def __init__(self, env_config, batch_size: int, replay_capacity: int, warmup_steps: int,
                 seeds: list[int], tensor_steps: bool = True) -> None:
        super().__init__()
        self.env_config = env_config
        self.batch_size = batch_size
        self.replay_capacity = replay_capacity
        self.warmup_steps = warmup_steps
        self.seeds = list(seeds)
        # Grid worlds step as tensors (GridWorldCopies); False: each environment in turn.
        self.tensor_steps = tensor_steps
        self.collectors: list[EnvCollector] = []
        self.policy: StackedPolicy | None = None
        self._stream: StackedExperienceStream | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.collectors:
            return
        for seed in self.seeds:
            env = make_env(self.env_config)
            replay = ReplayBuffer(self.replay_capacity, observation_size(env), seed=seed + 1)
            self.collectors.append(
                EnvCollector(env, replay, self.env_config.reward_clip, seed=seed,
                             reward_scale=self.env_config.reward_scale)
            )

    @property
    def problem(self) -> Problem:
        from rs_lightning.jobs import problem_of

        self.setup()
        return problem_of(self.collectors[0].env, self.env_config)

    @property
    def env_steps(self) -> int:
        return self.collectors[0].env_steps if self.collectors else 0

    def attach_policy(self, policy: StackedPolicy) -> None:
        self.policy = policy

    def train_dataloader(self) -> StackedExperienceStream:
        if self.policy is None:
            raise RuntimeError("StackedEnvDataModule needs a policy: call attach_policy()")
        envs = [collector.env for collector in self.collectors]
        tensor_steps = self.tensor_steps and all(unwrapped_grid_world(env) for env in envs)
        self._stream = StackedExperienceStream(
            self.collectors, self.policy, self.batch_size, self.warmup_steps,
            GridWorldCopies(envs) if tensor_steps else None,
        )
        return self._stream

    def state_dict(self) -> dict[str, Any]:
        if not self.collectors:
            return {}
        if self._stream is not None:
            self._stream.write_back()
        return {
            "collectors": [c.state_dict() for c in self.collectors],
            "env_id": self.env_config.id,
            "seeds": self.seeds,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self._stream is not None:
            raise RuntimeError("load the datamodule's state before its train_dataloader is made")
        self.setup()
        for collector, state in zip(self.collectors, state_dict["collectors"], strict=True):
            collector.load_state_dict(state)


def clip_member_gradients(parameters: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale each member's gradient (index k of every stacked parameter) to norm at most
    ``max_norm``, as ``clip_grad_norm_`` does for one network; returns the K norms."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norms = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads]), dim=0
    )
    scale = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


class StackedQLearning(pl.LightningModule):
    """The Q-learning loop of :class:`RiskSensitiveQLearning` for K stacked members."""

    def __init__(self, agent: Agent, utility: Utility, learning, seeds: list[int],
                 template: Agent, log_every_n_steps: int = 100,
                 member_loggers: list[list] | None = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.agent = agent
        self.target_agent = copy.deepcopy(agent).requires_grad_(False).eval()
        self.utility = utility
        self.learning = learning
        self.seeds = list(seeds)
        # An ordinary agent of the same class and config, copied for member_module.
        self._template = [template]  # in a list: not a submodule (no parameters to train)
        self.n_actions = agent.problem.n_actions
        self.log_every_n_steps = log_every_n_steps
        self.member_loggers = member_loggers or [[] for _ in seeds]
        self.exploration_rngs = [np.random.default_rng(seed + 2) for seed in seeds]
        self.epsilon = learning.epsilon_start
        self.live_metrics: dict[str, float] = {}
        self._window_returns: list[list[float]] = [[] for _ in seeds]
        self._window_outcomes: list[list[float]] = [[] for _ in seeds]
        self._episodes = [0 for _ in seeds]
        self._window_start = (time.perf_counter(), 0)
        self.skipped_updates = 0
        self.clock = TrainingClock()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "_current_fx_name":  # see RiskSensitiveQLearning.__setattr__
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    def on_train_start(self) -> None:
        self.clock.start()

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def explore(self, observations, env_step: int) -> list[int]:
        """Epsilon-greedy on the utility for every member, each with its own generator."""
        cfg = self.learning
        self.epsilon = exploration_rate(
            env_step, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay, cfg.epsilon_schedule
        )
        actions: list[int | None] = []
        for rng in self.exploration_rngs:
            explore = rng.random() < self.epsilon
            actions.append(int(rng.integers(self.n_actions)) if explore else None)
        if any(action is None for action in actions):
            obs = torch.as_tensor(observations, dtype=torch.float32, device=self.device)
            greedy = self.agent.greedy_action(obs.unsqueeze(1), self.utility.greedy)  # [K, 1]
            greedy = greedy[:, 0].tolist()
            actions = [g if a is None else a for a, g in zip(actions, greedy)]
        return actions

    def member_module(self, k: int) -> RiskSensitiveQLearning:
        """Member k as the module of a sequential run (its agent and target network)."""
        agent = copy.deepcopy(self._template[0]).to(self.device)
        agent.load_state_dict(member_state(self.agent, k))
        module = RiskSensitiveQLearning(agent, self.utility, self.learning, seed=self.seeds[k])
        module.target_agent.load_state_dict(member_state(self.target_agent, k))
        module.to(self.device)
        module.epsilon = self.epsilon
        module.skipped_updates = self.skipped_updates
        return module.eval()

    # --------------------------------------------------------------- learning
    def configure_optimizers(self):
        return make_optimizer(self.agent, self.learning)  # Adam is elementwise: per member

    def training_step(self, dataloader_iter: Iterator) -> None:
        batch: StackedBatch = next(dataloader_iter)[0]
        transitions = batch.transitions
        if self.device.type != "cpu":
            transitions = type(transitions)(*(t.to(self.device) for t in transitions))
        optimizer = self.optimizers()
        update = self.global_step + 1
        losses, agent_metrics = self.agent.loss(transitions, self.target_agent, self.utility.greedy)
        optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        parameters = list(self.agent.parameters())
        grad_norms = clip_member_gradients(parameters, self.learning.grad_clip_norm)
        if not math.isfinite(float(losses.detach().sum() + grad_norms.sum())):
            if not self._drop_non_finite_update(update, losses, grad_norms):
                optimizer.step()
        else:
            optimizer.step()
        step = self.global_step
        if step % self.learning.target_update_period == 0:
            self.target_agent.load_state_dict(self.agent.state_dict())
        for k in range(len(self.seeds)):
            self._window_returns[k].extend(batch.episode_returns[k])
            self._window_outcomes[k].extend(batch.episode_outcomes[k])
            log_ended_episodes(self.member_loggers[k], step, batch.episode_returns[k],
                               batch.episode_outcomes[k], batch.env_steps)
        if step % self.log_every_n_steps == 0:
            self.check_parameters(step)
            self._log_window(step, batch.env_steps, losses, grad_norms, agent_metrics)

    def _drop_non_finite_update(self, update: int, losses, grad_norms) -> bool:
        """Stop (learning.on_non_finite=stop) or drop the whole stacked update (skip)."""
        self.check_parameters(update - 1)
        bad = [self.seeds[k] for k in range(len(self.seeds))
               if not math.isfinite(float(losses[k] + grad_norms[k]))]
        loss_bad = not math.isfinite(float(losses.detach().sum()))
        quantity = f"{'loss' if loss_bad else 'gradient norm'} of seed {', '.join(map(str, bad))}"
        if self.learning.on_non_finite == "stop":
            raise NumericalFault(quantity, update)
        self.skipped_updates += 1
        self.optimizers().zero_grad(set_to_none=True)
        return True

    def check_parameters(self, step: int) -> None:
        if not parameters_finite(self.agent):
            raise NumericalFault("parameters", step)

    def _log_window(self, step, env_steps, losses, grad_norms, agent_metrics) -> None:
        now = time.perf_counter()
        start_time, start_step = self._window_start
        steps_per_second = (step - start_step) / max(now - start_time, 1e-9)
        self._window_start = (now, step)
        shown: dict[str, list[float]] = {}
        for k in range(len(self.seeds)):
            metrics = {
                "train/loss": float(losses[k].detach()),
                "train/grad_norm": float(grad_norms[k]),
                "train/epsilon": self.epsilon,
                "train/env_steps": float(env_steps),
                "train/steps_per_second": steps_per_second,
            }
            metrics.update({f"train/{name}": float(v[k]) for name, v in agent_metrics.items()})
            returns, outcomes = self._window_returns[k], self._window_outcomes[k]
            if returns:
                self._episodes[k] += len(returns)
                metrics["train/episode_return"] = float(np.mean(returns))
                if not all(o != o for o in outcomes):
                    metrics["train/risk_outcome"] = float(np.nanmean(outcomes))
                returns.clear()
                outcomes.clear()
            metrics["train/episodes"] = float(self._episodes[k])
            metrics["train/skipped_updates"] = float(self.skipped_updates)
            for logger in self.member_loggers[k]:
                logger.log_metrics(metrics, step=step)
            for name, value in metrics.items():
                shown.setdefault(name, []).append(value)
        # The progress bar shows the mean over members.
        self.live_metrics.update({name: float(np.mean(v)) for name, v in shown.items()})

    # ------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.check_parameters(int(checkpoint.get("global_step", self.global_step)))
        checkpoint["rs_lightning"] = {
            "exploration_rngs": [rng.bit_generator.state for rng in self.exploration_rngs],
            "epsilon": self.epsilon,
            "episodes": list(self._episodes),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": _numpy_global_state(),
            "agent_class": type(self.agent).__name__,
            "agent": self.agent.config.name,
            "seeds": list(self.seeds),
            "skipped_updates": self.skipped_updates,
            "train_seconds": self.clock.seconds(),
            # Entries of the state dict with a leading member dimension (buffers are shared).
            "stacked_keys": [f"{prefix}.{name}" for prefix in ("agent", "target_agent")
                             for name, _ in self.agent.named_parameters()],
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["rs_lightning"]
        for rng, rng_state in zip(self.exploration_rngs, state["exploration_rngs"], strict=True):
            rng.bit_generator.state = rng_state
        self.epsilon = state["epsilon"]
        self._episodes = list(state["episodes"])
        self.skipped_updates = state.get("skipped_updates", 0)
        self.clock.before = state.get("train_seconds", 0.0)
        torch.set_rng_state(state["torch_rng"])
        name, keys, position, has_gauss, cached = state["numpy_rng"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))


class StackedPeriodicEvaluation(pl.Callback):
    """The periodic evaluation of every member, each into its own ``eval_history.jsonl``."""

    def __init__(self, env_config, rho: float, every_n_steps: int, episodes: int,
                 seeds: list[int], batch_envs: int, history_paths: list[Path]) -> None:
        self.env_config = env_config
        self.rho = rho
        self.every_n_steps = every_n_steps
        self.episodes = episodes
        self.seeds = seeds
        self.batch_envs = batch_envs
        self.history_paths = history_paths

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps <= 0 or step % self.every_n_steps:
            return
        shown: dict[str, list[float]] = {}
        train_seconds = pl_module.clock.seconds()  # the members' evaluations share one time
        for k, seed in enumerate(self.seeds):
            metrics = evaluate_during_training(
                pl_module.member_module(k), self.env_config, self.rho, self.episodes, seed,
                self.batch_envs, step, batch.env_steps, self.history_paths[k],
                train_seconds,
            )
            for logger in pl_module.member_loggers[k]:
                logger.log_metrics(metrics, step=step)
            for name, value in metrics.items():
                shown.setdefault(name, []).append(value)
        pl_module.live_metrics.update({name: float(np.mean(v)) for name, v in shown.items()})


def build_stacked(settings, seeds: list[int], member_loggers=None
                  ) -> tuple[StackedEnvDataModule, StackedQLearning]:
    """The datamodule and module of a ``parallel_seeds`` run; member k's initial weights are
    those a sequential run of seed ``seeds[k]`` draws."""
    from rs_lightning.agents import AGENTS

    train = settings.train
    datamodule = StackedEnvDataModule(
        train.env,
        batch_size=train.learning.batch_size,
        replay_capacity=train.learning.replay_capacity,
        warmup_steps=train.learning.warmup_steps,
        seeds=seeds,
    )
    agent_class, _ = AGENTS[settings.agent.name]
    problem = datamodule.problem
    members = []
    for seed in seeds:
        pl.seed_everything(seed, workers=True, verbose=False)
        members.append(agent_class(settings.agent, problem))
    module = StackedQLearning(
        stack_members(members),
        settings.utility,
        train.learning,
        seeds,
        template=members[0],
        log_every_n_steps=train.trainer.log_every_n_steps,
        member_loggers=member_loggers,
    )
    datamodule.attach_policy(module.explore)
    if train.hardware.compile:
        from rs_lightning.train import compile_agent

        compile_agent(module.agent)
    return datamodule, module


def member_checkpoint(stacked: dict[str, Any], k: int) -> dict[str, Any]:
    """Member k of a stacked run's Lightning checkpoint as the checkpoint of a sequential run
    of its seed: weights, Adam's moments, environment, replay memory and generators. It
    loads with :func:`rs_lightning.runs.load_run` and resumes with ``parallel_seeds=1``."""
    checkpoint = {key: value for key, value in stacked.items()
                  if key not in ("state_dict", "optimizer_states", "rs_lightning",
                                 StackedEnvDataModule.__qualname__)}
    own = stacked["rs_lightning"]
    stacked_keys = set(own["stacked_keys"])
    checkpoint["state_dict"] = {
        name: value[k].clone() if name in stacked_keys else value
        for name, value in stacked["state_dict"].items()
    }
    optimizers = []
    for optimizer in stacked["optimizer_states"]:
        state = {index: {name: (value if name == "step" else value[k].clone())
                         for name, value in entries.items()}
                 for index, entries in optimizer["state"].items()}
        optimizers.append({"state": state, "param_groups": copy.deepcopy(optimizer["param_groups"])})
    checkpoint["optimizer_states"] = optimizers
    data = stacked[StackedEnvDataModule.__qualname__]
    checkpoint["EnvDataModule"] = {"collector": data["collectors"][k], "env_id": data["env_id"]}
    checkpoint["rs_lightning"] = {
        "exploration_rng": own["exploration_rngs"][k],
        "epsilon": own["epsilon"],
        "episodes": own["episodes"][k],
        "torch_rng": own["torch_rng"],
        "numpy_rng": own["numpy_rng"],
        "agent_class": own["agent_class"],
        "agent": own["agent"],
        "skipped_updates": own["skipped_updates"],
        "train_seconds": own.get("train_seconds", 0.0),
    }
    return checkpoint


def run_stacked(cfg, settings, run_dir: Path, start_step: int) -> dict[str, Any]:
    """Train the members of a ``parallel_seeds`` run and write each seed's outputs."""
    from omegaconf import OmegaConf, open_dict

    from rs_lightning.callbacks import TrainingProgress
    from rs_lightning.evaluation import evaluate_run
    from rs_lightning.files import atomic_write, truncate_jsonl, write_json_atomic, write_text_atomic
    from rs_lightning.schema import validate
    from rs_lightning.train import (
        _log_run_media, checkpoint_callbacks, close_loggers, make_loggers, make_trainer,
    )

    train = settings.train
    seeds = member_seeds(train.seed, train.parallel_seeds)
    folders = [member_folder(run_dir, seed) for seed in seeds]
    member_settings, member_configs, loggers = [], [], []
    for seed, folder in zip(seeds, folders):
        # The config of the sequential run this member is: its seed, one seed per process.
        member_cfg = copy.deepcopy(cfg)
        with open_dict(member_cfg):
            member_cfg.seed = seed
            member_cfg.parallel_seeds = 1
            member_cfg.ckpt_path = None
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "config.yaml", OmegaConf.to_yaml(member_cfg, resolve=True))
        truncate_jsonl(folder / "eval_history.jsonl", lambda r: r.get("step", 0) <= start_step)
        member_settings.append(validate(member_cfg))
        member_configs.append(OmegaConf.to_container(member_cfg, resolve=True))
    try:
        for member, folder, resolved in zip(member_settings, folders, member_configs):
            loggers.append(make_loggers(member, folder, resolved, group=run_dir.name))
        datamodule, module = build_stacked(settings, seeds, loggers)

        checkpoint_dir = run_dir / "checkpoints"
        callbacks = checkpoint_callbacks(train, checkpoint_dir)
        callbacks.append(StackedPeriodicEvaluation(
            train.env, train.rho, train.evaluation.every_n_steps,
            train.evaluation.episodes_during_training, seeds, train.evaluation.batch_envs,
            [folder / "eval_history.jsonl" for folder in folders],
        ))
        if train.callbacks.progress_bar:
            callbacks.append(TrainingProgress(train.callbacks.progress_refresh_seconds))
        # Each seed logs to its own loggers (the module holds them), not through the Trainer.
        trainer = make_trainer(train, run_dir, callbacks, [])
        trainer.fit(module, datamodule=datamodule, ckpt_path=train.ckpt_path)
        trainer.save_checkpoint(checkpoint_dir / "last.ckpt")
        stacked_checkpoint = torch.load(checkpoint_dir / "last.ckpt", map_location="cpu",
                                        weights_only=False)
        steps, env_steps = trainer.global_step, datamodule.env_steps
        summaries = []
        for k, (seed, folder) in enumerate(zip(seeds, folders)):
            (folder / "checkpoints").mkdir(exist_ok=True)
            with atomic_write(folder / "checkpoints" / "last.ckpt", "wb") as f:
                torch.save(member_checkpoint(stacked_checkpoint, k), f)
            member = module.member_module(k)
            summary = evaluate_run(member, member_settings[k], folder, steps=steps,
                                   env_steps=env_steps)
            _log_run_media(loggers[k], summary, member, member_settings[k], folder, steps,
                           env_steps)
            final = {f"eval/final_{key}": v for key, v in summary.items()
                     if isinstance(v, (int, float))}
            for logger in loggers[k]:
                logger.log_metrics(final, step=steps)
            summaries.append(summary)
    except BaseException:
        for member_loggers in loggers:
            close_loggers(member_loggers, failed=True)
        raise
    for member_loggers in loggers:
        close_loggers(member_loggers, failed=False)
    for seed, summary, folder in zip(seeds, summaries, folders):
        print(
            f"[rs_lightning] {settings.agent.name} on {train.env.id} seed {seed}: "
            f"E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
            f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}"
            + (f" R_s={summary['risk_outcome']:.3f}" if "risk_outcome" in summary else "")
            + f"  -> {folder}",
            file=sys.stderr,
        )
    result = {"seeds": seeds, "members": {str(seed): s for seed, s in zip(seeds, summaries)}}
    # Last: a complete members.json marks the stacked run finished (rs_lightning.jobs).
    write_json_atomic(run_dir / "members.json", result)
    return result
