"""The flight recorder's events as the API serves them."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from chaosd.views.plans import PlanKind
from chaosd.views.units import RunInstant, closed_view

# The flight recorder's kinds (chaosd.events.kinds: one payload type per kind); a plan run's end is of its PlanKind.
EventKind = Literal[
    "agent",
    "backend",
    "breaker",
    "clients",
    "dag",
    "detector",
    "fault",
    "incident",
    "leader",
    "lever",
    "mcp",
    "memory",
    "run",
    "score",
    "supervisor",
    "throttle",
    "window",
    PlanKind,
]


@closed_view
class EventView(TypedDict):
    """An event of the flight recorder: the SSE ``data`` is ``t`` and the event's fields."""

    id: int
    t: RunInstant
    kind: EventKind
    data: dict[str, object]
