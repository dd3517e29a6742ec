"""A call through a dependency's fault proxy joins its caller's trace: the real daemon, a python stage whose handler
sends a W3C ``traceparent`` on half of its calls, an upstream of this test recording the header it receives, and
an OTLP/HTTP receiver on loopback for the daemon's spans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, Daemon, Sink, wait_for
from dependency_handlers import CALLS_VARIABLE, recorded
from recording_upstream import Received, recording_upstream
from test_api_tracing import _spans

pytestmark = pytest.mark.slow


def _strings(array: Any) -> list[str]:
    """An OTLP array attribute's string values."""
    return [v.string_value for v in array.values]


def test_a_relayed_call_is_a_span_in_its_callers_trace_and_the_upstream_gets_its_context(tmp_path: Path) -> None:
    with recording_upstream() as (upstream_port, seen):
        _relayed(tmp_path, upstream_port, seen)


def _relayed(tmp_path: Path, upstream_port: int, seen: list[Received]) -> None:
    config = tmp_path / "chaosd.toml"
    config.write_text(
        f"""
[load]
rate = 20.0
arrival = "constant"
[dependencies.svc]
upstream = "http://127.0.0.1:{upstream_port}/base"
[[stages]]
name = "fetch"
kind = "python"
handler = "dependency_handlers:traced_get"
setup = "dependency_handlers:setup"
teardown = "dependency_handlers:teardown"
dependencies = ["svc"]
service = {{ distribution = "exponential", mean = 0.002 }}
timeout = 2.0
next = []
"""
    )
    sink = Sink()
    calls = tmp_path / "calls.jsonl"
    env = {
        CALLS_VARIABLE: str(calls),
        "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    daemon = Daemon(tmp_path, env=env, config=config)
    try:

        def proxied() -> list[dict[str, Any]]:
            return [s for s in _spans(sink) if s["attributes"].get("chaosd.dependency") == "svc"]

        wait_for(lambda: len(proxied()) >= 10, 30, "spans of relayed calls")
        code, body = daemon.request(
            "POST",
            "/api/v1/faults",
            {"action": "dependency_error", "target": "svc", "ttl": 1, "params": {"status": 503}},
        )
        assert code == 201, body
        wait_for(lambda: any(s["attributes"].get("http.response.status_code") == 503 for s in proxied()), 30, "503s")
        sent = [c for c in recorded(calls) if c["event"] == "call"]
        spans = proxied()
    finally:
        daemon.kill()
        sink.close()

    traced = {c["traceparent"].split("-")[1]: c for c in sent if c["traceparent"]}
    assert traced and len(traced) < len(sent)  # odd tasks sent no header: the control
    assert len(spans) <= len(traced)  # no span for a call without a trace
    for span in spans:
        caller = traced[span["trace_id"]]  # in the caller's own trace ...
        assert span["parent"] == caller["traceparent"].split("-")[2]  # ... a child of its span
        assert span["name"] == "GET svc" and span["kind"] == 3  # SPAN_KIND_CLIENT
        attributes = span["attributes"]
        assert attributes["http.request.method"] == "GET" and attributes["url.path"] == "/base/search"
        assert attributes["server.address"] == "127.0.0.1" and attributes["server.port"] == upstream_port
        assert attributes["http.response.status_code"] == caller["status"]
    faulted = [s for s in spans if s["attributes"]["http.response.status_code"] == 503]
    assert faulted and all(_strings(s["attributes"]["chaosd.faults"]) == ["dependency_error"] for s in faulted)
    assert all(s["attributes"]["error.type"] == "503" for s in faulted)
    assert not any("chaosd.faults" in s["attributes"] for s in spans if s not in faulted)
    # The upstream got the proxy's span as the parent, in the caller's trace (not the caller's span: it is the
    # proxy's child now); and nothing where the caller sent none.
    proxy_span = {s["trace_id"]: s["span_id"] for s in spans}
    headers = [r.headers.get("traceparent") for r in seen]  # what the upstream received, None where none
    received = [h.split("-") for h in headers if h is not None]
    assert received and {trace for _, trace, _, _ in received} <= set(traced)
    assert all(parent == proxy_span[trace] for _, trace, parent, _ in received if trace in proxy_span)
    untraced_served = [c for c in sent if not c["traceparent"] and c["status"] == 200]
    assert sum(h is None for h in headers) >= len(untraced_served) > 0
