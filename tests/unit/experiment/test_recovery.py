"""Recovery is judged on what users feel, against a clean baseline, on each fault's own clock.

Each test pins a way a measurement can say "fine" while users are failing: a 20 s outage reported as
a 0.1 s recovery, a fault with no baseline counted as recovered, a baseline fed while an earlier
fault is still recovering. Each test asserts the measured number, and builds the negative control.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from conftest import settings

from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment, run_offline

# A chain with no alternate and no optional stage: removing the middle stage stops all work.
CHAIN = {
    "stages": [
        {"name": "a", "service": {"mean": 0.002}, "next": ["b"]},
        {"name": "b", "service": {"mean": 0.002}, "next": ["c"]},
        {"name": "c", "service": {"mean": 0.002}, "next": []},
    ]
}


def _run(plan: Any, *, duration: float, overlay: dict[str, Any] | None = None) -> tuple[Experiment, dict[str, Any]]:
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)

        async def main() -> tuple[Experiment, dict[str, Any]]:
            exp = Experiment(settings(overlay or {}), clock, warmup=0.0)
            return exp, await exp.run(duration, plan=plan)

        return loop.run_until_complete(main())
    finally:
        loop.close()


async def _at(exp: Experiment, t: float) -> None:
    await exp.clock.sleep_until(exp.pipeline.t0 + t)


def test_an_outage_recovers_no_sooner_than_the_service_came_back() -> None:
    """remove_node on a stage with no way around it: every task fails for 20 s."""

    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.05)
        exp.injector.inject("remove_node", "b", ttl=20.0)

    _, report = _run(plan, duration=70.0, overlay=CHAIN)
    fault = report["faults"][0]
    assert report["tasks"]["failed_by"].get("no_route", 0) > 3000  # the outage users felt
    assert fault["outcome"] == "recovered"
    assert fault["clock"] == "heal"  # a removal is timed from injection: nothing healed it before the TTL
    assert fault["recovery_s"] >= 20.0  # not 0.1 s: the service was down for the whole TTL
    assert fault["recovery_s"] < 20.0 + 5.0
    assert fault["impact_s"] >= 19.0  # out of tolerance for (almost) the whole time it was active
    assert report["score"]["recovery_speed"] == 0.0  # ≥ 10 s is the slowest speed band
    assert report["score"]["availability"] < 75.0  # 20 s of 70 s failed


def test_a_fault_the_service_absorbs_recovers_at_once_with_no_impact() -> None:
    """The negative control: a slowdown of one producer, which the pipeline absorbs within tolerance."""

    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.05)
        exp.injector.inject("slow_agent", "producer-0", params={"factor": 1.2}, ttl=10.0)

    _, report = _run(plan, duration=50.0)
    fault = report["faults"][0]
    assert fault["outcome"] == "recovered" and fault["clock"] == "restore"
    assert fault["recovery_s"] == 0.0 and fault["impact_s"] < 1.0  # a tick of noise at most


def test_time_to_restore_is_counted_from_when_the_fault_is_lifted_not_from_injection() -> None:
    """Every worker held by something else for 10 s: nothing heals it, so its clock starts when it is lifted."""

    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.05)
        exp.injector.inject("pool_exhaustion", "100%", ttl=10.0)

    _, report = _run(plan, duration=60.0)
    fault = report["faults"][0]
    assert fault["clock"] == "restore" and fault["outcome"] == "recovered"
    # 10 s of arrivals pile up and drain after the TTL: that drain is the time to restore, counted from
    # the revert. The TTL itself is not charged to it; the 10 s the fault was felt are its impact.
    assert fault["recovery_s"] == pytest.approx(fault["service_recovered_at"] - fault["reverted_at"])
    assert fault["recovery_s"] > 1.0  # the backlog's drain is counted, not hidden
    assert fault["recovery_s"] >= fault["phases"]["drained"]  # not before the queue drained
    assert fault["service_recovered_at"] - fault["injected_at"] >= fault["ttl"] + fault["recovery_s"] - 0.2
    assert fault["impact_s"] >= 9.0


def test_a_fault_before_any_baseline_is_unmeasured_not_recovered() -> None:
    async def plan(exp: Experiment) -> None:
        exp.injector.inject("kill_leader", ttl=5.0)  # at t = 0: no steady state to judge against

    _, report = _run(plan, duration=30.0)
    fault = report["faults"][0]
    assert fault["outcome"] == "unmeasured" and fault["recovery_s"] is None and fault["baseline"] is None
    assert report["faults_summary"]["unmeasured"] == 1 and report["faults_summary"]["recovered"] == 0
    assert report["score"]["recovery"] is None  # no verdict: neither a free 100 nor a 0


def test_with_a_configured_slo_a_fault_before_any_baseline_is_judged_against_it() -> None:
    async def plan(exp: Experiment) -> None:
        exp.injector.inject("kill_leader", ttl=5.0)

    _, report = _run(plan, duration=30.0, overlay={"slo": {"availability": 0.9, "p95": 0.2}})
    fault = report["faults"][0]
    assert fault["outcome"] == "recovered" and fault["baseline"] is None
    assert 0.0 < fault["recovery_s"] < 5.0  # the election, then the backlog back under the SLO
    assert report["faults_summary"]["slo"] == {"availability": 0.9, "p95": 0.2}


def test_the_baseline_is_not_fed_while_an_earlier_fault_is_still_recovering() -> None:
    """A fault injected while another recovers is judged against the clean steady state before both."""
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.05)
        exp.injector.inject("pool_exhaustion", "100%", ttl=8.0)  # a backlog that takes time to drain
        clean = exp.injector.baseline()
        await _at(exp, 23.15)  # just lifted: the backlog is still draining
        seen["during"] = exp.injector.baseline()
        seen["clean"] = clean
        exp.injector.inject("slow_agent", "worker-0", params={"factor": 3}, ttl=5.0)

    _, report = _run(plan, duration=70.0)
    assert seen["during"] == seen["clean"]  # nothing from the fault or its recovery went in
    second = report["faults"][1]
    assert second["baseline"]["queue_depth"] == seen["clean"].queue_depth
    assert second["baseline"]["queue_depth"] < 5  # the clean queue, not 10 s of backlog


def test_shedding_load_scores_f_not_a_plus() -> None:
    """A queue of one task offered ten times what the workers can serve refuses nine tasks in ten."""
    report = run_offline(settings({"queue": {"capacity": 1}, "load": {"rate": 4000.0}}), duration=30.0, warmup=3.0)
    t, score = report["tasks"], report["score"]
    assert t["rejected"] > 0.8 * t["offered"]
    good = t["completed"] - t["late"]
    assert score["availability"] == pytest.approx(100 * good / (t["offered"] - t["in_flight"]), abs=1e-3)
    assert score["availability"] < 20.0
    assert score["grade"] == "F"
    assert {"refused:queue_full"} <= {d["cause"] for d in report["diagnostics"]}


def test_overlapping_faults_form_one_incident_and_no_fault_borrows_its_recovery() -> None:
    """A second blow while the first is still felt: one incident, one recovery, from the last blow."""

    async def plan(exp: Experiment) -> None:
        await _at(exp, 15.05)
        exp.injector.inject("pool_exhaustion", "100%", ttl=6.0)  # a backlog that drains after 21.05
        await _at(exp, 20.05)
        exp.injector.inject("kill_leader", ttl=5.0)  # while the first is still active
        await _at(exp, 45.05)
        exp.injector.inject("slow_agent", "producer-0", params={"factor": 1.2}, ttl=5.0)  # alone, later

    _, report = _run(plan, duration=80.0)
    first, second, third = report["faults"]
    incidents = report["incidents"]
    assert [i["faults"] for i in incidents] == [[1, 2], [3]]
    assert first["incident"] == second["incident"] == 1 and third["incident"] == 2
    shared = incidents[0]
    assert shared["outcome"] == "recovered"
    # Neither fault carries a time of its own: the service came back once, for both.
    assert first["recovery_s"] is None and second["recovery_s"] is None
    assert first["outcome"] == second["outcome"] == "recovered"
    # The incident's clock starts at its last blow: the later of the kill (heals: from injection, 20.05)
    # and the exhaustion lifted (restore: from its revert, 21.1).
    back = max(first["service_recovered_at"], second["service_recovered_at"])
    assert shared["recovery_s"] == pytest.approx(back - max(second["injected_at"], first["reverted_at"]))
    # The time felt is counted once for the incident, however many of its faults were active.
    assert max(first["impact_s"], second["impact_s"]) <= shared["impact_s"]
    assert shared["impact_s"] < first["impact_s"] + second["impact_s"]
    assert incidents[1]["recovery_s"] == third["recovery_s"]  # a lone fault is its own incident
    assert report["faults_summary"]["incidents"] == 2
    # Scored per incident: two judged, both recovered.
    assert report["score"]["recovery_rate"] == 100.0


def _stalled_run(
    stalls: list[float], *, threshold: float | None, limit: float = 60.0, busy: bool = False, until: float | None = None
) -> dict[str, Any]:
    """kill_leader at 15 s, and the daemon's process paused at each of ``stalls`` (seconds): the tick after a
    pause runs 0.2 s late and, for the telemetry window after it, the figures show the pause (p95 ×10, the
    queue backed up), as a real SIGSTOP does. ``busy``: instead of a late tick, the pause is a busy host's: the
    tick comes on time, but the loop waited 0.3 s for a CPU since the one before. ``threshold`` is detector.stall and
    recovery.cpu_wait's share (None: out of reach, the control). ``until``: where the run ends; by default 10 s past
    the last moment recovery.limit lets the fault fail, so a failed verdict is seen."""
    overlay: dict[str, Any] = {"recovery": {"limit": limit, "cpu_wait": 0.2 if threshold is not None else 1.0}}
    overlay["detector"] = {"stall": threshold if threshold is not None else 1000.0}
    window = settings(overlay).telemetry.window

    async def plan(exp: Experiment) -> None:
        judge = exp.injector.on_tick
        pending = sorted(stalls)
        until = [float("-inf")]

        def stalled_tick(s: Any, steady: bool = True) -> None:
            if pending and s.t >= pending[0]:
                pending.pop(0)
                until[0] = s.t + window
                s = replace(s, cpu_wait=0.3) if busy else replace(s, lateness=0.2)
            if s.t < until[0]:
                s = replace(s, sojourn_p95=10 * s.sojourn_p95 + 0.2, queue_depth=s.queue_depth + 40)
            judge(s, steady)

        exp.injector.on_tick = stalled_tick  # type: ignore[method-assign]
        await _at(exp, 15.05)
        exp.injector.inject("kill_leader", ttl=2.0)

    _, report = _run(plan, duration=until if until is not None else 15.05 + 2.0 + limit + 10.0, overlay=overlay)
    return report["faults"][0]


def test_a_stalled_host_does_not_lengthen_a_recovery_and_says_how_long_it_stalled() -> None:
    """Pauses of the daemon's own process every 2 s after a kill: ticks that show a pause judge nothing, so
    the recovery measures the pipeline; its stalled_s says how much of it the host stalled."""
    stalls = [16.0, 18.0, 20.0, 22.0, 24.0]
    # Every run here must recover: the latest verdict comes at 28 s (the controls, which read past the last pause),
    # so the runs end at 40 s rather than past recovery.limit; a verdict still pending there fails the outcomes.
    clean = _stalled_run([], threshold=0.05, until=40.0)
    stalled = _stalled_run(stalls, threshold=0.05, until=40.0)
    control = _stalled_run(stalls, threshold=None, until=40.0)  # the mechanism off: the pauses read as the pipeline's
    busy = _stalled_run(stalls, threshold=0.05, busy=True, until=40.0)  # the same pauses from a busy host: no late tick
    busy_control = _stalled_run(stalls, threshold=None, busy=True, until=40.0)
    assert clean["outcome"] == stalled["outcome"] == control["outcome"] == "recovered"
    assert busy["outcome"] == busy_control["outcome"] == "recovered"
    assert abs(busy["recovery_s"] - clean["recovery_s"]) <= 1.0 and busy["stalled_s"] >= 3.0, busy
    assert busy_control["recovery_s"] >= 24.0 + 1.0 - 15.05 and busy_control["stalled_s"] == 0.0
    assert clean["stalled_s"] == 0.0 and control["stalled_s"] == 0.0
    # The pauses before its verdict (16, 18, 20 and 22 s), each shown for a window (1 s): 4 s were the host's.
    assert stalled["stalled_s"] == pytest.approx(4.0, abs=0.15), stalled
    # The pipeline's recovery (about 2 s: the lease hand-over and the backlog) is what is measured …
    assert clean["recovery_s"] < 4.0
    assert abs(stalled["recovery_s"] - clean["recovery_s"]) <= 1.0, (stalled, clean)
    # … while without the mechanism every pause breaks the confirmation stretch: it reads past the last pause.
    assert control["recovery_s"] >= 24.0 + 1.0 - 15.05, control
    assert stalled["impact_s"] <= clean["impact_s"]  # a paused tick is the host's, not the fault's impact


def test_a_host_that_never_stops_stalling_leaves_the_recovery_unmeasured_not_failed() -> None:
    """Pauses every second until past recovery.limit: the service could never be judged, so no verdict is
    made up; the control (pauses read as the pipeline's) calls the same run a failed recovery."""
    stalls = [16.0 + k for k in range(20)]
    stalled = _stalled_run(stalls, threshold=0.05, limit=10.0)
    control = _stalled_run(stalls, threshold=None, limit=10.0)
    assert stalled["outcome"] == "unmeasured" and stalled["recovery_s"] is None
    assert stalled["stalled_s"] >= 10.0
    assert control["outcome"] == "failed" and control["stalled_s"] == 0.0
