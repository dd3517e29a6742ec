"""Graceful degradation: a removed stage is routed around through its alternate or skipped when optional.

The runs use the default pipeline (200 tasks/s, 4 workers, the agent DAG) in virtual time, remove a
stage for 10 s, and watch goodput, degraded completions and the route while it is gone and after.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from conftest import settings

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.pipeline.dag import Dag, Route
from chaosd.pipeline.pipeline import Pipeline

Plan = Callable[[Experiment], Coroutine[Any, Any, None]]
Obs = dict[str, Any]

# Off the telemetry tick (0.1 s) and heartbeat (0.25 s) grids, so "after the injection" is unambiguous.
FAULT_AT = 15.05
TTL = 10.0
DEFAULT_ROUTE = ("plan", "search", "recall", "context", "answer")


def _run(plan: Plan, overlay: dict[str, Any] | None = None, duration: float = 40.0) -> dict[str, Any]:
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)

        async def main() -> dict[str, Any]:
            exp = Experiment(settings(overlay or {}), clock, warmup=0.0)
            return await exp.run(duration, plan=plan)

        return loop.run_until_complete(main())
    finally:
        loop.close()


async def _at(exp: Experiment, t: float) -> None:
    await exp.clock.sleep_until(exp.pipeline.t0 + t)


def _degraded(p: Pipeline) -> int:
    return sum(s.degraded for s in p.stages.values())


def _snapshot(p: Pipeline) -> Obs:
    return {
        "good": p.ledger.good,
        "completed": p.ledger.total.completed,
        "degraded": _degraded(p),
        "no_route": p.ledger.total.failed_by.get("no_route", 0),
        "route": p.route_names,
    }


def _remove_for_ttl(target: str, obs: Obs) -> Plan:
    """Remove ``target`` at FAULT_AT for TTL seconds; snapshot once the leader rerouted, near the end, and after."""

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        await _at(exp, FAULT_AT - 1.0)
        obs["before"] = _snapshot(p)
        await _at(exp, FAULT_AT)
        exp.injector.inject("remove_node", target, ttl=TTL)
        await _at(exp, FAULT_AT + 0.5)  # the leader's next heartbeat has rerouted
        obs["early"] = _snapshot(p)
        await _at(exp, FAULT_AT + TTL - 0.5)
        obs["late"] = _snapshot(p)
        await _at(exp, FAULT_AT + TTL + 0.5)
        obs["back"] = _snapshot(p)
        await _at(exp, FAULT_AT + TTL + 5.0)
        obs["later"] = _snapshot(p)

    return plan


@pytest.mark.parametrize(
    ("target", "route_during"),
    [
        ("plan", ("search", "recall", "context", "answer")),
        ("recall", ("plan", "search", "context", "answer")),
        ("context", ("plan", "search", "recall", "answer")),
    ],
)
def test_removing_an_optional_stage_skips_it_and_tasks_complete_degraded(
    target: str, route_during: tuple[str, ...]
) -> None:
    obs: Obs = {}
    report = _run(_remove_for_ttl(target, obs))
    before, early, late, back, later = (obs[k] for k in ("before", "early", "late", "back", "later"))
    assert before["route"] == DEFAULT_ROUTE and before["degraded"] == 0
    # While the stage is gone the work goes on without it: completions near the offered 200/s …
    assert early["route"] == route_during and late["route"] == route_during
    completed = late["completed"] - early["completed"]
    assert completed > 0.9 * 200 * (TTL - 1.0)
    # … and every one of those completions is counted degraded, against the skipped stage: none is good.
    degraded = late["degraded"] - early["degraded"]
    assert 0 < degraded <= completed and degraded > 0.95 * completed
    assert late["good"] - early["good"] < 0.05 * completed
    assert late["no_route"] == 0
    # Once the stage is back, the route is the original one and degraded completions stop.
    assert back["route"] == DEFAULT_ROUTE and later["route"] == DEFAULT_ROUTE
    assert later["degraded"] == back["degraded"]
    assert later["good"] - back["good"] > 0.9 * 200 * 4.5
    causes = {d["cause"]: d["count"] for d in report["diagnostics"]}
    assert causes["degraded"] == later["degraded"]
    assert "failed:no_route" not in causes


@pytest.mark.parametrize(
    ("target", "route_during"),
    [
        ("search", ("plan", "search_backup", "recall", "context", "answer")),
        ("search_backup", DEFAULT_ROUTE),
        ("answer", ("plan", "search", "recall", "context", "answer_backup")),
        ("answer_backup", DEFAULT_ROUTE),
    ],
)
def test_removing_a_stage_with_an_alternate_routes_through_it_at_full_service(
    target: str, route_during: tuple[str, ...]
) -> None:
    obs: Obs = {}
    report = _run(_remove_for_ttl(target, obs))
    early, late, back, later = (obs[k] for k in ("early", "late", "back", "later"))
    assert early["route"] == route_during and late["route"] == route_during
    assert late["good"] - early["good"] > 0.9 * 200 * (TTL - 1.0)
    # An alternate serves the task in full: nothing degraded, nothing without a route.
    assert later["degraded"] == 0 and later["no_route"] == 0
    assert back["route"] == DEFAULT_ROUTE and later["route"] == DEFAULT_ROUTE
    assert "failed:no_route" not in {d["cause"] for d in report["diagnostics"]}


def test_removing_a_stage_that_is_neither_optional_nor_has_an_alternate_stops_all_work() -> None:
    chain = [
        {"name": name, "service": {"distribution": "exponential", "mean": 0.003}} for name in ("fetch", "rank", "reply")
    ]
    obs: Obs = {}
    _run(_remove_for_ttl("rank", obs), overlay={"stages": chain})
    before, early, late, back, later = (obs[k] for k in ("before", "early", "late", "back", "later"))
    assert before["route"] == ("fetch", "rank", "reply")
    # No way around it: no goodput while it is gone, and every task fails with the reason.
    assert early["route"] is None and late["route"] is None
    assert late["good"] == early["good"]
    assert late["no_route"] - early["no_route"] > 0.9 * 200 * (TTL - 1.0)
    assert late["degraded"] == 0
    assert back["route"] == ("fetch", "rank", "reply")
    assert later["good"] - back["good"] > 0.9 * 200 * 4.5
    assert later["no_route"] == back["no_route"]


def test_an_optional_stage_whose_breaker_is_open_is_skipped_until_it_closes() -> None:
    obs: Obs = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        context = p.stages["context"]
        await _at(exp, FAULT_AT)
        exp.injector.inject("mcp_disconnect", "context", params={"outage": "1m"}, ttl=5.0)  # down for the TTL
        await _at(exp, FAULT_AT + 0.5)  # five failed calls opened the breaker; the leader rerouted
        obs["early"] = _snapshot(p)
        failed = p.ledger.total.failed
        await _at(exp, FAULT_AT + 1.5)
        obs["open"] = context.is_open(exp.clock.now())
        obs["late"] = _snapshot(p)
        obs["failed_while_open"] = p.ledger.total.failed - failed
        await _at(exp, FAULT_AT + 15.0)
        obs["route_after"] = p.route_names

    _run(plan)
    early, late = obs["early"], obs["late"]
    assert obs["open"] is True
    assert early["route"] == late["route"] == ("plan", "search", "recall", "answer")
    # The MCP server is unreachable, yet tasks complete (degraded, so not good) instead of failing.
    assert late["completed"] - early["completed"] > 0.9 * 200
    assert late["good"] == early["good"]
    assert late["degraded"] - early["degraded"] > 0.9 * 200
    assert obs["failed_while_open"] == 0
    assert obs["route_after"] == DEFAULT_ROUTE


def _dag(stages: list[dict[str, Any]]) -> Dag:
    return Dag(settings({"stages": stages}).stages)


def test_an_alternate_path_wins_over_skipping_an_optional_stage() -> None:
    dag = _dag(
        [
            {"name": "a", "next": ["b", "c"]},
            {"name": "b", "next": ["d"], "optional": True},
            {"name": "c", "next": ["d"]},
            {"name": "d", "next": []},
        ]
    )
    dag.removed_nodes.add("b")
    assert dag.find() == Route(("a", "c", "d"))
    dag.removed_nodes.add("c")
    assert dag.find() == Route(("a", "d"), bypassed=("b",))
    # A removed edge is not bypassed: the stage's own connections are what a skip follows.
    dag.removed_edges.add(("b", "d"))
    assert dag.find() is None


def test_skipping_every_stage_is_no_route() -> None:
    dag = _dag([{"name": "a", "optional": True}, {"name": "b", "optional": True}])
    dag.removed_nodes.update({"a", "b"})
    assert dag.find() is None
    dag.removed_nodes.discard("b")
    assert dag.find() == Route(("b",), bypassed=("a",))


def _dag_events(overlay: dict[str, Any], duration: float) -> tuple[list[dict[str, Any]], int]:
    loop = new_event_loop(virtual=True)
    clock = LoopClock(loop)

    async def main() -> tuple[list[dict[str, Any]], int]:
        exp = Experiment(settings(overlay), clock, warmup=0.0)
        await exp.run(duration)
        events = exp.events.events()
        return [dict(e.data) for e in events if e.kind == "dag"], sum(1 for e in events if e.kind == "breaker")

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_breaker_with_no_way_around_its_stage_reports_no_reroute() -> None:
    """The Arena narrates every `dag` event as a route change: a breaker that changes no route must not log one."""
    stuck = {
        "load": {"rate": 50},
        "stages": [
            {"name": "a", "kind": "tool", "service": {"distribution": "constant", "mean": 0.002}, "next": ["b"]},
            {"name": "b", "kind": "tool", "failure_probability": 1.0, "degrade": False},
        ],
    }
    reroutes, breakers = _dag_events(stuck, 10.0)
    assert breakers >= 1 and reroutes == []  # the breaker opened, and the route never changed
    # Negative control: the default DAG's search has a backup, and its breaker does change the route.
    flaky = {"stages": [*(s.model_dump() for s in load_settings().stages)]}
    flaky["stages"][1]["failure_probability"] = 1.0  # search
    reroutes, _ = _dag_events(flaky, 10.0)
    assert reroutes and "search_backup" in reroutes[0]["route"]
