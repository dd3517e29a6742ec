"""The daemon's log (``[log]``): which records are written, and as text or as JSON lines."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["LogConfig", "LogFormat", "LogLevel"]

LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]


class LogConfig(BaseModel):
    """``level``: the least severe record written; ``format``: ``text`` (one escaped line) or ``json`` (an object
    per line, with the trace and span ids of the request being served)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: LogLevel = "info"
    format: LogFormat = "text"

    @field_validator("level", "format", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        # INFO and info alike, as operators write log levels either way.
        return value.strip().lower() if isinstance(value, str) else value
