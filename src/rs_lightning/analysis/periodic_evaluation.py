"""The periodic evaluation of every member's greedy policy during training (a callback the
composition root registers: the engine itself knows no evaluation)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities.exceptions import SIGTERMException

from rs_lightning.analysis.evaluation import EvaluationStopped, evaluate_policy
from rs_lightning.files import append_jsonl
from rs_lightning.references.ground_truth import (
    exact_policy_metrics,
    start_state_distances,
)

log = logging.getLogger("rs_lightning")

# The mass at the ends of the return support, once the laws have settled, above which a run warns
# once: a law on a fixed support (C51, the UMDQN family) piles there whatever lies beyond it.
# (A uniform law on C51's 51 atoms puts 2 / 51 = 3.9 % there.)
SUPPORT_END_MASS = 0.05


class PeriodicEvaluation(pl.Callback):
    """Every ``every_n_steps`` updates, a Monte Carlo evaluation of each member's greedy
    policy, each into its own ``eval_history.jsonl`` and loggers.

    On the grid worlds it adds the exact E, VaR, CVaR, U and R_s of that policy and the
    Wasserstein-1 distance between the learned and the exact return distribution of every
    action at the start state (``w1_*``), so that learning the distribution can be watched.

    ``stop_at_return``: the run stops after the first evaluation at which every member's mean
    return (``expectation``) is at least this (each member's own first time is the first line
    of its ``eval_history.jsonl`` at or above it). The evaluations' wall time is not counted
    as training (``train_seconds``).
    """

    def __init__(self, env_config, rho: float, every_n_steps: int, episodes: int,
                 seeds: list[int], batch_envs: int, history_paths: list[Path],
                 stop_at_return: float | None = None) -> None:
        self.env_config = env_config
        self.rho = rho
        self.every_n_steps = every_n_steps
        self.episodes = episodes
        self.seeds = list(seeds)
        self.batch_envs = batch_envs
        self.history_paths = list(history_paths)
        self.support_checked = False
        self.stop_at_return = stop_at_return
        self.stopped_at: int | None = None  # the update whose evaluation reached the target
        self.pending: dict | None = None  # the evaluation under way (or stopped by SIGTERM)
        self.shown: dict[str, list[float]] = {}  # its members' metrics so far

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.every_n_steps <= 0 or step % self.every_n_steps:
            return
        experience = pl_module.last_experience  # what the update learned from
        # The members' evaluations share one time.
        self.pending = {"step": step, "env_steps": experience.env_steps,
                        "train_seconds": pl_module.clock.seconds(), "members_done": 0}
        self._evaluate(trainer, pl_module)
        if not self.support_checked and settled(step, trainer.max_steps,
                                                pl_module.learning.target_update_period):
            self.support_checked = True
            warn_of_mass_at_support_ends(pl_module, experience.batch.obs, step)

    def on_fit_start(self, trainer, pl_module) -> None:
        # A SIGTERM stopped the evaluation of the update the run resumes from: finish it
        # first (its members not yet evaluated), so that the history is the uninterrupted one.
        # Here, not at the training's start: a run stopped in its last update's evaluation
        # resumes with no update left, and Lightning then starts no training.
        if self.pending is not None:
            self._evaluate(trainer, pl_module)

    def _evaluate(self, trainer, pl_module) -> None:
        """The evaluation ``self.pending`` describes, from its first member not yet done. A
        SIGTERM gives it up at once (the members' episodes may take long to end): the
        checkpoint then keeps it pending (:meth:`state_dict`)."""
        pending = self.pending
        step = pending["step"]
        with pl_module.clock.paused():
            for k in range(pending["members_done"], len(self.seeds)):
                try:
                    metrics = evaluate_during_training(
                        pl_module.member(k), self.env_config, self.rho, self.episodes,
                        self.seeds[k], self.batch_envs, step, pending["env_steps"],
                        self.history_paths[k], pending["train_seconds"],
                        stop=lambda: trainer.received_sigterm)
                except EvaluationStopped:
                    raise SIGTERMException() from None  # saved, and reported as any SIGTERM
                pending["members_done"] = k + 1
                for logger in pl_module.member_loggers[k]:
                    logger.log_metrics(metrics, step=step)
                for name, value in metrics.items():
                    self.shown.setdefault(name, []).append(value)
        shown, self.shown, self.pending = self.shown, {}, None
        pl_module.live_metrics.update({name: float(sum(v) / len(v)) for name, v in shown.items()})
        target = self.stop_at_return
        if target is not None and all(value >= target for value in shown["eval/expectation"]):
            self.stopped_at = step
            trainer.should_stop = True

    def state_dict(self) -> dict:
        # Plain numbers and lists: a checkpoint holds no objects.
        return {} if self.pending is None else {"pending": dict(self.pending),
                                                "shown": dict(self.shown)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.pending = dict(state_dict["pending"]) if "pending" in state_dict else None
        self.shown = {k: list(v) for k, v in state_dict.get("shown", {}).items()}


def settled(step: int, max_steps: int, target_update_period: int) -> bool:
    """Whether the learned laws are worth judging: half the budget spent and ten target
    copies made (ten backups to carry the returns beyond the support back to the start)."""
    return 0 < max_steps <= 2 * step and step >= 10 * target_update_period


@torch.no_grad()
def warn_of_mass_at_support_ends(pl_module, obs, step: int) -> float:
    """Warn (once per run: the caller's concern) when the members' learned laws of the replay
    batch's states (``obs[K, B, D']``, as the memory stores them) put more than
    ``SUPPORT_END_MASS`` of their mass, on average over states and actions, at the ends of
    [``env.return_min``, ``env.return_max``]; returns that mass (the largest member's; 0 for
    an agent without a fixed support)."""
    if not pl_module.member(0).agent.fixed_support:
        return 0.0  # atoms beyond the support are no clipping
    ends = []  # (lower, upper) share of each member
    for k in range(obs.shape[0]):
        member = pl_module.member(k)  # a risk-conditioned member adds its setting to obs
        dist = member.stored_return_distribution(obs[k])
        problem = member.agent.problem
        lower, upper = dist.mass_at_each_end(problem.return_min, problem.return_max)
        ends.append((float(lower.mean()), float(upper.mean())))
    lower, upper = max(ends, key=sum)
    share = lower + upper
    if share > SUPPORT_END_MASS:
        # Each end named: mass at an end the returns truly reach (0 when no reward is
        # negative and an episode can end at once) is no clipping.
        log.warning(
            "after %d updates the learned return laws put %.1f %% of their mass at the ends of "
            "the return support [%g, %g] (%.1f %% at %g, %.1f %% at %g): returns beyond an end "
            "are clipped to it, so unless the returns reach that end itself, widen "
            "env.return_min / env.return_max", step, 100 * share, problem.return_min,
            problem.return_max, 100 * lower, problem.return_min, 100 * upper, problem.return_max)
    return share


def evaluate_during_training(module, env_config, rho: float, episodes: int, seed: int,
                             batch_envs: int, step: int, env_steps: int,
                             history_path: Path | None, train_seconds: float | None = None,
                             stop: Callable[[], bool] | None = None) -> dict[str, float]:
    """One periodic evaluation of ``module``'s greedy policy: appended to ``history_path``
    (one JSON line, learning curves that need no logger to survive) and returned as
    ``eval/*`` metrics. ``train_seconds``: wall seconds of training so far, the periodic
    evaluations left out (the run's :class:`~rs_lightning.engine.learner.TrainingClock`),
    recorded as ``train_seconds``."""
    summary = evaluate_policy(module, env_config, module.utility, rho, episodes, seed,
                              batch_envs, stop=stop)
    if module.objective.observation_markov:  # the exact laws are those of cell policies
        summary.update(exact_policy_metrics(module.greedy, env_config, module.utility, rho) or {})
        summary.update(start_state_distances(module, env_config) or {})
    metrics = {f"eval/{k}": v for k, v in summary.items() if isinstance(v, (int, float))}
    metrics["eval/env_steps"] = float(env_steps)
    if history_path is not None:
        record = {"step": step, "env_steps": env_steps, **summary}
        if train_seconds is not None:
            record["train_seconds"] = round(train_seconds, 3)
        append_jsonl(history_path, record)
    return metrics
