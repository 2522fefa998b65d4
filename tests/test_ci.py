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
