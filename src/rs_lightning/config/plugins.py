"""A project's own components, registered from its own modules: ``plugins: [my_components]``
in a config (an experiment preset of the project's config folder, or ``+plugins=[...]`` on the
command line; conf/train.yaml lists none).

Each module is imported before the config is checked, so what it registers when imported is
known to the checks, to training and to every tool that reads the run (its config.yaml lists
the plugins, which are imported again there): an agent (``register_agent``), a risk measure
(``risk_measure``), an objective (``register_objective``), a gymnasium environment
(``gymnasium.register``; with ``unwrapped.P`` and ``initial_state_distrib`` its exact
references are computed as for the built-in tabular worlds). A module is found as Python
finds it (installed, or on ``PYTHONPATH``), or else in the folder the command runs in.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from typing import Any

from rs_lightning.errors import ConfigError

KEY = "plugins"


def import_plugins(names: Any) -> None:
    """Import the modules ``names`` (None or [] : nothing); ConfigError naming ``plugins`` for
    a value that is not a list of module names, a module not found, or one that fails."""
    if names is None:
        return
    if isinstance(names, str) or not all(isinstance(n, str) and n.strip() for n in names):
        raise ConfigError(KEY, f"must be a list of module names, e.g. [my_components], got "
                               f"{list(names) if not isinstance(names, str) else names!r}")
    for name in names:
        _import(name.strip())


def _import(name: str) -> None:
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)  # the project's folder, as `python -m` would see it
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and (name == error.name or name.startswith(f"{error.name}.")):
            raise ConfigError(KEY, f"no module {name!r} (neither installed nor in {here}: run "
                                   "in the folder that holds it, or add it to PYTHONPATH)"
                              ) from None
        raise ConfigError(KEY, f"{name!r} failed on import: {_where(error)}") from None
    except Exception as error:  # the module's own code raised: name it, in one line
        raise ConfigError(KEY, f"{name!r} failed on import: {_where(error)}") from None


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    place = f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {error}{place}"
