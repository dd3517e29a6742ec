"""The resilience score (formula version 2) and diagnostics on hand-computed cases: weights, speed ramp,
unmeasured dimensions, grade edges, validation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from chaosd.experiment.score import (
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
    offered: int = 100,
    accepted: int = 100,
    good: int = 100,
    lost: int = 0,
    duplicated: int = 0,
    undetected_corruptions: int = 0,
    faults_judged: int = 2,
    faults_recovered: int = 2,
    recovery_times_s: tuple[float, ...] = (0.5, 1.0),
) -> ScoreInputs:
    # Defaults describe a perfect run: all 100 offered accepted and good, both judged faults recovered within 1 s
    # (mean 0.75 s).
    return ScoreInputs(
        offered=offered,
        accepted=accepted,
        good=good,
        lost=lost,
        duplicated=duplicated,
        undetected_corruptions=undetected_corruptions,
        faults_judged=faults_judged,
        faults_recovered=faults_recovered,
        recovery_times_s=recovery_times_s,
    )


def _no_faults(**changes: int) -> ScoreInputs:
    return _inputs(faults_judged=0, faults_recovered=0, recovery_times_s=(), **changes)


# --- the score -----------------------------------------------------------------------------------------------


def test_formula_version_is_2() -> None:
    assert FORMULA_VERSION == "2"


def test_perfect_run_with_judged_faults_scores_100_and_a_plus() -> None:
    s = compute_score(_inputs())
    # 0.4·100 + 0.3·(0.7·100 + 0.3·100) + 0.3·100 = 100, every dimension measured
    assert s == Score(
        total=approx(100.0),
        grade="A+",
        availability=100.0,
        recovery=approx(100.0),
        recovery_rate=100.0,
        recovery_speed=100.0,
        consistency=100.0,
        version="2",
    )


def test_perfect_run_without_faults_scores_100_with_recovery_unmeasured() -> None:
    s = compute_score(_no_faults())
    # recovery None; total = (0.4·100 + 0.3·100)/0.7 = 70/0.7 = 100
    assert s == Score(
        total=approx(100.0),
        grade="A+",
        availability=100.0,
        recovery=None,
        recovery_rate=None,
        recovery_speed=None,
        consistency=100.0,
        version="2",
    )


def test_availability_alone_degraded() -> None:
    # 80 of 100 offered good (20 late or failed, none lost): availability 80; others 100.
    # total = 0.4·80 + 0.3·100 + 0.3·100 = 32 + 30 + 30 = 92 → "A"
    s = compute_score(_inputs(good=80))
    assert s.availability == approx(80.0)
    assert s.recovery == approx(100.0)
    assert s.consistency == approx(100.0)
    assert s.total == approx(92.0)
    assert s.grade == "A"


def test_recovery_rate_alone_degraded() -> None:
    # 1 of 4 judged faults recovered, in 0.5 s: rate 25, speed 100 → recovery = 0.7·25 + 0.3·100 = 17.5 + 30 = 47.5
    # total = 0.4·100 + 0.3·47.5 + 0.3·100 = 40 + 14.25 + 30 = 84.25 → "B"
    s = compute_score(_inputs(faults_judged=4, faults_recovered=1, recovery_times_s=(0.5,)))
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
    # 200 offered and accepted, 190 good, 4 lost, 3 duplicated, 1 undetected corruption:
    # availability = 100·190/200 = 95; consistency = 100·(200 − 4 − 3 − 1)/200 = 96.
    s = compute_score(_inputs(offered=200, accepted=200, good=190, lost=4, duplicated=3, undetected_corruptions=1))
    assert s.consistency == approx(96.0)
    assert s.availability == approx(95.0)
    # total = 0.4·95 + 0.3·100 + 0.3·96 = 38 + 30 + 28.8 = 96.8
    assert s.total == approx(96.8)


def test_each_consistency_problem_counts_once() -> None:
    # 100 accepted and good; 10 duplicate effects only → consistency 90, availability stays 100.
    s = compute_score(_inputs(duplicated=10))
    assert (s.consistency, s.availability) == (approx(90.0), approx(100.0))
    # 10 undetected corruptions only → consistency 90.
    assert compute_score(_inputs(undetected_corruptions=10)).consistency == approx(90.0)
    # 10 lost (so at most 90 good) → consistency 90, availability 90.
    s = compute_score(_inputs(good=90, lost=10))
    assert (s.consistency, s.availability) == (approx(90.0), approx(90.0))


def test_consistency_is_over_accepted_not_offered() -> None:
    # 200 offered, 100 accepted (100 refused), 90 good, 10 lost:
    # consistency = 100·(100 − 10)/100 = 90 (refusals are not inconsistencies); availability = 100·90/200 = 45.
    s = compute_score(_inputs(offered=200, good=90, lost=10))
    assert s.consistency == approx(90.0)
    assert s.availability == approx(45.0)
    # total = 0.4·45 + 0.3·100 + 0.3·90 = 18 + 30 + 27 = 75 → "C"
    assert s.total == approx(75.0)
    assert s.grade == "C"


def test_consistency_clamps_at_zero() -> None:
    # 10 accepted, 5 lost + 5 duplicated + 7 corruptions = 17 problems > 10 → 100·max(−7, 0)/10 = 0, not negative.
    s = compute_score(_inputs(offered=10, accepted=10, good=5, lost=5, duplicated=5, undetected_corruptions=7))
    assert s.consistency == 0.0
    # availability = 100·5/10 = 50; total = 0.4·50 + 0.3·100 + 0.3·0 = 20 + 30 = 50 → "F"
    assert s.total == approx(50.0)
    assert s.grade == "F"


def test_exact_weighting_from_the_brief() -> None:
    # availability 90 (90/100 good), recovery rate 50 (1 of 2), speed from mean 5.5 s = 100·(10 − 5.5)/9 = 50,
    # consistency 100 → total = 0.4·90 + 0.3·(0.7·50 + 0.3·50) + 0.3·100 = 36 + 15 + 30 = 81.0 → "B"
    s = compute_score(_inputs(good=90, faults_judged=2, faults_recovered=1, recovery_times_s=(5.5,)))
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
    s = compute_score(_inputs(faults_judged=len(times), faults_recovered=len(times), recovery_times_s=times))
    assert s.recovery_speed == approx(speed)


def test_speed_averages_only_the_recovered_faults() -> None:
    # 3 judged, 2 recovered in 2 s and 3 s, 1 failed: rate = 100·2/3 = 66.666…; speed from mean 2.5 s (the failed
    # one has no time) = 100·(10 − 2.5)/9 = 83.333…; recovery = 0.7·66.666… + 0.3·83.333… = 46.666… + 25 = 71.666…
    s = compute_score(_inputs(faults_judged=3, faults_recovered=2, recovery_times_s=(2.0, 3.0)))
    assert s.recovery_rate == approx(200.0 / 3.0)
    assert s.recovery_speed == approx(250.0 / 3.0)
    assert s.recovery == approx(215.0 / 3.0)
    # total = 40 + 0.3·71.666… + 30 = 40 + 21.5 + 30 = 91.5 → "A"
    assert s.total == approx(91.5)
    assert s.grade == "A"


def test_one_judged_fault_failed_scores_zero_recovery() -> None:
    # 1 judged, 0 recovered: rate 0/1 = 0, speed 0 (nothing recovered, no free 100) → recovery 0.
    # total = 0.4·100 + 0.3·0 + 0.3·100 = 70 → "C"
    s = compute_score(_inputs(faults_judged=1, faults_recovered=0, recovery_times_s=()))
    assert (s.recovery_rate, s.recovery_speed, s.recovery) == (0.0, 0.0, 0.0)
    assert s.total == approx(70.0)
    assert s.grade == "C"


def test_several_judged_faults_none_recovered_scores_zero_rate_and_speed() -> None:
    # rate 0/3 = 0, speed 0 (nothing recovered) → recovery 0; total = 40 + 0 + 30 = 70 → "C"
    s = compute_score(_inputs(faults_judged=3, faults_recovered=0, recovery_times_s=()))
    assert (s.recovery_rate, s.recovery_speed, s.recovery) == (0.0, 0.0, 0.0)
    assert s.total == approx(70.0)
    assert s.grade == "C"


def test_no_judged_fault_leaves_recovery_unmeasured_and_out_of_the_total() -> None:
    # No judged fault: recovery, rate and speed are None (no free 100, no 0).
    s = compute_score(_no_faults(good=50))
    assert (s.recovery, s.recovery_rate, s.recovery_speed) == (None, None, None)
    # availability 50, consistency 100; total = (0.4·50 + 0.3·100)/0.7 = 50/0.7 = 71.428… → "C".
    assert s.availability == approx(50.0)
    assert s.consistency == approx(100.0)
    assert s.total == approx(500.0 / 7.0)
    assert s.grade == "C"
    # Recovery is not counted as 0 (total 0.4·50 + 0.3·100 = 50) nor as 100 (total 80).
    assert s.total != approx(50.0)
    assert s.total != approx(80.0)


def test_pending_and_unmeasured_faults_are_not_judged() -> None:
    # Three faults injected, two still pending, one unmeasured: none is judged, so the caller passes
    # faults_judged=0 and recovery stays None; the total is the same as a run with no fault at all.
    # availability 90, consistency 100 → total = (0.4·90 + 0.3·100)/0.7 = 66/0.7 = 94.285… → "A"
    s = compute_score(_no_faults(good=90))
    assert s.recovery is None
    assert s.total == approx(660.0 / 7.0)
    assert s.grade == "A"
    # One of the three recovered in 0.5 s, two still pending: judged 1, recovered 1 → rate 100, speed 100,
    # recovery 100 (pending faults are not failures); total = 0.4·90 + 0.3·100 + 0.3·100 = 96 → "A+"
    s = compute_score(_inputs(good=90, faults_judged=1, faults_recovered=1, recovery_times_s=(0.5,)))
    assert (s.recovery_rate, s.recovery_speed, s.recovery) == (approx(100.0), approx(100.0), approx(100.0))
    assert s.total == approx(96.0)
    assert s.grade == "A+"


def test_shedding_load_never_raises_the_score() -> None:
    # Queue capacity 1 at 10× capacity: 1000 offered, 100 accepted (900 refused), all 100 accepted good.
    # availability = 100·100/1000 = 10; consistency = 100·100/100 = 100; no judged fault → recovery None.
    # total = (0.4·10 + 0.3·100)/0.7 = 34/0.7 = 48.571… → "F", not the "A+" a per-accepted availability would give.
    s = compute_score(_no_faults(offered=1000, accepted=100, good=100))
    assert s.availability == approx(10.0)
    assert s.consistency == approx(100.0)
    assert s.recovery is None
    assert s.total == approx(340.0 / 7.0)
    assert s.grade == "F"
    # Accepting all 1000 with only the same 100 good scores the same availability: refusing is no better.
    assert compute_score(_no_faults(offered=1000, accepted=1000, good=100)).availability == approx(10.0)


def test_nothing_offered_is_no_score_at_all() -> None:
    # Warm-up: nothing offered yet → every field None, not 0 and not 100; only the version is set.
    for inputs in (_no_faults(offered=0, accepted=0, good=0), _inputs(offered=0, accepted=0, good=0)):
        s = compute_score(inputs)
        assert s == Score(
            total=None,
            grade=None,
            availability=None,
            recovery=None,
            recovery_rate=None,
            recovery_speed=None,
            consistency=None,
            version="2",
        )


def test_everything_refused_is_unavailable_with_consistency_unmeasured() -> None:
    # 50 offered, 0 accepted: availability = 100·0/50 = 0; consistency None (nothing accepted to keep);
    # no judged fault → recovery None; total = 0.4·0/0.4 = 0 → "F".
    s = compute_score(_no_faults(offered=50, accepted=0, good=0))
    assert s.availability == 0.0
    assert s.consistency is None
    assert s.recovery is None
    assert s.total == 0.0
    assert s.grade == "F"
    # With two faults recovered fast, recovery 100 joins: total = (0.4·0 + 0.3·100)/0.7 = 30/0.7 = 42.857… → "F"
    s = compute_score(_inputs(offered=50, accepted=0, good=0))
    assert (s.availability, s.consistency, s.recovery) == (0.0, None, approx(100.0))
    assert s.total == approx(300.0 / 7.0)
    assert s.grade == "F"


def test_configurable_weights_change_the_total() -> None:
    inputs = _inputs(good=90, faults_judged=2, faults_recovered=1, recovery_times_s=(5.5,))
    # Same dimensions as the brief case (90, rate 50, speed 50, 100), weights 0.6 / 0.2 / 0.2, rate share 0.5:
    # total = 0.6·90 + 0.2·(0.5·50 + 0.5·50) + 0.2·100 = 54 + 10 + 20 = 84
    w = ScoreWeights(availability=0.6, recovery=0.2, consistency=0.2, recovery_rate_share=0.5)
    s = compute_score(inputs, w)
    assert s.recovery == approx(50.0)
    assert s.total == approx(84.0)
    assert compute_score(inputs).total == approx(81.0)


def test_configurable_weights_are_renormalised_over_measured_dimensions() -> None:
    # No judged fault, availability 90, consistency 100, weights 0.6 / 0.2 / 0.2:
    # total = (0.6·90 + 0.2·100)/(0.6 + 0.2) = (54 + 20)/0.8 = 92.5 → "A"
    w = ScoreWeights(availability=0.6, recovery=0.2, consistency=0.2)
    s = compute_score(_no_faults(good=90), w)
    assert s.total == approx(92.5)
    assert s.grade == "A"
    # Default weights on the same run: (0.4·90 + 0.3·100)/0.7 = 66/0.7 = 94.285…
    assert compute_score(_no_faults(good=90)).total == approx(660.0 / 7.0)


def test_recovery_rate_share_splits_recovery() -> None:
    # rate 50 (1 of 2), speed 100 (0.5 s). share 1.0 → recovery = rate = 50; share 0.0 → recovery = speed = 100.
    inputs = _inputs(faults_judged=2, faults_recovered=1, recovery_times_s=(0.5,))
    assert compute_score(inputs, ScoreWeights(recovery_rate_share=1.0)).recovery == approx(50.0)
    assert compute_score(inputs, ScoreWeights(recovery_rate_share=0.0)).recovery == approx(100.0)


def test_configurable_speed_thresholds_move_the_ramp() -> None:
    inputs = _inputs(faults_judged=1, faults_recovered=1, recovery_times_s=(5.5,))
    # Ramp 5 s → 6 s: 5.5 s is its midpoint → 50 (same as the default ramp, by coincidence of midpoints).
    assert compute_score(inputs, ScoreWeights(speed_best_s=5.0, speed_worst_s=6.0)).recovery_speed == approx(50.0)
    # Ramp 0 s → 22 s: 100·(22 − 5.5)/22 = 75.
    assert compute_score(inputs, ScoreWeights(speed_best_s=0.0, speed_worst_s=22.0)).recovery_speed == approx(75.0)
    # Ramp 6 s → 60 s: 5.5 s is below best → 100.
    assert compute_score(inputs, ScoreWeights(speed_best_s=6.0, speed_worst_s=60.0)).recovery_speed == 100.0
    # Ramp 0.1 s → 2 s: 5.5 s is above worst → 0.
    assert compute_score(inputs, ScoreWeights(speed_best_s=0.1, speed_worst_s=2.0)).recovery_speed == 0.0


def test_nothing_is_rounded() -> None:
    # 2 of 3 offered good → availability 66.666…, not 66.67.
    s = compute_score(_inputs(offered=3, accepted=3, good=2))
    assert s.availability == 200.0 / 3.0
    # The renormalised total is not rounded either: 34/0.7 = 48.571428…, not 48.57.
    total = compute_score(_no_faults(offered=1000, accepted=100, good=100)).total
    assert total == approx(340.0 / 7.0, rel=1e-12)
    assert total != approx(48.57, rel=1e-12)


def test_as_dict_carries_every_dimension_and_the_version() -> None:
    s = compute_score(_inputs(good=90, faults_judged=2, faults_recovered=1, recovery_times_s=(5.5,)))
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
    assert d["version"] == FORMULA_VERSION == "2"
    assert d["total"] == approx(81.0)
    assert d["availability"] == approx(90.0)
    assert d["recovery"] == approx(50.0)
    assert d["recovery_rate"] == approx(50.0)
    assert d["recovery_speed"] == approx(50.0)
    assert d["consistency"] == approx(100.0)


def test_as_dict_keeps_unmeasured_fields_as_none() -> None:
    # No judged fault: the recovery fields are present and None; total = (0.4·100 + 0.3·100)/0.7 = 100.
    d = compute_score(_no_faults()).as_dict()
    assert (d["recovery"], d["recovery_rate"], d["recovery_speed"]) == (None, None, None)
    assert (d["total"], d["grade"], d["version"]) == (approx(100.0), "A+", "2")
    # Nothing offered: every field None but the version.
    d = compute_score(_no_faults(offered=0, accepted=0, good=0)).as_dict()
    assert d == {
        "total": None,
        "grade": None,
        "availability": None,
        "recovery": None,
        "recovery_rate": None,
        "recovery_speed": None,
        "consistency": None,
        "version": "2",
    }


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
        ({"offered": -1}, "offered"),
        ({"offered": -1, "accepted": 0, "good": 0}, "offered"),
        ({"accepted": -1}, "accepted"),
        ({"good": -1}, "good"),
        ({"lost": -1}, "lost"),
        ({"duplicated": -1}, "duplicated"),
        ({"undetected_corruptions": -1}, "undetected_corruptions"),
        ({"faults_judged": -1, "faults_recovered": 0, "recovery_times_s": ()}, "faults_judged"),
        ({"faults_recovered": -1}, "faults_recovered"),
        ({"accepted": 101}, "accepted"),  # more accepted than offered (100)
        ({"offered": 99}, "accepted"),  # the same, from the other side
        ({"offered": 0, "accepted": 1, "good": 0}, "accepted"),
        ({"good": 101}, "good"),
        ({"good": 95, "lost": 10}, "lost"),
        ({"faults_judged": 1}, "faults_recovered"),  # 2 recovered of 1 judged
        ({"faults_judged": 0}, "faults_recovered"),
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


def test_incidents_that_duplicated_an_effect_pull_consistency_down_to_their_share() -> None:
    # 10 duplicates among 100,000 tasks is 99.99 % by task, but 3 of 30 incidents double-applied an effect.
    base = dict(offered=100_000, accepted=100_000, good=99_000, lost=0, duplicated=10, undetected_corruptions=0)
    recovered = dict(faults_judged=30, faults_recovered=30, recovery_times_s=(0.5,) * 30)
    clean = compute_score(ScoreInputs(**base, **recovered))
    dirty = compute_score(ScoreInputs(**base, **recovered, faults_inconsistent=3))
    assert clean.consistency == approx(99.99)
    assert dirty.consistency == approx(90.0)
    assert dirty.total is not None and clean.total is not None and dirty.total < clean.total - 2.9


def test_more_inconsistent_incidents_than_judged_is_refused() -> None:
    with pytest.raises(ValueError, match="faults_inconsistent"):
        ScoreInputs(
            offered=10,
            accepted=10,
            good=10,
            lost=0,
            duplicated=0,
            undetected_corruptions=0,
            faults_judged=1,
            faults_recovered=1,
            recovery_times_s=(1.0,),
            faults_inconsistent=2,
        )
