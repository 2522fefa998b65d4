"""The command line around Hydra: every input error is one line and exit status 2.

Hydra reports its own errors (an unknown config group option, a malformed override, an
unknown key) with its config search path or a stripped traceback. Here they are caught and
reworded as ``Error in config: <key>: <what is allowed>``, like the schema's errors. Errors
of a job itself are handled by the job (rs_lightning.jobs.run_job), so whatever reaches this
wrapper happened before any job started.

``HYDRA_FULL_ERROR=1`` in the environment keeps Hydra's full report.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable

from rs_lightning.errors import EXIT_BAD_INPUT, ConfigError

_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


def command_line_overrides(argv: list[str]) -> list[str]:
    """The overrides among ``argv`` (Hydra's own argument parser tells flags from them)."""
    try:
        from hydra._internal.utils import get_args_parser
    except ImportError:  # a Hydra without it: leave the overrides to Hydra's own errors
        return []
    known, _ = get_args_parser().parse_known_args(argv)
    return list(known.overrides or [])


def check_overrides(overrides: list[str]) -> None:
    """ConfigError naming the first malformed override (``=3``, ``alpha==1``, ``alpha=[1``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if "=" in override and not key:
            raise ConfigError(f"override {override!r}", "has no key; write key=value, e.g. alpha=0.3")
        try:
            parser.parse_overrides([override])
        except OverrideParseException as error:
            lines = [line for line in str(error).splitlines() if line.strip()]
            detail = next((line for line in lines if not line.startswith(("Error parsing", "See "))),
                          "")
            detail = detail.split(" expecting ")[0]
            raise ConfigError(
                f"override {override!r}",
                f"is malformed ({detail}); write key=value, see {_GRAMMAR}",
            ) from None


def describe_hydra_error(error: BaseException) -> ConfigError:
    """A Hydra or OmegaConf composition error as a ConfigError naming the key or option."""
    from hydra.errors import MissingConfigException

    if isinstance(error, ConfigError):
        return error
    text = str(error).strip()
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, option = str(error.missing_cfg_file).rpartition("/")
        if group and error.options:
            return ConfigError(group, f"no option {option!r}; allowed: {', '.join(error.options)}")
        return ConfigError(str(error.missing_cfg_file), "config file not found")
    unknown = re.match(r"Could not override '([^']+)'", text)
    if unknown:
        key = unknown.group(1)
        return ConfigError(key, "unknown key (the keys are those of conf/train.yaml and its "
                                f"group files; +{key}=... adds a new one)")
    present = re.match(r"Could not append to config\. An item is already at '([^']+)'", text)
    if present:
        key = present.group(1)
        return ConfigError(key, f"already exists: write {key}=... without the +")
    if text.startswith("No trials are completed yet"):  # Optuna, when every trial failed
        return ConfigError("hydra.sweeper", "no trial of the study finished: every job failed "
                                            "(each job's failed.json in the sweep folder says why)")
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else ""
        return ConfigError("output folder", f"cannot write{where}: {error.strerror or error}")
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    return ConfigError("command line", first)


def run_command(hydra_main: Callable[[], Any], argv: list[str] | None = None) -> int:
    """Call a ``@hydra.main`` function; returns the exit status (bad input: 2)."""
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        hydra_main()
        return 0
    try:
        check_overrides(command_line_overrides(argv))
    except ConfigError as error:
        print(f"Error in config: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # Hydra re-raises what it would otherwise print with its search path or a traceback.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        hydra_main()
    except Exception as error:  # jobs handle their own errors: this is Hydra's stage
        print(f"Error in config: {describe_hydra_error(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)
    return 0
