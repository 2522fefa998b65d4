"""Load a finished run (its resolved config and a checkpoint) for evaluation and figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from rs_lightning.config import CONF_DIR
from rs_lightning.config.schema import ValidatedConfig, validate
from rs_lightning.engine.build import build
from rs_lightning.engine.checkpoints import (
    DATAMODULE,
    module_state_dict,
    read_checkpoint,
)
from rs_lightning.engine.learner import MemberPolicy


@dataclass
class TrainedRun:
    run_config: ValidatedConfig
    module: MemberPolicy  # the run's agent, utility and greedy policy
    run_dir: Path
    steps: int  # gradient updates the checkpoint had made
    env_steps: int


# Sections whose keys are the same for every choice of agent, risk and env: a run recorded by
# an earlier version may lack keys added since, which take today's defaults.
_SHARED_SECTIONS = ("learning", "evaluation", "fault_injection", "limits", "plugins")


def with_current_defaults(cfg):
    """A run's recorded config with the keys added since it ran filled in from ``conf/``
    (never changing a value the run recorded). Runs outside a source checkout are returned
    as they are."""
    train_yaml = CONF_DIR / "train.yaml"
    if not train_yaml.is_file():
        return cfg
    current = OmegaConf.load(train_yaml)
    base = OmegaConf.create({k: current[k] for k in _SHARED_SECTIONS if k in current})
    backend = OmegaConf.select(cfg, "logger.backend")
    logger_yaml = CONF_DIR / "logger" / f"{backend}.yaml"
    if backend and logger_yaml.is_file():
        base.logger = OmegaConf.load(logger_yaml)
    return OmegaConf.merge(base, cfg)


def load_run(run_dir: Path, checkpoint: str = "checkpoints/last.ckpt") -> TrainedRun:
    """Rebuild a single-seed run's agent from its ``config.yaml`` and load its checkpoint
    (each seed of a several-seed run is one: ``<run>/seed_<s>/``)."""
    run_dir = Path(run_dir)
    for needed in ("config.yaml", checkpoint):
        if not (run_dir / needed).is_file():
            raise FileNotFoundError(f"{run_dir / needed} not found: is this a run folder?")
    run_config = validate(with_current_defaults(OmegaConf.load(run_dir / "config.yaml")))
    _, module = build(run_config)
    state = read_checkpoint(run_dir / checkpoint, "checkpoint")
    module.load_state_dict(module_state_dict(state["state_dict"]))
    module.eval()
    datamodule_state = state.get(DATAMODULE)
    env_steps = datamodule_state["collector"]["env_steps"] if datamodule_state else -1
    return TrainedRun(run_config, module.member(0), run_dir, int(state["global_step"]),
                      int(env_steps))
