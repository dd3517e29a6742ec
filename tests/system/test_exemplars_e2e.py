"""Exemplars end to end: a real Prometheus with exemplar storage scrapes two real daemons in OpenMetrics (gzipped,
as it asks), and gives back, through /api/v1/query_exemplars, the trace ids of tasks the traced daemon sampled and
exported over OTLP; the daemon that traces nothing gives none. The formats themselves, over HTTP from the daemon:
the text format has no exemplars, gzip decodes to the same series, promtool passes the text format."""

from __future__ import annotations

import gzip
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import PROMETHEUS, Daemon, Sink, free_port, wait_for
from needs import program
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

program("prometheus")

# What Prometheus 2.42 sends when it scrapes (OpenMetrics first); a plain scraper sends neither header.
OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
SOJOURN = "chaosd_task_sojourn_seconds_bucket"


class Prometheus:
    """Prometheus with exemplar storage, scraping ``targets`` every second as job chaosd; stopped by its PID."""

    def __init__(self, tmp: Path, targets: list[str]) -> None:
        assert PROMETHEUS, "prometheus (Debian package)"
        port = free_port()
        (tmp / "prom.yml").write_text(
            "global:\n  scrape_interval: 1s\n"
            f"scrape_configs:\n  - job_name: chaosd\n    static_configs:\n      - targets: {json.dumps(targets)}\n"
        )
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={tmp / 'prom.yml'}",
                f"--storage.tsdb.path={tmp / 'prom'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params: str) -> Any:
        with urllib.request.urlopen(f"{self.base}/api/v1/{path}?" + urllib.parse.urlencode(params), timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def exemplars(self, query: str) -> list[dict[str, Any]]:
        now = time.time()
        found = self.api("query_exemplars", query=query, start=str(now - 600), end=str(now + 60))
        return [e for series in found for e in series["exemplars"]]

    def targets(self) -> str:
        return json.dumps([(t["scrapeUrl"], t["health"], t["lastError"]) for t in self.api("targets")["activeTargets"]])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("exemplars")
    ports = free_port(), free_port()
    targets = [f"127.0.0.1:{port}" for port in ports]
    prometheus = Prometheus(tmp, targets)  # first: it applies its targets a few seconds after it starts
    otlp = Sink()
    daemons: list[Daemon] = []
    common = {"CHAOSD_LOAD__RATE": "50", "CHAOSD_SLO__P95": "0.25"}
    try:
        (tmp / "traced").mkdir()
        (tmp / "untraced").mkdir()
        traced_env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp.port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "CHAOSD_TRACING__SAMPLE_EVERY": "5",
        }
        daemons.append(Daemon(tmp / "traced", env={**common, **traced_env, "CHAOSD_API__PORT": str(ports[0])}))
        daemons.append(Daemon(tmp / "untraced", env={**common, "CHAOSD_API__PORT": str(ports[1])}))
        yield {"prom": prometheus, "otlp": otlp, "traced": daemons[0], "untraced": daemons[1], "targets": targets}
    finally:
        for daemon in daemons:
            daemon.kill()
        prometheus.close()
        otlp.close()


def _trace_ids(otlp: Sink) -> set[str]:
    """The trace ids of the task spans the daemon exported."""
    ids = set()
    for path, body in list(otlp.bodies):
        if path == "/v1/traces":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for ss in rs.scope_spans:
                    ids |= {s.trace_id.hex() for s in ss.spans if s.name == "task process"}
    return ids


def test_prometheus_reads_back_exemplars_carrying_trace_ids_the_daemon_sampled(stack: dict[str, Any]) -> None:
    prom: Prometheus = stack["prom"]
    traced, untraced = stack["targets"]
    known: list[dict[str, Any]] = []

    def exemplified() -> bool:
        try:
            found = prom.exemplars(f'{SOJOURN}{{instance="{traced}"}}')
        except OSError:
            return False  # Prometheus not listening yet
        sampled = _trace_ids(stack["otlp"])
        known[:] = [e for e in found if e["labels"].get("trace_id") in sampled]
        return len(known) >= 3

    wait_for(exemplified, 60, "exemplars with sampled trace ids", explain=prom.targets)
    assert all(len(e["labels"]["span_id"]) == 16 and float(e["value"]) >= 0 for e in known)
    # The stage histograms carry them too, and the 250 ms objective is an edge Prometheus holds.
    assert prom.exemplars(f'chaosd_stage_attempt_seconds_bucket{{instance="{traced}"}}')
    assert prom.api("query", query=f'{SOJOURN}{{instance="{traced}", le="0.25"}}')["result"]
    # The control: scraped the same way, with tasks completing, the daemon that traces nothing has no exemplar.
    completed = f'chaosd_task_sojourn_seconds_count{{instance="{untraced}"}} > 0'
    wait_for(lambda: bool(prom.api("query", query=completed)["result"]), 30, "the control scraped", prom.targets)
    assert prom.exemplars(f'{{__name__=~"chaosd_.*_bucket", instance="{untraced}"}}') == []


def _get(base: str, headers: dict[str, str]) -> tuple[dict[str, str], bytes]:
    request = urllib.request.Request(base + "/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        return {k.lower(): v for k, v in resp.headers.items()}, resp.read()


def test_the_formats_over_http_text_without_exemplars_gzip_the_same_series(stack: dict[str, Any]) -> None:
    base = stack["traced"].base
    wait_for(lambda: b" # {" in _get(base, {"Accept": OPENMETRICS})[1], 30, "an exemplar in OpenMetrics")
    headers, om = _get(base, {"Accept": OPENMETRICS})
    assert headers["content-type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert om.endswith(b"# EOF\n") and "content-encoding" not in headers
    headers, text = _get(base, {})
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b" # {" not in text and b"# EOF" not in text  # the control: no exemplar in the text format
    headers, packed = _get(base, {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"})
    assert headers["content-encoding"] == "gzip" and len(packed) * 4 < len(om)
    names = {f.name for f in parse_openmetrics(gzip.decompress(packed).decode())}
    assert names == {f.name for f in parse_openmetrics(om.decode())}
    headers, packed = _get(base, {"Accept-Encoding": "gzip"})
    assert {f.name for f in parse_text(gzip.decompress(packed).decode())} == {f.name for f in parse_text(text.decode())}
    check = subprocess.run(
        [program("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
