"""Figures render from a short real run and report sensible numbers."""

from __future__ import annotations

import math

import pytest

from rs_lightning.analysis.plots import plot_return_distributions
from rs_lightning.app.commands.plots import main
from rs_lightning.analysis.runs import load_run
from rs_lightning.app.train import run


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    run_dir = tmp_path_factory.mktemp("run")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", ["agent=rs_umdqn_c", "debug=quick", "logger=none",
                                "callbacks.progress_bar=false"])
    run(cfg, run_dir=run_dir)
    return run_dir


def test_distribution_figure_of_a_trained_run(quick_run, tmp_path):
    out = tmp_path / "fig.png"
    report = plot_return_distributions(load_run(quick_run), (2, 1), out)
    assert out.stat().st_size > 10_000 and out.read_bytes()[:4] == b"\x89PNG"
    assert [a["name"] for a in report["actions"]] == ["right", "down", "left", "up"]
    utilities = [a["utility"] for a in report["actions"]]
    assert report["chosen_action"] == utilities.index(max(utilities))
    for action in report["actions"]:
        # U = 0.5 Q + 0.5 VaR, and the exact law of each action is there to compare with.
        assert math.isclose(action["utility"], 0.5 * action["q"] + 0.5 * action["risk"], abs_tol=1e-5)
        assert 0.0 <= action["wasserstein_1"] < 5.0


def test_cli_draws_the_default_state_and_rejects_a_non_run(quick_run, tmp_path, capsys):
    assert main(["distributions", str(quick_run)]) == 0
    assert (quick_run / "distributions_1_0.png").is_file()
    printed = capsys.readouterr().out
    assert "chosen" in printed and "action 3 (up): Q=" in printed
    assert main(["distributions", str(tmp_path)]) == 2


def test_learning_curves_of_a_sweep(quick_run, tmp_path, capsys):
    import shutil

    from omegaconf import OmegaConf

    from rs_lightning.analysis.plots import plot_learning_curves

    sweep = tmp_path / "sweep"
    for seed in (0, 1):  # two job folders standing for two seeds
        shutil.copytree(quick_run, sweep / f"{seed}_seed={seed}")
        config = OmegaConf.load(sweep / f"{seed}_seed={seed}" / "config.yaml")
        config.seed = seed
        OmegaConf.save(config, sweep / f"{seed}_seed={seed}" / "config.yaml")
    shutil.copytree(quick_run, sweep / "copy_of_seed_0")  # the same config and seed again
    seeds = plot_learning_curves(sweep, tmp_path / "curves.png")
    assert seeds == {"rs_lightning/RiskyRewards-v0": {"rs_umdqn_c": 2}}
    assert "left out of the curves" in capsys.readouterr().err
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert main(["curves", str(tmp_path / "empty")]) == 2
    # Chosen rows over environment steps (the MinAtar figure's command).
    out = tmp_path / "chosen.png"
    assert main(["curves", str(sweep), "--metrics", "expectation", "cvar", "--x", "env_steps",
                 "--out", str(out), "--title", "chosen"]) == 0
    assert out.stat().st_size > 10_000


def test_reevaluation_from_the_checkpoint_reproduces_eval_json(quick_run):
    from rs_lightning.app.commands.evaluation import main as evaluate_main

    written = (quick_run / "eval.json").read_text()
    assert evaluate_main([str(quick_run)]) == 2  # eval.json is replaced only on request
    assert evaluate_main([str(quick_run), "--overwrite"]) == 0
    assert (quick_run / "eval.json").read_text() == written


def test_evaluation_episodes_of_different_seeds_are_independent():
    from rs_lightning.analysis.evaluation import episode_seeds

    first, second = episode_seeds(0, 10_000), episode_seeds(1, 10_000)
    assert len(set(first) & set(second)) < 5  # 32-bit seeds: chance collisions only
    assert (episode_seeds(0, 100) == first[:100]).all()  # periodic evals reuse a prefix


def test_a_run_recorded_before_newer_keys_still_loads(quick_run, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    old = tmp_path / "old_run"
    shutil.copytree(quick_run, old)
    config = OmegaConf.load(old / "config.yaml")
    del config["format_version"]  # as such a run wrote it: no recorded format
    del config.learning["on_non_finite"]
    del config["fault_injection"]
    config.logger.pop("online_timeout", None)
    OmegaConf.save(config, old / "config.yaml")
    run = load_run(old)
    assert run.run_config.train.learning.on_non_finite == "stop"
    assert run.run_config.train.learning.lr == config.learning.lr  # recorded values kept


def test_learning_curves_keep_other_utility_settings_apart(tmp_path):
    """Runs of another alpha are another curve, not more seeds of the same one; seed
    folders of a parallel_seeds job count as runs."""
    from omegaconf import OmegaConf

    from rs_lightning.analysis.plots import load_histories

    def run_folder(path, alpha, seed=0):
        path.mkdir(parents=True)
        config = {"env": {"id": "rs_lightning/RiskyRewards-v0"}, "agent": {"name": "c51"},
                  "alpha": alpha, "risk": {"name": "var", "rho": 0.1}, "rho": 0.1, "seed": seed}
        (path / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
        (path / "eval_history.jsonl").write_text('{"step": 10, "expectation": 0.1}\n')

    run_folder(tmp_path / "0_alpha=0.5", 0.5)
    run_folder(tmp_path / "1_alpha=1.0" / "seed_0", 1.0)
    run_folder(tmp_path / "1_alpha=1.0" / "seed_1", 1.0, seed=1)
    groups = load_histories(tmp_path)
    assert {label: len(runs) for (_, label), runs in groups.items()} == {
        "c51 alpha=0.5": 1, "c51 alpha=1": 2,  # floats shown to 6 significant digits
    }


def test_the_improvement_matrix_stays_readable_for_a_study_of_20_trials(monkeypatch, tmp_path):
    """An Optuna study's 20 settings: 6-digit tick labels, no overlapping cell numbers
    (the colour bar says the value), two-line titles; 4 settings keep their numbers."""
    import numpy as np

    import rs_lightning.analysis.plots as plots

    rng = np.random.default_rng(0)
    table = [{"env": "rs_lightning/RiskyRewards-v0",
              "settings": {"agent.name": "dqn", "env.id": "rs_lightning/RiskyRewards-v0",
                           "learning.lr": float(10 ** rng.uniform(-5, -2))},
              "scores": {m: list(rng.normal(size=5)) for m in ("utility", "expectation", "var")}}
             for _ in range(20)]
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda fig, out: drawn.append(fig))
    for settings, numbers in ((20, 0), (4, 16)):
        assert plots.plot_probability_of_improvement(table[:settings], tmp_path / "p.png") == 1
        fig = drawn.pop()
        matrices = [ax for ax in fig.axes if ax.get_title()]
        assert len(matrices) == 3 and all(len(ax.texts) == numbers for ax in matrices)
        assert all("\n" in ax.get_title() for ax in matrices)
        ticks = [t.get_text() for t in matrices[0].get_xticklabels()]
        assert all(len(t.split("=")[-1]) <= 12 for t in ticks), ticks
        assert len(fig.axes) == 4  # and a colour bar


def test_a_wide_table_scrolls_in_its_own_box():
    from rs_lightning.analysis.report import _html_table

    html = _html_table(["a", "b"], [["1", "2"]], labels=1)
    assert html.startswith('<div class="wide"><table>') and html.endswith("</table></div>")
