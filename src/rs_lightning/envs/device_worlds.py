"""The project's own worlds as batched tensors on a chosen device (``env.backend: torch``).

M copies of one world step as a few tensor operations, on the device of the networks:
the paper's grid worlds and the two-stage world, cliff walking, trading and the American
put (:class:`TabularCopies`), and the risky navigation world (:class:`NavigationCopies`).

**One law.** A tabular world's tensors are read from the gymnasium environment's own model
when the copies are made (:func:`tabular_law`): a grid world's compiled sampler (the table
its ``step`` draws from), a toy-text world's ``P[s][a]`` and start law; observations are the
wrappers' own ``observation()`` of every state (one-hot, bounds), R_s the environment's own
``risk_outcome``. What the gymnasium step keeps beside the state (the grid worlds' shortcut
flag, cliff walking's fall) becomes part of the state: state ``s * 2 + flag``. Nothing about
a tabular world's rules is written twice. The risky navigation's step (its fences, reward and
R_s) has a tensor form of its own, tested against the gymnasium world step by step.

**Random numbers.** Copy j draws from a counter-based stream of its own seed: the draws of
its t-th step are a hash of (seed, t, slot) (:func:`uniforms`, exact integer arithmetic on
every device), so a copy's episodes depend on its seed alone, not on the other copies, need
no generator object per copy, and its stream's state is its key and step count. The streams
differ from NumPy's, so a copy's episodes are those of the gymnasium world in law, not draw
for draw.

**Episodes** end and restart as :class:`~rs_lightning.envs.copies.GymCopies`' do (same-step
autoreset, unseeded restart: the copy's stream goes on): a world's own time limit (grid
worlds: ``max_steps``, ``timeout_is_terminal``) or the ``max_episode_steps`` truncation, R_s
on an episode's last step as the environment's ``info["risk_outcome"]``.

:meth:`step_tensors` keeps everything on the device; :meth:`step` (the
:class:`~rs_lightning.envs.copies.EnvCopies` interface the engine uses) converts its
answer to NumPy arrays, the one host copy of a step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from rs_lightning.envs.cliff_walking import SlipperyCliffWalking
from rs_lightning.envs.factory import make_env, training_env
from rs_lightning.envs.finite_horizon import PublishedModelEnv
from rs_lightning.envs.grid_world_copies import CopiesStep
from rs_lightning.envs.grid_worlds import CELLS, GRID_SIZE, REWARD_STD, START, GridWorld
from rs_lightning.envs.gym_support import BoundsNormalizedObservation
from rs_lightning.envs import risky_navigation as nav
from rs_lightning.errors import ConfigError

ENV_BACKENDS = ("gymnasium", "torch")
DEVICE_WORLDS = ("rs_lightning/RiskyRewards-v0", "rs_lightning/RiskyTransitions-v0",
                 "rs_lightning/RiskyGridWorld-v0", "rs_lightning/TwoStage-v0",
                 "rs_lightning/SlipperyCliffWalking-v0", "rs_lightning/Trading-v0",
                 "rs_lightning/AmericanPut-v0", "rs_lightning/RiskyNavigation-v0")

# ----------------------------------------------------------------------- random numbers
_WORD = 0xFFFFFFFF
# Multipliers below 2^31, so that a 32-bit word times one stays within int64.
_GOLDEN = 0x61C88647  # 2^32 minus the golden ratio's 32 bits: a counter's Weyl sequence


def mix32(x: Tensor) -> Tensor:
    """A bijective avalanche hash of 32-bit words held in int64 tensors (C. Wellons' hash
    prospector's "lowbias32" with multipliers 0x21f0aaad, 0x735a2d97), elementwise; every
    product stays below 2^63, so it is exact on every device."""
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _WORD
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _WORD
    return x ^ (x >> 15)


def seed_keys(seeds: list[int], device: torch.device) -> Tensor:
    """``[M, 2]`` stream keys of the seeds (below 2^64): two 32-bit lanes, each mixed from
    both halves of the seed, so that two copies' streams coincide with probability 2^-64."""
    halves = [(seed & _WORD, seed >> 32) for seed in (int(s) % 2**64 for s in seeds)]
    words = torch.tensor(halves, dtype=torch.int64, device=device).reshape(-1, 2)
    lanes = torch.tensor([0x5BD1E995, 0x1B873593], dtype=torch.int64, device=device)
    return mix32(words[:, :1] ^ mix32(words[:, 1:] ^ lanes))


_SALTS: dict[tuple[int, torch.device], Tensor] = {}


def uniforms(keys: Tensor, counters: Tensor, slots: int) -> Tensor:
    """``[M, ..., slots]`` float64 uniforms in [0, 1), 53 random bits each: slot i of step
    ``counters[j, ...]`` (``[M]`` or ``[M, T]``) of the stream ``keys[j]`` (lane 0 gives
    the high 27 bits, lane 1 the low 26)."""
    salts = _SALTS.get((slots, keys.device))
    if salts is None:
        salts = (torch.arange(1, slots + 1, dtype=torch.int64) * _GOLDEN + 0x2545F491) & _WORD
        salts = _SALTS.setdefault((slots, keys.device), salts.to(keys.device))
    keys = keys.view(keys.shape[0], *([1] * (counters.dim() - 1)), 2)
    base = mix32(keys ^ (((counters & _WORD) * _GOLDEN) & _WORD)[..., None])  # [M, ..., 2]
    words = mix32(base[..., None] ^ salts)  # [M, ..., 2, slots]
    bits = (words[..., 0, :] >> 5) * 67108864 + (words[..., 1, :] >> 6)
    return bits.to(torch.float64) * (1.0 / 9007199254740992.0)


def normals(u1: Tensor, u2: Tensor) -> Tensor:
    """Standard normals from two uniforms in [0, 1) (Box-Muller)."""
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)


def choose(cumulative: Tensor, u: Tensor) -> Tensor:
    """The first index whose cumulative probability exceeds ``u`` (the rule of gymnasium's
    ``categorical_sample`` and of :meth:`GridWorld.step`): ``cumulative[..., B]``, ``u[...]``."""
    return (cumulative <= u[..., None]).sum(-1)


# ----------------------------------------------------------------------- the wrappers
def _layers(env: gym.Env) -> list[gym.Env]:
    """The environment's layers, outermost first, the base environment last."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


_PASSIVE = (gym.wrappers.OrderEnforcing, gym.wrappers.PassiveEnvChecker)


def _time_limit(env: gym.Env) -> Optional[int]:
    limits = [layer._max_episode_steps for layer in _layers(env)
              if isinstance(layer, gym.wrappers.TimeLimit)]
    return min(limits) if limits else None


def _unsupported(env: gym.Env, allowed: tuple[type, ...]) -> Optional[str]:
    for layer in _layers(env)[:-1]:
        if not isinstance(layer, _PASSIVE + (gym.wrappers.TimeLimit,) + allowed):
            return type(layer).__name__
    return None


# ----------------------------------------------------------------------- tabular worlds
@dataclass
class TabularLaw:
    """A finite world as padded tables: row ``state * n_actions + action`` holds the
    branches' cumulative probabilities (the last one inf, so round-off never skips it),
    next states, reward means and whether each ends the episode by the world's rules."""

    n_actions: int
    cumulative: Tensor  # [S * A, B] float64
    next_state: Tensor  # [S * A, B] int64
    reward_mean: Tensor  # [S * A, B] float64
    terminal: Tensor  # [S * A, B] bool
    reward_std: float  # the Gaussian noise around each branch's mean
    start_cumulative: Tensor  # [S] float64: the start law
    observations: Tensor  # [S, D] float32: what each state shows, through the wrappers
    # R_s of an episode ending in a state: by the state and whether the rules ended it
    # ([S, 2]), or by the episode's total reward (``outcome_of_total``) when it terminates.
    outcome: Optional[Tensor]
    outcome_of_total: Optional[Callable[[Tensor], Tensor]]
    time_limit: Optional[int]  # steps after which an episode ends
    timeout_is_terminal: bool  # whether that end is a termination (else a truncation)

    def to(self, device: torch.device) -> "TabularLaw":
        moved = {name: (value.to(device) if isinstance(value, Tensor) else value)
                 for name, value in vars(self).items()}
        return TabularLaw(**moved)

    def branches(self, state: int, action: int) -> list[tuple[float, int, float, bool]]:
        """``(probability, next state, reward mean, terminal)`` of each branch of a row."""
        row = state * self.n_actions + action
        cumulative = self.cumulative[row].cpu().tolist()
        out, before = [], 0.0
        for j in range(len(cumulative)):
            top = min(cumulative[j], 1.0)
            if top - before > 0:
                out.append((top - before, int(self.next_state[row, j]),
                            float(self.reward_mean[row, j]), bool(self.terminal[row, j])))
            before = max(before, top)
        return out


def _observation_table(env: gym.Env, raw: list[Any]) -> Tensor:
    """The observation of each raw observation in ``raw`` through the env's observation
    wrappers, innermost first."""
    wrappers = [layer for layer in reversed(_layers(env)[:-1])
                if isinstance(layer, gym.ObservationWrapper)]
    rows = []
    for observation in raw:
        for wrapper in wrappers:
            observation = wrapper.observation(observation)
        rows.append(np.asarray(observation, dtype=np.float32).reshape(-1))
    return torch.from_numpy(np.stack(rows))


def _padded(rows: list[list[tuple]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rows of branches ``(cumulative, next, mean, terminal)`` as padded tensors (padding:
    unreachable branches after the inf)."""
    width = max(len(row) for row in rows)
    cumulative = torch.full((len(rows), width), math.inf, dtype=torch.float64)
    next_state = torch.zeros((len(rows), width), dtype=torch.int64)
    mean = torch.zeros((len(rows), width), dtype=torch.float64)
    terminal = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, row in enumerate(rows):
        for j, (c, s, m, t) in enumerate(row):
            cumulative[i, j], next_state[i, j], mean[i, j], terminal[i, j] = c, s, m, t
        cumulative[i, len(row) - 1] = math.inf
    return cumulative, next_state, mean, terminal


def _grid_world_law(env: gym.Env, world: GridWorld) -> TabularLaw:
    """State ``cell * 2 + flag``; the rows are the world's compiled sampler (one branch per
    (next cell, reward component)), the table :meth:`GridWorld.step` draws from."""
    n_actions = int(world.action_space.n)
    rows = []
    for cell in range(len(CELLS)):
        for flag in (0, 1):
            for action in range(n_actions):
                entries = world._sampler[(cell * n_actions + action) * 2 + flag]
                rows.append([(c, (nxt[0] * GRID_SIZE + nxt[1]) * 2 + int(new_flag), mean,
                              bool(terminal))
                             for c, nxt, mean, terminal, new_flag in entries])
    cumulative, next_state, mean, terminal = _padded(rows)
    states = [(cell, flag) for cell in CELLS for flag in (False, True)]
    outcome = torch.tensor([[world.risk_outcome(cell, ended, flag) for ended in (False, True)]
                            for cell, flag in states], dtype=torch.float64)
    start = torch.full((len(states),), math.inf, dtype=torch.float64)
    first = states.index((START, False))
    start[:first] = 0.0
    return TabularLaw(n_actions, cumulative, next_state, mean, terminal, REWARD_STD, start,
                      _observation_table(env, [world._observations[c] for c, _ in states]),
                      outcome, None, world.max_steps, world.timeout_is_terminal)


def _toy_text_law(env: gym.Env, base: gym.Env) -> TabularLaw:
    """A toy-text layout world (``P[s][a]``, ``initial_state_distrib``). Cliff walking's
    fall is part of the state (``s * 2 + fell``: its R_s); the finite-horizon worlds' R_s is
    of the episode's total reward."""
    n_states, n_actions = int(base.observation_space.n), int(base.action_space.n)
    falls = isinstance(base, SlipperyCliffWalking)
    flags = (0, 1) if falls else (0,)
    rows = []
    for s in range(n_states):
        for flag in flags:
            for a in range(n_actions):
                row, cumulative = [], 0.0
                fell = base.falls[(s, a)] if falls else [False] * len(base.P[s][a])
                for (p, s2, r, done), fall in zip(base.P[s][a], fell):
                    cumulative += p
                    row.append((cumulative, int(s2) * len(flags) + int(flag or fall),
                                float(r), bool(done)))
                rows.append(row)
    cumulative, next_state, mean, terminal = _padded(rows)
    start_law = np.repeat(np.asarray(base.initial_state_distrib, dtype=np.float64)[:, None],
                          len(flags), 1)
    start_law[:, 1:] = 0.0
    start = torch.from_numpy(np.cumsum(start_law.reshape(-1)))
    start[int(np.flatnonzero(start_law.reshape(-1))[-1]):] = math.inf
    observations = _observation_table(env, [s for s in range(n_states) for _ in flags])
    if falls:
        outcome = torch.tensor([[base.risk_outcome(bool(flag), ended) for ended in (False, True)]
                                for s in range(n_states) for flag in flags],
                               dtype=torch.float64)
        return TabularLaw(n_actions, cumulative, next_state, mean, terminal, 0.0, start,
                          observations, outcome, None, _time_limit(env), False)
    return TabularLaw(n_actions, cumulative, next_state, mean, terminal, 0.0, start,
                      observations, None, base.risk_outcome, _time_limit(env), False)


def tabular_law(env: gym.Env) -> TabularLaw:
    """The law of a tabular world of this package, read from the made environment ``env``
    (wrappers included: observations, time limit); ConfigError naming the key otherwise."""
    base = env.unwrapped
    unsupported = _unsupported(env, (gym.ObservationWrapper,))
    if unsupported is not None:
        raise ConfigError("env.backend", f"torch steps the worlds without wrappers that change "
                          f"actions or rewards; {type(base).__name__} is wrapped in "
                          f"{unsupported}: use env.backend=gymnasium")
    if isinstance(base, GridWorld):
        if _time_limit(env) is not None:
            raise ConfigError("env.max_episode_steps", "must be null for a grid world with "
                              "env.backend=torch (the world applies its own limit: "
                              "env.kwargs.max_steps)")
        return _grid_world_law(env, base)
    if isinstance(base, (SlipperyCliffWalking, PublishedModelEnv)):
        return _toy_text_law(env, base)
    raise ConfigError("env.backend", f"torch steps {', '.join(DEVICE_WORLDS)}; "
                      f"{type(base).__name__} steps with env.backend=gymnasium")


class TensorStep(NamedTuple):
    """One step of M copies as tensors on their device (:class:`CopiesStep`'s fields)."""

    next_obs: Tensor  # [M, D] float32, the state reached (before a restart)
    reward: Tensor  # [M] float64
    terminated: Tensor  # [M] bool
    ended: Tensor  # [M] bool
    risk_outcome: Tensor  # [M] float64 (meaningful where ended)


def host_answer(step: TensorStep, obs: Tensor) -> tuple[CopiesStep, np.ndarray]:
    """A step's answer and the copies' observations ``obs`` on the host, in one copy from the
    device (every field packed as float64, which holds float32 observations exactly)."""
    width = step.next_obs.shape[1]
    flags = torch.stack([step.reward, step.terminated.double(), step.ended.double(),
                         step.risk_outcome], dim=1)
    host = torch.cat([step.next_obs.double(), obs.double(), flags], dim=1).cpu().numpy()
    reward, terminated, ended, outcome = host[:, 2 * width:].T
    answer = CopiesStep(host[:, :width].astype(np.float32), reward.copy(), terminated > 0,
                        ended > 0, outcome.copy())
    return answer, host[:, width:2 * width].astype(np.float32)


class _StreamCopies:
    """What both kinds of device copies share: each copy's stream (key, counter), the
    NumPy face the engine uses, and plain-tensor checkpoints.

    The draws of the next ``BLOCK`` steps of every copy are made at once (a step then reads
    its row): the same numbers as step by step, as they are a function of (seed, step), at a
    fraction of the operations. A subclass says how many uniforms a step takes (``slots``)
    and what it makes of them (:meth:`_prepare`); the draws of step 0 start an episode."""

    BLOCK = 64
    kind: str
    slots: int
    device: torch.device
    keys: Tensor
    counters: Tensor
    _state_names: tuple[str, ...]

    def _start_streams(self, seeds: list[int]) -> None:
        m = len(seeds)
        self.keys = seed_keys(seeds, self.device)
        self.counters = torch.zeros(m, dtype=torch.int64, device=self.device)
        self._position = 0
        self._draws = self._block(self.keys, self.counters)
        self._start(torch.arange(m, device=self.device), self._first(self.keys))
        self._host_obs: np.ndarray | None = None  # obs() on the host, kept until a change

    def _prepare(self, u: Tensor) -> Tensor:
        """What a step reads, ``[..., k]``, from its uniforms ``[..., slots]``."""
        raise NotImplementedError

    def _first(self, keys: Tensor) -> Tensor:
        return self._prepare(uniforms(keys, torch.zeros_like(keys[:, 0]), self.slots))

    def _block(self, keys: Tensor, counters: Tensor) -> Tensor:
        """The draws of the steps ahead ``[R, BLOCK, k]``, row ``_position`` the next's."""
        ahead = torch.arange(1, self.BLOCK + 1, device=self.device) - self._position
        return self._prepare(uniforms(keys, counters[:, None] + ahead, self.slots))

    def _next_draws(self) -> Tensor:
        """This step's draws ``[M, k]`` (the counters move on)."""
        if self._position == self.BLOCK:
            self._position = 0
            self._draws = self._block(self.keys, self.counters)
        draws = self._draws[:, self._position]
        self._position += 1
        self.counters += 1
        return draws

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def obs(self) -> np.ndarray:
        if self._host_obs is None:
            self._host_obs = self.obs_tensor().cpu().numpy()
        return self._host_obs

    def obs_tensor(self) -> Tensor:
        raise NotImplementedError

    def step_tensors(self, actions: Tensor) -> TensorStep:
        raise NotImplementedError

    def _start(self, rows: Tensor, u: Tensor) -> None:
        raise NotImplementedError

    def step(self, actions) -> CopiesStep:
        """:meth:`step_tensors` with NumPy actions and answers: on an accelerator the answer
        and the next observations come to the host in one copy (one synchronisation a step);
        on the CPU the arrays are views of the tensors."""
        out = self.step_tensors(torch.as_tensor(np.asarray(actions), device=self.device))
        if self.device.type == "cpu":
            self._host_obs = None
            return CopiesStep(*(value.numpy() for value in out))
        answer, self._host_obs = host_answer(out, self.obs_tensor())
        return answer

    def reseed(self, indices: list[int], seeds: list[int]) -> None:
        """Start new episodes in copies ``indices``, their streams now those of ``seeds``."""
        if not len(indices):
            return
        rows = torch.as_tensor(list(indices), dtype=torch.int64, device=self.device)
        self.keys[rows] = seed_keys(seeds, self.device)
        self.counters[rows] = 0
        self._draws[rows] = self._block(self.keys[rows], self.counters[rows])
        self._start(rows, self._first(self.keys[rows]))
        self._host_obs = None

    def state_dict(self, indices: list[int] | None = None) -> dict[str, Any]:
        chosen = torch.arange(len(self)) if indices is None else torch.as_tensor(list(indices))
        chosen = chosen.to(self.device)
        state = {name: getattr(self, name)[chosen].cpu()
                 for name in ("keys", "counters") + self._state_names}
        return {"backend": "torch", "world": self.kind, **state}

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        if state.get("backend") != "torch" or state.get("world") != self.kind:
            raise ConfigError("env.backend", "the checkpoint's environment copies stepped with "
                              "another backend or world; resume with the run's own env.backend")
        if len(state["keys"]) != len(self):
            raise ConfigError("ckpt_path", f"the checkpoint holds {len(state['keys'])} "
                              f"environment copies, this run {len(self)}")
        for name in ("keys", "counters") + self._state_names:
            setattr(self, name, state[name].to(self.device).clone())
        self._position = 0
        self._draws = self._block(self.keys, self.counters)
        self._host_obs = None
        return False


class TabularCopies(_StreamCopies):
    """M copies of a tabular world (:func:`tabular_law`) as tensors on ``device``; copy j
    starts with the stream of ``seeds[j]``."""

    kind = "tabular"
    slots = 4  # the branch, two for the reward's noise, the restart
    _state_names = ("state", "steps", "total")

    def __init__(self, env: gym.Env, seeds: list[int], device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.law = tabular_law(env).to(self.device)
        m = len(seeds)
        self.state = torch.zeros(m, dtype=torch.int64, device=self.device)
        self.steps = torch.zeros(m, dtype=torch.int64, device=self.device)
        self.total = torch.zeros(m, dtype=torch.float64, device=self.device)
        self._start_streams(seeds)

    def _prepare(self, u: Tensor) -> Tensor:
        """(branch uniform, standard normal, restart uniform)."""
        return torch.stack([u[..., 0], normals(u[..., 1], u[..., 2]), u[..., 3]], dim=-1)

    def _start(self, rows: Tensor, draws: Tensor) -> None:
        self.state[rows] = choose(self.law.start_cumulative, draws[:, 2])
        self.steps[rows] = 0
        self.total[rows] = 0.0

    def obs_tensor(self) -> Tensor:
        return self.law.observations[self.state]

    def step_tensors(self, actions: Tensor) -> TensorStep:
        """Take ``actions[M]`` (int) in every copy; an ended episode restarts at once."""
        law = self.law
        draws = self._next_draws()
        row = self.state * law.n_actions + actions.to(torch.int64)
        width = law.cumulative.shape[1]
        index = row * width + choose(law.cumulative[row], draws[:, 0])  # the branch, flat
        reached = law.next_state.view(-1)[index]
        terminal = law.terminal.view(-1)[index]
        reward = law.reward_mean.view(-1)[index]
        if law.reward_std:
            reward = reward + law.reward_std * draws[:, 1]
        self.steps += 1
        self.total += reward
        timeout = (self.steps >= law.time_limit) if law.time_limit is not None \
            else torch.zeros_like(terminal)
        ended = terminal | timeout
        terminated = terminal | (timeout & law.timeout_is_terminal)
        if law.outcome is not None:
            outcome = law.outcome[reached, terminal.to(torch.int64)]
        else:
            outcome = torch.where(terminal, law.outcome_of_total(self.total),
                                  torch.zeros_like(self.total))
        next_obs = law.observations[reached]
        start = choose(law.start_cumulative, draws[:, 2])
        self.state = torch.where(ended, start, reached)
        self.steps = torch.where(ended, 0, self.steps)
        self.total = torch.where(ended, 0.0, self.total)
        return TensorStep(next_obs, reward, terminated, ended, outcome)


# ----------------------------------------------------------------------- risky navigation
def in_region(x: Tensor, y: Tensor, south_edge: float) -> Tensor:
    """:func:`rs_lightning.envs.risky_navigation.in_region` of tensors."""
    left, right = nav.REGION_X
    return (left <= x) & (x <= right) & (south_edge < y) & (y < nav.REGION_HALF_HEIGHT)


def goal_distance(x: Tensor, y: Tensor) -> Tensor:
    """:func:`rs_lightning.envs.risky_navigation.goal_distance` of tensors."""
    dx = torch.clamp((x - nav.GOAL[0]).abs() - nav.GOAL_HALF_WIDTH, min=0.0)
    dy = torch.clamp((y - nav.GOAL[1]).abs() - nav.GOAL_HALF_WIDTH, min=0.0)
    return torch.hypot(dx, dy)


def fenced(x0: Tensor, y0: Tensor, x1: Tensor, y1: Tensor, gate: float,
           south_edge: float) -> tuple[Tensor, Tensor]:
    """:func:`rs_lightning.envs.risky_navigation.fenced` of tensors: the same fences in the
    same order (the long sides, then the ends with their gates)."""
    left, right = nav.REGION_X
    graze = nav._GRAZE
    for edge in (nav.REGION_HALF_HEIGHT, south_edge):
        before = (y0 < edge) if edge > 0 else (y0 > edge)
        after = (y1 < edge) if edge > 0 else (y1 > edge)
        crossing = x0 + (x1 - x0) * (edge - y0) / (y1 - y0)
        stop = (before != after) & (left + graze < crossing) & (crossing < right - graze)
        edge_t = torch.full_like(y1, edge)
        inner = torch.nextafter(edge_t, torch.zeros_like(y1))
        y1 = torch.where(stop, torch.where(before, inner, edge_t), y1)
    for edge, outward in ((left, -math.inf), (right, math.inf)):
        before = (x0 >= edge) if outward < 0 else (x0 <= edge)
        after = (x1 >= edge) if outward < 0 else (x1 <= edge)
        crossing = y0 + (y1 - y0) * (edge - x0) / (x1 - x0)
        stop = ((before != after) & (crossing.abs() > gate + graze)
                & (south_edge + graze < crossing) & (crossing < nav.REGION_HALF_HEIGHT - graze))
        edge_t = torch.full_like(x1, edge)
        outer = torch.nextafter(edge_t, torch.full_like(x1, outward))
        x1 = torch.where(stop, torch.where(before, edge_t, outer), x1)
    return x1, y1


class NavigationCopies(_StreamCopies):
    """M copies of the risky navigation world (its settings read from the made ``env``) as
    tensors on ``device``."""

    kind = "risky_navigation"
    _state_names = ("position", "struck", "steps")
    _START_TRIES = 8  # uniform starts drawn per restart; the first off the goal is taken
    slots = 2 + 2 * _START_TRIES  # the strike, then the restart's

    def __init__(self, env: gym.Env, seeds: list[int], device: torch.device | str = "cpu"):
        world = env.unwrapped
        unsupported = _unsupported(env, (BoundsNormalizedObservation,
                                         gym.wrappers.RescaleAction))
        if unsupported is not None:
            raise ConfigError("env.backend", f"torch steps RiskyNavigation without wrappers "
                              f"that change actions or rewards; it is wrapped in {unsupported}: "
                              "use env.backend=gymnasium")
        self.world = world
        self.device = torch.device(device)
        self.time_limit = _time_limit(env)
        normalizers = [layer for layer in _layers(env)
                       if isinstance(layer, BoundsNormalizedObservation)]
        self.centre = self.half_width = None
        if normalizers:
            self.centre = torch.from_numpy(normalizers[0].centre).to(self.device)
            self.half_width = torch.from_numpy(normalizers[0].half_width).to(self.device)
        m = len(seeds)
        self.position = torch.zeros((m, 2), dtype=torch.float64, device=self.device)
        self.struck = torch.zeros(m, dtype=torch.bool, device=self.device)
        self.steps = torch.zeros(m, dtype=torch.int64, device=self.device)
        self._start_streams(seeds)

    def _prepare(self, u: Tensor) -> Tensor:
        """(strike uniform, restart x, restart y)."""
        starts = self._starts(u[..., 1:].reshape(-1, self.slots - 1))
        return torch.cat([u[..., :1], starts.view(*u.shape[:-1], 2)], dim=-1)

    def _starts(self, u: Tensor) -> Tensor:
        """Start positions ``[R, 2]`` from ``[R, 1 + 2 * tries]`` uniforms: the origin, or
        (``start`` anywhere, or mixed with probability one half) the first uniform draw over
        the arena that is off the goal (8 tries: all on the goal has probability ~1e-18)."""
        (x_low, x_high), (y_low, y_high) = nav.ARENA
        tries = self._START_TRIES
        x = x_low + (x_high - x_low) * u[:, 1:1 + tries]
        y = y_low + (y_high - y_low) * u[:, 1 + tries:1 + 2 * tries]
        off_goal = goal_distance(x, y) > 1e-9
        first = torch.argmax(off_goal.to(torch.int64), dim=1, keepdim=True)
        drawn = torch.cat([x.gather(1, first), y.gather(1, first)], dim=1)
        start = self.world.start
        anywhere = torch.full((u.shape[0],), start == "anywhere", device=self.device)
        if start == "mixed":
            anywhere = u[:, 0] < 0.5
        return torch.where(anywhere[:, None], drawn, torch.zeros_like(drawn))

    def _start(self, rows: Tensor, draws: Tensor) -> None:
        self.position[rows] = draws[:, 1:]
        self.struck[rows] = False
        self.steps[rows] = 0

    def _observe(self, position: Tensor) -> Tensor:
        obs = position.to(torch.float32)
        if self.centre is not None:
            obs = (obs - self.centre) / self.half_width
        return obs

    def obs_tensor(self) -> Tensor:
        return self._observe(self.position)

    def step_tensors(self, actions: Tensor) -> TensorStep:
        """Take ``actions[M, 2]`` in [-1, 1]^2 in every copy; an ended episode restarts."""
        world, (x_low, x_high), (y_low, y_high) = self.world, *nav.ARENA
        draws = self._next_draws()
        move = actions.to(torch.float64).reshape(-1, 2).clamp(-1.0, 1.0) * nav.SPEED
        x0, y0 = self.position[:, 0], self.position[:, 1]
        before = goal_distance(x0, y0)
        x1 = (x0 + move[:, 0]).clamp(x_low, x_high)
        y1 = (y0 + move[:, 1]).clamp(y_low, y_high)
        if world.gate is not None:
            x1, y1 = fenced(x0, y0, x1, y1, world.gate, world.south_edge)
        after = goal_distance(x1, y1)
        reward = -world.step_cost + world.shaping * (before - after)
        strike = in_region(x1, y1, world.south_edge) & (draws[:, 0] < world.strike_probability)
        reward = reward - world.penalty * strike
        self.struck = self.struck | strike
        terminated = after <= 1e-9
        outcome = torch.where(self.struck, -1.0, torch.where(terminated, 1.0, 0.0)).to(
            torch.float64)
        reached = torch.stack([x1, y1], dim=1)
        self.steps += 1
        ended = terminated if self.time_limit is None else terminated | (
            self.steps >= self.time_limit)
        next_obs = self._observe(reached)
        self.position = torch.where(ended[:, None], draws[:, 1:], reached)
        self.struck = self.struck & ~ended
        self.steps = torch.where(ended, 0, self.steps)
        return TensorStep(next_obs, reward, terminated, ended, outcome)


def device_copies(env: gym.Env, seeds: list[int], device: torch.device | str = "cpu"
                  ) -> _StreamCopies:
    """The device copies of the made environment ``env``, copy j with the stream of
    ``seeds[j]``; ConfigError naming ``env.backend`` for a world they cannot step."""
    if isinstance(env.unwrapped, nav.RiskyNavigation):
        return NavigationCopies(env, seeds, device)
    return TabularCopies(env, seeds, device)


def check_backend(env_config) -> None:
    """ConfigError naming the key where ``env.backend: torch`` cannot step the configured
    world (checked before a run writes anything)."""
    if getattr(env_config, "backend", "gymnasium") != "torch":
        return
    for config in (env_config, training_env(env_config)):
        env = make_env(config)
        try:
            device_copies(env, [0])
        finally:
            env.close()


__all__ = ["DEVICE_WORLDS", "ENV_BACKENDS", "NavigationCopies", "TabularCopies", "TabularLaw",
           "TensorStep", "check_backend", "choose", "device_copies", "fenced", "goal_distance",
           "host_answer", "in_region", "mix32", "normals", "seed_keys", "tabular_law",
           "uniforms"]
