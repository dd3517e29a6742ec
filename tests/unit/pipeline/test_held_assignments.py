"""Assignments a worker holds itself (a lone simple stage's, the usual M/M/c case): no entry in the dispatch state per
task, and the same run as with one. Leader deaths, killed and cut-off workers and services that outlast their lease
all meet a held assignment; the report must be the same bytes either way, and taking the held assignments back in
before the state is read is what makes it so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.pipeline import worker as worker_module
from chaosd.pipeline.dispatch import Dispatcher

OVERLAY: dict[str, Any] = {
    "seed": 4,
    "load": {"rate": 7.0, "producers": 2, "arrival": "poisson"},
    "workers": {"count": 4},
    # A lease of 1 s: one service in seven (exponential, mean 0.5 s) outlasts it and is dispatched again.
    "orchestrator": {"task_lease": 1.0},
    "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.5}}],
}


def _run() -> tuple[str, dict[str, int]]:
    """The report of a 60 s run with three leader kills, a worker killed and one cut off; and how often each way of
    recording an assignment ran (assign: an entry made when the task was assigned; held: a worker's own, counted at
    each of a few thousand instants; handed_back: a held one taken into the state later, Dispatcher.hand_back)."""
    counts = {"assign": 0, "held": 0, "handed_back": 0}

    async def plan(exp: Experiment) -> None:
        t0 = exp.pipeline.t0
        for at, action, target in (
            (10.0, "kill_leader", None),
            (17.0, "kill_agent", "worker-1"),
            (24.0, "kill_leader", None),
            (31.0, "network_partition", "worker-2"),
            (38.0, "kill_leader", None),
        ):
            await exp.clock.sleep_until(t0 + at)
            exp.injector.inject(action, target, ttl=4.0)

    loop = new_event_loop(virtual=True)
    try:
        exp = Experiment(load_settings(None, OVERLAY), LoopClock(loop), warmup=5.0, virtual=True)
        dispatcher = exp.pipeline.dispatcher
        assert isinstance(dispatcher, Dispatcher)
        assign, hand_back = dispatcher.assign, dispatcher.hand_back
        handing_back = False

        def counted(*args: Any) -> None:
            counts["assign"] += not handing_back
            assign(*args)

        def counted_back(*args: Any) -> None:
            nonlocal handing_back
            counts["handed_back"] += args[0].held_at is not None
            handing_back = True
            hand_back(*args)
            handing_back = False

        dispatcher.assign = counted  # type: ignore[method-assign, assignment]
        dispatcher.hand_back = counted_back  # type: ignore[method-assign, assignment]
        workers = exp.pipeline.workers
        took = exp.pipeline.clock.call_at

        def watch() -> None:  # a held assignment seen at each of a few thousand instants
            counts["held"] += sum(1 for w in workers if w.held_at is not None)
            if loop.time() < exp.pipeline.t0 + 59.0:
                took(loop.time() + 0.01, watch)

        took(exp.pipeline.t0 + 0.01, watch)
        report = loop.run_until_complete(exp.run(60.0, plan=plan))
    finally:
        loop.close()
    return json.dumps(report, sort_keys=True), counts


def test_held_assignments_change_nothing_but_the_entries_made(monkeypatch: pytest.MonkeyPatch) -> None:
    held, with_holds = _run()
    monkeypatch.setattr(worker_module, "_HOLD", False)
    entries, without = _run()
    report = json.loads(held)
    resilience = report["runtime"]
    # Every path a held assignment can take was taken: elections that re-dispatch, leases that run out.
    assert resilience["elections"] == 3 and resilience["lease_expired"] > 20 and resilience["redispatched"] > 40, (
        resilience
    )
    assert report["tasks"]["lost"] == 0
    assert with_holds["held"] > 1000  # workers held assignments most of the time they served
    # An entry per task served without holds; with them, only where no leader lived, an older entry was replaced, or
    # a held one was handed back (killed, cut off): a few per cent.
    assert without["assign"] > 300 and with_holds["assign"] < without["assign"] / 5, (with_holds, without)
    # Held ones taken back: at checkpoints, leases run out, the leader's death, a killed and a cut-off worker.
    assert with_holds["handed_back"] > 20 and without["handed_back"] == 0, (with_holds, without)
    assert held == entries  # the same run, to the byte


def test_without_taking_held_assignments_back_the_run_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: a state read without the assignments workers hold (no lease sweep, checkpoint or dead
    leader's log sees them) re-dispatches less, and the report shows it."""
    held, _ = _run()
    monkeypatch.setattr(Dispatcher, "_gather", lambda self, by=0.0: None)
    blind, _ = _run()
    a, b = json.loads(held)["runtime"], json.loads(blind)["runtime"]
    assert b["lease_expired"] < a["lease_expired"] and b["redispatched"] < a["redispatched"], (a, b)
