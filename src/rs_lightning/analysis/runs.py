"""Load a finished run (its resolved config and a checkpoint) for evaluation and figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rs_lightning.agents import AGENTS
from rs_lightning.config.migrations import migrate_checkpoint, read_run_config
from rs_lightning.config.schema import ValidatedConfig, validate
from rs_lightning.engine.build import build
from rs_lightning.engine.checkpoints import (
    DATAMODULE,
    checkpoint_agent,
    read_checkpoint,
)
from rs_lightning.engine.learner import MemberPolicy
from rs_lightning.errors import ConfigError


@dataclass
class TrainedRun:
    run_config: ValidatedConfig
    module: MemberPolicy  # the run's agent, utility and greedy policy
    run_dir: Path
    steps: int  # gradient updates the checkpoint had made
    env_steps: int


def check_fits(state: dict, path: Path, run_config: ValidatedConfig) -> None:
    """ConfigError in one line unless the checkpoint ``state`` was written by the agent and
    on the environment of ``run_config`` (a checkpoint copied from another run)."""
    agent, env = run_config.agent.name, run_config.train.env.id
    written_by = checkpoint_agent(state)
    if written_by not in (agent, "?") and written_by != AGENTS[agent][0].__name__:
        raise ConfigError(str(path), f"was written by agent {written_by}, and the run's "
                          f"config.yaml is agent={agent}: a checkpoint of another run?")
    written_on = (state.get(DATAMODULE) or {}).get("env_id")
    if written_on is not None and written_on != env:
        raise ConfigError(str(path), f"was written on env {written_on}, and the run's "
                          f"config.yaml is on {env}: a checkpoint of another run?")


def load_run(run_dir: Path, checkpoint: str = "checkpoints/last.ckpt") -> TrainedRun:
    """Rebuild a single-seed run's agent from its ``config.yaml`` and load its checkpoint
    (each seed of a several-seed run is one: ``<run>/seed_<s>/``)."""
    run_dir = Path(run_dir)
    for needed in ("config.yaml", checkpoint):
        if not (run_dir / needed).is_file():
            raise FileNotFoundError(f"{run_dir / needed} not found: is this a run folder?")
    run_config = validate(read_run_config(run_dir))
    _, module = build(run_config)
    state = migrate_checkpoint(read_checkpoint(run_dir / checkpoint, "checkpoint"),
                               run_config.train.env.gamma, str(run_dir / checkpoint))
    check_fits(state, run_dir / checkpoint, run_config)
    try:
        module.load_state_dict(state["state_dict"])
    except RuntimeError as error:  # torch lists every mismatched tensor: name the first
        details = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        raise ConfigError(str(run_dir / checkpoint), "does not fit the network of the run's "
                          f"config.yaml ({(details or [str(error)])[0][:200]}): a checkpoint "
                          "of another run?") from None
    module.eval()
    env_steps = state[DATAMODULE]["collector"]["env_steps"]
    return TrainedRun(run_config, module.member(0), run_dir, int(state["global_step"]),
                      int(env_steps))
