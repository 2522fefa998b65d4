"""Collect a sweep's ``eval.json`` files into a results table beside the paper's numbers.

    python -m rs_lightning.results outputs/multirun/<date_time>
    python -m rs_lightning.results <sweep> <sweep>... --out <folder>

writes ``results.md`` and ``results.csv`` into the sweep folder (or, for several sweeps
pooled into one table, into ``--out``) and prints the table. The ``paper_table`` experiment
runs this automatically when its multirun ends.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from rs_lightning.envs import GRID_WORLDS
from rs_lightning.files import run_files

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
ENV_ORDER = list(GRID_WORLDS.values())  # the paper's order
METRICS = ("expectation", "var", "cvar", "utility", "risk_outcome")
# Grid worlds: the same quantities of the greedy policy, computed exactly (eval.json exact_*).
EXACT_METRICS = tuple(f"exact_{metric}" for metric in METRICS)


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every finished job's ``eval.json`` below ``sweep_dir``, with the job folder's name.

    Jobs that failed (``failed.json``) or did not finish (no ``eval.json``) are skipped with
    a warning naming them.
    """
    rows = []
    sweep_dir = Path(sweep_dir)
    for job in sorted(p for p in sweep_dir.glob("*") if p.is_dir()):
        if (job / "failed.json").is_file():
            try:
                reason = json.loads((job / "failed.json").read_text()).get("message", "")
            except (OSError, ValueError):
                reason = ""
            print(f"warning: skipping failed job {job.name}: {reason} (see its failed.json)",
                  file=sys.stderr)
        elif (not (job / "eval.json").is_file() and not (job / "members.json").is_file()
              and (job / "config.yaml").is_file()):
            print(f"warning: skipping incomplete job {job.name}: no eval.json (interrupted? "
                  "the same sweep command again finishes it)", file=sys.stderr)
    for path in run_files(sweep_dir, "eval.json"):
        if (path.parent / "failed.json").is_file() or (path.parent.parent / "failed.json").is_file():
            continue
        try:
            row = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            print(f"warning: skipping {path}: {error}", file=sys.stderr)
            continue
        row["job"] = path.parent.relative_to(sweep_dir).as_posix()  # seed_<s> folders too
        rows.append(row)
    return rows


def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (NaN for a single seed)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else float("nan")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (env, agent, alpha, risk, rho): mean and std over seeds of each metric."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["env"], row["agent"], row["alpha"], row["risk"], row["rho"])].append(row)

    def order(key):
        env = ENV_ORDER.index(key[0]) if key[0] in ENV_ORDER else len(ENV_ORDER)
        return (env, key[0], key[1], key[2], key[3], key[4])

    table = []
    for key in sorted(groups, key=order):
        env, agent, alpha, risk, rho = key
        runs = groups[key]
        entry: dict[str, Any] = {
            "env": env, "agent": agent, "alpha": alpha, "risk": risk, "rho": rho,
            "seeds": sorted(r["seed"] for r in runs),
        }
        for metric in METRICS + EXACT_METRICS:
            values = [r[metric] for r in runs if metric in r]
            if values:
                entry[metric], entry[f"{metric}_std"] = _mean_std(values)
        # Seeds whose greedy policy follows the green (risk-averse) path in most episodes.
        entry["green_seeds"] = sum(1 for r in runs if r.get("risk_outcome_green", 0) > 0.5)
        entry["orange_seeds"] = sum(1 for r in runs if r.get("risk_outcome_orange", 0) > 0.5)
        paper = PAPER_TABLE.get((env, agent))
        if paper and alpha == 0.5 and risk == "var" and rho == 0.1:
            entry.update({f"paper_{k}": v for k, v in paper.items()})
        table.append(entry)
    return table


def _cell(entry: dict[str, Any], metric: str) -> str:
    if metric not in entry:
        return ""
    std = entry.get(f"{metric}_std", float("nan"))
    text = f"{entry[metric]:.3f}" + ("" if math.isnan(std) else f" ± {std:.3f}")
    paper = entry.get(f"paper_{metric}")
    return text + (f" ({paper:g})" if paper is not None else "")


def to_markdown(table: list[dict[str, Any]]) -> str:
    lines = [
        "| env | agent | alpha | risk | seeds | E[S] | VaR[S] | U[S] | CVaR[S] | R_s | green / orange seeds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in table:
        risk = e["risk"] if e["risk"] == "expectation" else f"{e['risk']}_{e['rho']:g}"
        lines.append(
            f"| {e['env'].split('/')[-1]} | {e['agent']} | {e['alpha']:g} | {risk} | {len(e['seeds'])} | "
            f"{_cell(e, 'expectation')} | {_cell(e, 'var')} | {_cell(e, 'utility')} | "
            f"{_cell(e, 'cvar')} | {_cell(e, 'risk_outcome')} | "
            f"{e['green_seeds']} / {e['orange_seeds']} |"
        )
    text = (
        "\n".join(lines)
        + "\n\nMean ± standard deviation over seeds of the greedy policy's evaluation "
        "(Monte Carlo episodes per seed: see each eval.json); the paper's number in brackets. "
        "R_s: +1 green path, -1 orange.\n"
    )
    exact = [e for e in table if "exact_expectation" in e]
    if exact:
        text += (
            "\nThe same greedy policies evaluated exactly (their return is a Gaussian mixture "
            "on the grid worlds):\n\n"
            "| env | agent | alpha | risk | seeds | E[S] | VaR[S] | U[S] | CVaR[S] | R_s |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n"
        )
        for e in exact:
            risk = e["risk"] if e["risk"] == "expectation" else f"{e['risk']}_{e['rho']:g}"
            text += (
                f"| {e['env'].split('/')[-1]} | {e['agent']} | {e['alpha']:g} | {risk} | "
                f"{len(e['seeds'])} | {_cell(e, 'exact_expectation')} | {_cell(e, 'exact_var')} | "
                f"{_cell(e, 'exact_utility')} | {_cell(e, 'exact_cvar')} | "
                f"{_cell(e, 'exact_risk_outcome')} |\n"
            )
    return text


def to_csv(table: list[dict[str, Any]]) -> str:
    keys = ["env", "agent", "alpha", "risk", "rho", "seeds", "green_seeds", "orange_seeds"]
    for metric in METRICS:
        keys += [metric, f"{metric}_std", f"paper_{metric}"]
    for metric in EXACT_METRICS:
        keys += [metric, f"{metric}_std"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys, extrasaction="ignore")
    writer.writeheader()
    for entry in table:
        writer.writerow({**entry, "seeds": " ".join(map(str, entry["seeds"]))})
    return buffer.getvalue()


def write_results(sweep_dir: Path, *more: Path, out: Path | None = None) -> str:
    """Write results.md and results.csv into ``out`` (by default ``sweep_dir``) from the jobs
    of ``sweep_dir`` and any ``more`` sweeps; returns the Markdown table."""
    rows = [row for folder in (sweep_dir, *more) for row in collect(folder)]
    if not rows:
        raise FileNotFoundError(f"no */eval.json below {', '.join(map(str, (sweep_dir, *more)))}")
    table = summarize(rows)
    markdown = to_markdown(table)
    out = Path(out or sweep_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(markdown)
    (out / "results.csv").write_text(to_csv(table))
    return markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", type=Path, nargs="+",
                        help="multirun folders holding one folder per job")
    parser.add_argument("--out", type=Path,
                        help="folder for results.md / results.csv (needed for several sweeps)")
    args = parser.parse_args(argv)
    if len(args.sweep_dirs) > 1 and args.out is None:
        print("error: --out: several sweeps pool into one table; name the folder to write it "
              "into (e.g. --out outputs/tables/agents)", file=sys.stderr)
        return 2
    try:
        print(write_results(*args.sweep_dirs, out=args.out))
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
