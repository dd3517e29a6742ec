"""Incidents nobody injected: the service leaving its steady state with no fault in play opens one, judged as a fault.

On the fault protocol's fake (every figure set by the test, so every time is exact) and on the real pipeline in
virtual time (a stage made to fail for 15 s directly on its runner, no fault injected), each with its negative
control: the same run without the outage opens none.
"""

from __future__ import annotations

import math
import random
import typing
from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest
from conftest import settings
from pydantic import TypeAdapter, ValidationError
from test_fault_boundary import FakeRuntime, Snapshot, _Stage

from chaosd.config.settings import FaultsConfig, RecoveryConfig, SloConfig
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.events.kinds import IncidentOpened, IncidentRecovered, IncidentUnrecovered
from chaosd.events.log import Event, EventLog
from chaosd.experiment.runner import Experiment
from chaosd.faults import Injector
from chaosd.faults.incidents import IncidentBook
from chaosd.views import IncidentView, ReportView

pytestmark = pytest.mark.cpu  # virtual time: CPU only

TICK = 0.1
CONFIRM = 3.0
STEADY = Snapshot(0.0, goodput=100.0, error_rate=0.0, sojourn_p95=0.1, queue_depth=2)
DOWN = Snapshot(0.0, goodput=30.0, error_rate=0.7, sojourn_p95=0.1, queue_depth=2)  # 70 % of calls fail

Shape = Callable[[float], Snapshot]  # the service's figures at each instant

OPEN_AFTER = RecoveryConfig().unplanned_after  # seconds out of tolerance before an unplanned incident opens


def _keys(payload: type) -> tuple[set[str], set[str]]:
    """A payload's required and optional keys, from its resolved hints (as tests/unit/events/test_event_kinds.py
    reads them: ``__required_keys__`` misses a ``NotRequired`` under string annotations)."""
    hints = typing.get_type_hints(payload, include_extras=True)
    optional = {k for k, h in hints.items() if typing.get_origin(h) is typing.NotRequired}
    return set(hints) - optional, optional


def _injector(rt: FakeRuntime, events: EventLog, **kw: float) -> Injector:
    recovery = RecoveryConfig(confirm=CONFIRM, limit=kw.pop("limit", 60.0))
    injector = Injector(FaultsConfig(), recovery, SloConfig(), rt, random.Random(1), events, TICK, **kw)  # type: ignore[arg-type]
    injector.dated = False  # the fake's figures are instantaneous: no trailing window to date a recovery back by
    return injector


def _drive(injector: Injector, rt: FakeRuntime, until: float, shape: Shape, start: float = 0.0) -> None:
    """One tick every TICK from ``start`` to ``until``: the fake's clock, then the snapshot ``shape`` gives."""
    for n in range(round(start / TICK), round(until / TICK)):
        t = round(n * TICK, 6)
        rt._now = t
        injector.on_tick(replace(shape(t), t=t))


def _outage(start: float, end: float, during: Snapshot = DOWN, stage: str = "answer") -> Callable[[FakeRuntime], Shape]:
    """The service down from ``start`` to ``end``: 7 of ``stage``'s attempts fail ("error") per tick meanwhile."""

    def bind(rt: FakeRuntime) -> Shape:
        def shape(t: float) -> Snapshot:
            if start <= t < end:
                failures = rt.stages[stage].failures
                failures["error"] = failures.get("error", 0) + 7
                rt.ledger.total.failed += 7
                return during
            return STEADY

        return shape

    return bind


def conforms(kind: str, data: Mapping[str, object]) -> bool:
    """Exactly one of the incident payloads (chaosd.events.kinds): its keys, no others, typed values.

    tests/unit/events/test_event_kinds.py checks every kind against EventLog.record's overloads; this checks these
    against the payload types themselves."""
    for payload in (IncidentOpened, IncidentRecovered, IncidentUnrecovered):
        required, optional = _keys(payload)
        if kind == "incident" and required <= data.keys() <= required | optional:
            try:
                TypeAdapter(payload).validate_python(dict(data), strict=True)
            except ValidationError:
                continue
            return True
    return False


def _incident_events(events: EventLog) -> list[tuple[float, dict[str, object]]]:
    return [(e.t, dict(e.data)) for e in events.events("incident")]


# --- on the fake ------------------------------------------------------------------------------------------


def test_an_outage_with_no_fault_opens_one_incident_timed_from_its_first_tick_out() -> None:
    rt, events = FakeRuntime(stages={"plan": _Stage(), "answer": _Stage()}), EventLog()
    injector = _injector(rt, events)
    plan_book = IncidentBook(owns=lambda record: True)  # a plan's book: counts only incidents holding a fault
    injector.books.append(plan_book)
    rt.stages["plan"].failures["timeout"] = 3  # failed before the outage: not its cause
    shape = _outage(20.0, 35.0)(rt)
    _drive(injector, rt, 21.0, shape)
    assert not injector.unplanned_open and injector.incidents.total == 0  # out for 1 s: not yet one
    _drive(injector, rt, 26.0, shape, start=21.0)
    assert injector.unplanned_open
    _drive(injector, rt, 60.0, shape, start=26.0)

    assert injector.incidents.total == 1
    incident = injector.incidents.last()
    assert incident is not None
    view = incident.as_dict()
    assert (view["faults"], view["actions"], view["unplanned"]) == ([], [], True)
    assert view["started_at"] == 20.0  # its first tick out of tolerance
    assert view["outcome"] == "recovered"
    assert view["recovery_s"] == pytest.approx(15.0)  # from its start to the first tick back (35.0)
    assert view["impact_s"] == pytest.approx(15.0)  # 150 ticks out of tolerance
    assert view["impact_tasks"]["failed"] == 7 * 150
    assert view["cause"] == {
        "stage": "answer",
        "reason": "error",
        "failed": 7 * 150,
        "error": None,
        "signals": ["goodput", "error_rate"],
    }
    TypeAdapter(IncidentView).validate_python(view, strict=True)
    opened_at = 20.0 + OPEN_AFTER - TICK  # the 50th tick out of tolerance
    verdict_at = 35.0 + CONFIRM  # back at 35.0, held for the confirmation window
    assert [(round(t, 6), d["state"]) for t, d in _incident_events(events)] == [
        (opened_at, "opened"),
        (verdict_at, "recovered"),
    ]
    assert _incident_events(events)[1][1]["recovery_s"] == pytest.approx(15.0)
    assert all(conforms(e.kind, e.data) for e in events.events("incident"))
    assert not injector.unplanned_open
    # Counted as any incident in the run's book (what the score reads), not in a plan's.
    book = injector.book
    assert (book.judged, book.recovered, book.recovery.value) == (1, 1, pytest.approx(15.0))
    assert book.unplanned == {"recovered": 1, "failed": 0, "unmeasured": 0}
    assert plan_book.outcomes == {"recovered": 0, "failed": 0, "unmeasured": 0}


def test_the_same_run_without_the_outage_opens_none() -> None:
    """The negative control: steady figures, the same stages, the same ticks."""
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    _drive(injector, rt, 60.0, lambda t: STEADY)
    assert injector.baseline() is not None  # judged all along: a baseline from 5 s on
    assert injector.incidents.total == 0 and events.events("incident") == []
    assert injector.book.unplanned == {"recovered": 0, "failed": 0, "unmeasured": 0}


def test_an_outage_shorter_than_the_debounce_opens_none() -> None:
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    _drive(injector, rt, 60.0, _outage(20.0, 20.0 + OPEN_AFTER - TICK)(rt))
    assert injector.incidents.total == 0
    # The control: one tick longer opens one.
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    _drive(injector, rt, 60.0, _outage(20.0, 20.0 + OPEN_AFTER)(rt))
    assert injector.incidents.total == 1


def test_an_outage_that_outlasts_the_limit_fails_once_and_lowers_the_recovery() -> None:
    """Failed at ``limit`` after its start; the service still down after that is the same deviation, not a new
    incident; once it is back, a second outage is a second incident."""
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events, limit=10.0)
    first = _outage(20.0, 45.0)(rt)
    second = _outage(60.0, 61.0 + OPEN_AFTER)(rt)  # judged back at 66 + confirm, within 60 + limit
    _drive(injector, rt, 100.0, lambda t: first(t) if t < 50.0 else second(t))
    outcomes = [(i.as_dict()["started_at"], i.outcome) for i in injector.incidents]
    assert outcomes == [(20.0, "failed"), (60.0, "recovered")]
    states = [(round(t, 6), d["state"]) for t, d in _incident_events(events)]
    assert states[:2] == [(20.0 + OPEN_AFTER - TICK, "opened"), (30.1, "failed")]  # past 20 + limit
    assert injector.book.judged == 2 and injector.book.recovered == 1
    assert injector.book.unplanned == {"recovered": 1, "failed": 1, "unmeasured": 0}


def test_an_injected_fault_in_steady_state_makes_a_planned_incident() -> None:
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    _drive(injector, rt, 20.0, lambda t: STEADY)
    record = injector.inject("pause_agent", "worker-0", ttl=10.0)
    _drive(injector, rt, 60.0, lambda t: DOWN if t < 30.0 else STEADY, start=20.0)
    assert injector.incidents.total == 1
    view = injector.incidents.get(1).as_dict()  # type: ignore[union-attr]
    assert (view["faults"], view["unplanned"], view["cause"], view["outcome"]) == (
        [record.id],
        False,
        None,
        "recovered",
    )
    assert events.events("incident") == []  # the fault's own events tell it
    assert injector.book.unplanned["recovered"] == 0 and injector.book.recovered == 1


def test_a_fault_injected_while_one_is_open_joins_it() -> None:
    """As any fault injected into an open incident: the service comes back once for both."""
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    shape = _outage(20.0, 35.0)(rt)
    _drive(injector, rt, 28.0, shape)
    assert injector.unplanned_open
    record = injector.inject("pause_agent", "worker-0", ttl=10.0)  # lifted at 38.0: the last blow
    _drive(injector, rt, 60.0, shape, start=28.0)
    assert injector.incidents.total == 1
    incident = injector.incidents.get(1)
    assert incident is not None and incident.members == [record] and record.shared
    view = incident.as_dict()
    assert (view["faults"], view["unplanned"], view["started_at"], view["outcome"]) == ([1], True, 20.0, "recovered")
    assert view["recovery_s"] == 0.0  # back at 35.0, before the fault was lifted at 38.0
    assert [d["state"] for _, d in _incident_events(events)] == ["opened", "recovered"]
    assert injector.book.judged == 1


def test_ticks_the_host_perturbed_never_open_one() -> None:
    """A stalled host: the figures look like an outage, every tick is late. The control: not late, one opens."""
    for late, expected in ((1.0, 0), (0.0, 1)):
        rt, events = FakeRuntime(), EventLog()
        injector = _injector(rt, events, stall=0.5)
        bad = _outage(20.0, 30.0, during=replace(DOWN, lateness=late))(rt)
        _drive(injector, rt, 60.0, bad)
        assert injector.incidents.total == expected, late


def test_a_stall_mid_outage_delays_the_opening_and_does_not_hide_it() -> None:
    """An 8 s outage with the host late on one tick 4 s in: the ticks the stall perturbed do not count, and the
    run goes on after them, so it opens (timed from its first tick out). Were the run broken there, the 5 s it
    needs would end after the outage: none. The control: late for the outage's second half, too few judged
    ticks out are left, and none opens."""
    assert OPEN_AFTER == 5.0
    for late_from, late_to, expected in ((24.0, 24.05, 1), (23.5, 28.0, 0)):
        rt, events = FakeRuntime(), EventLog()
        injector = _injector(rt, events, stall=0.5)
        down = _outage(20.0, 28.0)(rt)

        def shape(t: float, down: Shape = down, a: float = late_from, b: float = late_to) -> Snapshot:
            snap = down(t)
            return replace(snap, lateness=1.0) if a <= t < b else snap

        _drive(injector, rt, 60.0, shape)
        assert injector.incidents.total == expected, (late_from, late_to)
        if expected:
            view = injector.incidents.get(1).as_dict()  # type: ignore[union-attr]
            assert view["started_at"] == 20.0 and view["outcome"] == "recovered", view


def test_less_load_is_no_outage() -> None:
    """Half the load, half the goodput: within tolerance. The control: half the goodput at full load opens one."""
    for arrival, expected in ((50.0, 0), (100.0, 1)):
        rt, events = FakeRuntime(), EventLog()
        injector = _injector(rt, events)
        half = replace(STEADY, goodput=50.0, throughput=50.0, arrival_rate=arrival)
        _drive(injector, rt, 60.0, lambda t, half=half: half if 20.0 <= t < 40.0 else STEADY)
        assert injector.incidents.total == expected, arrival
        if expected:
            assert injector.incidents.get(1).as_dict()["cause"]["signals"] == ["goodput"]  # type: ignore[index,union-attr]


def test_a_python_stage_names_its_handlers_exception_and_a_slow_service_its_signals() -> None:
    rt, events = FakeRuntime(), EventLog()
    call = _Stage(kind="python")
    rt.stages["call"] = call

    def shape(t: float) -> Snapshot:
        if 20.0 <= t < 30.0:
            call.failures["handler_error"] = call.failures.get("handler_error", 0) + 4
            call.handler_errors["ClientResponseError"] = call.handler_errors.get("ClientResponseError", 0) + 3
            call.handler_errors["TimeoutError"] = call.handler_errors.get("TimeoutError", 0) + 1
            return DOWN
        return STEADY

    injector = _injector(rt, events)
    _drive(injector, rt, 60.0, shape)
    cause = injector.incidents.get(1).as_dict()["cause"]  # type: ignore[union-attr]
    assert cause == {
        "stage": "call",
        "reason": "handler_error",
        "failed": 400,  # 4 a tick for 10 s
        "error": "ClientResponseError",
        "signals": ["goodput", "error_rate"],
    }
    # No stage failed: the cause is the figures that left tolerance (a service gone slow).
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    slow = replace(STEADY, sojourn_p95=0.5, queue_depth=40)
    _drive(injector, rt, 60.0, lambda t: slow if 20.0 <= t < 30.0 else STEADY)
    assert injector.incidents.get(1).as_dict()["cause"] == {  # type: ignore[union-attr]
        "stage": None,
        "reason": None,
        "failed": 0,
        "error": None,
        "signals": ["p95", "queue"],
    }


def test_a_queue_alone_opens_none() -> None:
    """A busy queue's excursion users do not feel (tasks as fast, as many): none. The control is the test above."""
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events)
    _drive(injector, rt, 60.0, lambda t: replace(STEADY, queue_depth=40) if 20.0 <= t < 30.0 else STEADY)
    assert injector.incidents.total == 0


def test_never_opens_one_when_disabled() -> None:
    rt, events = FakeRuntime(), EventLog()
    injector = _injector(rt, events, unplanned_after=math.inf)
    _drive(injector, rt, 60.0, _outage(20.0, 35.0)(rt))
    assert injector.incidents.total == 0


# --- on the real pipeline, in virtual time ------------------------------------------------------------------


def _pipeline_run(
    outage: tuple[float, float] | None, overlay: dict[str, object], duration: float
) -> tuple[ReportView, list[Event]]:
    """The default pipeline; during ``outage`` both answer stages fail every attempt (set on their runners)."""
    loop = new_event_loop(virtual=True)
    clock = LoopClock(loop)

    async def main() -> tuple[ReportView, list[Event]]:
        exp = Experiment(settings(overlay), clock, warmup=0.0)

        async def plan(e: Experiment) -> None:
            if outage is None:
                return
            runners = [e.pipeline.stages[name] for name in ("answer", "answer_backup")]
            configs = [r.cfg for r in runners]
            await clock.sleep_until(outage[0])
            for r in runners:
                r.cfg = r.cfg.model_copy(update={"failure_probability": 1.0})
                r.refresh()
            await clock.sleep_until(outage[1])
            for r, cfg in zip(runners, configs, strict=True):
                r.cfg = cfg
                r.refresh()

        report = await exp.run(duration, plan=plan)
        return report, exp.events.events("incident")

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_stage_down_for_15_s_with_no_fault_is_an_incident_recovered_after_it() -> None:
    """The issue's acceptance in virtual time: recovered within 1 s of the outage's end plus the confirm window."""
    report, events = _pipeline_run((20.0, 35.0), {}, 50.0)
    assert report["faults"] == []
    (incident,) = report["incidents"]
    assert (incident["faults"], incident["unplanned"], incident["outcome"]) == ([], True, "recovered")
    assert 20.0 <= incident["started_at"] <= 20.0 + 0.1  # within a tick of the outage's start
    cause = incident["cause"]
    assert cause is not None and (cause["stage"], cause["reason"]) == ("answer", "error")
    assert cause["failed"] > 1000  # ~200 tasks/s for 15 s, every attempt failed
    assert incident["impact_tasks"]["failed"] > 2000
    recovered = [e for e in events if e.data["state"] == "recovered"]
    assert len(recovered) == 1 and all(conforms(e.kind, e.data) for e in events)
    confirm = RecoveryConfig().confirm
    assert abs(recovered[0].t - (35.0 + confirm)) <= 1.0  # the verdict: the outage's end plus confirm (± 1 s)
    assert incident["recovery_s"] is not None and abs(incident["recovery_s"] - (35.0 - 20.0)) <= 1.0
    # Counted in the score's recovery: 100 % recovered, slower than speed_worst (10 s): 70 of 100.
    assert report["score"]["recovery_rate"] == 100.0 and report["score"]["recovery"] == pytest.approx(70.0)


def test_the_default_pipeline_without_the_outage_opens_none() -> None:
    """The negative control on the product default: a clean steady run, no incident, no recovery to score."""
    report, events = _pipeline_run(None, {}, 50.0)
    assert report["incidents"] == [] and events == []
    assert report["score"]["recovery"] is None


def test_an_unplanned_failure_lowers_the_scores_recovery() -> None:
    report, events = _pipeline_run((20.0, 35.0), {"recovery": {"limit": 5.0}}, 50.0)
    (incident,) = report["incidents"]
    assert (incident["unplanned"], incident["outcome"]) == (True, "failed")
    assert [e.data["state"] for e in events] == ["opened", "failed"]
    assert report["score"]["recovery_rate"] == 0.0 and report["score"]["recovery"] == 0.0
