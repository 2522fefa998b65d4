"""The distributional Q-learning loop as a LightningModule: one gradient update per step.

The module owns what the paper's algorithm keeps besides the network: the target network,
the epsilon-greedy schedule and the utility. It knows neither which agent nor which risk
measure it runs: the agent computes its loss from a batch, and the utility (alpha E + (1 -
alpha) R) picks both the acting action and the target action.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from typing import Any, Iterator

import numpy as np
import pytorch_lightning as pl
import torch

from rs_lightning.agents.base import Agent
from rs_lightning.data.datamodule import ExperienceBatch
from rs_lightning.errors import NumericalFault
from rs_lightning.risk import Utility

log = logging.getLogger("rs_lightning")


def exploration_rate(env_step: int, start: float, end: float, decay: float, schedule: str) -> float:
    """epsilon after ``env_step`` environment steps.

    ``exponential``: end + (start - end) * exp(-t / decay) (the authors' schedule);
    ``linear``: from start to end over ``decay`` steps, then constant.
    """
    if schedule == "exponential":
        return end + (start - end) * math.exp(-env_step / decay)
    return end + (start - end) * max(0.0, 1.0 - env_step / decay)


class TrainingClock:
    """Wall seconds spent in training, summed over the attempts of a resumed run (the time
    between an interruption and its resume does not count)."""

    def __init__(self) -> None:
        self.before = 0.0  # seconds of the earlier attempts (from the checkpoint)
        self.started: float | None = None

    def start(self) -> None:
        self.started = time.perf_counter()

    def seconds(self) -> float:
        running = 0.0 if self.started is None else time.perf_counter() - self.started
        return self.before + running


def make_optimizer(agent, learning) -> torch.optim.Optimizer:
    """Adam on the agent's parameters (fused where the device allows: one kernel per step)."""
    fused = learning.fused_adam and all(
        p.device.type in ("cpu", "cuda") for p in agent.parameters()
    )
    return torch.optim.Adam(agent.parameters(), lr=learning.lr, eps=learning.adam_eps, fused=fused)


def log_ended_episodes(loggers, step: int, returns, outcomes, env_steps: int) -> None:
    """Each ended episode's return and risk outcome, at the update where it ended."""
    for episode_return, outcome in zip(returns, outcomes):
        metrics = {"episode/return": episode_return, "episode/env_steps": float(env_steps)}
        if outcome == outcome:  # not NaN: the environment reports R_s
            metrics["episode/risk_outcome"] = outcome
        for logger in loggers:
            logger.log_metrics(metrics, step=step)


def parameters_finite(agent) -> bool:
    """Whether every parameter of ``agent`` is finite (one host sync for all of them)."""
    flat = torch.cat([p.detach().reshape(-1) for p in agent.parameters()])
    return bool(torch.isfinite(flat).all())


def _numpy_global_state() -> tuple:
    """numpy's global generator state in plain types (checkpoints load with weights_only)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return name, keys.tolist(), int(position), int(has_gauss), float(cached)


class RiskSensitiveQLearning(pl.LightningModule):
    """Risk-sensitive distributional Q-learning (the paper's Algorithm 1) for any agent."""

    def __init__(
        self,
        agent: Agent,
        utility: Utility,
        learning,
        seed: int,
        log_every_n_steps: int = 100,
        fault_injection=None,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False  # one explicit update per step, nothing hidden
        self.agent = agent
        self.target_agent = copy.deepcopy(agent).requires_grad_(False).eval()
        self.utility = utility
        self.learning = learning
        self.n_actions = agent.problem.n_actions
        self.log_every_n_steps = log_every_n_steps
        self.exploration_rng = np.random.default_rng(seed + 2)
        self.epsilon = learning.epsilon_start
        # What the progress bar and the loggers show; refreshed every log_every_n_steps.
        self.live_metrics: dict[str, float] = {}
        self._window_returns: list[float] = []
        self._window_outcomes: list[float] = []
        self._episodes = 0
        self._window_start = (time.perf_counter(), 0)
        self._direct_backward = False
        # Updates dropped for a NaN / inf loss or gradient (learning.on_non_finite=skip).
        self.skipped_updates = 0
        self.clock = TrainingClock()
        # Test hooks that break the run on purpose (config section fault_injection).
        self._nan_loss_at = getattr(fault_injection, "nan_loss_at_step", None)
        self._nan_parameters_at = getattr(fault_injection, "nan_parameters_at_step", None)

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning records the running hook's name on the module about 24 times per step;
        # nn.Module.__setattr__ checks parameters, buffers and submodules each time, which
        # costs more than the env step. A plain string attribute needs none of that.
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # ----------------------------------------------------------------- acting
    @torch.no_grad()
    def explore(self, obs: np.ndarray, env_step: int) -> int:
        """Epsilon-greedy on the utility: the behaviour policy the datamodule follows."""
        cfg = self.learning
        self.epsilon = exploration_rate(
            env_step, cfg.epsilon_start, cfg.epsilon_end, cfg.epsilon_decay, cfg.epsilon_schedule
        )
        if self.exploration_rng.random() < self.epsilon:
            return int(self.exploration_rng.integers(self.n_actions))
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device).unsqueeze(0)
        return int(self.agent.greedy_action(obs_t, self.utility.greedy)[0])

    @torch.no_grad()
    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The greedy policy on the utility for a batch of observations (evaluation)."""
        return self.agent.greedy_action(obs.to(self.device, torch.float32), self.utility.greedy)

    # --------------------------------------------------------------- learning
    def on_train_start(self) -> None:
        self.clock.start()

    def on_fit_start(self) -> None:
        # On one device without a gradient scaler, Lightning's manual_backward only adds hook
        # calls around loss.backward(), which cost about a sixth of a DQN step on a CPU.
        self._direct_backward = str(self.trainer.precision) != "16-mixed"

    def configure_optimizers(self):
        return make_optimizer(self.agent, self.learning)

    def training_step(self, dataloader_iter: Iterator) -> None:
        # The batch is fetched here, not prefetched by Lightning: the environment step behind
        # it happens inside this update, so a checkpoint saved after it holds no step ahead.
        batch: ExperienceBatch = next(dataloader_iter)[0]
        transitions = batch.transitions
        if self.device.type != "cpu":
            transitions = type(transitions)(*(t.to(self.device) for t in transitions))
        optimizer = self.optimizers()
        update = self.global_step + 1  # the number of the update this step makes
        loss, agent_metrics = self.agent.loss(transitions, self.target_agent, self.utility.greedy)
        if update == self._nan_loss_at:
            loss = loss + float("nan")
        optimizer.zero_grad(set_to_none=True)
        if self._direct_backward:
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                self.agent.parameters(), self.learning.grad_clip_norm, foreach=True
            )
            # One host sync covers both: a NaN or an infinity in either makes the sum one.
            if not math.isfinite(float(loss.detach() + grad_norm)):
                self._non_finite_update(update, loss, grad_norm)
        else:  # fp16: Lightning's scaler must unscale the gradients before clipping
            self.manual_backward(loss)
            self.clip_gradients(optimizer, self.learning.grad_clip_norm, "norm")
            grad_norm = torch.tensor(float("nan"))
            # Overflowing fp16 gradients are the scaler's business (it skips that step);
            # a non-finite loss is not.
            if not math.isfinite(float(loss.detach())):
                self._non_finite_update(update, loss, None)
        optimizer.step()
        if update == self._nan_parameters_at:
            with torch.no_grad():
                next(self.agent.parameters()).fill_(float("nan"))
        step = self.global_step  # counts the update just made
        if step % self.learning.target_update_period == 0:
            self.target_agent.load_state_dict(self.agent.state_dict())

        if batch.episode_returns:
            self._window_returns.extend(batch.episode_returns)
            self._window_outcomes.extend(batch.episode_outcomes)
            self._log_episodes(step, batch)
        if step % self.log_every_n_steps == 0:
            # Parameters can only turn non-finite in an update whose loss and gradient were
            # finite (an overflow); checking them costs ~5% of a DQN step, so it is done here,
            # before each checkpoint and when a loss is not finite.
            self.check_parameters(step)
            self._log_window(step, batch.env_steps, loss, grad_norm, agent_metrics)

    # ------------------------------------------------------------ numerical faults
    def parameters_finite(self) -> bool:
        return parameters_finite(self.agent)

    def check_parameters(self, step: int) -> None:
        """Raise NumericalFault if a parameter is NaN or infinite after ``step`` updates."""
        if not self.parameters_finite():
            raise NumericalFault("parameters", step)

    def _non_finite_update(self, update: int, loss: torch.Tensor, grad_norm) -> None:
        """Stop the run, or drop this update (learning.on_non_finite=skip).

        A NaN loss usually comes from NaN parameters: those cannot be skipped past (every
        later update would be dropped too), so they always stop the run, named as such.
        """
        self.check_parameters(update - 1)
        loss_value = float(loss.detach())
        if not math.isfinite(loss_value):
            quantity, value = "loss", loss_value
        else:
            quantity, value = "gradient norm", float(grad_norm)
        if self.learning.on_non_finite == "stop":
            raise NumericalFault(quantity, update, value)
        self.skipped_updates += 1
        if self.skipped_updates <= 10:
            log.warning("skipping update %d: non-finite %s (%s)%s", update, quantity, value,
                        "; further skips are only counted" if self.skipped_updates == 10 else "")
        if self._direct_backward:
            # Without gradients the optimizer leaves every parameter and its state as it is,
            # while the step still counts, so schedules and checkpoints stay on the step grid.
            self.optimizers().zero_grad(set_to_none=True)

    def _log_episodes(self, step: int, batch: ExperienceBatch) -> None:
        log_ended_episodes(self.loggers, step, batch.episode_returns, batch.episode_outcomes,
                           batch.env_steps)

    def _log_window(self, step, env_steps, loss, grad_norm, agent_metrics) -> None:
        now = time.perf_counter()
        start_time, start_step = self._window_start
        metrics = {
            "train/loss": float(loss.detach()),
            "train/grad_norm": float(grad_norm),
            "train/epsilon": self.epsilon,
            "train/env_steps": float(env_steps),
            "train/steps_per_second": (step - start_step) / max(now - start_time, 1e-9),
        }
        metrics.update({f"train/{k}": float(v) for k, v in agent_metrics.items()})
        if self._window_returns:
            returns = torch.tensor(self._window_returns)
            outcomes = torch.tensor(self._window_outcomes)
            self._episodes += returns.numel()
            metrics["train/episode_return"] = float(returns.mean())
            if not torch.isnan(outcomes).all():
                metrics["train/risk_outcome"] = float(outcomes.nanmean())
            self._window_returns.clear()
            self._window_outcomes.clear()
        metrics["train/episodes"] = float(self._episodes)
        metrics["train/skipped_updates"] = float(self.skipped_updates)
        self._window_start = (now, step)
        self.live_metrics = metrics
        # Straight to the loggers: self.log on every step would cost more than the update.
        for logger in self.loggers:
            logger.log_metrics(metrics, step=step)

    # ------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A checkpoint with NaN weights must never replace a good one.
        self.check_parameters(int(checkpoint.get("global_step", self.global_step)))
        checkpoint["rs_lightning"] = {
            "exploration_rng": self.exploration_rng.bit_generator.state,
            "epsilon": self.epsilon,
            "episodes": self._episodes,
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": _numpy_global_state(),
            "agent_class": type(self.agent).__name__,
            "agent": self.agent.config.name,
            "skipped_updates": self.skipped_updates,
            "train_seconds": self.clock.seconds(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["rs_lightning"]
        self.exploration_rng.bit_generator.state = state["exploration_rng"]
        self.epsilon = state["epsilon"]
        self._episodes = state["episodes"]
        self.skipped_updates = state.get("skipped_updates", 0)
        self.clock.before = state.get("train_seconds", 0.0)
        torch.set_rng_state(state["torch_rng"])
        name, keys, position, has_gauss, cached = state["numpy_rng"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))
