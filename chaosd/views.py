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

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

__all__ = [
    "ActionView",
    "BaselineView",
    "Duration",
    "EventView",
    "ExpectationView",
    "ExpectedIncident",
    "FaultView",
    "IncidentView",
    "RunInstant",
    "ScoreView",
    "SnapshotView",
    "UnixInstant",
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
    reverted_by: Annotated[str | None, Field(description="ttl, revert, lever, shutdown or aborted")]
    mechanism_recovered_at: RunInstant | None
    service_recovered_at: RunInstant | None
    clock: Annotated[str, Field(description="heal: timed from injection; restore: from when it was lifted")]
    recovery_s: Duration | None
    impact_s: Annotated[float, Field(ge=0, description="seconds out of tolerance while active")]
    impact_tasks: dict[str, int]
    stalled_s: Annotated[
        float, Field(ge=0, description="seconds before its verdict the daemon's own process was paused (the host's)")
    ]
    baseline: BaselineView | None
    recovered: bool
    outcome: Annotated[str, Field(description="active, recovering, recovered, failed, unmeasured (or aborted)")]
    incident: Annotated[int, Field(ge=0)]
    run_id: NotRequired[Annotated[str, Field(description="the run it belongs to (in a run's history)")]]


@_closed
class IncidentView(TypedDict):
    """Faults that overlapped in time, judged as one recovery."""

    id: Annotated[int, Field(ge=1)]
    faults: list[int]
    actions: list[str]
    started_at: RunInstant
    outcome: str
    recovery_s: Duration | None
    impact_s: Duration
    impact_tasks: dict[str, int]
    consistent: bool
    stalled_s: Annotated[float, Field(ge=0, description="seconds, while open, the daemon's own process was paused")]


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


@_closed
class EventView(TypedDict):
    """An event of the flight recorder: the SSE ``data`` is ``t`` and the event's fields."""

    id: int
    t: RunInstant
    kind: str
    data: dict[str, Any]


# --- the report -----------------------------------------------------------------------------------------


@_closed
class TimelinePoint(TypedDict):
    t: RunInstant
    offered_per_s: Rate
    throughput_per_s: Rate
    goodput_per_s: Rate
    queue_depth: Annotated[int, Field(ge=0)]
    sojourn_p95: Annotated[float, Field(ge=0, description=_S)]
    utilisation: Share
    state: Annotated[str, Field(description="the collapse detector's state")]
    throttle_factor: Share


@_closed
class EpisodeView(TypedDict):
    """An alarm (overload, or collapse once it collapsed), from detection to healthy (null while it lasts)."""

    detected_at: RunInstant
    cleared_at: RunInstant | None
    reason: str
    kind: Literal["overload", "collapse"]
    duration_s: Duration


@_closed
class LatencyBlock(TypedDict):
    count: Annotated[int, Field(ge=0)]
    mean: Annotated[float, Field(ge=0, description=_S)]
    p50: Annotated[float, Field(ge=0, description=_S)]
    p95: Annotated[float, Field(ge=0, description=_S)]
    p99: Annotated[float, Field(ge=0, description=_S)]


@_closed
class LatencyView(TypedDict):
    wait: LatencyBlock
    sojourn: LatencyBlock


@_open
class CollapseView(TypedDict):
    detector: bool
    count: Annotated[int, Field(ge=0, description="alarms that collapsed (goodput far below what could be good)")]
    alarms: Annotated[int, Field(ge=0, description="alarms raised: overload or collapse")]
    stalls: Annotated[int, Field(ge=0, description="times the process was seen paused")]
    episodes: list[EpisodeView]
    time_alarmed_s: Annotated[float, Field(ge=0, description="the episodes' durations summed, seconds")]
    time_collapsed_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the collapsed state")]
    time_overloaded_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the overload state")]
    time_stalled_s: Annotated[float, Field(ge=0, description="a duration in seconds: in the stall state")]
    final_state: str


@_open
class ThrottleAction(TypedDict):
    at: RunInstant
    action: str
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


@_closed
class ExpectedIncident(TypedDict):
    """The incident behind an expectation's measurement (its slowest recovery, or what cost the grade)."""

    id: Annotated[int, Field(ge=1)]
    faults: list[int]
    actions: list[str]
    outcome: str
    recovery_s: Duration | None
    impact_s: Duration | None
    stalled_s: Duration


@_closed
class ExpectationView(TypedDict):
    """One ``expect:`` check judged on a report (a run's, or a scenario's own window)."""

    check: Annotated[str, Field(description="the expectation's key, as in the scenario file")]
    expected: Annotated[str | int | float | bool, Field(description="the value as written in the scenario")]
    measured: str | int | float | bool | None
    passed: bool
    incident: NotRequired[ExpectedIncident]
    because: NotRequired[Annotated[str, Field(description="why it failed: the check and the fault or incident")]]


@_open
class ReportView(TypedDict):
    """The run report (``chaosd run``, ``--report``, ``GET /api/v1/report``); blocks without a time field stay open."""

    chaosd_version: str
    scenario: str | None
    seed: int
    clock: Annotated[str, Field(description="virtual or real: what the run clock of every _at and t field is")]
    duration_s: Duration
    warmup_s: Duration
    load: dict[str, Any]
    tasks: dict[str, Any]
    throughput: dict[str, float]
    queue: dict[str, Any]
    utilisation: Share
    latency: LatencyView
    collapse: CollapseView
    throttle: ThrottleView
    timeline: list[TimelinePoint]
    faults: list[FaultView]
    incidents: list[IncidentView]
    faults_summary: dict[str, Any]
    score: ScoreView
    diagnostics: list[DiagnosticView]
    interrupted: NotRequired[bool]
    runtime: NotRequired[dict[str, Any]]
    actions: NotRequired[list[dict[str, Any]]]
    expectations: NotRequired[list[ExpectationView]]


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
    kind: str
    state: str
    restarts: int
    gave_up: bool


@_closed
class DagView(TypedDict):
    nodes: list[str]
    edges: list[str]
    removed_nodes: list[str]
    removed_edges: list[str]
    breakers_open: list[str]


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
    detector: Annotated[str, Field(description="healthy, warning, overload, collapsed, stall or recovering")]
    throttle_factor: Share
    admission: AdmissionView
    backend: Annotated[str | None, Field(description="what is wrong with the backend now (Redis unreachable); null")]
    telemetry: SnapshotView | None
    score: ScoreView
    faults_active: int
    lever: Annotated[str | None, Field(description="why the safety lever is pulled; null when it is not")]
    survival: str
    scenario: str
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

    state: Annotated[str, Field(description="idle, running, finished, stopped or failed")]
    kind: NotRequired[str]
    name: NotRequired[str]
    started_at: NotRequired[RunInstant]
    ended_at: NotRequired[RunInstant | None]
    duration_s: NotRequired[Duration]
    elapsed_s: NotRequired[Duration]
    actions: NotRequired[Annotated[int, Field(description="actions carried out")]]
    log: NotRequired[list[dict[str, Any]]]
    reason: NotRequired[str | None]
    window: NotRequired[WindowSpan]
    score: NotRequired[ScoreView]
    daemon_score: NotRequired[ScoreView]
    # Entries are ExpectationView; typed loosely until the controller keeps them as such.
    expectations: NotRequired[list[dict[str, Any]]]
    passed: NotRequired[bool | None]


@_closed
class RunSummary(TypedDict):
    id: str
    started_unix: UnixInstant
    ended_unix: UnixInstant | None
    status: Annotated[str, Field(description="running, finished, aborted or failed")]
    score: ScoreView | None


@_closed
class RunsBody(TypedDict):
    runs: list[RunSummary]


@_closed
class RunBody(TypedDict):
    id: str
    started_unix: UnixInstant
    ended_unix: UnixInstant | None
    status: str
    config: dict[str, Any]
    report: ReportView | None
    faults: Annotated[list[FaultView], Field(description="one page: ids above faults_after, faults_limit at most")]
    faults_next: Annotated[
        int | None, Field(description="pass as faults_after for the next page; null when this is the last")
    ]


@_open
class OpenApiDocument(TypedDict):
    """This API's OpenAPI 3.1 document."""

    openapi: str
    info: dict[str, Any]
    components: dict[str, Any]
    paths: dict[str, Any]


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
