"""rs_lightning: risk-sensitive distributional reinforcement learning.

The packages are the layers (docs/architecture.md): ``risk``, ``objectives``, ``agents``,
``envs`` and ``references`` (the core), ``engine`` and ``config``, ``analysis``, ``app``.
Importing this package reads its version and nothing else; ``rs_lightning.load_agent`` and
``rs_lightning.load_runs`` (the Python API of trained agents, :mod:`rs_lightning.analysis.api`)
are imported when first used. The tools are ``rs-lightning <tool>`` (or
``python -m rs_lightning <tool>``), their modules :mod:`rs_lightning.app.commands`.
"""

from __future__ import annotations

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
