"""The paper's grid worlds, registered with gymnasium under the ``rs_lightning/`` namespace.

``gymnasium.make(GRID_WORLDS["risky_grid_world"], trap_terminal=True)`` passes keyword
arguments to the class. No ``max_episode_steps`` is registered: each environment applies its
own 10-step limit and chooses between the authors' and gymnasium's timeout conventions
(``timeout_is_terminal``), which a TimeLimit wrapper would override.
"""

from gymnasium.envs.registration import register, registry

from rs_lightning.envs.grid_worlds import (
    ACTION_NAMES,
    CELLS,
    START,
    GridWorld,
    Outcome,
    RiskyGridWorld,
    RiskyRewards,
    RiskyTransitions,
    TwoStage,
)

# Short names (config keys) -> gymnasium ids.
GRID_WORLDS: dict[str, str] = {
    "risky_rewards": "rs_lightning/RiskyRewards-v0",
    "risky_transitions": "rs_lightning/RiskyTransitions-v0",
    "risky_grid_world": "rs_lightning/RiskyGridWorld-v0",
}

# Grid worlds beyond the paper's three, for exact references (envs/exact_policies.py).
# GRID_WORLDS stays the paper's: the results tables and the paper reproduction iterate on it.
OTHER_GRID_WORLDS: dict[str, str] = {
    "two_stage": "rs_lightning/TwoStage-v0",
}

_ENTRY_POINTS = {
    "rs_lightning/RiskyRewards-v0": "rs_lightning.envs.grid_worlds:RiskyRewards",
    "rs_lightning/RiskyTransitions-v0": "rs_lightning.envs.grid_worlds:RiskyTransitions",
    "rs_lightning/RiskyGridWorld-v0": "rs_lightning.envs.grid_worlds:RiskyGridWorld",
    "rs_lightning/TwoStage-v0": "rs_lightning.envs.grid_worlds:TwoStage",
    # gymnasium's CliffWalking-v1 with a chosen slip probability (envs/cliff_walking.py).
    "rs_lightning/SlipperyCliffWalking-v0": "rs_lightning.envs.cliff_walking:SlipperyCliffWalking",
    # A point mass between a risky short cut and a safe detour (continuous actions,
    # envs/risky_navigation.py).
    "rs_lightning/RiskyNavigation-v0": "rs_lightning.envs.risky_navigation:RiskyNavigation",
    # Finite-horizon tabular benchmarks with time folded into the state: a position in a
    # mean-reverting price (envs/trading.py) and an American put (envs/american_put.py).
    "rs_lightning/Trading-v0": "rs_lightning.envs.trading:Trading",
    "rs_lightning/AmericanPut-v0": "rs_lightning.envs.american_put:AmericanPut",
}

# The registry is process-wide: a re-import (importlib.reload, test collection) must not
# register twice, which gymnasium would warn about.
for _env_id, _entry_point in _ENTRY_POINTS.items():
    if _env_id not in registry:
        register(id=_env_id, entry_point=_entry_point)

__all__ = [
    "ACTION_NAMES",
    "CELLS",
    "GRID_WORLDS",
    "OTHER_GRID_WORLDS",
    "START",
    "GridWorld",
    "Outcome",
    "RiskyGridWorld",
    "RiskyRewards",
    "RiskyTransitions",
    "TwoStage",
]
