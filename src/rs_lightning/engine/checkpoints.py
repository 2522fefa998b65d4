"""Reading, checking and choosing checkpoints, without importing Lightning.

A run resumes from a checkpoint given as ``ckpt_path=`` or, when its own folder already has
checkpoints (a killed job run again), from the newest readable one there. Before anything is
trained or written, the checkpoint is read and compared with the run's config, so that a
corrupt or truncated file, or one of another agent or network size, is one clear error
instead of a traceback from deep inside Lightning.

Checkpoints are data, never code: every load here and in Lightning (through
:class:`~rs_lightning.engine.build.AtomicCheckpointIO`) uses ``weights_only=True``, which
refuses any object but tensors, numbers, strings and their containers, and a checkpoint that
carries raw bytes (how a pickled object would hide inside one) is refused before anything
reads it further.
"""

from __future__ import annotations

import errno
import os
import pickle
import pickletools
import re
import sys
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch

from rs_lightning.config.migrations import DATAMODULE, NewerFormat, checkpoint_format
from rs_lightning.engine.replay import update_ratio
from rs_lightning.errors import ConfigError
from rs_lightning.files import atomic_write


def save_checkpoint_file(checkpoint: dict[str, Any], path: Path | str) -> None:
    """``torch.save`` through :func:`~rs_lightning.files.atomic_write`, its write failures
    as the ``OSError`` they are. torch's writer reports a full disk as a ``RuntimeError``
    ("unexpected pos ...") whose context is the OSError; the run's answer to a failed write
    (one line, exit 4) needs the OSError, naming the file."""
    try:
        with atomic_write(path, "wb") as f:
            torch.save(checkpoint, f)
    except RuntimeError as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            if "inline_container" not in str(error) and "PytorchStreamWriter" not in str(error):
                raise
            cause = OSError(errno.EIO, os.strerror(errno.EIO))
        raise OSError(cause.errno, cause.strerror or str(cause), str(path)) from error


CHECKPOINT_FOLDER = "checkpoints"
LAST = "last.ckpt"


class UnsafeCheckpoint(ConfigError):
    """A file put in a checkpoint's place: one holding objects or raw bytes, a whole pickle, or
    a complete file of something else. Atomic writes leave no such thing after a kill or a
    full disk, so a run folder holding one is refused rather than skipped."""


def read_checkpoint(path: Path | str, key: str = "ckpt_path") -> dict[str, Any]:
    """The checkpoint's content as written; ConfigError if it is missing, unreadable or not
    ours, :class:`~rs_lightning.config.migrations.NewerFormat` if a newer version wrote it.
    What reads more than its step brings it to the current format first
    (:func:`~rs_lightning.config.migrations.migrate_checkpoint`)."""
    path = Path(path)
    if not path.is_file():
        what = "a folder, not a checkpoint file" if path.is_dir() else "no checkpoint file there"
        raise ConfigError(key, f"{path}: {what}")
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it then refuses
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for bad bytes
        # weights_only refuses every object but tensors, numbers, strings and containers,
        # naming the global it would have called (random bytes fail on some other opcode).
        found = re.search(r"GLOBAL (\S+)", str(error))
        if isinstance(error, pickle.UnpicklingError) and found:
            raise UnsafeCheckpoint(
                key, f"{path} holds objects other than tensors, numbers and strings "
                f"({found.group(1)}); refused unread, since loading them could run code"
            ) from None
        if _is_pickle(path):
            raise UnsafeCheckpoint(
                key, f"{path} is a pickle, not a checkpoint (rs_lightning's are torch archives); "
                "refused unread, since loading it could run code"
            ) from None
        if "Weights only load failed" in str(error):  # the safe loader stopped at an opcode
            raise ConfigError(
                key, f"{path} is not a readable checkpoint: the safe loader (weights_only) "
                "stopped at an instruction it does not run (a damaged file); not loaded "
                "otherwise, since that could run code"
            ) from None
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            key, f"{path} is not a readable checkpoint (corrupt or truncated: {reason[:120]})"
        ) from None
    if not isinstance(state, dict) or "state_dict" not in state or "rs_lightning" not in state:
        # A complete file (it loaded): something else, not a damaged checkpoint.
        raise UnsafeCheckpoint(key, f"{path} is not a checkpoint of an rs_lightning run")
    raw = _raw_bytes(state)
    if raw is not None:
        raise UnsafeCheckpoint(
            key, f"{path} holds raw bytes at {raw} (a pickled object, or a checkpoint of an "
            "earlier version); rs_lightning checkpoints hold only tensors, numbers and strings"
        )
    checkpoint_format(state, str(path))
    return state


def _is_pickle(path: Path) -> bool:
    """Whether ``path`` is a pickle, read opcode by opcode (never run): one that fills the
    file, or torch's legacy format (its magic number pickled first). A checkpoint is a zip
    archive; a damaged one, or random bytes, is neither."""
    try:
        with open(path, "rb") as f:
            if f.read(4) == b"PK\x03\x04":
                return False
            f.seek(0)
            arguments = [argument for _, argument, _ in pickletools.genops(f)]
            return f.read(1) == b"" or torch.serialization.MAGIC_NUMBER in arguments
    except Exception:  # not a pickle: genops raises several types for bad bytes
        return False


def _raw_bytes(node: Any, where: str = "") -> str | None:
    """Where ``node`` holds bytes (None if nowhere): nothing of ours stores any, and bytes
    are how an object pickled inside a checkpoint would travel."""
    if isinstance(node, (bytes, bytearray)):
        return where or "the top level"
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        items = enumerate(node)
    else:
        return None
    for name, value in items:
        found = _raw_bytes(value, f"{where}.{name}" if where else str(name))
        if found is not None:
            return found
    return None


def checkpoint_agent(state: dict[str, Any]) -> str:
    """The name of the agent that wrote ``state`` (a checkpoint in the current format)."""
    return state["rs_lightning"]["agent"]


def check_compatible(state: dict[str, Any], path: Path | str, agent_name: str,
                     members: torch.nn.Module, env_id: str, key: str = "ckpt_path",
                     num_envs: int = 1, parallel_seeds: int = 1, n_step: int = 1,
                     updates_per_step: float = 1.0) -> None:
    """ConfigError unless ``state`` (in the current format) was written by the same agent
    with the same network shapes, members, environment copies, n-step returns and update
    ratio (an on-policy run: the same rollouts' settings).

    ``members`` are the networks this run builds
    (:class:`~rs_lightning.agents.members.Members`); the checkpoint's ``agent.*`` tensors
    must have exactly their parameter names and shapes.
    """
    ours = state["rs_lightning"]
    written_by = checkpoint_agent(state)
    if written_by != agent_name:
        raise ConfigError(
            key, f"{path} was written by agent {written_by}, this run is agent={agent_name}; "
            f"resume with the checkpoint's agent or give a checkpoint of {agent_name}"
        )
    if "behaviour" not in ours:
        raise ConfigError(
            key, f"{path} was written by an earlier version of rs_lightning, whose checkpoints "
            "this version cannot resume; start the run afresh"
        )
    written_seeds = len(ours["seeds"])
    if written_seeds != parallel_seeds:
        raise ConfigError(
            key, f"{path} was written with parallel_seeds={written_seeds}, this run has "
            f"parallel_seeds={parallel_seeds}; resume with the checkpoint's parallel_seeds (a "
            "single seed of a parallel_seeds run: its seed_<s>/checkpoints/last.ckpt)"
        )
    data = state[DATAMODULE]
    written_env = data["env_id"]
    if written_env != env_id:
        raise ConfigError(
            key, f"{path} was written on env {written_env}, this run is on {env_id}"
        )
    written_copies = data["num_envs"]
    if written_copies != num_envs:
        raise ConfigError(
            key, f"{path} was written with env.num_envs={written_copies}, this run has "
            f"env.num_envs={num_envs}; resume with the checkpoint's env.num_envs"
        )
    collector = data["collector"]
    if "rollout" in collector:  # an on-policy run: its rollouts' settings are the agent's
        rollout = collector["rollout"]
        for name, written in (("rollout_steps", rollout["steps"]), ("epochs", rollout["epochs"]),
                              ("minibatches", rollout["minibatches"])):
            ours = getattr(members.config, name)
            if written != ours:
                raise ConfigError(
                    key, f"{path} was written with agent.{name}={written}, this run has "
                    f"agent.{name}={ours}; resume with the checkpoint's agent.{name}")
    else:
        _check_replay(collector, path, key, n_step, updates_per_step)
    _check_network(state, path, key, members)


def _check_replay(collector: dict[str, Any], path, key: str, n_step: int,
                  updates_per_step: float) -> None:
    written_n = collector["n_step"]
    if written_n != n_step:
        raise ConfigError(
            key, f"{path} was written with learning.n_step={written_n}, this run has "
            f"learning.n_step={n_step}; resume with the checkpoint's learning.n_step"
        )
    written_ratio = Fraction(*collector["updates_per_step"])
    if written_ratio != update_ratio(updates_per_step):
        raise ConfigError(
            key, f"{path} was written with learning.updates_per_step={float(written_ratio):g}, "
            f"this run has {updates_per_step:g}; resume with the checkpoint's "
            "learning.updates_per_step"
        )


def _check_network(state: dict[str, Any], path, key: str, members: torch.nn.Module) -> None:
    saved = {k[len("members."):]: v.shape
             for k, v in state["state_dict"].items()
             if k.startswith("members.")}
    wanted = {k: v.shape for k, v in members.state_dict().items()}
    if saved != wanted:
        differing = sorted(k for k in saved.keys() & wanted.keys() if saved[k] != wanted[k])
        if differing:
            name = differing[0]
            detail = (f"{name} is {list(saved[name])} in the checkpoint and "
                      f"{list(wanted[name])} in this run")
        else:
            name = sorted(saved.keys() ^ wanted.keys())[0]
            detail = f"{name} is in only one of them"
        raise ConfigError(
            key, f"{path} does not fit this run's network ({detail}): use the agent settings "
            "of the run that wrote it (its config.yaml)"
        )


def checkpoint_step(state: dict[str, Any]) -> int:
    """The number of updates made when ``state`` was saved."""
    return int(state["global_step"])


_STEP_NAME = re.compile(r"step(\d+)\.ckpt$")


def newest_checkpoint(run_dir: Path | str) -> tuple[Path, int] | None:
    """The readable checkpoint of ``run_dir/checkpoints`` with the most updates, and its step.

    Unreadable files (which atomic writes should never leave, but a full disk or a copy
    could) are skipped with a warning; a file holding objects (:class:`UnsafeCheckpoint`)
    is refused: it was put there, and the folder is not to be trusted.
    """
    folder = Path(run_dir) / CHECKPOINT_FOLDER
    if not folder.is_dir():
        return None
    candidates = [p for p in folder.glob("*.ckpt") if not p.name.startswith(".")]

    # Newest first by name (last.ckpt is at least as new as any step file), so the first
    # readable one usually wins and older files are not read at all.
    def order(p: Path):
        match = _STEP_NAME.search(p.name)
        return (p.name == LAST, int(match.group(1)) if match else -1)

    best: tuple[Path, int] | None = None
    for path in sorted(candidates, key=order, reverse=True):
        match = _STEP_NAME.search(path.name)
        if best is not None and match and int(match.group(1)) <= best[1]:
            continue  # a step file cannot be newer than what was already found
        try:
            step = checkpoint_step(read_checkpoint(path, "checkpoint"))
        except (UnsafeCheckpoint, NewerFormat):
            raise
        except ConfigError as error:
            print(f"warning: ignoring {error.message}", file=sys.stderr)
            continue
        if best is None or step > best[1]:
            best = (path, step)
    return best
