"""Errors the user can fix, reported as one line naming the key and what is allowed."""

# Exit status of `python train.py`: bad input (nothing was written), a NaN or inf in training,
# a write that failed.
EXIT_BAD_INPUT = 2
EXIT_NUMERICAL_FAULT = 3
EXIT_OUTPUT_FAULT = 4  # a file of the run could not be written (disk full, permissions)
EXIT_ENVIRONMENT_FAULT = 5  # the environment broke its contract (NaN, a shape, its step API)
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process it stopped
EXIT_INTERRUPTED = 130  # 128 + SIGINT (Ctrl-C)


class ConfigError(ValueError):
    """A configuration value, file or input the user gave is not usable.

    ``key`` is the config key (``alpha``, ``agent.n_returns``) or the file concerned.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


class NumericalFault(RuntimeError):
    """A NaN or an infinity appeared in training (``quantity``: loss, gradient norm, parameters).

    ``step`` is the number of the update it appeared in (1 for the first update), the same
    count as the checkpoint names, so the last good checkpoint is the one before it.
    """

    def __init__(self, quantity: str, step: int, value: float | None = None) -> None:
        shown = f" ({value})" if value is not None else ""
        super().__init__(f"non-finite {quantity}{shown} at step {step}")
        self.quantity = quantity
        self.step = step
        self.value = value


class EnvironmentFault(RuntimeError):
    """The environment broke gymnasium's contract or this project's bounds: it raised in
    ``step()``, returned the old 4-tuple, a non-finite or oversized reward, a non-finite
    observation or one of another shape. The message starts with the environment's id."""
