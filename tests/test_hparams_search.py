"""Risk-aware hyperparameter search: the job's objective, and a tiny Optuna study of the
``hparams_search=risk_averse_lr`` preset from the command line to the report."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess

import pytest
from omegaconf import OmegaConf

from rs_lightning.analysis.report import STUDY_TABLE_KEY, wandb_report
from rs_lightning.analysis.study import run_objective
from rs_lightning.app.commands.report import main
from rs_lightning.config.schema import validate
from rs_lightning.errors import ConfigError
from rs_lightning.files import read_jsonl
from tests.conftest import ROOT
from tests.wandb_files import summary
from tests.warm_python import command as python_command

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="pip install -e '.[optuna]'")

TRIALS = 3


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Three trials of tiny runs, exactly as a user would start the study."""
    sweep_dir = tmp_path_factory.mktemp("study")
    result = subprocess.run(
        [*python_command(), "train.py", "hparams_search=risk_averse_lr",
         f"hydra.sweeper.n_trials={TRIALS}", "agent=dqn", "logger=none",
         "callbacks.progress_bar=false", "debug=quick", "trainer.max_steps=60",
         "evaluation.episodes=50", "evaluation.every_n_steps=30",
         "evaluation.episodes_during_training=20", "search_objective.evaluation=best",
         f"hydra.sweep.dir={sweep_dir}"],
        cwd=ROOT, env=dict(os.environ, WANDB_MODE="offline"), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return sweep_dir, result.stderr


def trial_folders(sweep_dir):
    return sorted((p for p in sweep_dir.iterdir() if (p / "eval.json").is_file()),
                  key=lambda p: int(p.name.split("_")[0]))


def test_study_tunes_lr_and_alpha_for_cvar_and_keeps_its_best_trial(study):
    sweep_dir, stderr = study
    # Its stderr is a pipe: no colour codes (Optuna colours its lines unless NO_COLOR).
    assert "\x1b[" not in stderr and "A new study created" in stderr
    jobs = trial_folders(sweep_dir)
    assert len(jobs) == TRIALS
    # Each trial's objective: the best CVaR_0.1 of its evaluations (periodic and final).
    objectives = []
    for job in jobs:
        config = OmegaConf.load(job / "config.yaml")
        assert (config.rho, config.search_objective.metric) == (0.1, "cvar")
        assert 1e-5 <= config.learning.lr <= 1e-3 and 0.0 <= config.alpha <= 1.0
        evaluations = [json.loads((job / "eval.json").read_text()),
                       *read_jsonl(job / "eval_history.jsonl")]
        assert len(evaluations) == 3  # steps 30 and 60, and the final one
        objectives.append(max(e["cvar"] for e in evaluations))
    assert len({OmegaConf.load(job / "config.yaml").learning.lr for job in jobs}) == TRIALS

    best = OmegaConf.load(sweep_dir / "optimization_results.yaml")
    assert best.best_value == max(objectives)
    winner = jobs[objectives.index(max(objectives))]
    assert best.best_params["learning.lr"] == OmegaConf.load(winner / "config.yaml").learning.lr

    with open(sweep_dir / "optimization_history.csv") as f:
        history = list(csv.DictReader(f))
    assert [row["job"] for row in history] == [job.name for job in jobs]
    assert [float(row["objective"]) for row in history] == objectives
    running = [max(objectives[:i + 1]) for i in range(TRIALS)]
    assert [float(row["best_so_far"]) for row in history] == running
    assert {"alpha", "learning.lr"} <= set(history[0])
    assert "optimization_history.csv" in stderr


def test_objective_of_the_final_or_the_best_evaluation(study):
    sweep_dir, _ = study
    job = trial_folders(sweep_dir)[0]
    final = json.loads((job / "eval.json").read_text())
    for metric in ("utility", "expectation", "var", "cvar", "risk_outcome", "exact_cvar"):
        assert run_objective(job, metric, "final") == final[metric]
        periodic = [r[metric] for r in read_jsonl(job / "eval_history.jsonl")]
        assert run_objective(job, metric, "best") == max([final[metric], *periodic])


def test_objective_keys_are_checked(compose):
    assert validate(compose(["search_objective.metric=exact_cvar"])).train.search_objective.metric == "exact_cvar"
    with pytest.raises(ConfigError, match=r"^search_objective.metric: must be one of utility, "
                                          r"expectation, var, cvar, .*got 'sharpe'"):
        validate(compose(["search_objective.metric=sharpe"]))
    with pytest.raises(ConfigError, match=r"^search_objective.metric: 'exact_cvar' exists only on the grid worlds"):
        validate(compose(["env=cartpole", "search_objective.metric=exact_cvar"]))
    with pytest.raises(ConfigError, match=r"^search_objective.evaluation: must be one of final, best"):
        validate(compose(["search_objective.evaluation=last"]))


def test_report_of_a_study_shows_and_logs_its_trials(study, tmp_path):
    sweep_dir, _ = study
    out = tmp_path / "report"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    import wandb

    wandb.teardown()  # W&B's service writes the run's file to the end (the CLI's exit does)
    page = (out / "report.html").read_text()
    assert "<h2>Hyperparameter search</h2>" in page and "Optuna's best trial" in page
    (run,) = (out / "wandb").glob("offline-run-*")
    (table,) = (run / "files" / "media" / "table").glob(f"{STUDY_TABLE_KEY}_*.table.json")
    data = json.loads(table.read_text())
    assert len(data["data"]) == TRIALS and "objective" in data["columns"]
    best = OmegaConf.load(sweep_dir / "optimization_results.yaml").best_value
    assert math.isclose(summary(run)["study/best_value"], best)


def test_wandb_report_spec_shows_the_study():
    import wandb_workspaces.reports.v2 as wr

    spec = wandb_report("rs-lightning", None, "study", ["learning_curves"], study=True)
    summary_grid = next(block for block in spec.blocks if isinstance(block, wr.PanelGrid))
    tables = [p.table_name for p in summary_grid.panels if isinstance(p, wr.WeavePanelSummaryTable)]
    assert tables == ["results", STUDY_TABLE_KEY]


def test_a_study_whose_trials_all_failed_says_so():
    import optuna

    from rs_lightning.app.cli import describe_hydra_error

    study = optuna.create_study(direction="maximize")
    with pytest.raises(ValueError) as raised:
        study.best_trial  # what the sweeper asks at the end of a study
    assert str(describe_hydra_error(raised.value)) == (
        "hydra.sweeper: no trial of the study finished: every job failed (each job's "
        "failed.json in the sweep folder says why)")
