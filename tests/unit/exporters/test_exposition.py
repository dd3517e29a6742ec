"""/metrics in both formats: OpenMetrics when asked for (with the traced tasks' exemplars on the latency
histograms), the text format otherwise (no exemplars), the same series in each, gzip decoding to the same, and
OpenMetrics rendered once a tick however often it is scraped."""

from __future__ import annotations

import asyncio
import gzip
import subprocess
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import cast

import pytest
from needs import program
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text
from prometheus_client.registry import Collector

from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.exporters import metrics as metrics_module
from chaosd.exporters.exemplars import OPEN_SPANS
from chaosd.exporters.exposition import EOF, ExemplarOf, accepts_gzip, exemplars_of, negotiate, openmetrics
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
    assert not [f.name for f in om.values() if f.type != "counter" and f.name.endswith("_total")]  # no gauge so named
    text = traced.registry.scrape("text")
    typed = [line.split()[2] for line in text.decode().splitlines() if line.startswith("# TYPE") and "counter" in line]
    assert typed and all(name.endswith("_total") for name in typed)
    check = subprocess.run(
        [program("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_openmetrics_is_rendered_once_a_tick_however_often_scraped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten OpenMetrics scrapes in each of five ticks convert the tick's series once a tick (the experiment's and the
    stages': two conversions); only the server's and process's own series are converted at each scrape."""
    calls: list[bool] = []  # whether each conversion was of the tick's series (those carry the exemplars)
    real = metrics_module.openmetrics

    def counted(text: bytes, exemplar_of: ExemplarOf | None = None, infos: Collection[str] = ()) -> bytes:
        calls.append(exemplar_of is not None)
        return real(text, exemplar_of, infos)

    monkeypatch.setattr(metrics_module, "openmetrics", counted)
    _run(traced=True, rounds=5)
    assert calls.count(True) == 5 * 2
    assert calls.count(False) == 5 * 10 + 1  # and the recovery histograms', converted once: no fault recovered


def test_the_openmetrics_made_from_the_text_format_is_the_librarys_byte_for_byte(traced: Run) -> None:
    """Families of the daemon's registry (the pipeline's, the stages', the recoveries', the process's), rendered
    by prometheus_client in both formats: the text format converted is its OpenMetrics, exemplars included."""
    store = traced.tracing.exemplars
    assert store is not None
    of = exemplars_of(store)
    families = list(traced.registry.collect())
    marked = []
    for family in families:
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            if sample.name.endswith("_bucket") and family.name in HISTOGRAMS:
                sample = sample._replace(exemplar=of(family.name, sample.labels))  # noqa: PLW2901
            copy.samples.append(sample)
        marked.append(copy)
    text = generate_latest(_Listed(families))
    library = cast(Callable[[Collector], bytes], generate_openmetrics)
    infos = {f.name for f in families if f.type == "info"}
    assert infos == {"chaosd_admission"}
    assert openmetrics(text, None, infos) + EOF == library(_Listed(families))
    with_exemplars = library(_Listed(marked))
    assert with_exemplars.count(b" # {") > 20
    assert openmetrics(text, of, infos) + EOF == with_exemplars
    assert openmetrics(text, of) + EOF != with_exemplars  # the control: an info family left as a gauge


class _Listed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def test_exemplars_stay_bounded(traced: Run) -> None:
    store = traced.tracing.exemplars
    assert store is not None
    assert len(store._accepted) <= OPEN_SPANS
    om = _families(traced.registry.scrape("openmetrics"), "openmetrics")
    buckets = [s for s in om["chaosd_task_sojourn_seconds"].samples if s.name.endswith("_bucket")]
    assert sum(s.exemplar is not None for s in buckets) <= len(buckets)
