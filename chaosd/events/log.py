"""The flight recorder: lifecycle events with their clock time, bounded, with live subscribers.

Observers cannot crash what they observe: a subscriber (or a telemetry listener guarded by
:meth:`Observers.guard`) that raises is logged once per observer and kind of error, counted in
``observer_errors`` (``chaosd_observer_errors_total{observer}``), and kept subscribed. Unlike trio's
instruments, which are removed on their first error, a raising observer stays: the history writer is
one, and one bad event must not cost every later event's record (the count shows it keeps failing).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar, Unpack, cast, overload

from chaosd.events.kinds import (
    AgentAlive,
    AgentDead,
    AgentJoined,
    BackendConnected,
    BackendReachable,
    BackendReadiness,
    BackendRestarted,
    BackendRestored,
    BackendUnlisted,
    BackendUnreachable,
    BreakerChanged,
    DagRerouted,
    DetectorChanged,
    EventKind,
    FaultEventData,
    FaultInjected,
    FaultMechanismRecovered,
    FaultRecovered,
    FaultReverted,
    FaultUnrecovered,
    IncidentOpened,
    IncidentRecovered,
    IncidentUnrecovered,
    LeaderElected,
    LeaderLost,
    LeverPulled,
    LeverReleased,
    McpReconnected,
    MemoryRepaired,
    PlanEnded,
    RunChanged,
    ScenarioStarted,
    ScoreChanged,
    SupervisorGaveUp,
    SupervisorRestarted,
    SurvivalStarted,
    ThrottleChanged,
    WindowClosed,
    WindowOpened,
)
from chaosd.views import PlanKind

__all__ = ["Event", "EventKind", "EventLog", "Observers", "fault_data"]

log = logging.getLogger("chaosd.events.log")
_A = TypeVar("_A")
MAX_OBSERVER_NAMES = 32  # the metric's label values: beyond this many observers, "other"


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


def observer_name(callback: Callable[..., object]) -> str:
    """A short, stable name for a callback: its qualified name without the ``<locals>`` noise."""
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    return str(name).replace("<locals>.", "")


class Observers:
    """Calls observers so that one that raises is logged (bounded), counted, and never fatal."""

    def __init__(self) -> None:
        self.errors: dict[str, int] = {}  # by observer name, at most MAX_OBSERVER_NAMES + 1 keys
        self._logged: set[tuple[str, type[BaseException]]] = set()

    def call(self, name: str, callback: Callable[[_A], None], arg: _A) -> None:
        try:
            callback(arg)
        except Exception as exc:  # an observer's failure is its own, never its caller's
            self.failed(name, exc)

    def failed(self, name: str, exc: Exception) -> None:
        if name not in self.errors and len(self.errors) >= MAX_OBSERVER_NAMES:
            name = "other"
        self.errors[name] = self.errors.get(name, 0) + 1
        key = (name, type(exc))
        if key not in self._logged:  # once per observer and kind of error: bounded log volume
            self._logged.add(key)
            log.error(
                "observer %s raised %s (kept subscribed; further %s errors from it are only counted)",
                name,
                type(exc).__name__,
                type(exc).__name__,
                exc_info=exc,
            )

    def guard(self, callback: Callable[[_A], None], name: str | None = None) -> Callable[[_A], None]:
        """``callback`` wrapped so that it never raises into its caller (for listeners kept elsewhere)."""
        label = name or observer_name(callback)

        def guarded(arg: _A) -> None:
            self.call(label, callback, arg)

        return guarded


class EventLog:
    """Keeps the newest ``limit`` events; subscribers see each one as it is recorded."""

    def __init__(self, limit: int = 10_000) -> None:
        self._events: deque[Event] = deque(maxlen=limit)
        self._next_id = 1
        self._subscribers: list[tuple[str, Callable[[Event], None]]] = []
        self.observers = Observers()

    # One overload per payload shape (chaosd.events.kinds): a call passes the fields of its kind's shape.
    @overload
    def record(
        self, t: float, kind: Literal["fault"], *, about: object = None, **data: Unpack[FaultInjected]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["fault"], *, about: object = None, **data: Unpack[FaultReverted]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["fault"], *, about: object = None, **data: Unpack[FaultMechanismRecovered]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["fault"], *, about: object = None, **data: Unpack[FaultRecovered]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["fault"], *, about: object = None, **data: Unpack[FaultUnrecovered]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["incident"], *, about: object = None, **data: Unpack[IncidentOpened]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["incident"], *, about: object = None, **data: Unpack[IncidentRecovered]
    ) -> Event: ...

    @overload
    def record(
        self, t: float, kind: Literal["incident"], *, about: object = None, **data: Unpack[IncidentUnrecovered]
    ) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["lever"], **data: Unpack[LeverPulled]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["lever"], **data: Unpack[LeverReleased]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["leader"], **data: Unpack[LeaderLost]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["leader"], **data: Unpack[LeaderElected]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["agent"], **data: Unpack[AgentDead]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["agent"], **data: Unpack[AgentAlive]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["agent"], **data: Unpack[AgentJoined]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["supervisor"], **data: Unpack[SupervisorGaveUp]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["supervisor"], **data: Unpack[SupervisorRestarted]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["mcp"], **data: Unpack[McpReconnected]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["memory"], **data: Unpack[MemoryRepaired]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["breaker"], **data: Unpack[BreakerChanged]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["dag"], **data: Unpack[DagRerouted]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendConnected]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendReadiness]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendRestarted]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendRestored]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendUnlisted]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendUnreachable]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["backend"], **data: Unpack[BackendReachable]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["run"], **data: Unpack[RunChanged]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["detector"], **data: Unpack[DetectorChanged]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["throttle"], **data: Unpack[ThrottleChanged]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["score"], **data: Unpack[ScoreChanged]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["survival"], **data: Unpack[SurvivalStarted]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["scenario"], **data: Unpack[ScenarioStarted]) -> Event: ...

    @overload
    def record(self, t: float, kind: PlanKind, **data: Unpack[PlanEnded]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["window"], **data: Unpack[WindowOpened]) -> Event: ...

    @overload
    def record(self, t: float, kind: Literal["window"], **data: Unpack[WindowClosed]) -> Event: ...

    def record(self, t: float, kind: EventKind, *, about: object = None, **data: object) -> Event:
        event = Event(self._next_id, t, kind, data, about)
        self._next_id += 1
        # The log keeps the event without its object: what it holds stays bounded by history.faults.
        self._events.append(event if about is None else Event(event.id, t, kind, data))
        for name, subscriber in list(self._subscribers):
            self.observers.call(name, subscriber, event)
        return event

    def __len__(self) -> int:
        return len(self._events)

    def subscribe(self, callback: Callable[[Event], None], name: str | None = None) -> Callable[[], None]:
        entry = (name or observer_name(callback), callback)
        self._subscribers.append(entry)
        return lambda: self._subscribers.remove(entry)

    @property
    def subscriber_names(self) -> list[str]:
        return [name for name, _ in self._subscribers]

    def events(self, kind: str | None = None) -> list[Event]:
        return [e for e in self._events if kind is None or e.kind == kind]
