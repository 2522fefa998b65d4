"""The exact check of risk-conditioned agents on the paper's grid worlds (slow: one run of 5
seeds, the paper's 30,000 updates, per agent and world).

The reference is the per-decision fixed point of the paper's rule on the exact return laws
(:func:`rs_lightning.references.exact_policies.per_decision_fixed_point`, VaR_0.1, gamma 0.9): the
path it takes from the start at each alpha. Where that fixed point is not unique (risky
transitions, alpha 0.6692 to 0.7568: iteration from the green path stays green, from the
orange one goes orange) both ends count as switch points. A risk-conditioned agent trained
once per seed must take the exact path, with its greedy policy at each of 21 alphas, for at
least 4 of 5 seeds at every alpha more than 0.05 from a switch point.

    python -m pytest tests/test_risk_conditioning_exact.py -m slow -k "c51 and risky_rewards"
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rs_lightning.analysis import frontier
from rs_lightning.app.train import run
from rs_lightning.references.exact import PAPER_PATHS
from rs_lightning.references.exact_policies import (
    per_decision_fixed_point,
    per_decision_switch_points,
)
from rs_lightning.risk import Utility

ALPHAS = np.linspace(0.0, 1.0, 21).round(10).tolist()
WORLDS = ("risky_rewards", "risky_transitions", "risky_grid_world")
RHO, GAMMA, MARGIN, SEEDS, AGREEING = 0.1, 0.9, 0.05, 5, 4


def exact_reference(world: str) -> tuple[list[str], list[float]]:
    """The fixed point's path at each alpha of ALPHAS (from RIGHT everywhere) and every switch
    point, from the green and from the orange path as initial policies."""
    utility = Utility(0.5, "var", {"rho": RHO})
    paths = [per_decision_fixed_point(world, Utility(a, "var", {"rho": RHO}), gamma=GAMMA).path
             for a in ALPHAS]
    switches = sorted({round(point.alpha, 4)
                       for start in (None, PAPER_PATHS[world]["green"],
                                     PAPER_PATHS[world]["orange"])
                       for point in per_decision_switch_points(
                           world, utility, gamma=GAMMA, initial_policy=start,
                           alphas=np.linspace(0.0, 1.0, 101).tolist())})  # then bisection
    return paths, switches


def test_the_exact_references_pinned_in_the_docs():
    """The switch points and the 21-alpha paths the table of docs/guides/conditioning.md shows."""
    expected = {
        "risky_rewards": ([0.8462], "g" * 17 + "o" * 4),
        "risky_transitions": ([0.6692, 0.7568], "g" * 14 + "o" * 7),
        "risky_grid_world": ([0.9115], "g" * 19 + "o" * 2),
    }
    for world, (switches, paths) in expected.items():
        exact_paths, exact_switches = exact_reference(world)
        assert exact_switches == switches
        assert "".join(p[0] for p in exact_paths) == paths


@pytest.mark.slow
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("agent", ["c51", "rs_umdqn_c"])
def test_one_conditioned_run_takes_the_exact_path_at_every_alpha(compose, tmp_path, agent,
                                                                 world):
    paths, switches = exact_reference(world)
    run_dir = tmp_path / "run"
    run(compose([f"agent={agent}", f"env={world}", "agent.risk_conditioned=true",
                 f"parallel_seeds={SEEDS}", "logger=csv", "callbacks.progress_bar=false",
                 "evaluation.every_n_steps=0", "evaluation.episodes=1000",
                 "trainer.checkpoint_every_n_steps=0",
                 # RS-UMDQN-C computes each distinct (state, setting) once: one setting per
                 # batch makes its 30,000 updates affordable (docs/guides/conditioning.md)
                 *(["risk_conditioning.settings_per_batch=1"] if agent == "rs_umdqn_c" else [])]),
        run_dir=run_dir)
    result = frontier.frontier([run_dir], ALPHAS, None, 0, run_dir, exact_only=True)
    learned = {(row["seed"], row["alpha"]): row["path"] for row in result["rows"]}
    report = {"agent": agent, "world": world, "switches": switches, "alphas": ALPHAS,
              "exact": paths, "learned": {str(seed): [learned[seed, a] for a in ALPHAS]
                                          for seed in range(SEEDS)}}
    (run_dir / "exact_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    failures = []
    for alpha, path in zip(ALPHAS, paths):
        if min(abs(alpha - s) for s in switches) <= MARGIN:
            continue
        agreeing = sum(learned[seed, alpha] == path for seed in range(SEEDS))
        if agreeing < AGREEING:
            failures.append(f"alpha {alpha}: {agreeing} of {SEEDS} seeds take {path}")
    assert not failures, failures
