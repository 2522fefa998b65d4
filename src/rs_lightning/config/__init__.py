"""The typed config behind conf/ and its validation (``schema``)."""

from importlib.resources import files
from pathlib import Path

# The configuration is the package rs_lightning.conf (conf/ of the repository, shipped in the
# wheel): Hydra's config source, and the folder of its YAML for the tools that read it.
CONF_SOURCE = "pkg://rs_lightning.conf"
CONF_DIR = Path(str(files("rs_lightning.conf")))
