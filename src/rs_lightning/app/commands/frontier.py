"""``rs-lightning frontier``: the command line of
:mod:`rs_lightning.analysis.frontier`, which computes what it prints and writes.

Finished runs only, held while read (:mod:`rs_lightning.app.finished_runs`); every flag and
run is checked before the first episode, and refused in one line (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis.frontier import (
    ALPHA_FORM,
    frontier,
    parse_alphas,
    parse_parameters,
    seed_runs,
)
from rs_lightning.app.finished_runs import check_finished, holding


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Evaluate finished runs at a grid of alphas: frontier.json, .csv, .png.")
    parser.add_argument("run_dirs", type=Path, nargs="+")
    parser.add_argument("--alpha", default="0:1:21",
                        help=f"{ALPHA_FORM} (default 0:1:21)")
    parser.add_argument("--rho", help="comma list of the risk measure's parameter (rho for "
                        "VaR / CVaR, eta, ...); default: each run's own")
    parser.add_argument("--episodes", type=int, default=1000,
                        help="Monte Carlo episodes per seed and setting (default 1000)")
    parser.add_argument("--exact-only", action="store_true",
                        help="grid worlds: the exact figures alone, no Monte Carlo "
                        "(refused elsewhere)")
    parser.add_argument("--out", type=Path, help="output folder (default: the first run)")
    parser.add_argument("--wandb", choices=("offline", "online", "off"), default="offline",
                        help="log the table and figure to W&B (default offline)")
    args = parser.parse_args(argv)
    try:
        alphas = parse_alphas(args.alpha)
        parameters = parse_parameters(args.rho) if args.rho is not None else None
        folders = seed_runs(args.run_dirs)
        with holding(folders):
            for folder in folders:
                check_finished(folder)
            result = frontier(args.run_dirs, alphas, parameters, args.episodes,
                              args.out or args.run_dirs[0], args.exact_only, wandb=args.wandb)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = args.out or args.run_dirs[0]
    print(f"{result['agent']} on {result['env']}: {result['meaning']}")
    for entry in result["summary"]:
        prefix = "exact_" if "exact_expectation" in entry else ""
        paths = " ".join(f"{k}={v}" for k, v in entry.get("paths", {}).items())
        print(f"alpha={entry['alpha']:.3g} E={entry[prefix + 'expectation']['mean']:.3f} "
              f"VaR={entry[prefix + 'var']['mean']:.3f} "
              f"CVaR={entry[prefix + 'cvar']['mean']:.3f} {paths}")
    print(f"-> {out / 'frontier.json'}, frontier.csv, frontier.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
