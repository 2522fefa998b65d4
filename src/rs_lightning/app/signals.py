"""SIGTERM and SIGINT to the tools: one line, the documented exit status, no child left.

A tool that works in its own process (``evaluate``, ``frontier``, ``report``, ...) stops at
once with :class:`Stopped`, which the console turns into one line and status 143 (SIGTERM)
or 130 (SIGINT), the statuses of ``python train.py`` (rs_lightning.errors); every file a tool
writes is written whole, so the same command simply does the work again.

A tool that launches a child (``benchmark`` runs ``train.py -m``) starts it in a process
group of its own and passes each signal on to the whole group (the child, and any worker
processes a launcher started), so the runs save their state and stop as ``train.py`` does
on its own; a child still there after :data:`CHILD_GRACE_SECONDS`, or after a second signal,
is killed. A hang-up (SIGHUP, the terminal closed) is passed on as SIGTERM, unless it is
ignored (``nohup``): the child no longer shares the terminal's process group, which would
have delivered it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from typing import Iterator

from rs_lightning.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long a child may take to save its state and stop after the signal is passed on
# (train.py finishes the update under way: seconds) before it is killed.
CHILD_GRACE_SECONDS = 60.0


def exit_status(signum: int) -> int:
    """The exit status of a command stopped by ``signum``: 130 for SIGINT, 143 for SIGTERM,
    128 + the number otherwise (what a shell reports)."""
    return {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}.get(
        signum, 128 + int(signum))


def child_status(returncode: int) -> int:
    """A child's exit status as a shell reports it (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, so that a tool's ``except Exception`` (a
    damaged file, a failed plot) does not take it for an error of its own."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.status = exit_status(signum)
        super().__init__(self.name)


def _install(handler, signums) -> dict:
    """Install ``handler`` for ``signums`` (main thread only, where Python runs handlers);
    returns the handlers to restore."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, handler) for signum in signums}


def _restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise :class:`Stopped`."""

    def stop(signum, frame) -> None:
        raise Stopped(signum)

    previous = _install(stop, STOP_SIGNALS)
    try:
        yield
    finally:
        _restore(previous)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to the process group; False when none of it is left."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a member that changed user: the others got it
        return True


def run_child(command: list[str], grace: float = CHILD_GRACE_SECONDS
              ) -> tuple[int, int | None]:
    """Run ``command`` in a process group of its own, passing SIGTERM and SIGINT (and SIGHUP,
    as SIGTERM) on to the group; returns its exit status (a shell's: 143 for a child
    killed by SIGTERM) and the signal that stopped it (None when none came).

    After a signal, the group has ``grace`` seconds to end (the child first, then any
    process it started); what is left then, or at a second signal, is killed."""
    received: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum, frame) -> None:
        if child is not None:
            _signal_group(child.pid, signal.SIGKILL if received else
                          signal.SIGTERM if signum == signal.SIGHUP else signum)
        received.append(signum)

    signums = list(STOP_SIGNALS)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup: stay ignored
        signums.append(signal.SIGHUP)
    previous = _install(forward, signums)
    try:
        child = subprocess.Popen(command, start_new_session=True)
        if received:  # a signal before the child existed
            _signal_group(child.pid, signal.SIGTERM)
        deadline = None
        while True:
            try:
                returncode = child.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if received and deadline is None:
                    deadline = time.monotonic() + grace
                if deadline is not None and time.monotonic() > deadline:
                    _signal_group(child.pid, signal.SIGKILL)
        if received:
            # The child's own children (a launcher's workers) share its group: they end too.
            deadline = deadline or time.monotonic() + grace
            while _signal_group(child.pid, 0) and time.monotonic() < deadline:
                time.sleep(0.1)
            _signal_group(child.pid, signal.SIGKILL)
    finally:
        _restore(previous)
    return child_status(returncode), (received[0] if received else None)
