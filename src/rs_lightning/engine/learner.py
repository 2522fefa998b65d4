"""The distributional Q-learning loop as a LightningModule: one gradient update per step,
for K members at once (K = 1: a single seed).

The module owns what the paper's algorithm keeps besides the networks: the target networks,
the behaviour policy and the utility. It knows neither which agent nor which risk measure it
runs: the members compute their losses from a batch, and the utility (alpha E + (1 - alpha)
R) picks both the acting action and the target action.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

from rs_lightning.agents.base import Agent
from rs_lightning.agents.members import Members
from rs_lightning.engine.behaviour import (
    LEARNING_SETTINGS_STREAM,
    EpisodeSettings,
    EpsilonGreedy,
)
from rs_lightning.engine.experience import ExperienceBatch
from rs_lightning.errors import NumericalFault
from rs_lightning.risk import ReturnDistribution, Utility
from rs_lightning.risk.conditioning import RiskConditioning, widen
from rs_lightning.risk.static import StaticObjective

log = logging.getLogger("rs_lightning")


class TrainingClock:
    """Wall seconds spent in training, summed over the attempts of a resumed run (the time
    between an interruption and its resume does not count), less the time spent in
    :meth:`paused` blocks (the periodic evaluations)."""

    def __init__(self) -> None:
        self.before = 0.0  # seconds of the earlier attempts (from the checkpoint)
        self.started: float | None = None
        self.excluded = 0.0  # seconds paused in this attempt

    def start(self) -> None:
        self.started = time.perf_counter()
        self.excluded = 0.0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block whose wall time does not count as training."""
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - begin

    def seconds(self) -> float:
        if self.started is None:
            return self.before
        return self.before + time.perf_counter() - self.started - self.excluded


@dataclass
class MemberPolicy:
    """One member as an evaluation sees it: its agent, the utility and the greedy policy.

    A risk-conditioned member (``conditioning``) acts at the setting of ``utility`` (alpha and
    the measure's parameter), which its network also sees; :meth:`at` moves it to another."""

    agent: Agent
    utility: Utility
    device: torch.device
    conditioning: RiskConditioning | None = None
    static: StaticObjective | None = None  # objective=static

    @property
    def n_actions(self) -> int:
        return self.agent.problem.n_actions

    def network_input(self, obs: Tensor) -> Tensor:
        """The observations as the network takes them: with the setting's features appended
        for a risk-conditioned member; for objective=static, plain observations get those of
        an episode's start there (c = 0, gamma^0 = 1, the best threshold), augmented ones
        pass as they are."""
        obs = obs.to(self.device, torch.float32)
        if self.static is not None:
            if obs.shape[-1] == self.agent.problem.obs_dim:
                return obs
            return start_input(self.static, obs, self.best_thresholds(obs))
        if self.conditioning is None:
            return obs
        setting = torch.tensor([self.utility.alpha], device=self.device)
        parameter = torch.tensor([self.utility.params[self.conditioning.parameter]],
                                 device=self.device)
        return widen(obs, self.conditioning.features(setting, parameter)[0])

    @torch.no_grad()
    def greedy(self, obs: Tensor) -> Tensor:
        """The greedy policy on the utility for a batch of observations ``[B, ...]``
        (objective=static: the static rule at each row's (c, gamma^t, b))."""
        obs = self.network_input(obs)
        if self.static is not None:
            return self.agent.greedy_action(obs, self.static.choose_action_at(obs))
        return self.agent.greedy_action(obs, self.utility.greedy)

    @torch.no_grad()
    def best_thresholds(self, obs: Tensor) -> Tensor:
        """objective=static: the best threshold of an episode starting at each plain
        observation of ``obs[B, D]`` -> ``[B]`` (float64)."""
        obs = obs.to(self.device, torch.float32)
        return best_thresholds(self.static, lambda x: self.agent.return_distribution(x), obs)

    @torch.no_grad()
    def return_distribution(self, obs: Tensor):
        """The learned Z(s, a) (at this member's setting, if risk-conditioned)."""
        return self.agent.return_distribution(self.network_input(obs))

    def at(self, alpha: float, parameter: float | None = None) -> MemberPolicy:
        """This member acting greedily on U at ``alpha`` and the measure's ``parameter`` (None:
        the current one). A risk-conditioned member sees the setting (refused outside the
        ranges it was trained on); any other re-weighs its one learned law Z, learned for its
        own setting's policy."""
        params = dict(self.utility.params)
        if parameter is not None:
            names = [n for n in params]
            if len(names) != 1:
                raise ValueError(f"risk={self.utility.risk} has no parameter to set")
            params[names[0]] = float(parameter)
        utility = Utility(float(alpha), self.utility.risk, params)
        if self.static is not None:
            raise ValueError("a run of objective=static is evaluated at its own setting only "
                             "(its network learned the laws of its own rule)")
        if self.conditioning is not None:
            self.conditioning.check_setting(utility.alpha, params[self.conditioning.parameter])
        return MemberPolicy(self.agent, utility, self.device, self.conditioning)


def start_input(static: StaticObjective, obs: Tensor, thresholds: Tensor) -> Tensor:
    """Plain observations ``obs[..., D]`` as an episode's start with thresholds ``[...]``:
    ``[..., D + 3]``."""
    zeros = torch.zeros_like(thresholds)
    return torch.cat([obs, static.features(zeros, torch.ones_like(zeros), thresholds)
                      .to(obs.device)], dim=-1)


CANDIDATE_ROWS_PER_PASS = 8192


def best_thresholds(static: StaticObjective, return_distribution, obs: Tensor) -> Tensor:
    """The threshold b maximising max_a of the threshold value at an episode's start, for
    each plain observation ``obs[..., D]`` -> ``[...]`` (float64): one forward pass over
    every candidate (:meth:`StaticObjective.candidate_thresholds`).
    ``return_distribution`` maps augmented observations ``[..., D + 3]`` to Z."""
    candidates = static.candidate_thresholds(obs.device)  # [G]
    if candidates.numel() == 1:
        return candidates.expand(obs.shape[:-1]).clone()
    # A bounded number of rows per pass (an evaluation starts 1,000 episodes at once, and a
    # UMDQN network evaluates a lattice per row).
    per_pass = max(1, CANDIDATE_ROWS_PER_PASS // candidates.numel())
    if obs.shape[-2] > per_pass:
        return torch.cat([best_thresholds(static, return_distribution, part)
                          for part in obs.split(per_pass, dim=-2)], dim=-1)
    grid = candidates.expand(*obs.shape[:-1], -1)  # [..., G]
    rows = obs.unsqueeze(-2).expand(*obs.shape[:-1], candidates.numel(), obs.shape[-1])
    augmented = start_input(static, rows, grid)  # [..., G, D + 3]
    # The networks take one batch dimension (after the members'): rows and candidates as one.
    flat = return_distribution(augmented.reshape(*obs.shape[:-2], -1, augmented.shape[-1]))
    dist = ReturnDistribution(*(x.reshape(*grid.shape, *x.shape[-2:]) for x in flat))
    value = static.threshold_values(dist, grid).amax(-1)  # [..., G]
    return candidates[value.argmax(-1)]


def make_optimizer(members: Members, learning) -> torch.optim.Optimizer:
    """Adam on the members' parameters (elementwise, so per member; fused where the device
    allows: one kernel per step)."""
    fused = learning.fused_adam and all(
        p.device.type in ("cpu", "cuda") for p in members.parameters()
    )
    return torch.optim.Adam(members.parameters(), lr=learning.lr, eps=learning.adam_eps, fused=fused)


def parameters_finite(module: torch.nn.Module) -> bool:
    """Whether every parameter of ``module`` is finite (one host sync for all of them)."""
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    return bool(torch.isfinite(flat).all())


def numpy_global_state() -> tuple:
    """numpy's global generator state in plain types (checkpoints load with weights_only)."""
    name, keys, position, has_gauss, cached = np.random.get_state()
    return name, keys.tolist(), int(position), int(has_gauss), float(cached)


def set_numpy_global_state(state) -> None:
    name, keys, position, has_gauss, cached = state
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), position, has_gauss, cached))


class QLearning(pl.LightningModule):
    """Risk-sensitive distributional Q-learning (the paper's Algorithm 1) for K members.

    Args:
        members: the K agents (:func:`rs_lightning.agents.members.make_members`).
        utility: the utility that acts and picks the target action.
        learning: the ``learning`` config section.
        seeds: the members' seeds.
        member_loggers: each member's loggers (its metrics go to its own W&B run / CSV).
        fault_injection: the ``fault_injection`` section (tests break a run on purpose).
    """

    def __init__(self, members: Members, utility: Utility, learning, seeds: list[int],
                 log_every_n_steps: int = 100, member_loggers: list[list] | None = None,
                 fault_injection=None, conditioning: RiskConditioning | None = None,
                 static: StaticObjective | None = None) -> None:
        super().__init__()
        self.automatic_optimization = False  # one explicit update per step, nothing hidden
        self.agent = members
        self.target_agent = copy.deepcopy(members).requires_grad_(False).eval()
        self.utility = utility
        self.learning = learning
        self.seeds = list(seeds)
        self.n_actions = members.problem.n_actions
        self.log_every_n_steps = log_every_n_steps
        self.member_loggers = member_loggers or [[] for _ in seeds]
        self.behaviour = EpsilonGreedy(self.seeds, self.n_actions, learning)
        # Risk-conditioned: each replayed transition's setting, from member k's generator.
        self.conditioning = conditioning
        # objective=static: observations carry (c, gamma^t, b); the static rule acts.
        self.static = static
        self.setting_generators = [
            np.random.default_rng([seed, LEARNING_SETTINGS_STREAM]) for seed in self.seeds
        ] if conditioning is not None else []
        # What the progress bar shows (the mean over members); refreshed every window.
        self.live_metrics: dict[str, float] = {}
        self._window_returns: list[list[float]] = [[] for _ in seeds]
        self._window_outcomes: list[list[float]] = [[] for _ in seeds]
        self._episodes = [0 for _ in seeds]
        self._window_start = (time.perf_counter(), 0)
        self._direct_backward = False
        # Updates dropped for a NaN / inf loss or gradient (learning.on_non_finite=skip).
        self.skipped_updates = 0
        self.clock = TrainingClock()
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

    @property
    def epsilon(self) -> float:
        return self.behaviour.epsilon

    # ----------------------------------------------------------------- acting
    def explore(self, obs: np.ndarray, env_step: int,
                settings: EpisodeSettings | None = None) -> np.ndarray:
        """The behaviour policy the datamodule follows: ``obs[K, N, ...]`` -> ``[K, N]``; a
        risk-conditioned run acts at the copies' ``settings`` (None: the run's own). Each
        route acts through the agents' ``greedy_action``, which runs without gradients."""
        if self.static is not None:
            return self.behaviour(obs, env_step, self._greedy_static)
        if self.conditioning is None:
            return self.behaviour(obs, env_step, self._greedy_members)
        return self.behaviour(obs, env_step, lambda o: self._greedy_conditioned(o, settings))

    def _greedy_members(self, obs: np.ndarray) -> np.ndarray:
        obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32))
        device = self.device
        if device.type != "cpu":
            return self.agent.greedy_action(obs_t.to(device), self.utility.greedy).cpu().numpy()
        return self.agent.greedy_action(obs_t, self.utility.greedy).numpy()

    def _greedy_static(self, obs: np.ndarray) -> np.ndarray:
        obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32)).to(self.device)
        return self.agent.greedy_action(obs_t, self.static.choose_action_at(obs_t)).cpu().numpy()

    @torch.no_grad()
    def start_thresholds(self, obs: np.ndarray) -> np.ndarray:
        """objective=static: each member's best threshold for an episode starting at the
        plain observations ``obs[K, N, D]`` -> ``[K, N]`` (one forward pass)."""
        obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32)).to(self.device)
        return best_thresholds(self.static, self.agent.return_distribution, obs_t).cpu().numpy()

    def _greedy_conditioned(self, obs: np.ndarray, settings: EpisodeSettings | None
                            ) -> np.ndarray:
        obs_t = torch.from_numpy(np.asarray(obs, dtype=np.float32)).to(self.device)
        if settings is None:  # risk_conditioning.acting: fixed
            alpha = np.full(obs.shape[:2], self.utility.alpha)
            parameter = np.full(obs.shape[:2], self.utility.params[self.conditioning.parameter])
        else:
            alpha, parameter = settings.alpha, settings.parameter
        alpha_t, parameter_t = (torch.as_tensor(x, dtype=torch.float32, device=self.device)
                                for x in (alpha, parameter))
        features = self.conditioning.features(alpha_t, parameter_t)
        choose = self.conditioning.choose_action(alpha_t, parameter_t)
        return self.agent.greedy_action(widen(obs_t, features), choose).cpu().numpy()

    def conditioned_batch(self, transitions):
        """A risk-conditioned run's batch: a setting drawn for each transition (member k's
        from its own generator), its features appended to both observations, and the rule
        choosing each transition's target action by its own setting's utility."""
        batch = transitions.obs.shape[1]
        drawn = [self.conditioning.sample_batch(generator, batch)
                 for generator in self.setting_generators]
        alpha, parameter = (torch.as_tensor(np.stack(x), dtype=torch.float32, device=self.device)
                            for x in zip(*drawn))  # [K, B] each
        features = self.conditioning.features(alpha, parameter)
        widened = transitions._replace(obs=widen(transitions.obs, features),
                                       next_obs=widen(transitions.next_obs, features))
        return widened, self.conditioning.choose_action(alpha, parameter)

    def member(self, k: int) -> MemberPolicy:
        """Member ``k`` as an ordinary agent with the utility (evaluation)."""
        return MemberPolicy(self.agent.member_agent(k), self.utility, self.device,
                            self.conditioning, self.static)

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
        choose_action = self.utility.greedy
        if self.static is not None:  # each target action by its next state's (c, gamma^t, b)
            choose_action = self.static.choose_action_at(transitions.next_obs)
        if self.conditioning is not None:
            transitions, choose_action = self.conditioned_batch(transitions)
        losses, agent_metrics = self.agent.loss(transitions, self.target_agent, choose_action)
        if update == self._nan_loss_at:
            losses = losses + float("nan")
        loss = losses.sum()
        self.agent.zero_gradients()
        if self._direct_backward:
            loss.backward()
            grad_norms = self.agent.clip_gradients(self.learning.grad_clip_norm)
            # One host sync covers both: a NaN or an infinity in either makes the sum one.
            if not math.isfinite(float(loss.detach() + grad_norms.sum())):
                self._non_finite_update(update, losses, grad_norms)
        else:  # fp16: Lightning's scaler must unscale the gradients before clipping
            self.manual_backward(loss)
            self.clip_gradients(optimizer, self.learning.grad_clip_norm, "norm")
            grad_norms = torch.full((len(self.seeds),), float("nan"))
            # Overflowing fp16 gradients are the scaler's business (it skips that step);
            # a non-finite loss is not.
            if not math.isfinite(float(loss.detach())):
                self._non_finite_update(update, losses, None)
        optimizer.step()
        if update == self._nan_parameters_at:
            with torch.no_grad():
                next(self.agent.parameters()).fill_(float("nan"))
        step = update  # global_step now counts it
        if step % self.learning.target_update_period == 0:
            self.target_agent.load_state_dict(self.agent.state_dict())

        for k, returns in enumerate(batch.episode_returns):
            if returns:
                self._window_returns[k].extend(returns)
                self._window_outcomes[k].extend(batch.episode_outcomes[k])
                self._log_episodes(k, step, returns, batch.episode_outcomes[k], batch.env_steps)
        if step % self.log_every_n_steps == 0:
            # Parameters can only turn non-finite in an update whose loss and gradient were
            # finite (an overflow); checking them costs ~5% of a DQN step, so it is done here,
            # before each checkpoint and when a loss is not finite.
            self.check_parameters(step)
            self._log_window(step, batch.env_steps, losses, grad_norms, agent_metrics)

    # ------------------------------------------------------------ numerical faults
    def parameters_finite(self) -> bool:
        return parameters_finite(self.agent)

    def check_parameters(self, step: int) -> None:
        """Raise NumericalFault if a parameter is NaN or infinite after ``step`` updates."""
        if not self.parameters_finite():
            raise NumericalFault("parameters", step)

    def _non_finite_update(self, update: int, losses: Tensor, grad_norms: Tensor | None) -> None:
        """Stop the run, or drop this update (learning.on_non_finite=skip).

        A NaN loss usually comes from NaN parameters: those cannot be skipped past (every
        later update would be dropped too), so they always stop the run, named as such.
        """
        self.check_parameters(update - 1)
        loss_values = losses.detach().tolist()
        norms = [0.0] * len(loss_values) if grad_norms is None else grad_norms.tolist()
        bad = [k for k, (a, b) in enumerate(zip(loss_values, norms)) if not math.isfinite(a + b)]
        k = bad[0] if bad else 0
        if not math.isfinite(loss_values[k]):
            quantity, value = "loss", loss_values[k]
        else:
            quantity, value = "gradient norm", norms[k]
        if len(self.seeds) > 1:
            quantity += f" of seed {', '.join(str(self.seeds[j]) for j in bad)}"
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

    # ------------------------------------------------------------------ logging
    def _log_episodes(self, k: int, step: int, returns, outcomes, env_steps: int) -> None:
        """Each ended episode's return and risk outcome, at the update where it ended."""
        for episode_return, outcome in zip(returns, outcomes):
            metrics = {"episode/return": episode_return, "episode/env_steps": float(env_steps)}
            if outcome == outcome:  # not NaN: the environment reports R_s
                metrics["episode/risk_outcome"] = outcome
            for logger in self.member_loggers[k]:
                logger.log_metrics(metrics, step=step)

    def _log_window(self, step, env_steps, losses, grad_norms, agent_metrics) -> None:
        now = time.perf_counter()
        start_time, start_step = self._window_start
        steps_per_second = (step - start_step) / max(now - start_time, 1e-9)
        self._window_start = (now, step)
        loss_values, norm_values = losses.detach().tolist(), grad_norms.tolist()
        agent_values = {name: v.detach().tolist() for name, v in agent_metrics.items()}
        shown: dict[str, list[float]] = {}
        for k in range(len(self.seeds)):
            metrics = {
                "train/loss": loss_values[k],
                "train/grad_norm": norm_values[k],
                "train/epsilon": self.epsilon,
                "train/env_steps": float(env_steps),
                "train/steps_per_second": steps_per_second,
            }
            metrics.update({f"train/{name}": values[k] for name, values in agent_values.items()})
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
            # Straight to the loggers: self.log on every step would cost more than the update.
            for logger in self.member_loggers[k]:
                logger.log_metrics(metrics, step=step)
            for name, value in metrics.items():
                shown.setdefault(name, []).append(value)
        # The progress bar shows the mean over members; the last evaluation's values stay.
        self.live_metrics.update({name: float(np.mean(v)) for name, v in shown.items()})

    # ------------------------------------------------------------ checkpoints
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # A checkpoint with NaN weights must never replace a good one.
        self.check_parameters(int(checkpoint.get("global_step", self.global_step)))
        checkpoint["rs_lightning"] = self.engine_state()

    def engine_state(self, members: list[int] | None = None) -> dict[str, Any]:
        """The module's own state (plain types); ``members`` selects some members."""
        chosen = list(range(len(self.seeds))) if members is None else list(members)
        conditioned = {} if self.conditioning is None else {"setting_generators": [
            self.setting_generators[k].bit_generator.state for k in chosen]}
        return {
            **conditioned,
            "behaviour": self.behaviour.state_dict(chosen),
            "episodes": [self._episodes[k] for k in chosen],
            # Episodes ended since the last train/ row: a resumed run logs the same row.
            "window_returns": [list(self._window_returns[k]) for k in chosen],
            "window_outcomes": [list(self._window_outcomes[k]) for k in chosen],
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": numpy_global_state(),
            "agent_class": type(self.agent.networks()[0]).__name__,
            "agent": self.agent.config.name,
            "seeds": [self.seeds[k] for k in chosen],
            "skipped_updates": self.skipped_updates,
            "train_seconds": self.clock.seconds(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["rs_lightning"]
        self.behaviour.load_state_dict(state["behaviour"])
        for generator, generator_state in zip(self.setting_generators,
                                              state.get("setting_generators", [])):
            generator.bit_generator.state = generator_state
        self._episodes = list(state["episodes"])
        members = len(self._episodes)
        self._window_returns = [list(r) for r in state.get("window_returns", [[]] * members)]
        self._window_outcomes = [list(o) for o in state.get("window_outcomes", [[]] * members)]
        self.skipped_updates = state.get("skipped_updates", 0)
        self.clock.before = state.get("train_seconds", 0.0)
        torch.set_rng_state(state["torch_rng"])
        set_numpy_global_state(state["numpy_rng"])
