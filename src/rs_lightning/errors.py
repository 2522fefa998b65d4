"""Errors the user can fix, reported as one line naming the key and what is allowed."""


class ConfigError(ValueError):
    """A configuration value, file or input the user gave is not usable.

    ``key`` is the config key (``alpha``, ``agent.n_returns``) or the file concerned.
    """

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message
