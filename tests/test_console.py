"""The rs-lightning command: one entry for the tools that read runs, each with its --help;
`python -m rs_lightning.<tool>` (the form docs/reference/cli.md names beside each tool) runs
the same tools."""

from __future__ import annotations

import subprocess
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


@pytest.mark.parametrize("module", ["evaluation", "frontier", "results", "report", "plots",
                                    "gym_results"])
def test_python_dash_m_runs_the_tool_under_its_module_name(module):
    result = subprocess.run([*python_command(), "-m", f"rs_lightning.{module}", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage:")


def test_the_old_module_names_load_the_same_modules():
    import rs_lightning.evaluation as named

    import rs_lightning.analysis.evaluation as moved

    assert named is moved and named.__spec__.name == "rs_lightning.analysis.evaluation"


def test_command_lines_live_in_the_application_layer():
    # The analysis computes; parsing arguments and printing for a shell is the app's.
    import rs_lightning.analysis

    analysis = Path(rs_lightning.analysis.__file__).parent
    for path in sorted(analysis.glob("*.py")):
        text = path.read_text()
        assert "import argparse" not in text and "def main(" not in text, path.name
