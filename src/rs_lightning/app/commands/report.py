"""``rs-lightning report``: the command line of
:mod:`rs_lightning.analysis.report`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from rs_lightning.analysis import report as _analysis
from rs_lightning.analysis.report import (
    build_report,
    create_wandb_report,
    log_report_to_wandb,
    sync_to_wandb,
)
from rs_lightning.analysis.wandb_support import (
    ONLINE_INIT_TIMEOUT,
    wandb_online_problem,
)
from rs_lightning.app.commands import left_out_status


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=_analysis.__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path,
                        help="a multirun folder holding one folder per job, or a run folder")
    parser.add_argument("--out", type=Path, help="output folder (default: <sweep>/report)")
    parser.add_argument("--wandb", choices=("offline", "online", "off"), default="offline",
                        help="log the table and figures to a W&B summary run (default: offline)")
    parser.add_argument("--wandb-report", action="store_true",
                        help="online only: also create a W&B Report of the sweep")
    parser.add_argument("--sync", action="store_true",
                        help="upload the sweep's offline W&B training runs, then the report run, "
                             "then create the W&B Report (needs a W&B login)")
    args = parser.parse_args(argv)
    if args.wandb_report and args.wandb != "online":
        print("error: --wandb-report: needs --wandb online (a W&B Report lives on the server)",
              file=sys.stderr)
        return 2
    if args.sync:
        if args.wandb == "off" or args.wandb_report:
            print("error: --sync: logs, uploads and creates the Report itself; leave out "
                  "--wandb and --wandb-report", file=sys.stderr)
            return 2
        problem = wandb_online_problem(ONLINE_INIT_TIMEOUT)
        if problem is not None:
            print(f"error: --sync: {problem}", file=sys.stderr)
            return 2
    try:
        report = build_report(args.sweep_dir, args.out)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a read-only or full output folder
        print(f"error: cannot write the report into {args.out or args.sweep_dir / 'report'}: "
              f"{error.strerror or error}", file=sys.stderr)
        return 2
    print(report.markdown)
    for figure in report.figures:
        print(f"figure: {figure.path}")
    print(f"report: {report.html_path}")
    status = left_out_status("report", report.damaged)
    if args.sync:
        return sync_to_wandb(report) or status
    if args.wandb != "off":
        folder, logged = log_report_to_wandb(report, args.wandb)
        print(f"W&B summary run ({logged}): {folder}")
        if args.wandb_report and logged != "online":
            print("warning: the W&B Report was not created: the summary run was logged "
                  f"offline; `rs-lightning report {report.sweep_dir} --sync` uploads "
                  "the runs and creates it", file=sys.stderr)
            return 1
    if args.wandb_report:
        return create_wandb_report(report) or status
    return status


if __name__ == "__main__":
    raise SystemExit(main())
