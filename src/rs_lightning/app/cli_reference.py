"""The command-line reference, generated: the ``--help`` of ``rs-lightning`` and of each of
its tools (and of their subcommands), as one Markdown page.

    rs-lightning cli-reference            # writes docs/reference/cli.md
    rs-lightning cli-reference --check    # exit 1 if that page is stale

Nothing on the page is written by hand but its opening paragraphs: each tool's section is
the help its own argparse parser prints, taken from the parser the tool builds (its
``main`` is called until it parses, and stopped there), at a fixed width of 80 columns, so
the page and ``--help`` say the same. ``tests/test_cli_reference.py`` fails when the page is
stale.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from pathlib import Path

from rs_lightning.app.config_reference import write_or_check

# The page, in the repository's checkout (the folder the command runs in).
PAGE = Path("docs") / "reference" / "cli.md"
WIDTH = "80"

INTRO = """\
# Command-line tools

Training is `rs-lightning train [overrides]` (in the repository, `python train.py
[overrides]` is the same command), Hydra's command line: every key of the
[configuration reference](config.md) is an override (`key=value`), `-m` makes a multirun
(a sweep) of comma-separated values, `--config-dir DIR` adds a folder of your own presets,
and `--help` lists the config groups. Everything that reads finished runs is a command of
the same `rs-lightning TOOL`; `python -m rs_lightning TOOL` runs the same command.

This page is generated from the tools' own parsers by `rs-lightning cli-reference` (a test
fails when it is stale): what follows is exactly what `--help` prints.
"""


class _Parsed(Exception):
    """Raised in place of parsing: carries the parser a tool built."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


@contextlib.contextmanager
def _fixed_width():
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


def tool_parser(name: str) -> argparse.ArgumentParser:
    """The parser that ``rs-lightning <name>`` builds, caught as it starts parsing."""
    from rs_lightning.app.console import TOOLS

    module = importlib.import_module(TOOLS[name][0])
    original, program = argparse.ArgumentParser.parse_args, sys.argv[0]

    def caught(self, *args, **kwargs):
        raise _Parsed(self)

    argparse.ArgumentParser.parse_args = caught
    sys.argv[0] = f"rs-lightning {name}"
    try:
        module.main([])
    except _Parsed as parsed:
        return parsed.parser
    finally:
        argparse.ArgumentParser.parse_args = original
        sys.argv[0] = program
    raise RuntimeError(f"rs-lightning {name} built no argparse parser")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


def render() -> str:
    from rs_lightning.app.console import TOOLS, parser

    with _fixed_width():
        parts = [INTRO, "## rs-lightning\n", "```text", _help(parser()), "```\n"]
        for name, (_, summary) in TOOLS.items():
            if name == "train":  # Hydra's command line, above
                continue
            tool = tool_parser(name)
            lead = f"{summary[0].upper()}{summary[1:]}.\n"
            parts += [f"## rs-lightning {name}\n", lead, "```text", _help(tool), "```\n"]
            for sub, sub_parser in subcommands(tool).items():
                parts += [f"### rs-lightning {name} {sub}\n", "```text", _help(sub_parser),
                          "```\n"]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1, writing nothing, if the page is not what the parsers give")
    parser.add_argument("--out", type=Path, default=PAGE,
                        help="the page (default docs/reference/cli.md)")
    args = parser.parse_args(argv)
    return write_or_check(render(), args.out, args.check, "cli-reference")


if __name__ == "__main__":
    raise SystemExit(main())
