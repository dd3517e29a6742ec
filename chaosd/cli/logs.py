"""The daemon's log records on stderr: escaped text lines, or one JSON object per line that carries the trace and
span ids of the request being served (``[log]``, ``--log-level``, ``--log-format``)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from opentelemetry import trace

from chaosd.config.logs import LogConfig
from chaosd.core.humanize import shown

__all__ = ["EscapedText", "JsonLines", "configure_logging"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class EscapedText(logging.Formatter):
    """Log lines with their message escaped (``shown``): a reason with ESC or CR/LF in it can neither colour the
    terminal nor forge a log line. A traceback, appended after the message, keeps its own lines."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = shown(record.message)
        return super().formatMessage(record)


class JsonLines(logging.Formatter):
    """One JSON object per line: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message``; ``trace_id`` and
    ``span_id`` (lower-case hex, as W3C writes them) while a span is current; ``exception`` when there is one.
    ASCII only: every control character, and anything else a terminal might act on, is a ``\\u`` escape."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        line: dict[str, str] = {
            "time": when.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            line["trace_id"] = format(context.trace_id, "032x")
            line["span_id"] = format(context.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=True)


def configure_logging(config: LogConfig) -> None:
    """Every record at ``config.level`` or above, to stderr, in ``config.format`` (a no-op where the root logger
    already has a handler: a host that set logging up keeps its own)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if config.format == "json" else EscapedText())
    logging.basicConfig(level=_LEVELS[config.level], handlers=[handler])
