"""What the live daemon is doing now (``GET /api/v1/status``, ``/timeseries``): its agents, DAG, queue and
admission, and the last minutes of telemetry.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.detector import AdmissionView
from chaosd.views.faults import FaultTallyView
from chaosd.views.plans import PlanState
from chaosd.views.telemetry import SnapshotView, StageNowView
from chaosd.views.units import SECONDS, Duration, Rate, RunInstant, Share, UnixInstant, closed_view
from chaosd.views.verdict import ScoreView

AgentKind = Literal["worker", "producer", "orchestrator"]


AgentState = Literal["running", "slow", "paused", "partitioned", "stalled", "dead"]


@closed_view
class AgentView(TypedDict):
    id: str
    kind: AgentKind
    state: AgentState
    restarts: int
    gave_up: bool


@closed_view
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


@closed_view
class QueueView(TypedDict):
    depth: int
    capacity: int


@closed_view
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


@closed_view
class SeriesPoint(TypedDict):
    """The newest telemetry tick of one step of the Arena's charts."""

    t: RunInstant
    queue_depth: Annotated[int, Field(ge=0)]
    queue_slope: Annotated[float, Field(description="dQ/dt, tasks per second")]
    sojourn_p95: Annotated[float, Field(ge=0, description=SECONDS)]
    throughput: Rate
    arrival_rate: Rate
    admitted_rate: Rate
    goodput: Rate
    throttle_factor: Share
    detector: str


@closed_view
class TimeseriesBody(TypedDict):
    """The last minutes of telemetry (bounded: at most 600 points), and the fault counters."""

    step_s: Duration
    window_s: Duration
    points: list[SeriesPoint]
    faults: FaultTallyView
