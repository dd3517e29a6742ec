"""Every event the flight recorder keeps has the payload its kind declares (chaosd.events.kinds).

mypy checks each ``record(...)`` call against ``EventLog.record``'s overloads; this checks what the
pipeline really records, in runs that exercise every fault action and the shipped scenarios, against the
same overloads: a field added at run time (a ``**extra``) or a value outside its Literal would pass mypy
and still reach the SSE stream, storage and the Arena.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from conftest import settings
from pydantic import TypeAdapter, ValidationError

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.events.kinds import EventKind
from chaosd.events.log import Event, EventLog
from chaosd.experiment.plans import Plan, scenario_plan, survival_plan
from chaosd.experiment.runner import Experiment
from chaosd.experiment.scenario import load_scenario, settings_for
from chaosd.faults import CATALOGUE

pytestmark = pytest.mark.cpu  # virtual time: CPU only

ROOT = Path(__file__).resolve().parents[3]


def _shapes() -> dict[str, list[type]]:
    """Each kind's payload types, read from ``EventLog.record``'s overloads."""
    shapes: dict[str, list[type]] = {}
    for overload in typing.get_overloads(EventLog.record):
        hints = typing.get_type_hints(overload, include_extras=True)
        (payload,) = typing.get_args(hints["data"])  # Unpack[Payload]
        for kind in typing.get_args(hints["kind"]):
            shapes.setdefault(kind, []).append(payload)
    return shapes


SHAPES = _shapes()


def _keys(payload: type) -> tuple[set[str], set[str]]:
    """Its required and optional keys, from its resolved hints (``__required_keys__`` counts a ``NotRequired``
    as required when annotations are strings, as under ``from __future__ import annotations``)."""
    hints = typing.get_type_hints(payload, include_extras=True)
    optional = {k for k, h in hints.items() if typing.get_origin(h) is typing.NotRequired}
    return set(hints) - optional, optional


def conforms(kind: str, data: Mapping[str, object]) -> bool:
    """Whether ``data`` is exactly one of ``kind``'s payloads: its required keys, no other keys, typed values."""
    for payload in SHAPES.get(kind, []):
        required, optional = _keys(payload)
        if not required <= data.keys() <= required | optional:
            continue
        try:
            TypeAdapter(payload).validate_python(dict(data), strict=False)
        except ValidationError:
            continue
        return True
    return False


def test_every_kind_has_a_payload_and_every_payload_a_kind() -> None:
    assert set(SHAPES) == set(typing.get_args(EventKind)) | {"survival", "scenario"}
    assert all(SHAPES.values())


def test_the_checker_refuses_what_no_payload_declares() -> None:
    """Negative controls: an extra field, a missing one and a value outside its Literal are each refused."""
    injected = {"id": 1, "action": "kill_leader", "targets": ["a"], "state": "injected"}
    assert conforms("fault", injected)
    assert not conforms("fault", {**injected, "extra": 1})
    assert not conforms("fault", {k: v for k, v in injected.items() if k != "id"})
    assert not conforms("fault", {**injected, "state": "exploded"})
    assert not conforms("nonsense", injected)


def _events(plan: Plan, overlay: dict[str, object], duration: float) -> list[Event]:
    loop = new_event_loop(virtual=True)

    async def main() -> list[Event]:
        exp = Experiment(settings(overlay), LoopClock(loop), warmup=0.0)
        await exp.run(duration, plan=plan)
        return exp.events.events()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def _scenario_events(name: str, until: float) -> list[Event]:
    """The events of the shipped scenario ``name``, run for its first ``until`` seconds."""
    path = ROOT / "scenarios" / f"{name}.yaml"
    scenario = load_scenario(path)
    s = settings_for(scenario, path, None)
    loop = new_event_loop(virtual=True)

    async def main() -> list[Event]:
        exp = Experiment(s, LoopClock(loop), warmup=0.0, scenario=scenario.name)
        await exp.run(min(until, s.run.duration), plan=scenario_plan(scenario.actions))
        return exp.events.events()

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_what_the_pipeline_records_is_what_each_kind_declares() -> None:
    every = tuple(sorted(CATALOGUE))
    events = _events(
        survival_plan(4.0, every, 7, ttl=8.0, last_at=200.0),
        {"load": {"rate": 100.0}, "faults": {"max_concurrent": 5}},
        220.0,
    )
    # Each scenario runs 10 s past the last event whose payload has a shape (keys, value types, short texts) not
    # seen before in the whole scenario: at 125 s of cascading_storm's 180, 68 s of leader_assassination's 120 and
    # 90 s of pressure_storm's 240 (an incident failing) and retry_storm_ways_out's pushes of the callers' policy.
    # Later events repeat those shapes; the run's end is recorded wherever it ends.
    for name, until in (
        ("cascading_storm", 135.0),
        ("leader_assassination", 78.0),
        ("pressure_storm", 100.0),
        ("retry_storm_ways_out", 135.0),
    ):
        events += _scenario_events(name, until)
    wrong = [(e.kind, dict(e.data)) for e in events if not conforms(e.kind, e.data)]
    assert wrong == []
    seen = {e.kind for e in events}
    # The kinds an offline run records (the backend's need Redis, score and lever a daemon).
    assert {"fault", "agent", "leader", "supervisor", "breaker", "detector", "throttle", "run"} <= seen, seen
    states = {str(e.data.get("state")) for e in events if e.kind == "fault"}
    assert {"injected", "reverted", "recovered"} <= states, states
