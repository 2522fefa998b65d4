"""Shared fixtures: composing the project's Hydra config in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Tests never touch the network, and small models run fastest on one thread.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
torch.set_num_threads(1)


@pytest.fixture
def compose():
    """compose(overrides) -> the composed DictConfig, as `python train.py <overrides>` sees it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def _compose(overrides=()):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name="train", overrides=list(overrides))

    return _compose
