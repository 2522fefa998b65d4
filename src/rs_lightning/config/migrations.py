"""The format of run folders and checkpoints, and one step per older format to the current.

A run records its format as ``format_version`` at the top of its ``config.yaml``, and every
checkpoint as ``checkpoint["rs_lightning"]["format_version"]``. What reads a run (a resume,
``load_agent``, ``evaluate``, ``frontier``, ``results``, ``report``) reads it through
:func:`read_run_config` and :func:`migrate_checkpoint`, which apply the steps from the
recorded format to :data:`FORMAT_VERSION`: step n turns format n into n + 1, adding the keys
format n did not have with the values that meant what the run did, and renaming what
moved. The schema and the engine then read every key as the current format writes it.

Formats:

1. rs-lightning 0.1 and the versions before it: the module's weights named ``agent.*``;
   keys added since absent from ``config.yaml``.
2. 0.2 up to the versions that recorded no format: weights named ``members.*``; no
   ``plugins``, ``learning.target_update_rate`` or DSAC's ``agent.actor_law``.
3. ``format_version: 3``, recorded.
4. ``trainer.checkpoint_every_minutes`` (checkpoints on a wall-clock period; none before).
5. ``logger.video`` (the final evaluation's episode video in W&B and TensorBoard; none before);
   ``env.backend`` (gymnasium: the only one before).
6. ``learning.lr_schedule`` (a constant learning rate before).

A file without a recorded format is read as format 1: the steps add only keys that are
absent and rename only names that are present, so a file written by 0.2 passes step 1
unchanged. A format newer than this version knows is refused with :class:`NewerFormat`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from rs_lightning.agents import AGENTS
from rs_lightning.errors import ConfigError

FORMAT_VERSION = 6
FORMAT_KEY = "format_version"
UNRECORDED_FORMAT = 1  # the oldest format: every step brings what a file of it lacks

# Lightning files a datamodule's state under its class name.
DATAMODULE = "ExperienceDataModule"


class NewerFormat(ConfigError):
    """A run folder or checkpoint written by a newer rs-lightning than this one."""


def _format_of(recorded: Any, source: str) -> int:
    version = UNRECORDED_FORMAT if recorded is None else recorded
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ConfigError(source, f"{FORMAT_KEY} must be a positive integer, got {recorded!r}")
    if version > FORMAT_VERSION:
        raise NewerFormat(source, f"was written in format {version} by a newer rs-lightning; "
                          f"this version reads formats up to {FORMAT_VERSION}: upgrade "
                          "rs-lightning to read it")
    return version


def _fill(section: dict, values: dict[str, Any]) -> None:
    """Add the ``values`` a section lacks (never changing one it has)."""
    for key, value in values.items():
        section.setdefault(key, copy.deepcopy(value))


# ----------------------------------------------------------------- run configs
def _config_1_to_2(config: dict) -> None:
    # The sweeper's target was called ``objective`` before ``objective`` named what the
    # agent optimises.
    if isinstance(config.get("objective"), dict):
        config["search_objective"] = config.pop("objective")
    _fill(config, {
        "parallel_seeds": 1,
        "objective": "per_decision",
        "static_objective": {"uniform_share": 0.5, "thresholds": 49},
        "search_objective": {"metric": "utility", "evaluation": "final"},
        "network": {"name": "mlp", "channels": [], "kernel_size": 3, "stride": 1,
                    "layout": "channels_last"},
        "risk_conditioning": {"draw": "uniform", "alpha": [0.0, 1.0], "rho": [0.05, 0.5],
                              "n_cosines": 8, "acting": "episode"},
        "fault_injection": {"nan_loss_at_step": None, "nan_parameters_at_step": None},
        "limits": {"lattice_nodes": 1000, "memory_fraction": 0.8},
    })
    _fill(config["risk_conditioning"], {"settings_per_batch": None})
    _fill(config.setdefault("env", {}), {"reward_scale": 1.0, "max_episode_steps": None,
                                         "observation_normalization": "none", "num_envs": 1})
    _fill(config.setdefault("learning", {}), {"on_non_finite": "stop", "updates_per_step": 1.0,
                                              "n_step": 1})
    _fill(config.setdefault("trainer", {}), {"stop_at_return": None, "max_time": None})
    _fill(config.setdefault("logger", {}), {"online_timeout": 30})
    _fill(config.setdefault("agent", {}), {"risk_conditioned": False})


def _config_2_to_3(config: dict) -> None:
    _fill(config, {"plugins": []})
    _fill(config.setdefault("learning", {}), {"target_update_rate": 1.0})
    agent = config.setdefault("agent", {})
    if agent.get("name") == "dsac":
        _fill(agent, {"actor_law": "pessimistic"})


def _config_3_to_4(config: dict) -> None:
    _fill(config.setdefault("trainer", {}), {"checkpoint_every_minutes": 0})


def _config_4_to_5(config: dict) -> None:
    _fill(config.setdefault("logger", {}), {"video": False})
    _fill(config.setdefault("env", {}), {"backend": "gymnasium"})


def _config_5_to_6(config: dict) -> None:
    _fill(config.setdefault("learning", {}), {"lr_schedule": "constant"})


# ----------------------------------------------------------------- checkpoints
_RENAMED_WEIGHTS = (("target_agent.", "target_members."), ("agent.", "members."))


def _checkpoint_1_to_2(state: dict, gamma: float) -> None:
    weights = {}
    for key, value in state["state_dict"].items():
        for old, new in _RENAMED_WEIGHTS:
            if key.startswith(old):
                key = new + key[len(old):]
                break
        weights[key] = value
    state["state_dict"] = weights
    ours = state["rs_lightning"]
    if "agent" not in ours:  # the class name only: the registry's name for it
        ours["agent"] = next((name for name, (cls, _) in AGENTS.items()
                              if cls.__name__ == ours.get("agent_class")), "?")
    if "episodes" in ours:
        _fill(ours, {"window_returns": [[] for _ in ours["episodes"]],
                     "window_outcomes": [[] for _ in ours["episodes"]]})
    if "EnvDataModule" in state:  # the datamodule's class before the one engine
        state.setdefault(DATAMODULE, state.pop("EnvDataModule"))
    collector = state.get(DATAMODULE, {}).get("collector")
    if collector is None:
        return
    if "pending_updates" in collector:
        # The transitions not yet matched by an update: the update credit it became.
        collector.setdefault("update_credit", collector.pop("pending_updates"))
    _fill(collector, {"n_step": 1, "updates_per_step": [1, 1]})
    replay = collector.get("replay")
    if replay is not None and "discount" not in replay:
        # One-step transitions: a termination stops bootstrapping, else gamma discounts.
        replay["discount"] = (1.0 - replay["terminated"]) * gamma


def _checkpoint_2_to_3(state: dict, gamma: float) -> None:
    """Format 3 changed no checkpoint field; it records the version."""


def _checkpoint_3_to_4(state: dict, gamma: float) -> None:
    """Format 4 changed no checkpoint field."""


def _checkpoint_4_to_5(state: dict, gamma: float) -> None:
    """Format 5 changed no checkpoint field."""


def _checkpoint_5_to_6(state: dict, gamma: float) -> None:
    """Format 6 changed no checkpoint field."""


# The step from each older format n to n + 1: (config step, checkpoint step).
STEPS: dict[int, tuple[Callable[[dict], None], Callable[[dict, float], None]]] = {
    1: (_config_1_to_2, _checkpoint_1_to_2),
    2: (_config_2_to_3, _checkpoint_2_to_3),
    3: (_config_3_to_4, _checkpoint_3_to_4),
    4: (_config_4_to_5, _checkpoint_4_to_5),
    5: (_config_5_to_6, _checkpoint_5_to_6),
}


def migrate_config(config: dict[str, Any], source: str = "config.yaml") -> dict[str, Any]:
    """A run's recorded config (a plain mapping) in the current format, without its
    ``format_version``. ``source`` names the file in errors."""
    config = copy.deepcopy(dict(config))
    version = _format_of(config.pop(FORMAT_KEY, None), source)
    for step in range(version, FORMAT_VERSION):
        STEPS[step][0](config)
    return config


def read_run_config(path: Path | str) -> DictConfig:
    """The ``config.yaml`` at ``path`` (a file, or a run folder holding one) in the current
    format; :class:`NewerFormat` for a run of a newer version."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.yaml"
    if path.is_symlink() or not path.is_file():
        raise ConfigError(str(path), "not a regular file (a run writes its own)")
    try:
        # OmegaConf's loader is a safe one: a tag (!!python/...) is refused, not run.
        loaded = OmegaConf.load(path)
    except Exception as error:  # YAML, decoding and OS errors alike: name the file
        first = str(error).strip().splitlines()[0][:120] if str(error).strip() else ""
        raise ConfigError(str(path), f"not a readable config ({type(error).__name__}: "
                          f"{first})") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(str(path), "holds a list, not a run's config")
    missing = [key for key in ("env", "agent") if key not in loaded]
    if missing:
        raise ConfigError(str(path), "empty, not a run's config" if not loaded else
                          f"not a run's config (no {' or '.join(missing)} section)")
    return OmegaConf.create(migrate_config(OmegaConf.to_container(loaded), str(path)))


def run_config_yaml(cfg: DictConfig) -> str:
    """What a run writes as its ``config.yaml``: ``cfg`` resolved, its format first."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return OmegaConf.to_yaml(OmegaConf.create({FORMAT_KEY: FORMAT_VERSION, **resolved}))


def checkpoint_format(state: dict[str, Any], source: str = "checkpoint") -> int:
    """The format ``state`` was written in (NewerFormat past this version's)."""
    return _format_of(state.get("rs_lightning", {}).get(FORMAT_KEY), source)


def migrate_checkpoint(state: dict[str, Any], gamma: float, source: str = "checkpoint"
                       ) -> dict[str, Any]:
    """A checkpoint's content in the current format (changed in place and returned).
    ``gamma``: the run's ``env.gamma``, the discount of the transitions in a replay memory
    that did not store one."""
    version = checkpoint_format(state, source)
    for step in range(version, FORMAT_VERSION):
        STEPS[step][1](state, gamma)
    state["rs_lightning"][FORMAT_KEY] = FORMAT_VERSION
    return state
