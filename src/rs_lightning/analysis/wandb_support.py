"""Starting W&B runs that never block: offline by default, offline again when online fails."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from typing import Any

from rs_lightning.errors import ConfigError

# Seconds W&B may take to reach its server before a run falls back to offline logging.
ONLINE_INIT_TIMEOUT = 30.0


# The values W&B accepts for WANDB_MODE (any other, the empty one included, fails wandb.init).
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")


def check_wandb_environment(environ=os.environ) -> None:
    """ConfigError naming a W&B environment variable whose value W&B would refuse only once
    the run has started (W&B is not imported: the input checks stay quick)."""
    mode = environ.get("WANDB_MODE")
    if mode is not None and mode not in WANDB_MODES:
        raise ConfigError(
            "WANDB_MODE", f"the environment variable must be unset or one of "
            f"{', '.join(WANDB_MODES)}, got {mode!r} (logger.offline chooses the mode)")


def wandb_online_problem(timeout: float) -> str | None:
    """Why W&B cannot log online from here (None: it may). Never waits for input.

    Without credentials W&B would prompt for an API key on a terminal; an unreachable server
    would make it retry for ``init_timeout``. Both are seen here in well under a second.
    """
    import netrc
    from urllib.parse import urlparse

    import wandb

    url = os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url
    parsed = urlparse(url)
    host = parsed.hostname or ""
    has_key = bool(os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"))
    if not has_key:
        try:
            has_key = netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
        except (OSError, netrc.NetrcParseError):
            has_key = False
    if not has_key:
        return "no W&B credentials: run `wandb login` or set WANDB_API_KEY"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=min(timeout, 10.0)).close()
    except OSError as error:
        return f"cannot reach {url}: {error.strerror or error}"
    return None


def quiet_wandb_environment() -> None:
    """The environment W&B runs quietly in: its notices off (``WANDB_SILENT``), and a cache
    folder for its service's log where the user has none: without ``HOME`` (and
    ``XDG_CACHE_HOME``) the service logs every connection to stderr instead (18 lines a
    run). Values the user set are kept."""
    os.environ.setdefault("WANDB_SILENT", "true")
    if not os.environ.get("HOME") and not os.environ.get("XDG_CACHE_HOME"):
        os.environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(),
                                                    f"rs-lightning-cache-{os.getuid()}")


def init_wandb_run(mode: str = "offline", **init_kwargs: Any):
    """``wandb.init(**init_kwargs)`` in ``mode`` (``offline`` or ``online``).

    Online, a failure to reach the server or to authenticate is reported on stderr and the
    run is logged offline instead (``wandb sync`` uploads it later), so nothing is lost and
    nothing waits for input.
    """
    import wandb

    quiet_wandb_environment()
    problem = wandb_online_problem(ONLINE_INIT_TIMEOUT) if mode == "online" else None
    if problem is not None:
        print(f"warning: W&B online logging is not possible ({problem}); logging offline "
              "instead", file=sys.stderr)
    elif mode == "online":
        try:
            return wandb.init(
                mode="online", settings=wandb.Settings(init_timeout=ONLINE_INIT_TIMEOUT), **init_kwargs
            )
        except Exception as error:  # wandb raises several types for the same situation
            print(f"warning: W&B online logging failed ({type(error).__name__}: {error}); "
                  "logging offline instead", file=sys.stderr)
    return wandb.init(mode="offline", **init_kwargs)
