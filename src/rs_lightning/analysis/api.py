"""The Python API of trained agents and runs: load one, ask it to act, read its return
distributions, evaluate it, and list a sweep's runs.

    import rs_lightning

    agent = rs_lightning.load_agent("outputs/runs/<run>")        # a seed_<s>/ of a K-seed run
    agent.act(observations)                                       # greedy actions [B]
    agent.action_names, agent.name_actions(agent.act(observations))  # ('right', ...), ['up']
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

Every call checks its input first and refuses what it cannot answer with a ``ValueError`` of
one line naming the argument: observations that are not real numbers, not finite, not of the
environment's observation shape or outside its observation space; actions outside [-1, 1]^d;
``alpha`` outside [0, 1], a measure's parameter outside its domain; another setting of an
agent whose greedy policy cannot depend on it (an actor-critic that is not risk-conditioned,
DQN, ``risk=expectation``); ``episodes`` below 1; a run of several seeds without ``seed=``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rs_lightning.analysis.evaluation import (
    check_episodes,
    check_seed,
    evaluate_policy,
    policy_at,
)
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
    trained on; a distributional value-based agent re-weighs the one law it learned (`at`);
    an agent whose greedy policy cannot depend on the setting refuses any other."""

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

    @property
    def action_names(self) -> tuple[str, ...] | None:
        """The name of each action, as the environment names them (``("right", "down",
        "left", "up")`` on a grid world, ``("hold", "exercise")`` on the American put), or
        None: continuous actions, or an environment that names none."""
        return self.policy.agent.problem.action_names or None

    def name_actions(self, actions) -> list[str]:
        """The names of ``actions`` (what `act` returns, a batch ``[B]`` of whole numbers):
        the environment's names, else the numbers as text. ValueError in one line for an
        actor-critic or a number that is not one of the actions."""
        if self.continuous:
            raise ValueError(f"name_actions: agent={self.config.agent.name} acts in a "
                             "continuous box; only discrete actions have names")
        batch = _real_array(actions, "actions")
        if batch.ndim != 1 or not (batch == np.round(batch)).all() or (
                batch < 0).any() or (batch >= self.n_actions).any():
            shown = str(np.asarray(actions).tolist())
            raise ValueError(f"actions: expected a batch [B] of whole numbers in "
                             f"0..{self.n_actions - 1} (what act returns), got "
                             f"{shown if len(shown) <= 80 else shown[:77] + '...'}")
        names = self.action_names
        return [names[int(a)] if names else str(int(a)) for a in batch]

    def at(self, alpha: float | None = None, **parameter: float) -> TrainedAgent:
        """The same agent at another setting: ``alpha`` in [0, 1] and / or the measure's
        parameter by its name (``rho=0.05``, ``eta=-0.5``) in its domain. Refused in one line
        (ValueError): a name the measure does not have, a value outside its domain, a
        conditioned agent's setting outside the ranges it trained on, and any setting but its
        own for an agent whose greedy policy cannot depend on it (an actor-critic that is not
        risk-conditioned, DQN, ``risk=expectation``)."""
        params = self.utility.params
        unknown = set(parameter) - set(params)
        if unknown or len(parameter) > 1:
            allowed = ", ".join(params) or "none"
            raise ValueError(f"{', '.join(sorted(parameter))}: not the parameter of "
                             f"risk={self.utility.risk}; allowed: {allowed}")
        value = next(iter(parameter.values()), None)
        return TrainedAgent(policy_at(self.policy, alpha, value), self.run)

    def act(self, observations) -> np.ndarray:
        """The greedy action of each observation -> ``[B]`` (integers), or for an
        actor-critic the mean action ``[B, d]`` in [-1, 1]^d (the environment's box mapped
        onto it: `env_action` maps it back)."""
        actions = _numpy(self.policy.greedy(self._observations(observations)))
        if not np.isfinite(actions).all():
            raise ValueError(f"{self.run_dir}: the network gave non-finite actions for finite "
                             "observations (its weights hold NaN or inf)")
        return actions.astype(np.float32 if self.continuous else np.int64)

    @functools.cached_property
    def _spaces(self):
        """The observation and action spaces of the run's environment (made once, closed)."""
        from rs_lightning.envs.factory import make_env

        env = make_env(self.config.train.env)
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    def _observations(self, observations) -> torch.Tensor:
        """A batch ``[B, *shape]`` of the environment's observations as a float tensor, or
        ValueError in one line: not real numbers, another shape, not finite, or outside the
        observation space's bounds."""
        space = self._spaces[0]
        batch = _real_array(observations, "observations")
        shape = tuple(space.shape or ())
        if batch.ndim != len(shape) + 1 or tuple(batch.shape[1:]) != shape:
            hint = " (wrap one observation as [obs])" if tuple(batch.shape) == shape else ""
            raise ValueError(f"observations: expected a batch [B, {', '.join(map(str, shape))}] "
                             f"of {self.config.train.env.id}'s observations, got shape "
                             f"{list(batch.shape)}{hint}")
        _check_inside(batch, space, "observations",
                      f"{self.config.train.env.id}'s observation space")
        return torch.as_tensor(batch, dtype=torch.float32)

    @property
    def continuous(self) -> bool:
        """Whether it acts in a continuous box (an actor-critic)."""
        return self.policy.agent.problem.continuous

    def env_action(self, actions) -> np.ndarray:
        """Actions in [-1, 1]^d (what `act` returns) as the environment's own box takes them
        (what ``gymnasium.make(env.id)`` accepts; the training's wrapper did this mapping).
        ValueError in one line for a discrete-action agent, another shape, or values that
        are not finite or lie outside [-1, 1]."""
        from gymnasium.spaces import Box

        from rs_lightning.envs.factory import make_env

        if not self.continuous:
            raise ValueError(f"env_action: agent={self.config.agent.name} acts among "
                             f"{self.n_actions} discrete actions, which the environment takes "
                             "as they are")
        batch = _real_array(actions, "actions")
        width = self.policy.agent.problem.action_dim
        if batch.ndim != 2 or batch.shape[1] != width:
            raise ValueError(f"actions: expected a batch [B, {width}] of actions in [-1, 1], "
                             f"got shape {list(batch.shape)}")
        _check_inside(batch, Box(-1.0, 1.0, (width,)), "actions", f"the agent's box "
                      f"[-1, 1]^{width} (what act returns; env_action maps it onto the "
                      "environment's)")
        env = make_env(self.config.train.env)  # its outermost wrapper: that mapping
        try:
            return np.asarray(env.action(batch.astype(np.float32)))
        finally:
            env.close()

    def distribution(self, observations) -> ActionLaws:
        """The learned Z(s, a) of every action of each observation (`ActionLaws`); an
        actor-critic has one action, its mean action."""
        law = self.policy.return_distribution(self._observations(observations))
        return ActionLaws(ReturnDistribution(law.values.detach(), law.probs.detach()),
                          self.utility)

    def evaluate(self, episodes: int = 1000, seed: int | None = None,
                 rho: float | None = None) -> dict[str, Any]:
        """Monte Carlo figures of the greedy policy on the run's environment: E, VaR_rho,
        CVaR_rho and U of the episode score, R_s where the environment has it (``episodes``
        in [1, 10,000,000]; ``rho``: the VaR / CVaR level in (0, 1], by default the run's;
        ``seed``: by default the run's)."""
        train = self.config.train
        episodes = check_episodes(episodes)
        seed = train.seed if seed is None else check_seed(seed)
        level = rho if rho is not None else self.utility.params.get("rho", train.rho)
        if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level <= 1:
            raise ValueError(f"rho: the VaR / CVaR level must be in (0, 1], got {rho!r}")
        return evaluate_policy(self.policy, train.env, self.utility, float(level), episodes,
                               seed=seed, batch_envs=train.evaluation.batch_envs)


def load_agent(run_dir: str | Path, checkpoint: str = "checkpoints/last.ckpt",
               seed: int | None = None) -> TrainedAgent:
    """The trained agent of a run folder from ``checkpoint`` (relative to the folder). A run of
    several seeds (``parallel_seeds``) keeps each in ``<run>/seed_<s>/``: give that folder, or
    the run's folder and ``seed=s``; without either it is refused, naming its seeds."""
    run_dir = Path(run_dir)
    seeds = {p.parent.name[len("seed_"):]: p.parent for p in run_dir.glob("seed_*/config.yaml")}
    names = ", ".join(sorted(seeds, key=lambda name: (len(name), name)))
    if seeds and seed is None:
        raise ValueError(f"{run_dir} is a run of several seeds ({names}): give one, "
                         "load_agent(run, seed=s), or load its folder <run>/seed_<s>")
    if seed is not None:
        if not seeds:
            raise ValueError(f"seed: {run_dir} is a run of one seed (no seed_<s>/ folders); "
                             "load it without seed=")
        if str(seed) not in seeds:
            raise ValueError(f"seed: {run_dir} has no seed {seed!r}; its seeds: {names}")
        run_dir = seeds[str(seed)]
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


def _real_array(values, name: str) -> np.ndarray:
    """``values`` (an array, a tensor, nested lists) as a float64 array of finite real numbers,
    or ValueError in one line naming ``name``."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        array = np.asarray(values)
    except ValueError:  # nested lists of unequal lengths
        raise ValueError(f"{name}: not a rectangular batch of numbers") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name}: expected real numbers, got {array.dtype} values")
    array = array.astype(np.float64)
    if not np.isfinite(array).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(f"{name}: every value must be finite, got {array[where]} at "
                         f"{list(where)}")
    return array


def _check_inside(batch: np.ndarray, space, name: str, what: str) -> None:
    """ValueError in one line naming the first value of ``batch`` outside the bounds of the
    gymnasium Box ``space`` (other spaces have none to check)."""
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None or high is None:
        return
    low = np.broadcast_to(np.asarray(low, np.float64), batch.shape[1:])
    high = np.broadcast_to(np.asarray(high, np.float64), batch.shape[1:])
    # A float32 bound read as float64 may sit an ulp off the value a user copied from it.
    outside = (batch < low - 1e-6 * np.maximum(1.0, np.abs(low))) | (
        batch > high + 1e-6 * np.maximum(1.0, np.abs(high)))
    if outside.any():
        where = tuple(int(i) for i in np.argwhere(outside)[0])
        inner = where[1:]
        raise ValueError(f"{name}: row {where[0]} lies outside {what}: {batch[where]:g} at "
                         f"{list(inner)}, where the bounds are [{low[inner]:g}, "
                         f"{high[inner]:g}]")


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


__all__ = ["ActionLaws", "TrainedAgent", "load_agent", "load_runs"]
