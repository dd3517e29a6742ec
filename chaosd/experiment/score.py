"""The resilience score and the failure breakdown by cause: pure functions over measured counts.

No I/O, no clock, no rounding: the report rounds what it prints. A dimension with nothing to measure
is ``None`` (not a made-up 100 or 0), and the total is the weighted mean of the dimensions measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from chaosd.config.settings import ScoreConfig
from chaosd.views import ScoreView

__all__ = [
    "FORMULA_VERSION",
    "Cause",
    "Score",
    "ScoreInputs",
    "ScoreWeights",
    "compute_score",
    "diagnose",
    "grade",
]

FORMULA_VERSION = "2"  # bump when the formula changes; reported with every score

_WEIGHT_TOLERANCE = 1e-9
# Lower edges, inclusive, highest first; anything below the last edge is "F".
_GRADES: tuple[tuple[float, str], ...] = ((95.0, "A+"), (90.0, "A"), (80.0, "B"), (70.0, "C"), (60.0, "D"))


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    """How the dimensions combine. Validated on construction: a bad weight raises ``ValueError`` naming it.

    ``availability + recovery + consistency`` must be 1 (within 1e-9), each in [0, 1]; ``recovery_rate_share``
    in [0, 1] splits recovery between rate and speed; ``0 <= speed_best_s < speed_worst_s``, both finite.
    """

    availability: float = 0.4
    recovery: float = 0.3
    consistency: float = 0.3
    recovery_rate_share: float = 0.7  # within recovery; speed gets 1 - this
    speed_best_s: float = 1.0  # mean service-recovery time scoring 100
    speed_worst_s: float = 10.0  # … scoring 0

    @classmethod
    def from_config(cls, cfg: ScoreConfig) -> ScoreWeights:
        """The weights ``[score]`` configures (the report, the live score and a scenario's window use them)."""
        return cls(
            availability=cfg.availability,
            recovery=cfg.recovery,
            consistency=cfg.consistency,
            recovery_rate_share=cfg.recovery_rate_share,
            speed_best_s=cfg.speed_best,
            speed_worst_s=cfg.speed_worst,
        )

    def __post_init__(self) -> None:
        for name in ("availability", "recovery", "consistency", "recovery_rate_share"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ValueError(f"{name}: must be in [0, 1], got {value!r}")
        total = self.availability + self.recovery + self.consistency
        if abs(total - 1.0) > _WEIGHT_TOLERANCE:
            raise ValueError(f"availability + recovery + consistency: must sum to 1, got {total!r}")
        for name in ("speed_best_s", "speed_worst_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name}: must be a finite number of seconds >= 0, got {value!r}")
        if self.speed_best_s >= self.speed_worst_s:
            raise ValueError(
                f"speed_best_s: must be below speed_worst_s ({self.speed_worst_s!r}), got {self.speed_best_s!r}"
            )


@dataclass(frozen=True, slots=True)
class ScoreInputs:
    """What the run measured. Validated on construction: an impossible count raises ``ValueError`` naming it.

    Counts are >= 0; ``accepted <= offered``; ``good + lost <= accepted`` (a lost task never completed);
    ``faults_recovered <= faults_judged``; one finite, non-negative recovery time per recovered fault.
    """

    offered: int  # offered tasks that reached an outcome: accepted (in flight excluded) or refused
    accepted: int  # accepted tasks that reached an outcome or were lost (exclude still in flight)
    good: int  # completed within deadline
    lost: int
    duplicated: int
    undetected_corruptions: int
    faults_judged: int  # faults whose recovery was judged: recovered or failed (not pending, not unmeasured)
    faults_recovered: int  # service recovered within its limit
    recovery_times_s: tuple[float, ...]  # recovery time of each recovered fault (its clock: heal or restore)
    faults_inconsistent: int = 0  # judged incidents during which an effect was duplicated or corrupted
    # A long run's running total instead of every time: then recovery_times_s is empty, and the mean is this
    # over faults_recovered.
    recovery_total_s: float | None = None
    # Callers with a policy (retries): the callers that reached an outcome (served, or gave up), which availability
    # is over; None when every caller makes one attempt, and offered is it.
    callers: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "offered",
            "accepted",
            "good",
            "lost",
            "duplicated",
            "undetected_corruptions",
            "faults_judged",
            "faults_recovered",
            "faults_inconsistent",
        ):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"{name}: must be >= 0, got {value!r}")
        if self.accepted > self.offered:
            raise ValueError(f"accepted: {self.accepted} exceeds offered ({self.offered})")
        if self.callers is not None and not 0 <= self.good <= self.callers:
            raise ValueError(f"callers: {self.callers} is below good ({self.good}) or negative")
        if self.good > self.accepted:
            raise ValueError(f"good: {self.good} exceeds accepted ({self.accepted})")
        if self.good + self.lost > self.accepted:
            raise ValueError(f"lost: good ({self.good}) + lost ({self.lost}) exceeds accepted ({self.accepted})")
        if self.faults_inconsistent > self.faults_judged:
            raise ValueError(
                f"faults_inconsistent: {self.faults_inconsistent} exceeds faults_judged ({self.faults_judged})"
            )
        if self.faults_recovered > self.faults_judged:
            raise ValueError(f"faults_recovered: {self.faults_recovered} exceeds faults_judged ({self.faults_judged})")
        if self.recovery_total_s is not None:
            if self.recovery_times_s:
                raise ValueError("recovery_times_s: give the times or their total (recovery_total_s), not both")
            if not (math.isfinite(self.recovery_total_s) and self.recovery_total_s >= 0.0):
                raise ValueError(f"recovery_total_s: must be finite and >= 0, got {self.recovery_total_s!r}")
        elif len(self.recovery_times_s) != self.faults_recovered:
            raise ValueError(
                f"recovery_times_s: {len(self.recovery_times_s)} times for "
                f"faults_recovered={self.faults_recovered}; need one per recovered fault"
            )
        for t in self.recovery_times_s:
            if not (math.isfinite(t) and t >= 0.0):
                raise ValueError(f"recovery_times_s: each time must be finite and >= 0, got {t!r}")


@dataclass(frozen=True, slots=True)
class Score:
    """Each dimension and the total, 0–100 and unrounded (``None`` where nothing was measured), and the version."""

    total: float | None
    grade: str | None
    availability: float | None
    recovery: float | None
    recovery_rate: float | None
    recovery_speed: float | None
    consistency: float | None
    version: str

    def as_dict(self) -> ScoreView:
        return {
            "total": self.total,
            "grade": self.grade,
            "availability": self.availability,
            "recovery": self.recovery,
            "recovery_rate": self.recovery_rate,
            "recovery_speed": self.recovery_speed,
            "consistency": self.consistency,
            "version": self.version,
        }


def grade(total: float) -> str:
    """Letter for a 0–100 total; each band includes its lower edge (95.0 → "A+", 94.999 → "A")."""
    if math.isnan(total):
        raise ValueError("total: not a number")
    for edge, letter in _GRADES:
        if total >= edge:
            return letter
    return "F"


def _speed(mean_s: float, weights: ScoreWeights) -> float:
    """Linear ramp: 100 at or below ``speed_best_s``, 0 at or above ``speed_worst_s``."""
    if mean_s <= weights.speed_best_s:
        return 100.0
    if mean_s >= weights.speed_worst_s:
        return 0.0
    return 100.0 * (weights.speed_worst_s - mean_s) / (weights.speed_worst_s - weights.speed_best_s)


def compute_score(inputs: ScoreInputs, weights: ScoreWeights = ScoreWeights()) -> Score:
    """Score a run from its measured counts (formula version 2). Nothing is rounded here.

    - availability = 100·good/offered: refused, throttled and dropped work is unavailable service, so
      shedding load never raises it. Callers that retry: 100·good/callers (a caller served on its second attempt
      was served once; one that gave up was not), and good excludes wasted work. Nothing offered yet (warm-up):
      no score at all (every field None).
    - consistency = 100·(accepted − lost − duplicated − undetected_corruptions)/accepted, clamped at 0,
      or, if lower, the share of judged incidents that kept every effect exactly once (100·(judged −
      inconsistent)/judged): a sink that double-applies after every failover is not 99.99 % consistent.
      None when nothing was accepted.
    - recovery_rate = 100·faults_recovered/faults_judged; recovery_speed is the linear ramp on the mean of
      ``recovery_times_s`` (0 when none recovered); recovery = share·rate + (1 − share)·speed. With no
      judged fault (none injected, or all pending or unmeasured) recovery is None, not a free 100.
    - total = the weighted mean of the dimensions that were measured (weights renormalised over them).
    """
    asked = inputs.offered if inputs.callers is None else inputs.callers
    if asked == 0:
        return Score(None, None, None, None, None, None, None, FORMULA_VERSION)
    availability = 100.0 * inputs.good / asked
    consistency = _consistency(inputs)
    recovery_rate, recovery_speed, recovery = _recovery(inputs, weights)
    total = _weighted_total(
        ((weights.availability, availability), (weights.recovery, recovery), (weights.consistency, consistency))
    )
    return Score(
        total=total,
        grade=grade(total) if total is not None else None,
        availability=availability,
        recovery=recovery,
        recovery_rate=recovery_rate,
        recovery_speed=recovery_speed,
        consistency=consistency,
        version=FORMULA_VERSION,
    )


def _consistency(inputs: ScoreInputs) -> float | None:
    """The share of accepted tasks whose effect was kept exactly once, or, if lower, of judged incidents that kept
    every effect so; None when nothing was accepted."""
    if inputs.accepted <= 0:
        return None
    kept = inputs.accepted - inputs.lost - inputs.duplicated - inputs.undetected_corruptions
    consistency = 100.0 * max(kept, 0) / inputs.accepted
    if inputs.faults_judged > 0:
        clean = 100.0 * (inputs.faults_judged - inputs.faults_inconsistent) / inputs.faults_judged
        consistency = min(consistency, clean)
    return consistency


def _recovery(inputs: ScoreInputs, weights: ScoreWeights) -> tuple[float | None, float | None, float | None]:
    """(recovery_rate, recovery_speed, recovery), all None with no judged fault."""
    if inputs.faults_judged <= 0:
        return None, None, None
    recovery_rate = 100.0 * inputs.faults_recovered / inputs.faults_judged
    if inputs.faults_recovered == 0:
        recovery_speed = 0.0
    else:
        total = inputs.recovery_total_s
        mean_s = (math.fsum(inputs.recovery_times_s) if total is None else total) / inputs.faults_recovered
        recovery_speed = _speed(mean_s, weights)
    share = weights.recovery_rate_share
    return recovery_rate, recovery_speed, share * recovery_rate + (1.0 - share) * recovery_speed


def _weighted_total(dimensions: tuple[tuple[float, float | None], ...]) -> float | None:
    """The weighted mean of the (weight, value) dimensions that were measured, its weights renormalised over them."""
    measured = [(w, v) for w, v in dimensions if v is not None]
    weight = math.fsum(w for w, _ in measured)
    # Every measured dimension weighted 0 (a custom weighting): nothing the user counts was measured.
    return math.fsum(w * v for w, v in measured) / weight if weight > 0 else None


@dataclass(frozen=True, slots=True)
class Cause:
    """One cause of failure: how many problems it produced and its share (0–1) of all counted problems."""

    cause: str
    count: int
    share: float


def diagnose(causes: Mapping[str, int]) -> tuple[Cause, ...]:
    """Problems by cause, biggest first (ties by name, so the order is deterministic); zero counts dropped.

    Empty or all-zero input → ``()``. A negative count raises ``ValueError`` naming the cause.
    """
    for name, count in causes.items():
        if count < 0:
            raise ValueError(f"{name}: count must be >= 0, got {count!r}")
    counted = sorted(((name, count) for name, count in causes.items() if count > 0), key=lambda nc: (-nc[1], nc[0]))
    total = sum(count for _, count in counted)
    return tuple(Cause(cause=name, count=count, share=count / total) for name, count in counted)
