"""The command line around Hydra: every input error is one line and exit status 2.

Hydra reports its own errors (an unknown config group option, a malformed override, an
unknown key) with its config search path or a stripped traceback. Here they are caught and
reworded as ``Error in config: <key>: <what is allowed>``, like the schema's errors. Errors
of a job itself are handled by the job (rs_lightning.app.jobs.run_job), so whatever reaches this
wrapper happened before any job started.

``HYDRA_FULL_ERROR=1`` in the environment keeps Hydra's full report.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
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


def _search_path(overrides: list[str], config_dir: Path | None) -> list[Path]:
    """The folders Hydra composes from: the primary config folder and the ``file://``
    entries of a ``hydra.searchpath=[...]`` override."""
    folders = [config_dir] if config_dir is not None else []
    for override in overrides:
        if override.startswith("hydra.searchpath="):
            entries = override.split("=", 1)[1].strip("[]").split(",")
            folders += [Path(e.strip().strip("'\"")[len("file://"):]) for e in entries
                        if e.strip().strip("'\"").startswith("file://")]
    return folders


def _group_choices(overrides: list[str]) -> dict[str, str]:
    """{group: option} of the overrides that choose one option of a config group."""
    chosen = {}
    for override in overrides:
        group, _, option = override.lstrip("+").partition("=")
        if option and "." not in group and not group.startswith("~") and "," not in option:
            chosen[group] = option
    return chosen


def check_group_files(overrides: list[str], config_dir: Path | None) -> None:
    """ConfigError naming a config group file chosen on the command line (``experiment=x``,
    ``env=y``) that is not a YAML mapping: not UTF-8 text, not YAML, or a list or a sentence
    where ``key: value`` lines belong (Hydra would fail without naming the file, or compose
    nothing from it). A group the chosen experiment sets that the command line sets
    otherwise is said in a warning (Hydra takes the command line's silently)."""
    chosen = _group_choices(overrides)
    for group, option in chosen.items():
        for folder in _search_path(overrides, config_dir):
            path = folder / group / f"{option}.yaml"
            if path.is_file():
                content = check_yaml_mapping(path)
                if group == "experiment":
                    _warn_replaced_groups(option, content or {}, chosen)
                break


def _warn_replaced_groups(experiment: str, content: dict, chosen: dict[str, str]) -> None:
    for entry in content.get("defaults") or []:
        if not isinstance(entry, dict):
            continue
        for key, preset in entry.items():
            group = str(key).removeprefix("override").strip().lstrip("/")
            if group in chosen and chosen[group] != str(preset):
                print(f"warning: {group}={chosen[group]} replaces the {group}={preset} of "
                      f"experiment={experiment}: the settings of {group}/{preset}.yaml give "
                      f"way to those of {group}/{chosen[group]}.yaml (the experiment's own "
                      f"{group}.<key> values still apply); leave out {group}= to keep them",
                      file=sys.stderr)


def check_yaml_mapping(path: Path) -> dict | None:
    import yaml

    try:
        content = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(str(path), f"is not a text file (not UTF-8 at byte {error.start})"
                          ) from None
    except yaml.YAMLError as error:
        raise yaml_error(error, path) from None
    if content is not None and not isinstance(content, dict):
        raise ConfigError(str(path), f"must hold `key: value` lines (a YAML mapping), got a "
                          f"{type(content).__name__}: {str(content)[:60]!r}")
    return content


def yaml_error(error, path: Path | str | None = None) -> ConfigError:
    """A YAML syntax error as one line naming the file, the line and the problem."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    name = str(path) if path is not None else (mark.name if mark else "config file")
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = " ".join(filter(None, (getattr(error, "context", None),
                                     getattr(error, "problem", None)))) or str(error)
    return ConfigError(name, f"is not valid YAML ({where}{problem})")


def describe_hydra_error(error: BaseException) -> ConfigError:
    """A Hydra or OmegaConf composition error as a ConfigError naming the key or option."""
    import yaml
    from hydra.errors import MissingConfigException

    if isinstance(error, ConfigError):
        return error
    if isinstance(error, yaml.YAMLError):
        return yaml_error(error)
    text = str(error).strip()
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        group, _, option = str(error.missing_cfg_file).rpartition("/")
        if group and error.options:
            return ConfigError(group, f"no option {option!r}; allowed: {', '.join(error.options)}")
        return ConfigError(str(error.missing_cfg_file), "config file not found")
    config_dir = re.match(r"Additional config directory '([^']+)' not found", text)
    if config_dir:
        return ConfigError("--config-dir", f"{config_dir.group(1)} is not a folder (give the "
                                           "folder of your own presets)")
    unknown = re.match(r"Could not override '([^']+)'", text)
    if unknown:
        key = unknown.group(1)
        return ConfigError(key, "unknown key (the keys are those of conf/train.yaml and its "
                                f"group files; +{key}=... adds a new one)")
    # A comma list without -m: Hydra's hint to add --multirun is on the lines that follow.
    ambiguous = re.match(r"Ambiguous value for argument '([^'=]+)=(.*)'", text)
    if ambiguous:
        key, value = ambiguous.groups()
        return ConfigError(key, f"{value!r} is several values: add -m (--multirun) to run one "
                                f"job per value, or write {key}=[{value}] for a list")
    present = re.match(r"Could not append to config\. An item is already at '([^']+)'", text)
    if present:
        key = present.group(1)
        return ConfigError(key, f"already exists: write {key}=... without the +")
    merging = re.match(r"Error merging override ([^=\s]+)=(.*)", text)
    if merging and error.__cause__ is not None:
        from rs_lightning.config.schema import omegaconf_message

        cause = str(error.__cause__).strip().splitlines()[0]
        return ConfigError(merging.group(1), omegaconf_message(cause, merging.group(2)))
    if text.startswith("No trials are completed yet"):  # Optuna, when every trial failed
        return ConfigError("hydra.sweeper", "no trial of the study finished: every job failed "
                                            "(each job's failed.json in the sweep folder says why)")
    if isinstance(error, OSError):
        where = f" {error.filename}" if error.filename else ""
        return ConfigError("output folder", f"cannot write{where}: {error.strerror or error}")
    first = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
    return ConfigError("command line", first)


def run_command(hydra_main: Callable[[], Any], argv: list[str] | None = None,
                config_dir: Path | None = None) -> int:
    """Call a ``@hydra.main`` function; returns the exit status (bad input: 2).
    ``config_dir``: its config folder, whose group files chosen on the command line are
    checked first."""
    argv = sys.argv[1:] if argv is None else argv
    if not sys.stderr.isatty():
        # A log file or a pipe: no colour codes (Optuna's logger colours whatever its stream
        # is unless NO_COLOR is set, the common convention, which jobs inherit too).
        os.environ.setdefault("NO_COLOR", "1")
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        hydra_main()
        return 0
    try:
        overrides = command_line_overrides(argv)
        check_overrides(overrides)
        check_group_files(overrides, config_dir)
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
