"""The API's other answers: health, the catalogue, faults and the lever, the score, windows, scenarios and
the OpenAPI document itself.
"""

from __future__ import annotations

from typing import Annotated, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.faults import ActionView, FaultView, IncidentView
from chaosd.views.plans import WindowSpan
from chaosd.views.report import DiagnosticView
from chaosd.views.tasks import TaskCounts
from chaosd.views.units import RunInstant, closed_view, open_view
from chaosd.views.verdict import ScoreView


@closed_view
class HealthBody(TypedDict):
    status: Annotated[str, Field(description="ok or failed")]
    problems: list[str]


@closed_view
class ReadyBody(TypedDict):
    ready: bool
    problems: list[str]


@closed_view
class ActionsBody(TypedDict):
    actions: list[ActionView]


@closed_view
class FaultsBody(TypedDict):
    faults: Annotated[list[FaultView], Field(description="the newest faults, those still in memory (history.faults)")]
    lever: str | None
    injected: Annotated[int, Field(description="faults injected in this run")]
    first_in_memory: Annotated[
        int, Field(description="the oldest fault id in memory; older ones: GET /api/v1/faults/{id}, from storage")
    ]


@closed_view
class RevertedBody(TypedDict):
    reverted: list[int]
    faults: list[FaultView]


@closed_view
class LeverBody(TypedDict):
    lever: str | None
    reverted: NotRequired[Annotated[int, Field(description="how many faults the pull reverted")]]


@closed_view
class ScoreBody(ScoreView):
    faults_injected: int
    faults_recovered: int


@closed_view
class WindowSummary(TypedDict):
    id: int
    name: str
    state: Annotated[str, Field(description="open or closed")]
    started_at: RunInstant
    ended_at: RunInstant | None


@closed_view
class WindowsBody(TypedDict):
    windows: list[WindowSummary]


@closed_view
class WindowReport(WindowSummary):
    """A window's own measurements, frozen once it is closed."""

    tasks: TaskCounts
    score: ScoreView
    faults: list[FaultView]
    incidents: list[IncidentView]
    window: WindowSpan
    diagnostics: list[DiagnosticView]


@open_view
class OpenApiDocument(TypedDict):
    """This API's OpenAPI 3.1 document."""

    openapi: str
    info: dict[str, object]
    components: dict[str, object]
    paths: dict[str, object]


@closed_view
class ScenariosBody(TypedDict):
    scenarios: Annotated[list[str], Field(description="names POST /api/v1/scenarios/run takes")]
