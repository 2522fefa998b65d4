"""``rs-lightning results`` and ``python -m rs_lightning.results``: the command line of
:mod:`rs_lightning.analysis.results`, which computes what it prints and writes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rs_lightning.analysis import results as _analysis
from rs_lightning.analysis.results import (
    write_results,
)


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
    try:
        print(write_results(*args.sweep_dirs, out=args.out))
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
