"""The one utility-greedy policy iteration behind every world's per-decision reference, and
the one entry that gives a run's environment its references."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from rs_lightning.references import exact_policies, tabular_references
from rs_lightning.references.ground_truth import (
    ExactReferences,
    GridWorldReferences,
    TabularReferences,
    exact_references,
)
from rs_lightning.references.policy_iteration import (
    CYCLE,
    greedy,
    iterate,
    path_switch_points,
    settled_path,
)


def test_greedy_keeps_the_current_action_among_ties_and_else_takes_the_lowest_best():
    values = np.array([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0], [3.0, 0.0, 3.0 - 1e-13]])
    assert greedy(values, (1, 0, 2), tie=1e-12) == (1, 1, 2)
    assert greedy(values, (2, 0, 1), tie=1e-12) == (0, 1, 0)
    assert greedy(values, (1, 0, 2), tie=0.0) == (1, 1, 0)


def test_iteration_reaches_a_fixed_point_and_counts_its_steps():
    # One state; the best action is one above the current one, up to action 2.
    def values(policy):
        best = min(policy[0] + 1, 2)
        return np.eye(3)[best][None, :]

    iteration = iterate(values, (0,), tie=1e-12)
    assert iteration.policy == (2,) and iteration.steps == 2 and iteration.converged


def test_iteration_reports_a_cycle_in_the_order_its_policies_repeat():
    # Action 0 makes 1 best, 1 makes 2 best, 2 makes 1 best: from 0 it enters the cycle 1, 2.
    nxt = {0: 1, 1: 2, 2: 1}

    def values(policy):
        return np.eye(3)[nxt[policy[0]]][None, :]

    iteration = iterate(values, (0,), tie=1e-12)
    assert not iteration.converged
    assert iteration.cycle == ((1,), (2,)) and iteration.policy == (1,)
    assert settled_path(iteration, lambda key: "same") == "same"
    assert settled_path(iteration, lambda key: str(key[0])) == CYCLE
    with pytest.raises(RuntimeError, match="neither converged nor cycled"):
        iterate(lambda p: np.eye(50)[min(p[0] + 1, 49)][None, :], (0,), tie=0.0,
                max_iterations=10)


def test_switch_points_are_bisected_to_the_tolerance():
    points = path_switch_points(lambda a: "low" if a < 0.3137 else "high",
                                np.linspace(0, 1, 11), tolerance=1e-5)
    assert len(points) == 1
    assert points[0].path_below == "low" and points[0].path_above == "high"
    assert abs(points[0].alpha - 0.3137) < 1e-5


def test_both_worlds_run_the_same_iteration():
    # The engine is one: neither world module keeps a loop of its own.
    for module in (exact_policies, tabular_references):
        assert module.CYCLE is CYCLE
        assert module.iterate is iterate


def test_exact_references_tell_the_worlds_apart_in_one_place():
    grid = OmegaConf.create({"id": "rs_lightning/RiskyRewards-v0", "kwargs": {"max_steps": 10},
                             "gamma": 0.9, "grid_size": 3})
    cliff = OmegaConf.create({"id": "CliffWalking-v1", "kwargs": {}, "gamma": 0.9,
                              "grid_size": None, "max_episode_steps": 100})
    cartpole = OmegaConf.create({"id": "CartPole-v1", "kwargs": {}, "gamma": 0.99,
                                 "grid_size": None})
    assert type(exact_references(grid, 0.1)) is GridWorldReferences
    assert type(exact_references(cliff, 0.1)) is TabularReferences
    none = exact_references(cartpole, 0.1)
    assert type(none) is ExactReferences
    assert none.static_references(None) == {} and none.policy_metrics(None, None) == {}
