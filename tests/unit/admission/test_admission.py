"""Admission control judged side by side with "off" and with AIMD (virtual time): the capacity policy serves at
capacity under overload, detects a spike into a full queue, sheds only what cannot be served, and leaves the
recovery of faults that never overload as it finds it."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from conftest import settings

from chaosd.admission.detector import CollapseDetector
from chaosd.admission.throttle import Throttle
from chaosd.cli.inspect_command import inspect_lines
from chaosd.config.settings import DetectorConfig, Settings, ThrottleConfig
from chaosd.experiment.plans import scenario_plan
from chaosd.experiment.report import render_summary
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.experiment.scenario import load_scenario, settings_for
from chaosd.telemetry.snapshot import Snapshot

pytestmark = pytest.mark.cpu  # virtual time: CPU only (conftest.py)

ROOT = Path(__file__).resolve().parents[3]
CAPACITY = 400.0  # 4 workers at 10 ms a task, the default config and the shipped overload scenario
Plan = Callable[[Experiment], Coroutine[Any, Any, None]]
Runs = dict[str, tuple[dict[str, Any], list[Snapshot]]]  # policy → a scenario's report and every tick's snapshot


def _policy(s: Settings, policy: str) -> Settings:
    return s.model_copy(update={"throttle": s.throttle.model_copy(update={"enabled": True, "policy": policy})})


def _scenario(name: str, policy: str) -> tuple[dict[str, Any], list[Snapshot]]:
    path = ROOT / "scenarios" / f"{name}.yaml"
    scenario = load_scenario(path)
    snaps: list[Snapshot] = []
    report = run_offline(
        _policy(settings_for(scenario, path, None), policy),
        duration=scenario.duration,
        warmup=scenario.warmup or 0.0,
        scenario=name,
        plan=scenario_plan(scenario.actions) if scenario.actions else None,
        on_tick=snaps.append,
    )
    return report, snaps


def _run(policy: str, plan: Plan, duration: float, overlay: dict[str, Any] | None = None) -> list[Snapshot]:
    """The default pipeline beside ``plan``; the snapshot of every tick."""
    snaps: list[Snapshot] = []
    s = _policy(settings(overlay or {}), policy)
    report = run_offline(s, duration=duration, warmup=0.0, plan=plan, on_tick=snaps.append)
    assert report["tasks"]["lost"] == 0
    return snaps


def _mean(snaps: list[Snapshot], a: float, b: float, field: str) -> float:
    values = [getattr(s, field) for s in snaps if a < s.t <= b]
    return sum(values) / len(values)


def _inject(at: float, action: str, target: str, params: dict[str, float], ttl: float) -> Plan:
    async def plan(exp: Experiment) -> None:
        await exp.clock.sleep_until(exp.pipeline.t0 + at)
        exp.injector.inject(action, target, params, ttl)

    return plan


@pytest.fixture(scope="module")
def overload() -> Runs:
    """The shipped overload scenario (520/s offered against 400/s, held from 90 to 120 s), once per policy, for
    every test that reads it. With "capacity" it is the scenario as shipped (admission control on by default)."""
    return {policy: _scenario("overload", policy) for policy in ("capacity", "aimd", "none")}


@pytest.fixture(scope="module")
def pressure_storm() -> Runs:
    """The shipped pressure_storm scenario once per policy, for every test that reads it. With "none" it is the
    scenario as shipped (it turns admission control off: the same report, byte for byte, as policy none)."""
    return {policy: _scenario("pressure_storm", policy) for policy in ("capacity", "none")}


def test_overload_hold_is_served_at_capacity_where_aimd_halves_it_and_none_collapses(overload: Runs) -> None:
    hold = (91.0, 120.0)  # one telemetry window into the hold
    goodput, p95 = {}, {}
    reports = {}
    for policy in ("capacity", "aimd", "none"):
        reports[policy], snaps = overload[policy]
        goodput[policy] = _mean(snaps, *hold, "goodput") / CAPACITY
        p95[policy] = max(s.sojourn_p95 for s in snaps if hold[0] < s.t <= hold[1])
    assert goodput["capacity"] >= 0.95, goodput
    assert p95["capacity"] <= 1.0, p95  # within the deadline, tick by tick
    assert reports["capacity"]["collapse"]["count"] == 0  # overloaded, never collapsed
    assert reports["capacity"]["collapse"]["time_overloaded_s"] >= 30.0
    # Negative controls: AIMD's sawtooth wastes about half of the capacity, and
    # with nothing admitting at capacity every task waits past its deadline.
    assert 0.35 <= goodput["aimd"] <= 0.65, goodput
    assert reports["aimd"]["throttle"]["lowest_factor"] == pytest.approx(0.05)
    assert goodput["none"] < 0.05, goodput
    assert reports["none"]["collapse"]["count"] >= 1  # goodput gone while the workers are busy: a collapse


def test_a_spike_into_a_full_queue_is_detected_within_3_s_and_served_at_capacity() -> None:
    """A ×100 load_spike for 20 s on the default config (queue of 10,000, deadline 1 s)."""
    spike = (20.0, 40.0)
    results = {}
    for policy in ("capacity", "none"):
        transitions: list[tuple[float, str]] = []

        async def plan(exp: Experiment, seen: list[tuple[float, str]] = transitions) -> None:
            await _inject(spike[0], "load_spike", "pipeline", {"factor": 100.0}, spike[1] - spike[0])(exp)
            exp.telemetry.listen(lambda s: seen.append((s.t, exp.detector.state.value)))

        snaps = _run(policy, plan, 70.0)
        alarm = next(t for t, state in transitions if state in ("overload", "collapsed"))
        results[policy] = (alarm - spike[0], _mean(snaps, spike[0] + 1, spike[1], "goodput") / CAPACITY, transitions)
    delay, share, _ = results["capacity"]
    assert delay <= 3.0, results["capacity"][:2]
    assert share >= 0.8, share
    # Off, the same spike fills the queue at once: overload at once (a full queue, whatever dQ/dt says), then
    # a collapse (every task past its deadline while the workers are busy), and goodput near zero.
    delay_off, share_off, transitions_off = results["none"]
    assert delay_off <= 3.0
    assert share_off < 0.1, share_off
    assert any(state == "collapsed" for _, state in transitions_off)


def test_cascading_storm_sheds_at_most_one_percent_of_the_offered_load() -> None:
    report, _ = _scenario("cascading_storm", "capacity")
    t = report["tasks"]
    shed = t["rejected_by"].get("shed", 0)
    assert shed / t["offered"] <= 0.01, (shed, t["offered"])
    assert report["tasks"]["late"] <= 0.001 * t["offered"]
    # Negative control: off, the jitter-and-slow-workers overload (capacity ≈ 150/s against 200/s) is paid in
    # late tasks instead, several times as many as the capacity policy sheds.
    off, _ = _scenario("cascading_storm", "none")
    assert off["tasks"]["late"] > 3 * shed


@pytest.mark.parametrize(
    ("action", "target", "params"),
    [
        ("kill_leader", "leader", {}),
        ("kill_agent", "worker-1", {}),
        ("tool_timeout", "search", {}),
        ("llm_failure", "plan", {}),
        ("mcp_disconnect", "context", {}),
        ("network_partition", "worker-2", {}),
    ],
)
def test_a_fault_that_never_overloads_recovers_the_same_with_admission_on_and_off(
    action: str, target: str, params: dict[str, float]
) -> None:
    recovery = {}
    shed = {}
    for policy in ("capacity", "none"):
        out: dict[str, Any] = {}

        async def plan(exp: Experiment, out: dict[str, Any] = out) -> None:
            await exp.clock.sleep_until(exp.pipeline.t0 + 20.05)
            record = exp.injector.inject(action, target, params, 8.0)
            out["record"] = record
            await exp.clock.sleep_until(exp.pipeline.t0 + 39.0)
            out["shed"] = exp.pipeline.ledger.total.rejected_by.get("shed", 0)

        # 40 s: the latest of these verdicts comes at 25.9 s (mcp_disconnect), the faults end at 28.05 s, and the
        # refusals are counted for 11 s after that.
        _run(policy, plan, 40.0)
        record = out["record"].as_dict()
        assert record["outcome"] == "recovered", record
        recovery[policy], shed[policy] = record["recovery_s"], out["shed"]
    assert shed["capacity"] == 0  # nothing was refused: there was nothing the pipeline could not serve
    assert abs(recovery["capacity"] - recovery["none"]) <= 0.5, recovery


def test_capacity_comes_back_and_admission_with_it_within_a_second() -> None:
    """75 % of the worker pool out of service for 20 s at the default load (200/s against 100/s left)."""
    fault = (20.05, 40.05)
    snaps = _run("capacity", _inject(fault[0], "pool_exhaustion", "75%", {}, fault[1] - fault[0]), 60.0)
    during = _mean(snaps, fault[0] + 2, fault[1], "goodput")
    assert during >= 0.95 * 100.0, during  # the one worker left is kept busy: goodput at the capacity left
    shedding = [s.t for s in snaps if s.t > fault[1] and s.shed_rate > 0]
    # shed_rate is over the last window (1 s): the last refusal came before the window that ends at this tick.
    last_shed_window_end = max(shedding, default=fault[1])
    window = 1.0
    assert last_shed_window_end - window - fault[1] <= 1.0, last_shed_window_end
    restored = next(s for s in snaps if s.t > fault[1] and s.capacity_rate >= 0.9 * CAPACITY)
    assert restored.t - fault[1] <= 1.5, restored.t


def test_pressure_storm_leaves_its_metastable_state_with_capacity_admission_and_not_without(
    pressure_storm: Runs,
) -> None:
    spike_end = 35.0
    goodput = {}
    for policy in ("capacity", "none"):
        _, snaps = pressure_storm[policy]
        goodput[policy] = _mean(snaps, spike_end + 30, 240.0, "goodput") / 280.0  # share of what is offered
    assert goodput["capacity"] >= 0.95, goodput
    assert goodput["none"] < 0.1, goodput


# --- The shipped scenarios that show admission control, on and off (their runs shared with the tests above) ---


def test_pressure_storm_without_throttle_stays_collapsed_after_the_spike(pressure_storm: Runs) -> None:
    report, _ = pressure_storm["none"]  # the scenario as shipped
    spike_end = 35.0
    after = [p for p in report["timeline"] if p["t"] >= spike_end + 30]
    assert after and all(p["state"] == "collapsed" for p in after)
    # The trigger is long gone, yet goodput stays a fraction of the offered load.
    assert all(p["goodput_per_s"] < 0.2 * p["offered_per_s"] for p in after)
    assert report["collapse"]["final_state"] == "collapsed"
    assert report["queue"]["max_depth"] == report["queue"]["capacity"]
    assert report["tasks"]["lost"] == 0 and report["tasks"]["duplicated"] == 0
    # Shedding nine tasks in ten is not availability: the score is below C, and says why.
    score = report["score"]
    assert score["total"] < 70 and score["grade"] in ("D", "F")
    t = report["tasks"]
    assert score["availability"] < 20 and t["rejected_by"]["queue_full"] > 0.8 * t["offered"]
    causes = {d["cause"]: d for d in report["diagnostics"]}
    assert report["diagnostics"][0]["cause"] == "refused:queue_full"
    collapsed = causes["collapsed_s"]
    assert collapsed["final_state"] == "collapsed" and collapsed["episodes"] == 1
    assert collapsed["count"] >= _duration("pressure_storm") - spike_end - 10


def _duration(name: str) -> float:
    return load_scenario(ROOT / "scenarios" / f"{name}.yaml").duration


def test_pressure_storm_with_throttle_drains_and_returns_to_healthy(pressure_storm: Runs) -> None:
    report, _ = pressure_storm["capacity"]
    episodes = report["collapse"]["episodes"]
    assert len(episodes) >= 1 and all(e["cleared_at"] is not None for e in episodes)
    assert report["collapse"]["final_state"] == "healthy"
    # Admission control (the capacity policy by default) keeps the queue to what can end in time, so the
    # pressure failures never start and the spike's excess is shed, not retried into a storm.
    throttle = report["throttle"]
    assert throttle["policy"] == "capacity" and throttle["refused"] > 0
    tail = [p for p in report["timeline"] if p["t"] >= _duration("pressure_storm") - 60]
    assert all(p["queue_depth"] < 50 for p in tail)
    assert all(p["goodput_per_s"] > 0.8 * p["offered_per_s"] for p in tail)
    # Shed work is unavailable service, and availability counts it: what the spike brought above capacity.
    causes = {d["cause"]: d for d in report["diagnostics"]}
    assert causes["refused:shed"]["count"] == throttle["refused"]
    assert report["score"]["availability"] < 100
    # Nobody injected the spike: it is an incident of its own, and the throttle has it recovered within seconds
    # of the spike's end (the recovery counts in the score as an injected fault's would).
    [incident] = [i for i in report["incidents"] if i["unplanned"]]
    assert incident["outcome"] == "recovered" and incident["recovery_s"] is not None and incident["recovery_s"] < 15
    assert report["score"]["recovery"] is not None and report["score"]["total"] >= 85


def test_overload_is_detected_during_the_ramp_throttled_and_cleared_after(overload: Runs) -> None:
    report, _ = overload["capacity"]  # the scenario as shipped
    episodes = report["collapse"]["episodes"]
    assert len(episodes) >= 1
    # Capacity (400/s) is crossed at t ≈ 67.5 s on the ramp; the load drops at 120 s.
    assert 67.5 <= episodes[0]["detected_at"] <= 75
    assert all(e["cleared_at"] is not None for e in episodes)
    assert report["collapse"]["final_state"] == "healthy"
    # Admission control (on by default) shed what the workers could not serve in time, and never collapsed.
    throttle = report["throttle"]
    assert throttle["enabled"] and throttle["policy"] == "capacity" and throttle["refused"] > 0
    assert report["collapse"]["count"] == 0 and episodes[0]["kind"] == "overload"
    # The queue was cut to the target (a quarter of the 1 s deadline) while the overload stood, and given its
    # deadline's worth back after: 0.8 s of 400/s, less one task's service.
    assert throttle["lowest_limit"] <= 0.25 * 400 * 1.1
    assert throttle["limit"] == pytest.approx(0.79 * throttle["capacity_per_s"], rel=0.05)


def test_overload_without_the_throttle_stays_collapsed_until_the_load_drops(overload: Runs) -> None:
    report, _ = overload["none"]
    episodes = report["collapse"]["episodes"]
    assert len(episodes) == 1
    assert 67.5 <= episodes[0]["detected_at"] <= 75
    assert episodes[0]["cleared_at"] is not None and episodes[0]["cleared_at"] > 120


def _snapshot(t: float, **kw: float) -> Snapshot:
    healthy = {
        "queue_depth": 0, "capacity": 10_000, "queue_fill": 0.0, "utilisation": 0.5, "busy_share": 0.5,
        "queue_slope": 0.0, "arrival_rate": 200.0, "admitted_rate": 200.0, "throughput": 200.0,
        "service_rate": 400.0, "goodput": 200.0, "error_rate": 0.0, "retry_rate": 0.0, "wait_p50": 0.0,
        "wait_p95": 0.01, "wait_p99": 0.02, "sojourn_p50": 0.01, "sojourn_p95": 0.03, "sojourn_p99": 0.05,
        "head_age": 0.0, "mean_service": 0.01, "capacity_rate": 400.0,
    }  # fmt: skip
    return Snapshot(t=t, **{**healthy, **kw})  # type: ignore[arg-type]


def _paused(t: float, lateness: float) -> Snapshot:
    """What a tick reads after the process was stopped: busy time and ages inflated, a catch-up burst queued,
    goodput down (nothing ended while stopped), admission refusing because the limit it read was stale."""
    return _snapshot(
        t, lateness=lateness, queue_depth=300, queue_fill=0.03, utilisation=1.0, busy_share=1.0, queue_slope=400.0,
        head_age=1.2, mean_service=0.03, capacity_rate=133.0, goodput=60.0, throughput=130.0, sojourn_p95=1.1,
        shed_rate=20.0,
    )  # fmt: skip


@pytest.mark.parametrize("late", [True, False])
def test_a_stall_is_named_a_stall_raises_no_alarm_and_freezes_admission(late: bool) -> None:
    """A SIGSTOP duty cycle as the detector and the controller see it (real time shows it as the ticker's
    lateness; the real-time test stops a daemon for real). Negative control: the same readings on time."""
    detector = CollapseDetector(DetectorConfig(), 0.1, deadline=1.0, window=1.0)
    throttle = Throttle(ThrottleConfig(), tick=0.1, capacity=10_000, deadline=1.0)
    t = 0.0
    for _ in range(400):  # 40 s healthy
        t = round(t + 0.1, 6)
        detector.update(_snapshot(t))
        throttle.update(detector.state, _snapshot(t))
    before = throttle.limit
    assert before == pytest.approx(400 * 0.79, abs=1)  # 0.8 of the deadline's worth, less a task's service
    limits, states = [], []
    for k in range(100):  # 10 s: stopped 300 ms, running 200 ms
        t = round(t + 0.1, 6)
        snap = _paused(t, 0.3 - 0.1 * (k % 5) if late and k % 5 < 3 else 0.0)
        states.append(detector.update(snap) and detector.state.value)
        throttle.update(detector.state, snap)
        limits.append(throttle.limit)
    if late:
        assert detector.state.value == "stall" and detector.stall_count == 1
        assert detector.episode_count == 0  # no overload, no collapse
        assert min(limits) >= before and max(limits) == 10_000  # admission not cut: lifted to the queue's capacity
    else:
        assert detector.episode_count == 1 and detector.state.value in ("overload", "collapsed")
        assert min(limits) < before / 2
    for _ in range(30):  # the stall ends: healthy readings again
        t = round(t + 0.1, 6)
        detector.update(_snapshot(t))
    if late:
        assert detector.state.value == "healthy" and detector.episode_count == 0


@pytest.mark.parametrize(
    ("action", "target", "params"),
    [("pool_exhaustion", "75%", {}), ("load_spike", "pipeline", {"factor": 3.0}), ("latency_jitter", "all", {})],
)
def test_a_fault_that_overloads_reads_its_drain_not_a_ramp(action: str, target: str, params: dict[str, float]) -> None:
    """Time to restore service after a 10 s overload at the default load: with the capacity policy it is the
    drain of a queue kept within the deadline; AIMD's +5 %-a-second ramp shows as tens of seconds; with no
    admission control, the backlog's drain."""
    restore = {}
    for policy in ("capacity", "aimd", "none"):
        out: dict[str, Any] = {}

        async def plan(exp: Experiment, out: dict[str, Any] = out) -> None:
            await exp.clock.sleep_until(exp.pipeline.t0 + 20.05)
            out["record"] = exp.injector.inject(action, target, params, 10.0)

        # 70 s: the slowest restore here (AIMD's, after pool_exhaustion) has its verdict at 55.8 s; one that came
        # after the end would leave the fault recovering, and the outcome assertion refuses that.
        _run(policy, plan, 70.0)
        record = out["record"].as_dict()
        assert record["outcome"] == "recovered" and record["clock"] == "restore", record
        restore[policy] = record["recovery_s"]
    assert restore["capacity"] <= 3.0, restore
    assert restore["capacity"] < restore["none"], restore
    assert restore["aimd"] >= 10.0, restore


def test_the_summary_and_inspect_say_what_admission_did(overload: Runs) -> None:
    report, _ = overload["capacity"]
    th, c = report["throttle"], report["collapse"]
    summary = render_summary(report)
    assert (
        f"admission  capacity · limit {th['limit']} waiting (lowest {th['lowest_limit']}) · measured capacity "
        f"{th['capacity_per_s']:.1f}/s · target wait 0.25 s · refused {th['refused']}"
    ) in summary
    assert f"{c['alarms']} alarm(s), 0 collapsed · {c['time_overloaded_s']:.1f} s overloaded" in summary
    lines = inspect_lines(report)
    assert f"admission  capacity · limit {th['limit']} waiting · capacity {th['capacity_per_s']:.1f}/s · " in "\n".join(
        lines
    )
    assert any(line.startswith("detector   healthy now · 1 alarm(s), 0 collapsed") for line in lines), lines
    # The refusals are the shed ones, and the diagnostics name them.
    assert th["refused"] == report["tasks"]["rejected_by"]["shed"] > 0
    assert any(d["cause"] == "refused:shed" and d["count"] == th["refused"] for d in report["diagnostics"])


def test_a_stall_that_interrupts_an_overload_keeps_the_bound() -> None:
    """Lifted during an overload, the queue would fill past the deadline and the overload become a collapse."""
    detector = CollapseDetector(DetectorConfig(), 0.1, deadline=1.0, window=1.0)
    throttle = Throttle(ThrottleConfig(), tick=0.1, capacity=10_000, deadline=1.0)
    t = 0.0
    for _ in range(100):  # 10 s shedding at the bound: offered 800/s against 400/s
        t = round(t + 0.1, 6)
        snap = _snapshot(t, arrival_rate=800.0, shed_rate=400.0, queue_depth=316, utilisation=1.0, busy_share=1.0)
        detector.update(snap)
        throttle.update(detector.state, snap)
    bound = throttle.limit
    assert detector.state.value == "overload" and bound < 400
    t = round(t + 0.1, 6)
    snap = _paused(t, 0.3)
    detector.update(snap)
    throttle.update(detector.state, snap)
    assert detector.state.value == "stall" and throttle.limit == bound


@pytest.mark.parametrize("after_a_stall", [True, False])
def test_the_late_backlog_a_stall_leaves_is_the_stalls_not_a_collapse(after_a_stall: bool) -> None:
    """A pause leaves tasks that waited through it: they end late while the workers drain them. Negative control:
    the same readings with no stall before them are a collapse."""
    detector = CollapseDetector(DetectorConfig(), 0.1, deadline=1.0, window=1.0)
    t = 0.0
    for _ in range(300):
        t = round(t + 0.1, 6)
        detector.update(_snapshot(t))
    if after_a_stall:
        t = round(t + 0.1, 6)
        detector.update(_paused(t, 0.3))
        for _ in range(10):  # the stall's window
            t = round(t + 0.1, 6)
            detector.update(_snapshot(t))
    states = set()
    for k in range(30):  # 3 s draining: the head past the deadline for 2 s, then the last late tasks end
        t = round(t + 0.1, 6)
        late = _snapshot(
            t,
            head_age=1.5 if k < 20 else 0.2,
            shed_rate=30.0 if k < 25 else 0.0,  # arrivals refused while the backlog is over the bound
            goodput=20.0,
            utilisation=1.0,
            busy_share=1.0,
            queue_depth=200,
        )
        detector.update(late)
        states.add(detector.state.value)
    if after_a_stall:
        assert detector.episode_count == 0 and {"collapsed", "overload"}.isdisjoint(states), states
    else:
        assert detector.collapse_count == 1, states
