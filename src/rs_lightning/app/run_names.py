"""What a run is called: its folder's resume marker, its W&B run name and group.

A run is named by the overrides that set it apart (the keys Hydra puts into
``override_dirname``), so the jobs of a sweep over ``learning.lr`` or ``agent.kappa`` never
share a name; the seed is kept out of the group, so that the seeds of one setting share it.

Nothing here imports Lightning or W&B: the resolver is registered when the package is
imported, before Hydra names a job's folder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

RESUME_RESOLVER = "resume_marker"
FOLDER_LABEL_RESOLVER = "folder_label"
FOLDER_SUFFIX_RESOLVER = "folder_suffix"
# The longest override label a folder name takes whole: file systems allow 255 bytes a name,
# and the date, the job number and the resume marker come on top.
FOLDER_LABEL_LIMIT = 160


def folder_label(overrides: Any, limit: int = FOLDER_LABEL_LIMIT) -> str:
    """Hydra's ``override_dirname`` as one folder name: whole up to ``limit`` characters, else
    cut and ended with a hash of the whole label (``...,learning.lr=0.00012-3f9a1c2e``), so
    that every setting keeps its own folder and a sweep run again finds it."""
    # A value holding "/" ("render_mode=x/../../tmp") would make folders of its parts and
    # could leave outputs/: each slash becomes "%2F", so the label is one folder name.
    text = str(overrides).replace("/", "%2F")
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{text[:limit - 9]}-{digest}"


def folder_suffix(overrides: Any) -> str:
    """What a folder's name adds after its date or job number: ``_`` and the
    :func:`folder_label` of the overrides, or nothing when there are none (no name ends in
    ``_``, and a resumed run's is ``<date>_resumed-...``)."""
    label = folder_label(overrides)
    return f"_{label}" if label else ""


def resume_marker(ckpt_path: Any) -> str:
    """The suffix of the folder of a run started from a checkpoint: ``_resumed-<file stem>``
    (``_resumed-step0005000``); empty for a fresh start.

    conf/train.yaml appends it to Hydra's folder names (``${resume_marker:${ckpt_path}}``):
    the checkpoint's whole path would put slashes into the name. A sweep command run again
    gives no ``ckpt_path``, so its jobs find their folders again and resume in place.
    """
    if ckpt_path is None or str(ckpt_path) in ("", "None", "null"):
        return ""
    stem = Path(str(ckpt_path)).stem
    return "_resumed-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in stem)


def register_resolvers() -> None:
    """Make ``${resume_marker:...}``, ``${folder_label:...}`` and ``${folder_suffix:...}``
    known to OmegaConf (once per process)."""
    if not OmegaConf.has_resolver(RESUME_RESOLVER):
        OmegaConf.register_new_resolver(RESUME_RESOLVER, resume_marker)
    if not OmegaConf.has_resolver(FOLDER_LABEL_RESOLVER):
        OmegaConf.register_new_resolver(FOLDER_LABEL_RESOLVER, folder_label)
    if not OmegaConf.has_resolver(FOLDER_SUFFIX_RESOLVER):
        OmegaConf.register_new_resolver(FOLDER_SUFFIX_RESOLVER, folder_suffix)


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def overrides_label(overrides: list[str], exclude: set[str], item_sep: str = ",") -> str:
    """Hydra's ``override_dirname`` of ``overrides`` without the keys of ``exclude``: the
    overrides sorted and joined by ``item_sep``."""
    return item_sep.join(sorted(o for o in overrides if _override_key(o) not in exclude))


def hydra_setting_label() -> Optional[str]:
    """The command-line overrides of this Hydra job that name its setting: those of its
    folder name (``override_dirname``) without the seed. None outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    naming = hydra.job.config.override_dirname
    exclude = {*naming.exclude_keys, "seed"}
    return overrides_label(list(hydra.overrides.task), exclude, naming.item_sep)


def wandb_run_names(agent: str, env_id: str, seed: int, ckpt_path: Optional[str],
                    setting: Optional[str], sweep: Optional[str]) -> tuple[str, str]:
    """(name, group) of a training run in W&B.

    name: the setting (the overrides without the seed; ``<agent>-<env>`` when there are
    none), the seed and the resume marker, e.g. ``agent=dqn,learning.lr=0.01,seed=0``.
    group: the sweep (its folder name) in a multirun, else the setting, so that separate
    runs of one setting with other seeds land in one group.
    """
    base = setting or f"{agent}-{env_id.split('/')[-1]}"
    name = f"{base},seed={seed}{resume_marker(ckpt_path)}"
    return name, sweep or base


register_resolvers()  # importing the run names makes them known to the config
