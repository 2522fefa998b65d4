"""The exact metrics of a learned policy and the learned-vs-exact distances."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from rs_lightning.analysis.evaluation import evaluate_policy
from rs_lightning.envs.grid_worlds import REWARD_STD
from rs_lightning.references.exact import PAPER_PATHS, GaussianMixture, exact_return
from rs_lightning.references.ground_truth import (
    distribution_distances,
    exact_policy_metrics,
    exact_utility,
    mixture_as_distribution,
)
from rs_lightning.risk import Utility, dirac

ENV_IDS = {
    "risky_rewards": "rs_lightning/RiskyRewards-v0",
    "risky_transitions": "rs_lightning/RiskyTransitions-v0",
    "risky_grid_world": "rs_lightning/RiskyGridWorld-v0",
}


def env_config(name: str):
    return OmegaConf.create(
        {"id": ENV_IDS[name], "kwargs": {"max_steps": 10}, "gamma": 0.9, "grid_size": 3}
    )


def table_policy(table):
    def act(obs: torch.Tensor) -> torch.Tensor:
        return torch.tensor([table[(int(x), int(y))] for x, y in obs.tolist()])

    return act


@pytest.mark.parametrize("name", sorted(PAPER_PATHS))
@pytest.mark.parametrize("path", ["green", "orange"])
def test_exact_policy_metrics_agree_with_the_exact_law_and_with_monte_carlo(name, path):
    utility = Utility(0.5, "var", {"rho": 0.1})
    policy = table_policy(PAPER_PATHS[name][path])
    metrics = exact_policy_metrics(policy, env_config(name), utility, rho=0.1)
    law = exact_return(name, PAPER_PATHS[name][path])
    assert metrics["exact_expectation"] == pytest.approx(law.mean(), abs=1e-12)
    assert metrics["exact_var"] == pytest.approx(law.value_at_risk(0.1), abs=1e-9)
    assert metrics["exact_utility"] == pytest.approx(law.utility(0.5, 0.1), abs=1e-9)
    # The paper's path indicator: every episode of a path policy ends on its own side.
    expected_outcome = 1.0 if path == "green" else -1.0
    assert metrics["exact_risk_outcome"] == pytest.approx(law.expected_risk_outcome)
    mc = evaluate_policy(policy, env_config(name), utility, 0.1, episodes=4000, seed=3)
    assert abs(mc["expectation"] - metrics["exact_expectation"]) < 5 * mc["expectation_stderr"]
    assert abs(mc["risk_outcome"] - metrics["exact_risk_outcome"]) < 0.05
    # A path policy nearly always ends on its own side (the wind may make it time out).
    assert metrics["exact_risk_outcome"] * expected_outcome > 0.99


def test_exact_metrics_are_none_off_the_grid_worlds():
    config = OmegaConf.create({"id": "CartPole-v1", "kwargs": {}, "gamma": 0.99, "grid_size": None})
    assert exact_policy_metrics(lambda obs: obs[:, 0].long(), config, Utility(1.0), 0.1) is None


@pytest.mark.parametrize("risk", ["var", "cvar"])
def test_the_grid_route_of_exact_utility_matches_the_closed_form(risk):
    mixture = GaussianMixture([0.7, 0.3], [0.5, -1.0], [0.2, 0.35])
    closed = exact_utility(mixture, Utility(0.3, risk, {"rho": 0.1}))
    gridded = float(Utility(0.3, risk, {"rho": 0.1})(mixture_as_distribution(mixture)))
    assert gridded == pytest.approx(closed, abs=2e-3)


def test_wasserstein_distance_to_the_exact_law():
    sigma = 3 * REWARD_STD
    law = GaussianMixture([1.0], [0.25], [sigma])
    # The law itself on a fine grid: no distance.
    (same,) = distribution_distances(mixture_as_distribution(law).select(None), [law])
    assert same == pytest.approx(0.0, abs=1e-3)
    # A point mass at the mean: W1 = E|X - mu| = sigma * sqrt(2 / pi).
    (point,) = distribution_distances(dirac(torch.tensor([0.25], dtype=torch.float64)), [law])
    assert point == pytest.approx(sigma * math.sqrt(2 / math.pi), rel=1e-3)
    # A shifted copy: W1 = |shift|.
    shifted = mixture_as_distribution(GaussianMixture([1.0], [0.25 + 0.4], [sigma]))
    (shift,) = distribution_distances(shifted.select(None), [law])
    assert shift == pytest.approx(0.4, abs=2e-3)


def test_distances_are_per_action():
    laws = [GaussianMixture([1.0], [m], [0.1]) for m in (0.0, 1.0)]
    learned = dirac(torch.tensor([0.0, 0.5], dtype=torch.float64))
    d = distribution_distances(learned, laws)
    assert d[0] == pytest.approx(0.1 * math.sqrt(2 / math.pi), rel=1e-3)
    assert d[1] == pytest.approx(0.5, abs=2e-3)
    assert np.all(np.isfinite(d))


def test_evaluation_progress_bar_counts_every_episode(capsys, monkeypatch):
    from rs_lightning.analysis import evaluation

    closed = []

    class RecordedProgress(evaluation._EpisodeProgress):
        def close(self) -> None:
            super().close()
            closed.append((self.bar.n, self.bar.total, self.outcome_sum / self.outcome_count))

    monkeypatch.setattr(evaluation, "_EpisodeProgress", RecordedProgress)
    name = "risky_rewards"
    policy = table_policy(PAPER_PATHS[name]["green"])
    # On a terminal the bar is drawn in place and cleared at its end: it ends at every episode,
    # with the running R_s.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    evaluate_policy(policy, env_config(name), Utility(1.0), 0.1, episodes=1200, seed=0, progress=True)
    assert closed == [(1200, 1200, 1.0)]
    assert "evaluation" in capsys.readouterr().err
    # Elsewhere (a log file, a pipe) it writes nothing (tests/test_progress.py).
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    evaluate_policy(policy, env_config(name), Utility(1.0), 0.1, episodes=600, seed=0, progress=True)
    assert len(closed) == 2 and capsys.readouterr().err == ""


def two_stage_config():
    return OmegaConf.create(
        {"id": "rs_lightning/TwoStage-v0", "kwargs": {"max_steps": 10}, "gamma": 0.9,
         "grid_size": 3}
    )


def test_objective_references_on_a_world_where_the_objectives_disagree():
    """TwoStage: the per-decision fixed point goes green, the static optimum orange; a policy
    at the fixed point leaves exactly the difference of the two static utilities."""
    from rs_lightning.references.exact_policies import (
        per_decision_fixed_point,
        static_optimum,
    )
    from rs_lightning.references.ground_truth import objective_references

    utility = Utility(0.5, "var", {"rho": 0.1})
    fixed_point = per_decision_fixed_point("two_stage", utility, gamma=0.9)
    best = static_optimum("two_stage", utility, gamma=0.9)
    at_fixed_point = objective_references(table_policy(fixed_point.policy), two_stage_config(),
                                          utility)
    assert at_fixed_point["per_decision_path"] == "green"
    assert at_fixed_point["static_optimum_path"] == "orange"
    assert at_fixed_point["exact_static_utility"] == pytest.approx(
        at_fixed_point["per_decision_static_utility"], abs=1e-12)
    assert at_fixed_point["static_gap"] == pytest.approx(
        best.utility - fixed_point.discounted.utility, abs=1e-12)
    assert at_fixed_point["static_gap"] > 0.05
    at_optimum = objective_references(table_policy(best.policy), two_stage_config(), utility)
    assert at_optimum["static_gap"] == pytest.approx(0.0, abs=1e-12)
    assert at_optimum["exact_static_utility"] == pytest.approx(best.utility, abs=1e-12)


def test_objective_references_off_the_grid_worlds_and_without_a_closed_form():
    from rs_lightning.references.ground_truth import objective_references

    off_grid = OmegaConf.create({"id": "CartPole-v1", "kwargs": {}, "gamma": 0.99,
                                 "grid_size": None})
    utility = Utility(0.5, "var", {"rho": 0.1})
    assert objective_references(table_policy({}), off_grid, utility) is None
    wang = Utility(0.5, "wang", {"eta": -0.75})
    policy = table_policy(PAPER_PATHS["risky_rewards"]["green"])
    references = objective_references(policy, env_config("risky_rewards"), wang)
    law = exact_return("risky_rewards", PAPER_PATHS["risky_rewards"]["green"], gamma=0.9)
    assert set(references) == {"exact_static_utility"}
    assert references["exact_static_utility"] == pytest.approx(exact_utility(law.mixture, wang))
