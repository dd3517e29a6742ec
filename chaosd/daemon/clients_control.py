"""The callers' policy of the live experiment, as the API reads and pushes it (``GET``/``PUT``/``PATCH
/api/v1/clients``)."""

from __future__ import annotations

from chaosd.config.settings import ClientsConfig
from chaosd.core.errors import Unavailable
from chaosd.daemon.gate import Gate
from chaosd.experiment.runner import Experiment

__all__ = ["ClientsControl"]


class ClientsControl:
    """The policy in force, and a new one pushed as a configuration push would: recorded as a ``clients`` event."""

    REFUSAL = "the daemon is shutting down and accepts no new policy"

    def __init__(self, experiment: Experiment, gate: Gate) -> None:
        self._exp = experiment
        self._gate = gate

    @property
    def policy(self) -> ClientsConfig:
        return self._exp.pipeline.callers.cfg

    def push(self, cfg: ClientsConfig) -> list[str]:
        """Put ``cfg`` (validated) in force from now on; the keys that changed, in the policy's field order."""
        if self._gate.closed:
            raise Unavailable("clients", self.REFUSAL)
        return self._exp.configure_clients(cfg)

    def restore(self, cfg: ClientsConfig) -> None:
        """Put back the policy a push replaced when that push could not be stored (the request is answered 503)."""
        self._exp.configure_clients(cfg)
