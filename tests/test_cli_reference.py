"""The command-line reference page is generated from the tools' own parsers, and current."""

from __future__ import annotations

from rs_lightning.app.cli_reference import PAGE, main, render, subcommands, tool_parser
from rs_lightning.app.console import TOOLS
from tests.conftest import ROOT


def test_the_committed_page_is_what_the_parsers_give():
    # Stale after a change to a tool's options: run `rs-lightning cli-reference` and commit
    # docs/reference/cli.md.
    page = render()
    assert (ROOT / PAGE).read_text() == page
    assert main(["--check", "--out", str(ROOT / PAGE)]) == 0


def test_every_tool_and_subcommand_has_its_section_and_options():
    page = render()
    for name in TOOLS:
        if name == "train":  # Hydra's own command line, described in the introduction
            assert "`rs-lightning train [overrides]`" in page
            continue
        assert f"## rs-lightning {name}\n" in page
        tool = tool_parser(name)
        assert tool.prog == f"rs-lightning {name}"
        for option in (o for a in tool._actions for o in a.option_strings):
            assert option in page, (name, option)
    assert set(subcommands(tool_parser("plots"))) == {"distributions", "curves", "policy"}
    assert "### rs-lightning plots curves" in page and "--metrics" in page
    assert "/work/" not in page and "/home/" not in page  # no machine's paths


def test_a_stale_page_is_refused(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text(render().replace("--episodes", "--n-episodes"))
    assert main(["--check", "--out", str(stale)]) == 1
