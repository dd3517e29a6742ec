"""The run report (``chaosd run``, ``--report``, ``GET /api/v1/report``) and the blocks only it has."""

from __future__ import annotations

from typing import Annotated, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.detector import CollapseView, DetectorStateName, ThrottleView
from chaosd.views.faults import BaselineView, FaultView, IncidentView
from chaosd.views.plans import PlanLogEntry
from chaosd.views.predict import StormPredictionView
from chaosd.views.tasks import LatencyView, LoadView, QueueBlock, ReportTasks
from chaosd.views.telemetry import StageReportView, TimelinePoint
from chaosd.views.units import Duration, Share, closed_view, open_view
from chaosd.views.verdict import ExpectationView, ReplicationsView, ScoreView, VerdictView


@open_view
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


@closed_view
class SloView(TypedDict):
    availability: Annotated[float | None, Field(description="goodput / offered, per window; null: the baseline's")]
    p95: Annotated[float | None, Field(description="p95 sojourn of completed tasks, seconds; null: the baseline's")]


@open_view
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


@open_view
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


@open_view
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
    storm: NotRequired[
        Annotated[
            StormPredictionView,
            Field(description="the load above which a retry storm holds itself, for the callers' policy at the end"),
        ]
    ]
