"""The objective a job returns to a sweeper, and the history of an Optuna study.

``search_objective.metric`` of the greedy policy's evaluation (conf/train.yaml), of the final one
(``eval.json``) or of the best of the periodic ones (``eval_history.jsonl``) and the final
one; for a run of several seeds (``parallel_seeds``) the mean over its seeds. Every metric is
higher-is-better, so a study maximises it (conf/hparams_search/).

After an Optuna study (``hydra/sweeper=optuna``) the sweep folder holds Optuna's own
``optimization_results.yaml`` (best parameters and value) and, from here,
``optimization_history.csv``: one line per trial with its parameters, objective, state and
the best objective so far.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from rs_lightning.config.migrations import read_run_config
from rs_lightning.files import read_jsonl, run_files, write_text_atomic

HISTORY_FILE = "optimization_history.csv"
OPTUNA_RESULTS_FILE = "optimization_results.yaml"


def run_objective(run_dir: Path, metric: str, evaluation: str = "final") -> float:
    """The objective of the finished run in ``run_dir`` (see the module docstring).

    KeyError naming the metric if an evaluation lacks it; FileNotFoundError without an
    ``eval.json``.
    """
    finals = run_files(run_dir, "eval.json")
    if not finals:
        raise FileNotFoundError(f"no eval.json in {run_dir}")
    values = []
    for path in finals:  # one per seed
        final = json.loads(path.read_text())
        if metric not in final:
            raise KeyError(f"search_objective.metric={metric!r} is not in {path}")
        value = float(final[metric])
        history = path.parent / "eval_history.jsonl"
        if evaluation == "best" and history.is_file():
            value = max([value, *(float(r[metric]) for r in read_jsonl(history) if metric in r)])
        values.append(value)
    return sum(values) / len(values)


def _job_number(job: Path) -> float:
    head = job.name.split("_", 1)[0]
    return int(head) if head.isdigit() else math.inf


def _override_value(override: str) -> tuple[str, str]:
    key, _, value = override.partition("=")
    return key.lstrip("+~"), value


def study_history(sweep_dir: Path) -> list[dict[str, Any]]:
    """One record per job (trial) of a sweep, in trial order: ``trial``, ``job``,
    ``params`` (the overrides whose values differ across the trials), ``objective`` (None
    unless finished), ``state`` (finished, failed, incomplete) and ``best_so_far``."""
    sweep_dir = Path(sweep_dir)
    jobs = sorted((p for p in sweep_dir.iterdir() if (p / ".hydra" / "overrides.yaml").is_file()),
                  key=lambda p: (_job_number(p), p.name))
    overrides = {job: dict(map(_override_value, OmegaConf.load(job / ".hydra" / "overrides.yaml")))
                 for job in jobs}
    keys = sorted({key for values in overrides.values() for key in values})
    varying = [key for key in keys if len({values.get(key) for values in overrides.values()}) > 1]
    records, best = [], None
    for job in jobs:
        objective, state = None, "incomplete"
        if (job / "failed.json").is_file():
            state = "failed"
        elif run_files(job, "eval.json") and (job / "config.yaml").is_file():
            wanted = read_run_config(job / "config.yaml").search_objective
            objective = run_objective(job, wanted.metric, wanted.evaluation)
            state = "finished"
            best = objective if best is None else max(best, objective)
        records.append({
            "trial": _job_number(job), "job": job.name,
            "params": {key: overrides[job].get(key, "") for key in varying},
            "objective": objective, "state": state, "best_so_far": best,
        })
    return records


def history_csv(records: list[dict[str, Any]]) -> str:
    params = list(records[0]["params"]) if records else []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["trial", *params, "objective", "best_so_far", "state", "job"])
    for record in records:
        writer.writerow([record["trial"], *record["params"].values(),
                         "" if record["objective"] is None else repr(record["objective"]),
                         "" if record["best_so_far"] is None else repr(record["best_so_far"]),
                         record["state"], record["job"]])
    return out.getvalue()


def write_study_history(sweep_dir: Path) -> Optional[Path]:
    """Write ``optimization_history.csv`` into a sweep folder (None: no trial folders)."""
    records = study_history(sweep_dir)
    if not records:
        return None
    path = Path(sweep_dir) / HISTORY_FILE
    write_text_atomic(path, history_csv(records))
    return path


def read_study(sweep_dir: Path) -> Optional[dict[str, Any]]:
    """The study of an Optuna sweep folder: ``history`` (the CSV's rows as dicts) and
    ``best`` (Optuna's optimization_results.yaml), or None if the sweep was not a study."""
    path = Path(sweep_dir) / HISTORY_FILE
    if not path.is_file():
        return None
    history = list(csv.DictReader(io.StringIO(path.read_text())))
    results = Path(sweep_dir) / OPTUNA_RESULTS_FILE
    best = OmegaConf.to_container(OmegaConf.load(results)) if results.is_file() else None
    return {"history": history, "best": best}
