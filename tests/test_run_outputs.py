"""Smaller outputs of a run and the command line: the risk measure's own value in eval.json,
the policy picture of a grid world, and the hint to add -m to a comma list."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
import torch

from rs_lightning.analysis.evaluation import summarize_returns
from rs_lightning.risk import Utility, cpw, from_samples, value_at_risk, wang
from tests.conftest import ROOT
from tests.warm_python import command as python_command


@pytest.mark.parametrize("risk, params, measure", [
    ("wang", {"eta": -0.75}, lambda d: wang(d, eta=-0.75)),
    ("cpw", {"eta": 0.71}, lambda d: cpw(d, eta=0.71)),
    ("var", {"rho": 0.1}, lambda d: value_at_risk(d, 0.1)),
])
def test_eval_summary_holds_the_value_of_the_run_s_risk_measure(risk, params, measure):
    returns = np.random.default_rng(0).normal(0.5, 1.0, 400)
    summary = summarize_returns(returns, np.full(400, np.nan), Utility(0.3, risk, params), 0.1)
    value = float(measure(from_samples(torch.as_tensor(returns, dtype=torch.float64))))
    assert summary["risk_value"] == pytest.approx(value)
    assert summary["utility"] == pytest.approx(0.3 * summary["expectation"] + 0.7 * value)
    if risk == "wang":  # of a Gaussian N(mu, sigma): mu + eta sigma
        assert summary["risk_value"] == pytest.approx(
            summary["expectation"] - 0.75 * summary["return_std"], abs=0.05)
    json.dumps(summary)  # eval.json holds it as it is


def test_the_policy_picture_draws_an_arrow_on_every_cell_but_the_goals(tmp_path, monkeypatch):
    from rs_lightning.analysis import plots

    drawn = []

    def inspect_and_save(fig, out):
        ax = fig.axes[0]
        drawn.append([(text.xy, text.xyann) for text in ax.texts if getattr(text, "arrow_patch", None) is not None])
        drawn.append(sorted(text.get_text() for text in ax.texts if text.get_text()))
        fig.clf()

    monkeypatch.setattr(plots, "_save", inspect_and_save)
    # RiskyRewards: goals at (0, 2) and (2, 2); everything goes up (3), the start right (0).
    table = {f"{x},{y}": 3 for x in range(3) for y in range(3)}
    table["1,0"] = 0
    plots.plot_policy(table, "rs_lightning/RiskyRewards-v0", tmp_path / "policy.png")
    arrows, labels = drawn
    assert len(arrows) == 7 and labels == ["goal", "goal", "start"]
    # The start's arrow points right (head to the right of its tail), the others up.
    heads = {(round(tail[0] + head[0]) // 2, round(tail[1] + head[1]) // 2): (head, tail)
             for head, tail in arrows}
    (head, tail) = heads[(1, 0)]
    assert head[0] > tail[0] and head[1] == tail[1]
    (head, tail) = heads[(0, 0)]
    assert head[1] > tail[1] and head[0] == tail[0]


def test_the_policy_command_writes_policy_png(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "policy.json").write_text(json.dumps({f"{x},{y}": 1 for x in range(3) for y in range(3)}))
    (run / "config.yaml").write_text("env:\n  id: rs_lightning/RiskyGridWorld-v0\nagent:\n  name: dqn\n")
    from rs_lightning.app.commands.plots import main

    assert main(["policy", str(run)]) == 0
    assert (run / "policy.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["policy", str(tmp_path)]) == 2  # no policy.json there


def test_a_comma_list_without_multirun_says_to_add_m():
    result = subprocess.run([*python_command(), str(ROOT / "train.py"), "agent=dqn,c51"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [(
        "Error in config: agent: 'dqn,c51' is several values: add -m (--multirun) to run one "
        "job per value, or write agent=[dqn,c51] for a list")]


def test_eval_summary_holds_the_lower_quantiles_of_the_returns():
    """Episodes of 0, 1, ..., 99 points: the lower q-quantile is the smallest return with at
    least q of the episodes at or below it."""
    summary = summarize_returns(np.arange(100.0), np.full(100, np.nan), Utility(1.0, "var", {}), 0.1)
    quantiles = summary["return_quantiles"]
    assert quantiles == {"0.01": 0.0, "0.05": 4.0, "0.1": 9.0, "0.25": 24.0, "0.5": 49.0,
                         "0.75": 74.0, "0.9": 89.0, "0.95": 94.0, "0.99": 98.0}
    assert quantiles["0.1"] == summary["var"]  # VaR_0.1 is the same rule
    json.dumps(summary)


def test_an_evaluation_episode_that_never_ends_is_cut_with_a_warning(compose, monkeypatch,
                                                                       capsys):
    """ShiftedCounter has no time limit, and a policy that always steps back never reaches
    its end: each episode is cut at the cap (the evaluation ends), with one warning."""
    import torch

    import tests.gym_test_envs  # noqa: F401  (registers ShiftedCounter-v0)
    from rs_lightning.analysis import evaluation
    from rs_lightning.config.schema import validate

    monkeypatch.setattr(evaluation, "EPISODE_STEP_CAP", 50)
    env = validate(compose(["env=gym", "env.id=ShiftedCounter-v0"])).train.env
    summary = evaluation.evaluate_policy(lambda obs: torch.zeros(len(obs), dtype=torch.long),
                                         env, Utility(1.0), 0.1, episodes=5, seed=0)
    # From position 2, one step back earns 1 (position 1), the 49 others 0 (position 0).
    assert summary["episodes"] == 5 and summary["expectation"] == 1.0
    err = capsys.readouterr().err
    assert err.count("ran 50 steps without ending and was cut there") == 1
    assert "env.max_episode_steps" in err
