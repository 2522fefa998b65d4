"""rs_lightning: risk-sensitive distributional reinforcement learning.

The packages are the layers (docs/architecture.md): ``risk``, ``objectives``, ``agents``,
``envs`` and ``references`` (the core), ``engine`` and ``config``, ``analysis``, ``app``.
Importing this package runs nothing but the registration of the finder below;
``rs_lightning.load_agent`` and ``rs_lightning.load_runs`` (the Python API of trained agents,
:mod:`rs_lightning.analysis.api`) are imported when first used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _installed_version

try:  # one source: the version in pyproject.toml, as installed
    __version__ = _installed_version("rs-lightning")
except _NotInstalled:  # src/ put on the path by hand
    __version__ = "unknown"

# The Python API of trained agents (rs_lightning.analysis.api), imported on first use so
# that importing the package stays light.
API = ("load_agent", "load_runs", "TrainedAgent", "ActionLaws")


def __getattr__(name: str):
    if name == "train":  # training from Python (rs_lightning.app.train_api)
        from rs_lightning.app.train_api import train

        return train
    if name in API:
        from rs_lightning.analysis import api

        return getattr(api, name)
    raise AttributeError(f"module 'rs_lightning' has no attribute {name!r}")

# `python -m rs_lightning.<tool>`, the form docs/reference/cli.md names beside each tool, keeps working now
# that they live in packages: the old name runs the tool's command line
# (rs_lightning.app.commands.<tool>) and imports what it computes (the same module object as
# rs_lightning.analysis.<tool>). The one place of this compatibility.
MOVED_TOOLS = {
    f"rs_lightning.{name}": f"rs_lightning.analysis.{name}"
    for name in ("evaluation", "frontier", "results", "report", "plots", "gym_results")
}


class MovedTools(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname not in MOVED_TOOLS:
            return None
        moved = importlib.util.find_spec(MOVED_TOOLS[fullname])
        return importlib.util.spec_from_loader(fullname, self, origin=moved.origin)

    def create_module(self, spec):
        module = importlib.import_module(MOVED_TOOLS[spec.name])
        self.own_spec = module.__spec__  # the import machinery sets the alias's next
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.own_spec

    def get_code(self, fullname):  # what `python -m` runs
        moved = importlib.util.find_spec(fullname.replace("rs_lightning.", "rs_lightning.app.commands."))
        return moved.loader.get_code(moved.name)


if not any(type(finder).__name__ == "MovedTools" for finder in sys.meta_path):
    sys.meta_path.append(MovedTools())
