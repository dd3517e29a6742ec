"""A fault and an incident, and how their recovery is judged: the baseline, the phases, the fluid model's
prediction; and the catalogue's actions.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.tasks import FailReason
from chaosd.views.units import Duration, Rate, RunInstant, Share, closed_view
from chaosd.views.wire import FaultClock, FaultOutcome, IncidentOutcome, RevertedBy


@closed_view
class BaselineView(TypedDict):
    """The steady state a fault is judged against, over fault-free ticks."""

    goodput: Rate
    error_rate: Share
    sojourn_p95: Annotated[float, Field(ge=0, description="median p95 sojourn, seconds")]
    queue_depth: Annotated[float, Field(ge=0, description="mean tasks waiting")]
    seconds: Annotated[float, Field(ge=0, description="how much fault-free time it covers, seconds")]


# The intervals a recovery time is made of, in order: from the clock's start until the service was seen out of
# tolerance, until the mechanism healed (or the fault was lifted), until the backlog drained, until the figures
# settled back within tolerance (the recovery).
PhaseName = Literal["detection", "heal", "drain", "settle"]


_Moment = Annotated[
    float | None, Field(description="seconds from the fault's clock start (negative: before it); null: not seen")
]


@closed_view
class PhaseSpans(TypedDict):
    """How long each phase of a recovery lasted, seconds (their sum is the recovery time)."""

    detection: Duration
    heal: Duration
    drain: Duration
    settle: Duration


@closed_view
class PhasesView(TypedDict):
    """Where a recovery's time went: its moments, from the fault's (or incident's) clock start."""

    detected: Annotated[_Moment, Field(description="the first tick out of tolerance")]
    healed: Annotated[_Moment, Field(description="the mechanism healed, or the fault was lifted")]
    drained: Annotated[_Moment, Field(description="the queue back within tolerance of its baseline depth")]
    recovered: Annotated[_Moment, Field(description="the service back within tolerance: what recovery_s measures")]
    confirmed: Annotated[_Moment, Field(description="the confirming hold (recovery.confirm) ended: the verdict")]
    spans: PhaseSpans | None  # null until it recovered
    dominant: Annotated[PhaseName | None, Field(description="the longest span; null until it recovered")]


@closed_view
class PredictionView(TypedDict):
    """The fluid model's recovery time from the measured rates: the heal, then the backlog drained at the spare
    capacity, ``drain_s = backlog / (capacity_rate - arrival_rate)``."""

    predicted_s: Annotated[Duration | None, Field(description="seconds: heal_s + drain_s; null when it cannot drain")]
    heal_s: Annotated[
        Duration, Field(description="seconds from the clock's start to the heal (0 on the restore clock)")
    ]
    drain_s: Annotated[
        Duration | None, Field(description="seconds to drain the backlog; null when capacity_rate ≤ arrival_rate")
    ]
    drains: Annotated[bool, Field(description="capacity_rate > arrival_rate: the backlog can drain")]
    backlog: Annotated[int, Field(ge=0, description="tasks waiting above the baseline depth when it healed")]
    arrival_rate: Annotated[
        Rate, Field(description="λ, tasks/s admitted to the queue, measured from the heal until drained")
    ]
    capacity_rate: Annotated[Rate, Field(description="cμ, tasks/s the able workers serve, measured likewise")]


@closed_view
class FaultView(TypedDict):
    """One fault: what was injected, on what, and its verdict."""

    id: Annotated[int, Field(ge=1)]
    action: str
    target: str
    targets: list[str]
    labels: dict[str, str]
    params: dict[str, float]
    ttl: Annotated[float, Field(ge=0, description="how long it lasts unless reverted, seconds")]
    injected_at: RunInstant
    reverted_at: RunInstant | None
    reverted_by: Annotated[
        RevertedBy | None, Field(description="what ended it; aborted: its run ended first (as stored)")
    ]
    mechanism_recovered_at: RunInstant | None
    service_recovered_at: RunInstant | None
    clock: Annotated[FaultClock, Field(description="heal: timed from injection; restore: from when it was lifted")]
    recovery_s: Duration | None
    impact_s: Annotated[float, Field(ge=0, description="seconds out of tolerance while active")]
    impact_tasks: dict[str, int]
    stalled_s: Annotated[
        float, Field(ge=0, description="seconds before its verdict the daemon's own process was paused (the host's)")
    ]
    baseline: BaselineView | None
    recovered: bool
    outcome: Annotated[FaultOutcome, Field(description="aborted: its run ended before its verdict (as stored)")]
    incident: Annotated[int, Field(ge=0)]
    phases: PhasesView
    prediction: PredictionView | None  # null: nothing to predict from (it never healed, or no baseline)
    run_id: NotRequired[Annotated[str, Field(description="the run it belongs to (in a run's history)")]]


# A figure of the service that left tolerance (the baseline's or the SLO's): what an unplanned incident shows first.
ServiceSignal = Literal["goodput", "error_rate", "p95", "queue", "availability"]


@closed_view
class IncidentCause(TypedDict):
    """What an incident nobody injected came from, read from the per-stage telemetry since it started."""

    stage: Annotated[str | None, Field(description="the stage with the most failed attempts; null if none failed")]
    reason: Annotated[FailReason | None, Field(description="why most of that stage's attempts failed")]
    failed: Annotated[int, Field(ge=0, description="that stage's attempts failed for that reason")]
    error: Annotated[str | None, Field(description="a python stage: the exception type its handler raised most")]
    signals: Annotated[list[ServiceSignal], Field(description="the service's figures out of tolerance as it opened")]


@closed_view
class IncidentView(TypedDict):
    """Faults that overlapped in time, judged as one recovery; or the service leaving its steady state with no
    fault in play (``unplanned``: faults joined it only if injected while it was open)."""

    id: Annotated[int, Field(ge=1)]
    faults: list[int]
    actions: list[str]
    started_at: RunInstant
    outcome: IncidentOutcome
    recovery_s: Duration | None
    impact_s: Duration
    impact_tasks: dict[str, int]
    consistent: bool
    stalled_s: Annotated[float, Field(ge=0, description="seconds, while open, the daemon's own process was paused")]
    unplanned: Annotated[bool, Field(description="opened by the service leaving its steady state, no fault in play")]
    cause: IncidentCause | None  # unplanned: its stage and reason (null for an incident a fault opened)
    phases: PhasesView  # of the member that came back last (or its own, unplanned), from the incident's clock
    prediction: PredictionView | None


@closed_view
class FaultTallyView(TypedDict):
    injected: int
    recovered: int
    failed: int
    mean_recovery_s: Duration | None


@closed_view
class ParamView(TypedDict):
    default: float
    min: float
    max: float
    description: str


@closed_view
class ActionView(TypedDict):
    """A catalogue action and its parameters."""

    action: str
    description: str
    targets: list[str]
    default_target: str
    params: dict[str, ParamView]
