"""The flight recorder: lifecycle events with their clock time, bounded, with live subscribers."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Event", "EventLog"]


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    t: float  # seconds since the run started
    kind: str
    data: Mapping[str, Any] = field(default_factory=dict)


class EventLog:
    """Keeps the newest ``limit`` events; subscribers see each one as it is recorded."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: deque[Event] = deque(maxlen=limit)
        self._next_id = 1
        self._subscribers: list[Callable[[Event], None]] = []

    def record(self, t: float, kind: str, **data: Any) -> Event:
        event = Event(self._next_id, t, kind, data)
        self._next_id += 1
        self._events.append(event)
        for subscriber in list(self._subscribers):
            subscriber(event)
        return event

    def __len__(self) -> int:
        return len(self._events)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def events(self, kind: str | None = None) -> list[Event]:
        return [e for e in self._events if kind is None or e.kind == kind]
