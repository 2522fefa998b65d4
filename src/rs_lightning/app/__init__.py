"""The application: the composition root of a run (``train``), jobs and their folders and
names, W&B and the loggers, Hydra's callbacks and error messages, the ``rs-lightning``
command."""
