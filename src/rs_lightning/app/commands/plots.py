"""``rs-lightning plots``: the command line of
:mod:`rs_lightning.analysis.plots`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis import plots as _analysis
from rs_lightning.analysis.plots import (
    CURVE_AXES,
    CURVE_METRICS,
    METRIC_LABELS,
    check_distribution_state,
    parse_cell,
    plot_learning_curves,
    plot_policy,
    plot_return_distributions,
    read_config,
)
from rs_lightning.errors import ConfigError


def _policy_command(args) -> int:
    import json

    table_path = args.run_dir / "policy.json"
    config = read_config(args.run_dir)
    if not table_path.is_file() or config is None:
        print(f"error: {args.run_dir} has no policy.json and config.yaml (a grid-world run "
              "writes them when it finishes)", file=sys.stderr)
        return 2
    out = args.out or args.run_dir / "policy.png"
    plot_policy(json.loads(table_path.read_text()), config["env"]["id"], out)
    print(f"figure: {out}")
    return 0


def _distributions_command(args) -> int:
    from rs_lightning.analysis.runs import load_run

    try:
        cell = parse_cell(args.cell)
        run = load_run(args.run_dir)
        check_distribution_state(run, cell)
    except (FileNotFoundError, ValueError) as error:  # missing, not a checkpoint, no such state
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = args.out or args.run_dir / f"distributions_{cell[0]}_{cell[1]}.png"
    report = plot_return_distributions(run, cell, out)
    for entry in report["actions"]:
        w1 = f"  W1 to exact {entry['wasserstein_1']:.3f}" if "wasserstein_1" in entry else ""
        mark = " <- chosen" if entry["action"] == report["chosen_action"] else ""
        name = f" ({entry['name']})" if "name" in entry else ""
        print(f"action {entry['action']}{name}: Q={entry['q']:.3f} R={entry['risk']:.3f} "
              f"U={entry['utility']:.3f}{w1}{mark}")
    print(f"figure: {out}")
    return 0


def _curves_command(args) -> int:
    out = args.out or args.sweep_dir / "learning_curves.png"
    try:
        metrics = tuple((name, METRIC_LABELS[name]) for name in args.metrics) or CURVE_METRICS
        seeds = plot_learning_curves(args.sweep_dir, out, metrics, x_axis=args.x, **(
            {"title": args.title} if args.title else {}))
    except (FileNotFoundError, ConfigError) as error:  # missing, or not a checkpoint
        print(f"error: {error}", file=sys.stderr)
        return 2
    for env, per_agent in seeds.items():
        print(f"{env}: " + ", ".join(f"{agent} {n} seeds" for agent, n in per_agent.items()))
    print(f"figure: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_analysis.__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    distributions = commands.add_parser("distributions", help="learned Z(s, a) of one state of a run")
    distributions.add_argument("run_dir", type=Path)
    distributions.add_argument("--cell", default="1,0", help="the state as x,y (default: the start 1,0)")
    distributions.add_argument("--out", type=Path, help="image (default: <run>/distributions_<x>_<y>.png)")
    distributions.set_defaults(handler=_distributions_command)
    curves = commands.add_parser("curves", help="R_s, E, VaR, U over training, over a sweep's seeds")
    curves.add_argument("sweep_dir", type=Path)
    curves.add_argument("--out", type=Path, help="image (default: <sweep>/learning_curves.png)")
    curves.add_argument("--metrics", nargs="+", default=(), choices=sorted(METRIC_LABELS),
                        help="the rows (default: R_s, E, VaR, U)")
    curves.add_argument("--x", choices=sorted(CURVE_AXES), default="updates",
                        help="the x axis (default: gradient updates)")
    curves.add_argument("--title", help="the figure's title")
    curves.set_defaults(handler=_curves_command)
    policy = commands.add_parser("policy", help="a grid-world run's greedy policy as arrows")
    policy.add_argument("run_dir", type=Path)
    policy.add_argument("--out", type=Path, help="image (default: <run>/policy.png)")
    policy.set_defaults(handler=_policy_command)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    raise SystemExit(main())
