"""Bad input, one table: each case gets one line naming the key or file and what is allowed,
exit status 2, no traceback, and nothing written over an existing run.

Every case is checked in-process (the same checks the command line runs, on the composed
config, against a finished run's folder); the cases marked ``cli`` also run through the real
``python train.py`` with that finished run's folder as ``hydra.run.dir``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from rs_lightning.app.cli import (
    check_group_files,
    check_overrides,
    describe_hydra_error,
)
from rs_lightning.app.jobs import skip_resume_or_run
from rs_lightning.app.train import run
from rs_lightning.errors import ConfigError
from tests.conftest import CONF, ROOT
from tests.warm_python import command as python_command

# The finished run the cases are aimed at: a short DQN run on risky rewards.
FINISHED_RUN = [
    "agent=dqn", "logger=none", "callbacks.progress_bar=false", "trainer.max_steps=20",
    "trainer.checkpoint_every_n_steps=0", "learning.warmup_steps=8", "evaluation.episodes=10",
    "evaluation.every_n_steps=0",
]


@dataclass
class Case:
    id: str
    overrides: list[str]
    key: str  # the message starts with it
    allowed: str  # and says this (what is allowed, or what is wrong with the file)
    cli: bool = False  # also through the real command line
    gpu_dependent: bool = False  # valid on a machine with a GPU
    extra: list[str] = field(default_factory=list)  # overrides put before the case's own
    environ: dict[str, str] = field(default_factory=dict)  # environment variables set


CASES = [
    # values out of range or of the wrong type (schema)
    Case("alpha above 1", ["alpha=1.5"], "alpha", "must be in [0, 1], got 1.5", cli=True),
    Case("alpha below 0", ["alpha=-0.1"], "alpha", "must be in [0, 1]"),
    Case("alpha not a number", ["alpha=abc"], "alpha", "must be a number, got 'abc'"),
    Case("alpha empty", ["alpha="], "alpha", "must be a number, got ''"),
    Case("rho 0", ["rho=0"], "rho", "must be in (0, 1), excluding both ends"),
    Case("rho 1", ["rho=1"], "rho", "must be in (0, 1), excluding both ends"),
    Case("negative seed", ["seed=-1"], "seed", "a non-negative integer"),
    Case("negative batch size", ["learning.batch_size=-4"], "learning.batch_size",
         "must be a positive integer, got -4"),
    Case("zero batch size", ["learning.batch_size=0"], "learning.batch_size",
         "must be a positive integer, got 0", cli=True),
    Case("return grid min = max", ["env.return_min=2"], "env.return_min",
         "must be below env.return_max=2.0"),
    Case("return grid min > max", ["env.return_min=3"], "env.return_min",
         "must be below env.return_max=2.0"),
    Case("return grid of one point", ["agent=rs_umdqn_c", "agent.n_returns=1"],
         "agent.n_returns", "must be an integer in [2, 1024]"),
    Case("gamma 1", ["env.gamma=1.0"], "env.gamma", "must be in [0, 1)"),
    Case("zero max_steps", ["trainer.max_steps=0"], "trainer.max_steps", "a positive integer"),
    Case("zero evaluation episodes", ["evaluation.episodes=0"], "evaluation.episodes",
         "a positive integer"),
    Case("unknown non-finite action", ["learning.on_non_finite=ignore"],
         "learning.on_non_finite", "one of stop, skip"),
    Case("zero update ratio", ["learning.updates_per_step=0"], "learning.updates_per_step",
         "must be a positive number", cli=True),
    Case("update ratio not a number", ["learning.updates_per_step=often"],
         "learning.updates_per_step", "must be a number, got 'often'"),
    Case("zero n-step", ["learning.n_step=0"], "learning.n_step", "must be a positive integer"),
    Case("fractional n-step", ["learning.n_step=2.5"], "learning.n_step", "must be an integer"),
    Case("max_time not a duration", ["trainer.max_time=soon"], "trainer.max_time",
         "must be a positive number of seconds, HH:MM:SS or DD:HH:MM:SS", cli=True),
    Case("negative max_time", ["trainer.max_time=-5"], "trainer.max_time",
         "must be a positive number of seconds"),
    Case("stop_at_return not a number", ["trainer.stop_at_return=high"], "trainer.stop_at_return",
         "must be a number, got 'high'"),
    Case("stop_at_return without evaluations", ["trainer.stop_at_return=475",
                                                "evaluation.every_n_steps=0"],
         "trainer.stop_at_return", "null without periodic evaluations"),
    Case("bool not a bool", ["callbacks.progress_bar=maybe"], "callbacks.progress_bar",
         "must be true or false"),
    Case("unknown agent name", ["agent.name=nope"], "agent", "unknown agent 'nope'; allowed:"),
    # values that are not finite (every float key)
    Case("lr infinite", ["learning.lr=inf"], "learning.lr", "must be a finite number, got inf",
         cli=True),
    Case("lr NaN", ["learning.lr=nan"], "learning.lr", "must be a finite number, got nan"),
    Case("alpha NaN", ["alpha=nan"], "alpha", "must be a finite number"),
    Case("rho infinite", ["rho=inf"], "rho", "must be a finite number"),
    Case("return_min -inf", ["env.return_min=-inf"], "env.return_min",
         "must be a finite number, got -inf"),
    Case("return_max inf", ["env.return_max=inf"], "env.return_max", "must be a finite number"),
    Case("reward_scale inf", ["env.reward_scale=inf"], "env.reward_scale",
         "must be a finite number", cli=True),
    Case("reward_clip inf", ["env.reward_clip=inf"], "env.reward_clip", "must be a finite number"),
    Case("gamma NaN", ["env.gamma=nan"], "env.gamma", "must be a finite number"),
    Case("adam_eps inf", ["learning.adam_eps=inf"], "learning.adam_eps", "must be a finite number"),
    Case("grad_clip_norm inf", ["learning.grad_clip_norm=inf"], "learning.grad_clip_norm",
         "must be a finite number"),
    Case("epsilon_decay inf", ["learning.epsilon_decay=inf"], "learning.epsilon_decay",
         "must be a finite number"),
    Case("online_timeout inf", ["logger.online_timeout=inf"], "logger.online_timeout",
         "must be a finite number"),
    Case("progress refresh NaN", ["callbacks.progress_refresh_seconds=nan"],
         "callbacks.progress_refresh_seconds", "must be a finite number"),
    Case("integration_step inf", ["agent=rs_umdqn_c", "agent.integration_step=inf"],
         "agent.integration_step", "must be a finite number"),
    Case("kappa NaN", ["agent=qr_dqn", "agent.kappa=nan"], "agent.kappa",
         "must be a finite number"),
    Case("risk parameter inf", ["risk=wang", "risk.eta=inf"], "risk.eta",
         "must be a finite number"),
    Case("memory fraction NaN", ["limits.memory_fraction=nan"], "limits.memory_fraction",
         "must be a finite number"),
    # bounds: seeds, supports, counts and budgets, checked before anything is allocated
    Case("seed 2^32", ["seed=4294967296"], "seed", "stays below 2^32 = 4294967296", cli=True),
    Case("a number where a list goes", ["agent.hidden_sizes=64"], "agent.hidden_sizes",
         "must be a list, got 64 (on the command line: key=[64] or key=[256,256])", cli=True),
    Case("seed near 2^32 with parallel seeds", ["seed=4294967290", "parallel_seeds=8"], "seed",
         "up to seed + parallel_seeds - 1 + 2 = 4294967299"),
    Case("seed near 2^32 with environment copies", ["seed=4294967000", "env.num_envs=1000"],
         "seed", "stays below 2^32"),
    Case("return support of 1e30", ["env.return_min=-1e30", "env.return_max=1e30"],
         "env.return_min", "must be within [-1e+06, 1e+06]", cli=True),
    Case("return_max of 1e30", ["env.return_max=1e30"], "env.return_max",
         "must be within [-1e+06, 1e+06]"),
    Case("reward_scale of 1e30", ["env.reward_scale=1e30"], "env.reward_scale",
         "positive and at most 1e+06"),
    Case("reward_scale 0", ["env.reward_scale=0"], "env.reward_scale", "positive"),
    Case("200000 environment copies", ["env.num_envs=200000"], "env.num_envs",
         "must be at most 4096", cli=True),
    Case("zero environment copies", ["env.num_envs=0"], "env.num_envs", "a positive integer"),
    Case("a million evaluation environments", ["evaluation.batch_envs=1000000"],
         "evaluation.batch_envs", "must be at most 65536"),
    Case("zero evaluation environments", ["evaluation.batch_envs=0"], "evaluation.batch_envs",
         "a positive integer"),
    Case("thousands of parallel seeds", ["parallel_seeds=5000"], "parallel_seeds",
         "must be at most 256"),
    Case("zero parallel seeds", ["parallel_seeds=0"], "parallel_seeds", "a positive integer"),
    Case("a million torch threads", ["hardware.torch_threads=1000000"], "hardware.torch_threads",
         "must be at most 1024"),
    Case("tiny integration step", ["agent=rs_umdqn_c", "agent.integration_step=1e-9"],
         "agent.integration_step", "nodes per state (env.return_min/env.return_max span 4 "
         "every 1e-09), over limits.lattice_nodes=1000", cli=True),
    Case("wide support for the lattice", ["agent=umdqn_kl", "env.return_min=-100",
                                          "env.return_max=100"],
         "agent.integration_step", "raise agent.integration_step to at least 0.21"),
    Case("tiny fraction step", ["agent=umdqn_w", "agent.integration_step=1e-6"],
         "agent.integration_step", "agent.fraction_scale span 8"),
    Case("zero lattice budget", ["limits.lattice_nodes=0"], "limits.lattice_nodes",
         "a positive integer"),
    Case("memory fraction above 1", ["limits.memory_fraction=2"], "limits.memory_fraction",
         "in (0, 1]"),
    Case("replay of terabytes", ["learning.replay_capacity=1000000000000"],
         "learning.replay_capacity", "lower learning.replay_capacity", cli=True),
    Case("replay of terabytes over parallel seeds", ["learning.replay_capacity=30000000000",
                                                     "parallel_seeds=100"],
         "learning.replay_capacity", "for parallel_seeds=100"),
    Case("networks of terabytes", ["agent.hidden_sizes=[" + ",".join(["65536"] * 16) + "]"],
         "agent.hidden_sizes", "the networks: "),
    Case("critics of terabytes", ["env=pendulum", "agent=tqc", "agent.n_critics=64",
                                  "agent.n_quantiles=16", "agent.hidden_sizes=[30000,30000]"],
         "agent.hidden_sizes", "lower agent.hidden_sizes, agent.n_critics or agent.n_quantiles"),
    Case("a layer wider than the bound", ["agent.hidden_sizes=[100000]"], "agent.hidden_sizes",
         "must hold at most 64 layers of at most 65536 units each, got [100000]"),
    Case("a head layer wider than the bound", ["agent=iqn", "agent.head_hidden_sizes=[70000]"],
         "agent.head_hidden_sizes", "at most 65536 units each"),
    Case("twenty thousand critics", ["env=pendulum", "agent=tqc", "agent.n_critics=20000"],
         "agent.n_critics", "must be an integer in [1, 64] (each critic is a network", cli=True),
    Case("a million critics", ["env=pendulum", "agent=dsac", "agent.n_critics=1000000"],
         "agent.n_critics", "must be an integer in [1, 64]"),
    Case("1e8 quantiles", ["env=pendulum", "agent=tqc", "agent.n_quantiles=100000000"],
         "agent.n_quantiles", "must be an integer in [1, 1024] (the losses compare every pair"),
    Case("the critics' pooled atoms past the bound", ["env=pendulum", "agent=tqc",
                                                      "agent.n_critics=64",
                                                      "agent.n_quantiles=25"],
         "agent.n_quantiles", "n_critics x n_quantiles = 64 x 25, must be at most 1024"),
    Case("QR-DQN quantiles past the bound", ["agent=qr_dqn", "agent.n_quantiles=5000"],
         "agent.n_quantiles", "must be an integer in [1, 1024]"),
    Case("C51 atoms past the bound", ["agent=c51", "agent.n_atoms=100001"], "agent.n_atoms",
         "must be an integer in [2, 1024]"),
    Case("IQN fractions past the bound", ["agent=iqn", "agent.n_target_fractions=4096"],
         "agent.n_target_fractions", "must be an integer in [1, 1024]"),
    Case("lattice of terabytes", ["agent=rs_umdqn_c", "limits.lattice_nodes=100000000",
                                  "agent.integration_step=1e-7"],
         "agent.integration_step", "the UMNN lattice: "),
    # values of the wrong type or out of range, more keys
    Case("seed not an integer", ["seed=1.5"], "seed", "must be an integer"),
    Case("replay capacity 0", ["learning.replay_capacity=0"], "learning.replay_capacity",
         "a positive integer"),
    Case("batch above the replay", ["learning.batch_size=64", "learning.replay_capacity=32"],
         "learning.batch_size", "at most learning.replay_capacity=32"),
    Case("negative warmup", ["learning.warmup_steps=-1"], "learning.warmup_steps", ">= 0"),
    Case("epsilon above 1", ["learning.epsilon_start=1.5"], "learning.epsilon_start",
         "in [0, 1]"),
    Case("unknown epsilon schedule", ["learning.epsilon_schedule=cosine"],
         "learning.epsilon_schedule", "one of exponential, linear"),
    Case("negative evaluation period", ["evaluation.every_n_steps=-5"],
         "evaluation.every_n_steps", ">= 0"),
    Case("zero log period", ["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps",
         "a positive integer"),
    Case("two devices", ["hardware.devices=2"], "hardware.devices", "1 (one device per run)"),
    Case("unknown precision", ["hardware.precision=8-true"], "hardware.precision", "one of "),
    Case("float64 precision", ["hardware.precision=64-true"], "hardware.precision",
         "must be one of 32-true, 16-mixed, bf16-mixed, got '64-true'", cli=True),
    Case("MPS without MPS", ["hardware.accelerator=mps"], "hardware.accelerator",
         "mps needs Apple's Metal (MPS) device, which this machine lacks", cli=True,
         gpu_dependent=True),
    Case("CUDA accelerator without a GPU", ["hardware.accelerator=cuda"], "hardware",
         "no CUDA device", gpu_dependent=True),
    Case("unknown observation normalization", ["env.observation_normalization=zscore"],
         "env.observation_normalization", "one of "),
    Case("zero max_episode_steps", ["env.max_episode_steps=0"], "env.max_episode_steps",
         "a positive integer or null"),
    Case("unknown env backend", ["env.backend=jax"], "env.backend", "one of gymnasium, torch"),
    Case("torch backend on a gymnasium world", ["env=cartpole", "env.backend=torch"],
         "env.backend", "steps with env.backend=gymnasium", cli=True),
    Case("torch backend with a time limit on a grid world", ["env.backend=torch",
         "env.max_episode_steps=5"], "env.max_episode_steps", "must be null"),
    Case("an env preset without a backend (written before the key)", ["~env.backend"],
         "env.backend", "adds `backend: gymnasium`", cli=True),
    Case("negative fault injection step", ["fault_injection.nan_loss_at_step=-1"],
         "fault_injection.nan_loss_at_step", "a positive step or null"),
    Case("empty hidden sizes", ["agent.hidden_sizes=[]"], "agent.hidden_sizes",
         "a non-empty list of positive sizes"),

    # the objective (objective=static)
    Case("objective unknown", ["objective=nested"], "objective",
         "must be one of per_decision, static, got 'nested'", cli=True),
    Case("static objective of DQN", ["objective=static", "agent=dqn"], "objective",
         "static needs a distributional agent; agent=dqn learns a point value (allowed: "
         "per_decision)"),
    Case("static objective risk-conditioned", ["objective=static", "agent=c51",
                                               "agent.risk_conditioned=true"], "objective",
         "static does not combine with agent.risk_conditioned=true"),
    Case("static uniform share above 1", ["static_objective.uniform_share=1.5"],
         "static_objective.uniform_share", "must be in [0, 1], got 1.5"),
    Case("static thresholds 1", ["static_objective.thresholds=1"], "static_objective.thresholds",
         "must be an integer in [2, 4096], got 1"),
    # risk conditioning (agent.risk_conditioned=true)
    Case("risk-conditioned DQN", ["agent=dqn", "agent.risk_conditioned=true"],
         "agent.risk_conditioned", "DQN learns no distribution", cli=True),
    Case("conditioning alpha above 1", ["agent=c51", "agent.risk_conditioned=true",
                                        "risk_conditioning.alpha=[0,1.5]"],
         "risk_conditioning.alpha", "every value must be in [0, 1], got [0, 1.5]"),
    Case("conditioning alpha below 0", ["agent=c51", "agent.risk_conditioned=true",
                                        "risk_conditioning.alpha=[-0.2,1]"],
         "risk_conditioning.alpha", "every value must be in [0, 1]"),
    Case("conditioning rho 0", ["agent=c51", "agent.risk_conditioned=true",
                                "risk_conditioning.rho=[0,0.5]"],
         "risk_conditioning.rho", "every value must be in (0, 1]"),
    Case("conditioning rho above 1", ["agent=c51", "agent.risk_conditioned=true",
                                      "risk_conditioning.rho=[0.1,1.5]"],
         "risk_conditioning.rho", "every value must be in (0, 1]"),
    Case("conditioning settings per batch 0", ["agent=c51", "agent.risk_conditioned=true",
                                               "risk_conditioning.settings_per_batch=0"],
         "risk_conditioning.settings_per_batch", "must be null (one per transition) or a "
         "positive integer, got 0"),
    Case("conditioning range of three values", ["agent=c51", "agent.risk_conditioned=true",
                                                "risk_conditioning.alpha=[0,0.5,1]"],
         "risk_conditioning.alpha", "must be [low, high] for draw=uniform"),
    Case("conditioning on a measure without a parameter", [
        "agent=c51", "agent.risk_conditioned=true", "risk=expectation"],
         "risk_conditioning", "risk=expectation declares no parameter"),
    Case("conditioning on a measure without a per-row parameter", [
        "agent=c51", "agent.risk_conditioned=true", "risk=cpw", "+risk_conditioning.eta=[0.5,1]"],
         "risk_conditioning", "risk=cpw takes no parameter per row"),
    Case("conditioning without the measure's range", ["agent=c51", "agent.risk_conditioned=true",
                                                       "risk=wang"],
         "risk_conditioning.eta", "the range of risk=wang's parameter is required"),
    Case("run's own rho outside the conditioning range", [
        "agent=c51", "agent.risk_conditioned=true", "rho=0.7"],
         "risk_conditioning", "rho=0.7 lies outside the range this run was trained on"),
    # config group options that do not exist
    Case("unknown agent option", ["agent=nope"], "agent", "no option 'nope'; allowed:", cli=True),
    Case("unknown risk option", ["risk=nope"], "risk", "no option 'nope'; allowed:"),
    Case("unknown env option", ["env=nope"], "env", "no option 'nope'; allowed:", cli=True),
    Case("unknown logger option", ["logger=nope"], "logger", "no option 'nope'; allowed:"),
    Case("GPU hardware without a GPU", ["hardware=gpu"], "hardware",
         "no CUDA device; use hardware=cpu", cli=True, gpu_dependent=True),
    Case("mixed-precision GPU without a GPU", ["hardware=gpu_mixed"], "hardware",
         "no CUDA device", gpu_dependent=True),
    # the environment
    Case("unregistered gymnasium id", ["env.id=Nope-v0"], "env.id",
         "'Nope-v0' is not a registered gymnasium id", cli=True),
    Case("argument the env does not take", ["+env.kwargs.nope=1"], "env.kwargs",
         "rejects these arguments"),
    Case("continuous actions for a discrete agent", ["env=pendulum", "agent=dqn"], "agent",
         "dqn picks among discrete actions, and 'Pendulum-v1' has continuous ones (a Box); "
         "allowed: dsac, ppo, tqc", cli=True),
    Case("discrete actions for an actor-critic", ["env=cartpole", "agent=tqc"], "agent",
         "tqc acts in a continuous box, and 'CartPole-v1' has 2 discrete actions; allowed:",
         cli=True),
    Case("the static objective for an actor-critic",
         ["env=pendulum", "agent=dsac", "objective=static"], "objective",
         "static is not defined for agent=dsac: its acting rule is an argmax over a finite set"),
    Case("unbounded continuous actions", ["env=gym", "env.id=tests.gym_test_envs:UnboundedActions-v0",
                                          "agent=tqc"], "env.id",
         "Box(-inf, inf, (1,), float32); supported: Discrete actions, or a 1-D Box with finite"),
    Case("an action box of no dimension", ["env=gym", "env.id=tests.gym_test_envs:OddActions-v0",
                                           "agent=tqc", "+env.kwargs.box=empty"], "env.id",
         "(0,), float32); supported: Discrete actions, or a 1-D Box", cli=True),
    Case("an action box fixed in one dimension", [
        "env=gym", "env.id=tests.gym_test_envs:OddActions-v0", "agent=dsac",
        "+env.kwargs.box=fixed"], "env.id", "(here: dimension 1 spans [0.5, 0.5]: nothing to "
         "choose there)", cli=True),
    Case("an action box of integers", ["env=gym", "env.id=tests.gym_test_envs:OddActions-v0",
                                       "agent=tqc", "+env.kwargs.box=integer"], "env.id",
         "(here: a Box of int64 numbers, which a continuous actor cannot give)"),
    Case("an action box of integers for a discrete agent", [
        "env=gym", "env.id=tests.gym_test_envs:OddActions-v0", "agent=dqn",
        "+env.kwargs.box=integer"], "env.id", "a Box of int64 numbers"),
    # the risky navigation world's arguments, its training ones named as such
    Case("navigation negative step cost", ["env=risky_navigation", "agent=tqc",
                                           "env.kwargs.step_cost=-0.1"],
         "env.kwargs.step_cost", "step_cost must be a finite number >= 0 (a cost), got -0.1",
         cli=True),
    Case("navigation negative penalty", ["env=risky_navigation", "agent=dsac",
                                         "env.kwargs.penalty=-2"],
         "env.kwargs.penalty", "penalty must be a finite number >= 0"),
    Case("navigation NaN shaping", ["env=risky_navigation", "agent=tqc",
                                    "env.kwargs.shaping=nan"],
         "env.kwargs.shaping", "shaping must be a finite number, got nan"),
    Case("navigation infinite step cost", ["env=risky_navigation", "agent=tqc",
                                           "env.kwargs.step_cost=inf"],
         "env.kwargs.step_cost", "got inf"),
    Case("navigation south edge -inf", ["env=risky_navigation", "agent=tqc",
                                        "env.kwargs.south_edge=-inf"],
         "env.kwargs.south_edge", "south_edge must be in [-2.5, -0.25]"),
    Case("navigation training start unknown", ["env=risky_navigation", "agent=tqc",
                                               "+env.training_kwargs.start=corner"],
         "env.training_kwargs.start", "start must be one of origin, anywhere, mixed", cli=True),
    Case("navigation training shaping infinite", ["env=risky_navigation", "agent=tqc",
                                                  "+env.training_kwargs.shaping=-inf"],
         "env.training_kwargs.shaping", "must be a finite number"),
    Case("navigation training argument unknown", ["env=risky_navigation", "agent=tqc",
                                                  "+env.training_kwargs.nope=1"],
         "env.training_kwargs", "rejects these arguments"),
    Case("video observations", ["env=gym", "env.id=tests.gym_test_envs:Video-v0"], "env.id",
         "(2, 4, 4, 3), uint8); supported: a 1-D Box (fed to the network as it is), a 2-D or "
         "3-D Box (an image: network=cnn) or Discrete", cli=True),
    # the network
    Case("unknown network", ["network.name=resnet"], "network.name", "must be one of mlp, cnn"),
    Case("cnn without channels", ["network=cnn", "network.channels=[]"], "network.channels",
         "must be a non-empty list of positive channel counts"),
    Case("mlp with channels", ["network.channels=[8]"], "network.channels",
         "the mlp reads no image, so it must be []"),
    Case("zero stride", ["network=cnn", "network.stride=0"], "network.stride",
         "must be a positive integer"),
    Case("unknown layout", ["network=cnn", "network.layout=nhwc"], "network.layout",
         "must be one of channels_last, channels_first"),
    Case("cnn on flat observations", ["network=cnn"], "network",
         "cnn reads image observations ([H, W, C], [C, H, W] or [H, W]), and this "
         "environment's are flat vectors of", cli=True),
    Case("kernel larger than the image",
         ["env=gym", "env.id=tests.gym_test_envs:TinyImage-v0", "network=cnn",
          "network.kernel_size=9"], "network.kernel_size",
         "1 convolution of kernel 9 and stride 1 leave nothing of a [8, 8, 3] image"),
    Case("gymnasium env without an id", ["env=gym"], "env.id", "a value is required"),
    # checkpoints
    Case("missing checkpoint", ["ckpt_path={tmp}/nothing.ckpt"], "ckpt_path",
         "no checkpoint file there"),
    Case("checkpoint path is a folder", ["ckpt_path={tmp}"], "ckpt_path", "a folder"),
    Case("checkpoint of garbage bytes", ["ckpt_path={tmp}/garbage.ckpt"], "ckpt_path",
         "is not a readable checkpoint", cli=True),
    Case("truncated checkpoint", ["ckpt_path={tmp}/truncated.ckpt"], "ckpt_path",
         "is not a readable checkpoint"),
    Case("empty checkpoint", ["ckpt_path={tmp}/empty.ckpt"], "ckpt_path",
         "is not a readable checkpoint"),
    Case("checkpoint of another agent", ["agent=rs_umdqn_c", "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "was written by agent dqn, this run is agent=rs_umdqn_c", cli=True),
    Case("checkpoint of another network size", ["agent=dqn", "agent.hidden_sizes=[64,64]",
                                                "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "does not fit this run's network"),
    Case("checkpoint of another environment", ["agent=dqn", "env=risky_grid_world",
                                               "ckpt_path={dqn_ckpt}"],
         "ckpt_path", "was written on env rs_lightning/RiskyRewards-v0"),
    # the command line itself
    Case("override without a key", ["=3"], "override '=3'", "has no key; write key=value",
         cli=True),
    Case("override with a double =", ["alpha==1"], "override 'alpha==1'",
         "is malformed (extraneous input '='); write key=value", cli=True),
    Case("override with an open bracket", ["alpha=[1"], "override 'alpha=[1'", "is malformed"),
    Case("override without a value", ["alpha"], "override 'alpha'", "is malformed"),
    Case("unknown key", ["nope=1"], "nope", "unknown key"),
    Case("unknown nested key", ["learning.nope=1"], "learning.nope", "unknown key"),
    Case("adding a key that exists", ["+alpha=0.3"], "alpha", "already exists"),
    # files: config group files that are not YAML mappings, damaged files in a run folder
    Case("experiment file not YAML", ["experiment=broken", "hydra.searchpath=[file://{tmp}/extra]"],
         "{tmp}/extra/experiment/broken.yaml",
         "is not valid YAML (line 3, column 6: while parsing a flow sequence", cli=True),
    Case("experiment file of prose", ["experiment=prose", "hydra.searchpath=[file://{tmp}/extra]"],
         "{tmp}/extra/experiment/prose.yaml", "must hold `key: value` lines (a YAML mapping), "
         "got a str: 'Train on the risky grid world'"),
    Case("experiment file of a list", ["experiment=listed", "hydra.searchpath=[file://{tmp}/extra]"],
         "{tmp}/extra/experiment/listed.yaml", "got a list"),
    Case("experiment file of binary bytes", ["experiment=binary",
                                             "hydra.searchpath=[file://{tmp}/extra]"],
         "{tmp}/extra/experiment/binary.yaml", "is not a text file (not UTF-8 at byte 1)"),
    Case("env file not YAML", ["env=broken", "hydra.searchpath=[file://{tmp}/extra]"],
         "{tmp}/extra/env/broken.yaml", "is not valid YAML"),
    Case("damaged config.yaml in the run folder", ["hydra.run.dir={tmp}/damaged_config"],
         "{tmp}/damaged_config/config.yaml", "is damaged (", cli=True, extra=FINISHED_RUN),
    Case("config.yaml of a list in the run folder", ["hydra.run.dir={tmp}/listed_config"],
         "{tmp}/listed_config/config.yaml", "so nothing is written there", extra=FINISHED_RUN),
    # the environment of the process
    Case("WANDB_MODE empty", ["logger=wandb"], "WANDB_MODE",
         "must be unset or one of online, offline, disabled, dryrun, run, shared, got ''",
         cli=True, environ={"WANDB_MODE": ""}),
    Case("WANDB_MODE nonsense", ["logger=wandb"], "WANDB_MODE", "got 'nonsense'",
         environ={"WANDB_MODE": "nonsense"}),
    # the output folder
    Case("output folder under a file", ["hydra.run.dir={tmp}/garbage.ckpt/run"],
         "hydra.run.dir", "is a file, not a folder", cli=True),
    Case("output folder holding a run of another config", ["alpha=0.3"], "hydra.run.dir",
         "holds a run of another config (alpha: 0.5 there, 0.3 now)", cli=True,
         extra=FINISHED_RUN),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A finished run's folder (the target of every case) and checkpoint files good and bad."""
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    tmp = tmp_path_factory.mktemp("bad_inputs")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=FINISHED_RUN)
    finished = tmp / "finished_run"
    run(cfg, run_dir=finished)
    good = finished / "checkpoints" / "last.ckpt"
    (tmp / "garbage.ckpt").write_bytes(os.urandom(4096))
    (tmp / "truncated.ckpt").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (tmp / "empty.ckpt").write_bytes(b"")
    for group, name, content in (
        ("experiment", "broken", b"# @package _global_\nfoo: [1, 2\n  bar: : x\n"),
        ("experiment", "prose", b"Train on the risky grid world\n"),
        ("experiment", "listed", b"- alpha\n- rho\n"),
        ("experiment", "binary", b"\x00\xff\xfe\x00"),
        ("env", "broken", b"id: [\n"),
    ):
        (tmp / "extra" / group).mkdir(parents=True, exist_ok=True)
        (tmp / "extra" / group / f"{name}.yaml").write_bytes(content)
    for folder, content in (("damaged_config", b"alpha: 0.5\nseed: [\x00\n"),
                            ("listed_config", b"- alpha\n")):
        shutil.copytree(finished, tmp / folder)
        (tmp / folder / "config.yaml").write_bytes(content)
    return {"tmp": tmp, "finished": finished, "dqn_ckpt": good}


def overrides_of(case: Case, files) -> list[str]:
    fill = {"tmp": files["tmp"], "dqn_ckpt": files["dqn_ckpt"]}
    return case.extra + [o.format(**fill) for o in case.overrides]


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder below ``folder`` with its size, modification time and bytes."""
    return {
        str(p.relative_to(folder)): (
            (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else (0, 0, b"")
        )
        for p in sorted(folder.rglob("*"))
    }


def error_in_process(compose, overrides: list[str], run_dir: Path) -> ConfigError:
    """The error the command line would report, raised by the same checks in-process."""
    try:
        check_overrides(overrides)
        check_group_files(overrides, CONF)
        cfg = compose([o for o in overrides if not o.startswith("hydra.run.dir=")])
    except ConfigError as error:
        return error
    except Exception as error:  # Hydra's composition errors, as the command line words them
        return describe_hydra_error(error)
    for o in overrides:
        if o.startswith("hydra.run.dir="):
            run_dir = Path(o.split("=", 1)[1])
    with pytest.raises(ConfigError) as error:
        skip_resume_or_run(cfg, run_dir, "hydra.run.dir")  # the job train.py runs
    return error.value


def test_the_table_has_at_least_80_bad_inputs():
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)
    assert sum(c.cli for c in CASES) >= 10


def skip_if_gpu(case: Case) -> None:
    if case.gpu_dependent and (torch.cuda.is_available() or torch.backends.mps.is_available()):
        pytest.skip("this machine has a GPU: the option is valid here")


def target_folder(overrides: list[str], files) -> Path:
    """The run folder a case is aimed at: its hydra.run.dir, else the finished run."""
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir=")]
    return Path(given[-1]) if given else files["finished"]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_error_and_writes_nothing(compose, files, case, monkeypatch):
    skip_if_gpu(case)
    for name, value in case.environ.items():
        monkeypatch.setenv(name, value)
    overrides = overrides_of(case, files)
    folder = target_folder(overrides, files)
    before = snapshot(folder) if folder.is_dir() else {}
    error = error_in_process(compose, overrides, files["finished"])
    message = str(error)
    key = case.key.format(tmp=files["tmp"])
    assert error.key == key, message
    assert message.startswith(f"{key}: ") and "\n" not in message
    assert case.allowed in message
    assert (snapshot(folder) if folder.is_dir() else {}) == before


# ------------------------------------------------------------------ the real command line
CLI_CASES = [c for c in CASES if c.cli]
# Every case above runs in-process in the default suite; on the command line (about 5 s of
# imports each) these run with -m slow, as another command line case of the default suite
# takes the same way to its line: a value the schema refuses ("alpha above 1", "max_time not
# a duration", "a number where a list goes"), a budget ("replay of terabytes"), a missing
# config group option ("unknown agent option"), and the environment's spaces
# (test_gym_envs.py's command line cases).
CLI_SLOW = {"zero batch size", "zero update ratio", "lr infinite", "reward_scale inf",
            "seed 2^32", "return support of 1e30", "200000 environment copies",
            "objective unknown", "tiny integration step", "unknown env option",
            "continuous actions for a discrete agent", "discrete actions for an actor-critic",
            "video observations", "twenty thousand critics", "MPS without MPS",
            "an action box of no dimension", "an action box fixed in one dimension",
            "navigation negative step cost"}
assert CLI_SLOW <= {c.id for c in CLI_CASES}


@pytest.fixture(scope="module")
def cli_results(files, request):
    """Every command line case this session runs, side by side, each against its own copy of
    the finished run (so that a case writing into it is caught as that case)."""
    selected = {item.callspec.params["case"].id for item in request.session.items
                if getattr(item, "originalname", None) == "test_bad_input_on_the_command_line"}
    cases = [c for c in CLI_CASES if c.id in selected]

    def one(case: Case):
        args = overrides_of(case, files)
        target = files["tmp"] / f"cli_{CASES.index(case)}"
        if any(o.startswith("hydra.run.dir=") for o in args):
            target = target_folder(args, files)
        else:
            shutil.copytree(files["finished"], target)
            args.append(f"hydra.run.dir={target}")
        before = snapshot(target) if target.is_dir() else {}
        env = {**os.environ, "WANDB_MODE": "offline", **case.environ}
        env.pop("HYDRA_FULL_ERROR", None)
        result = subprocess.run(
            [*python_command(), str(ROOT / "train.py"), *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
        return result, before == (snapshot(target) if target.is_dir() else {})

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip((c.id for c in cases), pool.map(one, cases)))


@pytest.mark.parametrize("case", [
    pytest.param(c, id=c.id, marks=pytest.mark.slow if c.id in CLI_SLOW else ())
    for c in CLI_CASES])
def test_bad_input_on_the_command_line(cli_results, files, case):
    skip_if_gpu(case)
    result, untouched = cli_results[case.id]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith(f"Error in config: {case.key.format(tmp=files['tmp'])}: ")
    assert case.allowed in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert untouched, "the command wrote into the existing run's folder"


# ------------------------------------------------------------------ the budgets' rules
@pytest.mark.parametrize("low, high, step", [(-2.0, 2.0, 0.02), (0.5, 3.0, 0.07), (-100.0, -3.0, 0.3),
                                             (-4.0, 4.0, 0.04)])
def test_the_lattice_rule_counts_the_nodes_of_the_lattice_built(low, high, step):
    from rs_lightning.agents.umnn import covering_lattice, lattice_nodes

    for even in (False, True):
        built = covering_lattice(low, high, step, even).size
        assert built - 2 <= lattice_nodes(low, high, step) <= built


def test_the_memory_estimate_names_the_largest_part_and_the_limit(compose):
    from rs_lightning.config.schema import validate
    from rs_lightning.engine.resources import check_memory, replay_bytes
    from rs_lightning.envs.factory import env_problem

    settings = validate(compose(["agent=dqn", "learning.replay_capacity=1000000"]))
    problem = env_problem(settings.train.env)
    # Risky rewards: 2 observations of 2 floats, an int64 action, 2 floats a transition.
    assert replay_bytes(settings, problem) == 1_000_000 * (2 * problem.obs_dim * 4 + 16)
    check_memory(settings, problem, host=(10**9, "a test figure"))
    with pytest.raises(ConfigError) as error:
        check_memory(settings, problem, host=(40 * 10**6, "a test figure"))
    assert error.value.key == "learning.replay_capacity"
    assert str(error.value).endswith(
        "more than limits.memory_fraction=0.8 of the 40 MB available (a test figure), 32 MB; "
        "lower learning.replay_capacity")


def test_a_launcher_setting_of_the_wrong_type_says_why(tmp_path):
    result = subprocess.run(
        [*python_command(), str(ROOT / "train.py"), "-m", "hydra/launcher=joblib",
         "hydra.launcher.n_jobs=abc", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "Error in config: hydra.launcher.n_jobs: must be an integer, got 'abc'")
    assert not (tmp_path / "sweep").exists()
