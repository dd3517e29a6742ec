"""The resilience score and diagnostics on hand-computed cases: weights, speed ramp, grade edges, validation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from chaosd.score import (
    FORMULA_VERSION,
    Cause,
    Score,
    ScoreInputs,
    ScoreWeights,
    compute_score,
    diagnose,
    grade,
)

approx = pytest.approx


def _inputs(
    *,
    accepted: int = 100,
    good: int = 100,
    lost: int = 0,
    duplicated: int = 0,
    undetected_corruptions: int = 0,
    faults_injected: int = 2,
    faults_recovered: int = 2,
    recovery_times_s: tuple[float, ...] = (0.5, 1.0),
) -> ScoreInputs:
    # Defaults describe a perfect run: everything good, both faults recovered within 1 s (mean 0.75 s).
    return ScoreInputs(
        accepted=accepted,
        good=good,
        lost=lost,
        duplicated=duplicated,
        undetected_corruptions=undetected_corruptions,
        faults_injected=faults_injected,
        faults_recovered=faults_recovered,
        recovery_times_s=recovery_times_s,
    )


# --- the score -----------------------------------------------------------------------------------------------


def test_perfect_run_scores_100_and_a_plus() -> None:
    s = compute_score(_inputs())
    # 0.4·100 + 0.3·(0.7·100 + 0.3·100) + 0.3·100 = 100
    assert s == Score(
        total=approx(100.0),
        grade="A+",
        availability=100.0,
        recovery=approx(100.0),
        recovery_rate=100.0,
        recovery_speed=100.0,
        consistency=100.0,
        version=FORMULA_VERSION,
    )


def test_availability_alone_degraded() -> None:
    # 80 of 100 good (20 late or failed, none lost): availability 80; others 100.
    # total = 0.4·80 + 0.3·100 + 0.3·100 = 32 + 30 + 30 = 92 → "A"
    s = compute_score(_inputs(good=80))
    assert s.availability == approx(80.0)
    assert s.recovery == approx(100.0)
    assert s.consistency == approx(100.0)
    assert s.total == approx(92.0)
    assert s.grade == "A"


def test_recovery_rate_alone_degraded() -> None:
    # 1 of 4 faults recovered, in 0.5 s: rate 25, speed 100 → recovery = 0.7·25 + 0.3·100 = 17.5 + 30 = 47.5
    # total = 0.4·100 + 0.3·47.5 + 0.3·100 = 40 + 14.25 + 30 = 84.25 → "B"
    s = compute_score(_inputs(faults_injected=4, faults_recovered=1, recovery_times_s=(0.5,)))
    assert s.recovery_rate == approx(25.0)
    assert s.recovery_speed == approx(100.0)
    assert s.recovery == approx(47.5)
    assert s.availability == approx(100.0)
    assert s.consistency == approx(100.0)
    assert s.total == approx(84.25)
    assert s.grade == "B"


def test_recovery_speed_alone_degraded() -> None:
    # Both faults recovered in 3 s and 5 s: mean 4 s → speed = 100·(10 − 4)/(10 − 1) = 66.666…
    # recovery = 0.7·100 + 0.3·66.666… = 70 + 20 = 90; total = 40 + 0.3·90 + 30 = 97 → "A+"
    s = compute_score(_inputs(recovery_times_s=(3.0, 5.0)))
    assert s.recovery_rate == approx(100.0)
    assert s.recovery_speed == approx(200.0 / 3.0)
    assert s.recovery == approx(90.0)
    assert s.total == approx(97.0)
    assert s.grade == "A+"


def test_consistency_counts_loss_duplicates_and_corruption_together() -> None:
    # 200 accepted, 190 good, 4 lost, 3 duplicated, 1 undetected corruption:
    # availability = 100·190/200 = 95; consistency = 100·(200 − 4 − 3 − 1)/200 = 96.
    s = compute_score(_inputs(accepted=200, good=190, lost=4, duplicated=3, undetected_corruptions=1))
    assert s.consistency == approx(96.0)
    assert s.availability == approx(95.0)
    # total = 0.4·95 + 0.3·100 + 0.3·96 = 38 + 30 + 28.8 = 96.8
    assert s.total == approx(96.8)


def test_each_consistency_problem_counts_once() -> None:
    # 100 accepted and good; 10 duplicate effects only → consistency 90, availability stays 100.
    assert compute_score(_inputs(duplicated=10)).consistency == approx(90.0)
    # 10 undetected corruptions only → consistency 90.
    assert compute_score(_inputs(undetected_corruptions=10)).consistency == approx(90.0)
    # 10 lost (so at most 90 good) → consistency 90, availability 90.
    s = compute_score(_inputs(good=90, lost=10))
    assert (s.consistency, s.availability) == (approx(90.0), approx(90.0))


def test_consistency_clamps_at_zero() -> None:
    # 10 accepted, 5 lost + 5 duplicated + 7 corruptions = 17 problems > 10 → 100·max(−7, 0)/10 = 0, not negative.
    s = compute_score(_inputs(accepted=10, good=5, lost=5, duplicated=5, undetected_corruptions=7))
    assert s.consistency == 0.0


def test_exact_weighting_from_the_brief() -> None:
    # availability 90 (90/100 good), recovery rate 50 (1 of 2), speed from mean 5.5 s = 100·(10 − 5.5)/9 = 50,
    # consistency 100 → total = 0.4·90 + 0.3·(0.7·50 + 0.3·50) + 0.3·100 = 36 + 15 + 30 = 81.0 → "B"
    s = compute_score(_inputs(good=90, faults_injected=2, faults_recovered=1, recovery_times_s=(5.5,)))
    assert s.availability == approx(90.0)
    assert s.recovery_rate == approx(50.0)
    assert s.recovery_speed == approx(50.0)
    assert s.recovery == approx(50.0)
    assert s.consistency == approx(100.0)
    assert s.total == approx(81.0)
    assert s.grade == "B"


@pytest.mark.parametrize(
    ("times", "speed"),
    [
        ((1.0,), 100.0),  # at best → 100
        ((10.0,), 0.0),  # at worst → 0
        ((5.5,), 50.0),  # midpoint (1 + 10)/2 → 50
        ((0.0,), 100.0),  # below best clamps to 100
        ((0.2, 0.4), 100.0),  # mean 0.3 s, below best
        ((30.0,), 0.0),  # above worst clamps to 0
        ((2.0, 30.0), 0.0),  # mean 16 s, above worst
        ((1.0, 10.0), 50.0),  # the mean, not each time, goes on the ramp: mean 5.5 → 50
        ((3.25,), 75.0),  # 100·(10 − 3.25)/9 = 100·6.75/9 = 75
    ],
)
def test_speed_ramp(times: tuple[float, ...], speed: float) -> None:
    s = compute_score(_inputs(faults_injected=len(times), faults_recovered=len(times), recovery_times_s=times))
    assert s.recovery_speed == approx(speed)


def test_faults_injected_but_none_recovered_scores_zero_rate_and_speed() -> None:
    # rate 0/3 = 0, speed 0 (nothing recovered) → recovery 0; total = 40 + 0 + 30 = 70 → "C"
    s = compute_score(_inputs(faults_injected=3, faults_recovered=0, recovery_times_s=()))
    assert (s.recovery_rate, s.recovery_speed, s.recovery) == (0.0, 0.0, 0.0)
    assert s.total == approx(70.0)
    assert s.grade == "C"


def test_no_faults_injected_is_full_recovery() -> None:
    # Nothing to recover from: recovery = rate = speed = 100 (the one defined value).
    s = compute_score(_inputs(good=50, faults_injected=0, faults_recovered=0, recovery_times_s=()))
    assert (s.recovery, s.recovery_rate, s.recovery_speed) == (approx(100.0), 100.0, 100.0)
    # total = 0.4·50 + 0.3·100 + 0.3·100 = 20 + 30 + 30 = 80 → "B"
    assert s.total == approx(80.0)
    assert s.grade == "B"


def test_nothing_accepted_is_neither_available_nor_consistent() -> None:
    s = compute_score(_inputs(accepted=0, good=0))
    assert (s.availability, s.consistency) == (0.0, 0.0)
    # total = 0.4·0 + 0.3·100 + 0.3·0 = 30 → "F"
    assert s.total == approx(30.0)
    assert s.grade == "F"


def test_configurable_weights_change_the_total() -> None:
    inputs = _inputs(good=90, faults_injected=2, faults_recovered=1, recovery_times_s=(5.5,))
    # Same dimensions as the brief case (90, rate 50, speed 50, 100), weights 0.6 / 0.2 / 0.2, rate share 0.5:
    # total = 0.6·90 + 0.2·(0.5·50 + 0.5·50) + 0.2·100 = 54 + 10 + 20 = 84
    w = ScoreWeights(availability=0.6, recovery=0.2, consistency=0.2, recovery_rate_share=0.5)
    s = compute_score(inputs, w)
    assert s.recovery == approx(50.0)
    assert s.total == approx(84.0)
    assert compute_score(inputs).total == approx(81.0)


def test_recovery_rate_share_splits_recovery() -> None:
    # rate 50 (1 of 2), speed 100 (0.5 s). share 1.0 → recovery = rate = 50; share 0.0 → recovery = speed = 100.
    inputs = _inputs(faults_injected=2, faults_recovered=1, recovery_times_s=(0.5,))
    assert compute_score(inputs, ScoreWeights(recovery_rate_share=1.0)).recovery == approx(50.0)
    assert compute_score(inputs, ScoreWeights(recovery_rate_share=0.0)).recovery == approx(100.0)


def test_configurable_speed_thresholds_move_the_ramp() -> None:
    inputs = _inputs(faults_injected=1, faults_recovered=1, recovery_times_s=(5.5,))
    # Ramp 5 s → 6 s: 5.5 s is its midpoint → 50 (same as the default ramp, by coincidence of midpoints).
    assert compute_score(inputs, ScoreWeights(speed_best_s=5.0, speed_worst_s=6.0)).recovery_speed == approx(50.0)
    # Ramp 0 s → 22 s: 100·(22 − 5.5)/22 = 75.
    assert compute_score(inputs, ScoreWeights(speed_best_s=0.0, speed_worst_s=22.0)).recovery_speed == approx(75.0)
    # Ramp 6 s → 60 s: 5.5 s is below best → 100.
    assert compute_score(inputs, ScoreWeights(speed_best_s=6.0, speed_worst_s=60.0)).recovery_speed == 100.0
    # Ramp 0.1 s → 2 s: 5.5 s is above worst → 0.
    assert compute_score(inputs, ScoreWeights(speed_best_s=0.1, speed_worst_s=2.0)).recovery_speed == 0.0


def test_nothing_is_rounded() -> None:
    # 2 of 3 good → availability 66.666…, not 66.67.
    s = compute_score(_inputs(accepted=3, good=2))
    assert s.availability == 200.0 / 3.0


def test_as_dict_carries_every_dimension_and_the_version() -> None:
    s = compute_score(_inputs(good=90, faults_injected=2, faults_recovered=1, recovery_times_s=(5.5,)))
    d = s.as_dict()
    assert list(d) == [
        "total",
        "grade",
        "availability",
        "recovery",
        "recovery_rate",
        "recovery_speed",
        "consistency",
        "version",
    ]
    assert d["grade"] == "B"
    assert d["version"] == FORMULA_VERSION == "1"
    assert d["total"] == s.total
    assert d["recovery_speed"] == s.recovery_speed


# --- grades --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "letter"),
    [
        (100.0, "A+"),
        (95.0, "A+"),
        (94.999, "A"),
        (90.0, "A"),
        (89.999, "B"),
        (80.0, "B"),
        (79.999, "C"),
        (70.0, "C"),
        (69.999, "D"),
        (60.0, "D"),
        (59.999, "F"),
        (math.nextafter(60.0, 0.0), "F"),
        (0.0, "F"),
    ],
)
def test_grade_bands_include_their_lower_edge(total: float, letter: str) -> None:
    assert grade(total) == letter


def test_grade_rejects_nan() -> None:
    with pytest.raises(ValueError, match=r"^total:"):
        grade(math.nan)


# --- validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"accepted": -1}, "accepted"),
        ({"good": -1}, "good"),
        ({"lost": -1}, "lost"),
        ({"duplicated": -1}, "duplicated"),
        ({"undetected_corruptions": -1}, "undetected_corruptions"),
        ({"faults_injected": -1, "faults_recovered": 0, "recovery_times_s": ()}, "faults_injected"),
        ({"faults_recovered": -1}, "faults_recovered"),
        ({"good": 101}, "good"),
        ({"good": 95, "lost": 10}, "lost"),
        ({"faults_injected": 1}, "faults_recovered"),
        ({"recovery_times_s": (1.0,)}, "recovery_times_s"),
        ({"recovery_times_s": (1.0, 2.0, 3.0)}, "recovery_times_s"),
        ({"recovery_times_s": (1.0, -0.5)}, "recovery_times_s"),
        ({"recovery_times_s": (1.0, math.nan)}, "recovery_times_s"),
        ({"recovery_times_s": (1.0, math.inf)}, "recovery_times_s"),
    ],
)
def test_invalid_inputs_name_their_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        replace(_inputs(), **changes)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"availability": 0.5}, r"availability \+ recovery \+ consistency"),
        ({"availability": 0.3, "recovery": 0.3, "consistency": 0.3}, r"availability \+ recovery \+ consistency"),
        ({"availability": -0.2, "recovery": 0.6, "consistency": 0.6}, "availability"),
        ({"availability": math.nan}, "availability"),
        ({"recovery": 1.5, "availability": -0.25, "consistency": -0.25}, "availability"),
        ({"consistency": 1.2, "availability": 0.0, "recovery": -0.2}, "recovery"),
        ({"recovery_rate_share": 1.1}, "recovery_rate_share"),
        ({"recovery_rate_share": -0.1}, "recovery_rate_share"),
        ({"speed_best_s": 10.0}, "speed_best_s"),
        ({"speed_best_s": 12.0}, "speed_best_s"),
        ({"speed_best_s": -1.0}, "speed_best_s"),
        ({"speed_worst_s": math.inf}, "speed_worst_s"),
    ],
)
def test_invalid_weights_name_their_field(changes: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        ScoreWeights(**changes)


def test_weights_summing_to_one_within_tolerance_are_accepted() -> None:
    # 0.1 + 0.2 + 0.7 is 1 only up to float error; 1e-10 off is inside the 1e-9 tolerance, 1e-8 is not.
    ScoreWeights(availability=0.1, recovery=0.2, consistency=0.7)
    ScoreWeights(availability=0.4 + 1e-10, recovery=0.3, consistency=0.3)
    with pytest.raises(ValueError, match=r"^availability \+ recovery \+ consistency:"):
        ScoreWeights(availability=0.4 + 1e-8, recovery=0.3, consistency=0.3)


# --- diagnostics ---------------------------------------------------------------------------------------------


def test_diagnose_orders_by_count_and_drops_zeros() -> None:
    # 12 + 30 + 3 = 45 problems; "late" (0) is dropped.
    causes = diagnose({"tool_timeout": 12, "queue_full": 30, "lease_expired": 3, "late": 0})
    assert causes == (
        Cause("queue_full", 30, approx(30 / 45)),
        Cause("tool_timeout", 12, approx(12 / 45)),
        Cause("lease_expired", 3, approx(3 / 45)),
    )
    assert math.fsum(c.share for c in causes) == approx(1.0)


def test_diagnose_breaks_ties_by_name() -> None:
    # 5 + 5 + 5 + 10 = 25: "d" first (10 → 0.4), then the three fives by name (0.2 each), input order ignored.
    causes = diagnose({"c": 5, "a": 5, "d": 10, "b": 5})
    assert [(c.cause, c.count) for c in causes] == [("d", 10), ("a", 5), ("b", 5), ("c", 5)]
    assert [c.share for c in causes] == approx([0.4, 0.2, 0.2, 0.2])


def test_diagnose_single_cause_has_the_whole_share() -> None:
    assert diagnose({"queue_full": 7}) == (Cause("queue_full", 7, 1.0),)


def test_diagnose_empty_and_all_zero() -> None:
    assert diagnose({}) == ()
    assert diagnose({"late": 0, "queue_full": 0}) == ()


def test_diagnose_rejects_a_negative_count_naming_the_cause() -> None:
    with pytest.raises(ValueError, match=r"^queue_full:"):
        diagnose({"tool_timeout": 1, "queue_full": -2})
