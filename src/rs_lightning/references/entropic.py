"""The static entropic optimum: max over policies of -1/beta log E[exp(-beta S)], S the
episode's discounted return sum_{t < H} gamma^t r_t, by dynamic programming on (state, step).

For beta > 0 maximising the certainty equivalent is minimising E[exp(-beta S)] (beta < 0:
maximising it). After a history with discounted return c at step t, the episode's remaining
return is gamma^t R with R the return from the current state on, and

    E[exp(-beta S) | history] = exp(-beta c) E[exp(-beta gamma^t R) | s_t]

so the factor of the past is common to every action: the best action depends on the state
and the step alone (the exponent scaled by gamma^t), and the best policy over histories is
Markov in (state, step). With M_t(s) = opt_pi E[exp(-beta sum_{k >= t} gamma^k r_k) | s_t = s]:

    M_t(s) = opt_a sum_k p_k(s, a) E[exp(-beta gamma^t r_k)] M_{t+1}(s'_k)^(not terminal_k)
    M_H(s) = 1 (the time limit),      opt = min for beta > 0, max for beta < 0,

and the optimum is -1/beta log sum_s mu_0(s) M_0(s), everything in logarithms (large
|beta r| does not overflow). A world gives the one-step factor's logarithm, which may hold
the law of the reward (the grid worlds' Gaussian rewards: their moment generating function).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np


class EntropicOptimum(NamedTuple):
    utility: float  # max -1/beta log E[exp(-beta S)]
    policy: np.ndarray  # [H, S]: the best action at each step and state


def _log_sum_exp(x: np.ndarray, axis: int) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.squeeze(top, axis) + np.log(np.exp(x - top).sum(axis))


def entropic_programme(probs: np.ndarray, next_states: np.ndarray, terminal: np.ndarray,
                       log_factor: Callable[[int], np.ndarray], start: np.ndarray,
                       horizon: int, beta: float) -> EntropicOptimum:
    """The programme of the module docstring on outcome arrays ``[S, A, K]`` (``probs`` of
    outcome k, padded with 0; its ``next_states`` and ``terminal`` flag) with
    ``log_factor(t)[S, A, K]`` = log E[exp(-beta gamma^t r)] of each outcome's reward,
    ``start[S]`` the initial distribution and ``horizon`` H steps."""
    if beta == 0:
        raise ValueError("beta must be non-zero")
    n_states = probs.shape[0]
    with np.errstate(divide="ignore"):
        log_probs = np.log(probs)  # -inf on padding
    log_m = np.zeros(n_states)
    policy = np.zeros((horizon, n_states), dtype=np.int64)
    for t in range(horizon - 1, -1, -1):
        terms = log_probs + log_factor(t) + np.where(terminal, 0.0, log_m[next_states])
        q = _log_sum_exp(np.where(probs > 0, terms, -np.inf), axis=-1)  # [S, A]
        policy[t] = q.argmin(1) if beta > 0 else q.argmax(1)
        log_m = np.take_along_axis(q, policy[t][:, None], 1)[:, 0]
    with np.errstate(divide="ignore"):
        log_start = _log_sum_exp(np.log(start) + log_m, axis=0)
    return EntropicOptimum(float(-log_start / beta), policy)
