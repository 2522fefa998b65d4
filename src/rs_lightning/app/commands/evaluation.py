"""``rs-lightning evaluate``: the command line of
:mod:`rs_lightning.analysis.evaluation`, which computes what it prints and writes.

Every argument is checked, and every run loaded and checked, before the first evaluation: a
finished run only (:mod:`rs_lightning.app.finished_runs`), not one another process holds, and
a file of results already there is replaced only with ``--overwrite``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rs_lightning.analysis.evaluation import (
    check_episodes,
    check_setting,
    evaluate_at_setting,
    evaluate_run,
    parse_setting,
    setting_file,
    setting_keys,
)
from rs_lightning.analysis.frontier import seed_runs
from rs_lightning.analysis.runs import load_run
from rs_lightning.app.finished_runs import check_finished, holding


def split_arguments(items: list[str]) -> tuple[list[Path], dict[str, float]]:
    """Run folders and the setting: ``key=value`` whose key is ``alpha`` or a risk measure's
    parameter is a setting, whatever folders the working folder holds (give a folder of that
    name as ``./alpha=0.3``); anything else is a run folder."""
    keys = setting_keys()
    settings = [a for a in items if a.partition("=")[0] in keys and "=" in a]
    folders = [Path(a) for a in items if a not in settings]
    for folder in folders:
        if "=" in folder.name and not folder.is_dir():
            raise ValueError(f"{folder}: neither a run folder nor a setting (a setting is "
                             f"{' or '.join(sorted(keys))}=<number>)")
    if not folders:
        raise ValueError("no run folder given (a folder named like a setting: ./alpha=0.3)")
    return folders, parse_setting(settings)


def describe(path: Path) -> str:
    """What a file of results holds, for the message refusing to replace it."""
    try:
        summary = json.loads(path.read_text())
        return f"{summary['episodes']} episodes at update {summary['steps']}"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return "unreadable"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Evaluate finished runs from their last checkpoint, at their own setting "
                    "(eval.json, replaced only with --overwrite) or at another one "
                    "(eval_<setting>.json beside it).")
    parser.add_argument("run_dirs", nargs="+", metavar="run_dir_or_setting",
                        help="finished run folders (a run of several seeds: each seed), then "
                        "optionally a setting: alpha=0.3 rho=0.05 (alpha and the risk "
                        "measure's parameter by name; a folder named like one: ./alpha=0.3)")
    parser.add_argument("--episodes", type=int,
                        help="Monte Carlo episodes (default: the run's evaluation.episodes)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a file of results already there (eval.json, or "
                        "eval_<setting>.json); without it such a run is refused")
    args = parser.parse_args(argv)
    try:
        run_dirs, setting = split_arguments(args.run_dirs)
        if args.episodes is not None:
            check_episodes(args.episodes, "--episodes")
        folders = seed_runs(run_dirs)
        with holding(folders):
            # Every run checked before the first evaluation writes anything.
            jobs = []
            for folder in folders:
                check_finished(folder)
                run = load_run(folder)
                if setting:
                    check_setting(run, setting)
                    target = setting_file(folder, setting)
                else:
                    target = folder / "eval.json"
                if target.is_file() and not args.overwrite:
                    raise ValueError(f"{target} exists ({describe(target)}): give --overwrite "
                                     "to replace it" + ("" if setting else
                                                        ", or a setting to write beside it"))
                jobs.append((run, target))
            for run, target in jobs:
                replaced = f" (replaced {describe(target)})" if target.is_file() else ""
                if setting:
                    summary, _ = evaluate_at_setting(run, setting, args.episodes)
                else:
                    summary = evaluate_run(run.module, run.run_config, run.run_dir,
                                           steps=run.steps, env_steps=run.env_steps,
                                           episodes=args.episodes)
                note = ("" if not setting or run.run_config.agent.risk_conditioned
                        or summary["meaning"] == "the run's own setting" else
                        f" ({summary['meaning']})")
                print(f"{target}: E={summary['expectation']:.3f} VaR={summary['var']:.3f} "
                      f"CVaR={summary['cvar']:.3f} U={summary['utility']:.3f}{note}{replaced}")
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
