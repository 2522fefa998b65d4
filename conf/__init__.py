"""The configuration (Hydra), installed as the package ``rs_lightning.conf``: ``train.yaml``
and one folder per config group. Hydra reads it as ``pkg://rs_lightning.conf``; the tools
that read its YAML find it with :mod:`importlib.resources`."""
