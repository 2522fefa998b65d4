"""One risk-conditioned run against one model per setting, world by world.

For each world, a risk-conditioned run (``agent.risk_conditioned=true``, several seeds) is
evaluated at each alpha of ``--alpha`` and set beside a sweep of runs trained separately at
those alphas (one job per alpha, the same seeds), each evaluated at its own alpha; several
conditioned runs of a world (e.g. of two budgets) each get their own points. All go through
the same evaluation (``rs_lightning.analysis.frontier.evaluate_setting``: Monte Carlo E,
VaR_rho, CVaR_rho and, on the grid worlds, the exact figures and the path from the start), so
the points differ only by how the policy was trained. The training time of each approach is
the sum of its runs' ``train_seconds`` (kept in each run's last checkpoint: wall time of
training, evaluations excluded; the members of a ``parallel_seeds`` run share it).

    python docs/conditioned_vs_per_setting.py \\
        --world cliff_walking <per-setting sweep> <conditioned run> \\
        --world risky_grid_world <per-setting sweep> <conditioned run> [<conditioned run> ...] \\
        --episodes 1000 \\
        --out docs/figures/conditioned_vs_per_setting.png --json comparison.json

It prints the table of docs/guides/conditioning.md (Markdown) and writes the figure: per world, E against VaR_rho
(exact on the grid worlds, Monte Carlo elsewhere), a point per alpha and approach with the
seeds' standard deviation as error bars, and each conditioned run's whole frontier as a line
when its ``frontier.json`` exists (``rs-lightning frontier <run>
--alpha 0:1:21``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rs_lightning.analysis.frontier import evaluate_setting, seed_runs
from rs_lightning.analysis.plots import COLORS, _pyplot, _save
from rs_lightning.analysis.runs import load_run
from rs_lightning.engine.checkpoints import read_checkpoint

MARKERS = ("s", "o", "^", "v", "D")


def last_checkpoint(run_dir: Path) -> dict[str, Any]:
    return read_checkpoint(run_dir / "checkpoints" / "last.ckpt", "run")


def train_seconds(run_dir: Path) -> float:
    """The training wall time of one run (of all its stacked seeds at once)."""
    return float(last_checkpoint(run_dir)["rs_lightning"]["train_seconds"])


def updates(run_dir: Path) -> int:
    """The updates the run made (its budget, or fewer where it was stopped)."""
    return int(last_checkpoint(run_dir)["global_step"])


def per_setting_jobs(sweep_dir: Path) -> list[Path]:
    """The jobs of a sweep: its folders holding a run (``config.yaml`` or ``seed_*/``)."""
    return sorted(d for d in sweep_dir.iterdir()
                  if d.is_dir() and ((d / "config.yaml").is_file() or any(d.glob("seed_*"))))


def per_setting_rows(source: Path, episodes: int) -> tuple[list[dict], dict[str, Any]]:
    """The per-setting side: each seed of each job of a sweep at its own alpha, or the rows
    of a reference file (the means over seeds of a sweep whose run folders were not kept)."""
    if source.suffix == ".json":
        reference = json.loads(source.read_text())
        rows = [{"approach": "per-setting", "seed": None, **row} for row in reference["rows"]]
        info = {"runs": [str(source)], "updates": reference["updates"],
                "train_seconds": reference.get("train_seconds"), "means_only": True,
                "source": reference.get("source", "")}
        return rows, info
    jobs = per_setting_jobs(source)
    rows = []
    for job in jobs:
        for member in seed_runs([job]):
            run = load_run(member)
            rows.append({"approach": "per-setting",
                         **evaluate_setting(run, float(run.settings.train.alpha), None,
                                            episodes)})
    info = {"runs": [str(j) for j in jobs], "updates": updates(jobs[0]),
            "train_seconds": sum(train_seconds(job) for job in jobs)}
    return rows, info


def compare_world(per_setting: Path, conditioned_runs: list[Path],
                  episodes: int) -> dict[str, Any]:
    """Every seed of every approach at the alphas of the per-setting runs: rows of
    evaluate_setting figures, each with its ``approach`` (``per-setting``, or ``conditioned
    <updates>``)."""
    rows, info = per_setting_rows(per_setting, episodes)
    approaches: dict[str, dict[str, Any]] = {"per-setting": info}
    alphas = sorted({row["alpha"] for row in rows})
    for conditioned in conditioned_runs:
        name = f"conditioned {updates(conditioned)}"
        approaches[name] = {"runs": [str(conditioned)], "updates": updates(conditioned),
                            "train_seconds": train_seconds(conditioned)}
        for member in seed_runs([conditioned]):
            run = load_run(member)
            for alpha in alphas:
                rows.append({"approach": name, **evaluate_setting(run, alpha, None, episodes)})
    settings = load_run(seed_runs([conditioned_runs[0]])[0]).settings
    return {"env": settings.train.env.id, "risk": settings.utility.risk, "alphas": alphas,
            "rho": float(settings.utility.params.get("rho", settings.train.rho)),
            "episodes": episodes, "approaches": approaches, "rows": rows}


def stats(rows: list[dict[str, Any]], name: str) -> tuple[float, float]:
    values = [r[name] for r in rows if name in r]
    return (float(np.mean(values)), float(np.std(values))) if values else (np.nan, np.nan)


def group(rows: list[dict[str, Any]], approach: str, alpha: float) -> list[dict[str, Any]]:
    return [r for r in rows if r["approach"] == approach and abs(r["alpha"] - alpha) < 1e-9]


def path_code(rows: list[dict[str, Any]]) -> str:
    """The seeds' paths, one letter each in seed order (g green, o orange, n neither)."""
    return "".join(r["path"][0] for r in sorted(rows, key=lambda r: r["seed"]) if "path" in r)


def markdown(worlds: dict[str, dict[str, Any]]) -> str:
    """The table of docs/guides/conditioning.md: per world and alpha, each approach's figures (mean over seeds; exact
    on the grid worlds, with the seeds' paths), then each approach's total training time."""
    names = list(dict.fromkeys(a for result in worlds.values() for a in result["approaches"]))
    lines = ["| world | alpha | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for world, result in worlds.items():
        exact = any("path" in r for r in result["rows"])
        prefix = "exact_" if exact else ""
        for alpha in result["alphas"]:
            cells = []
            for approach in names:
                rows = group(result["rows"], approach, alpha)
                if not rows:
                    cells.append("")
                    continue
                figures = ", ".join("—" if np.isnan(v := stats(rows, prefix + m)[0]) else
                                    f"{v:.2f}" for m in ("expectation", "var", "cvar"))
                paths = path_code(rows)
                cells.append(f"{figures} `{paths}`" if paths else figures)
            lines.append(f"| {world} | {alpha:g} | " + " | ".join(cells) + " |")
        cells = []
        for approach in names:
            info = result["approaches"].get(approach)
            if info is None:
                cells.append("")
                continue
            seconds = info["train_seconds"]
            runs = len(info["runs"]) if not info.get("means_only") else len(result["alphas"])
            cells.append(("not recorded" if seconds is None else f"**{seconds:.0f} s**")
                         + f" ({runs} x {info['updates']:,} updates)")
        lines.append(f"| {world} | training | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(worlds: dict[str, dict[str, Any]], out: Path) -> None:
    """Per world, E against VaR: a point per alpha and approach (seeds' std as error bars,
    each seed faint), each conditioned run's frontier over its ``frontier.json`` alphas as a
    line."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(worlds), figsize=(5.0 * len(worlds), 4.4), squeeze=False)
    for ax, (world, result) in zip(axes[0], worlds.items()):
        exact = any("path" in r for r in result["rows"])
        prefix = "exact_" if exact else ""
        for k, (approach, info) in enumerate(result["approaches"].items()):
            colour, marker = COLORS[k % len(COLORS)], MARKERS[k % len(MARKERS)]
            frontier_file = Path(info["runs"][0]) / "frontier.json"
            if approach != "per-setting" and frontier_file.is_file():
                summary = sorted(json.loads(frontier_file.read_text())["summary"],
                                 key=lambda s: s["alpha"])
                points = [s for s in summary if prefix + "var" in s]
                ax.plot([s[prefix + "var"]["mean"] for s in points],
                        [s[prefix + "expectation"]["mean"] for s in points], color=colour,
                        alpha=0.35, lw=1)
            seconds = info["train_seconds"]
            label = f"{approach} ({'time not recorded' if seconds is None else f'{seconds:.0f} s'})"
            for alpha in result["alphas"]:
                rows = group(result["rows"], approach, alpha)
                if not rows:
                    continue
                if not info.get("means_only"):  # each seed, faint: the spread may be bimodal
                    ax.scatter([r[prefix + "var"] for r in rows],
                               [r[prefix + "expectation"] for r in rows], s=8, marker=marker,
                               color=colour, alpha=0.3, linewidths=0)
                (x, dx), (y, dy) = stats(rows, prefix + "var"), stats(rows, prefix + "expectation")
                ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=marker, color=colour, ms=6,
                            mfc="none" if approach == "per-setting" else colour, capsize=2,
                            label=label)
                label = None
                ax.annotate(f"{alpha:g}", (x, y), textcoords="offset points",
                            xytext=(5, 4 - 8 * k), fontsize=7, color=colour)
        kind = "exact" if exact else "Monte Carlo"
        ax.set(xlabel=f"VaR_{result['rho']:g} of S ({kind})", ylabel=f"E[S] ({kind})", title=world)
        ax.legend(fontsize=7, title="approach (training time)", title_fontsize=7)
    fig.suptitle("one conditioned run vs one run per alpha (labels: alpha; bars: std "
                 "over seeds; faint: each seed)", fontsize=9)
    _save(fig, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", nargs="+", action="append", default=[],
                        metavar="NAME PER_SETTING CONDITIONED_RUN",
                        help="a world's name, its per-setting sweep (or reference .json), its "
                             "conditioned run(s)")
    parser.add_argument("--load", type=Path, action="append", default=[],
                        help="worlds evaluated before (a --json file), shown again")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--out", type=Path,
                        default=Path("docs/figures/conditioned_vs_per_setting.png"))
    parser.add_argument("--json", type=Path, help="also write every row here")
    args = parser.parse_args(argv)
    if any(len(world) < 3 for world in args.world):
        parser.error("--world: a name, a per-setting source and at least one conditioned run")
    worlds = {}
    for saved in args.load:
        worlds.update(json.loads(saved.read_text()))
    for name, per_setting, *conditioned in args.world:
        worlds[name] = compare_world(Path(per_setting), [Path(c) for c in conditioned],
                                     args.episodes)
    if not worlds:
        parser.error("give --world or --load")
    if args.json:
        args.json.write_text(json.dumps(worlds, indent=1))
    plot(worlds, args.out)
    print(markdown(worlds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
