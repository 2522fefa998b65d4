"""Training from Python, as ``rs-lightning train`` does from the shell:

    import rs_lightning

    agent = rs_lightning.train(["env=risky_transitions", "risk=cvar", "debug=quick"],
                               run_dir="outputs/runs/cvar")
    agent = rs_lightning.train({"agent": "tqc", "env": "pendulum", "learning.lr": 3e-4})
    agent.act(observations); agent.distribution(observations); agent.evaluate(episodes=1000)

The overrides are the command line's (``key=value``, ``group=option``), or a mapping of the
same; ``config_dir`` adds a folder of your own presets (``hydra.searchpath``, see
docs/guides/own-project.md). The config is composed from the installed ``conf/``, checked by
the same validation, and trained by the same job as the command line's: a finished run
folder is not trained again, an interrupted one resumes. Bad input raises
``rs_lightning.errors.ConfigError`` (the command line's one line: ``str(error)``) before
anything is written; a NaN in training ``rs_lightning.errors.NumericalFault``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rs_lightning.analysis.api import TrainedAgent, load_agent
from rs_lightning.errors import ConfigError


def train(overrides: Sequence[str] | Mapping[str, Any] = (), run_dir: str | Path | None = None,
          config_dir: str | Path | None = None) -> TrainedAgent | list[TrainedAgent]:
    """Train one run and return its agent (with ``parallel_seeds`` K > 1, the K members'
    agents, seed by seed). ``run_dir``: the run's folder (default
    ``outputs/runs/<date>_<time>`` under the current folder)."""
    from rs_lightning.app.jobs import skip_resume_or_run

    cfg = compose(overrides, config_dir)
    folder = Path(run_dir) if run_dir is not None else (
        Path("outputs") / "runs" / datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    summary = skip_resume_or_run(cfg, folder)
    if "members" in summary:
        return [load_agent(folder / f"seed_{seed}") for seed in summary["members"]]
    return load_agent(folder)


def override_list(overrides: Sequence[str] | Mapping[str, Any]) -> list[str]:
    """``key=value`` overrides from a list of them or a mapping ``{key: value}``."""
    if isinstance(overrides, str):
        raise ConfigError("overrides", f"a list of key=value strings or a mapping, got the "
                                       f"string {overrides!r} (write [{overrides!r}])")
    if isinstance(overrides, Mapping):
        return [f"{key}={_hydra_value(value)}" for key, value in overrides.items()]
    return [str(override) for override in overrides]


def _hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def compose(overrides: Sequence[str] | Mapping[str, Any] = (),
            config_dir: str | Path | None = None):
    """The config ``rs-lightning train <overrides>`` would run (one job: no ``-m``), with
    the command line's checks and one-line errors (ConfigError)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    from rs_lightning.app.cli import check_group_files, check_overrides, describe_hydra_error
    from rs_lightning.app.run_names import register_resolvers as register_folder_resolvers
    from rs_lightning.config import CONF_DIR
    from rs_lightning.config.derived_defaults import register_resolvers

    register_resolvers()
    register_folder_resolvers()
    given = override_list(overrides)
    if config_dir is not None:
        folder = Path(config_dir).resolve()
        if not folder.is_dir():
            raise ConfigError("config_dir", f"{folder} is not a folder")
        given.append(f"hydra.searchpath=[file://{folder}]")
    check_overrides(given)
    check_group_files(given, CONF_DIR)
    try:
        with initialize_config_module("rs_lightning.conf", version_base="1.3"):
            return hydra_compose("train", overrides=given)
    except Exception as error:  # Hydra's and OmegaConf's errors, reworded as the CLI's
        raise describe_hydra_error(error) from None
