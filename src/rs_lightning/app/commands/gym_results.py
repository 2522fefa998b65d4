"""``rs-lightning gym-results``: the command line of
:mod:`rs_lightning.analysis.gym_results`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from rs_lightning.analysis import gym_results as _analysis
from rs_lightning.analysis.evaluation import check_episodes
from rs_lightning.analysis.gym_results import (
    first_reaching,
    heatmap_panel,
    plot_heatmaps,
    plot_tradeoff,
    read_history,
    tradeoff_points,
)
from rs_lightning.analysis.results import (
    collect,
    group_by_setting,
    label_keys,
    settings_of,
)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=_analysis.__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    reach = commands.add_parser("reach", help="first evaluation reaching a mean return")
    reach.add_argument("run_dirs", type=Path, nargs="+")
    reach.add_argument("--threshold", type=float, default=475.0)
    trade = commands.add_parser("tradeoff", help="E against VaR over alpha of a sweep")
    trade.add_argument("sweep_dir", type=Path)
    trade.add_argument("--out", type=Path, default=None)
    heat = commands.add_parser("heatmap", help="cells visited by greedy cliff-walking policies")
    heat.add_argument("run_dirs", type=Path, nargs="+")
    heat.add_argument("--episodes", type=int, default=200)
    heat.add_argument("--out", type=Path, default=Path("cliff_heatmap.png"))
    args = parser.parse_args(argv)

    if args.command == "reach":
        print("run | update | env steps | mean return | train seconds")
        for run_dir in args.run_dirs:
            record = first_reaching(read_history(run_dir), args.threshold)
            if record is None:
                print(f"{run_dir} | not reached | | max {max(r['expectation'] for r in read_history(run_dir)):.1f}")
            else:
                seconds = record.get("train_seconds")
                print(f"{run_dir} | {record['step']} | {record['env_steps']} | "
                      f"{record['expectation']:.1f} | "
                      + ("(not recorded)" if seconds is None else f"{seconds:.0f}"))
        return 0
    if args.command == "tradeoff":

        # One point per alpha: the runs may differ in alpha only (as rows of the results
        # table), and a run repeating the setting and seed of another counts once.
        groups = group_by_setting(collect(args.sweep_dir), settings_of, lambda row: row["seed"])
        others = [name for key, name in label_keys([g.settings for g in groups], named=()).items()
                  if key != "alpha"]
        if others:
            print(f"error: tradeoff: the runs differ in more than alpha ({', '.join(others)}); "
                  "give it a sweep over alpha only", file=sys.stderr)
            return 2
        points = tradeoff_points([row for group in groups for row in group.runs])
        out = args.out or args.sweep_dir / "tradeoff.png"
        plot_tradeoff(points, out)
        for p in points:
            print(f"alpha {p['alpha']:g} ({p['seeds']} seeds): E {p['expectation']:.3f} "
                  f"± {p['expectation_std']:.3f}, VaR {p['var']:.3f} ± {p['var_std']:.3f}; "
                  f"medians E {p['expectation_quartiles'][1]:.3f}, VaR {p['var_quartiles'][1]:.3f}")
        print(f"-> {out}")
        return 0
    try:
        check_episodes(args.episodes, "--episodes")
        panels = [heatmap_panel(run_dir, args.episodes) for run_dir in args.run_dirs]
    except (FileNotFoundError, ValueError) as error:  # not a run, not cliff walking, damaged
        print(f"error: {error}", file=sys.stderr)
        return 2
    plot_heatmaps(panels, args.out)
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
