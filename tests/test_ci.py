"""CI runs the README's own test command, in a fresh virtual environment."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    """The shell commands of the README's quick start, in order."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_ci_runs_the_readme_test_command_in_a_fresh_virtual_environment():
    setup_and_train, setup_and_test = quick_start_commands()[:2]
    assert "pytest" in setup_and_test and "train.py" in setup_and_train
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in script if line.strip() and not line.startswith("#")]
    assert setup_and_test in commands
    # The environment is made before the command runs, and activated.
    made = next(i for i, c in enumerate(commands) if c.startswith("python3 -m venv"))
    activated = next(i for i, c in enumerate(commands) if "/bin/activate" in c)
    assert made < activated < commands.index(setup_and_test)
    assert commands[-1] == "lint-imports"


def test_ci_then_installs_the_wheel_and_uses_it_from_an_empty_folder():
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in script if line.strip() and not line.startswith("#")]
    setup_and_test = quick_start_commands()[1]
    assert commands.index(setup_and_test) < commands.index(".ci/wheel_check") < len(commands) - 1
    check = (ROOT / ".ci" / "wheel_check").read_text()
    # the wheel, not the checkout, in a fresh environment, used from a folder of its own
    assert "python3 -m build" in check and 'pip install -q "${wheel[0]}"' in check
    assert "python3 -m venv" in check and "unset PYTHONPATH" in check
    for step in ("rs-lightning train debug=quick", "rs-lightning train -m debug=quick seed=0,1",
                 "rs-lightning report sweep", "rs-lightning benchmark --worlds two_stage",
                 "rs_lightning.train(", 'cp -r "$repo/examples/own_project"',
                 "--config-dir conf experiment=risky_choice"):
        assert step in check, step
