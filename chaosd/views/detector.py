"""The collapse detector's states and alarms, and admission control's moves and settings."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.units import Duration, RunInstant, Share, closed_view, open_view

DetectorStateName = Literal[
    "healthy", "warning", "overload", "collapsed", "metastable", "failing", "stall", "recovering"
]


# The worst an alarm got: collapse once goodput collapsed, else failing once tasks failed with a short queue.
AlarmKind = Literal["overload", "failing", "collapse"]


@closed_view
class EpisodeView(TypedDict):
    """An alarm (overload; failing once tasks failed with a short queue; collapse once it collapsed), from
    detection to healthy (null while it lasts)."""

    detected_at: RunInstant
    cleared_at: RunInstant | None
    reason: str
    kind: AlarmKind
    duration_s: Duration


@open_view
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
    time_metastable_s: NotRequired[
        Annotated[float, Field(ge=0, description="a duration in seconds: in the metastable state (a retry storm)")]
    ]
    final_state: DetectorStateName


# What admission control did: aimd lowered (decrease) or raised (increase) its factor; capacity turned its short
# limit on (standing: a queue stands) or off (bound).
ThrottleMove = Literal["decrease", "increase", "standing", "bound"]


@open_view
class ThrottleAction(TypedDict):
    at: RunInstant
    action: ThrottleMove
    factor: Share
    limit: Annotated[int, Field(ge=0)]


@open_view
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


@closed_view
class AdmissionView(TypedDict):
    """Admission control now: its policy, the tasks it lets wait, and what it measures."""

    policy: Literal["capacity", "aimd", "none"]
    limit: Annotated[int, Field(ge=0, description="tasks admission lets wait (the queue capacity when none)")]
    standing: Annotated[bool, Field(description="capacity: a standing queue is kept to the target")]
    capacity_per_s: Annotated[float, Field(ge=0, description="measured service capacity, tasks per second")]
    shed_per_s: Annotated[float, Field(ge=0, description="refused over the limit or by a full queue, per second")]
