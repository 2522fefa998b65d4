"""Learning against the paper's table (slow: full paper budget; run with -m slow).

The paper's numbers are properties of the two paths: DQN's column is the orange
(expectation-seeking) path, RS-UMDQN-C's the green (risk-averse) one. Each learned greedy
policy is compared with the exact return law of that path, within Monte Carlo error of the
10,000-episode evaluation.
"""

from __future__ import annotations

import pytest

from rs_lightning.app.train import run
from rs_lightning.references.exact import PAPER_PATHS, exact_return

ENVS = ["risky_rewards", "risky_transitions", "risky_grid_world"]


def train_and_compare(compose, tmp_path, env: str, agent: str, path: str, seed: int = 0):
    cfg = compose([
        f"env={env}", f"agent={agent}", f"seed={seed}", "logger=none",
        "callbacks.progress_bar=false", "evaluation.every_n_steps=0",
        "trainer.checkpoint_every_n_steps=0",
    ])
    summary = run(cfg, run_dir=tmp_path)
    exact = exact_return(env, PAPER_PATHS[env][path])
    # 5 standard errors of the Monte Carlo mean; VaR of 10,000 samples is looser.
    assert summary[f"risk_outcome_{path}"] > 0.95, summary
    assert abs(summary["expectation"] - exact.mean()) < 5 * summary["expectation_stderr"], summary
    assert abs(summary["var"] - exact.value_at_risk(0.1)) < 0.06, summary
    return summary


@pytest.mark.slow
@pytest.mark.parametrize("env", ENVS)
def test_dqn_learns_the_orange_path(compose, tmp_path, env):
    train_and_compare(compose, tmp_path, env, "dqn", "orange")


@pytest.mark.slow
@pytest.mark.parametrize("env", ENVS)
def test_rs_umdqn_c_learns_the_green_path(compose, tmp_path, env):
    train_and_compare(compose, tmp_path, env, "rs_umdqn_c", "green")
