"""What a run optimises, one plug-in each (:mod:`rs_lightning.objectives.base`).

- ``per_decision``: the paper's utility of the return from each state on;
- ``conditioned``: the same for every risk setting, with one network that sees the setting;
- ``static``: the utility of the whole episode's return, on the augmented state.
"""

from rs_lightning.objectives import conditioned, per_decision, static  # noqa: F401 (registers)
from rs_lightning.objectives.base import (
    OBJECTIVES,
    BatchState,
    EpisodeState,
    Objective,
    register_objective,
)

__all__ = ["OBJECTIVES", "BatchState", "EpisodeState", "Objective", "register_objective"]
