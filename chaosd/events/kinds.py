"""What each kind of event carries: one payload type per kind (and per shape, where a kind has several).

The payloads are the events' ``data`` as recorded, streamed (``GET /api/v1/events``) and stored: the
flight recorder's :meth:`~chaosd.events.log.EventLog.record` takes them as keyword arguments, one overload per
shape, so a call site that passes a field its kind does not have (or misses one) fails type checking.
A kind with several shapes tells them apart by ``state`` (``backend`` also by its connection fields).
"""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict  # pydantic reads it on 3.11 (the event-payload test validates with it)

from chaosd.views import (  # EventKind: defined where EventView needs it
    DetectorStateName,
    EventKind,
    IncidentCause,
    PhasesView,
    PlanEnd,
    PredictionView,
    ThrottleMove,
)
from chaosd.views.wire import RevertCause

__all__ = [
    "AgentAlive",
    "AgentDead",
    "AgentJoined",
    "AgentStalled",
    "BackendConnected",
    "BackendReachable",
    "BackendReadiness",
    "BackendRestarted",
    "BackendRestored",
    "BackendUnlisted",
    "BackendUnreachable",
    "BreakerChanged",
    "ClientsChanged",
    "DagRerouted",
    "DetectorChanged",
    "EventKind",
    "FaultEventData",
    "FaultInjected",
    "FaultMechanismRecovered",
    "FaultRecovered",
    "FaultReverted",
    "FaultUnrecovered",
    "IncidentEventData",
    "IncidentOpened",
    "IncidentRecovered",
    "IncidentUnrecovered",
    "LeaderElected",
    "LeaderLost",
    "LeverPulled",
    "LeverReleased",
    "McpReconnected",
    "MemoryRepaired",
    "PlanEnded",
    "RunChanged",
    "RunPhase",
    "ScenarioStarted",
    "ScoreChanged",
    "SupervisorGaveUp",
    "SupervisorRestarted",
    "SurvivalStarted",
    "ThrottleChanged",
    "WindowClosed",
    "WindowOpened",
]


# --- fault: a fault's life, from injection to its verdict (about: its FaultRecord) ---------------------


class FaultInjected(TypedDict):
    id: int
    action: str
    state: Literal["injected"]
    targets: list[str]


class FaultReverted(TypedDict):
    id: int
    action: str
    state: Literal["reverted"]
    by: RevertCause


class FaultMechanismRecovered(TypedDict):
    id: int
    action: str
    state: Literal["mechanism_recovered"]


class FaultRecovered(TypedDict):
    id: int
    action: str
    state: Literal["recovered"]
    recovery_s: float | None  # None: judged with its incident, no time of its own
    phases: PhasesView  # where the time went (chaosd.faults.record.phases)
    prediction: PredictionView | None  # the fluid model's time from the measured rates


class FaultUnrecovered(TypedDict):
    id: int
    action: str
    state: Literal["failed", "unmeasured"]


FaultEventData = FaultInjected | FaultReverted | FaultMechanismRecovered | FaultRecovered | FaultUnrecovered


# --- incident: an incident nobody injected, from opening to its verdict (about: its Incident) --------------


class IncidentOpened(TypedDict):
    id: int
    state: Literal["opened"]
    started_at: float  # its first tick out of tolerance (the event comes once that lasted recovery's debounce)
    cause: IncidentCause  # so far: the stage and reason failing most, the figures out of tolerance


class IncidentRecovered(TypedDict):
    id: int
    state: Literal["recovered"]
    recovery_s: float | None  # from its start (or its last fault's blow) until the service was back
    cause: IncidentCause
    phases: PhasesView
    prediction: PredictionView | None


class IncidentUnrecovered(TypedDict):
    id: int
    state: Literal["failed", "unmeasured"]
    cause: IncidentCause


IncidentEventData = IncidentOpened | IncidentRecovered | IncidentUnrecovered


# --- lever: the safety lever --------------------------------------------------------------------------


class LeverPulled(TypedDict):
    state: Literal["pulled"]
    reason: str
    reverted: int  # the faults it reverted


class LeverReleased(TypedDict):
    state: Literal["released"]


# --- the pipeline: leader, agents, supervisor, stages, breakers, routes -------------------------------


class LeaderLost(TypedDict):
    state: Literal["lost"]
    replica: str


class LeaderElected(TypedDict):
    state: Literal["elected"]
    replica: str
    redispatched: int  # tasks it dispatched again: taken by the old leader, never acknowledged


class AgentDead(TypedDict):
    agent: str
    state: Literal["dead"]
    pid_killed: NotRequired[bool]  # a local worker process: killed by its pid (redis backend)
    exit_requested: NotRequired[str]  # a remote worker: the process instance asked to exit
    heartbeat: NotRequired[Literal["lost"]]  # a remote worker that stopped beating


class AgentStalled(TypedDict):
    agent: str
    state: Literal["stalled"]
    heartbeat: Literal["lost"]
    pid: int  # the local worker process that lives but does not beat
    stopped: bool  # the OS says it is stopped (SIGSTOP): judged at once, not after the heartbeat's expiry


class AgentAlive(TypedDict):
    agent: str
    state: Literal["alive"]
    pid: NotRequired[int]  # a local worker process, started again
    instance: NotRequired[str]  # a remote worker's process, beating again


class AgentJoined(TypedDict):
    agent: str
    state: Literal["joined"]  # a remote worker adopted as an agent


class SupervisorGaveUp(TypedDict):
    agent: str
    state: Literal["gave_up"]
    restarts: int  # within the supervisor's window


class SupervisorRestarted(TypedDict):
    agent: str
    state: Literal["restarted"]


class McpReconnected(TypedDict):
    stage: str
    state: Literal["reconnected"]


class MemoryRepaired(TypedDict):
    stage: str
    state: Literal["repaired"]


class BreakerChanged(TypedDict):
    open: list[str]  # the stages whose breakers are open now, sorted


class DagRerouted(TypedDict):
    state: Literal["rerouted"]
    route: list[str]
    bypassed: list[str]


# --- backend: the Redis backend's connection and its workers ------------------------------------------


class BackendConnected(TypedDict):
    backend: Literal["redis"]
    run: str  # the run id Redis handed out


class BackendReadiness(TypedDict):
    state: Literal["ready", "not_ready"]


class BackendRestarted(TypedDict):
    state: Literal["restarted"]
    lost_data: bool


class BackendRestored(TypedDict):
    state: Literal["restored"]
    lost_data: bool
    controls: int  # agents' controls written again
    faulted: int  # of which not the default control


class BackendUnlisted(TypedDict):
    state: Literal["unlisted"]
    agent: str
    limit: int


class BackendUnreachable(TypedDict):
    state: Literal["unreachable"]
    reason: str


class BackendReachable(TypedDict):
    state: Literal["reachable"]
    down_s: float


# --- the run, its telemetry and its plans -------------------------------------------------------------

RunPhase = Literal["started", "measuring", "stopped"]


class RunChanged(TypedDict):
    state: RunPhase


class DetectorChanged(TypedDict):
    old: DetectorStateName
    new: DetectorStateName
    reason: str


class ThrottleChanged(TypedDict):
    action: ThrottleMove
    factor: float
    limit: int


class ClientsChanged(TypedDict):
    """The callers' policy pushed at run time: the settings now in force (``clients``), and which keys changed."""

    clients: dict[str, object]
    changed: list[str]


class ScoreChanged(TypedDict):
    total: float | None
    grade: str | None


class SurvivalStarted(TypedDict):
    state: Literal["started"]
    interval_s: float
    duration_s: float
    overlap: bool


class ScenarioStarted(TypedDict):
    name: str
    state: Literal["started"]
    speed: float


class PlanEnded(TypedDict):
    name: str
    state: PlanEnd
    reason: str | None


class WindowOpened(TypedDict):
    id: int
    name: str
    state: Literal["opened"]


class WindowClosed(TypedDict):
    id: int
    name: str
    state: Literal["closed"]
    score: float | None
    grade: str | None
    availability: float | None
