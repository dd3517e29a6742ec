"""The one error root, and the errors that name what was wrong and where."""

from __future__ import annotations

__all__ = ["ChaosdError", "ConfigError", "FaultError", "ScenarioError"]


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
    """A fault that cannot be injected (or reverted); nothing was changed."""

    def __init__(self, field: str, message: str, *, status: int = 422) -> None:
        self.field = field
        self.message = message
        self.status = status  # 409 for conflicts and refusals, 422 for bad input, 404 for unknown ids
        super().__init__(f"{field}: {message}")
