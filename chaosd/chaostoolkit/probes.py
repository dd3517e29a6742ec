"""Chaos Toolkit probes: the leader, a fault's outcome (waiting for its verdict), windows' scores, collapse."""

from __future__ import annotations

import time

from chaosd.chaostoolkit._daemon import (
    ActivityFailed,
    Configuration,
    Secrets,
    daemon,
    integer,
    json_object,
    number,
    objects,
    query,
)
from chaosd.core.durations import parse_duration

__all__ = [
    "availability",
    "availability_over",
    "collapse_state",
    "fault_outcome",
    "leader_present",
    "window_grade",
    "window_score",
]


def _seconds(value: float | str, name: str) -> float:
    try:
        parsed = parse_duration(value)
    except ValueError as exc:
        raise ActivityFailed(f"{name}: {exc}") from None
    if isinstance(parsed, bool) or not isinstance(parsed, int | float) or parsed < 0:
        raise ActivityFailed(f"{name}: not a duration: {value!r}")
    return float(parsed)


def leader_present(configuration: Configuration | None = None, secrets: Secrets | None = None) -> bool:
    """Whether an orchestrator replica holds the dispatch lease now."""
    return daemon(configuration, secrets).answer("GET", "/api/v1/status").get("leader") is not None


def fault_outcome(
    fault_id: int | None = None,
    labels: dict[str, str] | None = None,
    wait: float | str = "60s",
    configuration: Configuration | None = None,
    secrets: Secrets | None = None,
) -> str:
    """The verdict of a fault (by id, or the newest carrying ``labels``): ``recovered``, ``failed`` or
    ``unmeasured``, waiting for it up to ``wait``; its state (``active``, ``recovering``) if none by then."""
    d = daemon(configuration, secrets)
    if fault_id is None:
        if not labels:
            raise ActivityFailed("fault_outcome needs a fault_id or labels")
        faults = objects(d.answer("GET", "/api/v1/faults?" + query(labels))["faults"])
        if not faults:
            raise ActivityFailed(f"no fault carries the labels {labels}")
        fault_id = max(integer(f["id"]) for f in faults)
    return str(d.wait_for_verdict(int(fault_id), _seconds(wait, "wait"))["outcome"])


def window_score(
    window_id: int, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> dict[str, object]:
    """A window's score: total, grade, availability, recovery, consistency (null where nothing was measured)."""
    return json_object(daemon(configuration, secrets).answer("GET", f"/api/v1/windows/{int(window_id)}")["score"])


def window_grade(
    window_id: int, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> str | None:
    """A window's grade (A+ to F), or null while nothing in it was measured."""
    grade = window_score(window_id, configuration, secrets).get("grade")
    return None if grade is None else str(grade)


def availability(
    window_id: int | None = None, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> float | None:
    """Availability (good completions over offered work, 0–100) of a window, or of the daemon's whole life."""
    d = daemon(configuration, secrets)
    score = (
        json_object(d.answer("GET", f"/api/v1/windows/{int(window_id)}")["score"]) if window_id is not None else None
    )
    value = (score or d.answer("GET", "/api/v1/score")).get("availability")
    return None if value is None else number(value)


def availability_over(
    seconds: float | str = 3, configuration: Configuration | None = None, secrets: Secrets | None = None
) -> float | None:
    """Measure availability over the next ``seconds`` in a window of its own: a steady-state probe that
    no earlier experiment's faults can poison."""
    span = _seconds(seconds, "seconds")
    d = daemon(configuration, secrets)
    window = d.answer("POST", "/api/v1/windows", {"name": "chaos toolkit steady state"})
    try:
        time.sleep(span)  # the measurement itself: traffic flows through the window for this long
    finally:
        report = d.answer("DELETE", f"/api/v1/windows/{integer(window['id'])}")
    value = json_object(report["score"]).get("availability")
    return None if value is None else number(value)


def collapse_state(configuration: Configuration | None = None, secrets: Secrets | None = None) -> str:
    """The detector's state: healthy, warning, overload, collapsed, failing, stall or recovering."""
    status = daemon(configuration, secrets).answer("GET", "/api/v1/status")
    return str(status["detector"])
