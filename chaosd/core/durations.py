"""Durations as users write them: ``90``, ``8s``, ``250ms``, ``1.5m``, ``1m30s``, ``2h15m``, ``1m 30s``.

One parser for the command line, TOML, YAML and the HTTP API; :data:`PATTERN` is what it accepts, and the
OpenAPI document publishes that same pattern.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, WithJsonSchema

__all__ = ["FORMS", "PATTERN", "Seconds", "parse_duration"]

# Largest first: a compound duration gives its units in this order, each at most once.
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
FORMS = "seconds (90, 0.5) or numbers with units h, m, s, ms, largest first: 250ms, 1.5m, 1m30s, 2h15m"

# ASCII digits and spaces only, so that Python and an ECMAScript validator of the OpenAPI pattern agree.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"


def _compound() -> str:
    """Units largest first, each once, at least one: one alternative per leading unit (no look-ahead needed)."""
    units = list(_UNITS)
    alternatives = []
    for first, unit in enumerate(units):
        rest = "".join(f"(?: *{_NUMBER} *{later})?" for later in units[first + 1 :])
        alternatives.append(f"{_NUMBER} *{unit}{rest}")
    return "|".join(alternatives)


PATTERN = f"^ *(?:{_NUMBER}|{_compound()}) *$"
_FULL = re.compile(PATTERN)
_PART = re.compile(rf"({_NUMBER}) *([^\s0-9.]*)")


def parse_duration(value: object) -> object:
    """Turn ``"1m30s"`` into 90.0; leave numbers (and anything else) for pydantic to judge.

    Text is a plain number of seconds, or numbers each followed by a unit (``h``, ``m``, ``s``, ``ms``), units
    largest first and each at most once, with optional spaces between. Raises ValueError saying what is wrong:
    empty, negative, an unknown unit, units out of order or repeated, a number without a unit in a compound.
    """
    if not isinstance(value, str):
        return value
    if _FULL.fullmatch(value) is None:
        raise ValueError(f"not a duration: {value!r} ({_why(value)}; use {FORMS})")
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        seconds = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {value!r} (too large)")
    return seconds


def _why(value: str) -> str:
    """What is wrong with text the pattern refused, in a few words."""
    text = value.strip(" ")
    if not text:
        return "empty"
    if any(c.isspace() and c != " " for c in text):
        return "only spaces may stand between its parts"
    if text.startswith("-"):
        return "negative"
    seen: list[str] = []
    at = 0
    for match in _PART.finditer(text):
        if text[at : match.start()].strip():
            break
        unit = match[2]
        if not unit:
            return "a number without a unit" if seen or match.end() < len(text) else "not a number"
        if unit not in _UNITS:
            return f"unknown unit {unit[:8]!r}"
        if unit in seen:
            return f"{unit!r} given twice"
        if seen and list(_UNITS).index(unit) < list(_UNITS).index(seen[-1]):
            return f"{unit!r} after {seen[-1]!r}: units go largest first"
        seen.append(unit)
        at = match.end()
    return "not a number with a unit"


# What the schema says (the API's OpenAPI document, config docs): a number of seconds, or text with units.
# Numeric bounds given beside it (``Field(gt=0)``) bind the number it becomes, whichever form was sent.
_DURATION_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "string", "pattern": PATTERN}],
    "description": "a duration in seconds: a number, or text with units largest first (250ms, 10s, 1.5m, 1m30s, 2h15m)",
}
Seconds = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(_DURATION_SCHEMA, mode="validation")]
