"""Durations as users write them: ``8s``, ``250ms``, ``2m``, ``1h`` or a number of seconds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema

__all__ = ["Seconds", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")


def parse_duration(value: object) -> object:
    """Turn ``"8s"`` into 8.0; leave numbers (and anything else) for pydantic to judge."""
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise ValueError(f"not a duration: {value!r} (use seconds, or a number with ms, s, m or h)")
        return float(match.group(1)) * _UNITS[match.group(2) or "s"]
    return value


# What the schema says (the API's OpenAPI document, config docs): a number of seconds, or text with a unit.
# Numeric bounds given beside it (``Field(gt=0)``) bind the number it becomes, whichever form was sent.
_DURATION_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "string", "pattern": _PATTERN.pattern}],
    "description": "a duration in seconds: a number, or text with a unit (250ms, 10s, 2m, 1h)",
}
Seconds = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(_DURATION_SCHEMA, mode="validation")]
