"""A sampled task on the Redis backend is one trace from producer to sink: the daemon's producer span goes into
the stream entry as a W3C ``traceparent``, and the worker process that serves the task continues it, exporting
its spans itself. A real OTLP/HTTP receiver, real Redis, real worker processes."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Any

import pytest
from daemon_harness import Sink
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from redis_harness import RedisServer, redis_settings
from test_redis_backend import RECOVERY, server, shared_redis, until

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop, unix_time
from chaosd.experiment.runner import Experiment
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.pipeline.tracing import parse_traceparent, traceparent

pytestmark = pytest.mark.timeout(120)
__all__ = ["server", "shared_redis"]  # the fixtures, used by name

EVERY = 10
SERVED = 150  # about 15 sampled tasks, 2.5 s at 60 tasks/s
STAGES = [
    {"name": "search", "kind": "tool", "service": {"distribution": "exponential", "mean": 0.004}},
    {"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.006}},
]


def received(sink: Sink) -> list[dict[str, Any]]:
    """Every span the receiver got, with the pid of the process that sent it."""
    out = []
    for path, body in list(sink.bodies):
        if path != "/v1/traces":
            continue
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {a.key: a.value for a in rs.resource.attributes}
            pid = resource["process.pid"].int_value
            instance = resource["service.instance.id"].string_value
            for ss in rs.scope_spans:
                for span in ss.spans:
                    attributes = {a.key: a.value for a in span.attributes}
                    task = attributes["chaosd.task.id"].int_value if "chaosd.task.id" in attributes else None
                    out.append(
                        {
                            "pid": pid,
                            "instance": instance,
                            "name": span.name,
                            "trace": span.trace_id,
                            "span": span.span_id,
                            "parent": span.parent_span_id,
                            "task": task,
                        }
                    )
    return out


def test_traceparent_round_trips_and_refuses_what_is_not_one() -> None:
    class Context:
        trace_id, span_id, trace_flags = 0xABC, 0x12, 1

    header = traceparent(Context())
    assert header == f"00-{0xABC:032x}-{0x12:016x}-01"
    assert parse_traceparent(header) == (0xABC, 0x12, 1)
    assert traceparent(None) is None
    for bad in ("", "00-xyz", f"00-{0:032x}-{0x12:016x}-01", f"01-{0xABC:032x}-{0x12:016x}-01"):
        assert parse_traceparent(bad) is None


@pytest.mark.slow  # several seconds of real time
def test_a_sampled_task_is_one_trace_across_the_daemon_and_a_worker_process(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = Sink()
    try:
        # The worker processes inherit the daemon's environment: the same receiver, flushed often.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{sink.port}/v1/traces")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        overlay = redis_settings(
            server.url,
            stages=STAGES,
            load={"rate": 60.0},
            recovery=RECOVERY,
            throttle={"enabled": False},
            tracing={"sample_every": EVERY},
        )
        settings = load_settings(None, overlay)
        loop = new_event_loop(virtual=False)
        clock = LoopClock(loop)

        async def served(exp: Experiment) -> None:
            await until(exp, lambda: exp.pipeline.ledger.total.completed >= SERVED, 20, f"{SERVED} tasks served")
            exp.stop.set()

        async def go() -> dict[str, Any]:
            exp = Experiment(settings, clock, warmup=0.0, virtual=False)
            tracing = Tracing(clock, unix_time() - clock.now(), EVERY, otlp_exporter_from_env())
            tracing.attach(exp)
            report = await exp.run(30.0, plan=served)
            assert tracing.close(5.0)
            return report

        try:
            report = loop.run_until_complete(go())
        finally:
            loop.close()
        assert report["tasks"]["completed"] > 100

        # The workers flush as they exit; wait for their spans with a deadline.
        deadline = time.monotonic() + 10.0
        spans = received(sink)
        while not any(s["pid"] != os.getpid() for s in spans) and time.monotonic() < deadline:
            time.sleep(0.05)
            spans = received(sink)
    finally:
        sink.close()

    mine = os.getpid()
    produced = {s["span"]: s for s in spans if s["name"] == "task produce"}
    processed = [s for s in spans if s["name"] == "task process"]
    assert produced and all(s["pid"] == mine for s in produced.values())
    assert processed and all(s["pid"] != mine for s in processed)  # served in the worker processes
    assert len({s["instance"] for s in processed}) == 2 and mine not in {s["pid"] for s in processed}
    # Every served sampled task continues its producer's span: same trace, that span its parent.
    for s in processed:
        parent = produced.get(s["parent"])
        assert parent is not None and parent["trace"] == s["trace"] and parent["task"] == s["task"], s
    # The stages are the task's children, from the same worker process.
    by_span = {s["span"]: s for s in processed}
    children: dict[bytes, list[str]] = defaultdict(list)
    for s in spans:
        if s["name"].startswith("stage ") and s["parent"] in by_span:
            assert s["pid"] == by_span[s["parent"]]["pid"] and s["trace"] == by_span[s["parent"]]["trace"]
            children[s["parent"]].append(s["name"])
    assert all(sorted(children[span]) == ["stage search", "stage work"] for span in by_span)
    # Only the sampled tasks cross with a context: the workers traced no task the producer did not sample.
    assert all(s["task"] % EVERY == 0 for s in processed)
    assert len(processed) >= 0.8 * len(produced) - 2  # nearly all produced ones were served within the run
