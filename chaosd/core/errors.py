"""The one error root, and the errors that name what was wrong and where."""

from __future__ import annotations

__all__ = ["ChaosdError", "ConfigError", "Conflict", "FaultError", "NotFound", "ScenarioError", "Unavailable"]


class ChaosdError(Exception):
    """Root of every error chaosd raises on purpose."""


class ConfigError(ChaosdError):
    """Invalid configuration: each problem names its source, the field and what is wrong."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{src}: {field}: {msg}" for src, field, msg in problems))

    def lines(self) -> list[str]:
        return [f"{src}: {field}: {msg}" if field else f"{src}: {msg}" for src, field, msg in self.problems]


class ScenarioError(ConfigError):
    """A scenario file that cannot be read or does not validate."""


class FaultError(ChaosdError):
    """A request that cannot be carried out as given (a fault, a window, a run, a scenario); nothing was changed.
    This class itself means the input was wrong; its subclasses say why else."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class NotFound(FaultError):
    """What the request names does not exist (or is no longer kept)."""


class Conflict(FaultError):
    """What the request asks for clashes with the daemon's state: a cap, the safety lever, a run already going, a
    target that is not there right now."""


class Unavailable(FaultError):
    """The daemon is shutting down and takes no new work."""


class ReportNotWritten(ChaosdError):
    """A report that could not be written to its path: ``path``, and ``reason`` (the OS's words)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"report not written to {path}: {reason}")
        self.path = path
        self.reason = reason
