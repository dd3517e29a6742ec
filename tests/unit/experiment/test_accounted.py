"""Lost tasks without a walk over every holder: ``Experiment.accounted`` answers from the last walk while no fault
is in play, and must give what a fresh walk gives, or find a vanished task within its 5 s bound."""

from __future__ import annotations

from typing import Any

from conftest import live, settings

from chaosd.core.clock import LoopClock
from chaosd.daemon.control import Controller


def test_the_answer_between_walks_is_what_a_walk_would_give_through_faults_and_after() -> None:
    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        exp = ctl.exp
        p = exp.pipeline
        mismatches = []
        reused = 0
        faults = {30: "kill_leader", 90: "kill_agent", 150: "drop_messages", 210: "pause_agent"}
        for step in range(300):  # 30 s, every 0.1 s
            if step in faults:
                ctl.faults.inject(faults[step], None, {}, 2.0)
            await clock.sleep(0.1)
            before = exp._walked
            got = exp.accounted()
            reused += exp._walked is before
            fresh = p.ledger.unaccounted(p.holders())
            if got != fresh:
                mismatches.append((round(clock.now(), 1), got, fresh))
        out["mismatches"] = mismatches
        out["reused"] = reused
        out["in_flight"] = fresh[2]

    out = live(script, settings({"load": {"rate": 300}}))
    assert out["mismatches"] == []
    assert out["reused"] > 100  # most answers came without a walk: the shortcut was exercised
    assert out["in_flight"] > 0  # and there was something in flight to count


def test_a_task_that_vanishes_without_a_fault_is_lost_within_five_seconds() -> None:
    """The negative control: a task dropped from the queue by no fault (a bug's work) is not hidden."""

    async def script(ctl: Controller, clock: LoopClock, out: dict[str, Any]) -> None:
        exp = ctl.exp
        p = exp.pipeline
        await clock.sleep(3.0)  # over capacity: the queue is long
        assert exp.accounted() == (0, 0, exp.accounted()[2])
        vanished = p.queue.get_nowait(clock.now())
        assert vanished is not None and vanished.id in p.ledger.in_flight
        gone_at = clock.now()
        while exp.accounted()[0] == 0 and clock.now() - gone_at < 10.0:
            await clock.sleep(0.1)
        out["found_after"] = clock.now() - gone_at
        out["lost"] = exp.accounted()[0]
        out["final"] = exp.report()["tasks"]["lost_all_cohorts"]

    overlay = {"load": {"rate": 900}, "queue": {"capacity": 100_000}, "throttle": {"enabled": False}}
    out = live(script, settings(overlay))
    assert out["lost"] == 1 and out["final"] == 1
    assert out["found_after"] <= 5.0 + 0.1
