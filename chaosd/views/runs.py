"""The run history, as storage keeps it and ``GET /api/v1/runs`` serves it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.faults import FaultView
from chaosd.views.report import ReportView
from chaosd.views.units import UnixInstant, closed_view
from chaosd.views.verdict import ScoreView

RunStatus = Literal["running", "finished", "aborted", "failed"]  # aborted: its process died before it ended


@closed_view
class RunSummary(TypedDict):
    id: str
    started_unix: UnixInstant
    ended_unix: UnixInstant | None
    status: RunStatus
    score: ScoreView | None


@closed_view
class RunsBody(TypedDict):
    runs: list[RunSummary]


@closed_view
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
