"""What the service looked like tick by tick: telemetry snapshots, the report's timeline, and each stage's
attempts and circuit breaker.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.detector import DetectorStateName
from chaosd.views.tasks import FailReason
from chaosd.views.units import SECONDS, Rate, RunInstant, Share, closed_view


@closed_view
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
    wait_p50: Annotated[float, Field(ge=0, description=SECONDS)]
    wait_p95: Annotated[float, Field(ge=0, description=SECONDS)]
    wait_p99: Annotated[float, Field(ge=0, description=SECONDS)]
    sojourn_p50: Annotated[float, Field(ge=0, description=SECONDS)]
    sojourn_p95: Annotated[float, Field(ge=0, description=SECONDS)]
    sojourn_p99: Annotated[float, Field(ge=0, description=SECONDS)]
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
    attempt_rate: Annotated[
        float, Field(ge=0, description="attempts offered per second, callers' retries and refused ones included")
    ]
    caller_retry_rate: Annotated[float, Field(ge=0, description="callers' retries offered per second")]
    abandon_rate: Annotated[
        float, Field(ge=0, description="attempts per second whose caller stopped waiting (timeout or patience)")
    ]
    waste_rate: Annotated[float, Field(ge=0, description="completions per second for callers that had stopped waiting")]


@closed_view
class TimelinePoint(TypedDict):
    t: RunInstant
    offered_per_s: Annotated[float, Field(ge=0, description="callers per second: first attempts")]
    attempts_per_s: Annotated[float, Field(ge=0, description="attempts per second, retries and refused included")]
    retries_per_s: Annotated[float, Field(ge=0, description="callers' retries per second")]
    abandoned_per_s: Annotated[
        float, Field(ge=0, description="attempts per second whose caller stopped waiting (timeout or patience)")
    ]
    wasted_per_s: Annotated[float, Field(ge=0, description="completions per second nobody waited for any more")]
    throughput_per_s: Rate
    goodput_per_s: Annotated[
        float, Field(ge=0, description="completions per second for callers still waiting, in time, not degraded")
    ]
    queue_depth: Annotated[int, Field(ge=0)]
    sojourn_p95: Annotated[float, Field(ge=0, description=SECONDS)]
    utilisation: Share
    state: Annotated[DetectorStateName, Field(description="the collapse detector's state")]
    throttle_factor: Share


# A stage's circuit breaker: open (calls go around it or fail fast), half-open (its reset time passed; the
# next call or health check decides), closed.
BreakerState = Literal["closed", "open", "half_open"]


@closed_view
class StageBreakerView(TypedDict):
    state: Annotated[BreakerState, Field(description="at the end of the window")]
    opened: Annotated[int, Field(ge=0, description="times it opened in the window")]
    closed: Annotated[int, Field(ge=0, description="times it closed again in the window")]


@closed_view
class StageReportView(TypedDict):
    """One stage's attempts over the measured window: every attempt, first tries and retries."""

    kind: Annotated[str, Field(description="compute, tool, llm, memory, mcp or python")]
    attempts: Annotated[int, Field(ge=0, description="attempts = succeeded + the failures' sum")]
    succeeded: Annotated[int, Field(ge=0)]
    failures: Annotated[dict[FailReason, int], Field(description="failed attempts by reason (reasons seen only)")]
    retries: Annotated[int, Field(ge=0, description="attempts that retried a failed one")]
    mean_s: Annotated[float, Field(ge=0, description=SECONDS)]
    p50_s: Annotated[float, Field(ge=0, description=SECONDS)]
    p95_s: Annotated[float, Field(ge=0, description=SECONDS)]
    p99_s: Annotated[float, Field(ge=0, description=SECONDS)]
    breaker: StageBreakerView
    handler_errors: Annotated[dict[str, int], Field(description="python: attempts whose handler raised, by type")]


@closed_view
class StageNowView(TypedDict):
    """One stage over about the telemetry window, from two readings of its counters (the Arena's DAG)."""

    kind: Annotated[str, Field(description="compute, tool, llm, memory, mcp or python")]
    attempts_per_s: Rate
    retries_per_s: Rate
    p95_s: Annotated[float, Field(ge=0, description="p95 attempt duration over the window, seconds (0: none)")]
    error_share: Annotated[float, Field(ge=0, le=1, description="failed share of the window's attempts (0: none)")]
    breaker: BreakerState
    window_s: Annotated[float, Field(ge=0, description="seconds between the two readings the figures come from")]
