"""The benchmark's sweeper (``hydra.sweeper._target_:
hydra_plugins.rs_lightning_sweepers.valid_pairs_sweeper.ValidPairsSweeper``, conf/experiment/benchmark_small.yaml):
Hydra's basic sweeper, less the jobs the config would refuse.

It lives in the ``hydra_plugins`` namespace package because Hydra instantiates sweepers only
from there; importing it stays cheap (the config's rule is imported when a sweep starts).
"""

from __future__ import annotations

import sys
from typing import Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


def _choice(job: list[str], key: str) -> Optional[str]:
    """The value a job's overrides give ``key`` (the last one), or None."""
    values = [o.split("=", 1)[1] for o in job if o.lstrip("+").split("=", 1)[0] == key]
    return values[-1] if values else None


class ValidPairsSweeper(BasicSweeper):
    """Hydra's basic sweeper (the grid of every combination, run by any launcher) without
    the jobs whose agent the objective refuses (``objective=static`` with ``agent=dqn``, or
    ``agent=ppo`` with ``objective=per_decision`` under a risk measure:
    :func:`rs_lightning.config.schema.objective_refusal`), which would fail at once. Each
    reason is said once on stderr with its number of jobs. The jobs keep their order, so the
    same sweep again gives each the same number and folder, and so resumes.

    In a sweep, each job's config is composed (as Hydra does anyway to check the batch) so
    the rules that depend on the risk setting apply; given only the overrides (no Hydra
    context), the rules that hold at any setting do.

    ``run_last`` (``hydra.sweeper.run_last``, e.g. ``{agent: [ppo]}``) moves the jobs with one
    of those values after the others, in grid order: the jobs of a grid that gained those
    values keep the numbers, so the folders, they had before, and an earlier sweep resumes."""

    def __init__(self, max_batch_size: Optional[int], params=None,
                 run_last: Optional[dict] = None) -> None:
        super().__init__(max_batch_size, params)
        self.run_last = {str(key): [str(v) for v in values]
                         for key, values in (run_last or {}).items()}
        self._refusals: dict[tuple[str, ...], tuple[str, str, Optional[str]]] = {}

    def split_arguments(self, overrides, max_batch_size):  # type: ignore[override]
        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        refused: dict[tuple[str, str, str], int] = {}
        kept = []
        for job in jobs:
            refusal = self._refusal(job)
            if refusal is None:
                kept.append(job)
            else:
                refused[refusal] = refused.get(refusal, 0) + 1
        kept.sort(key=self._runs_last)  # stable: grid order within each part
        kept_batches = (list(BasicSweeper.split_overrides_to_chunks(kept, max_batch_size))
                        if kept else [])  # Hydra's chunking refuses an empty list
        for (agent, objective, reason), count in refused.items():
            print(f"[rs_lightning] sweep: left out {count} job(s) of agent={agent} "
                  f"objective={objective}: {reason}", file=sys.stderr)
        return kept_batches

    def _runs_last(self, job: list[str]) -> bool:
        return any(_choice(job, key) in values for key, values in self.run_last.items())

    def _refusal(self, job: list[str]) -> Optional[tuple[str, str, str]]:
        """(agent, objective, why the config refuses that pair) for ``job``, or None (also
        where the job cannot be composed or names an unknown value: its own check reports
        that)."""
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        from rs_lightning.config.schema import objective_refusal, utility_from
        from rs_lightning.errors import ConfigError

        context = self.hydra_context  # None where made outside a sweep (the overrides alone)
        try:
            if context is None or self.config is None:
                agent, objective = _choice(job, "agent"), _choice(job, "objective")
                if agent is None or objective is None:
                    return None
                reason = objective_refusal(agent, objective)
            else:
                # The rule reads the agent, the objective and the risk setting, never the world
                # or the seed: one composition serves the jobs that differ only in those.
                key = tuple(o for o in job if not o.startswith(("env=", "seed=")))
                cache = self._refusals
                if key not in cache:
                    cfg = context.config_loader.load_sweep_config(master_config=self.config,
                                                                  sweep_overrides=list(job))
                    agent, objective = str(cfg.agent.name), str(cfg.objective)
                    cache[key] = agent, objective, objective_refusal(
                        agent, objective, bool(cfg.agent.get("risk_conditioned", False)),
                        utility_from(cfg.risk, float(cfg.alpha)))
                agent, objective, reason = cache[key]
        except (HydraException, OmegaConfBaseException, ConfigError, KeyError, ValueError):
            return None
        return None if reason is None else (agent, objective, reason)
