"""The shapes chaosd answers with (API, event stream, report, storage), and the one vocabulary of time.

Time fields, everywhere:

- ``t`` and every name ending in ``_at`` (``injected_at``, ``started_at``, ``at``) is an **instant on the run
  clock**: seconds since the run started (virtual seconds in a virtual-time run).
- every name ending in ``_unix`` (``started_unix``) is an **instant on the wall clock**: seconds since the
  Unix epoch.
- every name ending in ``_s`` (``recovery_s``, ``uptime_s``) is a **duration in seconds**; so are ``ttl``,
  ``interval``, latency percentiles and the other durations whose schema says "seconds".

The API's OpenAPI document is generated from these types (``chaosd.api.schemas``), the handlers and the
records build them (checked by mypy), and tests check live answers against the generated schemas, so the
description of a body cannot drift from the body.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from chaosd.views.wire import FaultClock, FaultOutcome, IncidentOutcome, RevertedBy

__all__ = [
    "ActionView",
    "AgentKind",
    "AgentState",
    "AlarmKind",
    "BaselineView",
    "BreakerState",
    "DetectorStateName",
    "Duration",
    "EventKind",
    "EventView",
    "ExpectationRunView",
    "ExpectationView",
    "ExpectedIncident",
    "FailReason",
    "FailedRunView",
    "FaultView",
    "IncidentCause",
    "IncidentView",
    "MeanCI",
    "PhaseName",
    "PhaseSpans",
    "PhasesView",
    "PlanEnd",
    "PredictionView",
    "RefuseReason",
    "ReplicationsView",
    "RunInstant",
    "ScoreView",
    "ServiceSignal",
    "SnapshotView",
    "StageBreakerView",
    "StageNowView",
    "StageReportView",
    "ThrottleMove",
    "UnixInstant",
    "VerdictView",
]

RunInstant = Annotated[float, Field(description="an instant on the run clock: seconds since the run started")]
UnixInstant = Annotated[float, Field(description="an instant on the wall clock: seconds since the Unix epoch")]
Duration = Annotated[float, Field(ge=0, description="a duration in seconds")]
Rate = Annotated[float, Field(ge=0, description="per second")]
Share = Annotated[float, Field(ge=0, description="a share, 0 to 1")]
Points = Annotated[float, Field(ge=0, le=100, description="0 to 100")]
_closed = with_config(ConfigDict(extra="forbid"))
_open = with_config(ConfigDict(extra="allow"))  # blocks that may carry more (a diagnostic's details, …)


@_closed
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


@_closed
class PhaseSpans(TypedDict):
    """How long each phase of a recovery lasted, seconds (their sum is the recovery time)."""

    detection: Duration
    heal: Duration
    drain: Duration
    settle: Duration


@_closed
class PhasesView(TypedDict):
    """Where a recovery's time went: its moments, from the fault's (or incident's) clock start."""

    detected: Annotated[_Moment, Field(description="the first tick out of tolerance")]
    healed: Annotated[_Moment, Field(description="the mechanism healed, or the fault was lifted")]
    drained: Annotated[_Moment, Field(description="the queue back within tolerance of its baseline depth")]
    recovered: Annotated[_Moment, Field(description="the service back within tolerance: what recovery_s measures")]
    confirmed: Annotated[_Moment, Field(description="the confirming hold (recovery.confirm) ended: the verdict")]
    spans: PhaseSpans | None  # null until it recovered
    dominant: Annotated[PhaseName | None, Field(description="the longest span; null until it recovered")]


@_closed
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


@_closed
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


@_closed
class IncidentCause(TypedDict):
    """What an incident nobody injected came from, read from the per-stage telemetry since it started."""

    stage: Annotated[str | None, Field(description="the stage with the most failed attempts; null if none failed")]
    reason: Annotated[FailReason | None, Field(description="why most of that stage's attempts failed")]
    failed: Annotated[int, Field(ge=0, description="that stage's attempts failed for that reason")]
    error: Annotated[str | None, Field(description="a python stage: the exception type its handler raised most")]
    signals: Annotated[list[ServiceSignal], Field(description="the service's figures out of tolerance as it opened")]


@_closed
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


@_closed
class ScoreView(TypedDict):
    """Each dimension and the total, 0-100 (null where nothing was measured)."""

    total: Points | None
    grade: str | None
    availability: Points | None
    recovery: Points | None
    recovery_rate: Points | None
    recovery_speed: Points | None
    consistency: Points | None
    version: str


_S = "seconds"


@_closed
class SnapshotView(TypedDict):
    """One telemetry tick over the sliding windows."""

    t: RunInstant
    queue_depth: Annotated[int, Field(ge=0, description="tasks waiting, not in service")]
    capacity: int
    queue_fill: Annotated[float, Field(ge=0, description="queue_depth / capacity")]
    saturation: Annotated[
        float,
        Field(
            ge=0,
            description="what the collapse detector compares with detector.saturation: the largest of "
            "queue_fill, utilisation and busy_share",
        ),
    ]
    utilisation: Share
    busy_share: Share
    queue_slope: Annotated[float, Field(description="dQ/dt, tasks per second")]
    arrival_rate: Rate
    admitted_rate: Rate
    throughput: Rate
    service_rate: Rate
    goodput: Rate
    error_rate: Share
    retry_rate: Rate
    wait_p50: Annotated[float, Field(ge=0, description=_S)]
    wait_p95: Annotated[float, Field(ge=0, description=_S)]
    wait_p99: Annotated[float, Field(ge=0, description=_S)]
    sojourn_p50: Annotated[float, Field(ge=0, description=_S)]
    sojourn_p95: Annotated[float, Field(ge=0, description=_S)]
    sojourn_p99: Annotated[float, Field(ge=0, description=_S)]
    head_age: Annotated[float, Field(ge=0, description="age of the oldest waiting task, seconds")]
    mean_service: Annotated[float, Field(ge=0, description="busy seconds per task ending")]
    capacity_rate: Annotated[
        float, Field(ge=0, description="tasks per second the workers able to work can serve (measured)")
    ]
    shed_rate: Annotated[float, Field(ge=0, description="tasks per second refused by admission or a full queue")]
    unserved_rate: Annotated[
        float, Field(ge=0, description="tasks per second refused for a partition or an unavailable backend")
    ]
    lateness: Annotated[float, Field(ge=0, description="how late this tick ran, seconds: a paused process")]
    cpu_wait: Annotated[
        float, Field(ge=0, description="seconds since the previous tick the daemon waited for a CPU: a busy host")
    ]


@_closed
class ParamView(TypedDict):
    default: float
    min: float
    max: float
    description: str


@_closed
class ActionView(TypedDict):
    """A catalogue action and its parameters."""

    action: str
    description: str
    targets: list[str]
    default_target: str
    params: dict[str, ParamView]


PlanKind = Literal["survival", "scenario"]
# The flight recorder's kinds (chaosd.events.kinds: one payload type per kind); a plan run's end is of its PlanKind.
EventKind = Literal[
    "agent",
    "backend",
    "breaker",
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


@_closed
class EventView(TypedDict):
    """An event of the flight recorder: the SSE ``data`` is ``t`` and the event's fields."""

    id: int
    t: RunInstant
    kind: EventKind
    data: dict[str, object]


# --- the report -----------------------------------------------------------------------------------------

DetectorStateName = Literal["healthy", "warning", "overload", "collapsed", "failing", "stall", "recovering"]
# Why a task offered was not accepted: a full queue (queue_full, or dropped under when_full = "drop"), over
# admission control's limit (shed), by the throttle, from a partitioned producer, or the backend unreachable.
RefuseReason = Literal["queue_full", "dropped", "shed", "throttled", "partitioned", "unavailable"]
# Why an accepted task failed: a stage's (timeout, error, tool_timeout, llm_error, mcp_disconnected,
# node_removed, handler_error) or the route's (no_route: no stage to send it to).
# A stage's circuit breaker: open (calls go around it or fail fast), half-open (its reset time passed; the
# next call or health check decides), closed.
BreakerState = Literal["closed", "open", "half_open"]

FailReason = Literal[
    "timeout", "error", "tool_timeout", "llm_error", "mcp_disconnected", "node_removed", "no_route", "handler_error"
]


@_closed
class TimelinePoint(TypedDict):
    t: RunInstant
    offered_per_s: Rate
    throughput_per_s: Rate
    goodput_per_s: Rate
    queue_depth: Annotated[int, Field(ge=0)]
    sojourn_p95: Annotated[float, Field(ge=0, description=_S)]
    utilisation: Share
    state: Annotated[DetectorStateName, Field(description="the collapse detector's state")]
    throttle_factor: Share


# The worst an alarm got: collapse once goodput collapsed, else failing once tasks failed with a short queue.
AlarmKind = Literal["overload", "failing", "collapse"]
AgentKind = Literal["worker", "producer", "orchestrator"]
AgentState = Literal["running", "slow", "paused", "partitioned", "dead"]


@_closed
class EpisodeView(TypedDict):
    """An alarm (overload; failing once tasks failed with a short queue; collapse once it collapsed), from
    detection to healthy (null while it lasts)."""

    detected_at: RunInstant
    cleared_at: RunInstant | None
    reason: str
    kind: AlarmKind
    duration_s: Duration


@_closed
class LatencyBlock(TypedDict):
    count: Annotated[int, Field(ge=0)]
    mean: Annotated[float, Field(ge=0, description=_S)]
    p50: Annotated[float, Field(ge=0, description=_S)]
    p95: Annotated[float, Field(ge=0, description=_S)]
    p99: Annotated[float, Field(ge=0, description=_S)]


@_closed
class StageBreakerView(TypedDict):
    state: Annotated[BreakerState, Field(description="at the end of the window")]
    opened: Annotated[int, Field(ge=0, description="times it opened in the window")]
    closed: Annotated[int, Field(ge=0, description="times it closed again in the window")]


@_closed
class StageReportView(TypedDict):
    """One stage's attempts over the measured window: every attempt, first tries and retries."""

    kind: Annotated[str, Field(description="compute, tool, llm, memory, mcp or python")]
    attempts: Annotated[int, Field(ge=0, description="attempts = succeeded + the failures' sum")]
    succeeded: Annotated[int, Field(ge=0)]
    failures: Annotated[dict[FailReason, int], Field(description="failed attempts by reason (reasons seen only)")]
    retries: Annotated[int, Field(ge=0, description="attempts that retried a failed one")]
    mean_s: Annotated[float, Field(ge=0, description=_S)]
    p50_s: Annotated[float, Field(ge=0, description=_S)]
    p95_s: Annotated[float, Field(ge=0, description=_S)]
    p99_s: Annotated[float, Field(ge=0, description=_S)]
    breaker: StageBreakerView
    handler_errors: Annotated[dict[str, int], Field(description="python: attempts whose handler raised, by type")]


@_closed
class LatencyView(TypedDict):
    wait: LatencyBlock
    sojourn: LatencyBlock


@_open
class CollapseView(TypedDict):
    detector: bool
    count: Annotated[int, Field(ge=0, description="alarms that collapsed (goodput far below what could be good)")]
    alarms: Annotated[int, Field(ge=0, description="alarms raised: overload, collapse or failing")]
    stalls: Annotated[int, Field(ge=0, description="times the process was seen paused")]
    episodes: list[EpisodeView]
    time_alarmed_s: Annotated[float, Field(ge=0, description="the episodes' durations summed, seconds")]
    time_collapsed_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the collapsed state")]
    time_overloaded_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the overload state")]
    time_stalled_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the stall state")]
    failing: NotRequired[
        Annotated[int, Field(ge=0, description="alarms that were failing (tasks not good with a short queue)")]
    ]
    time_failing_s: NotRequired[
        Annotated[float, Field(ge=0, description="a duration in seconds: in the failing state")]
    ]
    final_state: DetectorStateName


# What admission control did: aimd lowered (decrease) or raised (increase) its factor; capacity turned its short
# limit on (standing: a queue stands) or off (bound).
ThrottleMove = Literal["decrease", "increase", "standing", "bound"]


@_open
class ThrottleAction(TypedDict):
    at: RunInstant
    action: ThrottleMove
    factor: Share
    limit: Annotated[int, Field(ge=0)]


@_open
class ThrottleView(TypedDict):
    enabled: bool
    policy: Literal["capacity", "aimd", "none"]
    target_s: Annotated[float, Field(ge=0, description="capacity: the wait kept once a queue stands, seconds")]
    limit: Annotated[int, Field(ge=0, description="tasks admission control lets wait at the end")]
    lowest_limit: Annotated[int, Field(ge=0)]
    capacity_per_s: Annotated[float, Field(ge=0, description="the capacity measured last, tasks per second")]
    decreases: int
    increases: int
    lowest_factor: Share
    final_factor: Share
    refused: int
    actions: list[ThrottleAction]
    actions_truncated: int


@_open
class DiagnosticView(TypedDict):
    """A cause of lost availability; some carry details (examples, agents, episodes, final_state)."""

    cause: str
    count: int
    share: Share
    examples: NotRequired[Annotated[list[int], Field(description="duplicated: the first few task ids")]]
    agents: NotRequired[Annotated[list[str], Field(description="agents_dead: the agents still dead at the end")]]
    episodes: NotRequired[Annotated[int, Field(ge=0, description="collapsed_s: the collapse detector's episodes")]]
    final_state: NotRequired[
        Annotated[DetectorStateName, Field(description="collapsed_s: the detector's state at the end")]
    ]


@_closed
class ExpectedIncident(TypedDict):
    """The incident behind an expectation's measurement (its slowest recovery, or what cost the grade)."""

    id: Annotated[int, Field(ge=1)]
    faults: list[int]
    actions: list[str]
    outcome: IncidentOutcome
    recovery_s: Duration | None
    impact_s: Duration | None
    stalled_s: Duration


@_closed
class ExpectationRunView(TypedDict):
    """One replication's own verdict on an ``expect:`` check."""

    seed: int
    measured: str | int | float | bool | None
    passed: bool


@_closed
class ExpectationView(TypedDict):
    """One ``expect:`` check judged on a report (a run's, or a scenario's own window)."""

    check: Annotated[str, Field(description="the expectation's key, as in the scenario file")]
    expected: Annotated[str | int | float | bool, Field(description="the value as written in the scenario")]
    measured: str | int | float | bool | None
    passed: bool
    incident: NotRequired[ExpectedIncident]
    because: NotRequired[Annotated[str, Field(description="why it failed: the check and the fault or incident")]]
    runs: NotRequired[
        Annotated[
            list[ExpectationRunView],
            Field(
                description="over N ≥ 2 replications: each run's own verdict, in seed order; `passed` is the pooled one"
            ),
        ]
    ]


@_closed
class VerdictView(TypedDict):
    """Whether the run held (``chaosd run`` exits 3 when it did not), and why, in words."""

    passed: bool
    reason: Annotated[
        str,
        Field(
            description="the first expectation that failed; else the [slo] judged over the measured window, or with "
            "no availability objective, the share of it the detector said failing (more than half fails)"
        ),
    ]


@_closed
class LoadView(TypedDict):
    """What was offered: the load's shape, and how it compares with what the workers can serve."""

    arrival: Literal["poisson", "constant", "bursty"]
    producers: Annotated[int, Field(ge=0)]
    base_rate: Annotated[float, Field(ge=0, description="tasks per second offered outside spikes")]
    peak_rate: Annotated[float, Field(ge=0, description="the most offered in the measured window, tasks per second")]
    workers: Annotated[int, Field(ge=1)]
    mean_service_s: Duration
    offered_rho: Annotated[float, Field(ge=0, description="base_rate × mean_service_s / workers")]
    peak_rho: Annotated[float, Field(ge=0, description="peak_rate × mean_service_s / workers")]


@_open
class TaskCounts(TypedDict):
    offered: int
    accepted: int
    completed: int
    late: int
    degraded: int
    failed: int
    rejected: int
    lost: int
    duplicated: int
    in_flight: int


@_open
class ReportTasks(TaskCounts):
    """The measured tasks' counts, and why those refused or failed were."""

    rejected_by: Annotated[dict[str, int], Field(description="refused tasks by reason: a RefuseReason")]
    failed_by: Annotated[dict[str, int], Field(description="failed tasks by reason: a FailReason")]
    lost_all_cohorts: Annotated[int, Field(ge=0, description="lost among every task, warm-up's too")]
    retries: Annotated[int, Field(ge=0)]


@_closed
class QueueBlock(TypedDict):
    capacity: Annotated[int, Field(ge=0)]
    when_full: Literal["block", "drop", "reject"]
    mean_depth: Annotated[float, Field(ge=0, description="tasks waiting, averaged over the measured window")]
    max_depth: Annotated[int, Field(ge=0, description="the most waiting at once, capacity at most")]
    max_over_capacity: Annotated[int, Field(ge=0, description="how far past capacity the depth ever went")]
    max_blocked: Annotated[int, Field(ge=0, description="the most producers blocked at once (when_full: block)")]


@_closed
class SloView(TypedDict):
    availability: Annotated[float | None, Field(description="goodput / offered, per window; null: the baseline's")]
    p95: Annotated[float | None, Field(description="p95 sojourn of completed tasks, seconds; null: the baseline's")]


@_open
class FaultsSummaryView(TypedDict):
    """Every fault and incident of the run counted (the lists hold only the newest)."""

    incidents: Annotated[int, Field(ge=0)]
    incidents_recovered: Annotated[int, Field(ge=0)]
    injected: Annotated[int, Field(ge=0)]
    recovered: Annotated[int, Field(ge=0)]
    failed: Annotated[int, Field(ge=0)]
    unmeasured: Annotated[int, Field(ge=0)]
    pending: Annotated[int, Field(ge=0, description="active or recovering: no verdict yet")]
    mean_recovery_s_by_action: Annotated[
        dict[str, float], Field(description="seconds, over the faults with a recovery of their own")
    ]
    faults_listed: Annotated[int, Field(ge=0, description="how many of the newest faults the report lists")]
    incidents_listed: Annotated[int, Field(ge=0, description="how many of the newest incidents the report lists")]
    baseline: BaselineView | None
    slo: SloView
    lever: Annotated[str | None, Field(description="why the safety lever is pulled; null when it is not")]


@_open
class RuntimeView(TypedDict):
    """What the runtime did to keep serving: elections, redispatches, restarts."""

    elections: Annotated[int, Field(ge=0)]
    redispatched: Annotated[int, Field(ge=0)]
    lease_expired: Annotated[int, Field(ge=0)]
    deduplicated: Annotated[int, Field(ge=0)]
    restarts: Annotated[int, Field(ge=0)]
    gave_up: Annotated[list[str], Field(description="agents the supervisor stopped restarting")]
    leader: str | None
    route: list[str]


PlanEnd = Literal["finished", "stopped", "failed"]  # how a plan run ended
PlanState = Literal["running", PlanEnd]  # running → finished | stopped | failed

# ``for`` is a keyword: the key that cannot be a class attribute is declared the functional way.
_PlanLogFor = TypedDict(
    "_PlanLogFor",
    {"for": NotRequired[Annotated[list[int], Field(description="wait: the faults whose verdicts it waits for")]]},
)


@_open
class PlanLogEntry(_PlanLogFor):
    """One step of a plan (a scenario action, a survival pick, a wait, a skip or a stop), as it happened."""

    at: RunInstant
    action: Annotated[str, Field(description="the fault action or check, or wait, skip or stop")]
    target: NotRequired[str | None]
    ok: NotRequired[Annotated[bool, Field(description="carried out (a fault injected, a check that held)")]]
    fault: NotRequired[Annotated[int, Field(ge=1, description="the fault it injected")]]
    targets: NotRequired[list[str]]
    error: NotRequired[Annotated[str, Field(description="why the fault could not be injected")]]
    leader: NotRequired[str | None]
    state: NotRequired[Literal["waiting", "done", "timed out"]]
    waited_s: NotRequired[Duration]
    reason: NotRequired[str]
    incident: NotRequired[Annotated[int, Field(ge=1, description="wait: the open incident it waits for")]]
    previous: NotRequired[Annotated[int, Field(ge=1, description="skip: the fault still recovering")]]
    reverted: NotRequired[Annotated[list[int], Field(description="stop: the faults it reverted")]]


@_open
class ReportView(TypedDict):
    """The run report (``chaosd run``, ``--report``, ``GET /api/v1/report``); blocks without a time field stay open."""

    chaosd_version: str
    scenario: str | None
    seed: int
    clock: Annotated[str, Field(description="virtual or real: what the run clock of every _at and t field is")]
    duration_s: Duration
    warmup_s: Duration
    load: LoadView
    tasks: ReportTasks
    throughput: dict[str, float]
    queue: QueueBlock
    utilisation: Share
    latency: LatencyView
    collapse: CollapseView
    throttle: ThrottleView
    timeline: list[TimelinePoint]
    faults: list[FaultView]
    incidents: list[IncidentView]
    faults_summary: FaultsSummaryView
    score: ScoreView
    diagnostics: list[DiagnosticView]
    interrupted: NotRequired[bool]
    runtime: NotRequired[RuntimeView]
    actions: NotRequired[list[PlanLogEntry]]
    expectations: NotRequired[list[ExpectationView]]
    replications: NotRequired[ReplicationsView]
    verdict: NotRequired[VerdictView]
    stages: NotRequired[Annotated[dict[str, StageReportView], Field(description="per stage, over the measured window")]]


# --- replications: one run's numbers over N seeds -----------------------------------------------------------


@_closed
class MeanCI(TypedDict):
    """The mean of one number over the runs that measured it, and its 95 % confidence interval."""

    mean: float | None
    ci95: Annotated[
        list[float] | None,
        Field(description="[lo, hi]: Student's t on the per-run values, n - 1 degrees of freedom; null when n < 2"),
    ]
    n: Annotated[int, Field(ge=0, description="runs that measured it")]


@_closed
class FailedRunView(TypedDict):
    """A replication whose service failed (its SLO, or failing for most of its window)."""

    seed: int
    reason: str


@_closed
class ReplicationsView(TypedDict):
    """The same run repeated on N seeds: each number's mean and 95 % CI over the runs, and how the grade fell."""

    n: Annotated[int, Field(ge=1)]
    seeds: Annotated[list[int], Field(description="one per run, in order; the first is the report's own")]
    score: MeanCI
    components: Annotated[dict[str, MeanCI], Field(description="each score dimension (null ones left out)")]
    grade_counts: Annotated[dict[str, int], Field(description="runs per grade, best grade first")]
    recovery_s: Annotated[
        dict[str, MeanCI], Field(description="per fault action: its per-run mean recovery, seconds, over runs with one")
    ]
    goodput: Annotated[MeanCI, Field(description="goodput per second")]
    completed: Annotated[MeanCI, Field(description="completions per second")]
    wait_mean_s: Annotated[MeanCI, Field(description="mean queue wait, seconds")]
    p95_s: Annotated[MeanCI, Field(description="p95 sojourn, seconds")]
    lost: Annotated[MeanCI, Field(description="lost tasks per run")]
    failed_runs: NotRequired[
        Annotated[list[FailedRunView], Field(description="runs whose service failed: their SLO, or failing mostly")]
    ]


# --- API answers ------------------------------------------------------------------------------------------


@_closed
class HealthBody(TypedDict):
    status: Annotated[str, Field(description="ok or failed")]
    problems: list[str]


@_closed
class ReadyBody(TypedDict):
    ready: bool
    problems: list[str]


@_closed
class AgentView(TypedDict):
    id: str
    kind: AgentKind
    state: AgentState
    restarts: int
    gave_up: bool


@_closed
class StageNowView(TypedDict):
    """One stage over about the telemetry window, from two readings of its counters (the Arena's DAG)."""

    kind: Annotated[str, Field(description="compute, tool, llm, memory, mcp or python")]
    attempts_per_s: Rate
    retries_per_s: Rate
    p95_s: Annotated[float, Field(ge=0, description="p95 attempt duration over the window, seconds (0: none)")]
    error_share: Annotated[float, Field(ge=0, le=1, description="failed share of the window's attempts (0: none)")]
    breaker: BreakerState
    window_s: Annotated[float, Field(ge=0, description="seconds between the two readings the figures come from")]


@_closed
class DagView(TypedDict):
    nodes: list[str]
    edges: list[str]
    removed_nodes: list[str]
    removed_edges: list[str]
    breakers_open: list[str]
    dependencies: Annotated[
        list[str], Field(description="what python stages call, as stage/dependency pairs (dependency_* targets)")
    ]
    stages: Annotated[dict[str, StageNowView], Field(description="per stage, over about the telemetry window")]


@_closed
class QueueView(TypedDict):
    depth: int
    capacity: int


@_closed
class AdmissionView(TypedDict):
    """Admission control now: its policy, the tasks it lets wait, and what it measures."""

    policy: Literal["capacity", "aimd", "none"]
    limit: Annotated[int, Field(ge=0, description="tasks admission lets wait (the queue capacity when none)")]
    standing: Annotated[bool, Field(description="capacity: a standing queue is kept to the target")]
    capacity_per_s: Annotated[float, Field(ge=0, description="measured service capacity, tasks per second")]
    shed_per_s: Annotated[float, Field(ge=0, description="refused over the limit or by a full queue, per second")]


@_closed
class StatusBody(TypedDict):
    run_id: str
    started_unix: UnixInstant
    uptime_s: Duration
    agents: list[AgentView]
    leader: str | None
    route: list[str]
    dag: DagView
    queue: QueueView
    detector: Annotated[str, Field(description="healthy, warning, overload, collapsed, failing, stall or recovering")]
    throttle_factor: Share
    admission: AdmissionView
    backend: Annotated[str | None, Field(description="what is wrong with the backend now (Redis unreachable); null")]
    telemetry: SnapshotView | None
    score: ScoreView
    faults_active: int
    lever: Annotated[str | None, Field(description="why the safety lever is pulled; null when it is not")]
    survival: Literal[PlanState, "idle"]
    scenario: Literal[PlanState, "idle"]
    stopping: bool


@_closed
class ActionsBody(TypedDict):
    actions: list[ActionView]


@_closed
class FaultsBody(TypedDict):
    faults: Annotated[list[FaultView], Field(description="the newest faults, those still in memory (history.faults)")]
    lever: str | None
    injected: Annotated[int, Field(description="faults injected in this run")]
    first_in_memory: Annotated[
        int, Field(description="the oldest fault id in memory; older ones: GET /api/v1/faults/{id}, from storage")
    ]


@_closed
class RevertedBody(TypedDict):
    reverted: list[int]
    faults: list[FaultView]


@_closed
class LeverBody(TypedDict):
    lever: str | None
    reverted: NotRequired[Annotated[int, Field(description="how many faults the pull reverted")]]


@_closed
class ScoreBody(ScoreView):
    faults_injected: int
    faults_recovered: int


@_closed
class WindowSpan(TypedDict):
    start_at: RunInstant
    end_at: RunInstant


@_closed
class WindowSummary(TypedDict):
    id: int
    name: str
    state: Annotated[str, Field(description="open or closed")]
    started_at: RunInstant
    ended_at: RunInstant | None


@_closed
class WindowsBody(TypedDict):
    windows: list[WindowSummary]


@_closed
class WindowReport(WindowSummary):
    """A window's own measurements, frozen once it is closed."""

    tasks: TaskCounts
    score: ScoreView
    faults: list[FaultView]
    incidents: list[IncidentView]
    window: WindowSpan
    diagnostics: list[DiagnosticView]


@_open
class PlanStatus(TypedDict):
    """A survival or scenario run; only ``state`` (idle) when there has been none."""

    state: Annotated[Literal[PlanState, "idle"], Field(description="idle: none has run")]
    kind: NotRequired[PlanKind]
    name: NotRequired[str]
    started_at: NotRequired[RunInstant]
    ended_at: NotRequired[RunInstant | None]
    duration_s: NotRequired[Duration]
    elapsed_s: NotRequired[Duration]
    actions: NotRequired[Annotated[int, Field(description="actions carried out")]]
    log: NotRequired[Annotated[list[PlanLogEntry], Field(description="its newest 50 steps")]]
    reason: NotRequired[str | None]
    window: NotRequired[WindowSpan]
    score: NotRequired[ScoreView]
    daemon_score: NotRequired[ScoreView]
    expectations: NotRequired[list[ExpectationView]]
    passed: NotRequired[bool | None]


# --- a plan's window: what the controller and the plans hand each other (not served as such) ----------------


class CauseCount(TypedDict):
    cause: str
    count: int


class LiveCounts(TypedDict):
    """The live task counts (what ``plans.Tally.of`` reads): the run report's, without building the report."""

    tasks: TaskCounts
    diagnostics: list[CauseCount]


class LiveWindow(LiveCounts):
    """The live counts with a window's faults and incidents (what ``plans.window_report`` measures from)."""

    faults: list[FaultView]
    incidents: list[IncidentView]


class WindowMeasures(TypedDict):
    """What happened in a window since it opened (``plans.window_report``): its tasks, score and faults."""

    tasks: TaskCounts
    score: ScoreView
    faults: list[FaultView]


class PlanReport(WindowMeasures):
    """A plan's window (what its expectations judge): its measures, incidents, span and, once asked, its log."""

    incidents: list[IncidentView]
    window: WindowSpan
    actions: NotRequired[list[PlanLogEntry]]


RunStatus = Literal["running", "finished", "aborted", "failed"]  # aborted: its process died before it ended


@_closed
class RunSummary(TypedDict):
    id: str
    started_unix: UnixInstant
    ended_unix: UnixInstant | None
    status: RunStatus
    score: ScoreView | None


@_closed
class RunsBody(TypedDict):
    runs: list[RunSummary]


@_closed
class RunBody(TypedDict):
    id: str
    started_unix: UnixInstant
    ended_unix: UnixInstant | None
    status: RunStatus
    config: Annotated[dict[str, object], Field(description="the run's settings, as it started")]
    report: ReportView | None
    faults: Annotated[list[FaultView], Field(description="one page: ids above faults_after, faults_limit at most")]
    faults_next: Annotated[
        int | None, Field(description="pass as faults_after for the next page; null when this is the last")
    ]


@_open
class OpenApiDocument(TypedDict):
    """This API's OpenAPI 3.1 document."""

    openapi: str
    info: dict[str, object]
    components: dict[str, object]
    paths: dict[str, object]


@_closed
class ScenariosBody(TypedDict):
    scenarios: Annotated[list[str], Field(description="names POST /api/v1/scenarios/run takes")]


@_closed
class SeriesPoint(TypedDict):
    """The newest telemetry tick of one step of the Arena's charts."""

    t: RunInstant
    queue_depth: Annotated[int, Field(ge=0)]
    queue_slope: Annotated[float, Field(description="dQ/dt, tasks per second")]
    sojourn_p95: Annotated[float, Field(ge=0, description=_S)]
    throughput: Rate
    arrival_rate: Rate
    admitted_rate: Rate
    goodput: Rate
    throttle_factor: Share
    detector: str


@_closed
class FaultTallyView(TypedDict):
    injected: int
    recovered: int
    failed: int
    mean_recovery_s: Duration | None


@_closed
class TimeseriesBody(TypedDict):
    """The last minutes of telemetry (bounded: at most 600 points), and the fault counters."""

    step_s: Duration
    window_s: Duration
    points: list[SeriesPoint]
    faults: FaultTallyView
