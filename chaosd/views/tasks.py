"""What became of the tasks offered: their counts, why those refused or failed were, their latency, the queue
they waited in and the load that offered them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.units import SECONDS, Duration, closed_view, open_view

# Why a task offered was not accepted: a full queue (queue_full, or dropped under when_full = "drop"), over
# admission control's limit (shed), by the throttle, from a partitioned producer, or the backend unreachable.
RefuseReason = Literal["queue_full", "dropped", "shed", "throttled", "partitioned", "unavailable"]
# Why an accepted task failed: a stage's (timeout, error, tool_timeout, llm_error, mcp_disconnected,
# node_removed, handler_error) or the route's (no_route: no stage to send it to).
# Why a stage's attempt failed.
StageFailReason = Literal[
    "timeout", "error", "tool_timeout", "llm_error", "mcp_disconnected", "node_removed", "no_route", "handler_error"
]
# Why an accepted task failed: a stage's, or its caller's: expired (dropped unserved by a worker because its caller
# had stopped waiting: clients.drop_expired), abandoned (left the queue unserved when its caller's patience ran out).
FailReason = Literal[StageFailReason, "expired", "abandoned"]
# Why a caller stopped waiting for an attempt: its timeout passed, or its patience ran out in the queue.
AbandonReason = Literal["timeout", "patience"]


@open_view
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


@open_view
class ReportTasks(TaskCounts):
    """The measured tasks' counts, and why those refused or failed were."""

    rejected_by: Annotated[dict[str, int], Field(description="refused tasks by reason: a RefuseReason")]
    failed_by: Annotated[dict[str, int], Field(description="failed tasks by reason: a FailReason")]
    lost_all_cohorts: Annotated[int, Field(ge=0, description="lost among every task, warm-up's too")]
    retries: Annotated[int, Field(ge=0, description="stage retries (a stage's own retry policy)")]
    retried: Annotated[
        int, Field(ge=0, description="callers' retries: attempts after the first (offered counts callers)")
    ]
    abandoned: Annotated[int, Field(ge=0, description="attempts whose caller stopped waiting (timeout or patience)")]
    abandoned_by: Annotated[dict[str, int], Field(description="abandoned attempts by reason: timeout, patience")]
    wasted: Annotated[int, Field(ge=0, description="completions for a caller that had stopped waiting")]
    gave_up: Annotated[int, Field(ge=0, description="callers out of retries or budget, or out of patience")]


@closed_view
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


@closed_view
class QueueBlock(TypedDict):
    capacity: Annotated[int, Field(ge=0)]
    when_full: Literal["block", "drop", "reject"]
    mean_depth: Annotated[float, Field(ge=0, description="tasks waiting, averaged over the measured window")]
    max_depth: Annotated[int, Field(ge=0, description="the most waiting at once, capacity at most")]
    max_over_capacity: Annotated[int, Field(ge=0, description="how far past capacity the depth ever went")]
    max_blocked: Annotated[int, Field(ge=0, description="the most producers blocked at once (when_full: block)")]


@closed_view
class LatencyBlock(TypedDict):
    count: Annotated[int, Field(ge=0)]
    mean: Annotated[float, Field(ge=0, description=SECONDS)]
    p50: Annotated[float, Field(ge=0, description=SECONDS)]
    p95: Annotated[float, Field(ge=0, description=SECONDS)]
    p99: Annotated[float, Field(ge=0, description=SECONDS)]


@closed_view
class LatencyView(TypedDict):
    wait: LatencyBlock
    sojourn: LatencyBlock
