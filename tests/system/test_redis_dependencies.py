"""A python stage's dependency faults, per-stage telemetry and handler lifecycle on the Redis backend: the handler
runs in real worker processes and calls a real local aiohttp service through its proxy; the daemon injects
``dependency_latency`` and ``dependency_error`` and reads back, through Redis, what every worker's stage did.
Real Redis, real processes, real HTTP on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import redis
from daemon_harness import Daemon, wait_for
from dependency_handlers import recorded
from redis_dependency_handlers import CALLS_VARIABLE
from redis_harness import redis_settings, running_redis
from test_redis_backend import RECOVERY, experiment, until

from chaosd.backends import make_pipeline
from chaosd.backends.redis.control import Controls
from chaosd.backends.redis.replies import Heartbeat, StageDocument, StageTotals
from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.backends.redis.worker import _set_flags
from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.histogram import LogHistogram, percentiles
from chaosd.experiment.runner import Experiment
from chaosd.faults.proxy import NO_FAULTS, DependencyFaults
from chaosd.pipeline import Pipeline

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "redis_dependency_handlers"
WORKERS = 3
RATE = 12.0  # tasks/s: three workers serve 14/s while each call takes 0.2 s more, so no backlog builds
# Attempts in each window with no fault: a p95 over 48 holds two attempts a loaded host held up 0.2 s (one over 24
# did not, in a full parallel run), while the fault's 0.2 s on every attempt still moves it.
QUIET_ATTEMPTS = 48


def _stage(setup: str = "setup") -> dict[str, Any]:
    return {
        "name": "call",
        "kind": "python",
        "handler": f"{HANDLERS}:call",
        "setup": f"{HANDLERS}:{setup}",
        "teardown": f"{HANDLERS}:teardown",
        "dependencies": ["svc"],
        "service": {"distribution": "exponential", "mean": 0.005},
        "timeout": 2.0,
        "retries": 0,
        "breaker_threshold": 0,
    }


class Service:
    """The handlers module's aiohttp service in a child process, on a free port."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / f"{HANDLERS}.py")],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("listening "), line
        self.url = f"http://127.0.0.1:{line.split()[1]}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    s = Service()
    try:
        yield s
    finally:
        s.stop()


class Calls:
    """The lines the handlers wrote (setup, calls, teardown), from every worker process."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[dict[str, Any]]:
        return recorded(self.path)

    def calls(self, since: float = 0.0) -> list[dict[str, Any]]:
        """Calls begun after ``since`` (wall time)."""
        return [c for c in self.all() if c["event"] == "call" and c["t"] - c["latency"] > since]


def _handler_env(monkeypatch: pytest.MonkeyPatch, calls: Path) -> None:
    # The local workers fork from a spawner that inherits this environment: the handlers module is in tests/.
    monkeypatch.setenv(CALLS_VARIABLE, str(calls))
    monkeypatch.setenv("PYTHONPATH", f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def _window(before: npt.NDArray[np.int64], after: npt.NDArray[np.int64]) -> tuple[float, float]:
    """p50 and p95 of the attempts between two readings of the daemon's mirrored latency histogram."""
    p50, p95 = percentiles(after - before, (0.5, 0.95))
    return p50, p95


def _lifecycle_in_order(lines: list[dict[str, Any]]) -> dict[int, list[str]]:
    """Per worker process, its events in order; each must be setup, its calls, teardown."""
    by_pid: dict[int, list[str]] = {}
    for line in lines:
        by_pid.setdefault(line["pid"], []).append(line["event"])
    for pid, events in by_pid.items():
        assert events[0] == "setup" and events[-1] == "teardown", (pid, events[:3], events[-3:])
        assert events.count("setup") == 1 and events.count("teardown") == 1, pid
    return by_pid


@pytest.mark.slow  # about 15 s of real time
def test_dependency_faults_reach_the_worker_processes_and_the_daemon_sees_each_stage(
    tmp_path: Path, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(tmp_path / "calls.jsonl")
    _handler_env(monkeypatch, calls.path)
    with running_redis(tmp_path) as server:
        overlay = redis_settings(
            server.url,
            stages=[_stage()],
            dependencies={"svc": {"upstream": service.url}},
            load={"rate": RATE, "producers": 1},
            workers={"count": WORKERS},
            recovery=RECOVERY,
            throttle={"enabled": False},
        )
        settings = load_settings(None, overlay)
        client = redis.Redis.from_url(server.url, decode_responses=True)
        seen: dict[str, Any] = {}

        async def plan(exp: Experiment) -> None:
            p = exp.pipeline
            rt = p.host
            assert isinstance(rt, RedisRuntime)
            stage = p.stages["call"]
            stats = stage.stats
            latency = stats.latency
            clock = exp.clock

            async def attempts_grow(n: int, what: str) -> npt.NDArray[np.int64]:
                start = stats.attempts
                await until(exp, lambda: stats.attempts >= start + n, 15, what)
                return latency.snapshot()

            await until(exp, lambda: (b := exp.injector.baseline()) is not None and b.goodput > 4, 20, "baseline")
            # The no-fault control: a few ms through the proxy, as the daemon's mirror of the stage reads it.
            quiet = latency.snapshot()
            seen["quiet"] = _window(quiet, await attempts_grow(QUIET_ATTEMPTS, "attempts with no fault"))

            # dependency_latency: every worker's proxy delays the handler's real call
            injected = clock.now()
            seen["latency_injected"] = time.time()
            record = exp.injector.inject("dependency_latency", "call/svc", {"latency": 0.2}, 2.5)
            edge = LogHistogram.low * LogHistogram.factor ** np.arange(len(quiet))
            slow = int(np.searchsorted(edge, 0.2))  # the first bucket holding 0.2 s and above
            await until(
                exp, lambda: int(latency.snapshot()[slow:].sum()) > int(quiet[slow:].sum()), 3, "a slow attempt"
            )
            seen["reached_s"] = clock.now() - injected
            during = latency.snapshot()
            seen["fault"] = _window(during, await attempts_grow(10, "attempts under the latency"))
            await until(exp, lambda: not record.active, 5, "the latency's TTL")
            ended = clock.now()
            seen["latency_ended"] = time.time()
            # The daemon's p95 over the attempts from 0.6 s after the TTL: by then the lift has reached the workers
            # (a heartbeat), a call already held by the proxy has had its 0.2 s, and its figures have reached the
            # daemon (a heartbeat, a poll).
            await until(exp, lambda: clock.now() >= ended + 0.6, 1, "0.6 s after the TTL")
            after = latency.snapshot()
            seen["after"] = _window(after, await attempts_grow(QUIET_ATTEMPTS, "attempts after the latency"))

            # dependency_error 503: the handler raises on the status; failures by reason grow, then stop
            failed = stats.failures.get("handler_error", 0)
            record = exp.injector.inject("dependency_error", "call/svc", {"status": 503}, 1.5)
            await until(exp, lambda: stats.failures.get("handler_error", 0) >= failed + 5, 5, "handler errors")
            await until(exp, lambda: not record.active, 5, "the error's TTL")
            ended = clock.now()
            await until(exp, lambda: clock.now() >= ended + 0.5, 1, "0.5 s after the TTL")
            settled = stats.failures.get("handler_error", 0)
            await attempts_grow(16, "attempts after the error")
            seen["errors_during"] = settled - failed
            seen["errors_after"] = stats.failures.get("handler_error", 0) - settled
            seen["handler_errors"] = dict(stage.handler_errors)

            # attempts in the daemon = calls the handlers made, in every worker (up to a heartbeat's lag)
            def gap() -> int:
                return abs(stats.attempts - len(calls.calls()))

            await until(exp, lambda: gap() <= 2, 5, "the daemon's attempts to match the calls")
            await rt.refresh()
            seen["attempts"] = stats.attempts
            seen["calls"] = len(calls.calls())
            seen["served"] = client.xlen("chaosd:results")
            seen["failures"] = dict(stats.failures)
            seen["retries"] = stats.retries
            seen["doc"] = client.get("chaosd:control:stages")
            exp.stop.set()

        report, _ = experiment(settings, 90.0, 0.5, plan)
        client.close()
    lines = calls.all()
    made = [c for c in lines if c["event"] == "call"]
    measured = tmp_path / "measured.json"  # what the assertions below read, kept beside the calls for a look

    # The daemon's mirror of the stage: a few ms with no fault (the control), every attempt 0.2 s more while the
    # latency acts, a few ms again once it is lifted. The p95 bound leaves room for a scheduling delay or two on a
    # loaded host; the median is the one such delays do not move.
    assert seen["quiet"][0] < 0.02 and seen["quiet"][1] < 0.15, seen
    # Seen by the daemon once a slowed attempt has ended in a worker and its heartbeat has come (0.2 s at least).
    assert seen["reached_s"] < 1.5, seen
    assert seen["fault"][0] >= 0.2 and seen["fault"][1] >= 0.2, seen
    assert seen["after"][0] < 0.02 and seen["after"][1] < 0.15, seen  # reverted at the TTL

    # The handlers' own clocks: 0.2 s more while the latency acted (the worker knew the fault by name), a few ms
    # once it was lifted.
    def begun(c: dict[str, Any]) -> float:
        return float(c["t"] - c["latency"])

    named = [c for c in made if "dependency_latency" in c["faults"]]
    # A call whose context named the fault may reach its proxy just after the worker heard it lifted (its handler was
    # still connecting): it is served plainly, as it should be. Those begun in the fault's last 0.3 s (a heartbeat
    # and a poll) are left out, as below.
    slowed = [c for c in named if begun(c) < seen["latency_ended"] - 0.3]
    assert len(slowed) >= 10 and min(c["latency"] for c in slowed) >= 0.2, slowed[:5]

    # Applied at once: the switch wakes the daemon's monitor, which writes the stage document, which each worker
    # reads at its next heartbeat; from the first call begun under it to the TTL, no call went without it.

    first_slow = min(begun(c) for c in named)
    before = [begun(c) for c in made if not c["faults"] and seen["latency_injected"] < begun(c) < first_slow]
    seen["apply_lag_s"] = max(before, default=seen["latency_injected"]) - seen["latency_injected"]
    assert seen["apply_lag_s"] < 0.3, seen
    assert not [c for c in made if not c["faults"] and first_slow < begun(c) < seen["latency_ended"] - 0.3]
    # Lifted at the TTL: the last call begun under it began within a heartbeat and a poll of its end, and the calls
    # begun after that are fast again.
    last_slow = max(begun(c) for c in named)
    seen["lift_lag_s"] = last_slow - seen["latency_ended"]
    assert seen["lift_lag_s"] < 0.3, seen
    later = [c["latency"] for c in made if begun(c) > last_slow and not c["faults"]]
    assert len(later) >= 16 and sorted(later)[len(later) // 2] < 0.05, later[:5]
    erred = [c for c in made if "dependency_error" in c["faults"]]
    assert erred and {c["status"] for c in erred} == {503}
    assert not any(c["status"] == 503 for c in made if "dependency_error" not in c["faults"])
    # failures by reason, in the daemon's mirror = the 503s the handlers saw; none once the fault ended
    assert seen["errors_during"] >= 5 and seen["errors_after"] == 0, seen
    assert seen["failures"] == {"handler_error": len(erred)}, (seen["failures"], len(erred))
    assert seen["handler_errors"] == {"ClientResponseError": len(erred)}, seen["handler_errors"]
    assert seen["retries"] == 0
    assert abs(seen["attempts"] - seen["calls"]) <= 2, seen
    assert abs(seen["attempts"] - seen["served"]) <= 2 + RATE, seen  # results read and heartbeats: a second apart
    assert "dependencies" not in json.loads(seen["doc"])["stages"]["call"]  # both faults lifted in the document
    # setup, then the calls, then teardown: once each in each worker process (stopped by SIGTERM)
    assert len(_lifecycle_in_order(lines)) == WORKERS
    assert report["tasks"]["duplicated"] == 0
    measured.write_text(json.dumps({k: v for k, v in seen.items() if k != "doc"}))


def test_setup_and_teardown_run_once_per_worker_process_also_on_sigterm_to_the_daemon(
    tmp_path: Path, service: Service
) -> None:
    calls = Calls(tmp_path / "calls.jsonl")
    with running_redis(tmp_path) as server:
        config = tmp_path / "chaosd.toml"
        config.write_text(
            f"""
[backend]
kind = "redis"
url = "{server.url}"
poll = 0.05
[load]
rate = 20.0
producers = 1
[workers]
count = 2
[dependencies.svc]
upstream = "{service.url}"

[[stages]]
name = "call"
kind = "python"
handler = "{HANDLERS}:call"
setup = "{HANDLERS}:setup"
teardown = "{HANDLERS}:teardown"
dependencies = ["svc"]
service = {{ distribution = "exponential", mean = 0.005 }}
timeout = 2.0
"""
        )
        env = {CALLS_VARIABLE: str(calls.path), "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
        daemon = Daemon(tmp_path, env=env, config=config)
        try:

            def pids() -> set[int]:
                return {c["pid"] for c in calls.calls()}

            wait_for(lambda: len(pids()) == 2 and len(calls.calls()) >= 20, 30, "calls from both worker processes")
            code = daemon.terminate()
        finally:
            daemon.kill()
    assert code == 0
    lines = calls.all()
    by_pid = _lifecycle_in_order(lines)
    assert len(by_pid) == 2 and all(events.count("call") >= 1 for events in by_pid.values()), by_pid.keys()
    setups = [c for c in lines if c["event"] == "setup"]
    # the URL the handler calls is its own worker's proxy, not the service's
    assert all(s["dependencies"]["svc"].startswith("http://127.0.0.1:") for s in setups)
    assert all(s["dependencies"]["svc"] != service.url for s in setups)
    assert len({s["dependencies"]["svc"] for s in setups}) == 2  # one proxy per worker process


def test_a_worker_whose_setup_raises_exits_naming_the_stage(tmp_path: Path, service: Service) -> None:
    overlay = redis_settings(
        "redis://127.0.0.1:1/0",  # never reached: the setup fails before the worker connects
        stages=[_stage("failing_setup")],
        dependencies={"svc": {"upstream": service.url}},
    )
    settings_json = tmp_path / "worker.json"
    settings_json.write_text(json.dumps(overlay))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, "-m", "chaosd", "worker", "--settings-json", str(settings_json), "--id", "w-setup"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "chaosd: error: startup: stages.call.setup: redis_dependency_handlers:failing_setup raised "
        "ConnectionRefusedError: cannot reach the model for call"
    ], done.stderr


def test_a_stage_documents_dependency_faults_reach_a_workers_stage() -> None:
    """The daemon's stage document carries each stage's dependency faults; a worker's stage takes them whole,
    and a document without them lifts them (the negative control)."""
    overlay = redis_settings("redis://127.0.0.1:1/0", stages=[_stage()], dependencies={"svc": {"upstream": "http://x"}})
    settings = load_settings(None, overlay)
    loop = new_event_loop(virtual=False)
    try:
        clock = LoopClock(loop)
        daemon = make_pipeline(settings, clock)  # built, never started
        stage = Pipeline(settings, clock).stages["call"]  # a worker process's copy, as RedisWorker builds it
        controls = Controls(daemon, ())
        plain = controls.stages_doc()
        daemon.dependency_fault("call", "svc", "dependency_latency", {"latency": 0.2, "jitter": 0.0})
        daemon.dependency_fault("call", "svc", "dependency_error", {"error_status": 503, "error_probability": 1.0})
        doc = StageDocument.from_json(controls.stages_doc())
        _set_flags(stage, doc.flags("call"))
        assert stage.dependency_faults["svc"] == DependencyFaults(latency=0.2, error_status=503)
        daemon.dependency_fault("call", "svc", "dependency_latency", None)
        daemon.dependency_fault("call", "svc", "dependency_error", None)
        assert controls.stages_doc() == plain  # no fault: the document as before dependencies existed
        _set_flags(stage, StageDocument.from_json(controls.stages_doc()).flags("call"))
        assert stage.dependency_faults["svc"] == NO_FAULTS
    finally:
        loop.close()


def test_the_daemon_adds_up_every_workers_stage_figures_and_shows_the_worst_breaker() -> None:
    # Two workers' histograms merged through sparse bucket deltas read as one histogram of all their samples.
    a, b, whole = LogHistogram(), LogHistogram(), LogHistogram()
    for i, v in enumerate([0.001, 0.002, 0.25, 0.3, 0.0005, 1.5] * 20):
        (a if i % 2 else b).add(v)
        whole.add(v)
    mirror = LogHistogram()
    for h in (a, b):
        shot = h.snapshot()
        mirror.add_counts({int(i): int(shot[i]) for i in np.flatnonzero(shot)}, h.sum)
    assert mirror.count == whole.count == 120 and mirror.sum == pytest.approx(whole.sum)
    assert percentiles(mirror.snapshot(), (0.5, 0.95)) == percentiles(whole.snapshot(), (0.5, 0.95))
    assert LogHistogram().count == 0  # the control: nothing added, nothing read

    reply = {
        "call:retries": "3",
        "call:fail.handler_error": "7",
        "call:fail.not_a_reason": "9",  # another version's key: skipped
        "call:err.ClientResponseError": "7",
        "call:b.12": "5",
        "call:lat_ns": "2500000000",
        "call:degraded": "1",
        "other:trips": "2",
        "call:what": "x",
    }
    totals = StageTotals.from_reply(reply)
    call = totals["call"]
    assert (call.counter("retries"), call.counter("degraded"), call.counter("trips")) == (3, 1, 0)
    assert call.failures == {"handler_error": 7} and call.handler_errors == {"ClientResponseError": 7}
    assert call.buckets == {12: 5} and call.latency_ns == 2_500_000_000
    assert totals["other"].counter("trips") == 2

    settings = load_settings(None, redis_settings("redis://127.0.0.1:1/0", stages=[_stage()], dependencies={
        "svc": {"upstream": "http://x"}
    }))  # fmt: skip
    loop = new_event_loop(virtual=False)
    try:
        p = make_pipeline(settings, LoopClock(loop))
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        monitor = rt.monitor
        stage = p.stages["call"]
        monitor._mirror(stage, call)
        monitor._mirror(stage, call)  # the same sums again: nothing new booked
        assert (stage.stats.attempts, stage.stats.latency.sum) == (5, pytest.approx(2.5))
        assert stage.stats.failures == {"handler_error": 7} and stage.stats.retries == 3
        grown = StageTotals.of({"b.12": 6, "b.40": 2, "lat_ns": 4_000_000_000})
        monitor._mirror(stage, grown)
        assert (stage.stats.attempts, stage.stats.latency.sum) == (8, pytest.approx(4.0))

        workers = list(p.workers)
        now = p.clock.now()
        opened = Heartbeat.from_reply({"instance": "1-a", "breakers": json.dumps({"call": ["open", 5.0]})})
        half = Heartbeat.from_reply({"instance": "2-b", "breakers": json.dumps({"call": ["half_open", 0.0]})})
        closed = Heartbeat.from_reply({"instance": "2-b", "busy": ""})
        gone = Heartbeat.from_reply({})
        monitor._heartbeats(workers, (opened, half))
        monitor._mirror_breakers()
        assert stage.breaker(now) == "open" and stage.open_until >= now + 4.0  # any worker's open: open
        monitor._heartbeats(workers, (gone, half))
        monitor._mirror_breakers()
        assert stage.breaker(now) == "half_open"  # the open one's process is gone
        monitor._heartbeats(workers, (gone, closed))
        monitor._mirror_breakers()
        assert stage.breaker(now) == "closed"  # the control: no worker's breaker is other than closed
    finally:
        loop.close()
