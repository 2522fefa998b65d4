"""The training loops as LightningModules: one gradient update per step, for K members at
once (K = 1: a single seed).

:class:`QLearning` learns from a replay memory (the paper's distributional Q-learning, and the
actor-critics), :class:`OnPolicyLearning` from rollouts of the members' own policy (A2C, PPO:
:mod:`rs_lightning.agents.on_policy`). Each module owns what its algorithm keeps besides the
networks (the target networks, the objective's batch state, the exploration generators'
checkpoint); neither knows which agent, risk measure or objective it runs. The environment
side is the datamodule's collector, which acts with the behaviour policy it was handed and
never calls the module. Each ``training_step`` is the whole step, top to bottom.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.optim import optimizer as torch_optimizer
from torch.optim.adam import adam

from rs_lightning.agents.base import Agent
from rs_lightning.agents.members import Members, StackedMembers
from rs_lightning.config.migrations import FORMAT_KEY, FORMAT_VERSION
from rs_lightning.engine.behaviour import MemberExploration
from rs_lightning.engine.experience import Collector
from rs_lightning.engine.rollout import act_on_distinct
from rs_lightning.errors import NumericalFault
from rs_lightning.objectives import EpisodeState, Objective
from rs_lightning.risk import ReturnDistribution, Utility

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
    """One member as an evaluation sees it: its agent, the objective and the greedy policy.

    A risk-conditioned member acts at the setting of its objective's utility (alpha and the
    measure's parameter), which its network also sees; :meth:`at` moves it to another."""

    agent: Agent
    objective: Objective
    device: torch.device

    @property
    def utility(self) -> Utility:
        return self.objective.utility

    @property
    def n_actions(self) -> int:
        return self.agent.problem.n_actions

    @torch.no_grad()
    def network(self, obs: Tensor) -> ReturnDistribution:
        """Z of observations ``[1, B, D']`` as the network takes them (the rollout's
        members dimension of one)."""
        dist = self.agent.return_distribution(obs[0])
        return ReturnDistribution(dist.values.unsqueeze(0), dist.probs.unsqueeze(0))

    def start_rule(self, obs: Tensor):
        """``(network input, choose_action)`` of the environment's observations ``[B, D]``,
        each taken as an episode's start (the static objective's best threshold there)."""
        return self.objective.start_rule(obs.to(self.device, torch.float32),
                                         self.agent.return_distribution)

    def stored_rule(self, obs: Tensor):
        """``(network input, choose_action)`` of observations as the collector shows and a
        replay memory stores them ``[B, D']`` (the episode state's features appended)."""
        return self.objective.acting_rule(obs.to(self.device, torch.float32), EpisodeState(),
                                          self.agent.return_distribution)

    @torch.no_grad()
    def greedy(self, obs: Tensor) -> Tensor:
        """The greedy policy for a batch of the environment's observations ``[B, ...]``
        (:meth:`start_rule`)."""
        return self.agent.greedy_action(*self.start_rule(obs))

    @torch.no_grad()
    def act(self, obs: np.ndarray, env_step: int, state: EpisodeState) -> np.ndarray:
        """The greedy policy in a rollout of this one member (epsilon 0): ``obs[1, N, D']``
        -> ``[1, N]``."""
        def greedy(rows: Tensor) -> Tensor:
            inputs, choose = self.objective.acting_rule(rows.to(self.device), state,
                                                        self.agent.return_distribution)
            return self.agent.greedy_action(inputs, choose)

        return act_on_distinct(greedy, obs)

    @torch.no_grad()
    def return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """The learned Z(s, a) of the environment's observations (at this member's setting,
        if risk-conditioned; :meth:`start_rule`)."""
        return self.agent.return_distribution(self.start_rule(obs)[0])

    @torch.no_grad()
    def stored_return_distribution(self, obs: Tensor) -> ReturnDistribution:
        """The learned Z(s, a) of observations as a replay memory stores them
        (:meth:`stored_rule`)."""
        return self.agent.return_distribution(self.stored_rule(obs)[0])

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
        return MemberPolicy(self.agent, self.objective.at(utility), self.device)


class MembersAdam(torch.optim.Adam):
    """Adam whose elementwise step takes the members' parameters, gradients and moments
    through :meth:`Members.elementwise_views`, so that each stacked member's slice is updated
    as a single run's tensor is. Its state is Adam's, parameter by parameter (a step count
    per stacked parameter, as the members step together).

    With the fused kernel (``learning.fused_adam``, the default) the views of the parameters
    and moments, and a step count per view, are kept between steps (checked by identity each
    step, as :class:`LeanAdam` does); only the gradients, new after every backward, are
    viewed anew. About 0.35 ms of a 3-member step on a CPU, the same numbers to the bit."""

    def __init__(self, members: Members, **options) -> None:
        super().__init__(members.parameters(), **options)
        self.views = members.elementwise_views
        self._kept: list[_MemberViews | None] = []

    @torch.no_grad()
    def step(self, closure=None):
        if getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None:
            return super().step(closure)  # a gradient scaler's step: no exactness to keep
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if len(self._kept) != len(self.param_groups):
            self._kept = [None] * len(self.param_groups)
        for index, group in enumerate(self.param_groups):
            kept = self._kept[index]
            if kept is None or not kept.current(group, self.state):
                kept = self._kept[index] = self._views_of(group)
            if kept is None:
                self._step_group(group)
                continue
            _fused_step(group, kept.param_views, self.views([p.grad for p in kept.params]),
                        kept.exp_avg_views, kept.exp_avg_sq_views, kept.counts)
            torch._foreach_copy_(kept.steps, kept.first_counts)
        return loss

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._kept = []

    def __setstate__(self, state) -> None:  # a copy or an unpickled one views anew
        super().__setstate__(state)
        self._kept = []

    def _views_of(self, group: dict) -> _MemberViews | None:
        """The kept views of a group whose step the fused kernel takes as Adam would, or None
        (another setting, a state not made yet, a parameter without a gradient)."""
        lists = _fused_lists(self, group)
        if lists is None:
            return None
        params, _, exp_avgs, exp_avg_sqs, steps = lists
        counts, first_counts = self._counts_per_view(params, steps)
        return _MemberViews(
            params, [p.data_ptr() for p in params], exp_avgs, exp_avg_sqs, steps,
            self.views(params), self.views(exp_avgs), self.views(exp_avg_sqs), counts,
            first_counts)

    def _counts_per_view(self, params: list[Tensor], steps: list[Tensor]
                         ) -> tuple[list[Tensor], list[Tensor]]:
        """A copy of each parameter's step count for every view of it (Adam counts each
        tensor's steps; the views of a parameter share its count), and each parameter's
        first view's copy (written back to its count after a step)."""
        counts: list[Tensor] = []
        firsts = []
        for p, step in zip(params, steps):
            firsts.append(len(counts))
            counts.extend(step.clone() for _ in self.views([p]))
        return counts, [counts[first] for first in firsts]

    def _step_group(self, group: dict) -> None:
        lists: tuple[list[Tensor], ...] = ([], [], [], [], [], [])
        has_complex = self._init_group(group, *lists)
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = lists
        counts, first_counts = self._counts_per_view(params, steps)
        beta1, beta2 = group["betas"]
        adam(
            self.views(params), self.views(grads), self.views(exp_avgs), self.views(exp_avg_sqs),
            self.views(max_exp_avg_sqs) if group["amsgrad"] else [], counts,
            amsgrad=group["amsgrad"], has_complex=has_complex, beta1=beta1, beta2=beta2,
            lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"],
            maximize=group["maximize"], foreach=group["foreach"],
            capturable=group["capturable"], differentiable=group["differentiable"],
            fused=group["fused"], decoupled_weight_decay=group["decoupled_weight_decay"])
        for step, count in zip(steps, first_counts):
            step.copy_(count)


class _MemberViews(NamedTuple):
    """A param group's tensors as :class:`MembersAdam`'s fused step takes them, kept between
    steps: the parameters and moments (and where each parameter's data lies, which moving a
    module replaces), their views, and a step count per view (written back to each
    parameter's own count after every step)."""

    params: list[Tensor]
    pointers: list[int]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor]
    steps: list[Tensor]
    param_views: list[Tensor]
    exp_avg_views: list[Tensor]
    exp_avg_sq_views: list[Tensor]
    counts: list[Tensor]
    first_counts: list[Tensor]  # each parameter's first view's count

    def current(self, group: dict, state) -> bool:
        """Whether these are still the group's parameters, their data and states, each with a
        gradient, under the fused step's settings."""
        if not _lean_settings(group) or len(group["params"]) != len(self.params):
            return False
        for p, param, pointer, exp_avg, exp_avg_sq, step in zip(
                group["params"], self.params, self.pointers, self.exp_avgs, self.exp_avg_sqs,
                self.steps):
            kept = state.get(p, {})
            if (p is not param or p.grad is None or p.data_ptr() != pointer
                    or kept.get("exp_avg") is not exp_avg
                    or kept.get("exp_avg_sq") is not exp_avg_sq or kept.get("step") is not step):
                return False
        return True


# torch's Adam.step with the profiler and step hooks around it, as an optimizer's step is
# called: taken once here (torch wraps a class's step at its first instance, and LeanAdam's
# own step is kept out of that wrapping).
_ADAM_STEP_WITH_HOOKS = (torch.optim.Adam.step if getattr(torch.optim.Adam.step, "hooked", False)
                         else torch.optim.Optimizer.profile_hook_step(torch.optim.Adam.step))


class LeanAdam(torch.optim.Adam):
    """torch's fused Adam, the same kernel on the same tensors, without its per-step
    Python: ``Adam.step`` gathers every parameter's state into lists and wraps the call in
    the profiler's and the hooks' machinery each time, about 130 us of a 2.5 ms DQN step on
    a CPU. Here the lists are gathered once and checked by identity each step (a parameter
    moved to another device, or a state loaded, gathers them again).

    A closure runs first, as in ``Adam.step`` (Lightning passes one that runs its
    ``on_before_optimizer_step`` hooks). The full step runs instead whenever anything asks
    for it: a gradient scaler's ``grad_scale`` / ``found_inf``, step hooks, the autograd
    profiler, the first step (which makes the state), or a setting the fused kernel is not
    called with here (amsgrad, capturable, differentiable, decoupled weight decay)."""

    def __init__(self, params, **options) -> None:
        super().__init__(params, **options)
        self._lists: list[tuple[list[Tensor], ...]] | None = None

    def step(self, closure=None):
        if (self._hooked() or getattr(self, "grad_scale", None) is not None
                or getattr(self, "found_inf", None) is not None):
            self._lists = None
            return _ADAM_STEP_WITH_HOOKS(self, closure)
        loss = None
        if closure is not None:  # Lightning's, always: it runs the on_before_optimizer_step hooks
            with torch.enable_grad():
                loss = closure()
        if not self._lists_current():
            self._lists = self._gather()
            if self._lists is None:  # the first step, or one the lean step does not take
                _ADAM_STEP_WITH_HOOKS(self)
                self._lists = self._gather()
                return loss
        with torch.no_grad():
            for group, lists in zip(self.param_groups, self._lists):
                _fused_step(group, *lists)
        return loss

    step.hooked = True  # type: ignore[attr-defined]  # not wrapped again by torch (see above)

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._lists = None

    def __setstate__(self, state) -> None:  # a copy or an unpickled one gathers anew
        super().__setstate__(state)
        self._lists = None

    def _hooked(self) -> bool:
        return bool(self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks
                    or torch_optimizer._global_optimizer_pre_hooks
                    or torch_optimizer._global_optimizer_post_hooks
                    or torch.autograd._profiler_enabled()
                    # torch's step checks that a CUDA graph capture may take it
                    or (self._lists and self._lists[0][0][0].is_cuda
                        and torch.cuda.is_current_stream_capturing()))

    def _gather(self) -> list[tuple[list[Tensor], ...]] | None:
        """Each group's parameters, gradients, moments and step counts, or None where the
        lean step does not apply (another setting, :func:`_lean_settings`; a state not made
        yet, a parameter without a gradient, tensors of several devices or dtypes)."""
        lists = [_fused_lists(self, group) for group in self.param_groups]
        return None if any(group is None for group in lists) else lists

    def _lists_current(self) -> bool:
        """Whether the gathered lists are still the groups' parameters, their gradients and
        states, and the settings still the lean step's."""
        if self._lists is None or len(self._lists) != len(self.param_groups):
            return False
        for group, lists in zip(self.param_groups, self._lists):
            if not _lean_settings(group) or len(group["params"]) != len(lists[0]):
                return False
            for p, param, grad, exp_avg, exp_avg_sq, step in zip(group["params"], *lists):
                state = self.state[p]
                if (p is not param or p.grad is not grad or state.get("exp_avg") is not exp_avg
                        or state.get("exp_avg_sq") is not exp_avg_sq
                        or state.get("step") is not step):
                    return False
        return True


def _fused_lists(optimizer: torch.optim.Adam, group: dict) -> tuple[list[Tensor], ...] | None:
    """A param group's parameters, gradients, moments and step counts as Adam's fused step
    takes them, or None where :func:`_fused_step` would not be that step: another setting
    (:func:`_lean_settings`), a state not made yet, a parameter without a gradient, or
    parameters, gradients and moments of several devices or dtypes."""
    if not _lean_settings(group):
        return None
    params = list(group["params"])
    states = [optimizer.state.get(p, {}) for p in params]
    if any(p.grad is None or "exp_avg" not in state for p, state in zip(params, states)):
        return None
    fields = ([p.grad for p in params], [s["exp_avg"] for s in states],
              [s["exp_avg_sq"] for s in states], [s["step"] for s in states])
    same_kind = [*params, *(t for field in fields[:3] for t in field)]
    if len({(t.device, t.dtype) for t in same_kind}) != 1 or any(
            step.device != params[0].device for step in fields[3]):
        return None
    return (params, *fields)


def _fused_step(group: dict, params, grads, exp_avgs, exp_avg_sqs, steps) -> None:
    """What Adam's fused step does with these lists (``torch.optim.adam._fused_adam``)."""
    torch._foreach_add_(steps, 1)
    beta1, beta2 = group["betas"]
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False,
                       lr=group["lr"], beta1=beta1, beta2=beta2,
                       weight_decay=group["weight_decay"], eps=group["eps"],
                       maximize=group["maximize"], grad_scale=None, found_inf=None)


def _lean_settings(group: dict) -> bool:
    """Whether LeanAdam's fused call is torch's step for a param group's settings (its
    Adam, not AdamW's decoupled decay, nor amsgrad's extra moments; a float lr)."""
    return (group["fused"] and not (group["amsgrad"] or group["capturable"]
                                    or group["differentiable"] or group["decoupled_weight_decay"])
            and not isinstance(group["lr"], Tensor))


def learning_rate(lr: float, schedule: str, update: int, max_steps: int) -> float:
    """The learning rate of update ``update`` (1, 2, ...) of ``max_steps``: ``constant``, or
    ``linear`` from ``lr`` at the first update toward 0, lr x (1 - (update - 1) / max_steps)
    (Stable-Baselines3's ``lin_<lr>`` with its progress counted in updates)."""
    if schedule == "constant":
        return lr
    return lr * max(0.0, 1.0 - (update - 1) / max_steps)


def make_optimizer(members: Members, learning) -> torch.optim.Optimizer:
    """Adam on the members' parameters (elementwise, so per member; fused where the device
    allows: one kernel per step)."""
    fused = learning.fused_adam and all(
        p.device.type in ("cpu", "cuda") for p in members.parameters()
    )
    options = dict(lr=learning.lr, eps=learning.adam_eps, fused=fused)
    if isinstance(members, StackedMembers):
        return MembersAdam(members, **options)
    return (LeanAdam if fused else torch.optim.Adam)(members.parameters(), **options)


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


# Set on the module every step and never a parameter, buffer or submodule (Learner.__setattr__).
_PLAIN_ATTRIBUTES = frozenset({"_current_fx_name", "last_experience"})


class Learner(pl.LightningModule):
    """What the training loops share: K members, the objective, one explicit update per
    step (backward, clipping, a finite check, Adam), the logs and the checkpoint.

    Args:
        members: the K agents (:func:`rs_lightning.agents.members.make_members`).
        objective: what the run optimises: it acts (through the collector's behaviour
            policy) and prepares the batches.
        learning: the ``learning`` config section.
        seeds: the members' seeds.
        exploration: the behaviour policy's exploration rule (its generators are saved in
            the module's checkpoint, and its epsilon is logged).
        member_loggers: each member's loggers (its metrics go to its own W&B run / CSV).
        fault_injection: the ``fault_injection`` section (tests break a run on purpose).
    """

    def __init__(self, members: Members, objective: Objective, learning, seeds: list[int],
                 exploration: MemberExploration, log_every_n_steps: int = 100,
                 member_loggers: list[list] | None = None, fault_injection=None) -> None:
        super().__init__()
        self.automatic_optimization = False  # one explicit update per step, nothing hidden
        self.members = members
        self.objective = objective
        self.learning = learning
        self.seeds = list(seeds)
        self.n_actions = members.problem.n_actions
        self.log_every_n_steps = log_every_n_steps
        self.member_loggers = member_loggers or [[] for _ in seeds]
        self.exploration = exploration
        # What the objective keeps to prepare batches (the risk-conditioned settings' draws).
        self.batch_state = objective.batch_state(self.seeds)
        # What the progress bar shows (the mean over members); refreshed every window.
        self.live_metrics: dict[str, float] = {}
        self.last_experience = None  # what the last update learned from (callbacks read it)
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
        # Lightning records the running hook's name on the module about 24 times per step,
        # and each step keeps its experience; nn.Module.__setattr__ checks parameters,
        # buffers and submodules each time, which costs more than the env step. Plain
        # attributes (a string, the step's Experience) need none of that.
        if name in _PLAIN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    @property
    def utility(self) -> Utility:
        return self.objective.utility

    @property
    def epsilon(self) -> float:
        return self.exploration.epsilon

    def member(self, k: int) -> MemberPolicy:
        """Member ``k`` as an ordinary agent with the objective (evaluation)."""
        return MemberPolicy(self.members.member_agent(k), self.objective, self.device)

    def _sigterm_received(self) -> bool:
        """Whether a SIGTERM asks the run to stop (the collection stops between steps)."""
        return self.trainer.received_sigterm

    def _on_device(self, batch):
        if self.device.type == "cpu":
            return batch
        return type(batch)(*(t.to(self.device) for t in batch))

    # --------------------------------------------------------------- learning
    def on_train_start(self) -> None:
        self.clock.start()
        # A resumed run learns with its config's optimizer settings, which its config.yaml
        # records, not with those the checkpoint's optimizer state carries.
        for optimizer in self.trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"], group["eps"] = self.learning.lr, self.learning.adam_eps

    def on_fit_start(self) -> None:
        # On one device without a gradient scaler, Lightning's manual_backward only adds hook
        # calls around loss.backward(), which cost about a sixth of a DQN step on a CPU.
        self._direct_backward = str(self.trainer.precision) != "16-mixed"

    def configure_optimizers(self):
        return make_optimizer(self.members, self.learning)

    def _update(self, update: int, losses: Tensor) -> Tensor:
        optimizer = self.optimizers()
        if self.learning.lr_schedule != "constant":  # a function of the update: resumes exactly
            lr = learning_rate(self.learning.lr, self.learning.lr_schedule, update,
                               self.trainer.max_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
        loss = losses.sum()
        self.members.zero_gradients()
        if self._direct_backward:
            loss.backward()
            grad_norms = self.members.clip_gradients(self.learning.grad_clip_norm)
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
                next(self.members.parameters()).fill_(float("nan"))
        return grad_norms

    def _log_step(self, step, experience, losses, grad_norms, agent_metrics) -> None:
        for k, returns in enumerate(experience.episode_returns):
            if returns:
                self._window_returns[k].extend(returns)
                self._window_outcomes[k].extend(experience.episode_outcomes[k])
                self._log_episodes(k, step, returns, experience.episode_outcomes[k],
                                   experience.env_steps)
        if step % self.log_every_n_steps == 0:
            # Parameters can only turn non-finite in an update whose loss and gradient were
            # finite (an overflow); checking them costs ~5% of a DQN step, so it is done here,
            # before each checkpoint and when a loss is not finite.
            self.check_parameters(step)
            self._log_window(step, experience.env_steps, losses, grad_norms, agent_metrics)

    # ------------------------------------------------------------ numerical faults
    def parameters_finite(self) -> bool:
        return parameters_finite(self.members)

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
                "train/env_steps": float(env_steps),
                "train/steps_per_second": steps_per_second,
            }
            if self.exploration.explores_by_epsilon:  # an actor's own sample has no epsilon
                metrics["train/epsilon"] = self.epsilon
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
        self.check_parameters(int(checkpoint["global_step"]))
        checkpoint["rs_lightning"] = self.engine_state()

    def engine_state(self, members: list[int] | None = None) -> dict[str, Any]:
        """The module's own state (plain types); ``members`` selects some members."""
        chosen = list(range(len(self.seeds))) if members is None else list(members)
        return {
            FORMAT_KEY: FORMAT_VERSION,  # rs_lightning.config.migrations
            **self.batch_state.state_dict(chosen),
            "behaviour": self.exploration.state_dict(chosen),
            "episodes": [self._episodes[k] for k in chosen],
            # Episodes ended since the last train/ row: a resumed run logs the same row.
            "window_returns": [list(self._window_returns[k]) for k in chosen],
            "window_outcomes": [list(self._window_outcomes[k]) for k in chosen],
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": numpy_global_state(),
            "agent_class": type(self.members.networks()[0]).__name__,
            "agent": self.members.config.name,
            "seeds": [self.seeds[k] for k in chosen],
            "skipped_updates": self.skipped_updates,
            "train_seconds": self.clock.seconds(),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # In the current format: the run's checkpoint reader (engine.build) migrated it.
        state = checkpoint["rs_lightning"]
        self.exploration.load_state_dict(state["behaviour"])
        self.batch_state.load_state_dict(state)
        self._episodes = list(state["episodes"])
        self._window_returns = [list(r) for r in state["window_returns"]]
        self._window_outcomes = [list(o) for o in state["window_outcomes"]]
        self.skipped_updates = state["skipped_updates"]
        self.clock.before = state["train_seconds"]
        torch.set_rng_state(state["torch_rng"])
        set_numpy_global_state(state["numpy_rng"])


class QLearning(Learner):
    """Risk-sensitive distributional Q-learning (the paper's Algorithm 1) for K members, and
    the actor-critics: replay batches, target networks (arguments: :class:`Learner`)."""

    def __init__(self, members: Members, objective: Objective, learning, seeds: list[int],
                 exploration: MemberExploration, **options) -> None:
        super().__init__(members, objective, learning, seeds, exploration, **options)
        # Only what the agents' targets use (an actor-critic's critics, not its actor).
        self.target_members = members.target_copy()
        self._target_pairs: tuple[list[Tensor], list[Tensor]] | None = None

    def training_step(self, dataloader_iter: Iterator) -> None:
        """One update, top to bottom: collect, sample, prepare, loss, update, targets."""
        # The datamodule's collector, fetched here rather than prefetched by Lightning: the
        # environment steps happen inside this update, so a checkpoint after it holds none
        # ahead.
        collector: Collector = next(dataloader_iter)[0]
        update = self.global_step + 1  # the number of the update this step makes

        # 1. The collector's behaviour policy acts (the objective's episode state augments,
        #    epsilon-greedy on the objective's rule, or the actor's sample), the copies step
        #    and the replay memory stores, as often as the update ratio asks (first the
        #    warm-up: a SIGTERM stops it too); then a replay batch of every member.
        experience = collector.experience(stop=self._sigterm_received)
        self.last_experience = experience
        transitions = self._on_device(experience.batch)

        # 2. The objective prepares the batch and the rule of its target actions.
        transitions, choose_action = self.objective.prepare_batch(transitions, self.batch_state)

        # 3. The members' distributional losses against the target networks.
        losses, agent_metrics = self.members.loss(transitions, self.target_members, choose_action)
        if update == self._nan_loss_at:
            losses = losses + float("nan")

        # 4. The update: backward, clipping, a finite check, Adam; the target networks.
        grad_norms = self._update(update, losses)
        if update % self.learning.target_update_period == 0:
            self._update_targets()

        # 5. Logging.
        self._log_step(update, experience, losses, grad_norms, agent_metrics)

    @torch.no_grad()
    def _update_targets(self) -> None:
        """Copy the weights into the target networks (``learning.target_update_rate`` 1), or
        move the targets that share of the way toward them (Polyak averaging, SAC's 0.005
        every update)."""
        if self._target_pairs is None:  # each target tensor with the one it follows
            own = dict(self.members.named_parameters())
            named = list(self.target_members.named_parameters())
            self._target_pairs = ([p for _, p in named], [own[name] for name, _ in named])
        targets, sources = self._target_pairs
        views = self.members.elementwise_views
        if self.learning.target_update_rate == 1.0:
            torch._foreach_copy_(targets, sources)
            return
        torch._foreach_lerp_(views(targets), views(sources), self.learning.target_update_rate)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        # Checkpoints whose target networks held a whole agent (an actor-critic's actor and
        # temperature too): the parts a target does not hold are left out.
        held = set(self.state_dict())
        state_dict = {name: value for name, value in state_dict.items()
                      if not name.startswith("target_members.") or name in held}
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


class OnPolicyLearning(Learner):
    """On-policy actor-critics (:mod:`rs_lightning.agents.on_policy`) for K members:
    rollouts of their own policy, epochs over shuffled minibatches, no target networks; one
    Lightning step is one minibatch's update (arguments: :class:`Learner`)."""

    def training_step(self, dataloader_iter: Iterator) -> None:
        """One update, top to bottom: collect (a whole rollout when the last one is spent),
        the next minibatch, prepare, loss, update."""
        collector: Collector = next(dataloader_iter)[0]
        update = self.global_step + 1

        # 1. When every epoch of the last rollout has been served, the collector's behaviour
        #    policy (each member's own draw on the objective's rule) runs the copies for a new
        #    rollout, bootstraps it from the critic and estimates the advantages; then the
        #    next minibatch of every member.
        experience = collector.experience(stop=self._sigterm_received)
        self.last_experience = experience
        batch = self._on_device(experience.batch)

        # 2. The objective prepares the minibatch and the rule whose utility it optimises.
        batch, choose_action = self.objective.prepare_rollout(batch, self.batch_state)

        # 3. The members' losses (policy, critic, and whatever the agent adds).
        losses, agent_metrics = self.members.loss(batch, None, choose_action)
        if update == self._nan_loss_at:
            losses = losses + float("nan")

        # 4. The update: backward, clipping, a finite check, Adam.
        grad_norms = self._update(update, losses)

        # 5. Logging.
        self._log_step(update, experience, losses, grad_norms, agent_metrics)
