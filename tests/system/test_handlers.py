"""User stage handlers (``kind = "python"``): called with their context, retried, cut at the timeout, faulted,
validated at config load, refused in virtual time; and the shipped example against its echo service.

These run on the real clock, a few seconds at most each: a run stops as soon as its condition holds
(checked at every telemetry tick), or at its time limit, after which the assertions say what was missing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import handler_fixtures as fx
import pytest

from chaosd.admission.detector import DetectorState
from chaosd.cli.main import main
from chaosd.config.handlers import StageContext
from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.errors import ConfigError
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.faults.injector import FaultRecord

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 6.0  # real seconds a run may take before its assertions fail


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    fx.reset()


def _settings(stages: list[dict[str, Any]], **extra: Any) -> Settings:
    overlay: dict[str, Any] = {
        "load": {"arrival": "constant", "rate": 40.0, "producers": 1, "deadline": 0.0},
        "workers": {"count": 2},
        "stages": stages,
        "throttle": {"enabled": False},
        "detector": {"enabled": False},
        **extra,
    }
    return load_settings(None, overlay)


def _python_stage(handler: str, **keys: Any) -> dict[str, Any]:
    return {"name": "fetch", "kind": "python", "handler": handler, "next": ["answer"], **keys}


ANSWER = {"name": "answer", "kind": "compute", "service": {"distribution": "constant", "mean": 0.0}, "next": []}


def _run_until(
    settings: Settings,
    done: Callable[[Experiment], bool],
    on_tick: Callable[[Experiment], None] | None = None,
) -> tuple[dict[str, Any], Experiment]:
    """Run on the real clock until ``done`` holds at a telemetry tick, or for ``LIMIT`` seconds."""
    loop = new_event_loop(virtual=False)
    clock = LoopClock(loop)

    async def go() -> tuple[dict[str, Any], Experiment]:
        exp = Experiment(settings, clock, warmup=0.0, virtual=False)

        def tick(_: object) -> None:
            if on_tick is not None:
                on_tick(exp)
            if done(exp):
                exp.stop.set()

        exp.telemetry.listen(tick)
        return await exp.run(LIMIT), exp

    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def test_a_handler_serves_the_stage_and_gets_its_context() -> None:
    s = _settings([_python_stage("handler_fixtures:record", timeout=0.5, params={"greeting": "hi"}), ANSWER])
    report, exp = _run_until(s, lambda e: e.pipeline.ledger.total.completed >= 20)
    tasks = report["tasks"]
    assert tasks["completed"] >= 20 and tasks["failed"] == 0
    assert len(fx.CALLS) >= tasks["completed"]
    for call in fx.CALLS:
        ctx = call.context
        assert isinstance(ctx, StageContext)
        assert (ctx.stage, ctx.attempt, ctx.timeout, ctx.faults) == ("fetch", 1, 0.5, ())
        assert ctx.task_id == call.task.id
        assert ctx.deadline is not None and 0 < ctx.deadline - call.started <= 0.5
        assert dict(ctx.params) == {"greeting": "hi"}
    assert len({c.task.id for c in fx.CALLS}) == len(fx.CALLS)  # one call per task: none failed, none retried
    with pytest.raises(dataclasses.FrozenInstanceError):
        fx.CALLS[0].context.attempt = 2  # type: ignore[misc]
    assert exp.pipeline.stages["fetch"].handler is fx.record  # imported once, at build


def test_an_object_with_an_async_call_is_a_handler() -> None:
    s = _settings([_python_stage("handler_fixtures:tool"), ANSWER])
    report, _ = _run_until(s, lambda e: e.pipeline.ledger.total.completed >= 5)
    assert report["tasks"]["completed"] >= 5 and report["tasks"]["failed"] == 0
    assert fx.CALLS and all(c.context.timeout is None and c.context.deadline is None for c in fx.CALLS)


def test_a_raising_handler_is_retried_then_fails_the_task_with_its_cause() -> None:
    stage = _python_stage("handler_fixtures:boom", retries=2, breaker_threshold=0, backoff={"base": 0.001})
    report, exp = _run_until(_settings([stage, ANSWER]), lambda e: e.pipeline.ledger.total.failed >= 10)
    tasks = report["tasks"]
    assert tasks["failed"] >= 10 and tasks["completed"] == 0
    assert tasks["failed_by"] == {"handler_error": tasks["failed"]}
    attempts: dict[int, list[int]] = {}
    for call in fx.CALLS:
        attempts.setdefault(call.task.id, []).append(call.context.attempt)
    # Each task: attempt 1, then the two retries, on the same worker; a task still in service may be short.
    assert all(seen == [1, 2, 3][: len(seen)] for seen in attempts.values())
    assert sum(1 for seen in attempts.values() if len(seen) == 3) >= tasks["failed"]
    assert tasks["retries"] >= 2 * tasks["failed"]
    assert exp.pipeline.stages["fetch"].handler_errors["RuntimeError"] == len(fx.CALLS)


def test_a_handler_that_always_raises_is_named_failing_within_3_s() -> None:
    """The detector on (the other tests here turn it off): every call raises at once, so the queue stays short and
    nothing is congested, yet no task ends good. Real time, as users run their handlers."""
    stage = _python_stage("handler_fixtures:boom", breaker_threshold=0)
    s = _settings([stage, ANSWER], detector={"enabled": True}, throttle={"enabled": True})
    report, exp = _run_until(s, lambda e: e.detector.state is DetectorState.FAILING)
    assert exp.detector.state is DetectorState.FAILING, report["collapse"]
    onset = fx.CALLS[0].started - exp.pipeline.t0  # the first call, which raised
    episode = report["collapse"]["episodes"][0]
    assert (episode["kind"], episode["reason"]) == ("failing", "tasks_failing")
    delay = episode["detected_at"] - onset
    assert 1.4 <= delay <= 3.0, delay
    assert report["tasks"]["completed"] == 0 and report["tasks"]["rejected"] == 0  # admission was not cut
    assert report["stages"]["fetch"]["handler_errors"] == {"RuntimeError": report["stages"]["fetch"]["attempts"]}


def test_a_handler_overrunning_the_timeout_is_cancelled_and_counted() -> None:
    stage = _python_stage("handler_fixtures:hang", timeout=0.1, breaker_threshold=0)
    stopped: list[float] = []  # when the run was told to end

    def done(e: Experiment) -> bool:
        if e.pipeline.ledger.total.failed >= 5 and not stopped:
            stopped.append(e.clock.now())
        return bool(stopped)

    report, exp = _run_until(_settings([stage, ANSWER]), done)
    tasks = report["tasks"]
    assert tasks["failed"] >= 5 and tasks["failed_by"] == {"timeout": tasks["failed"]}
    # Cancelled at the deadline, every one of them; the run's end cancels the calls still hanging, earlier.
    cut = [c for c in fx.CALLS if c.cancelled and c.ended is not None and c.ended >= (c.context.deadline or 0)]
    before = [c for c in cut if c.ended is not None and c.ended < stopped[0]]
    timeouts = exp.pipeline.stages["fetch"].handler_timeouts
    # Every call cut at its deadline before the run was told to end is a counted timeout; while the run ends, a
    # call whose deadline just passed may be cancelled by the shutdown before its timeout fires (a loaded loop).
    assert 5 <= len(before) <= timeouts <= len(cut)
    # Without retries each timeout is a failed task (the ledger's count: the report was taken a moment earlier).
    assert timeouts == exp.pipeline.ledger.total.failed
    for call in cut:
        assert call.ended is not None and call.context.deadline is not None
        assert call.ended < call.context.deadline + 0.1  # cut at the deadline, not later
        # The deadline is the attempt's start plus the stage's timeout; the handler starts a moment after that
        # (later still on a loaded machine), so it gets at most the timeout, never more.
        assert 0 < call.context.deadline - call.started <= 0.1 + 1e-9


def test_calls_in_flight_at_the_end_are_cancelled_and_end_before_the_teardown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both workers hang in a call when the run ends: each call gets its cancellation (its own ``finally`` runs)
    before the stage's teardown, and no call is left pending when the loop closes."""
    stage = _python_stage("handler_fixtures:hang", timeout=30.0, teardown="handler_fixtures:count_cancelled")
    report, _ = _run_until(_settings([stage, ANSWER]), lambda e: len(fx.CALLS) == 0 and e.pipeline.elapsed() >= 0.3)
    assert report["tasks"]["completed"] == report["tasks"]["failed"] == 0
    # Each worker's call ended cancelled at the stop (the only calls: none timed out), all of them before teardown.
    assert len(fx.CALLS) == 2 and all(call.cancelled for call in fx.CALLS), fx.CALLS
    assert fx.TEARDOWNS == [2]
    assert not [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]


def _fault_run(action: str, params: dict[str, object]) -> tuple[dict[str, Any], Experiment, FaultRecord]:
    """Inject ``action`` on the python stage once the run is under way; stop once its verdict is in."""
    s = _settings(
        [_python_stage("handler_fixtures:record", timeout=0.5, retries=1, backoff={"base": 0.005}), ANSWER],
        slo={"availability": 0.8},
        recovery={"confirm": 0.3, "limit": 3.0},
    )
    faults: list[FaultRecord] = []

    def inject(e: Experiment) -> None:
        if not faults and e.pipeline.elapsed() >= 0.2:
            faults.append(e.injector.inject(action, "fetch", params, ttl=0.5))

    report, exp = _run_until(s, lambda e: bool(faults) and faults[0].outcome not in ("active", "recovering"), inject)
    assert faults, "the fault was never injected"
    return report, exp, faults[0]


def _calls_between(exp: Experiment, start: float, end: float) -> int:
    t0 = exp.pipeline.t0
    return sum(1 for c in fx.CALLS if start < c.started - t0 < end)


def test_tool_timeout_hangs_the_python_stage_instead_of_calling_it_and_recovery_is_measured() -> None:
    report, exp, fault = _fault_run("tool_timeout", {"timeout": 0.02})
    assert fault.reverted_at is not None
    # While the fault held, attempts hung and gave up instead of calling the handler; the tasks went on degraded.
    assert _calls_between(exp, fault.injected_at + 0.01, fault.reverted_at) == 0
    assert _calls_between(exp, fault.reverted_at, float("inf")) > 0  # and the calls came back after it
    assert exp.pipeline.stages["fetch"].degraded > 0 and report["tasks"]["degraded"] > 0
    assert report["tasks"]["failed"] == 0
    view = fault.as_dict()
    assert view["outcome"] == "recovered" and view["clock"] == "heal"
    assert view["mechanism_recovered_at"] is not None and view["recovery_s"] is not None


def test_llm_failure_fails_the_python_stage_instead_of_calling_it_and_recovery_is_measured() -> None:
    report, exp, fault = _fault_run("llm_failure", {})
    assert fault.reverted_at is not None
    assert _calls_between(exp, fault.injected_at + 0.01, fault.reverted_at) == 0
    assert report["tasks"]["failed_by"].get("llm_error", 0) > 0  # no fallback model: the tasks failed
    view = fault.as_dict()
    # Nothing heals it but its end: timed from when it was lifted (restore), not from injection.
    assert view["outcome"] == "recovered" and view["clock"] == "restore" and view["recovery_s"] is not None


def test_slow_agent_delays_the_call_and_the_context_says_so() -> None:
    stage = _python_stage("handler_fixtures:record", service={"distribution": "constant", "mean": 0.05})
    done: list[FaultRecord] = []

    def slow(e: Experiment) -> None:
        if not done:
            done.append(e.injector.inject("slow_agent", "worker-0", {"factor": 3.0}, ttl=30.0))

    _run_until(_settings([stage, ANSWER]), lambda e: sum("slow_agent" in c.context.faults for c in fx.CALLS) >= 3, slow)
    slowed = [c for c in fx.CALLS if c.context.faults == ("slow_agent",)]
    assert len(slowed) >= 3
    # Late to call by (3 - 1) x 0.05 s at least: the stage's first attempt began no earlier than the task's acceptance.
    assert all(c.started - c.task.accepted_at >= 0.1 - 1e-3 for c in slowed)


BAD_SPECS = [
    ("no_colon_here", 'expected "package.module:function"'),
    ("handler_fixtures:", 'expected "package.module:function"'),
    ("no_such_module_xyz:call", "cannot import module 'no_such_module_xyz' (ModuleNotFoundError"),
    ("broken_handler_module:call", "cannot import module 'broken_handler_module' (RuntimeError: cannot start)"),
    ("handler_fixtures:missing", "'handler_fixtures' has no attribute 'missing'"),
    ("handler_fixtures:tool.nope", "'handler_fixtures.tool' has no attribute 'nope'"),
    ("handler_fixtures:not_async", "is not an async callable"),
    ("handler_fixtures:VALUE", "is not an async callable"),
]


@pytest.mark.parametrize(("spec", "problem"), BAD_SPECS)
def test_a_bad_handler_is_a_config_error_naming_the_field(
    spec: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_handler_module.py").write_text('raise RuntimeError("cannot\\nstart")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "bad.toml"
    config.write_text(f'[[stages]]\nname = "fetch"\nkind = "python"\nhandler = "{spec}"\n')
    report = tmp_path / "report.json"
    for argv in (["run", "--config", str(config), "--realtime", "--report", str(report)], ["--config", str(config)]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert err.startswith(f"chaosd: error: {config}: stages.fetch.handler: ") and problem in err, err
    assert not report.exists()


@pytest.mark.parametrize(
    ("stage", "problem"),
    [
        ({"kind": "python"}, 'required for kind = "python"'),
        ({"kind": "tool", "handler": "handler_fixtures:record"}, 'only a kind = "python" stage takes a handler'),
    ],
)
def test_a_handler_belongs_to_python_stages_only(stage: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(None, {"stages": [{"name": "fetch", **stage}]}, "scenario")
    [line] = exc.value.lines()
    assert line.startswith(f"scenario: stages.fetch.handler: {problem}"), line


def test_virtual_time_refuses_python_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "handlers.toml"
    config.write_text('[[stages]]\nname = "fetch"\nkind = "python"\nhandler = "handler_fixtures:record"\n')
    report = tmp_path / "report.json"
    assert main(["run", "--config", str(config), "--duration", "5", "--report", str(report)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"chaosd: error: {config}: stages.fetch.kind: ") and "--realtime" in err
    assert "the daemon" in err and not report.exists() and fx.CALLS == []
    # The pipeline itself refuses a virtual clock, whoever builds it.
    with pytest.raises(ConfigError, match=r"stages\.fetch\.kind"):
        run_offline(load_settings(config), duration=1.0, warmup=0.0)
    assert fx.CALLS == []


def _start_echo_service(tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    with (tmp_path / "echo.err").open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "handlers" / "echo_service.py"), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 15.0)  # its first line says it is listening, and where
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("echo service listening on "):
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        pytest.fail(f"the echo service did not start: {line!r} {(tmp_path / 'echo.err').read_text()}")
    return proc, line.rsplit(" ", 1)[1].strip()


async def _stats(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(url.replace("/echo", "/stats")) as response:
        answer: dict[str, Any] = await response.json()
    return answer


def test_the_example_handler_calls_the_real_echo_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the example names examples.handlers.http_tool, from the checkout
    proc, url = _start_echo_service(tmp_path)
    try:
        monkeypatch.setenv("ECHO_URL", url)
        s = load_settings(ROOT / "examples" / "handlers" / "chaosd.toml")
        report, exp = _run_until(s, lambda e: e.pipeline.ledger.total.completed >= 20)
        stats = asyncio.run(_stats(url))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(10)
    tasks = report["tasks"]
    assert tasks["completed"] >= 20 and tasks["failed"] == 0, tasks
    assert stats["requests"] >= tasks["completed"]  # every completed task made its round trip
    assert exp.pipeline.stages["fetch"].handler_errors == {}
    assert code == 0  # stopped cleanly by its PID
    with pytest.raises(ConfigError, match=r"stages\.fetch\.kind"):  # and the example is real time only
        run_offline(s, duration=1.0, warmup=0.0)
