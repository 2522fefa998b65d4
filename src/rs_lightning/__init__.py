"""rs_lightning: risk-sensitive distributional reinforcement learning.

Importing the package registers its gymnasium environments (ids under ``rs_lightning/``).
"""

from rs_lightning import envs as _envs  # noqa: F401  (registers the environments)

__version__ = "0.1.0"
