"""The typed config behind conf/ and its validation (``schema``)."""

from pathlib import Path

# The repository's conf/ folder (Hydra's config_path in train.py), beside src/.
CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
