"""``rs-lightning results``: the command line of
:mod:`rs_lightning.analysis.results`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis import results as _analysis
from rs_lightning.analysis.results import collect_all, no_runs_message, write_table
from rs_lightning.app.commands import left_out_status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=_analysis.__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", type=Path, nargs="+",
                        help="multirun folders holding one folder per job, or run folders")
    parser.add_argument("--out", type=Path,
                        help="folder for results.md / results.csv (needed for several sweeps)")
    args = parser.parse_args(argv)
    if len(args.sweep_dirs) > 1 and args.out is None:
        print("error: --out: several sweeps pool into one table; name the folder to write it "
              "into (e.g. --out outputs/tables/agents)", file=sys.stderr)
        return 2
    rows = collect_all(*args.sweep_dirs)
    if not rows:
        print(f"error: {no_runs_message(*args.sweep_dirs)}", file=sys.stderr)
        return 2
    out = Path(args.out or args.sweep_dirs[0])
    try:
        print(write_table(rows, out)[1])
    except OSError as error:  # a read-only or full output folder
        print(f"error: cannot write the table into {out}: {error.strerror or error}",
              file=sys.stderr)
        return 2
    return left_out_status("table", rows.damaged)


if __name__ == "__main__":
    raise SystemExit(main())
