"""The daemon's log records: JSON lines that parse, escape what a terminal would act on and carry the current span's
ids; text lines escaped as before; ``[log]``, its variables and its flags refused, naming them, when wrong."""

from __future__ import annotations

import json
import logging
import sys
from typing import get_args

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from chaosd.cli.arguments import LOG_FORMATS, LOG_LEVELS
from chaosd.cli.logs import EscapedText, JsonLines
from chaosd.cli.main import main
from chaosd.config.logs import LogFormat, LogLevel
from chaosd.config.settings import load_settings
from chaosd.core.errors import ConfigError

HOSTILE = "reason \x1b[31mred\x1b[0m\r\nFORGED 2026-01-01 ERROR chaosd: fake \x9b2J \u2028 end"


def _record(message: str, exc_info: bool = False) -> logging.LogRecord:
    info = sys.exc_info() if exc_info else None
    return logging.LogRecord("chaosd.api", logging.WARNING, __file__, 1, "%s", (message,), info)


def test_a_json_line_is_one_ascii_object_with_the_fields_and_nothing_a_terminal_acts_on() -> None:
    line = JsonLines().format(_record(HOSTILE))
    assert "\n" not in line and "\r" not in line and line.isascii() and "\x1b" not in line
    record = json.loads(line)
    assert record["message"] == HOSTILE  # escaped on the wire, the same text once parsed
    assert record["level"] == "warning" and record["logger"] == "chaosd.api"
    assert record["time"].endswith("Z") and "T" in record["time"]
    assert "trace_id" not in record and "span_id" not in record  # no span current


def test_a_json_line_carries_the_current_spans_ids_and_the_exception() -> None:
    span = TracerProvider().get_tracer("test").start_span("request")
    context = span.get_span_context()
    with trace.use_span(span, end_on_exit=True):
        try:
            raise ValueError("boom \x1b[2J")
        except ValueError:
            record = json.loads(JsonLines().format(_record("failed", exc_info=True)))
    assert record["trace_id"] == f"{context.trace_id:032x}" and record["span_id"] == f"{context.span_id:016x}"
    assert "Traceback" in record["exception"] and "ValueError: boom \x1b[2J" in record["exception"]
    after = json.loads(JsonLines().format(_record("later")))
    assert "trace_id" not in after  # the span is no longer current


def test_a_text_line_is_escaped_as_before() -> None:
    line = EscapedText().format(_record(HOSTILE))
    assert "\x1b" not in line and "\r" not in line and "\n" not in line and "\x9b" not in line
    assert " WARNING chaosd.api: reason " in line


def test_the_flags_choices_are_the_configs_values() -> None:
    assert (get_args(LogLevel), get_args(LogFormat)) == (LOG_LEVELS, LOG_FORMATS)


def test_the_log_section_reads_its_variables_and_refuses_a_bad_value_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHAOSD_LOG__LEVEL", "WARNING")
    monkeypatch.setenv("CHAOSD_LOG__FORMAT", "json")
    log = load_settings(None).log
    assert (log.level, log.format) == ("warning", "json")
    monkeypatch.setenv("CHAOSD_LOG__FORMAT", "xml")
    with pytest.raises(ConfigError) as refused:
        load_settings(None)
    assert refused.value.lines() == [
        "environment CHAOSD_LOG__FORMAT: log.format: Input should be 'text' or 'json' (got 'xml')"
    ]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--log-level", "loud"], "--log-level: invalid choice: 'loud'"),
        (["serve", "--log-format", "xml"], "--log-format: invalid choice: 'xml'"),
        (["--log-level", "warn"], "--log-level: invalid choice: 'warn' (choose from"),
    ],
)
def test_a_bad_log_flag_exits_2_naming_it(argv: list[str], named: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert named in capsys.readouterr().err
