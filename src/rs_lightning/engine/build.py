"""The objects a validated config describes: members, module, datamodule, Trainer."""

from __future__ import annotations

import copy
import datetime
import functools
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.io import TorchCheckpointIO
from torch.utils._pytree import tree_map_only

from rs_lightning.agents import AGENTS
from rs_lightning.agents.members import Members, StackedMembers, make_members
from rs_lightning.config.migrations import migrate_checkpoint
from rs_lightning.config.schema import ValidatedConfig, max_time_seconds
from rs_lightning.engine.callbacks import CheckpointEveryMinutes, CheckpointOnSigterm
from rs_lightning.engine.checkpoints import save_checkpoint_file
from rs_lightning.engine.behaviour import make_behaviour
from rs_lightning.engine.experience import ExperienceDataModule, member_seeds
from rs_lightning.engine.learner import Learner, OnPolicyLearning, QLearning
from rs_lightning.envs.factory import env_problem
from rs_lightning.types import Problem


def quiet_lightning() -> None:
    # An environment stream is one endless epoch: these notices do not apply to it.
    for pattern in (
        ".*does not have many workers.*",
        ".*IterableDataset.*__len__.*",
        ".*Your `IterableDataset` has `__len__` defined.*",
        ".*The number of training batches.*",
        ".*GPU available but not used.*",
        ".*LightningModule.log.*",
        ".*module\\(s\\) in eval mode.*",  # the target network is frozen on purpose
        ".*no pre-optimization state was saved.*",
        ".*`dataloader_iter` step flavor.*",  # we fetch exactly one batch per step
        ".*Found `dataloader_iter` argument.*",
        ".*isinstance\\(treespec, LeafSpec\\).*",
        ".*Checkpoint directory .* exists and is not empty.*",  # a resumed job's own folder
        ".*The dirpath has changed from.*",  # resuming into a new folder: nothing to reload
    ):
        warnings.filterwarnings("ignore", message=pattern)
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, through a temporary file, fsync and a rename.

    Lightning writes checkpoints in place, so a kill mid-write leaves a truncated
    ``last.ckpt`` where a good one was; here the old file stays until the new one is whole.
    It reads them with ``weights_only=True`` always (a checkpoint from elsewhere cannot
    run code), in the current format (:mod:`rs_lightning.config.migrations`; ``gamma``: the
    run's ``env.gamma``, which the migration of an older replay memory needs).
    """

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.gamma = gamma

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options")
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict[str, Any]:
        # Checkpoints are data: never unpickle objects, whatever a caller asks.
        state = super().load_checkpoint(path, map_location=map_location, weights_only=True)
        return migrate_checkpoint(state, self.gamma, str(path))


def build_members(run_config: ValidatedConfig, problem: Problem, seeds: list[int]) -> Members:
    """The members of a run; member k's initial weights are those drawn after seeding every
    generator with ``seeds[k]`` (what a run of that seed alone draws)."""
    agent_class, _ = AGENTS[run_config.agent.name]
    problem = run_config.agent_problem(problem)  # what the network sees
    agents = []
    for seed in seeds:
        pl.seed_everything(seed, workers=True, verbose=False)
        agents.append(agent_class(run_config.agent, problem))
    return make_members(agents)


def build(run_config: ValidatedConfig, member_loggers: list[list] | None = None
          ) -> tuple[ExperienceDataModule, Learner]:
    """The datamodule and the LightningModule a validated config describes: members
    ``seed, ..., seed + parallel_seeds - 1`` on ``env.num_envs`` copies each, the behaviour
    policy the datamodule's collector acts with, and the training loop of the agent's family
    (replay: :class:`QLearning`; rollouts: :class:`OnPolicyLearning`)."""
    train = run_config.train
    seeds = member_seeds(train.seed, train.parallel_seeds)
    problem = env_problem(train.env)
    members = build_members(run_config, problem, seeds)
    policy = make_behaviour(members, run_config.objective, seeds, train.learning)
    on_policy = members.networks()[0].on_policy
    datamodule = ExperienceDataModule(train.env, policy, seeds, train.learning,
                                      rollouts=run_config.agent if on_policy else None)
    module = (OnPolicyLearning if on_policy else QLearning)(
        members,
        run_config.objective,
        train.learning,
        seeds,
        policy.exploration,
        log_every_n_steps=train.trainer.log_every_n_steps,
        member_loggers=member_loggers,
        fault_injection=train.fault_injection,
    )
    if train.hardware.compile:
        accelerator = train.hardware.accelerator
        on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
        compile_members(module.members, "cuda" if on_gpu else "cpu")
    return datamodule, module


def compile_members(members: Members, device_type: str) -> None:
    """``hardware.compile``: torch.compile what runs every step, each network's loss (its
    forward and, through AOTAutograd, its backward: the update but for the clipping and the
    optimizer step, which the fused Adam already does in one kernel) and its return
    distribution (acting): the methods its class lists in ``compiled_methods``, each one graph
    (tests/test_compile.py). On a GPU (``device_type`` "cuda") the compiled graphs are also
    captured as CUDA graphs (``mode="reduce-overhead"``: one launch replays a graph's kernels,
    its inputs copied into static buffers each call). An agent that lists none (the UMNN
    agents, whose shapes follow the data) runs eager, and the run says why in one line."""
    captured = device_type == "cuda"
    for agent in members.networks():
        if not agent.compiled_methods:
            print(f"[rs_lightning] hardware.compile: agent={agent.config.name} runs eager: "
                  f"{agent.eager_reason}", file=sys.stderr)
        for name in agent.compiled_methods:
            function = torch.compile(getattr(agent, name),
                                     mode="reduce-overhead" if captured else None)
            setattr(agent, name, _outputs_copied(function) if captured else function)


def _outputs_copied(function):
    """``function`` returning copies of its tensors: a CUDA graph's outputs live in its static
    buffers, which its next replay overwrites (the logs keep a step's metrics for a while)."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        return tree_map_only(torch.Tensor, torch.clone, function(*args, **kwargs))

    return call


def checkpoint_callbacks(train, checkpoint_dir: Path) -> list[pl.Callback]:
    """Lightning's periodic checkpoints, if ``trainer.checkpoint_every_n_steps`` asks,
    ``last.ckpt`` every ``trainer.checkpoint_every_minutes`` of training, if it asks, and a
    checkpoint when the run is stopped by SIGTERM (always)."""
    callbacks: list[pl.Callback] = [CheckpointOnSigterm(checkpoint_dir / "last.ckpt")]
    if train.trainer.checkpoint_every_minutes > 0:
        callbacks.append(CheckpointEveryMinutes(checkpoint_dir / "last.ckpt",
                                                train.trainer.checkpoint_every_minutes))
    if train.trainer.checkpoint_every_n_steps > 0:
        callbacks.append(ModelCheckpoint(
            dirpath=checkpoint_dir,
            filename="step{step:07d}",
            auto_insert_metric_name=False,
            every_n_train_steps=train.trainer.checkpoint_every_n_steps,
            save_top_k=-1,
            save_last=True,
            # last.ckpt is also written by the other checkpoints: replaced, never last-v1.ckpt.
            enable_version_counter=False,
        ))  # fmt: skip
    return callbacks


def make_trainer(train, run_dir: Path, callbacks: list[pl.Callback]) -> pl.Trainer:
    """The Trainer of a run: ``trainer.max_steps`` updates in one endless epoch, or fewer
    within ``trainer.max_time`` (Lightning's timer: checked after every update, its time
    summed over the attempts of a resumed run). The members log to their own loggers (the
    module holds them), not through the Trainer."""
    max_time = train.trainer.max_time
    return pl.Trainer(
        max_steps=train.trainer.max_steps,
        max_time=None if max_time is None else datetime.timedelta(seconds=max_time_seconds(max_time)),
        max_epochs=-1,
        accelerator=train.hardware.accelerator,
        devices=train.hardware.devices,
        precision=train.hardware.precision,
        logger=False,
        callbacks=callbacks,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=(train.trainer.checkpoint_every_n_steps > 0
                              or train.trainer.checkpoint_every_minutes > 0),
        num_sanity_val_steps=0,
        limit_val_batches=0,
        default_root_dir=str(run_dir),
        log_every_n_steps=train.trainer.log_every_n_steps,
        plugins=[AtomicCheckpointIO(train.env.gamma)],
    )


def member_checkpoint(checkpoint: dict[str, Any], module: Learner,
                      datamodule: ExperienceDataModule, k: int) -> dict[str, Any]:
    """Member k of a run's checkpoint as the checkpoint of a run of its seed alone: weights,
    Adam's moments, env copies, replay memory and generators. It loads with
    :func:`rs_lightning.analysis.runs.load_run` and resumes with ``parallel_seeds=1``."""
    single = {key: value for key, value in checkpoint.items()
              if key not in ("state_dict", "optimizer_states", "rs_lightning",
                             type(datamodule).__qualname__)}
    state_dict = {}
    for prefix in ("members", "target_members"):
        members = getattr(module, prefix, None)  # an on-policy learner keeps no targets
        if members is None:
            continue
        for name, value in members.member_state(k).items():
            state_dict[f"{prefix}.agents.0.{name}"] = value
    single["state_dict"] = state_dict
    # Adam's state follows the order of parameters(): member k's parameters are those of an
    # ordinary agent in the same order, a slice of each stacked parameter or, looped, the
    # k-th run of them.
    stacked = isinstance(module.members, StackedMembers)
    count = len(list(module.members.member_agent(k).parameters()))
    first = 0 if stacked else k * count
    optimizers = []
    for optimizer in checkpoint["optimizer_states"]:
        state = {index - first: {name: (value[k] if stacked and name != "step" else value).clone()
                                 for name, value in entries.items()}
                 for index, entries in optimizer["state"].items()
                 if first <= index < first + count}
        groups = copy.deepcopy(optimizer["param_groups"])
        for group in groups:
            group["params"] = list(range(count))
        optimizers.append({"state": state, "param_groups": groups})
    single["optimizer_states"] = optimizers
    single[type(datamodule).__qualname__] = datamodule.state_dict([k])
    single["rs_lightning"] = module.engine_state([k])
    return single
