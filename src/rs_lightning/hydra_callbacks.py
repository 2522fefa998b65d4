"""Hydra callbacks: work done once a whole multirun has finished."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class WriteResultsTable(Callback):
    """After a multirun, write results.md / results.csv of all its jobs into the sweep folder."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from rs_lightning.results import write_results

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            table = write_results(sweep_dir)
        except FileNotFoundError as error:
            print(f"[rs_lightning] no results table: {error}", file=sys.stderr)
            return
        print(f"[rs_lightning] results of the sweep ({sweep_dir / 'results.md'}):\n{table}",
              file=sys.stderr)
