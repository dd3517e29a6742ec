"""The retry storm threshold ``chaosd predict`` gives: numbers worked out by hand for one configuration, each way a
storm is ruled out, and the one change that flips each verdict."""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Mapping

import pytest
from pydantic import TypeAdapter

from chaosd.config.settings import Settings, deep_merge, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.predict import mean_service, predict
from chaosd.pipeline import Pipeline
from chaosd.views import StormPredictionView

VIEW = TypeAdapter(StormPredictionView)  # closed: a key it does not declare, or a rate below 0, is refused

# 4 workers on two constant stages of 4 ms and 6 ms: 10 ms a task, 400 tasks/s. Callers wait 2 s and retry twice
# (3 attempts); 150 callers/s; a queue of 10,000 holds 25 s of waiting at 400/s; admission off.
STORM: dict[str, object] = {
    "workers": {"count": 4},
    "stages": [
        {"name": "fetch", "service": {"distribution": "constant", "mean": 0.004}},
        {"name": "answer", "service": {"distribution": "constant", "mean": 0.006}},
    ],
    "queue": {"capacity": 10_000},
    "load": {"rate": 150.0, "deadline": 1.0},
    "clients": {"timeout": 2.0, "retries": 2},
    "throttle": {"enabled": False},
}


def _settings(change: Mapping[str, object] | None = None) -> Settings:
    return load_settings(None, deep_merge(STORM, change or {}))


def test_the_storm_configuration_holds_a_storm_by_the_numbers_worked_by_hand() -> None:
    p = predict(_settings())
    assert VIEW.validate_python(p) == p
    assert p["mean_service_s"] == pytest.approx(0.010)
    assert p["capacity_per_s"] == pytest.approx(400.0)  # 4 / 0.010
    assert p["attempts_per_caller"] == 3  # 1 + 2 retries
    assert p["threshold_per_s"] == pytest.approx(400 / 3)  # 133.3/s
    assert p["wait_bound_s"] == pytest.approx(25.0)  # 10,000 / 400
    assert p["load_per_s"] == 150 and p["peak_per_s"] == 150
    assert p["storm_possible"] and p["self_sustaining"]
    assert p["reason"] == (
        "3 attempts per caller × 150.0/s = 450.0/s > capacity 400.0/s, and the queue holds 25.0 s > timeout 2.0 s: "
        "a storm, once triggered, holds"
    )


def test_below_the_threshold_a_storm_ends_with_its_trigger_unless_the_peak_passes_it() -> None:
    calm = predict(_settings({"load": {"rate": 120.0}}))  # 3 × 120 = 360 < 400
    assert calm["storm_possible"] and not calm["self_sustaining"]
    assert calm["threshold_per_s"] == pytest.approx(400 / 3)
    assert calm["reason"].startswith("3 attempts per caller × 120.0/s = 360.0/s ≤ capacity 400.0/s")
    assert "it would hold above 133.3/s" in calm["reason"] and "peak" not in calm["reason"]
    spiked = predict(
        _settings({"load": {"rate": 120.0, "phases": [{"type": "spike", "at": 5, "rate": 300.0, "duration": 2}]}})
    )
    assert spiked["peak_per_s"] == 300 and not spiked["self_sustaining"]
    assert "the load's peak, 300.0/s, is above it" in spiked["reason"]


def test_a_load_over_capacity_is_said_to_be_an_overload_as_well() -> None:
    p = predict(_settings({"load": {"rate": 500.0}}))
    assert p["self_sustaining"]
    assert p["reason"].endswith("(the load alone exceeds capacity: an overload even without retries)")
    assert "overload" not in predict(_settings())["reason"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param({"clients": {"timeout": 0.0}}, "clients.timeout = 0", id="callers-wait-forever"),
        pytest.param({"clients": {"retries": 0}}, "clients.retries = 0", id="no-retries"),
        pytest.param({"clients": {"budget": {"ratio": 0.0}}}, "clients.budget.ratio = 0", id="budget-of-nothing"),
        pytest.param({"clients": {"retry_on": ["refused", "failed"]}}, "clients.retry_on", id="timeouts-not-retried"),
        pytest.param({"clients": {"drop_expired": True}}, "clients.drop_expired", id="expired-work-dropped"),
        pytest.param({"queue": {"capacity": 500}}, "queue.capacity 500 at 400.0/s", id="queue-too-short"),
        pytest.param({"throttle": {"enabled": True}}, "capacity admission", id="capacity-admission"),
    ],
)
def test_one_change_rules_the_storm_out_and_the_reason_names_it(change: dict[str, object], named: str) -> None:
    """Negative controls: the self-sustaining configuration above, with one thing changed, can hold no storm."""
    p = predict(_settings(change))
    assert VIEW.validate_python(p) == p
    assert not p["storm_possible"] and not p["self_sustaining"]
    assert p["threshold_per_s"] is None
    assert p["reason"].startswith("no storm can hold: ") and named in p["reason"], p["reason"]
    assert p["capacity_per_s"] == pytest.approx(400.0)  # what is ruled out is the storm, not the capacity


def test_the_queue_must_hold_more_than_a_timeouts_worth_of_waiting() -> None:
    """1.25 s of queue against a 2 s timeout: impossible; 2.5 s: possible again. Exactly 2 s is not enough."""
    short = predict(_settings({"queue": {"capacity": 500}}))
    assert short["wait_bound_s"] == pytest.approx(1.25) and not short["storm_possible"]
    assert "the queue holds at most 1.2 s of waiting" in short["reason"]  # 1.25 shown as humanize rounds it
    assert predict(_settings({"queue": {"capacity": 800}}))["storm_possible"] is False  # 2 s = timeout
    raised = predict(_settings({"queue": {"capacity": 1000}}))
    assert raised["wait_bound_s"] == pytest.approx(2.5) and raised["storm_possible"] and raised["self_sustaining"]


@pytest.mark.parametrize(("deadline", "max_wait", "bound"), [(1.0, 0.8, 0.8), (0.0, 0.8, 1.6), (5.0, 1.0, 2.0)])
def test_capacity_admission_bounds_the_wait_below_the_timeout(deadline: float, max_wait: float, bound: float) -> None:
    """max_wait × min(deadline, timeout) (the timeout when no deadline): never more than the timeout, so never a
    storm; aimd bounds nothing below the queue, and the storm is back."""
    admitted = {"enabled": True, "policy": "capacity", "max_wait": max_wait}
    p = predict(_settings({"load": {"deadline": deadline}, "throttle": admitted}))
    assert p["wait_bound_s"] == pytest.approx(bound) and not p["storm_possible"]
    aimd = predict(_settings({"load": {"deadline": deadline}, "throttle": admitted | {"policy": "aimd"}}))
    assert aimd["wait_bound_s"] == pytest.approx(25.0) and aimd["self_sustaining"]


def test_a_budget_caps_the_attempts_and_raises_the_threshold() -> None:
    capped = predict(_settings({"clients": {"budget": {"ratio": 0.5}}}))
    assert capped["attempts_per_caller"] == 1.5
    assert capped["threshold_per_s"] == pytest.approx(400 / 1.5)  # 266.7/s: 150/s no longer sustains it
    assert capped["storm_possible"] and not capped["self_sustaining"]
    loose = predict(_settings({"clients": {"budget": {"ratio": 5.0}}}))  # more than the retries: they cap it
    assert loose["attempts_per_caller"] == 3 and loose["self_sustaining"]


def test_backoff_leaves_the_fluid_threshold_where_it_is() -> None:
    slow = predict(_settings({"clients": {"backoff": {"base": 1.0, "factor": 3.0, "max": 30.0, "jitter": 1.0}}}))
    assert slow["threshold_per_s"] == predict(_settings())["threshold_per_s"] and slow["self_sustaining"]


def test_work_that_takes_no_time_forms_no_queue() -> None:
    p = predict(_settings({"stages": [{"name": "noop", "service": {"distribution": "constant", "mean": 0.0}}]}))
    assert p["capacity_per_s"] is None and p["wait_bound_s"] is None and not p["storm_possible"]
    assert "no queue forms" in p["reason"]


_BRANCHES = {
    "stages": [
        {"name": "a", "service": {"distribution": "uniform", "low": 0.002, "high": 0.008}, "next": ["b", "c"]},
        {"name": "b", "service": {"mean": 0.003}, "next": []},
        {"name": "c", "service": {"mean": 0.5}, "next": []},
    ]
}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param(_settings(), 0.010, id="two-stage-chain"),
        pytest.param(load_settings(None), 0.010, id="the-default-graph"),  # plan, search, recall, context, answer
        pytest.param(_settings(_BRANCHES), 0.008, id="branches-and-uniform"),  # a (5 ms) then b, not c (500 ms)
    ],
)
def test_the_mean_service_is_the_one_a_built_pipeline_uses(settings: Settings, expected: float) -> None:
    """Computed from the settings alone: the route's stages (the preferred branch, not every stage), the same
    number as the built pipeline's (what its telemetry and report use)."""
    loop = new_event_loop(virtual=True)
    try:
        built = Pipeline(settings, LoopClock(loop)).mean_service
    finally:
        loop.close()
    assert built == pytest.approx(expected)
    assert mean_service(settings) == pytest.approx(built)


# --- The fluid argument against callers simulated one by one (no chaosd code) ---------------------------------------


def _goodput_share(settings: Settings, rate: float, backlog: int, horizon: float = 120.0) -> float:
    """Callers at ``rate`` (Poisson) with the settings' timeout, retries (immediate, on timeouts only), budget and
    drop_expired, in front of a FIFO queue of ``queue.capacity`` and ``workers.count`` exponential servers of the
    route's mean service; ``backlog`` attempts nobody waits for at t = 0 (the trigger's leftovers). Returns the share
    of the callers arriving in the last quarter whose answer came in time."""
    rng = random.Random(7)
    c, service = settings.clients, mean_service(settings)
    queue: deque[tuple[int, int]] = deque([(-1, 0)] * backlog)  # (caller, attempt); caller -1: nobody waits
    waiting: dict[int, int] = {}  # caller → the attempt it waits for
    sent: tuple[deque[float], deque[float]] = (deque(), deque())  # first attempts, retries: over the last 10 s
    events = [(rng.expovariate(rate), 0, 0, 0)]  # (t, kind: 0 arrival · 1 timeout · 2 served, caller, attempt)
    busy = callers = good = offered = 0

    def enqueue(t: float, caller: int, attempt: int) -> None:
        for times in sent:
            while times and times[0] < t - 10:
                times.popleft()
        over = c.budget is not None and attempt > 1 and len(sent[1]) + 1 > c.budget.ratio * len(sent[0])
        if len(queue) < settings.queue.capacity and not over:  # else the caller gives up
            sent[attempt > 1].append(t)
            waiting[caller] = attempt
            queue.append((caller, attempt))
            heapq.heappush(events, (t + c.timeout, 1, caller, attempt))
        else:
            waiting.pop(caller, None)

    while events and (event := heapq.heappop(events))[0] < horizon:
        t, kind, caller, attempt = event
        if kind == 0:
            callers += 1
            offered += t > horizon * 0.75
            enqueue(t, callers, 1)
            heapq.heappush(events, (t + rng.expovariate(rate), 0, 0, 0))
        elif kind == 1 and waiting.get(caller) == attempt:  # timed out: retry, or give up after the last
            enqueue(t, caller, attempt + 1) if attempt <= c.retries else waiting.pop(caller)
        elif kind == 2:
            busy -= 1
            if waiting.get(caller) == attempt:
                waiting.pop(caller)
                good += t > horizon * 0.75
        while busy < settings.workers.count and queue:
            caller, attempt = queue.popleft()
            if not (c.drop_expired and waiting.get(caller) != attempt):
                busy += 1
                heapq.heappush(events, (t + rng.expovariate(1 / service), 2, caller, attempt))
    return good / offered


@pytest.mark.parametrize(
    ("change", "share_of_threshold", "holds"),
    [
        pytest.param(None, 1.3, True, id="above-the-threshold"),
        pytest.param(None, 0.7, False, id="below-the-threshold"),
        pytest.param({"clients": {"drop_expired": True}}, 1.3, False, id="drop-expired"),
        pytest.param({"queue": {"capacity": 500}}, 1.3, False, id="queue-too-short"),
        pytest.param({"clients": {"budget": {"ratio": 0.5}}}, 1.3, False, id="budget-half-a-retry"),
        pytest.param({"clients": {"budget": {"ratio": 0.5}}}, 2.3, True, id="budget-above-its-threshold"),
    ],
)
def test_callers_simulated_one_by_one_stay_stuck_where_the_prediction_says(
    change: dict[str, object] | None, share_of_threshold: float, holds: bool
) -> None:
    """From a queue full of attempts nobody waits for (what a trigger leaves), at a share of the storm
    configuration's 133.3/s threshold: when the prediction says a storm holds, the callers get almost nothing
    through; when it says none can (below the threshold, expired work dropped, a queue shorter than the timeout, a
    budget of half a retry: a threshold of 266.7/s), almost everything once the leftovers drain. Started empty, the
    same load is served: the good state exists beside the bad one. Loads are kept 30 % from the threshold: nearer,
    the leftovers take longer than the simulated two minutes to drain."""
    settings = _settings(change)
    rate = share_of_threshold * 400 / 3
    at_rate = settings.model_copy(update={"load": settings.load.model_copy(update={"rate": rate})})
    assert predict(at_rate)["self_sustaining"] is holds
    stuck = _goodput_share(settings, rate, backlog=min(5_000, settings.queue.capacity))
    assert stuck < 0.05 if holds else stuck > 0.95
    assert _goodput_share(settings, rate, backlog=0) > 0.95
