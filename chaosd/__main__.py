"""``python -m chaosd``."""

from chaosd.cli import entrypoint

entrypoint()
