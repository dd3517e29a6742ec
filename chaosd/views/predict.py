"""What ``chaosd predict`` answers: whether a retry storm, once triggered, can hold under a configuration, and the
load above which it does."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.units import Duration, Rate, closed_view


@closed_view
class StormPredictionView(TypedDict):
    """The fluid threshold of a retry storm: in the bad state every attempt times out and every caller spends
    all its attempts, so attempts arrive at ``attempts_per_caller`` × the load; the storm holds while that exceeds
    the capacity and the queue can hold more than a timeout's worth of waiting."""

    workers: Annotated[int, Field(ge=1)]
    mean_service_s: Annotated[Duration, Field(description="seconds of work per task: the route's stages' means")]
    capacity_per_s: Annotated[
        Rate | None, Field(description="tasks/s the workers serve: workers / mean_service_s; null when it is 0")
    ]
    timeout_s: Annotated[Duration, Field(description="clients.timeout: seconds a caller waits; 0 = forever")]
    wait_bound_s: Annotated[
        Duration | None,
        Field(description="seconds of the longest wait the queue can hold: its capacity's worth, or admission's bound"),
    ]
    attempts_per_caller: Annotated[
        float, Field(ge=1, description="in the bad state: 1 + retries, capped by the budget (1 + its ratio)")
    ]
    threshold_per_s: Annotated[
        Rate | None,
        Field(description="capacity / attempts_per_caller: the load above which a storm holds; null when none can"),
    ]
    load_per_s: Annotated[Rate, Field(description="load.rate, the base rate")]
    peak_per_s: Annotated[Rate, Field(description="the highest rate of the load's phases, or load.rate")]
    storm_possible: Annotated[bool, Field(description="a storm can hold at some load under these clients")]
    self_sustaining: Annotated[bool, Field(description="possible, and the base load is above the threshold")]
    reason: Annotated[str, Field(description="the reasoning, in one line")]
