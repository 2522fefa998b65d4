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
    the jobs whose agent the objective refuses (``objective=static`` with ``agent=dqn``:
    :func:`rs_lightning.config.schema.objective_refusal`), which would fail at once. Each
    pair left out is said once on stderr. The jobs keep their order, so the same sweep
    again gives each the same number and folder, and so resumes."""

    def split_arguments(self, overrides, max_batch_size):  # type: ignore[override]
        from rs_lightning.config.schema import objective_refusal

        batches = BasicSweeper.split_arguments(overrides, max_batch_size)
        refused: dict[tuple[str, str], tuple[str, int]] = {}
        kept_batches = []
        for batch in batches:
            kept = []
            for job in batch:
                agent, objective = _choice(job, "agent"), _choice(job, "objective")
                reason = None
                if agent is not None and objective is not None:
                    try:
                        reason = objective_refusal(agent, objective)
                    except KeyError:  # an unknown name: the job's own check reports it
                        reason = None
                if reason is None:
                    kept.append(job)
                else:
                    message, count = refused.get((agent, objective), (reason, 0))
                    refused[(agent, objective)] = (message, count + 1)
            if kept:
                kept_batches.append(kept)
        for (agent, objective), (reason, count) in refused.items():
            print(f"[rs_lightning] sweep: left out {count} job(s) of agent={agent} "
                  f"objective={objective}: {reason}", file=sys.stderr)
        return kept_batches
