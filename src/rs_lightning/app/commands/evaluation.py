"""``rs-lightning evaluate``: the command line of
:mod:`rs_lightning.analysis.evaluation`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis.evaluation import (
    evaluate_at_setting,
    evaluate_run,
    parse_setting,
)
from rs_lightning.analysis.runs import load_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Re-evaluate finished runs from their last checkpoint.")
    parser.add_argument("run_dirs", nargs="+",
                        help="run folders, then optionally a setting: alpha=0.3 rho=0.05")
    parser.add_argument("--episodes", type=int, help="Monte Carlo episodes (default: the run's config)")
    args = parser.parse_args(argv)
    # A folder is a run even when its name holds '=' (every sweep job's does); any other
    # argument with '=' is a setting.
    run_dirs = [a for a in args.run_dirs if "=" not in a or Path(a).is_dir()]
    try:
        setting = parse_setting([a for a in args.run_dirs if a not in run_dirs])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    status = 0
    for run_dir in map(Path, run_dirs):
        try:
            run = load_run(run_dir)
            if setting:
                summary, path = evaluate_at_setting(run, setting, args.episodes)
                print(f"{path}: E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
                      f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}")
                continue
        except (FileNotFoundError, ValueError) as error:
            print(f"error: {run_dir}: {error}", file=sys.stderr)
            status = 2
            continue
        summary = evaluate_run(
            run.module, run.run_config, run_dir, steps=run.steps, env_steps=run.env_steps,
            episodes=args.episodes,
        )
        print(f"{run_dir}: E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
              f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
