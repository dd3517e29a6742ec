"""A survival or scenario run: its states, its log of steps, its status, and the window of measures the
controller and the plans hand each other.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.faults import FaultView, IncidentView
from chaosd.views.tasks import TaskCounts
from chaosd.views.units import Duration, RunInstant, closed_view, open_view
from chaosd.views.verdict import ExpectationView, ScoreView

PlanKind = Literal["survival", "scenario"]


PlanEnd = Literal["finished", "stopped", "failed"]  # how a plan run ended


PlanState = Literal["running", PlanEnd]  # running → finished | stopped | failed


# ``for`` is a keyword: the key that cannot be a class attribute is declared the functional way.
_PlanLogFor = TypedDict(
    "_PlanLogFor",
    {"for": NotRequired[Annotated[list[int], Field(description="wait: the faults whose verdicts it waits for")]]},
)


@open_view
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
    changed: NotRequired[Annotated[list[str], Field(description="set_clients: the callers' settings it changed")]]


@closed_view
class WindowSpan(TypedDict):
    start_at: RunInstant
    end_at: RunInstant


@open_view
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
