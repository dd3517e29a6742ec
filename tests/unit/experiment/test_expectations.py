"""A scenario's `expect:`: one list of checks, refused and judged alike, and one vocabulary for the results."""

from __future__ import annotations

from typing import Any

import pytest

from chaosd.core.errors import ScenarioError
from chaosd.experiment.plans import EXPECT_KEYS, check_expectations, evaluate_expectations

# A finished run's report, as far as the checks read it: one fault, recovered in 2.5 s.
REPORT: dict[str, Any] = {
    "score": {"grade": "B", "total": 81.0, "availability": 99.0},
    "tasks": {"lost": 1, "duplicated": 0},
    "faults": [{"id": 1, "action": "kill_leader", "recovered": True, "outcome": "recovered"}],
    "incidents": [
        {
            "id": 1,
            "faults": [1],
            "actions": ["kill_leader"],
            "outcome": "recovered",
            "recovery_s": 2.5,
            "impact_s": 1.0,
            "stalled_s": 0.0,
        }
    ],
    "actions": [{"action": "kill_leader", "ok": True}],
    "collapse": {"final_state": "metastable"},
}
VALID: dict[str, Any] = {
    "min_grade": "B",
    "min_score": 80,
    "max_recovery_s": "2s",
    "lost_tasks": 0,
    "duplicated_tasks": 0,
    "all_recovered": True,
    "checks_pass": True,
    "min_availability": 99,
    "max_availability": 99.5,
    "final_state": "metastable",
}


def _refusal(expect: dict[str, Any], judge: bool) -> str:
    with pytest.raises(ScenarioError) as caught:
        if judge:
            evaluate_expectations(expect, REPORT)
        else:
            check_expectations(expect, "s.yaml")
    return "; ".join(caught.value.lines())


@pytest.mark.parametrize("judge", [False, True], ids=["checked", "judged"])
@pytest.mark.parametrize("key", ["max_lost", "max_duplicated", "typo"])
def test_a_key_outside_the_list_is_refused_naming_the_valid_keys(key: str, judge: bool) -> None:
    message = _refusal({key: 0}, judge)
    assert f"expect.{key}: unknown expectation (valid: {', '.join(EXPECT_KEYS)})" in message


def test_every_accepted_key_is_judged_under_one_vocabulary() -> None:
    assert set(VALID) == set(EXPECT_KEYS)
    check_expectations(VALID, "s.yaml")
    results = {e["check"]: e for e in evaluate_expectations(VALID, REPORT)}
    assert list(results) == list(VALID)
    for key, e in results.items():
        assert e["expected"] == VALID[key]
        assert (
            {"check", "expected", "measured", "passed"}
            <= set(e)
            <= {"check", "expected", "measured", "passed", "incident", "because"}
        )
    assert [k for k, e in results.items() if not e["passed"]] == ["max_recovery_s", "lost_tasks"]
    assert results["max_recovery_s"]["measured"] == 2.5 and results["max_recovery_s"]["incident"]["id"] == 1
    assert results["lost_tasks"]["because"] == "lost_tasks: measured 1"


@pytest.mark.parametrize(
    ("expect", "measured", "passed"),
    [
        ({"max_availability": 99.5}, 99.0, True),
        ({"max_availability": 98}, 99.0, False),  # the storm did not hold down availability: the check fails
        ({"final_state": "metastable"}, "metastable", True),
        ({"final_state": "healthy"}, "metastable", False),
    ],
)
def test_a_storm_is_expected_by_its_ceiling_and_its_final_state(
    expect: dict[str, Any], measured: object, passed: bool
) -> None:
    (result,) = evaluate_expectations(expect, REPORT)
    assert (result["measured"], result["passed"]) == (measured, passed)


def test_a_final_state_the_detector_has_not_is_refused_naming_the_states() -> None:
    message = _refusal({"final_state": "stormy"}, judge=False)
    assert "expect.final_state: must be a detector state (healthy, warning, overload, collapsed, metastable" in message
