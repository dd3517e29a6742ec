"""The collapse detector on the running pipeline (virtual time), and its state machine on synthetic input; its
failing state (tasks failing with a short queue), named within 3 s and never on a healthy or lightly loaded run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from conftest import mmc, run, settings

from chaosd.admission.detector import CollapseDetector, DetectorState
from chaosd.admission.throttle import Throttle
from chaosd.config.settings import DetectorConfig, ThrottleConfig
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.experiment.verdict import run_verdict
from chaosd.telemetry.snapshot import Snapshot

pytestmark = pytest.mark.cpu  # virtual time: CPU only, at a lower priority as root (conftest.py)

MU = 400.0  # 4 workers × 100/s


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_step_to_overload_is_flagged_within_2_5_s(seed: int) -> None:
    step_at = 30.0
    overlay = mmc(0.7 * MU, 4, seed=seed)
    overlay["load"]["phases"] = [{"type": "step", "at": step_at, "rate": 1.2 * MU}]
    report = run(overlay, duration=45.0)
    episodes = report["collapse"]["episodes"]
    assert episodes, "a step to ρ = 1.2 was never flagged"
    assert episodes[0]["detected_at"] >= step_at, f"false alarm before the step: {episodes[0]}"
    delay = episodes[0]["detected_at"] - step_at
    assert delay <= 2.5, f"flagged {delay:.2f} s after the step"


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_ten_minutes_at_rho_0_8_raise_no_alarm(seed: int) -> None:
    report = run(mmc(0.8 * MU, 4, seed=seed), duration=600.0)
    assert report["collapse"]["episodes"] == []
    assert report["utilisation"] == pytest.approx(0.8, abs=0.02)  # the load really was ρ 0.8


def test_quarter_second_burst_at_twice_capacity_raises_no_alarm() -> None:
    overlay = mmc(0.7 * MU, 4)
    overlay["load"]["phases"] = [{"type": "spike", "at": 20.0, "rate": 2 * MU, "duration": 0.25}]
    report = run(overlay, duration=40.0)
    assert report["queue"]["max_depth"] >= 50  # the burst did pile up work
    assert report["collapse"]["episodes"] == []


def test_alarm_stays_up_for_the_whole_overload_and_clears_after() -> None:
    overlay = mmc(0.7 * MU, 4, telemetry={"tick": 0.1}, run={"timeline": 1.0})
    overlay["load"]["phases"] = [
        {"type": "step", "at": 20.0, "rate": 1.2 * MU},
        {"type": "step", "at": 80.0, "rate": 0.6 * MU},
    ]
    report = run(overlay, duration=200.0)
    episodes = report["collapse"]["episodes"]
    assert len(episodes) == 1, episodes
    episode = episodes[0]
    assert 20.0 <= episode["detected_at"] <= 22.5
    # Still up when the overload ends; the backlog (≈ 60 s × 80/s) drains at 160/s afterwards.
    assert episode["cleared_at"] is not None and episode["cleared_at"] > 80.0
    alarmed = [p for p in report["timeline"] if p["state"] in ("overload", "collapsed")]
    assert min(p["t"] for p in alarmed) <= 23 and max(p["t"] for p in alarmed) >= 80
    overload = [p for p in report["timeline"] if 23 <= p["t"] <= 80]
    assert all(p["state"] in ("overload", "collapsed") for p in overload), [p["state"] for p in overload]
    # With nothing admitting at capacity the backlog outgrows the deadline (1 s of work after ~5 s here): from
    # then on every completion is late while the workers stay busy, which is a collapse, not only an overload.
    assert [p["state"] for p in overload][:3] == ["overload"] * 3
    assert any(p["state"] == "collapsed" for p in overload)
    assert report["collapse"]["count"] == 1 and episode["kind"] == "collapse"
    assert report["collapse"]["final_state"] == "healthy"


def _snap(t: float, **kw: float) -> Snapshot:
    base = Snapshot(
        t=t,
        queue_depth=0,
        capacity=1000,
        queue_fill=0.0,
        utilisation=0.5,
        busy_share=0.5,
        queue_slope=0.0,
        arrival_rate=50.0,
        admitted_rate=50.0,
        throughput=50.0,
        service_rate=100.0,
        goodput=50.0,
        error_rate=0.0,
        retry_rate=0.0,
        wait_p50=0.0,
        wait_p95=0.01,
        wait_p99=0.02,
        sojourn_p50=0.01,
        sojourn_p95=0.03,
        sojourn_p99=0.05,
        head_age=0.0,
        mean_service=0.01,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _overloaded(t: float) -> Snapshot:
    return _snap(
        t,
        queue_depth=100,
        queue_fill=0.1,
        utilisation=1.0,
        busy_share=1.0,
        queue_slope=50.0,
        head_age=0.5,
        sojourn_p95=0.6,
    )


def test_state_machine_warning_overload_recovering_healthy() -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1)
    t = 0.0
    for _ in range(400):  # 40 s healthy: a baseline forms
        t += 0.1
        assert det.update(_snap(t)) is None
    assert det.baseline_p95 == pytest.approx(0.03)
    states = []
    for _ in range(30):
        t += 0.1
        det.update(_overloaded(t))
        states.append(det.state)
    assert states[0] is DetectorState.WARNING  # one bad tick is a warning, not an alarm
    assert DetectorState.OVERLOAD in states
    first_alarm = states.index(DetectorState.OVERLOAD)
    assert 14 <= first_alarm <= 20  # held for 70 % of the 2 s hold
    # The baseline is frozen while the alarm is up.
    assert det.baseline_p95 == pytest.approx(0.03)
    calm_states = []
    for _ in range(150):
        t += 0.1
        det.update(_snap(t))
        calm_states.append(det.state)
    recovering = calm_states.index(DetectorState.RECOVERING) / 10
    healthy = calm_states.index(DetectorState.HEALTHY) / 10
    # Hysteresis: the alarm outlasts the overload by clear_hold (2 s) of calm, after the last
    # 2 s no longer show the overload on half their ticks; then recover_hold (5 s) more.
    assert 2.0 <= recovering <= 3.5
    assert healthy - recovering == pytest.approx(5.0, abs=0.15)
    assert all(st is DetectorState.OVERLOAD for st in calm_states[: int(recovering * 10) - 1])
    assert len(det.episodes) == 1 and det.episodes[0].cleared_at is not None


def test_overload_during_recovery_continues_the_same_episode() -> None:
    det = CollapseDetector(DetectorConfig(clear_hold=0.5, recover_hold=5.0), tick=0.1)
    t = 0.0
    for _ in range(40):
        t += 0.1
        det.update(_overloaded(t))
    assert det.state is DetectorState.OVERLOAD
    for _ in range(10):
        t += 0.1
        det.update(_snap(t))
    assert det.state is DetectorState.RECOVERING
    for _ in range(10):
        t += 0.1
        det.update(_overloaded(t))
    assert det.state is DetectorState.OVERLOAD
    assert len(det.episodes) == 1 and det.episodes[0].cleared_at is None


def _full(t: float, goodput: float) -> Snapshot:
    """A queue at capacity: it cannot grow, so dQ/dt is 0; the head has waited past the deadline."""
    return _snap(
        t,
        queue_depth=1000,
        queue_fill=1.0,
        utilisation=1.0,
        busy_share=1.0,
        head_age=2.5,
        sojourn_p95=2.5,
        arrival_rate=200.0,
        throughput=100.0,
        goodput=goodput,
        capacity_rate=100.0,
        shed_rate=100.0,
    )


@pytest.mark.parametrize(("goodput", "state"), [(95.0, DetectorState.OVERLOAD), (0.0, DetectorState.COLLAPSED)])
def test_a_full_queue_is_overload_whatever_the_slope_and_collapse_once_goodput_falls(
    goodput: float, state: DetectorState
) -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1, deadline=1.0)
    t = 0.0
    for _ in range(30):
        t += 0.1
        det.update(_full(t, goodput))
    assert det.state is state
    assert det.episode_count == 1 and det.collapse_count == (state is DetectorState.COLLAPSED)
    assert det.episodes[0].kind == ("collapse" if state is DetectorState.COLLAPSED else "overload")


def test_the_baseline_does_not_learn_while_anything_is_wrong() -> None:
    det = CollapseDetector(DetectorConfig(baseline_window=1.0), tick=0.1, deadline=1.0)
    t = 0.0
    for _ in range(20):
        t += 0.1
        det.update(_snap(t))
    assert det.baseline_p95 == pytest.approx(0.03)
    # One signal at a time, each short of the hold (a warning): a head past the deadline, refusals, a slow p95.
    for kw in ({"head_age": 1.5}, {"shed_rate": 10.0}, {"sojourn_p95": 0.09}):
        for _ in range(5):
            t += 0.1
            det.update(_snap(t, **kw))
            assert det.state is DetectorState.WARNING, kw
        assert det.baseline_p95 == pytest.approx(0.03), kw
    # Negative control: a higher p95 with nothing wrong is learnt.
    for _ in range(20):
        t += 0.1
        det.update(_snap(t, sojourn_p95=0.05))
    assert det.baseline_p95 == pytest.approx(0.05)


# --- failing: tasks end not good while the queue stays short -----------------------------------------------------

ONSET_S = 40.0  # failures that start mid-run begin here, after the 30 s the baselines take to learn
NAMED_WITHIN_S = 3.0


def _stage(failure_probability: float = 0.0, **keys: Any) -> list[dict[str, Any]]:
    service = {"distribution": "exponential", "mean": 0.01}
    return [{"name": "work", "service": service, "failure_probability": failure_probability, **keys}]


def _admitting(policy: str = "capacity", **extra: Any) -> dict[str, Any]:
    """ρ 0.5 on the M/M/4 pipeline, with admission control on: whether failing cuts it is part of what is judged."""
    return mmc(0.5 * MU, 4, throttle={"enabled": True, "policy": policy}, **extra)


def _failing_episode(report: dict[str, Any]) -> dict[str, Any]:
    episodes = [e for e in report["collapse"]["episodes"] if e["kind"] == "failing"]
    assert episodes, f"never named failing: {report['collapse']}"
    episode: dict[str, Any] = episodes[0]
    return episode


def _named_and_not_cut(report: dict[str, Any], onset: float) -> float:
    """The failing episode's detection delay after ``onset``; checks nothing else was raised and nothing refused."""
    episode = _failing_episode(report)
    assert episode["reason"] == "tasks_failing" and episode["cleared_at"] is None
    collapse = report["collapse"]
    assert collapse["alarms"] == 1 and collapse["failing"] == 1 and collapse["count"] == 0
    assert collapse["time_overloaded_s"] == 0 and collapse["final_state"] == "failing"
    assert report["tasks"]["rejected"] == 0 and report["throttle"]["final_factor"] == 1.0  # failures are no congestion
    assert report["queue"]["max_depth"] <= 40  # the queue stayed short: not an overload
    delay: float = episode["detected_at"] - onset
    return delay


@pytest.mark.parametrize("policy", ["capacity", "aimd"])
@pytest.mark.parametrize(("share", "seed"), [(1.0, 1), (1.0, 2), (0.5, 1), (0.5, 2)])
def test_failures_from_the_start_are_named_failing_within_3_s(share: float, seed: int, policy: str) -> None:
    """Before any baseline: the good share of the tasks ending is judged against all of them."""
    report = run(_admitting(policy, stages=_stage(share), seed=seed), duration=20.0)
    delay = _named_and_not_cut(report, onset=0.0)
    assert 1.4 <= delay <= NAMED_WITHIN_S, delay  # held on 70 % of the 2 s hold's ticks
    assert report["collapse"]["time_failing_s"] >= 20.0 - NAMED_WITHIN_S
    assert all(p["state"] == "failing" for p in report["timeline"] if p["t"] > NAMED_WITHIN_S)
    failed = report["tasks"]["failed"] / (report["tasks"]["failed"] + report["tasks"]["completed"])
    assert failed == pytest.approx(share, abs=0.05)  # what was offered really failed this often


def _from(at: float, change: Any) -> Any:
    async def plan(exp: Experiment) -> None:
        await exp.clock.sleep_until(exp.pipeline.t0 + at)
        assert exp.detector.baseline_p95 > 0 and exp.detector.state is DetectorState.HEALTHY  # a baseline, learnt
        change(exp)

    return plan


def _fail_share(share: float) -> Any:
    """The stage's calls start failing this often (its dependency breaks): its config, changed under it."""

    def change(exp: Experiment) -> None:
        stage = exp.pipeline.stages["work"]
        stage.cfg = stage.cfg.model_copy(update={"failure_probability": share})
        stage.refresh()

    return change


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("share", [1.0, 0.5])
def test_failures_after_a_baseline_are_named_failing_within_3_s(share: float, seed: int) -> None:
    s = settings(_admitting(stages=_stage(), seed=seed))
    report = run_offline(s, duration=ONSET_S + 10.0, warmup=0.0, plan=_from(ONSET_S, _fail_share(share)))
    delay = _named_and_not_cut(report, onset=ONSET_S)
    assert 1.0 <= delay <= NAMED_WITHIN_S, delay
    assert report["collapse"]["time_failing_s"] >= 10.0 - NAMED_WITHIN_S


def test_a_model_that_errors_with_no_fallback_is_failing_and_one_with_a_fallback_is_healthy() -> None:
    """llm_failure from the catalogue: its retries go to the fallback model, whose answers are good ones."""
    llm = {"name": "work", "kind": "llm", "service": {"distribution": "exponential", "mean": 0.01}}
    delays = []
    for fallback in (None, {"distribution": "exponential", "mean": 0.012}):
        # No fallback: one attempt, an error. A fallback: the retry is the fallback's.
        stage = {**llm, "fallback": fallback, "retries": 1} if fallback else llm
        s = settings(_admitting(stages=[stage]))
        inject = _from(ONSET_S, lambda exp: exp.injector.inject("llm_failure", "work", {}, 20.0))
        report = run_offline(s, duration=ONSET_S + 10.0, warmup=0.0, plan=inject)
        if fallback is None:
            delays.append(_named_and_not_cut(report, onset=ONSET_S))
        else:
            assert report["stages"]["work"]["failures"]["llm_error"] > 0  # the primary did fail
            assert report["collapse"]["episodes"] == [] and report["collapse"]["time_failing_s"] == 0
    assert delays and delays[0] <= NAMED_WITHIN_S


def test_retried_failures_that_end_good_are_not_failing_and_degraded_completions_are() -> None:
    # Half the attempts fail, but up to six retries serve almost every task: goodput counts only good completions,
    # and these are good ones. At ρ 0.2, so that the retries' twice the work is no overload.
    retries = _stage(0.5, retries=6, breaker_threshold=0, backoff={"base": 0.0})
    retried = run(mmc(0.2 * MU, 4, throttle={"enabled": True}, stages=retries, seed=3), duration=30.0)
    assert retried["stages"]["work"]["retries"] > 1000
    assert retried["collapse"]["episodes"] == [] and retried["collapse"]["time_failing_s"] == 0
    # A hanging tool with no alternate: every task completes, degraded (without the tool's answer), which is not good.
    # At ρ 0.1, so that the calls held to the 50 ms timeout are no overload.
    tool = {"name": "work", "kind": "tool", "service": {"distribution": "exponential", "mean": 0.01}, "timeout": 0.05}
    s = settings(mmc(0.1 * MU, 4, throttle={"enabled": True}, stages=[tool]))
    hang = _from(ONSET_S, lambda exp: exp.injector.inject("tool_timeout", "work", {}, 20.0))
    degraded = run_offline(s, duration=ONSET_S + 10.0, warmup=0.0, plan=hang)
    tasks = degraded["tasks"]
    assert tasks["degraded"] > 300 and tasks["failed"] < 0.01 * tasks["completed"]  # slower than 50 ms: e^-5
    assert _named_and_not_cut(degraded, onset=ONSET_S) <= NAMED_WITHIN_S


@pytest.mark.parametrize("seed", [1, 2])
def test_a_healthy_run_is_never_failing(seed: int) -> None:
    """Negative control: ρ 0.8, from the first tick (warm-up noise included) to the last."""
    report = run(mmc(0.8 * MU, 4, seed=seed, throttle={"enabled": True}), duration=120.0)
    collapse = report["collapse"]
    assert collapse["failing"] == 0 and collapse["time_failing_s"] == 0 and collapse["episodes"] == []
    assert {p["state"] for p in report["timeline"]} == {"healthy"}


@pytest.mark.parametrize(
    ("rate", "service"),
    [
        (0.3, {"distribution": "exponential", "mean": 0.01}),
        (1.0, {"distribution": "lognormal", "mean": 0.6, "sigma": 1.0}),  # most of a window in service: lag
        (3.0, {"distribution": "constant", "mean": 0.9}),
    ],
)
def test_low_load_with_no_failures_is_never_failing(rate: float, service: dict[str, Any]) -> None:
    """Little goodput because little is offered, and tasks that take most of a window: no outcome is bad."""
    overlay = mmc(rate, 4, stages=[{"name": "work", "service": service}], load={"deadline": 0.0})
    report = run(overlay, duration=300.0)
    collapse = report["collapse"]
    assert collapse["failing"] == 0 and collapse["time_failing_s"] == 0, collapse
    assert report["tasks"]["completed"] >= 0.9 * rate * 300 and report["tasks"]["failed"] == 0


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_low_load_where_every_task_fails_is_failing_and_fails_the_verdict(rate: float) -> None:
    """A task a second, or one every two, and every one fails: too few in one window, enough over a few."""
    report = run(mmc(rate, 4, stages=_stage(1.0), seed=1), duration=60.0)
    collapse = report["collapse"]
    assert collapse["failing"] == 1 and collapse["time_failing_s"] >= 0.7 * 60.0, collapse  # one episode, held
    passed, reason = run_verdict(report)
    assert not passed and "failing" in reason, reason
    healthy = run(mmc(rate, 4, stages=_stage(0.0), seed=1), duration=60.0)  # negative control: nothing fails
    assert healthy["collapse"]["time_failing_s"] == 0 and run_verdict(healthy)[0]


def test_offers_that_cannot_reach_the_queue_are_failing() -> None:
    """Every producer cut off from the queue: each offer is refused (partitioned) while the queue is empty. Users
    fail; nothing is congested. Named within 3 s, and healthy again once the partition is lifted."""
    s = settings(_admitting(stages=_stage()))

    def cut(exp: Experiment) -> None:
        for producer in exp.pipeline.producers:
            exp.injector.inject("network_partition", producer.agent.id, {}, 10.0)

    report = run_offline(s, duration=ONSET_S + 30.0, warmup=0.0, plan=_from(ONSET_S, cut))
    episode = _failing_episode(report)
    assert episode["reason"] == "tasks_failing"
    assert 1.0 <= episode["detected_at"] - ONSET_S <= NAMED_WITHIN_S, episode
    assert episode["cleared_at"] is not None and episode["cleared_at"] <= ONSET_S + 10.0 + 10.0  # lifted at +10 s
    assert report["tasks"]["rejected_by"].get("partitioned", 0) > 1500  # 10 s of 200/s refused
    assert report["collapse"]["final_state"] == "healthy"


def test_no_baseline_learns_while_failing() -> None:
    """The injector's steady state and the detector's: failures from the start leave both unlearnt."""
    failing = run(_admitting(stages=_stage(1.0)), duration=45.0)
    assert failing["faults_summary"]["baseline"] is None  # 45 s with no fault in play, every tick failing
    healthy = run(_admitting(stages=_stage(0.0)), duration=45.0)
    assert healthy["faults_summary"]["baseline"] is not None  # negative control


def _failing(t: float, good: float = 0.0, ended: float = 50.0) -> Snapshot:
    return _snap(t, throughput=ended, goodput=good)


def test_state_machine_failing_recovering_healthy() -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1)
    t = 0.0
    for _ in range(400):  # 40 s healthy, a tenth of the tasks ending late: the good share learnt is 0.9
        t += 0.1
        det.update(_snap(t, goodput=45.0))
    assert det.baseline_good_share == pytest.approx(0.9)
    for good in (35.0, 34.0):  # 70 % and 68 % good: above 0.75 × 0.9, so not failing (and learnt)
        for _ in range(30):
            t += 0.1
            det.update(_failing(t, good=good))
            assert det.state is DetectorState.HEALTHY, good
    learnt = det.baseline_good_share
    assert 0.85 < learnt < 0.9
    states = []
    for _ in range(30):  # 60 % good
        t += 0.1
        det.update(_failing(t, good=30.0))
        states.append(det.state)
    assert states[0] is DetectorState.WARNING
    assert 13 <= states.index(DetectorState.FAILING) <= 20  # held on 70 % of the 2 s hold: its 14th tick at the soonest
    assert det.baseline_good_share == learnt and det.baseline_p95 == pytest.approx(0.03)  # frozen while failing
    calm = []
    for _ in range(120):
        t += 0.1
        det.update(_snap(t, goodput=45.0))
        calm.append(det.state)
    recovering = calm.index(DetectorState.RECOVERING) / 10
    assert 2.0 <= recovering <= 3.5
    assert calm.index(DetectorState.HEALTHY) / 10 - recovering == pytest.approx(5.0, abs=0.15)
    assert (det.episode_count, det.failing_count, det.collapse_count) == (1, 1, 0)
    assert det.episodes[0].kind == "failing" and det.episodes[0].cleared_at is not None


def test_failing_that_turns_into_an_overload_stays_one_failing_episode_and_a_lone_failure_is_nothing() -> None:
    det = CollapseDetector(DetectorConfig(), tick=0.1)
    t = 0.0
    for _ in range(30):
        t += 0.1
        det.update(_failing(t))
    assert det.state is DetectorState.FAILING
    for _ in range(30):
        t += 0.1
        det.update(_overloaded(t))
    assert det.state is DetectorState.OVERLOAD and det.episode_count == 1 and det.episodes[0].kind == "failing"
    # Low load: one task a second. A lone failure among good tasks is nothing, however often it recurs apart …
    lone = CollapseDetector(DetectorConfig(), tick=0.1)
    for k in range(1, 600):
        window_failed = k % 50 < 10  # one task in each window, and every fifth second's failed
        lone.update(_failing(k / 10, ended=1.0, good=0.0 if window_failed else 1.0))
        assert lone.state is DetectorState.HEALTHY, k
    # … but every task failing is failing: the evidence reaches back over earlier windows for two outcomes.
    low = CollapseDetector(DetectorConfig(), tick=0.1)
    for k in range(1, 100):
        low.update(_failing(k / 10, ended=1.0))
    assert low.state is DetectorState.FAILING
    assert low.episodes[0].detected_at <= 4.0  # two windows of evidence, then the 2 s hold


def test_aimd_gives_admission_back_while_failing() -> None:
    """Failures are not congestion: a factor an overload cut is raised again while failing, never cut for it."""
    throttle = Throttle(ThrottleConfig(policy="aimd"), tick=0.1)
    throttle.update(DetectorState.OVERLOAD, _overloaded(1.0))
    assert throttle.factor == 0.5
    for k in range(2, 12):
        throttle.update(DetectorState.FAILING, _failing(float(k)))
    assert throttle.factor == pytest.approx(1.0) and throttle.decreases == 1
