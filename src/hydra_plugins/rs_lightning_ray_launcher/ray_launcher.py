"""``hydra/launcher=ray``: each job of a multirun as one Ray task.

Ray is the engine: it places the tasks on the CPUs / GPUs of a local Ray instance or of an
existing cluster, runs as many at once as the resources allow and retries a task whose worker
died (``ray.remote``'s ``max_retries``; the job then resumes from its last checkpoint). This
class only hands Ray one Hydra job per task and waits for them, like Hydra's own launchers.

The config (conf/hydra/launcher/ray.yaml) has the layout of the official hydra-ray-launcher:
``ray.init`` are the keyword arguments of ``ray.init`` (``address: null`` starts a local
instance, ``auto`` joins the cluster this machine belongs to) and ``ray.remote`` those of
``ray.remote`` (the resources of one job). That plugin is not used because it pins
``cloudpickle<3``, which forces joblib back to 1.5 and cloudpickle to 2.2 (see
docs/guides/scaling.md, "Ray").

It lives in the ``hydra_plugins`` namespace package because Hydra instantiates launchers only
from there. Importing it must stay cheap (Hydra imports every plugin at start-up): Ray is
imported when a sweep is launched.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

INSTALL_HINT = 'pip install torch==2.13.0 -e ".[cluster]"'


def _run_one(hydra_context: HydraContext, sweep_config: DictConfig,
             task_function: TaskFunction, singleton_state: dict[Any, Any]) -> JobReturn:
    """One job, in a Ray worker: Hydra's state as in the launching process, then the job."""
    setup_globals()
    Singleton.set_state(singleton_state)
    HydraConfig.instance().set_config(sweep_config)
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


def given(node: DictConfig | None) -> dict[str, Any]:
    """The keys of a config node that are set, as keyword arguments (null: Ray's default)."""
    if node is None:
        return {}
    return {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if v is not None}


class RayLauncher(Launcher):
    def __init__(self, ray: DictConfig) -> None:
        self.ray_cfg = ray
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        try:
            import ray
        except ImportError:
            from rs_lightning.errors import ConfigError

            raise ConfigError("hydra/launcher", f"ray is not installed; {INSTALL_HINT}") from None
        assert self.config is not None and self.hydra_context is not None
        assert self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)

        # Workers may start in another folder (or on another machine sharing the file
        # system): every job gets the sweep folder as an absolute path, resolved here so that
        # ${now:...} in it is the time of this sweep.
        sweep_dir = Path(str(self.config.hydra.sweep.dir)).absolute()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        if not ray.is_initialized():
            arguments = given(self.ray_cfg.get("init"))
            log.info(f"Ray: ray.init({arguments})")
            try:
                ray.init(**arguments)
            except Exception as error:  # Ray's own errors and connection ones
                from rs_lightning.errors import ConfigError

                first = next((line for line in str(error).splitlines() if line.strip()),
                             type(error).__name__)
                raise ConfigError("hydra.launcher.ray.init",
                                  f"Ray could not start or connect: {first}") from error
        remote = given(self.ray_cfg.get("remote"))
        run_remotely = ray.remote(**remote)(_run_one) if remote else ray.remote(_run_one)
        log.info(f"Ray: launching {len(job_overrides)} jobs, {remote or 'default resources'} "
                 f"each, sweep folder {sweep_dir}")

        pending = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            sweep_config = self.hydra_context.config_loader.load_sweep_config(
                self.config, list(overrides)
            )
            with open_dict(sweep_config):
                sweep_config.hydra.sweep.dir = str(sweep_dir)
                sweep_config.hydra.job.id = f"ray_job_{idx}"
                sweep_config.hydra.job.num = idx
            pending.append(run_remotely.remote(
                self.hydra_context, sweep_config, self.task_function, Singleton.get_state()
            ))
        return ray.get(pending)
