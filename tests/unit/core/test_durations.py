"""One duration parser for the command line, config files, scenarios and the API, and the pattern it publishes."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaosd.api.schemas import openapi_document
from chaosd.core.durations import PATTERN, parse_duration

ACCEPTED = [
    ("90", 90.0),
    ("0.5", 0.5),
    ("1m30s", 90.0),
    ("1h", 3600.0),
    ("1.5m", 90.0),
    ("250ms", 0.25),
    ("2h15m", 8100.0),
    ("1m 30s", 90.0),  # spaces may separate the parts
    (" 8 s ", 8.0),
    ("1h0.5s", 3600.5),
    ("1m5ms", 60.005),
    (".5s", 0.5),
]


@pytest.mark.parametrize(("text", "seconds"), ACCEPTED)
def test_plain_and_compound_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


REFUSED = [
    ("", "empty"),
    ("  ", "empty"),
    ("-5s", "negative"),
    ("-5", "negative"),
    ("30s1m", "'m' after 's': units go largest first"),
    ("1m1m", "'m' given twice"),
    ("5d", "unknown unit 'd'"),
    ("5 weeks", "unknown unit 'weeks'"),
    ("1m30", "a number without a unit"),
    ("soon", "not a number with a unit"),
    ("5s\n", "only spaces"),
]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_a_refused_duration_says_why_and_lists_the_forms(text: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    message = str(caught.value)
    assert message.startswith(f"not a duration: {text!r} ({why}")
    assert "250ms, 1.5m, 1m30s, 2h15m" in message


def test_numbers_are_left_for_the_field_to_judge() -> None:
    assert parse_duration(5) == 5 and parse_duration(-1.5) == -1.5 and parse_duration(None) is None


def test_text_too_large_for_a_float_is_refused() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration("9" * 400 + "h")


_PARTS = st.lists(st.sampled_from(["h", "m", "s", "ms"]), min_size=1, max_size=4, unique=True)


@given(_PARTS, st.lists(st.integers(0, 10_000), min_size=4, max_size=4), st.sampled_from(["", " "]))
@settings(max_examples=200, deadline=None)
def test_units_largest_first_add_up(units: list[str], numbers: list[int], gap: str) -> None:
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    ordered = sorted(units, key=lambda u: -scale[u])
    text = gap.join(f"{n}{u}" for n, u in zip(numbers, ordered, strict=False))
    assert parse_duration(text) == pytest.approx(sum(n * scale[u] for n, u in zip(numbers, ordered, strict=False)))
    if ordered != units:  # the same parts in another order are refused
        with pytest.raises(ValueError, match="largest first"):
            parse_duration("".join(f"{n}{u}" for n, u in zip(numbers, units, strict=False)))


@given(st.text(alphabet="0123456789.hmsd -", max_size=12))
@settings(max_examples=500, deadline=None)
def test_the_published_pattern_accepts_exactly_what_the_parser_accepts(text: str) -> None:
    try:
        parse_duration(text)
        parsed = True
    except ValueError:
        parsed = False
    assert parsed == (re.fullmatch(PATTERN, text) is not None)


def test_the_openapi_document_publishes_the_parser_pattern_in_ecmascript_syntax() -> None:
    patterns = {
        node["pattern"]
        for node in _walk(openapi_document())
        if isinstance(node, dict) and isinstance(node.get("pattern"), str) and "ms" in node["pattern"]
    }
    assert patterns == {PATTERN}
    # What ECMAScript regexes lack or read differently: look-arounds, \Z, \d and \s (Unicode in Python).
    assert not re.search(r"\(\?[=!<]|\\[ZAdsw]", PATTERN)
    assert json.loads(json.dumps(PATTERN)) == PATTERN


def _walk(node: object) -> list[object]:
    found = [node]
    if isinstance(node, dict):
        for value in node.values():
            found += _walk(value)
    elif isinstance(node, list):
        for value in node:
            found += _walk(value)
    return found
