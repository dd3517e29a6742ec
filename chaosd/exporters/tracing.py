"""OpenTelemetry traces: a span per fault (injection → recovery), sampled task spans, API request spans.

Configured by the standard ``OTEL_*`` variables; with no OTLP endpoint there is no exporter and no
cost. Sampling happens in chaosd (one task in ``every``, by id) before the tracer is touched; a Redis worker
process continues a sampled task's trace from the ``traceparent`` its stream entry carries. Span
times come from the run's clock. Spans beyond the export queue are dropped and counted, never block.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from chaosd.config.settings import StageKind
from chaosd.core.clock import Clock, unix_time, wall_time
from chaosd.core.errors import ConfigError
from chaosd.events.log import Event, fault_data
from chaosd.experiment.runner import Experiment
from chaosd.exporters.exemplars import Exemplars
from chaosd.exporters.otel_env import GRPC_EXTRA, QUEUE, queue_limits, read_otel_env, resource
from chaosd.faults import Injector
from chaosd.pipeline.stages import Degraded
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskEnd, parse_traceparent, traceparent
from chaosd.views import FailReason

__all__ = ["HTTP_METHODS", "Tracing", "otlp_exporter_from_env", "process_tracing"]

# The methods HTTP defines; any other is named `_OTHER` in a span, as the semantic conventions say.
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"))

log = logging.getLogger("chaosd.tracing")


def otlp_exporter_from_env(env: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The OTLP exporter the standard variables ask for (http/protobuf unless grpc), or None when they ask for
    none (no endpoint, ``OTEL_SDK_DISABLED``, ``OTEL_TRACES_EXPORTER=none``). A variable that cannot be used is a
    ConfigError naming it. The gRPC exporter is imported only when asked for: it is an extra."""
    otel = read_otel_env(os.environ if env is None else env)
    if not otel.exporting:
        return None
    if otel.protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter as Grpc,
            )
        except ImportError as exc:
            why = f"grpc needs the gRPC exporter, not installed here ({exc.name or exc}): pip install '{GRPC_EXTRA}'"
            raise ConfigError([("environment", otel.protocol_from, f"{why}, or use http/protobuf")]) from None
        return Grpc()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http  # noqa: PLC0415

    return Http()


def process_tracing(sample_every: int) -> Callable[[Clock], Tracing | None]:
    """A worker process's tracing on its own clock (the standard ``OTEL_*`` variables, as the daemon's, whose
    environment it inherits), or None when no endpoint is configured."""

    def make(clock: Clock) -> Tracing | None:
        tracing = Tracing(clock, unix_time() - clock.now(), sample_every, otlp_exporter_from_env())
        return tracing if tracing.enabled else None

    return make


class _Counting(SpanExporter):
    def __init__(self, inner: SpanExporter, owner: Tracing) -> None:
        self._inner = inner
        self._owner = owner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter's failure is a number and a log line, never an exception in the app
            log.exception("span export failed")
            result = SpanExportResult.FAILURE
        self._owner._settle(len(spans), exported=result is SpanExportResult.SUCCESS)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _Gate(SpanProcessor):
    """Counts spans into the batch queue; beyond its size they are dropped here, counted, not queued."""

    def __init__(self, inner: SpanProcessor, owner: Tracing) -> None:
        self._inner = inner
        self._owner = owner

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self._owner._admit():
            self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class Tracing:
    """Owns the tracer provider (or nothing, when no endpoint is configured)."""

    def __init__(
        self,
        clock: Clock,
        epoch_offset: float,
        sample_every: int,
        exporter: SpanExporter | None = None,
        *,
        processor: SpanProcessor | None = None,
        stall_after: float = 300.0,
        wall: Callable[[], float] = wall_time,
    ) -> None:
        # Written by the loop thread (_Gate.on_end) and the batch processor's worker (_Counting.export).
        self._lock = threading.Lock()
        self.exported = 0
        self.dropped = 0
        self.in_queue = 0
        self.failed_in_a_row = 0  # export calls that failed since the last one that worked
        # The exporter's heartbeat: when it last finished an export, or when the queue last went from
        # empty to waiting. Spans waiting longer than ``stall_after`` with no export means it has stopped
        # (OTLP's own retries give up well within the default 300 s).
        self._wall = wall
        self._stall_after = stall_after
        self._progress_at = wall()
        self.every = max(1, sample_every)
        self._clock = clock
        self._offset = epoch_offset  # clock seconds + offset = Unix seconds
        self._fault_spans: dict[int, trace.Span] = {}
        self._injector: Injector | None = None
        self._queue = QUEUE
        # The metrics' exemplars (chaosd.exporters.exemplars): the sampled tasks' latencies with their trace ids.
        self.exemplars: Exemplars | None = None
        if processor is None and exporter is None:
            self.enabled = False
            self.provider: TracerProvider | None = None
            self.tracer: trace.Tracer = trace.NoOpTracer()
            return
        self.enabled = True
        # No exit hook: the SDK's would flush at interpreter exit with no bound; close() flushes, bounded.
        # Which process sent a span: a task's trace on Redis has spans from the daemon and from a worker process.
        # The sampler (OTEL_TRACES_SAMPLER) and span limits (OTEL_SPAN_*, OTEL_ATTRIBUTE_*) are the SDK's own.
        where: dict[str, str | int] = {
            "process.pid": os.getpid(),
            "service.instance.id": f"{socket.gethostname()}-{os.getpid()}",
        }
        self.provider = TracerProvider(resource=resource(where), shutdown_on_exit=False)
        if processor is not None:
            self.provider.add_span_processor(processor)  # a caller's processor (tests): no queue to guard
        else:
            assert exporter is not None
            self._queue, per_export = queue_limits(os.environ)
            # The SDK's queue is twice the gate's, so a span is dropped here, counted, never silently there.
            batch = BatchSpanProcessor(
                _Counting(exporter, self), max_queue_size=self._queue * 2, max_export_batch_size=per_export
            )
            self.provider.add_span_processor(_Gate(batch, self))
        self.tracer = self.provider.get_tracer("chaosd")

    def ns(self, t: float) -> int:
        return int((t + self._offset) * 1e9)

    def now_ns(self) -> int:
        return self.ns(self._clock.now())

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.exported, self.dropped

    def _admit(self) -> bool:
        """Take a place in the export queue for one span, or count it dropped when the queue is full."""
        with self._lock:
            if self.in_queue >= self._queue:
                self.dropped += 1
                return False
            if self.in_queue == 0:
                self._progress_at = self._wall()
            self.in_queue += 1
            return True

    def _settle(self, n: int, *, exported: bool) -> None:
        """n queued spans have left the queue, handed to the exporter or lost with it."""
        with self._lock:
            if exported:
                self.exported += n
                self.failed_in_a_row = 0
            else:
                self.dropped += n
                self.failed_in_a_row += 1
            self.in_queue -= n
            self._progress_at = self._wall()

    def stalled(self) -> str | None:
        """Why the exporter is considered dead (spans wait, nothing exported for too long), or None."""
        with self._lock:
            waiting, since = self.in_queue, self._wall() - self._progress_at
        if self.enabled and waiting > 0 and since > self._stall_after:
            return f"tracing: {waiting} spans waiting and no export for {since:.0f} s; the exporter has stopped"
        return None

    def failing(self) -> str | None:
        """Exports that keep failing (the collector is down or refuses): not ready, but nothing to restart."""
        failed = self.failed_in_a_row
        return f"tracing: the last {failed} span exports failed" if failed >= 3 else None

    def attach(self, experiment: Experiment) -> None:
        """Trace this experiment: its sampled tasks and every fault (a no-op when disabled)."""
        if not self.enabled:
            return
        pipeline = experiment.pipeline
        for worker in pipeline.workers:
            worker.tracer = self
        for producer in pipeline.producers:
            producer.tracer = self
        pipeline.callers.tracer = self
        pipeline.call_tracer = CallSpans(self)
        self.exemplars = Exemplars.of(experiment.settings)
        self.watch_faults(experiment.injector, pipeline.t0)
        experiment.events.subscribe(self.on_event)

    # --- faults ---------------------------------------------------------------------------------

    def watch_faults(self, injector: Injector, t0: float) -> None:
        self._injector = injector
        self._t0 = t0

    def on_event(self, event: Event) -> None:
        data = fault_data(event)
        if not self.enabled or data is None or self._injector is None:
            return
        fault_id = data["id"]
        state = data["state"]
        at = self.ns(self._t0 + event.t)
        if state == "injected":
            record = self._injector.get(fault_id)
            span = self.tracer.start_span(
                f"fault {record.action}",
                start_time=at,
                attributes={
                    "chaosd.fault.id": fault_id,
                    "chaosd.fault.action": record.action,
                    "chaosd.fault.target": record.target,
                    "chaosd.fault.targets": list(record.targets),
                    "chaosd.fault.ttl_s": record.ttl,
                },
            )
            self._fault_spans[fault_id] = span
            return
        open_span = self._fault_spans.get(fault_id)
        if open_span is None:
            return
        # The rest of its fields (by, recovery_s): scalars, or None for a recovery with no time of its own.
        attributes: dict[str, AttributeValue] = {
            k: v
            for k, v in data.items()
            if k not in ("id", "action", "state", "targets") and isinstance(v, str | int | float | None)
        }
        open_span.add_event(state, attributes=attributes, timestamp=at)
        if state in ("recovered", "failed"):
            if state == "failed":
                open_span.set_status(Status(StatusCode.ERROR, "service did not recover within the limit"))
            open_span.end(end_time=at)
            del self._fault_spans[fault_id]

    def close(self, timeout: float | None = None) -> bool:
        """End the open fault spans and shut the provider down, flushing what is queued; False when that did
        not finish within ``timeout`` seconds (None: no bound). The flush runs on a daemon thread, so an
        exporter stuck on a collector that never answers is left behind, not waited for at exit."""
        end = self.ns(self._clock.now())
        for span in self._fault_spans.values():
            span.add_event("daemon stopped", timestamp=end)
            span.end(end_time=end)
        self._fault_spans.clear()
        provider = self.provider
        if provider is None:
            return True
        done = threading.Event()

        def shut_down() -> None:
            try:
                provider.shutdown()
            except Exception:  # an exporter's failure at shutdown is a log line, like its failures before
                log.exception("tracing shutdown failed")
            finally:
                done.set()

        threading.Thread(target=shut_down, name="chaosd-tracing-shutdown", daemon=True).start()
        if done.wait(timeout):
            return True
        with self._lock:
            waiting = self.in_queue
        log.warning("tracing: the exporter did not finish within %.1f s; %d span(s) not exported", timeout, waiting)
        return False

    # --- tasks (TaskTracer) -----------------------------------------------------------------------

    def produced(self, task: Task, producer: str, at: float) -> SpanContext:
        span = self.tracer.start_span(
            "task produce",
            kind=SpanKind.PRODUCER,
            start_time=self.ns(at),
            attributes={"chaosd.task.id": task.id, "chaosd.producer": producer},
        )
        span.end(end_time=self.ns(at))
        return span.get_span_context()

    def retried(self, task: Task, first: object, attempt: int, at: float) -> SpanContext:
        """A caller's retry: its own produce span, linked to the caller's first attempt (``first``, the context
        :meth:`produced` gave it), so a trace backend shows every attempt one caller made."""
        links = [Link(first, {"chaosd.link": "first_attempt"})] if isinstance(first, SpanContext) else []
        span = self.tracer.start_span(
            "task retry",
            kind=SpanKind.PRODUCER,
            start_time=self.ns(at),
            links=links,
            attributes={"chaosd.task.id": task.id, "chaosd.attempt": attempt},
        )
        span.end(end_time=self.ns(at))
        return span.get_span_context()

    def continued(self, header: str) -> SpanContext | None:
        ids = parse_traceparent(header)
        if ids is None or not ids[2] & TraceFlags.SAMPLED:
            return None
        return SpanContext(ids[0], ids[1], is_remote=True, trace_flags=TraceFlags(ids[2]))

    def started(self, task: Task, worker: str, at: float) -> Span:
        trace_context = task.trace if isinstance(task.trace, SpanContext) else None  # produced() gave it, or None
        # Another process's producer (continued()): a child in its trace. This process's own: a link to it.
        parent = None
        links = []
        if trace_context is not None and trace_context.is_remote:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(trace_context))
        elif trace_context is not None:
            links = [Link(trace_context)]
        attributes: dict[str, AttributeValue] = {"chaosd.task.id": task.id, "chaosd.worker": worker}
        if self._injector is not None:
            active = self._injector.active()
            if active:
                attributes["chaosd.fault.ids"] = [f.id for f in active]
                attributes["chaosd.fault.actions"] = [f.action for f in active]
        span = self.tracer.start_span(
            "task process",
            context=parent,
            kind=SpanKind.CONSUMER,
            start_time=self.ns(at),
            links=links,
            attributes=attributes,
        )
        if self.exemplars is not None:
            ids = span.get_span_context()
            first = task.attempts == 1
            self.exemplars.started(ids.span_id, ids.trace_id, task.accepted_at, at, at + self._offset, first=first)
        return span

    def stage(
        self, handle: object, name: str, kind: StageKind, start: float, end: float, reason: FailReason | Degraded | None
    ) -> None:
        context = trace.set_span_in_context(_span(handle))
        span = self.tracer.start_span(
            f"stage {name}", context=context, start_time=self.ns(start), attributes={"chaosd.stage.kind": kind}
        )
        if reason is not None:
            span.set_status(Status(StatusCode.ERROR, reason))
        span.end(end_time=self.ns(end))
        if self.exemplars is not None:
            ids = span.get_span_context()
            self.exemplars.observe(f"stage:{name}", end - start, ids.trace_id, ids.span_id, end + self._offset)

    def ended(self, handle: object, at: float, outcome: TaskEnd) -> None:
        span = _span(handle)
        span.set_attribute("chaosd.task.outcome", outcome)
        if outcome not in ("completed",):
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=self.ns(at))
        if self.exemplars is not None:
            ids = span.get_span_context()
            done = outcome == "completed"
            self.exemplars.ended(ids.span_id, ids.trace_id, at, at + self._offset, completed=done)


def _span(handle: object) -> Span:
    """The task's span, as :meth:`Tracing.started` returned it and the pipeline hands it back (opaque to it)."""
    if not isinstance(handle, Span):
        raise TypeError(f"not a span: {handle!r}")
    return handle


class CallSpans:
    """The dependency proxies' spans (chaosd.faults.call_tracing): one per relayed call whose caller sends a sampled
    ``traceparent``, a CLIENT span in the caller's trace with the stable HTTP attributes and the faults that acted."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    def call_started(self, header: str, dependency: str, method: str, path: str, host: str, port: int) -> object | None:
        parsed = parse_traceparent(header.strip().lower())
        if parsed is None or not parsed[2] & 1:  # malformed, or the caller's trace is not sampled
            return None
        trace_id, span_id, flags = parsed
        caller = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))
        attributes: dict[str, AttributeValue] = {
            "http.request.method": method if method in HTTP_METHODS else "_OTHER",
            "url.path": path,
            "server.address": host,
            "server.port": port,
            "chaosd.dependency": dependency,
        }
        tracing = self._tracing
        return tracing.tracer.start_span(
            f"{method if method in HTTP_METHODS else 'HTTP'} {dependency}",
            context=trace.set_span_in_context(trace.NonRecordingSpan(caller)),
            kind=SpanKind.CLIENT,
            start_time=tracing.now_ns(),
            attributes=attributes,
        )

    def call_header(self, handle: object) -> str:
        assert isinstance(handle, SdkSpan)
        header = traceparent(handle.get_span_context())
        assert header is not None  # a span this tracer started has valid ids
        return header

    def call_ended(self, handle: object, status: int | None, faults: tuple[str, ...], error: str | None) -> None:
        assert isinstance(handle, SdkSpan)
        if status is not None:
            handle.set_attribute("http.response.status_code", status)
        if faults:
            handle.set_attribute("chaosd.faults", list(faults))
        failed = error or (str(status) if status is not None and status >= 500 else None)
        if status is None and error is None:
            failed = "no_response"  # a reset, or a hang the client gave up on: it was answered nothing
        if failed is not None:
            handle.set_attribute("error.type", failed)
            handle.set_status(Status(StatusCode.ERROR))
        handle.end(end_time=self._tracing.now_ns())
