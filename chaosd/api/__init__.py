"""The HTTP control plane: faults, lever, survival, scenarios, status, history and the event stream."""

from chaosd.api.app import build_app

__all__ = ["build_app"]
