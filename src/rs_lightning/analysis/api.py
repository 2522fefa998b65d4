"""The Python API of trained agents and runs: load one, ask it to act, read its return
distributions, evaluate it, and list a sweep's runs.

    import rs_lightning

    agent = rs_lightning.load_agent("outputs/runs/<run>")        # a seed_<s>/ of a K-seed run
    agent.act(observations)                                       # greedy actions [B]
    laws = agent.distribution(observations)                       # Z(s, a) of every action
    laws.expectation, laws.var(0.1), laws.cvar(0.1), laws.utility  # [B, A] each
    laws.quantiles([0.1, 0.5, 0.9]), laws.cdf([-1.0, 0.0])        # [B, A, levels / points]
    agent.at(alpha=0.3, rho=0.05).act(observations)                # another setting
    agent.evaluate(episodes=1000)                                  # Monte Carlo E, VaR, CVaR, U
    rs_lightning.load_runs("outputs/multirun/<sweep>")             # one row per finished run

Observations are what the run's environment returns (`rs_lightning.envs.factory.make_env`
of the run's ``env`` config: the grid worlds' (x, y) cells, gymnasium's Box observations,
one-hot rows for Discrete ones), a batch ``[B, ...]`` as a NumPy array, a tensor or nested
lists. Loading reads the checkpoint as data only (no code can run from it), as every tool
does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rs_lightning.analysis.evaluation import evaluate_policy
from rs_lightning.analysis.results import collect, settings_of
from rs_lightning.analysis.runs import TrainedRun, load_run
from rs_lightning.engine.learner import MemberPolicy
from rs_lightning.risk import (
    ReturnDistribution,
    Utility,
    conditional_value_at_risk,
    expectation,
    value_at_risk,
)


@dataclass(frozen=True)
class ActionLaws:
    """The learned return distribution Z(s, a) of every action in a batch of states, and
    what a risk-sensitive decision reads from it. ``law`` holds atoms ``values`` and
    ``probs`` of shape ``[B, A, K]``; every figure below is ``[B, A]`` unless said."""

    law: ReturnDistribution
    utility_rule: Utility  # the setting the agent acts at

    @property
    def expectation(self) -> np.ndarray:
        return _numpy(expectation(self.law))

    def var(self, rho: float) -> np.ndarray:
        """VaR_rho, the lower rho-quantile."""
        return _numpy(value_at_risk(self.law, rho))

    def cvar(self, rho: float) -> np.ndarray:
        """CVaR_rho, the mean of the worst rho of the returns."""
        return _numpy(conditional_value_at_risk(self.law, rho))

    @property
    def utility(self) -> np.ndarray:
        """U = alpha E + (1 - alpha) R_rho at the agent's setting: what it maximises."""
        return _numpy(self.utility_rule(self.law))

    def quantiles(self, levels: Sequence[float]) -> np.ndarray:
        """The lower quantiles at ``levels`` in (0, 1] -> ``[B, A, len(levels)]``."""
        return np.stack([self.var(float(level)) for level in levels], axis=-1)

    def cdf(self, points: Sequence[float]) -> np.ndarray:
        """P(Z <= z) at ``points`` -> ``[B, A, len(points)]``."""
        z = torch.as_tensor(points, dtype=self.law.values.dtype, device=self.law.values.device)
        below = self.law.values.unsqueeze(-1) <= z  # [B, A, K, P]
        return _numpy((self.law.probs.unsqueeze(-1) * below).sum(-2))


@dataclass(frozen=True)
class TrainedAgent:
    """One trained member of a run, at a setting (alpha and the risk measure's parameter).

    ``config`` is the run's validated config, ``steps`` and ``env_steps`` what its
    checkpoint had done. A risk-conditioned agent acts at any setting within the ranges it
    trained on; any other agent re-weighs the one law it learned (`at`)."""

    policy: MemberPolicy
    run: TrainedRun

    @property
    def config(self):
        return self.run.run_config

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    @property
    def steps(self) -> int:
        return self.run.steps

    @property
    def env_steps(self) -> int:
        return self.run.env_steps

    @property
    def utility(self) -> Utility:
        """The setting it acts at: ``alpha``, ``risk`` and ``params``."""
        return self.policy.utility

    @property
    def n_actions(self) -> int:
        return self.policy.n_actions

    def at(self, alpha: float | None = None, **parameter: float) -> TrainedAgent:
        """The same agent at another setting: ``alpha`` and / or the measure's parameter by
        its name (``rho=0.05``, ``eta=-0.5``); a name the measure does not have is refused."""
        params = self.utility.params
        unknown = set(parameter) - set(params)
        if unknown or len(parameter) > 1:
            allowed = ", ".join(params) or "none"
            raise ValueError(f"{', '.join(sorted(parameter))}: not the parameter of "
                             f"risk={self.utility.risk}; allowed: {allowed}")
        value = next(iter(parameter.values()), None)
        alpha = self.utility.alpha if alpha is None else float(alpha)
        return TrainedAgent(self.policy.at(alpha, value), self.run)

    def act(self, observations) -> np.ndarray:
        """The greedy action of each observation -> ``[B]`` (integers), or for an
        actor-critic the mean action ``[B, d]`` in [-1, 1]^d (the environment's box mapped
        onto it: `env_action` maps it back)."""
        actions = _numpy(self.policy.greedy(_batch(observations)))
        return actions.astype(np.float32 if self.continuous else np.int64)

    @property
    def continuous(self) -> bool:
        """Whether it acts in a continuous box (an actor-critic)."""
        return self.policy.agent.problem.continuous

    def env_action(self, actions) -> np.ndarray:
        """Actions in [-1, 1]^d as the environment's own box takes them (what
        ``gymnasium.make(env.id)`` accepts; the training's wrapper did this mapping)."""
        from rs_lightning.envs.factory import make_env

        env = make_env(self.config.train.env)  # its outermost wrapper: that mapping
        try:
            return np.asarray(env.action(np.asarray(actions, dtype=np.float32)))
        finally:
            env.close()

    def distribution(self, observations) -> ActionLaws:
        """The learned Z(s, a) of every action of each observation (`ActionLaws`); an
        actor-critic has one action, its mean action."""
        law = self.policy.return_distribution(_batch(observations))
        return ActionLaws(ReturnDistribution(law.values.detach(), law.probs.detach()),
                          self.utility)

    def evaluate(self, episodes: int = 1000, seed: int | None = None,
                 rho: float | None = None) -> dict[str, Any]:
        """Monte Carlo figures of the greedy policy on the run's environment: E, VaR_rho,
        CVaR_rho and U of the episode score, R_s where the environment has it (``rho``:
        the VaR / CVaR level, by default the run's; ``seed``: by default the run's)."""
        train = self.config.train
        level = float(rho if rho is not None else self.utility.params.get("rho", train.rho))
        return evaluate_policy(self.policy, train.env, self.utility, level, int(episodes),
                               seed=train.seed if seed is None else int(seed),
                               batch_envs=train.evaluation.batch_envs)


def load_agent(run_dir: str | Path, checkpoint: str = "checkpoints/last.ckpt") -> TrainedAgent:
    """The trained agent of a run folder (of one seed: a ``parallel_seeds`` run keeps each
    seed in ``<run>/seed_<s>/``), from ``checkpoint`` (relative to the folder)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() and any(run_dir.glob("seed_*/config.yaml")):
        seeds = ", ".join(sorted(p.parent.name for p in run_dir.glob("seed_*/config.yaml")))
        raise FileNotFoundError(f"{run_dir} is a run of several seeds: load one of its "
                                f"folders ({seeds})")
    run = load_run(run_dir, checkpoint)
    return TrainedAgent(run.module, run)


def load_runs(sweep_dir: str | Path, as_frame: bool | None = None):
    """One row per finished run of a sweep (or the run itself): ``job``, its learning
    settings (``settings.<key>``) and its ``eval.json`` figures. A pandas DataFrame where
    pandas is installed (``as_frame=None``) or asked for, else a list of dicts."""
    rows = []
    for row in collect(Path(sweep_dir)):
        flat = {"job": row.get("job")}
        flat.update({f"settings.{k}": v for k, v in settings_of(row).items()})
        flat.update({k: v for k, v in row.items() if k not in ("job", "settings")
                     and not isinstance(v, (dict, list))})
        rows.append(flat)
    if as_frame is False:
        return rows
    try:
        import pandas
    except ImportError:
        if as_frame:
            raise ImportError("load_runs(as_frame=True) needs pandas (pip install pandas)"
                              ) from None
        return rows
    return pandas.DataFrame(rows)


def _batch(observations) -> torch.Tensor:
    """Observations as a float tensor ``[B, ...]`` (a single observation is not guessed:
    pass a batch of one)."""
    batch = torch.as_tensor(np.asarray(observations, dtype=np.float32)
                            if not isinstance(observations, torch.Tensor) else observations)
    if batch.dim() < 2:
        raise ValueError(f"observations: expected a batch [B, ...], got shape "
                         f"{list(batch.shape)} (wrap one observation as [obs])")
    return batch.float()


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


__all__ = ["ActionLaws", "TrainedAgent", "load_agent", "load_runs"]
