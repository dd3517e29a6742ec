"""Reading the daemon's JSON answers: each value checked to be the shape docs/api.md gives it where it is read.

A value not in that shape raises TypeError, which ``run_client_command`` reports as an unexpected answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:  # the views import pydantic, which a client command never needs at run time
    from chaosd.views import ReportView

__all__ = ["Answer", "as_array", "as_float", "as_object", "as_objects", "as_report", "as_text", "json_text"]

Answer = Mapping[str, object]  # a JSON object the daemon answered: its values are checked where they are read


def as_object(answer: object) -> dict[str, object]:
    """``answer`` as the JSON object it should be; TypeError if it is anything else."""
    if not isinstance(answer, dict):
        raise TypeError(f"expected a JSON object, got {type(answer).__name__}")
    return answer


def as_array(value: object) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array, got {type(value).__name__}")
    return value


def as_objects(value: object) -> list[dict[str, object]]:
    """A list of JSON objects; none for a missing (null) or empty one."""
    return [as_object(item) for item in as_array(value or [])]


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def as_float(value: object) -> float:
    """``float(value)``, for the values it takes (numbers, and numbers as text)."""
    if not isinstance(value, int | float | str):
        raise TypeError(f"float() argument must be a string or a real number, not {type(value).__name__!r}")
    return float(value)


def as_report(answer: object) -> ReportView:
    """``GET /api/v1/report``'s answer as its view, once the blocks read here are JSON objects (or lists of them).

    The faults, their summary and the diagnostics are always there (empty when an older daemon left them out);
    every other field, of the report or its blocks, is read with ``.get`` or fails as an unexpected answer.
    """
    report = as_object(answer)
    for key in ("score", "collapse", "throttle"):
        as_object(report.get(key) or {})
    checked = {
        **report,
        "faults": as_objects(report.get("faults")),
        "faults_summary": as_object(report.get("faults_summary") or {}),
        "diagnostics": as_objects(report.get("diagnostics")),
    }
    return cast("ReportView", checked)  # its blocks checked just above


def json_text(value: object) -> str:
    """An answer printed back as JSON (``--json``): indented, keys sorted."""
    return json.dumps(value, indent=2, sort_keys=True)
