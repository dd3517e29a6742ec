"""The flight recorder: lifecycle events with their clock time, bounded, with live subscribers.

:class:`EventLog` composes the kept events (:mod:`chaosd.events.history`), who watches them
(:mod:`chaosd.events.observers`) and :meth:`EventLog.record`, typed by kind (:mod:`chaosd.events.kinds`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Unpack, overload

from chaosd.events.history import Event, EventHistory, fault_data
from chaosd.events.kinds import (
    AgentAlive,
    AgentDead,
    AgentJoined,
    AgentStalled,
    BackendConnected,
    BackendReachable,
    BackendReadiness,
    BackendRestarted,
    BackendRestored,
    BackendUnlisted,
    BackendUnreachable,
    BreakerChanged,
    ClientsChanged,
    DagRerouted,
    DetectorChanged,
    EventKind,
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
from chaosd.events.observers import Observers, Subscribers
from chaosd.views import PlanKind

__all__ = ["Event", "EventKind", "EventLog", "Observers", "fault_data"]


class EventLog:
    """Keeps the newest ``limit`` events; subscribers see each one as it is recorded.

    Its parts: ``history`` (the kept events, what readers query), ``subscribers`` (who sees each event live) and
    ``observers`` (how a subscriber or a guarded listener that raises is counted, never fatal).
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.history = EventHistory(limit)
        self.observers = Observers()
        self.subscribers = Subscribers(self.observers)

    # One overload per payload shape (chaosd.events.kinds): mypy checks each call's fields against its kind.
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
    def record(self, t: float, kind: Literal["agent"], **data: Unpack[AgentStalled]) -> Event: ...

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
    def record(self, t: float, kind: Literal["clients"], **data: Unpack[ClientsChanged]) -> Event: ...

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
        """An event of ``kind`` at ``t``: numbered and kept, then handed to each subscriber."""
        event = self.history.add(t, kind, data, about)
        self.subscribers.publish(event)
        return event

    def __len__(self) -> int:
        return len(self.history)

    def subscribe(self, callback: Callable[[Event], None], name: str | None = None) -> Callable[[], None]:
        return self.subscribers.subscribe(callback, name)

    @property
    def subscriber_names(self) -> list[str]:
        return self.subscribers.names

    def events(self, kind: str | None = None) -> list[Event]:
        return self.history.events(kind)
