"""One risk-conditioned run against one model per setting, world by world.

For each world, a risk-conditioned run (``agent.risk_conditioned=true``, several seeds) is
evaluated at each alpha of ``--alpha`` and set beside a sweep of runs trained separately at
those alphas (one job per alpha, the same seeds), each evaluated at its own alpha. Both go
through the same evaluation (``rs_lightning.frontier.evaluate_setting``: Monte Carlo E,
VaR_rho, CVaR_rho and, on the grid worlds, the exact figures and the path from the start), so
the points differ only by how the policy was trained. The training time of each approach is
the sum of its runs' ``train_seconds`` (the last record of ``eval_history.jsonl``: wall time
of training, evaluations excluded; the members of a ``parallel_seeds`` run share it).

    python docs/conditioned_vs_per_setting.py \\
        --world cliff_walking <conditioned run> <per-setting sweep> \\
        --world risky_grid_world <conditioned run> <per-setting sweep> \\
        --alpha 0,0.25,0.5,0.75,1 --episodes 1000 \\
        --out docs/figures/conditioned_vs_per_setting.png --json comparison.json

It prints the README table (Markdown) and writes the figure: per world, E against CVaR_rho
(exact on the grid worlds, Monte Carlo elsewhere), a point per alpha and approach with the
seeds' standard deviation as error bars, and the conditioned run's whole frontier as a line
when ``<conditioned run>/frontier.json`` exists (``python -m rs_lightning.frontier <run>
--alpha 0:1:21``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rs_lightning.files import read_jsonl
from rs_lightning.frontier import evaluate_setting, parse_alphas, seed_runs
from rs_lightning.plots import COLORS, _pyplot, _save
from rs_lightning.runs import load_run

APPROACHES = ("conditioned", "per-setting")


def train_seconds(run_dir: Path) -> float:
    """The training wall time of one run (of all its stacked seeds at once)."""
    member = seed_runs([run_dir])[0]
    records = [r for r in read_jsonl(member / "eval_history.jsonl") if "train_seconds" in r]
    if not records:
        raise ValueError(f"{member}/eval_history.jsonl records no train_seconds: train with "
                         "evaluation.every_n_steps > 0")
    return float(records[-1]["train_seconds"])


def per_setting_jobs(sweep_dir: Path) -> list[Path]:
    """The jobs of a sweep: its folders holding a run (``config.yaml`` or ``seed_*/``)."""
    return sorted(d for d in sweep_dir.iterdir()
                  if d.is_dir() and ((d / "config.yaml").is_file() or any(d.glob("seed_*"))))


def compare_world(conditioned: Path, sweep: Path, alphas: list[float],
                  episodes: int) -> dict[str, Any]:
    """Every seed of both approaches at every alpha: rows of evaluate_setting figures."""
    rows = []
    for member in seed_runs([conditioned]):
        run = load_run(member)
        for alpha in alphas:
            rows.append({"approach": "conditioned",
                         **evaluate_setting(run, alpha, None, episodes)})
    jobs = per_setting_jobs(sweep)
    for job in jobs:
        for member in seed_runs([job]):
            run = load_run(member)
            alpha = float(run.settings.train.alpha)
            if not any(abs(alpha - a) < 1e-9 for a in alphas):
                continue
            rows.append({"approach": "per-setting",
                         **evaluate_setting(run, alpha, None, episodes)})
    seconds = {"conditioned": train_seconds(conditioned),
               "per-setting": sum(train_seconds(job) for job in jobs)}
    settings = load_run(seed_runs([conditioned])[0]).settings
    return {"conditioned_run": str(conditioned), "per_setting_sweep": str(sweep),
            "per_setting_jobs": [str(j) for j in jobs], "train_seconds": seconds,
            "updates_per_run": int(settings.train.trainer.max_steps),
            "env": settings.train.env.id, "risk": settings.utility.risk,
            "episodes": episodes, "rows": rows}


def stats(rows: list[dict[str, Any]], name: str) -> tuple[float, float]:
    values = [r[name] for r in rows if name in r]
    return (float(np.mean(values)), float(np.std(values))) if values else (np.nan, np.nan)


def group(rows: list[dict[str, Any]], approach: str, alpha: float) -> list[dict[str, Any]]:
    return [r for r in rows if r["approach"] == approach and abs(r["alpha"] - alpha) < 1e-9]


def path_code(rows: list[dict[str, Any]]) -> str:
    """The seeds' paths, one letter each in seed order (g green, o orange, n neither)."""
    return "".join(r["path"][0] for r in sorted(rows, key=lambda r: r["seed"]))


def markdown(worlds: dict[str, dict[str, Any]], alphas: list[float]) -> str:
    """The README table: per world and alpha, each approach's figures (mean over seeds, with
    the seeds' paths on the grid worlds), then the total training time of each approach."""
    header = ("| world | alpha | conditioned: E, VaR, CVaR (paths) "
              "| per-setting: E, VaR, CVaR (paths) |")
    lines = [header, "|---|---|---|---|"]
    for world, result in worlds.items():
        exact = any("path" in r for r in result["rows"])
        prefix = "exact_" if exact else ""
        for alpha in alphas:
            cells = []
            for approach in APPROACHES:
                rows = group(result["rows"], approach, alpha)
                if not rows:
                    cells.append("(not run)")
                    continue
                figures = ", ".join(f"{stats(rows, prefix + m)[0]:.3f}"
                                    for m in ("expectation", "var", "cvar"))
                cells.append(f"{figures} (`{path_code(rows)}`)" if exact else figures)
            lines.append(f"| {world} | {alpha:g} | {cells[0]} | {cells[1]} |")
        seconds = result["train_seconds"]
        lines.append(f"| {world} | training | {seconds['conditioned']:.0f} s (1 run) | "
                     f"{seconds['per-setting']:.0f} s ({len(result['per_setting_jobs'])} runs) |")
    return "\n".join(lines)


def plot(worlds: dict[str, dict[str, Any]], alphas: list[float], out: Path) -> None:
    """Per world, E against CVaR: a point per alpha and approach (seeds' std as error bars),
    the conditioned run's 21-alpha frontier as a line when its frontier.json exists."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(worlds), figsize=(4.6 * len(worlds), 4.0), squeeze=False)
    for ax, (world, result) in zip(axes[0], worlds.items()):
        exact = any("path" in r for r in result["rows"])
        prefix = "exact_" if exact else ""
        frontier_file = Path(result["conditioned_run"]) / "frontier.json"
        if frontier_file.is_file():
            summary = sorted(json.loads(frontier_file.read_text())["summary"],
                             key=lambda s: s["alpha"])
            points = [s for s in summary if prefix + "cvar" in s]
            ax.plot([s[prefix + "cvar"]["mean"] for s in points],
                    [s[prefix + "expectation"]["mean"] for s in points], color=COLORS[0],
                    alpha=0.35, lw=1, label=f"conditioned, {len(points)} alphas")
        for colour, marker, approach in zip(COLORS, ("o", "s"), APPROACHES):
            label = approach
            for alpha in alphas:
                rows = group(result["rows"], approach, alpha)
                if not rows:
                    continue
                (x, dx), (y, dy) = stats(rows, prefix + "cvar"), stats(rows, prefix + "expectation")
                ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=marker, color=colour, ms=6,
                            mfc="none" if approach == "per-setting" else colour, capsize=2,
                            label=label)
                label = None
                ax.annotate(f"{alpha:g}", (x, y), textcoords="offset points",
                            xytext=(5, 4 if approach == "conditioned" else -10), fontsize=7,
                            color=colour)
        rho = result["rows"][0]["rho"]
        kind = "exact" if exact else "Monte Carlo"
        seconds = result["train_seconds"]
        ax.set(xlabel=f"CVaR_{rho:g} of S ({kind})", ylabel="E[S]",
               title=f"{world}\ntraining {seconds['conditioned']:.0f} s vs "
                     f"{seconds['per-setting']:.0f} s")
        ax.legend(fontsize=7)
    _save(fig, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", nargs=3, action="append", required=True,
                        metavar=("NAME", "CONDITIONED_RUN", "PER_SETTING_SWEEP"))
    parser.add_argument("--alpha", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--out", type=Path,
                        default=Path("docs/figures/conditioned_vs_per_setting.png"))
    parser.add_argument("--json", type=Path, help="also write every row here")
    args = parser.parse_args(argv)
    alphas = parse_alphas(args.alpha)
    worlds = {name: compare_world(Path(cond), Path(sweep), alphas, args.episodes)
              for name, cond, sweep in args.world}
    if args.json:
        args.json.write_text(json.dumps(worlds, indent=1))
    plot(worlds, alphas, args.out)
    print(markdown(worlds, alphas))
    return 0


if __name__ == "__main__":
    sys.exit(main())
