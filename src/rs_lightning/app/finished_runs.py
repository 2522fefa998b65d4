"""The run folders that ``evaluate`` and ``frontier`` read: finished runs, held while read.

A complete ``eval.json`` (``members.json`` for a run of several seeds) marks a run finished,
and the training command skips a finished run. A tool that wrote ``eval.json`` into an
interrupted run would end it at its checkpoint's step for good, and one that read a run while
``train.py`` writes it would evaluate a checkpoint of the middle of training. So these tools
take only finished runs, refuse the others in one line (exit 2), and hold each run's folder
(:class:`~rs_lightning.app.run_folders.RunFolderLock`) while they read and write beside it:
a training command started meanwhile stops at once, naming them. The Python API
(``rs_lightning.load_agent``) reads any checkpoint and writes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rs_lightning.app.run_folders import (
    FAILED,
    FolderRefused,
    RunFolderLock,
    finished_summary,
)
from rs_lightning.engine.checkpoints import newest_checkpoint


def run_root(run_dir: Path) -> Path:
    """The folder that holds a run's lock and its finished mark: the run's own, or for a seed
    of a several-seed run (``<run>/seed_<s>/``) the run's."""
    run_dir = Path(run_dir)
    if run_dir.name.startswith("seed_") and (run_dir.parent / "config.yaml").is_file():
        return run_dir.parent
    return run_dir


def check_finished(run_dir: Path) -> None:
    """FolderRefused in one line unless the run of ``run_dir`` (a run, or a seed of a
    several-seed run) has finished: interrupted (checkpoints, no eval.json) or failed runs are
    the training command's to resume."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{run_dir / 'config.yaml'} not found: is this a run folder?")
    root = run_root(run_dir)
    if finished_summary(root) is not None:
        return
    if (root / FAILED).is_file():
        state = f"failed ({root / FAILED})"
    else:
        newest = newest_checkpoint(root)
        state = (f"its newest checkpoint is at update {newest[1]}" if newest
                 else "it has no checkpoint yet")
    raise FolderRefused(str(run_dir), f"the run has not finished (no complete eval.json; "
                        f"{state}), so nothing is evaluated or written there: the training "
                        "command that made it resumes it; evaluate it once it has finished "
                        "(or read its checkpoint with rs_lightning.load_agent)")


@contextlib.contextmanager
def holding(run_dirs: list[Path], key: str = "run_dir") -> Iterator[None]:
    """Hold the folder of every run of ``run_dirs`` (their :func:`run_root`) for the block:
    FolderInUse naming the process that holds one (a training, another evaluation). A folder
    this process may not write into cannot be trained into either, and is read unheld."""
    with contextlib.ExitStack() as stack:
        for root in dict.fromkeys(run_root(Path(d)) for d in run_dirs):
            if not (root / "config.yaml").is_file():
                continue  # not a run: nothing to hold, and no folder is made for it
            try:
                stack.enter_context(RunFolderLock(root, key))
            except OSError:  # a read-only folder: no lock file can be made there
                pass
        yield
