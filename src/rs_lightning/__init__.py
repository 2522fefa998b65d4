"""rs_lightning: risk-sensitive distributional reinforcement learning.

Importing the package registers its gymnasium environments (ids under ``rs_lightning/``)
and the config resolver of run folder names (``${resume_marker:...}``, conf/train.yaml).
"""

from rs_lightning import envs as _envs  # noqa: F401  (registers the environments)
from rs_lightning.run_names import register_resolvers as _register_resolvers

_register_resolvers()

__version__ = "0.1.0"
