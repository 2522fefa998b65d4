"""The command lines of the tools that read runs, one module each (``rs-lightning TOOL``)."""
