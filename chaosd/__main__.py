"""``python -m chaosd``."""

from chaosd.cli.main import entrypoint

entrypoint()
