"""Prometheus exposition and OpenTelemetry spans, checked on a virtual-time run with fresh state each test."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from conftest import settings
from daemon_harness import ROOT, Daemon
from needs import program
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from chaosd.admission.detector import DetectorState
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.exporters import tracing as tracing_module
from chaosd.exporters.metrics import (
    AGENT_KINDS,
    AGENT_STATES,
    ENDINGS,
    FAIL_REASONS,
    OUTCOMES,
    RECOVERY_BUCKETS,
    REFUSAL_REASONS,
    REJECT_REASONS,
    make_registry,
)
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.faults import CATALOGUE


@dataclass(frozen=True)
class FakeServer:
    """A ServerStats: the dict stays mutable so a test can change it between scrapes."""

    refused: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    subscribers: int = 0


def _run_with(
    plan: Any,
    duration: float = 40.0,
    tracing: Tracing | None = None,
    server: FakeServer | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[Experiment, bytes]:
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)
        exp = Experiment(settings({"load": {"rate": 150.0}, **(overrides or {})}), clock, warmup=0.0)
        registry = make_registry(exp, tracing.counts if tracing is not None else None, server=server)
        if tracing is not None:
            tracing.attach(exp)
        scraped: list[bytes] = []

        async def wrapped(e: Experiment) -> None:
            await plan(e)
            e.completed_at_scrape = e.pipeline.ledger.total.completed  # type: ignore[attr-defined]
            scraped.append(registry.exposition())  # what GET /metrics serves

        loop.run_until_complete(exp.run(duration, plan=wrapped))
        return exp, scraped[0]
    finally:
        loop.close()


async def _kill_then_wait(exp: Experiment) -> None:
    await exp.clock.sleep_until(exp.pipeline.t0 + 15.0)
    exp.injector.inject("kill_leader", ttl=5.0)
    await exp.clock.sleep_until(exp.pipeline.t0 + 35.0)


@pytest.fixture
def idle() -> Iterator[Experiment]:
    """An experiment that has not started (scraping it reads the live objects all the same)."""
    loop = new_event_loop(virtual=True)
    try:
        yield Experiment(settings({}), LoopClock(loop), warmup=0.0)
    finally:
        loop.close()


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_exposition_names_types_labels_and_preinitialised_values() -> None:
    server = FakeServer({"connection_limit": 4}, connections=3, subscribers=1)
    exp, text = _run_with(_kill_then_wait, server=server)
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    expected_types = {
        "chaosd_build_info": "gauge",
        "chaosd_queue_depth": "gauge",
        "chaosd_queue_capacity": "gauge",
        "chaosd_queue_growth_rate": "gauge",
        "chaosd_offered_rate": "gauge",
        "chaosd_service_rate": "gauge",
        "chaosd_tasks": "counter",
        "chaosd_tasks_ended": "counter",
        "chaosd_tasks_in_flight": "gauge",
        "chaosd_worker_busy_seconds": "counter",
        "chaosd_tasks_rejected": "counter",
        "chaosd_tasks_failed": "counter",
        "chaosd_tasks_lost": "gauge",
        "chaosd_tasks_duplicated": "counter",
        "chaosd_task_wait_seconds": "histogram",
        "chaosd_task_sojourn_seconds": "histogram",
        "chaosd_collapse_state": "gauge",
        "chaosd_collapses": "counter",
        "chaosd_failing_state": "gauge",
        "chaosd_failing_episodes": "counter",
        "chaosd_detector_state": "gauge",
        "chaosd_throttle_factor": "gauge",
        "chaosd_leader_present": "gauge",
        "chaosd_leader": "gauge",
        "chaosd_sojourn_p95_seconds": "gauge",
        "chaosd_sojourn_p99_seconds": "gauge",
        "chaosd_faults_injected": "counter",
        "chaosd_faults_active": "gauge",
        "chaosd_fault_recovery_seconds": "histogram",
        "chaosd_resilience_score": "gauge",
        "chaosd_resilience_score_component": "gauge",
        "chaosd_resilience_grade": "gauge",
        "chaosd_agents": "gauge",
        "chaosd_spans_dropped": "counter",
        "chaosd_api_refused": "counter",
        "chaosd_api_connections": "gauge",
        "chaosd_api_sse_subscribers": "gauge",
        "process_open_fds": "gauge",
        "process_max_fds": "gauge",
        "process_resident_memory_bytes": "gauge",
        "process_cpu_seconds": "counter",
        "python_gc_objects_collected": "counter",
        "python_info": "gauge",
    }
    assert {name: families[name].type for name in expected_types} == expected_types

    def labels(name: str, key: str, suffix: str = "") -> set[str]:
        return {s.labels[key] for s in families[name].samples if s.name == name + suffix and key in s.labels}

    assert labels("chaosd_faults_injected", "action", "_total") == set(CATALOGUE)
    assert labels("chaosd_faults_active", "action") == set(CATALOGUE)
    assert labels("chaosd_tasks_rejected", "reason", "_total") >= set(REJECT_REASONS)
    assert labels("chaosd_tasks_failed", "reason", "_total") >= set(FAIL_REASONS)
    assert labels("chaosd_api_refused", "reason", "_total") == set(REFUSAL_REASONS)
    assert labels("chaosd_detector_state", "state") == {s.value for s in DetectorState}  # failing among them
    assert {(s.labels["kind"], s.labels["state"]) for s in families["chaosd_agents"].samples} == {
        (k, st) for k in AGENT_KINDS for st in AGENT_STATES
    }
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert values[("chaosd_faults_injected_total", (("action", "kill_leader"),))] == 1
    assert values[("chaosd_faults_injected_total", (("action", "tool_timeout"),))] == 0  # present, zero
    assert values[("chaosd_fault_recovery_seconds_count", (("action", "kill_leader"), ("kind", "mechanism")))] == 1
    assert values[("chaosd_tasks_total", (("outcome", "completed"),))] == exp.completed_at_scrape  # type: ignore[attr-defined]
    # Histogram buckets: log-spaced, factor ≤ 1.25, covering 1 ms … 30 s, counts cumulative.
    bounds = sorted(
        float(s.labels["le"])
        for s in families["chaosd_task_sojourn_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf"
    )
    assert bounds[0] <= 0.001 and bounds[-1] >= 30.0
    assert max(b / a for a, b in itertools.pairwise(bounds)) <= 1.25
    promtool = program("promtool")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_spans_for_faults_and_sampled_tasks() -> None:
    memory = InMemorySpanExporter()
    loop_holder: dict[str, Tracing] = {}

    async def plan(exp: Experiment) -> None:
        await _kill_then_wait(exp)

    # The tracer needs the run's clock: build it inside a tiny wrapper around _run_with's loop.
    loop = new_event_loop(virtual=True)
    try:
        clock = LoopClock(loop)
        tracing = Tracing(clock, 1_700_000_000.0, 10, processor=SimpleSpanProcessor(memory))
        loop_holder["t"] = tracing
        exp = Experiment(settings({"load": {"rate": 150.0}}), clock, warmup=0.0)
        tracing.attach(exp)
        loop.run_until_complete(exp.run(40.0, plan=plan))
    finally:
        loop.close()
    spans = memory.get_finished_spans()
    fault = [s for s in spans if s.name == "fault kill_leader"]
    assert len(fault) == 1
    events = [e.name for e in fault[0].events]
    assert events[0] == "mechanism_recovered" and "recovered" in events
    assert fault[0].attributes is not None and fault[0].attributes["chaosd.fault.action"] == "kill_leader"
    # Span times come from the (virtual) clock: injected 15 s into the run.
    assert fault[0].start_time == pytest.approx((1_700_000_000.0 + 15.0) * 1e9, abs=2e8)
    produced = {s.context.span_id: s for s in spans if s.name == "task produce"}
    processed = [s for s in spans if s.name == "task process"]
    assert produced and processed
    assert all(s.kind is SpanKind.CONSUMER and s.links and s.links[0].context.span_id in produced for s in processed)
    ids = [s.attributes["chaosd.task.id"] for s in processed if s.attributes]
    assert all(i % 10 == 0 for i in ids)  # sampled in chaosd's code by task id, one in ten
    children = [s for s in spans if s.name.startswith("stage ") and s.parent is not None]
    assert {s.parent.span_id for s in children if s.parent} <= {s.context.span_id for s in processed}
    hit = [s for s in processed if s.attributes and "chaosd.fault.actions" in s.attributes]
    assert hit and all("kill_leader" in s.attributes["chaosd.fault.actions"] for s in hit if s.attributes)
    assert tracing.dropped == 0


def test_a_retry_span_links_its_callers_first_attempt() -> None:
    """Callers that time out and retry: each sampled caller's retries get a "task retry" span linked to the
    caller's first attempt, and each attempt's processing links to its own produce span; without retries (the
    control) no retry span is made."""

    def spans(clients: dict[str, object]) -> list[Any]:
        memory = InMemorySpanExporter()
        loop = new_event_loop(virtual=True)
        try:
            clock = LoopClock(loop)
            tracing = Tracing(clock, 1_700_000_000.0, 5, processor=SimpleSpanProcessor(memory))
            overlay = {
                "load": {"rate": 150.0, "phases": [{"type": "spike", "at": 5.0, "rate": 1500.0, "duration": 5.0}]},
                "throttle": {"policy": "none"},
                "clients": clients,
            }
            exp = Experiment(settings(overlay), clock, warmup=0.0)
            tracing.attach(exp)
            loop.run_until_complete(exp.run(15.0))
        finally:
            loop.close()
        return list(memory.get_finished_spans())

    finished = spans({"timeout": 0.3, "retries": 2})
    first = {s.context.span_id: s for s in finished if s.name == "task produce"}
    retries = [s for s in finished if s.name == "task retry"]
    assert retries, "no retry of a sampled caller was traced"
    for span in retries:
        assert span.attributes is not None and span.attributes["chaosd.attempt"] in (2, 3)
        (link,) = span.links
        assert link.context.span_id in first  # the caller's first attempt
        assert link.attributes is not None and link.attributes["chaosd.link"] == "first_attempt"
    retry_ids = {s.context.span_id for s in retries}
    processed = [s for s in finished if s.name == "task process" and s.links]
    assert any(s.links[0].context.span_id in retry_ids for s in processed)  # a retry's processing, linked to it
    assert not [s for s in spans({"timeout": 0.3, "retries": 0}) if s.name == "task retry"]


def test_no_endpoint_means_no_exporter_and_the_protocol_picks_http_or_grpc() -> None:
    assert otlp_exporter_from_env({}) is None
    http = otlp_exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    grpc = otlp_exporter_from_env(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    )
    assert isinstance(http, HttpExporter) and isinstance(grpc, GrpcExporter)
    assert otlp_exporter_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}) is None
    off = Tracing(LoopClock(new_event_loop(virtual=True)), 0.0, 1000, None)
    assert not off.enabled and off.counts() == (0, 0)


def test_spans_beyond_the_queue_are_dropped_and_counted_and_exports_are_counted() -> None:
    sink = InMemorySpanExporter()
    loop = new_event_loop(virtual=True)
    try:
        tracing = Tracing(LoopClock(loop), 0.0, 1, sink)
        tracing.tracer.start_span("kept").end()
        tracing.in_queue += 2048  # as if the exporter had fallen behind by a whole queue
        tracing.tracer.start_span("dropped").end()
        assert tracing.dropped == 1
        tracing.in_queue -= 2048
        assert tracing.provider is not None
        tracing.provider.force_flush()
        assert [s.name for s in sink.get_finished_spans()] == ["kept"]
        assert tracing.counts() == (1, 1)
    finally:
        tracing.close()
        loop.close()


def test_the_daemon_process_is_exported_and_read_at_each_scrape(idle: Experiment) -> None:
    registry = make_registry(idle)
    before = _samples(registry)
    for name in ("process_open_fds", "process_max_fds", "process_resident_memory_bytes", "process_cpu_seconds_total"):
        assert before[(name, ())] > 0, name
    assert before[("python_gc_objects_collected_total", (("generation", "0"),))] >= 0
    assert any(name == "python_info" for name, _ in before)
    assert before[("process_open_fds", ())] <= before[("process_max_fds", ())]
    # The suite's other tests in this process may close a few descriptors meanwhile (a finalizer, a thread), so the
    # scrape is compared with the process's own count, taken beside it, not with a fixed 40.
    counted_before = len(os.listdir("/proc/self/fd"))
    before = _samples(registry)
    pipes = [os.pipe() for _ in range(20)]
    try:
        during = _samples(registry)
        counted_during = len(os.listdir("/proc/self/fd"))
    finally:
        for read_end, write_end in pipes:
            os.close(read_end)
            os.close(write_end)
    scraped = during[("process_open_fds", ())] - before[("process_open_fds", ())]
    counted = counted_during - counted_before
    assert counted >= 30 and abs(scraped - counted) <= 2, (scraped, counted)


def test_server_series_are_preinitialised_and_read_at_each_scrape(idle: Experiment) -> None:
    server = FakeServer({"connection_limit": 5, "unauthorized": 2}, connections=7, subscribers=3)
    registry = make_registry(idle, None, server=server)
    values = _samples(registry)
    refused = {dict(k)["reason"]: v for (name, k), v in values.items() if name == "chaosd_api_refused_total"}
    assert refused == {reason: 0.0 for reason in REFUSAL_REASONS} | {"connection_limit": 5.0, "unauthorized": 2.0}
    assert values[("chaosd_api_connections", ())] == 7
    assert values[("chaosd_api_sse_subscribers", ())] == 3
    text = generate_latest(registry).decode()
    assert "# HELP chaosd_api_refused_total Connections and requests refused by the HTTP server, by reason" in text

    server.refused["connection_limit"] = 6
    server.refused["too_many_cooks"] = 1  # a reason this version does not know still shows
    values = _samples(registry)
    assert values[("chaosd_api_refused_total", (("reason", "connection_limit"),))] == 6
    assert values[("chaosd_api_refused_total", (("reason", "too_many_cooks"),))] == 1

    without = _samples(make_registry(idle))
    assert not [name for name, _ in without if name.startswith("chaosd_api_")]


class _FlakyExporter(SpanExporter):
    """Accepts one batch, fails the next: both outcomes are counted by the worker thread."""

    def __init__(self) -> None:
        self.accepted = 0
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        if self.calls % 2:
            self.accepted += len(spans)
            return SpanExportResult.SUCCESS
        return SpanExportResult.FAILURE


def _yield_at_every_step_of(filename: str) -> Any:
    """A thread trace function that hands the GIL over between any two bytecodes of one module, so that
    two threads interleave inside its read-modify-write sequences (CPython otherwise rarely switches there)."""

    def step(frame: FrameType, event: str, arg: object) -> Any:
        os.sched_yield()  # releases the GIL: another thread runs now, mid-statement
        return step

    def call(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code.co_filename != filename:
            return None
        frame.f_trace_opcodes = True
        return step

    return call


def test_span_counters_stay_consistent_under_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop thread admits spans (_Gate.on_end) while the batch worker settles them (_Counting.export):
    # one span per batch makes the worker write the counters as often as the enders do.
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
    previous = threading.gettrace()
    threading.settrace(_yield_at_every_step_of(tracing_module.__file__))  # before Tracing starts the worker
    sink = _FlakyExporter()
    loop = new_event_loop(virtual=True)
    tracing = Tracing(LoopClock(loop), 0.0, 1, sink)
    enders, per_thread = 2, 500

    def end_spans() -> None:
        for _ in range(per_thread):
            tracing.tracer.start_span("hammer").end()

    threads = [threading.Thread(target=end_spans) for _ in range(enders)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert tracing.provider is not None and tracing.provider.force_flush(30_000)
        assert sink.calls > 100  # the worker really wrote the counters alongside the enders
        ended = enders * per_thread
        assert tracing.exported + tracing.dropped + tracing.in_queue == ended
        assert (tracing.exported, tracing.dropped, tracing.in_queue) == (sink.accepted, ended - sink.accepted, 0)
        assert tracing.counts() == (sink.accepted, ended - sink.accepted)
    finally:
        threading.settrace(previous)
        tracing.close()
        loop.close()


def test_probe_gauges_follow_the_leader_and_the_detectors_window_p95() -> None:
    seen: list[tuple[float, str | None, dict[tuple[str, tuple[tuple[str, str], ...]], float]]] = []

    async def plan(exp: Experiment) -> None:
        registry = make_registry(exp, None)
        p = exp.pipeline
        for at in (14.0, 15.05, 15.2, 17.0):  # before the kill, just after, before failover, after it
            await exp.clock.sleep_until(p.t0 + at)
            if at == 15.05:
                exp.injector.inject("kill_leader", ttl=5.0)
            seen.append((at, p.dispatcher.leader_id, _samples(registry)))
        snap = exp.telemetry.latest
        assert snap is not None
        seen.append((snap.sojourn_p95, None, _samples(registry)))

    _run_with(plan, duration=20.0)
    (_, old, before), (_, gone, killed), (_, none, waiting), (_, new, after), (p95, _, last) = seen

    def leaders(values: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
        return {dict(labels)["replica"]: v for (name, labels), v in values.items() if name == "chaosd_leader"}

    assert old is not None and before[("chaosd_leader_present", ())] == 1.0
    assert leaders(before) == {f"orchestrator-{i}": float(f"orchestrator-{i}" == old) for i in range(3)}
    assert gone is None and none is None  # the dead leader's lease has not run out yet
    assert killed[("chaosd_leader_present", ())] == waiting[("chaosd_leader_present", ())] == 0.0
    assert set(leaders(waiting).values()) == {0.0}
    assert new not in (None, old) and after[("chaosd_leader_present", ())] == 1.0
    assert leaders(after)[new] == 1.0 and sum(leaders(after).values()) == 1.0
    assert last[("chaosd_sojourn_p95_seconds", ())] == p95 > 0
    assert last[("chaosd_sojourn_p99_seconds", ())] >= p95


def _recovery_samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text.decode())
        if f.name == "chaosd_fault_recovery_seconds"
        for s in f.samples
    }


def test_the_served_recovery_histograms_are_rendered_again_when_a_fault_recovers() -> None:
    # GET /metrics keeps the histograms' text between recoveries: it must never serve a stale count.
    loop = new_event_loop(virtual=True)
    try:
        exp = Experiment(settings({"load": {"rate": 150.0}}), LoopClock(loop), warmup=0.0)
        registry = make_registry(exp)
        seen: list[tuple[bytes, bytes]] = []

        async def plan(e: Experiment) -> None:
            await e.clock.sleep_until(e.pipeline.t0 + 5.0)
            seen.append((registry.exposition(), registry.exposition()))
            e.injector.inject("kill_agent", "worker-0", ttl=2.0)
            await e.clock.sleep_until(e.pipeline.t0 + 20.0)
            seen.append((registry.exposition(), generate_latest(registry)))

        loop.run_until_complete(exp.run(25.0, plan=plan))
    finally:
        loop.close()
    (first, again), (served, rendered) = seen
    assert _recovery_samples(first) == _recovery_samples(again)
    before = _recovery_samples(first)
    after = _recovery_samples(served)
    key = ("chaosd_fault_recovery_seconds_count", (("action", "kill_agent"), ("kind", "mechanism")))
    assert before[key] == 0 and after[key] == 1  # the recovery is served, not the kept text from before it
    assert after == _recovery_samples(rendered)  # the same series and values as rendering everything afresh
    assert len(after) == len(CATALOGUE) * 2 * (len(RECOVERY_BUCKETS) + 3)


# ---------------------------------------------------------------------------------------------- task accounting


async def _spike_and_failures(exp: Experiment) -> None:
    """Failures (mcp_disconnect), degraded completions (llm_failure: the plan stage given up on), then a load
    spike: late tasks, and refusals once the small queue is full; scraped while tasks are still in flight."""
    t0 = exp.pipeline.t0
    await exp.clock.sleep_until(t0 + 5.0)
    exp.injector.inject("mcp_disconnect", ttl=4.0)
    exp.injector.inject("llm_failure", ttl=4.0)
    await exp.clock.sleep_until(t0 + 12.0)
    exp.injector.inject("load_spike", params={"factor": 8.0}, ttl=6.0)
    await exp.clock.sleep_until(t0 + 17.0)


def test_task_outcomes_add_up_on_a_scrape() -> None:
    """The identities docs/metrics.md states (section "Task accounting"), on one scrape of a run."""
    # The spike fills the queue; callers that wait 1.3 s (the deadline is 1 s) and retry once make wasted
    # completions and retries.
    overrides = {"throttle": {"policy": "none"}, "queue": {"capacity": 1000}, "clients": {"timeout": 1.3, "retries": 1}}
    exp, text = _run_with(_spike_and_failures, duration=20.0, overrides=overrides)
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}

    def by(family: str, label: str) -> dict[str, float]:
        return {s.labels[label]: s.value for s in families[family].samples if s.name.endswith("_total")}

    tasks, ended = by("chaosd_tasks", "outcome"), by("chaosd_tasks_ended", "outcome")
    assert set(tasks) == set(OUTCOMES) and set(ended) == set(ENDINGS)
    in_flight = families["chaosd_tasks_in_flight"].samples[0].value
    lost = families["chaosd_tasks_lost"].samples[0].value
    # Every outcome the identities split into happened in this run: none of them holds by being 0.
    assert all(ended[o] > 0 for o in ENDINGS), ended
    assert in_flight > 0
    attempts = by("chaosd_attempts", "kind")
    assert attempts["first"] == tasks["offered"] and attempts["retry"] > 0
    assert tasks["offered"] + attempts["retry"] == tasks["accepted"] + tasks["rejected"]
    assert tasks["accepted"] == tasks["completed"] + tasks["failed"] + in_flight
    assert 0 <= lost <= in_flight
    assert tasks["late"] <= tasks["completed"]
    assert ended["good"] + ended["wasted"] + ended["late"] + ended["degraded"] == tasks["completed"]
    assert (ended["late"], ended["failed"], ended["rejected"]) == (tasks["late"], tasks["failed"], tasks["rejected"])
    assert sum(ended.values()) + in_flight == sum(attempts.values())  # a partition: sum() is meaningful
    assert by("chaosd_abandoned", "reason")["timeout"] >= ended["wasted"]  # each wasted one was abandoned first
    assert sum(by("chaosd_tasks_rejected", "reason").values()) == tasks["rejected"]
    assert sum(by("chaosd_tasks_failed", "reason").values()) == tasks["failed"]
    # The goodput counter is the one the detector's goodput gauge is computed from.
    assert ended["good"] == exp.pipeline.ledger.good > 0
    busy = families["chaosd_worker_busy_seconds"].samples[0].value
    workers = len(exp.pipeline.workers)
    assert 0 < busy <= workers * 17.0 + 1e-6  # at most every worker busy since the start (scraped at 17 s)


def test_recovery_buckets_are_log_spaced_from_10_ms_to_10_min_with_the_alert_threshold_an_edge() -> None:
    _, text = _run_with(_kill_then_wait)
    samples = _recovery_samples(text)
    key = (("action", "kill_leader"), ("kind", "mechanism"))
    edges = sorted(
        float(dict(labels)["le"])
        for name, labels in samples
        if name == "chaosd_fault_recovery_seconds_bucket"
        and dict(labels)["action"] == "kill_leader"
        and dict(labels)["kind"] == "mechanism"
        and dict(labels)["le"] != "+Inf"
    )
    assert edges == sorted(RECOVERY_BUCKETS)
    assert edges[0] == 0.01 and edges[-1] == 600.0
    assert max(b / a for a, b in itertools.pairwise(edges)) <= 1.5 + 1e-9
    rules = yaml.safe_load((ROOT / "config" / "prometheus" / "rules.yml").read_text(encoding="utf-8"))
    slow = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "ChaosdSlowRecovery")
    threshold = re.search(r">\s*([0-9.]+)\s*$", slow["expr"])
    assert threshold is not None and float(threshold.group(1)) in edges
    count = samples[("chaosd_fault_recovery_seconds_count", key)]
    assert count == 1 and samples[("chaosd_fault_recovery_seconds_bucket", (*key, ("le", "600.0")))] == count


# ---------------------------------------------------------------------------------------------- docs/metrics.md

METRICS_DOC = ROOT / "docs" / "metrics.md"
_DOC_ROW = re.compile(r"^\|\s*`([a-z_:][a-z0-9_:]*)`\s*\|\s*(gauge|counter|histogram)([^|]*)\|([^|]*)\|", re.MULTILINE)
_DOC_VALUES = re.compile(r"`(\w+)` = ([^;`(]*)")
_VALUE = re.compile(r"[A-Za-z0-9_+]+")


@dataclass(frozen=True)
class _Documented:
    type: str
    one_of: bool  # "gauge (1)": a single series of the listed ones (the current policy), not all of them
    values: dict[str, set[str]]  # label → the closed list of values the table gives


def _documented(path: Path = METRICS_DOC) -> dict[str, _Documented]:
    rows = {}
    for match in _DOC_ROW.finditer(path.read_text(encoding="utf-8")):
        name, kind, note, labels = match.groups()
        values = {}
        for label, listed in _DOC_VALUES.findall(labels):
            items = [item.strip() for item in listed.split(",")]
            if all(_VALUE.fullmatch(item) for item in items):  # "orchestrator-0 …" and the like are not lists
                values[label] = set(items)
        rows[name] = _Documented(kind, note.strip() == "(1)", values)
    return rows


def _exposed_name(family_type: str, name: str) -> str:
    return name + "_total" if family_type == "counter" else name


def test_the_documented_rows_are_parsed() -> None:
    rows = _documented()
    assert rows["chaosd_tasks_total"] == _Documented("counter", False, {"outcome": set(OUTCOMES)})
    assert rows["chaosd_tasks_failed_total"].values == {"reason": set(FAIL_REASONS)}
    assert rows["chaosd_fault_recovery_seconds"].values == {"kind": {"mechanism", "service"}}
    assert rows["chaosd_agents"].values == {"kind": set(AGENT_KINDS), "state": set(AGENT_STATES)}
    assert rows["chaosd_admission_info"].one_of
    assert "replica" not in rows["chaosd_leader"].values  # "orchestrator-0 … (one per …)" is not a list
    assert rows["process_open_fds"].type == "gauge"


def test_docs_list_every_series_a_real_daemon_exports_and_nothing_else(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path)
    try:
        with urllib.request.urlopen(daemon.base + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        daemon.terminate()
        daemon.kill()
    documented = _documented()
    exported = {_exposed_name(f.type, f.name): f for f in text_string_to_metric_families(text) if f.type != "unknown"}
    assert len(exported) == len(list(text_string_to_metric_families(text))), "a family of unknown type"
    undocumented = sorted(set(exported) - set(documented))
    assert not undocumented, f"exported, not in docs/metrics.md: {undocumented}"
    missing = sorted(name for name in documented if name.startswith("chaosd_") and name not in exported)
    assert not missing, f"in docs/metrics.md, not exported: {missing}"
    problems = []
    for name, family in exported.items():
        row = documented[name]
        if row.type != family.type:
            problems.append(f"{name}: documented as a {row.type}, exported as a {family.type}")
        samples: list[Sample] = family.samples
        for label, listed in row.values.items():
            seen = {s.labels[label] for s in samples if label in s.labels}
            if not (seen <= listed if row.one_of else seen == listed):
                problems.append(f"{name}{{{label}}}: documented {sorted(listed)}, exported {sorted(seen)}")
    assert not problems, "\n".join(problems)
