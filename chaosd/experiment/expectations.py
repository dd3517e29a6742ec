"""A scenario's ``expect:``: the one list of checks, each value read once (a duration into seconds) and judged.

A scenario file's ``expect`` is read when the scenario is loaded (:class:`Expectations` is its type), so every
later judge (one run, N replications, a sweep's runs, the daemon) compares numbers, never the text written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar, cast, get_args

from pydantic import GetCoreSchemaHandler
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError, ValidationError, core_schema

from chaosd.core.durations import parse_duration
from chaosd.core.errors import ScenarioError
from chaosd.views import CollapseView, DetectorStateName, IncidentView, PlanReport, ReportView

__all__ = [
    "EXPECT_KEYS",
    "GRADES",
    "Expectation",
    "Expectations",
    "JudgedReport",
    "Measured",
    "Written",
    "read_expectations",
]

GRADES = ("F", "D", "C", "B", "A", "A+")  # worst first
DETECTOR_STATES: tuple[str, ...] = get_args(DetectorStateName)

Written = str | int | float | bool  # an ``expect:`` value as written, once checked (ExpectationView.expected)
Measured = str | int | float | bool | None  # what a check measures (None: a measurement the report has not got)
JudgedReport = ReportView | PlanReport  # a run's report, or a scenario's window on the daemon
T = TypeVar("T", str, int, float, bool)

# What one check measures on a report, whether that passes, and the incident behind the measurement.
Judged = tuple[Measured, bool, IncidentView | None]


@dataclass(frozen=True, slots=True)
class _Problem:
    """Why an ``expect:`` value cannot be compared."""

    message: str


# Judges: the value read (its type fixed by its reader) against a report and the incidents of its faults.


def _min_grade(wanted: str, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["score"]["grade"]
    return measured, measured in GRADES and GRADES.index(measured) >= GRADES.index(wanted), None


def _min_score(wanted: float, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["score"]["total"]
    return measured, measured is not None and measured >= wanted, None


def _min_availability(wanted: float, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["score"]["availability"]
    return measured, measured is not None and measured >= wanted, None


def _max_availability(wanted: float, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["score"]["availability"]
    return measured, measured is not None and measured <= wanted, None


def _final_state(wanted: str, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    # A scenario's window on the daemon has no detector summary of its own: nothing to measure there.
    collapse = cast("CollapseView | None", report.get("collapse"))
    measured = collapse["final_state"] if collapse is not None else None
    return measured, measured == wanted, None


def _max_recovery_s(wanted: float, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    # Per incident: overlapping faults share one recovery (a lone fault is its own incident).
    timed = [(took, i) for i in incidents if (took := i["recovery_s"]) is not None]
    slowest = max(timed, key=lambda timed_incident: timed_incident[0], default=None)
    measured = slowest[0] if slowest is not None else 0.0
    return measured, measured <= wanted, slowest[1] if slowest is not None else None


def _lost_tasks(wanted: int, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["tasks"]["lost"]
    return measured, measured <= wanted, None


def _duplicated_tasks(wanted: int, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = report["tasks"]["duplicated"]
    return measured, measured <= wanted, None


def _all_recovered(wanted: bool, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = all(f["recovered"] for f in report.get("faults", []))
    return measured, measured == wanted, None


def _checks_pass(wanted: bool, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
    measured = all(a.get("ok", False) for a in report.get("actions", []) if a.get("action") != "wait")
    return measured, measured == wanted, None


# Readers: an ``expect:`` value as written → the value its judge compares with, or why it cannot be compared.


def _grade(wanted: object) -> str | _Problem:
    if not isinstance(wanted, str) or wanted not in GRADES:
        return _Problem(f"must be a grade ({', '.join(GRADES)})")
    return wanted


def _points(wanted: object) -> float | _Problem:
    if isinstance(wanted, bool) or not isinstance(wanted, int | float) or not 0 <= wanted <= 100:
        return _Problem("must be a number from 0 to 100")
    return float(wanted)


def _most_tasks(wanted: object) -> int | _Problem:
    if (
        isinstance(wanted, bool)
        or not isinstance(wanted, int | float)
        or not (math.isfinite(wanted) and wanted == int(wanted) >= 0)
    ):
        return _Problem("must be a whole number ≥ 0 (the most tasks allowed)")
    return int(wanted)


def _state(wanted: object) -> str | _Problem:
    if not isinstance(wanted, str) or wanted not in DETECTOR_STATES:
        return _Problem(f"must be a detector state ({', '.join(DETECTOR_STATES)})")
    return wanted


def _flag(wanted: object) -> bool | _Problem:
    if not isinstance(wanted, bool):
        return _Problem("must be true or false")
    return wanted


def _duration(wanted: object) -> float | _Problem:
    try:
        seconds = parse_duration(wanted)
    except ValueError:
        return _Problem("not a duration (use seconds, or a number with ms, s, m or h)")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < math.inf:
        return _Problem("must be a duration ≥ 0")
    try:
        return float(seconds)
    except OverflowError:  # an integer too large for a float
        return _Problem("must be a duration ≥ 0 that fits a float")


_Read = Callable[[object], Written | _Problem]
_Judge = Callable[[Written, JudgedReport, list[IncidentView]], Judged]


def _check(
    kind: type[T],
    read: Callable[[object], T | _Problem],
    judge: Callable[[T, JudgedReport, list[IncidentView]], Judged],
) -> tuple[_Read, _Judge]:
    """One check: its reader, and its judge taking any value its reader gives (``kind`` says which)."""

    def judged(value: Written, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
        if not isinstance(value, kind):  # an Expectation is only ever built from its reader's value
            raise TypeError(f"{judge.__name__[1:]} compares with {kind.__name__}, not {type(value).__name__}")
        return judge(value, report, incidents)

    return read, judged


# The one list of checks: exactly these keys are accepted, read and judged.
_CHECKS: dict[str, tuple[_Read, _Judge]] = {
    "min_grade": _check(str, _grade, _min_grade),
    "min_score": _check(float, _points, _min_score),
    "max_recovery_s": _check(float, _duration, _max_recovery_s),
    "lost_tasks": _check(int, _most_tasks, _lost_tasks),
    "duplicated_tasks": _check(int, _most_tasks, _duplicated_tasks),
    "all_recovered": _check(bool, _flag, _all_recovered),
    "checks_pass": _check(bool, _flag, _checks_pass),
    "min_availability": _check(float, _points, _min_availability),
    "max_availability": _check(float, _points, _max_availability),
    "final_state": _check(str, _state, _final_state),
}
EXPECT_KEYS = tuple(_CHECKS)


@dataclass(frozen=True, slots=True)
class Expectation:
    """One ``expect:`` key, read: the key, its value as written, and the value it is compared with."""

    check: str
    written: Written
    value: Written  # what the check compares with: a duration in seconds, a whole count, points, a grade, a flag

    def judge(self, report: JudgedReport, incidents: list[IncidentView]) -> Judged:
        """What the check measures on ``report`` (``incidents``: its faults' incidents), and whether that passes."""
        return _CHECKS[self.check][1](self.value, report, incidents)


class Expectations(Mapping[str, Written]):
    """``expect:`` read once: :attr:`checks` in the order written; as a mapping, each key's value as written."""

    __slots__ = ("checks",)

    def __init__(self, checks: tuple[Expectation, ...] = ()) -> None:
        self.checks = checks

    def __getitem__(self, key: str) -> Written:
        for check in self.checks:
            if check.check == key:
                return check.written
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (check.check for check in self.checks)

    def __len__(self) -> int:
        return len(self.checks)

    def __repr__(self) -> str:
        return f"Expectations({dict(self)!r})"

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        """A scenario model's field: a mapping read by :func:`read_expectations`, each problem at its own key."""
        return core_schema.no_info_after_validator_function(
            _validated,
            core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema()),
            serialization=core_schema.plain_serializer_function_ser_schema(dict),
        )


def _read(expect: Mapping[str, object]) -> tuple[Expectations, list[tuple[str, str, object]]]:
    """``expect`` read in its order, and its problems: (key, what is wrong, the value)."""
    problems: list[tuple[str, str, object]] = []
    checks: list[Expectation] = []
    for key, wanted in expect.items():
        pair = _CHECKS.get(key)
        value = _Problem(f"unknown expectation (valid: {', '.join(EXPECT_KEYS)})") if pair is None else pair[0](wanted)
        if isinstance(value, _Problem):
            problems.append((key, value.message, wanted))
            continue
        assert isinstance(wanted, str | int | float | bool)  # no reader takes anything else
        checks.append(Expectation(key, wanted, value))
    return Expectations(tuple(checks)), problems


def read_expectations(expect: Mapping[str, object], source: str) -> Expectations:
    """``expect`` read once, in its order; refuses unknown keys and values that cannot be compared, naming
    ``source`` and ``expect.KEY`` (:class:`~chaosd.core.errors.ScenarioError`). Read expectations come back as they are.
    """
    if isinstance(expect, Expectations):
        return expect
    checks, problems = _read(expect)
    if problems:
        raise ScenarioError([(source, f"expect.{key}", message) for key, message, _ in problems])
    return checks


def _validated(expect: dict[str, object]) -> Expectations:
    checks, problems = _read(expect)
    if problems:
        errors = [
            InitErrorDetails(type=PydanticCustomError("expectation", message), loc=(key,), input=wanted)
            for key, message, wanted in problems
        ]
        raise ValidationError.from_exception_data("expect", errors)
    return checks
