"""The events the flight recorder keeps: each numbered in the order recorded, the newest ``limit`` of them, read
back by kind."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from chaosd.events.kinds import EventKind, FaultEventData

__all__ = ["Event", "EventHistory", "fault_data"]


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    t: float  # seconds since the run started
    kind: EventKind
    # One of chaosd.events.kinds' payloads, by kind (see EventLog.record); read generically where it is
    # serialised (the SSE stream, storage), through fault_data where a fault's fields are read.
    data: Mapping[str, object] = field(default_factory=dict)
    # The object the event is about (a fault's record), for in-process observers: never serialised, and
    # there even when the object has left the bounded in-memory history (a fault older than history.faults).
    about: object = field(default=None, compare=False, repr=False)


def fault_data(event: Event) -> FaultEventData | None:
    """The payload of a ``fault`` event, for readers of its fields; None for an event of any other kind."""
    if event.kind != "fault":
        return None
    return cast("FaultEventData", event.data)  # kind checked: record's fault overloads typed it


class EventHistory:
    """The newest ``limit`` events, numbered from 1 in the order they were added; what readers of the log query."""

    def __init__(self, limit: int) -> None:
        self._events: deque[Event] = deque(maxlen=limit)
        self._next_id = 1

    def add(self, t: float, kind: EventKind, data: Mapping[str, object], about: object = None) -> Event:
        """The next event, with its object; the history keeps it without the object."""
        event = Event(self._next_id, t, kind, data, about)
        self._next_id += 1
        # Kept without its object: what the history holds stays bounded by history.faults.
        self._events.append(event if about is None else Event(event.id, t, kind, data))
        return event

    def __len__(self) -> int:
        return len(self._events)

    def events(self, kind: str | None = None) -> list[Event]:
        return [e for e in self._events if kind is None or e.kind == kind]
