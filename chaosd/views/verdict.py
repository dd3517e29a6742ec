"""How a run is judged: its score, its ``expect:`` checks and its verdict, and over N seeds its replications."""

from __future__ import annotations

from typing import Annotated, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from chaosd.views.units import Duration, Points, closed_view
from chaosd.views.wire import IncidentOutcome


@closed_view
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


@closed_view
class ExpectedIncident(TypedDict):
    """The incident behind an expectation's measurement (its slowest recovery, or what cost the grade)."""

    id: Annotated[int, Field(ge=1)]
    faults: list[int]
    actions: list[str]
    outcome: IncidentOutcome
    recovery_s: Duration | None
    impact_s: Duration | None
    stalled_s: Duration


@closed_view
class ExpectationRunView(TypedDict):
    """One replication's own verdict on an ``expect:`` check."""

    seed: int
    measured: str | int | float | bool | None
    passed: bool


@closed_view
class ExpectationView(TypedDict):
    """One ``expect:`` check judged on a report (a run's, or a scenario's own window)."""

    check: Annotated[str, Field(description="the expectation's key, as in the scenario file")]
    expected: Annotated[str | int | float | bool, Field(description="the value as written in the scenario")]
    measured: str | int | float | bool | None
    passed: bool
    incident: NotRequired[ExpectedIncident]
    because: NotRequired[Annotated[str, Field(description="why it failed: the check and the fault or incident")]]
    runs: NotRequired[
        Annotated[
            list[ExpectationRunView],
            Field(
                description="over N ≥ 2 replications: each run's own verdict, in seed order; `passed` is the pooled one"
            ),
        ]
    ]


@closed_view
class VerdictView(TypedDict):
    """Whether the run held (``chaosd run`` exits 3 when it did not), and why, in words."""

    passed: bool
    reason: Annotated[
        str,
        Field(
            description="the first expectation that failed; else the [slo] judged over the measured window, or with "
            "no availability objective, the share of it the detector said failing (more than half fails)"
        ),
    ]


@closed_view
class MeanCI(TypedDict):
    """The mean of one number over the runs that measured it, and its 95 % confidence interval."""

    mean: float | None
    ci95: Annotated[
        list[float] | None,
        Field(description="[lo, hi]: Student's t on the per-run values, n - 1 degrees of freedom; null when n < 2"),
    ]
    n: Annotated[int, Field(ge=0, description="runs that measured it")]


@closed_view
class FailedRunView(TypedDict):
    """A replication whose service failed (its SLO, or failing for most of its window)."""

    seed: int
    reason: str


@closed_view
class ReplicationsView(TypedDict):
    """The same run repeated on N seeds: each number's mean and 95 % CI over the runs, and how the grade fell."""

    n: Annotated[int, Field(ge=1)]
    seeds: Annotated[list[int], Field(description="one per run, in order; the first is the report's own")]
    score: MeanCI
    components: Annotated[dict[str, MeanCI], Field(description="each score dimension (null ones left out)")]
    grade_counts: Annotated[dict[str, int], Field(description="runs per grade, best grade first")]
    recovery_s: Annotated[
        dict[str, MeanCI], Field(description="per fault action: its per-run mean recovery, seconds, over runs with one")
    ]
    goodput: Annotated[MeanCI, Field(description="goodput per second")]
    completed: Annotated[MeanCI, Field(description="completions per second")]
    wait_mean_s: Annotated[MeanCI, Field(description="mean queue wait, seconds")]
    p95_s: Annotated[MeanCI, Field(description="p95 sojourn, seconds")]
    lost: Annotated[MeanCI, Field(description="lost tasks per run")]
    failed_runs: NotRequired[
        Annotated[list[FailedRunView], Field(description="runs whose service failed: their SLO, or failing mostly")]
    ]
