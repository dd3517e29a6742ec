"""An API request joins its caller's trace (W3C ``traceparent``): the real daemon exports, over OTLP/HTTP to a
receiver on loopback, a server span whose parent is the caller's span, with HTTP's stable attributes and the
package's ``service.version``; its JSON log lines written while serving carry the same trace and span ids. And the
daemon's ``--log-level`` and ``--log-format`` do what they say."""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import ROOT, TOKEN, Daemon, Sink, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from chaosd.core.version import __version__

HEADER_SECRET = "otlp-key-" + secrets.token_hex(8)
TEXT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR) ")


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _spans(sink: Sink) -> list[dict[str, Any]]:
    """Every exported span with its ids as hex, its attributes' values and its resource's."""
    out = []
    for path, body in list(sink.bodies):
        if path != "/v1/traces":
            continue
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    out.append(
                        {
                            "name": span.name,
                            "kind": span.kind,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex(),
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "resource": resource,
                        }
                    )
    return out


def _by_agent(sink: Sink, agent: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def seen() -> bool:
        found[:] = [s for s in _spans(sink) if s["attributes"].get("user_agent.original") == agent]
        return bool(found)

    wait_for(seen, 20, f"the server span of the request sent as {agent}")
    assert len(found) == 1, found
    return found[0]


def _json_lines(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.startswith("{")]


def _malformed_request(d: Daemon) -> None:
    """Bytes that are no HTTP request: aiohttp refuses them before any handler (an info line, no span)."""
    host, port = d.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert b" 400 " in s.recv(4096).split(b"\r\n", 1)[0]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, Sink]]:
    sink = Sink()
    env: dict[str, str | None] = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.port}",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=api-tracing-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # honoured: spans reach the receiver within a tenth of a second
        "CHAOSD_TRACING__SAMPLE_EVERY": "1000000",  # the API's spans, hardly any task's
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={HEADER_SECRET}",
        "CHAOSD_LOG__LEVEL": "debug",  # every record there is: none may carry a secret
    }
    d = Daemon(tmp_path_factory.mktemp("traced"), env=env, args=("--log-format", "json"))
    try:
        yield d, sink
    finally:
        d.kill()
        sink.close()


def test_a_request_with_a_traceparent_is_served_in_the_callers_trace(traced: tuple[Daemon, Sink]) -> None:
    d, sink = traced
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"traceparent": f"00-{trace_id}-{parent}-01", "User-Agent": "probe-joined"}
    code, _ = d.request("GET", "/api/v1/faults", headers=headers)
    assert code == 200
    span = _by_agent(sink, "probe-joined")
    assert (span["trace_id"], span["parent"]) == (trace_id, parent)
    assert span["name"] == "GET /api/v1/faults" and span["kind"] == 2  # SPAN_KIND_SERVER
    port = int(d.base.rsplit(":", 1)[1])
    assert 0 < span["attributes"].pop("network.peer.port") < 65536 and span["attributes"] == {
        "http.request.method": "GET",
        "url.path": "/api/v1/faults",
        "url.scheme": "http",
        "http.route": "/api/v1/faults",
        "http.response.status_code": 200,
        "network.protocol.version": "1.1",
        "server.address": "127.0.0.1",
        "server.port": port,
        "client.address": "127.0.0.1",
        "network.peer.address": "127.0.0.1",
        "user_agent.original": "probe-joined",
    }
    resource = span["resource"]
    assert resource["service.name"] == "chaosd" and resource["service.version"] == __version__
    assert resource["deployment.environment.name"] == "api-tracing-test"  # OTEL_RESOURCE_ATTRIBUTES


def test_without_a_traceparent_or_with_a_malformed_one_the_request_starts_a_trace(traced: tuple[Daemon, Sink]) -> None:
    d, sink = traced
    malformed = f"00-{'z' * 32}-{secrets.token_hex(8)}-01"  # not hex: no parent, but the request is served
    assert d.request("GET", "/api/v1/faults", headers={"User-Agent": "probe-none"})[0] == 200
    assert d.request("GET", "/api/v1/faults", headers={"User-Agent": "probe-bad", "traceparent": malformed})[0] == 200
    roots = [_by_agent(sink, agent) for agent in ("probe-none", "probe-bad")]
    assert [r["parent"] for r in roots] == ["", ""]
    assert len({r["trace_id"] for r in roots}) == 2 and "z" * 32 not in {r["trace_id"] for r in roots}


def test_a_json_log_line_written_while_serving_carries_the_requests_trace(traced: tuple[Daemon, Sink]) -> None:
    d, sink = traced
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    wrong = "wrong-token-" + secrets.token_hex(8)
    headers = {"traceparent": f"00-{trace_id}-{parent}-01", "User-Agent": "probe-refused"}
    # Neither the Authorization header nor a query string is recorded: both carry a secret here.
    code, _ = d.request("POST", "/api/v1/lever", {"reason": "x"}, token=wrong, headers=headers)
    assert code == 401
    code, _ = d.request("GET", f"/api/v1/faults?key={wrong}", headers={"User-Agent": "probe-query"})
    assert code in (400, 422)
    assert _by_agent(sink, "probe-query")["attributes"]["url.path"] == "/api/v1/faults"
    d.wait_line("missing or wrong bearer token")
    _malformed_request(d)  # an info line written outside any request's span
    d.wait_line("malformed HTTP request")
    span = _by_agent(sink, "probe-refused")
    assert span["trace_id"] == trace_id and span["attributes"]["http.response.status_code"] == 401
    lines = d.drain()
    records = _json_lines(lines)
    (refused,) = [r for r in records if "missing or wrong bearer token" in r["message"]]
    assert refused["level"] == "warning" and refused["logger"] == "chaosd"
    assert (refused["trace_id"], refused["span_id"]) == (trace_id, span["span_id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", refused["time"])
    (outside,) = [r for r in records if "malformed HTTP request" in r["message"]]
    assert outside["level"] == "info" and "trace_id" not in outside  # no span current: no ids
    assert not [line for line in lines if TEXT_LOG_LINE.match(line)]  # every log record is JSON
    exported = b"".join(body for _, body in sink.bodies)
    for secret in (wrong, TOKEN, HEADER_SECRET):
        assert secret not in "\n".join(lines) and secret.encode() not in exported


def test_log_level_warning_drops_the_info_lines(tmp_path: Path) -> None:
    # The flag beats the configuration's debug, which would show every line.
    d = Daemon(tmp_path, env={"CHAOSD_LOG__LEVEL": "debug"}, args=("--log-level", "warning"))
    try:
        _malformed_request(d)  # an info line at the default level (the JSON daemon above shows it)
        assert d.request("POST", "/api/v1/lever", {"reason": "x"}, token="not-the-token")[0] == 401
        d.wait_line("missing or wrong bearer token")  # written after the info line would have been
        lines = d.drain()
        assert [line for line in lines if TEXT_LOG_LINE.match(line) and " WARNING chaosd: refused POST" in line]
        assert not [line for line in lines if "malformed HTTP request" in line]
    finally:
        d.kill()


def test_a_daemon_given_an_otel_variable_it_cannot_use_exits_2_naming_it(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_TRACES_SAMPLER": "sometimes",
        "CHAOSD_API__PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "chaosd"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "chaosd: error: environment: OTEL_TRACES_SAMPLER: one of always_on" in done.stderr
    assert "listening on" not in done.stdout  # refused before anything started


def test_a_request_no_route_matched_is_named_by_its_method_alone(traced: tuple[Daemon, Sink]) -> None:
    d, sink = traced
    assert d.request("GET", "/api/v1/no-such-thing", headers={"User-Agent": "probe-404"})[0] == 404
    code, answer = d.request("PROPFIND", "/api/v1/faults", headers={"User-Agent": "probe-propfind"})
    assert code == 405, answer
    missing, brewed = _by_agent(sink, "probe-404"), _by_agent(sink, "probe-propfind")
    assert missing["name"] == "GET" and "http.route" not in missing["attributes"]  # a path is not a route
    assert missing["attributes"]["http.response.status_code"] == 404 and "error.type" not in missing["attributes"]
    assert brewed["name"] == "HTTP" and brewed["attributes"]["http.request.method"] == "_OTHER"
    assert brewed["attributes"]["http.request.method_original"] == "PROPFIND"
