"""A project of one's own (examples/own_project/): its gymnasium environment, risk measure and
preset live in its own folder, registered through ``plugins:``; trained from a copy of it,
with nothing of the package edited, and read back by the tools like the built-in ones."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import ROOT
from tests.warm_python import command as python_command

EXAMPLE = ROOT / "examples" / "own_project"
QUICK = ["trainer.max_steps=300", "evaluation.every_n_steps=150", "evaluation.episodes=400",
         "evaluation.episodes_during_training=100", "trainer.checkpoint_every_n_steps=150"]


def _train(project, *overrides, preset=("--config-dir", "conf", "experiment=risky_choice")):
    return subprocess.run(
        [*python_command(), "-m", "rs_lightning", "train", *preset, *QUICK, *overrides],
        cwd=project, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def _refusal(result) -> str:
    """The one line of a refused command (exit status 2)."""
    assert result.returncode == 2, result.stderr[-3000:]
    line, = result.stderr.strip().splitlines()
    return line


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("own") / "my_project"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    return folder


def test_the_example_trains_from_a_copy_with_its_own_env_measure_and_preset(project):
    result = _train(project, "hydra.run.dir=outputs/run")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((project / "outputs" / "run" / "eval.json").read_text())
    assert summary["env"] == "my_project/RiskyChoice-v0" and summary["risk"] == "semideviation"
    # Its published model (P) gives the exact static utility of the greedy policy, which
    # takes the sure 0.3 or the gamble (0.9 x 0.9 - 0.1 x 2.7 = 0.54 discounted).
    assert summary["exact_static_utility_kind"] == "exact"
    assert summary["steps"] == 300
    config = (project / "outputs" / "run" / "config.yaml").read_text()
    assert "plugins:\n- my_components" in config
    # The package was not written into: the outputs are the project's.
    assert not (ROOT / "outputs" / "run").exists()


def test_a_tool_that_loads_the_run_imports_its_plugins_from_its_config(project):
    """The frontier rebuilds the run's agent: its measure and environment must be known."""
    run = project / "outputs" / "run"
    if not (run / "eval.json").is_file():
        pytest.skip("the training test above did not run")
    result = subprocess.run(
        [*python_command(), "-m", "rs_lightning", "frontier", str(run), "--alpha", "0,1",
         "--episodes", "100", "--wandb", "off"],
        cwd=project, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((run / "frontier.json").read_text())
    assert rows, rows


def test_a_plugin_that_is_not_found_or_fails_is_one_line(project):
    assert _refusal(_train(project, "plugins=[no_such_module]")) == (
        f"Error in config: plugins: no module 'no_such_module' (neither installed nor in "
        f"{project}: run in the folder that holds it, or add it to PYTHONPATH)")
    (project / "broken.py").write_text("raise RuntimeError('no licence server')\n")
    assert _refusal(_train(project, "plugins=[broken]")).startswith("Error in config: plugins: 'broken' failed on import: RuntimeError: "
                           "no licence server (")


def test_without_the_plugin_the_preset_names_are_refused_naming_the_registered_ones(project):
    assert _refusal(_train(project, "plugins=[]")).startswith("Error in config: risk: unknown risk measure 'semideviation'; "
                           "allowed: ")


def test_a_config_folder_that_does_not_exist_is_one_line(project):
    assert _refusal(_train(project, preset=("--config-dir", "nowhere"))) == (
        f"Error in config: --config-dir: {project / 'nowhere'} is not a folder (give the folder "
        "of your own presets)")


def test_an_agents_own_settings_in_a_preset_of_ones_own(project):
    """conf/experiment_agent/<experiment>/<agent>.yaml of one's own folder applies to that
    agent in that experiment, and to no other agent."""
    own = project / "conf" / "experiment_agent" / "risky_choice"
    own.mkdir(parents=True)
    (own / "qr_dqn.yaml").write_text("# @package _global_\nlearning:\n  lr: 0.0005\n")
    try:
        lrs = {}
        for agent in ("qr_dqn", "c51"):
            result = _train(project, f"agent={agent}", "--cfg", "job")
            assert result.returncode == 0, result.stderr[-3000:]
            lrs[agent] = yaml.safe_load(result.stdout)["learning"]["lr"]
    finally:
        shutil.rmtree(own.parent)
    assert lrs["qr_dqn"] == 0.0005 and lrs["c51"] != 0.0005
