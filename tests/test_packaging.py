"""The installed package trains from any folder: its configuration travels with it
(``rs_lightning.conf``), ``rs-lightning train`` writes under the current folder, and its
version has one source. (CI builds the wheel and uses it from an empty folder:
.ci/wheel_check.)"""

from __future__ import annotations

import importlib.resources
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import rs_lightning
from rs_lightning.app.console import main as console
from rs_lightning.config import CONF_DIR
from tests.conftest import ROOT
from tests.warm_python import command as python_command


def test_the_configuration_is_found_through_the_package():
    assert CONF_DIR == Path(str(importlib.resources.files("rs_lightning.conf")))
    assert (CONF_DIR / "train.yaml").is_file() and (CONF_DIR / "env" / "risky_rewards.yaml").is_file()


def test_one_version_for_the_package_the_command_and_the_citation(capsys):
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                        re.M).group(1)
    assert rs_lightning.__version__ == version
    with pytest.raises(SystemExit) as done:
        console(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"rs-lightning {version}\n"
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["version"] == version
    assert "2212.14743" in citation["preferred-citation"]["url"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_rs_lightning_train_writes_under_the_folder_it_runs_in(tmp_path):
    command = [*python_command(), "-m", "rs_lightning", "train", "debug=quick", "logger=none",
               "callbacks.progress_bar=false", "trainer.max_steps=60",
               "evaluation.every_n_steps=0", "evaluation.episodes=20"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "runs").glob("*/eval.json"))
    assert len(runs) == 1 and "_debug=quick," in runs[0].parent.name  # named as train.py names it
    bad = subprocess.run([*python_command(), "-m", "rs_lightning", "train", "alpha=2"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         stdin=subprocess.DEVNULL)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["Error in config: alpha: must be in [0, 1], got 2.0"]


# The import name of each distribution the package requires (pyproject's dependencies).
IMPORT_NAMES = {"torch": "torch", "pytorch-lightning": "pytorch_lightning",
                "hydra-core": "hydra", "hydra-joblib-launcher": "hydra_plugins",
                "omegaconf": "omegaconf", "wandb": "wandb", "gymnasium": "gymnasium",
                "numpy": "numpy", "scipy": "scipy", "matplotlib": "matplotlib", "tqdm": "tqdm"}
# Installed with those (their own dependencies), imported by name.
TRANSITIVE = {"lightning_utilities", "lightning_fabric", "yaml", "PIL", "packaging"}


def test_every_module_level_import_of_the_package_is_a_declared_dependency():
    """A module imported when the package's modules load (not inside a function, where an
    optional extra is imported and its absence said in one line) comes with the wheel's
    requirements: an undeclared one fails the installed package at its first run."""
    import ast
    import sys
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {re.split(r"[<>=!\[ ;]", requirement)[0] for requirement in project["dependencies"]}
    assert declared <= set(IMPORT_NAMES), declared - set(IMPORT_NAMES)
    allowed = {IMPORT_NAMES[name] for name in declared} | TRANSITIVE | set(sys.stdlib_module_names)
    allowed |= {"rs_lightning", "__future__"}
    undeclared = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] not in allowed:
                    undeclared.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    assert not undeclared, undeclared
