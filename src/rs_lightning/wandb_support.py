"""Starting W&B runs that never block: offline by default, offline again when online fails."""

from __future__ import annotations

import os
import sys
from typing import Any

# Seconds W&B may take to reach its server before a run falls back to offline logging.
ONLINE_INIT_TIMEOUT = 30.0


def init_wandb_run(mode: str = "offline", **init_kwargs: Any):
    """``wandb.init(**init_kwargs)`` in ``mode`` (``offline`` or ``online``).

    Online, a failure to reach the server or to authenticate is reported on stderr and the
    run is logged offline instead (``wandb sync`` uploads it later), so nothing is lost and
    nothing waits for input.
    """
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    if mode == "online":
        try:
            return wandb.init(
                mode="online", settings=wandb.Settings(init_timeout=ONLINE_INIT_TIMEOUT), **init_kwargs
            )
        except Exception as error:  # wandb raises several types for the same situation
            print(f"warning: W&B online logging failed ({type(error).__name__}: {error}); "
                  "logging offline instead", file=sys.stderr)
    return wandb.init(mode="offline", **init_kwargs)
