"""The rs-lightning command: one entry for the tools that read runs, each with its --help;
`python -m rs_lightning <tool>` runs the same tools."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from rs_lightning.app.console import TOOLS, main
from tests.warm_python import command as python_command


def test_help_lists_every_tool(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in TOOLS)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_each_tool_answers_its_own_help_under_its_name(name, capsys):
    with pytest.raises(SystemExit) as stop:
        main([name, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: rs-lightning {name}")


def test_an_unknown_tool_is_one_line_naming_the_tools(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["nope"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "invalid choice: 'nope'" in err and all(name in err for name in TOOLS)


def test_a_tool_runs_and_returns_its_status(tmp_path, capsys):
    assert main(["results", str(tmp_path)]) == 2  # no finished run there: one line, status 2
    assert "no finished run" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["evaluate", "results", "gym-results"])
def test_python_dash_m_rs_lightning_runs_the_tools(name):
    result = subprocess.run([*python_command(), "-m", "rs_lightning", name, "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: rs-lightning {name}")


def test_the_package_root_imports_nothing_but_its_version():
    """No import hook and no module of the package is loaded by ``import rs_lightning``: the
    API and the tools load when used, under their own module names."""
    code = ("import sys, rs_lightning\n"
            "print(sorted(m for m in sys.modules if m.startswith('rs_lightning')))\n"
            "print(sorted(type(f).__module__ for f in sys.meta_path))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    modules, finders = result.stdout.strip().splitlines()
    assert modules == "['rs_lightning']"
    assert "rs_lightning" not in finders
    assert importlib.util.find_spec("rs_lightning.evaluation") is None  # the tool's old name


def test_command_lines_live_in_the_application_layer():
    # The analysis computes; parsing arguments and printing for a shell is the app's.
    import rs_lightning.analysis

    analysis = Path(rs_lightning.analysis.__file__).parent
    for path in sorted(analysis.glob("*.py")):
        text = path.read_text()
        assert "import argparse" not in text and "def main(" not in text, path.name
