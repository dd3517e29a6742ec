"""/metrics in both formats: OpenMetrics when asked for (with the traced tasks' exemplars on the latency
histograms), the text format otherwise (no exemplars), the same series in each, gzip decoding to the same, and
OpenMetrics rendered once a tick however often it is scraped."""

from __future__ import annotations

import asyncio
import gzip
import subprocess
from dataclasses import dataclass

import pytest
from needs import program
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.exporters import metrics as metrics_module
from chaosd.exporters.exemplars import OPEN_SPANS
from chaosd.exporters.exposition import EOF, accepts_gzip, negotiate
from chaosd.exporters.metrics import MetricsRegistry, make_registry
from chaosd.exporters.tracing import Tracing

pytestmark = pytest.mark.cpu

# What Prometheus 2.42 sends (scrape/scrape.go): OpenMetrics first, the text format as a fallback.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
EVERY = 5  # one task in five traced
HISTOGRAMS = ("chaosd_task_wait_seconds", "chaosd_task_sojourn_seconds", "chaosd_stage_attempt_seconds")


@dataclass
class Run:
    registry: MetricsRegistry
    traces: set[str]  # the trace ids of the task and stage spans the run finished
    tracing: Tracing


def _run(traced: bool, *, rounds: int = 0) -> Run:
    """3 s of the default pipeline at 300 tasks/s, tasks traced one in five (or not at all), the registry following
    the telemetry tick; ``rounds``: that many OpenMetrics scrapes half-way between two ticks, counted."""
    settings = load_settings(None, {"seed": 5, "load": {"rate": 300.0}})
    loop = new_event_loop(virtual=True)
    clock = LoopClock(loop)
    exp = Experiment(settings, clock, warmup=0.0, virtual=True)
    memory = InMemorySpanExporter()
    processor = SimpleSpanProcessor(memory) if traced else None
    tracing = Tracing(clock, 1_700_000_000.0, EVERY, processor=processor)
    tracing.attach(exp)
    registry = make_registry(exp, tracing.counts)
    registry.follow(exp.telemetry)

    async def plan(e: Experiment) -> None:
        tick = e.settings.telemetry.tick
        for k in range(rounds):
            await e.clock.sleep_until(e.pipeline.t0 + 1.0 + (k + 0.5) * tick)
            for _ in range(10):
                registry.scrape("openmetrics")
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(exp.run(3.0, plan=plan))
    finally:
        loop.close()
    spans = memory.get_finished_spans()
    traces = {f"{s.context.trace_id:032x}" for s in spans if s.name == "task process" or s.name.startswith("stage ")}
    return Run(registry, traces, tracing)


@pytest.fixture(scope="module")
def traced() -> Run:
    return _run(traced=True)


def _families(body: bytes, fmt: str) -> dict[str, Metric]:
    text = body.decode()
    parsed = parse_openmetrics(text) if fmt == "openmetrics" else parse_text(text)
    return {f.name: f for f in parsed}


def _pipeline_samples(families: dict[str, Metric]) -> set[tuple[str, tuple[tuple[str, str], ...], str]]:
    """The experiment's samples (the process's own move between two scrapes), exemplars left out."""
    return {
        (s.name, tuple(sorted(s.labels.items())), repr(s.value))
        for f in families.values()
        if f.name.startswith("chaosd_")
        for s in f.samples
    }


def test_negotiation_serves_openmetrics_only_to_who_asks_for_it() -> None:
    assert negotiate(PROMETHEUS_ACCEPT) == "openmetrics"
    assert negotiate("application/openmetrics-text") == "openmetrics"
    assert negotiate("") == "text"  # no header: as before
    assert negotiate("text/plain;version=0.0.4") == "text"
    assert negotiate("application/openmetrics-text;version=0.0.1") == "text"  # a draft this server does not write
    assert negotiate("text/plain;q=1, application/openmetrics-text;q=0.5") == "text"
    assert negotiate("application/openmetrics-text;q=0") == "text"
    assert accepts_gzip("gzip, deflate") and accepts_gzip("*") and not accepts_gzip("gzip;q=0")
    assert not accepts_gzip("") and not accepts_gzip("identity")


def test_openmetrics_carries_the_traced_tasks_exemplars_and_the_text_format_none(traced: Run) -> None:
    """Each latency histogram has exemplars, at most one a bucket, each inside its bucket and naming a trace the
    run exported (a wait's may be of a task still in service when the run stopped: its span not ended yet); the
    text format of the same tick has the same series and no exemplar."""
    registry = traced.registry
    body = registry.scrape("openmetrics")
    assert body.endswith(EOF) and body.count(b"# EOF") == 1
    om = _families(body, "openmetrics")
    unfinished = 0
    for name in HISTOGRAMS:
        by_series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        previous: dict[tuple[tuple[str, str], ...], float] = {}
        for s in om[name].samples:
            if not s.name.endswith("_bucket"):
                continue
            series = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            upper = float(s.labels["le"])
            if s.exemplar is not None:
                if s.exemplar.labels["trace_id"] not in traced.traces:
                    assert name == "chaosd_task_wait_seconds"
                    unfinished += 1
                assert len(s.exemplar.labels["span_id"]) == 16
                by_series.setdefault(series, []).append((s.exemplar.value, upper))
                assert previous.get(series, -1.0) < s.exemplar.value <= upper  # the first bucket holds 0 too
            previous[series] = upper
        assert by_series, name
    assert unfinished <= 2
    text_body = registry.scrape("text")
    assert b" # {" not in text_body and b"# EOF" not in text_body
    assert _pipeline_samples(_families(text_body, "text")) == _pipeline_samples(om)


def test_without_tracing_there_is_no_exemplar() -> None:
    run = _run(traced=False)
    body = run.registry.scrape("openmetrics")
    assert b" # {" not in body
    om = _families(body, "openmetrics")
    assert all(s.exemplar is None for name in HISTOGRAMS for s in om[name].samples)
    count = [s for s in om["chaosd_task_sojourn_seconds"].samples if s.name.endswith("_count")]
    assert count[0].value > 500  # tasks did complete


def test_gzip_decodes_to_the_same_series_in_both_formats(traced: Run) -> None:
    registry = traced.registry
    for fmt in ("text", "openmetrics"):
        packed = registry.scrape(fmt, gzip=True)  # type: ignore[arg-type]
        plain = registry.scrape(fmt)  # type: ignore[arg-type]
        unpacked = gzip.decompress(packed)
        assert len(packed) * 4 < len(unpacked)
        assert _pipeline_samples(_families(unpacked, fmt)) == _pipeline_samples(_families(plain, fmt))
        assert set(_families(unpacked, fmt)) == set(_families(plain, fmt))


def test_every_counter_ends_in_total_and_promtool_passes_the_text_format(traced: Run) -> None:
    om = _families(traced.registry.scrape("openmetrics"), "openmetrics")
    counters = [f for f in om.values() if f.type == "counter"]
    assert len(counters) > 25
    assert all(s.name.endswith(("_total", "_created")) for f in counters for s in f.samples)
    text = traced.registry.scrape("text")
    typed = [line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE") and "counter" in line]
    assert typed and all(name.endswith("_total") for name in typed)
    check = subprocess.run(
        [program("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_openmetrics_is_rendered_once_a_tick_however_often_scraped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten OpenMetrics scrapes in each of five ticks render the pipeline's series in OpenMetrics once a tick (its
    experiment and its stage series: two renders); the server's and process's own series at each scrape."""
    calls: list[str] = []
    real = metrics_module.render

    def counted(metrics: object, fmt: str) -> bytes:
        calls.append(fmt)
        return real(metrics, fmt)  # type: ignore[arg-type]

    monkeypatch.setattr(metrics_module, "render", counted)
    _run(traced=True, rounds=5)
    assert calls.count("openmetrics") == 5 * (2 + 10) + 1  # + the recoveries', rendered once for the run


def test_exemplars_stay_bounded(traced: Run) -> None:
    store = traced.tracing.exemplars
    assert store is not None
    assert len(store._accepted) <= OPEN_SPANS
    om = _families(traced.registry.scrape("openmetrics"), "openmetrics")
    buckets = [s for s in om["chaosd_task_sojourn_seconds"].samples if s.name.endswith("_bucket")]
    assert sum(s.exemplar is not None for s in buckets) <= len(buckets)
