"""The command lines of the tools that read runs, one module each (``rs-lightning TOOL``)."""

from __future__ import annotations

import sys


def left_out_status(what: str, damaged: list[str]) -> int:
    """The exit status of a tool whose ``what`` (table, report) leaves out the runs whose
    files could not be read (each named in a warning above): 1, with one line, if any."""
    if not damaged:
        return 0
    print(f"error: the {what} leaves out {len(damaged)} run(s) whose files could not be read "
          "(listed above)", file=sys.stderr)
    return 1
