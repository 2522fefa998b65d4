"""The typed config behind conf/ and its validation (``schema``)."""
