"""``rs-lightning``: the command line of training (``rs-lightning train``, Hydra's command
line) and of the tools that read runs (``rs-lightning benchmark`` launches one multirun of
training and ranks the runs).

    rs-lightning --help                 # the tools
    rs-lightning --version
    rs-lightning train debug=quick      # a complete run in seconds, into ./outputs/
    rs-lightning evaluate --help        # one tool's options
    rs-lightning results outputs/multirun/<sweep>

Each tool is a module of :mod:`rs_lightning.app.commands` with a ``main(argv)`` (the
command line) over a module of :mod:`rs_lightning.analysis` of the same name (what it
computes); ``python -m rs_lightning <tool>`` is the same command line.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rs_lightning import __version__
from rs_lightning.app.signals import Stopped, stop_on_signals
from rs_lightning.errors import EXIT_BAD_INPUT, ConfigError
from rs_lightning.files import os_error_line

# tool -> (the module whose main(argv) runs it, what it does)
TOOLS = {
    "train": ("rs_lightning.app.commands.train",
              "train: Hydra's command line (key=value overrides, -m for a multirun, "
              "--config-dir for presets of your own)"),
    "evaluate": ("rs_lightning.app.commands.evaluation",
                 "re-evaluate finished runs, or evaluate them at another alpha and rho"),
    "record": ("rs_lightning.app.commands.record",
               "a GIF or MP4 of a finished run's greedy policy, at its setting or another"),
    "frontier": ("rs_lightning.app.commands.frontier",
                 "evaluate runs at a grid of alphas: the E-against-risk frontier"),
    "results": ("rs_lightning.app.commands.results",
                "a sweep's results table beside the paper's numbers"),
    "report": ("rs_lightning.app.commands.report",
               "a sweep's report: table, figures, HTML page, W&B run and report"),
    "plots": ("rs_lightning.app.commands.plots",
              "figures: learned return distributions, learning curves, a grid policy"),
    "gym-results": ("rs_lightning.app.commands.gym_results",
                    "gymnasium results: time to a return, the alpha trade-off, visit maps"),
    "benchmark": ("rs_lightning.app.commands.benchmark",
                  "train the risk-sensitive benchmark suite (one multirun) and rank it"),
    "config-reference": ("rs_lightning.app.config_reference",
                         "write the config reference (docs/reference/config.md), or --check it"),
    "cli-reference": ("rs_lightning.app.cli_reference",
                      "write this command-line reference (docs/reference/cli.md), or --check it"),
}


def parser() -> argparse.ArgumentParser:
    tools = argparse.ArgumentParser(
        prog="rs-lightning",
        description="Train risk-sensitive distributional agents and read their runs.",
        epilog="Run 'rs-lightning TOOL --help' for a tool's options.")
    tools.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = tools.add_subparsers(dest="tool", metavar="TOOL", required=True)
    for name, (_, summary) in TOOLS.items():
        # The tool parses its own arguments (and answers its own --help).
        commands.add_parser(name, help=summary, add_help=False)
    return tools


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TOOLS:  # --help, --version, or no known tool
        parser().parse_args(argv)  # the list of tools, or one line naming the allowed ones
        return 2
    name, rest = argv[0], argv[1:]
    # The tool's own parser names itself as the user typed it.
    program = sys.argv[0]
    sys.argv[0] = f"rs-lightning {name}"
    try:
        with stop_on_signals():  # importing a tool takes seconds: a signal then stops it too
            module = importlib.import_module(TOOLS[name][0])
            return int(module.main(rest) or 0)
    except Stopped as stop:
        print(f"Stopped by {stop.name}: rs-lightning {name} ended before it finished; the "
              "same command does the work again", file=sys.stderr)
        return stop.status
    except ConfigError as error:  # a file the tool read, such as a run of a newer format
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # a full disk, a read-only or blocked output folder
        print(f"error: {os_error_line(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        sys.argv[0] = program


if __name__ == "__main__":
    raise SystemExit(main())
