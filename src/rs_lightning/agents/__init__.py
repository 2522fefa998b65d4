"""Distributional agents: one module each, registered by name (the ``agent=`` option).

Every module of this package is imported here, so an agent registers itself by existing (a
module of shared code, ``umnn`` or ``quantile_loss``, registers nothing and is merely imported).
"""

import importlib
import pkgutil

from rs_lightning.agents.base import (
    AGENTS,
    Agent,
    AgentConfig,
    Problem,
    Transitions,
    register_agent,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["AGENTS", "Agent", "AgentConfig", "Problem", "Transitions", "register_agent"]
