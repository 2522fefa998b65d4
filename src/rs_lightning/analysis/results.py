"""Collect a sweep's ``eval.json`` files into a results table beside the paper's numbers.

    rs-lightning results outputs/multirun/<date_time>
    rs-lightning results <sweep> <sweep>... --out <folder>
    rs-lightning results outputs/runs/<run>          # a single run folder

writes ``results.md`` and ``results.csv`` into the sweep folder (or, for several sweeps
pooled into one table, into ``--out``) and prints the table. The ``paper_table`` experiment
runs this automatically when its multirun ends.

Rows never mix settings: runs are grouped by their whole resolved ``config.yaml`` except the
seed and the keys of :data:`NON_LEARNING_KEYS`; the keys that vary within a sweep are columns
of the table, and a run repeating the config and seed of another is listed apart. Each row
gives the mean ± standard deviation over its seeds and the interquartile mean with a 95%
bootstrap confidence interval (:mod:`rs_lightning.analysis.stats`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Mapping, Optional, TypeVar

from rs_lightning.analysis.stats import (
    BOOTSTRAP_REPS,
    MIN_SEEDS_FOR_INTERVAL,
    RANGE_METHOD,
    interval_estimates,
)
from rs_lightning.envs import GRID_WORLDS
from rs_lightning.errors import ConfigError
from rs_lightning.files import run_files, write_text_atomic

# The paper's Table 2 (E[S], VaR_0.1[S], U[S] with alpha 0.5 and R = VaR): DQN learns the
# orange paths, RS-UMDQN-C the green ones.
PAPER_TABLE: dict[tuple[str, str], dict[str, float]] = {
    ("rs_lightning/RiskyRewards-v0", "dqn"): {"expectation": 0.3, "var": -1.246, "utility": -0.474},
    ("rs_lightning/RiskyRewards-v0", "rs_umdqn_c"): {"expectation": 0.1, "var": -0.126, "utility": -0.013},
    ("rs_lightning/RiskyTransitions-v0", "dqn"): {"expectation": 0.703, "var": 0.118, "utility": 0.411},
    ("rs_lightning/RiskyTransitions-v0", "rs_umdqn_c"): {"expectation": 0.625, "var": 0.346, "utility": 0.485},
    ("rs_lightning/RiskyGridWorld-v0", "dqn"): {"expectation": 0.347, "var": -1.03, "utility": -0.342},
    ("rs_lightning/RiskyGridWorld-v0", "rs_umdqn_c"): {"expectation": 0.333, "var": 0.018, "utility": 0.175},
}
PAPER_BUDGET = 30_000  # the paper's gradient updates (one per environment step)
ENV_ORDER = list(GRID_WORLDS.values())  # the paper's order
METRICS = ("expectation", "var", "cvar", "utility", "risk_outcome")
# Grid worlds: the same quantities of the greedy policy, computed exactly (eval.json exact_*).
EXACT_METRICS = tuple(f"exact_{metric}" for metric in METRICS)
# Grid worlds: the static utility U[sum_t gamma^t r_t] of the greedy policy, of the best
# cell-Markov policy, and the gap between them (eval.json; ground_truth.objective_references).
OBJECTIVE_COLUMNS = (
    ("exact_static_utility", "static U"), ("static_optimum", "static optimum"),
    ("static_gap", "static gap"),
)
OBJECTIVE_METRICS = tuple(key for key, _ in OBJECTIVE_COLUMNS)
# The metric columns of every table: key, header.
METRIC_COLUMNS = (
    ("expectation", "E[S]"), ("var", "VaR[S]"), ("utility", "U[S]"), ("cvar", "CVaR[S]"),
    ("risk_outcome", "R_s"),
)

# Keys of a run's resolved config (dotted prefixes) that do not change what the run learns:
# the seed (the statistics are over it), where and how it logs, checkpoints, shows progress
# and resumes, the threads and devices that compute it (the same numbers, faster or slower),
# whether its seeds run side by side, how often it is evaluated during training, and what
# it returns to a sweeper (objective). Runs differing only in these are seeds of one
# setting; any other difference is another row.
NON_LEARNING_KEYS = (
    "seed", "parallel_seeds", "ckpt_path", "logger", "callbacks", "search_objective",
    "hardware.accelerator", "hardware.devices", "hardware.torch_threads", "hardware.compile",
    "trainer.log_every_n_steps", "trainer.checkpoint_every_n_steps",
    "trainer.checkpoint_every_minutes",
    "learning.fused_adam",
    "evaluation.every_n_steps", "evaluation.episodes_during_training", "evaluation.batch_envs",
)
# The config keys the table's fixed columns show, with the eval.json field that holds each
# (risk.rho is the risk measure's copy of rho, shown in the risk column with it).
IDENTITY_KEYS = {"env.id": "env", "agent.name": "agent", "alpha": "alpha", "risk.name": "risk",
                 "rho": "rho"}
BUDGET_KEY = "trainer.max_steps"  # shown in its own column, "updates"
CONDITIONED_KEY = "agent.risk_conditioned"  # named in the agent column
ACTOR_LAW_KEY = "agent.actor_law"  # DSAC's; a law other than the default named there too
SHOWN_KEYS = {*IDENTITY_KEYS, "risk.rho", BUDGET_KEY}
MISSING = "—"  # the value of a key a run's config does not have


# ------------------------------------------------------------------------ reading runs
class Collected(list):
    """The rows of :func:`collect`, and ``damaged``: one line for each file of a run that
    could not be read (the run is left out, so a table of them is incomplete)."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), damaged: Iterable[str] = ()):
        super().__init__(rows)
        self.damaged = list(damaged)

    def __iadd__(self, other):
        super().__iadd__(other)
        self.damaged += getattr(other, "damaged", [])
        return self


class DamagedFile(ValueError):
    """A run's file that exists but cannot be what it should be (the message names it)."""


def read_json_object(path: Path, required: str | None = None) -> dict[str, Any]:
    """The JSON object in the regular file ``path`` (with the key ``required``), or
    :class:`DamagedFile` naming the file and what is wrong with it."""
    if path.is_symlink() or not path.is_file():
        raise DamagedFile(f"{path}: not a regular file (a run writes its own)")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        # RecursionError: arrays or objects nested deeper than the parser goes
        raise DamagedFile(f"{path}: unreadable ({type(error).__name__}: "
                          f"{str(error).splitlines()[0][:120]})") from None
    if not isinstance(data, dict):
        raise DamagedFile(f"{path}: holds a {type(data).__name__}, not a JSON object")
    if required is not None and required not in data:
        raise DamagedFile(f"{path}: has no {required!r}")
    return data


def _is_job(folder: Path) -> bool:
    """A sweep's job folder: not a hidden one (.hydra, .submitit), the report's, nor the
    benchmark leaderboard's W&B run (``wandb``)."""
    return not folder.name.startswith(".") and folder.name not in ("report", "wandb")


def collect(sweep_dir: Path) -> Collected:
    """Every finished run's ``eval.json`` below ``sweep_dir`` (or of the run ``sweep_dir``
    is), with the job folder's name and the run's learning settings (``settings``, from its
    ``config.yaml``; absent without one).

    Jobs that failed (``failed.json``) or did not finish (no ``eval.json``) are skipped with
    a warning naming them; a run whose ``eval.json`` or ``config.yaml`` cannot be read is
    skipped with one line naming the file, listed in the result's ``damaged``.
    """
    rows = Collected()
    sweep_dir = Path(sweep_dir)
    is_run = (sweep_dir / "eval.json").exists() or (sweep_dir / "config.yaml").exists()
    jobs = [] if is_run else sorted(p for p in sweep_dir.glob("*") if p.is_dir() and _is_job(p))
    for job in jobs:
        if (job / "failed.json").is_file():
            try:
                reason = json.loads((job / "failed.json").read_text()).get("message", "")
            except (OSError, ValueError, AttributeError):
                reason = ""
            print(f"warning: skipping failed job {job.name}: {reason} (see its failed.json)",
                  file=sys.stderr)
        elif not (job / "eval.json").exists() and not (job / "members.json").exists():
            if (job / "config.yaml").exists():
                print(f"warning: skipping incomplete job {job.name}: no eval.json "
                      "(interrupted? the same sweep command again finishes it)", file=sys.stderr)
            elif not any(job.glob("seed_*/eval.json")):
                print(f"warning: skipping {job}: holds no run (its files were removed?)",
                      file=sys.stderr)
    found = [*(p for p in [sweep_dir / "eval.json"] if p.exists() or p.is_symlink()),
             *(p for p in run_files(sweep_dir, "eval.json") if p.parent != sweep_dir)]
    for path in sorted(set(found)):
        if (path.parent / "failed.json").is_file() or (path.parent.parent / "failed.json").is_file():
            continue
        try:
            row = read_json_object(path, "expectation")
            config = read_config(path.parent)
        except DamagedFile as error:
            print(f"warning: skipping a run: {error}", file=sys.stderr)
            rows.damaged.append(str(error))
            continue
        row["job"] = path.parent.relative_to(sweep_dir).as_posix()  # seed_<s> folders too
        if config is not None:
            row["settings"] = learning_settings(config)
        rows.append(row)
    return rows


def collect_all(*folders: Path) -> Collected:
    """:func:`collect` of several sweeps, pooled."""
    rows = Collected()
    for folder in folders:
        rows += collect(folder)
    return rows


def no_runs_message(*folders: Path) -> str:
    """What a folder without finished runs lacks (the CLI's error)."""
    names = ", ".join(map(str, folders))
    return (f"no finished run in {names}: expected eval.json in a run folder, or in the "
            "folders of a sweep (<sweep>/*/eval.json, or <sweep>/*/seed_<s>/eval.json for "
            "parallel_seeds jobs)")


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of nested mappings; lists are values."""
    if not isinstance(node, Mapping):
        return {prefix: node}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def learning_settings(config: Mapping) -> dict[str, Any]:
    """The keys of a resolved config that make a run's setting: all but NON_LEARNING_KEYS."""
    return {
        key: value for key, value in flatten(config).items()
        if not any(key == ignored or key.startswith(ignored + ".") for ignored in NON_LEARNING_KEYS)
    }


def read_config(run_dir: Path) -> Optional[dict[str, Any]]:
    """The resolved config of the run in ``run_dir`` in the current format (None without a
    ``config.yaml``), or :class:`DamagedFile` naming the file when it is not a run's config
    (:class:`~rs_lightning.config.migrations.NewerFormat` for a run of a newer version)."""
    from omegaconf import OmegaConf

    from rs_lightning.config.migrations import NewerFormat, read_run_config

    path = Path(run_dir) / "config.yaml"
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return OmegaConf.to_container(read_run_config(path), resolve=True)
    except NewerFormat:
        raise
    except ConfigError as error:  # the one reader's verdict on the file, naming it
        raise DamagedFile(str(error)) from None
    except Exception as error:  # an interpolation that does not resolve
        first = str(error).strip().splitlines()[0][:120] if str(error).strip() else ""
        raise DamagedFile(f"{path}: not a readable config ({type(error).__name__}: {first})"
                          ) from None


def settings_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's learning settings; for a run without ``config.yaml``, what its eval.json says
    (the fixed columns, and the updates it made as its budget)."""
    if "settings" in row:
        return row["settings"]
    settings = {key: row[name] for key, name in IDENTITY_KEYS.items()}
    if "steps" in row:
        settings[BUDGET_KEY] = row["steps"]
    return settings


# ------------------------------------------------------------------------ grouping
Run = TypeVar("Run")


@dataclass
class RunGroup(Generic[Run]):
    """The runs of one setting, one per seed."""

    settings: dict[str, Any]
    runs: list[Run] = field(default_factory=list)
    duplicates: list[Run] = field(default_factory=list)  # the same setting and seed again


def group_by_setting(runs: Iterable[Run], settings: Callable[[Run], dict[str, Any]],
                     seed: Callable[[Run], Any]) -> list[RunGroup[Run]]:
    """Runs grouped by their learning ``settings``, in order of first appearance; a run
    repeating the setting and the seed of an earlier one goes to its group's duplicates."""
    groups: dict[str, RunGroup[Run]] = {}
    for run in runs:
        setting = settings(run)
        key = json.dumps(setting, sort_keys=True, default=str)
        group = groups.setdefault(key, RunGroup(setting))
        seen = {seed(other) for other in group.runs}
        (group.duplicates if seed(run) in seen else group.runs).append(run)
    return list(groups.values())


def value_text(settings: Mapping[str, Any], key: str) -> str:
    """A setting's value as a cell: a float to 6 significant digits (an Optuna trial's
    ``lr`` has 20), anything else as it is."""
    value = settings.get(key, MISSING)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def varying_keys(settings: list[Mapping[str, Any]]) -> list[str]:
    """The keys, beyond the fixed columns, whose value differs between two settings of the
    same environment, agent and risk measure (keys that differ only because the agent or
    environment does are told by its name)."""
    by_names = defaultdict(list)
    for setting in settings:
        by_names[tuple(setting.get(key) for key in ("env.id", "agent.name", "risk.name"))].append(setting)
    varying = set()
    for same_names in by_names.values():
        for key in set().union(*same_names) - SHOWN_KEYS:
            if len({repr(setting.get(key, MISSING)) for setting in same_names}) > 1:
                varying.add(key)
    return sorted(varying)


def column_names(keys: list[str]) -> dict[str, str]:
    """{key: column header}: the key's last part (``learning.lr`` -> ``lr``), or the whole
    key where two keys end alike."""
    last = Counter(key.split(".")[-1] for key in keys)
    return {key: key.split(".")[-1] if last[key.split(".")[-1]] == 1 else key for key in keys}


def label_keys(settings: list[Mapping[str, Any]],
               named: tuple[str, ...] = ("env.id", "agent.name")) -> dict[str, str]:
    """{key: name} of what tells the settings apart: the fixed settings and the budget where
    they vary, then :func:`varying_keys`; leaving out the keys ``named`` elsewhere (a curve's
    label names its agent, its panel the environment)."""
    fixed = {key: name for key, name in {**IDENTITY_KEYS, BUDGET_KEY: "updates"}.items()
             if key not in named and len({value_text(setting, key) for setting in settings}) > 1}
    return {**fixed, **column_names(varying_keys(settings))}


def setting_labels(settings: list[Mapping[str, Any]]) -> list[str]:
    """A label for each of the settings (of one environment): the agent and what tells the
    setting apart from the others (:func:`label_keys`), e.g. ``dqn lr=0.01``."""
    keys = label_keys(settings)
    return [" ".join([str(setting.get("agent.name", "?")),
                      *(f"{name}={value_text(setting, key)}" for key, name in keys.items())])
            for setting in settings]


def labelled_groups(groups: list[RunGroup[Run]]) -> list[tuple[str, str, RunGroup[Run]]]:
    """(env id, label, group) of every group, by environment; the labels
    (:func:`setting_labels`) tell the groups of one environment apart."""
    labelled = []
    for env in sorted({str(group.settings.get("env.id")) for group in groups}):
        in_env = [group for group in groups if str(group.settings.get("env.id")) == env]
        labels = setting_labels([group.settings for group in in_env])
        labelled += [(env, label, group) for label, group in zip(labels, in_env)]
    return labelled


# ------------------------------------------------------------------------ the table
def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (NaN for a single seed)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def _sortable(value: Any) -> tuple:
    """Numbers in numeric order, before text."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def summarize(rows: list[dict[str, Any]], reps: int = BOOTSTRAP_REPS,
              use_rliable: Optional[bool] = None) -> list[dict[str, Any]]:
    """One row per setting (:func:`group_by_setting`): over its distinct seeds, the mean,
    standard deviation, interquartile mean and 95% bootstrap interval of each metric.

    ``varying`` holds the settings that tell rows apart beyond the fixed columns
    ({column: value}, the same columns in every row), ``settings`` all of the row's learning
    settings, ``jobs`` its runs in the order of ``seeds``, ``duplicates`` the runs left out.
    """
    groups = group_by_setting(rows, settings_of, lambda row: row["seed"])
    columns = column_names(varying_keys([group.settings for group in groups]))
    table = []
    for group in groups:
        runs = sorted(group.runs, key=lambda row: row["seed"])
        first = runs[0]
        entry: dict[str, Any] = {
            "env": first["env"], "agent": first["agent"], "alpha": first["alpha"],
            "risk": first["risk"], "rho": first["rho"],
            "varying": {name: value_text(group.settings, key) for key, name in columns.items()},
            "budget": group.settings.get(BUDGET_KEY),
            "settings": group.settings,
            "seeds": [r["seed"] for r in runs],
            "jobs": [r.get("job", "") for r in runs],  # in the order of the seeds
            "scores": {},  # {metric: the seeds' values}
            "duplicates": [f"{r.get('job', '?')} (seed {r['seed']}, as "
                           f"{next(k.get('job', '?') for k in runs if k['seed'] == r['seed'])})"
                           for r in group.duplicates],
        }
        for metric in METRICS + EXACT_METRICS + OBJECTIVE_METRICS:
            values = [r[metric] for r in runs if metric in r]
            if values:
                entry[metric], entry[f"{metric}_std"] = _mean_std(values)
            if values and metric in METRICS:
                entry["scores"][metric] = values
        estimates = interval_estimates(entry["scores"], reps=reps, use_rliable=use_rliable)
        for metric, estimate in estimates.items():
            entry[f"{metric}_iqm"] = estimate.iqm
            entry[f"{metric}_ci_low"], entry[f"{metric}_ci_high"] = estimate.low, estimate.high
            if estimate.method != RANGE_METHOD:
                entry["interval_method"] = estimate.method
        # Seeds whose greedy policy follows the green (risk-averse) path in most episodes.
        entry["green_seeds"] = sum(1 for r in runs if r.get("risk_outcome_green", 0) > 0.5)
        entry["orange_seeds"] = sum(1 for r in runs if r.get("risk_outcome_orange", 0) > 0.5)
        paper = PAPER_TABLE.get((entry["env"], entry["agent"]))
        if paper and entry["alpha"] == 0.5 and entry["risk"] == "var" and entry["rho"] == 0.1:
            entry.update({f"paper_{k}": v for k, v in paper.items()})
        table.append(entry)

    def order(entry):
        env = ENV_ORDER.index(entry["env"]) if entry["env"] in ENV_ORDER else len(ENV_ORDER)
        return (env, entry["env"], entry["agent"], entry["alpha"], entry["risk"], entry["rho"],
                *(_sortable(_number(v)) for v in entry["varying"].values()),
                _sortable(entry["budget"]))

    return sorted(table, key=order)


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def table_warnings(table: list[dict[str, Any]]) -> list[str]:
    """What a reader of the table must know: runs left out as duplicates, mixed budgets."""
    warnings = []
    duplicates = [job for entry in table for job in entry["duplicates"]]
    if duplicates:
        warnings.append(
            f"{len(duplicates)} run(s) repeat the config and seed of a run in the table and are "
            f"left out of it: {', '.join(duplicates)}")
    budgets = sorted({entry["budget"] for entry in table if entry["budget"] is not None})
    if len(budgets) > 1:
        warnings.append(
            f"the table mixes training budgets ({BUDGET_KEY} {', '.join(map(str, budgets))}): "
            "compare rows of the same budget only")
    return warnings


def varying_columns(table: list[dict[str, Any]]) -> list[str]:
    return list(table[0]["varying"]) if table else []


def label_columns(table: list[dict[str, Any]]) -> list[str]:
    """The columns that name a row's setting."""
    return ["env", "agent", "alpha", "risk", *varying_columns(table), "updates", "seeds"]


TABLE_KINDS = ("mean", "iqm", "exact")
# What each table is, as a page's heading over it.
TABLE_TITLES = {"mean": "Monte Carlo evaluation: mean ± standard deviation over seeds",
                "iqm": "Monte Carlo evaluation: interquartile mean and its interval",
                "exact": "The greedy policies, computed exactly"}


def table_columns(table: list[dict[str, Any]], kind: str = "mean") -> list[str]:
    columns = label_columns(table) + [label for _, label in METRIC_COLUMNS]
    if kind == "exact":
        return columns + [label for _, label in OBJECTIVE_COLUMNS]
    return columns + ["green / orange seeds"] if kind == "mean" else columns


def conditioned(entry: dict[str, Any]) -> bool:
    """Whether the row's runs are risk-conditioned (one network for a range of settings)."""
    return entry.get("settings", {}).get(CONDITIONED_KEY) is True


def agent_label(name: str, risk_conditioned: bool, actor_law: str | None = None) -> str:
    """An agent as the tables name it: a risk-conditioned one (one network for every
    setting) is another method than the agent trained at one setting, ``c51
    (risk-conditioned)``, and so is a DSAC whose actor maximises U of its critics' mixture
    (``agent.actor_law=mixture``), ``dsac (mixture actor)``."""
    variants = [*(["mixture actor"] if actor_law == "mixture" else []),
                *(["risk-conditioned"] if risk_conditioned else [])]
    return f"{name} ({', '.join(variants)})" if variants else name


def _agent_label(entry: dict[str, Any]) -> str:
    return agent_label(entry["agent"], conditioned(entry),
                       entry.get("settings", {}).get(ACTOR_LAW_KEY))


def parameters_text(params: Mapping[str, Any]) -> str:
    """A measure's parameters as ``levels=[0.1, 0.3],weights=[0.5, 0.5]``, sorted by name."""
    return ",".join(f"{key}={value}" for key, value in sorted(params.items()))


def risk_label(entry: dict[str, Any]) -> str:
    """The measure and its own parameters: ``cvar_0.1``, ``wang_-0.75``,
    ``spectral(levels=[0.1, 0.3],weights=[0.5, 0.5])`` (a run's top-level rho is the
    parameter of VaR and CVaR only)."""
    risk = entry["risk"]
    params = {key.split(".", 1)[1]: value for key, value in entry.get("settings", {}).items()
              if key.startswith("risk.") and key != "risk.name"}
    if not params:  # a run without config.yaml: its eval.json names rho alone
        params = {"rho": entry["rho"]} if risk in ("var", "cvar") else {}
    if not params:
        return risk
    if len(params) == 1:
        (value,) = params.values()
        return f"{risk}_{value:g}" if isinstance(value, (int, float)) else f"{risk}_{value}"
    return f"{risk}({parameters_text(params)})"


def _cell(entry: dict[str, Any], metric: str) -> str:
    """Mean ± standard deviation, and the paper's value in brackets."""
    if metric not in entry:
        return ""
    std = entry.get(f"{metric}_std", float("nan"))
    text = f"{entry[metric]:.3f}" + ("" if math.isnan(std) else f" ± {std:.3f}")
    paper = entry.get(f"paper_{metric}")
    return text + (f" ({paper:g})" if paper is not None else "")


def _interval_cell(entry: dict[str, Any], metric: str) -> str:
    """Interquartile mean [95% confidence interval]; below MIN_SEEDS_FOR_INTERVAL seeds
    (range: min, max) of the seeds instead, and nothing beside a single seed."""
    if f"{metric}_iqm" not in entry:
        return ""
    if len(entry["seeds"]) == 1:
        return f"{entry[f'{metric}_iqm']:.3f}"
    low, high = entry[f"{metric}_ci_low"], entry[f"{metric}_ci_high"]
    if len(entry["seeds"]) < MIN_SEEDS_FOR_INTERVAL:
        return f"{entry[f'{metric}_iqm']:.3f} (range {low:.3f}, {high:.3f})"
    return f"{entry[f'{metric}_iqm']:.3f} [{low:.3f}, {high:.3f}]"


def table_rows(table: list[dict[str, Any]], kind: str = "mean") -> list[list[str]]:
    """The table of ``kind`` as rows of text cells: ``mean`` (mean ± std, the paper's value),
    ``iqm`` (interquartile mean and interval) or ``exact`` (the exact evaluation, grid
    worlds; on small tabular environments the objectives' references alone); also the data
    of the report's HTML and W&B tables."""
    rows = []
    for e in table:
        if kind == "exact" and "exact_expectation" not in e and "exact_static_utility" not in e:
            continue
        row = [e["env"].split("/")[-1], _agent_label(e), f"{e['alpha']:g}", risk_label(e),
               *e["varying"].values(), "" if e["budget"] is None else str(e["budget"]),
               str(len(e["seeds"]))]
        if kind == "iqm":
            row += [_interval_cell(e, m) for m, _ in METRIC_COLUMNS]
        else:
            row += [_cell(e, f"exact_{m}" if kind == "exact" else m) for m, _ in METRIC_COLUMNS]
        if kind == "exact":
            row += [_cell(e, m) for m in OBJECTIVE_METRICS]
        if kind == "mean":
            row.append(f"{e['green_seeds']} / {e['orange_seeds']}")
        rows.append(row)
    return rows


def table_notes(table: list[dict[str, Any]]) -> dict[str, str]:
    """The caption of each kind of table."""
    method = next((e["interval_method"] for e in table if "interval_method" in e), "bootstrap")
    return {
        "mean": "Mean ± standard deviation over seeds of the greedy policy's evaluation (Monte "
                "Carlo episodes per seed: see each eval.json); the paper's number in brackets "
                f"(after {PAPER_BUDGET:,} updates; the updates column gives each row's budget). "
                "R_s: +1 green path, -1 orange. Every run of a seed plays its evaluation "
                "episodes from the same environment seed (common random numbers): runs that "
                "end with the same greedy policy, of any length, show identical Monte Carlo "
                "numbers." + (
                    " A risk-conditioned agent learned one network for a range of settings: "
                    "its rows are its greedy policy at the run's own alpha and rho "
                    "(rs-lightning frontier <run> evaluates it at others)."
                    if any(conditioned(e) for e in table) else ""),
        "iqm": "Interquartile mean over seeds (the mean of the middle half; the plain mean "
               f"below 4 seeds) and, in brackets, its 95% confidence interval, {method} over "
               f"the seeds; a row of fewer than {MIN_SEEDS_FOR_INTERVAL} seeds gives the "
               "seeds' range (min, max) instead, marked 'range': too few seeds for an "
               "interval.",
        "exact": "The same greedy policies evaluated exactly (their return is a Gaussian "
                 "mixture on the grid worlds): mean ± standard deviation over seeds. Static U: "
                 "the utility of the whole episode's discounted return; static optimum: the "
                 "best over deterministic cell-Markov policies; static gap: their difference "
                 "(given for VaR and CVaR).",
    }


def _markdown_table(columns: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def to_markdown(table: list[dict[str, Any]]) -> str:
    notes = table_notes(table)
    parts = []
    for kind in TABLE_KINDS:
        rows = table_rows(table, kind)
        if rows:
            parts.append(_markdown_table(table_columns(table, kind), rows) + "\n" + notes[kind] + "\n")
    warnings = table_warnings(table)
    if warnings:
        parts.append("\n".join(f"**Warning**: {warning}." for warning in warnings) + "\n")
    return "\n".join(parts)


def to_csv(table: list[dict[str, Any]]) -> str:
    keys = ["env", "agent", "alpha", "risk", "rho", *varying_columns(table), "updates", "seeds",
            "green_seeds", "orange_seeds"]
    for metric in METRICS:
        keys += [metric, f"{metric}_std", f"paper_{metric}", f"{metric}_iqm",
                 f"{metric}_ci_low", f"{metric}_ci_high"]
    for metric in EXACT_METRICS + OBJECTIVE_METRICS:
        keys += [metric, f"{metric}_std"]
    keys += ["jobs", "duplicates"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    for entry in table:
        writer.writerow({
            **entry, **entry["varying"], "updates": entry["budget"],
            "seeds": " ".join(map(str, entry["seeds"])), "jobs": " ".join(entry["jobs"]),
            "duplicates": " ".join(entry["duplicates"]),
        })
    return buffer.getvalue()


def write_table(rows: list[dict[str, Any]], out: Path) -> tuple[list[dict[str, Any]], str]:
    """Write results.md and results.csv of ``rows`` into ``out``, the table's warnings to
    stderr; returns the table and its Markdown."""
    table = summarize(rows)
    for warning in table_warnings(table):
        print(f"warning: {warning}", file=sys.stderr)
    markdown = to_markdown(table)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "results.md", markdown)
    write_text_atomic(out / "results.csv", to_csv(table))
    return table, markdown


def write_results(sweep_dir: Path, *more: Path, out: Path | None = None) -> str:
    """Write results.md and results.csv into ``out`` (by default ``sweep_dir``) from the jobs
    of ``sweep_dir`` and any ``more`` sweeps; returns the Markdown table."""
    rows = collect_all(sweep_dir, *more)
    if not rows:
        raise FileNotFoundError(no_runs_message(sweep_dir, *more))
    return write_table(rows, Path(out or sweep_dir))[1]
