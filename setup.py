"""The packages of the wheel: everything under src/, and conf/ (the configuration, kept at the
repository's top level) as the package ``rs_lightning.conf``, which Hydra reads as
``pkg://rs_lightning.conf``. The metadata lives in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[*find_namespace_packages("src", include=["rs_lightning*", "hydra_plugins*"],
                                       exclude=["*__pycache__*"]),
              "rs_lightning.conf"],
    package_dir={"": "src", "rs_lightning.conf": "conf"},
)
