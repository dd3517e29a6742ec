"""Prometheus metrics: a custom collector that reads the live experiment, rendered once per telemetry tick.

Nothing is updated per task: counters come from the ledger, gauges from the latest telemetry
snapshot, latency histograms from the pipeline's own (which count samples at the exported edges too: round numbers
and the configured thresholds, chaosd.exporters.buckets), the HTTP server's series from its own counters, and the
process, platform and GC collectors of prometheus_client. Names and labels: docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Literal, Protocol, get_args

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from chaosd.admission.detector import DetectorState
from chaosd.core.version import __version__
from chaosd.events.log import Event
from chaosd.experiment.runner import Experiment
from chaosd.exporters.buckets import LatencyEdges, latency_buckets, latency_edges
from chaosd.exporters.exemplars import Exemplars
from chaosd.exporters.exposition import EOF, ExemplarOf, Format, deflated, exemplars_of, gzip_joined, openmetrics
from chaosd.exporters.stage_series import StageSeries
from chaosd.exporters.tracing import Tracing
from chaosd.faults import CATALOGUE, FaultRecord
from chaosd.pipeline.ledger import Counts
from chaosd.telemetry.engine import Telemetry
from chaosd.views import AbandonReason, AgentKind, AgentState, FailReason, RefuseReason

__all__ = [
    "REFUSAL_REASONS",
    "ExperimentCollector",
    "MetricsRegistry",
    "ServerRefusal",
    "ServerStats",
    "StorageCollector",
    "make_registry",
]

RECOVERY_HISTOGRAM = "chaosd_fault_recovery_seconds"
RECOVERY_DOC = "Recovery time (mechanism: from injection; service: heal or restore clock)"

# chaosd_tasks_total{outcome}: overlapping counts (offered = accepted + rejected; late ⊂ completed).
OUTCOMES = ("offered", "accepted", "completed", "late", "failed", "rejected")
# chaosd_tasks_ended_total{outcome}: a partition of the attempts that have an outcome (each counted once); wasted:
# completed for a caller that had stopped waiting.
ENDINGS = ("good", "wasted", "late", "degraded", "failed", "rejected")
ABANDON_REASONS: tuple[AbandonReason, ...] = get_args(AbandonReason)
# Label values, in the order their Literals declare them: one list each.
REJECT_REASONS: tuple[RefuseReason, ...] = get_args(RefuseReason)
FAIL_REASONS: tuple[FailReason, ...] = get_args(FailReason)
AGENT_KINDS: tuple[AgentKind, ...] = get_args(AgentKind)
AGENT_STATES: tuple[AgentState, ...] = get_args(AgentState)
GRADES = ("A+", "A", "B", "C", "D", "F")
COMPONENTS = ("availability", "recovery", "recovery_rate", "recovery_speed", "consistency")
# What the API server refuses a connection or request for, before any route (counted in chaosd_api_refused_total).
ServerRefusal = Literal[
    "connection_limit",
    "subscriber_limit",
    "header_too_large",
    "body_too_large",
    "request_timeout",
    "bad_request",
    "unauthorized",
]
REFUSAL_REASONS: tuple[ServerRefusal, ...] = get_args(ServerRefusal)
# Recovery buckets: the E6 preferred numbers (1, 1.5, 2.2, 3.3, 4.7, 6.8 per decade, ≈ ×1.47 and at most ×1.5
# a step) from 10 ms to 10 min. 10 s, the slow-recovery alert's threshold, is an edge.
# fmt: off
RECOVERY_BUCKETS = (
    0.01, 0.015, 0.022, 0.033, 0.047, 0.068,
    0.1, 0.15, 0.22, 0.33, 0.47, 0.68,
    1.0, 1.5, 2.2, 3.3, 4.7, 6.8,
    10.0, 15.0, 22.0, 33.0, 47.0, 68.0,
    100.0, 150.0, 220.0, 330.0, 470.0, 600.0,
)
# fmt: on


class ServerStats(Protocol):
    """The HTTP server's own counters, read at each scrape."""

    @property
    def refused(self) -> Mapping[str, int]:
        """Connections and requests refused, by reason; reasons that never happened may be absent."""
        ...

    @property
    def connections(self) -> int:
        """HTTP connections open now."""
        ...

    @property
    def subscribers(self) -> int:
        """Server-sent event streams open now."""
        ...


class _FaultSeries:
    """Per-action fault counters and recovery histograms, kept up to date from the fault events.

    A scrape reads them as they stand: its cost does not grow with the faults the daemon has injected.
    """

    def __init__(self, exp: Experiment) -> None:
        self._exp = exp
        self.injected: dict[str, int] = dict.fromkeys(CATALOGUE, 0)
        self.failed: dict[str, int] = dict.fromkeys(CATALOGUE, 0)
        keys = [(a, k) for a in CATALOGUE for k in ("mechanism", "service")]
        self.buckets: dict[tuple[str, str], list[int]] = {key: [0] * len(RECOVERY_BUCKETS) for key in keys}
        self.count: dict[tuple[str, str], int] = dict.fromkeys(keys, 0)
        self.sum: dict[tuple[str, str], float] = dict.fromkeys(keys, 0.0)
        self.version = 0  # bumped by every observation: the histograms' text is rendered again only then
        exp.events.subscribe(self.on_event)

    def _observe(self, key: tuple[str, str], value: float) -> None:
        self.version += 1
        counts = self.buckets[key]
        for i, bound in enumerate(RECOVERY_BUCKETS):
            if value <= bound:
                counts[i] += 1
        self.count[key] += 1
        self.sum[key] += value

    def on_event(self, event: Event) -> None:
        if event.kind != "fault":
            return
        data = event.data
        action, state = data.get("action"), data.get("state")
        if not isinstance(action, str) or action not in self.injected:
            return
        if state == "injected":
            self.injected[action] += 1
        elif state == "failed":
            self.failed[action] += 1
        elif state == "recovered" and isinstance(seconds := data.get("recovery_s"), int | float):
            self._observe((action, "service"), float(seconds))  # the fault's own clock: heal or restore
        elif state == "mechanism_recovered":
            record = event.about  # the fault's record, even once it has left the memory window
            if isinstance(record, FaultRecord) and record.mechanism_recovered_at is not None:
                self._observe((action, "mechanism"), record.mechanism_recovered_at - record.injected_at)

    def histogram(self, name: str, doc: str) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=["action", "kind"])
        for key, counts in self.buckets.items():
            buckets = [(repr(b), float(n)) for b, n in zip(RECOVERY_BUCKETS, counts, strict=True)]
            buckets.append(("+Inf", float(self.count[key])))
            family.add_metric(list(key), buckets, self.sum[key])
        return family


class ExperimentCollector(Collector):
    """Collects a fresh view of one experiment (the daemon's) each time Prometheus scrapes."""

    def __init__(
        self,
        experiment: Experiment,
        spans: Callable[[], tuple[int, int]] | None = None,
        *,
        server: ServerStats | None = None,
    ) -> None:
        self.exp = experiment
        self.edges = latency_edges(experiment.settings)
        self.faults = _FaultSeries(experiment)
        self._spans = spans or (lambda: (0, 0))
        self._server = server

    def collect(self) -> Iterator[Metric]:
        yield from self.collect_pipeline()
        yield from self.collect_server()

    def collect_pipeline(self) -> Iterator[Metric]:
        """The experiment's series: everything but the HTTP server's own."""
        exp = self.exp
        yield from _rate_families(exp)
        yield from _ledger_families(exp)
        accounted = exp.accounted()  # one answer serves both uses: the lost tasks and the live score
        yield from _loss_families(exp, accounted, self.edges)
        yield from _detector_families(exp)
        yield from _admission_families(exp)
        yield from _fault_families(exp, self.faults)
        yield from _score_families(exp, accounted)
        yield from _dispatch_families(exp)
        yield _dependency_connections(exp)
        exported, dropped = self._spans()
        yield CounterMetricFamily("chaosd_spans_exported", "Spans handed to the exporter", value=exported)
        yield CounterMetricFamily("chaosd_spans_dropped", "Spans dropped", value=dropped)
        yield _observer_errors(exp)

    def collect_server(self) -> Iterator[Metric]:
        """The HTTP server's series (none without a server): its own counters, not the pipeline's."""
        if self._server is not None:
            yield from _server_families(self._server)


def _rate_families(exp: Experiment) -> Iterator[Metric]:
    """The build, the queue, and the rates of the latest telemetry snapshot (0 before the first)."""
    p = exp.pipeline
    snap = exp.telemetry.latest
    info = GaugeMetricFamily("chaosd_build_info", "chaosd build information", labels=["version"])
    info.add_metric([__version__], 1.0)
    yield info
    yield GaugeMetricFamily("chaosd_queue_depth", "Tasks waiting in the ingress queue", value=p.queue.depth)
    yield GaugeMetricFamily("chaosd_queue_capacity", "Ingress queue capacity", value=p.queue.capacity)
    gauges = {
        "chaosd_queue_growth_rate": ("dQ/dt in tasks per second", "queue_slope"),
        "chaosd_offered_rate": ("Tasks offered per second (lambda)", "arrival_rate"),
        "chaosd_service_rate": ("Tasks per second the workers could serve (mu)", "service_rate"),
        "chaosd_throughput_rate": ("Tasks ending per second", "throughput"),
        "chaosd_goodput_rate": (
            "Completions for callers still waiting, within the deadline, not degraded, per second",
            "goodput",
        ),
        "chaosd_attempt_rate": ("Attempts offered per second, callers' retries and refusals included", "attempt_rate"),
        "chaosd_caller_retry_rate": ("Callers' retries offered per second", "caller_retry_rate"),
        "chaosd_abandon_rate": ("Attempts per second whose caller stopped waiting", "abandon_rate"),
        "chaosd_waste_rate": ("Completions per second for callers that had stopped waiting", "waste_rate"),
        "chaosd_utilisation_ratio": ("Busy share of the workers over the window", "utilisation"),
        # The detector's own window percentiles, for probes that cannot use the histograms' rules.
        "chaosd_sojourn_p95_seconds": ("p95 sojourn of tasks completed in the telemetry window", "sojourn_p95"),
        "chaosd_sojourn_p99_seconds": ("p99 sojourn of tasks completed in the telemetry window", "sojourn_p99"),
    }
    for name, (doc, attr) in gauges.items():
        yield GaugeMetricFamily(name, doc, value=float(getattr(snap, attr)) if snap is not None else 0.0)


def _ledger_families(exp: Experiment) -> Iterator[Metric]:
    """The ledger's task counts: by outcome (overlapping and partitioned), in flight, rejected and failed by reason."""
    p = exp.pipeline
    total = p.ledger.total
    tasks = CounterMetricFamily(
        "chaosd_tasks", "Tasks by outcome, overlapping (offered = accepted + rejected)", labels=["outcome"]
    )
    for outcome in OUTCOMES:
        tasks.add_metric([outcome], float(getattr(total, outcome)))
    yield tasks
    ended = CounterMetricFamily(
        "chaosd_tasks_ended",
        "Attempts by their one outcome (good, wasted, late, degraded, failed, rejected): these add up",
        labels=["outcome"],
    )
    ending = {
        "good": p.ledger.good,
        "wasted": total.wasted,
        "late": total.late,
        "degraded": total.degraded,
        "failed": total.failed,
        "rejected": total.rejected,
    }
    for outcome in ENDINGS:
        ended.add_metric([outcome], float(ending[outcome]))
    yield ended
    yield GaugeMetricFamily(
        "chaosd_tasks_in_flight",
        "Accepted tasks without an outcome yet (lost ones included)",
        value=len(p.ledger.in_flight),
    )
    yield CounterMetricFamily(
        "chaosd_worker_busy_seconds",
        "Worker-seconds spent serving tasks (the integral of the busy workers)",
        value=p.busy.area_at(p.clock.now()),
    )
    rejected = CounterMetricFamily("chaosd_tasks_rejected", "Tasks refused at admission", labels=["reason"])
    for reason in sorted({*REJECT_REASONS, *total.rejected_by}):
        rejected.add_metric([reason], float(total.rejected_by.get(reason, 0)))
    yield rejected
    failed = CounterMetricFamily("chaosd_tasks_failed", "Tasks that failed", labels=["reason"])
    for why in sorted({*FAIL_REASONS, *total.failed_by}):
        failed.add_metric([why], float(total.failed_by.get(why, 0)))
    yield failed
    yield from _caller_families(total)


def _caller_families(total: Counts) -> Iterator[Metric]:
    """The callers' side: attempts by kind, attempts abandoned by reason, callers that gave up."""
    attempts = CounterMetricFamily(
        "chaosd_attempts", "Attempts offered, refused ones included, by kind (first = callers)", labels=["kind"]
    )
    attempts.add_metric(["first"], float(total.offered))
    attempts.add_metric(["retry"], float(total.retried))
    yield attempts
    abandoned = CounterMetricFamily(
        "chaosd_abandoned", "Attempts whose caller stopped waiting, by reason (timeout, patience)", labels=["reason"]
    )
    for why in ABANDON_REASONS:
        abandoned.add_metric([why], float(total.abandoned_by.get(why, 0)))
    yield abandoned
    yield CounterMetricFamily(
        "chaosd_callers_gave_up", "Callers out of retries or retry budget, or out of patience", value=total.gave_up
    )


def _loss_families(exp: Experiment, accounted: tuple[int, int, int], edges: LatencyEdges) -> Iterator[Metric]:
    """Tasks lost, duplicated or deduplicated, and the wait and sojourn histograms."""
    p = exp.pipeline
    yield GaugeMetricFamily("chaosd_tasks_lost", "Accepted tasks nobody holds", value=accounted[0])
    yield CounterMetricFamily("chaosd_tasks_duplicated", "Duplicate effects at the sink", value=p.audit.total.count)
    yield CounterMetricFamily(
        "chaosd_tasks_deduplicated", "Second outcomes suppressed by the sink", value=p.ledger.deduplicated
    )
    for name, hist, doc in (
        ("chaosd_task_wait_seconds", p.wait, "Accepted to service start"),
        ("chaosd_task_sojourn_seconds", p.sojourn, "Accepted to completion"),
    ):
        family = HistogramMetricFamily(name, doc)
        family.add_metric([], latency_buckets(hist, edges), hist.sum)
        yield family


def _detector_families(exp: Experiment) -> Iterator[Metric]:
    """The collapse detector's state (one-hot, and a flag per alarm) and its alarm counts."""
    state = exp.detector.state
    yield GaugeMetricFamily(
        "chaosd_collapse_state", "1 while collapsed", value=1.0 if state is DetectorState.COLLAPSED else 0.0
    )
    one_hot = GaugeMetricFamily("chaosd_detector_state", "Collapse detector state", labels=["state"])
    for s in DetectorState:
        one_hot.add_metric([s.value], 1.0 if s is state else 0.0)
    yield one_hot
    yield GaugeMetricFamily(
        "chaosd_metastable_state",
        "1 while in a retry storm (callers retrying, their attempts mostly wasted)",
        value=1.0 if state is DetectorState.METASTABLE else 0.0,
    )
    yield GaugeMetricFamily(
        "chaosd_overload_state",
        "1 while overloaded (more offered than served)",
        value=1.0 if state is DetectorState.OVERLOAD else 0.0,
    )
    yield GaugeMetricFamily(
        "chaosd_failing_state",
        "1 while failing (tasks end failed, late or degraded while the queue is short)",
        value=1.0 if state is DetectorState.FAILING else 0.0,
    )
    detector = exp.detector
    yield CounterMetricFamily("chaosd_collapses", "Alarms that collapsed", value=detector.collapse_count)
    yield CounterMetricFamily("chaosd_failing_episodes", "Alarms that were failing", value=detector.failing_count)
    yield CounterMetricFamily(
        "chaosd_overloads", "Alarms raised (overload, collapse or failing)", value=detector.episode_count
    )
    yield CounterMetricFamily("chaosd_stalls", "Times the process was seen paused", value=detector.stall_count)


def _admission_families(exp: Experiment) -> Iterator[Metric]:
    """Admission control: its policy, factor and limit, and the capacity and shedding it sees."""
    snap = exp.telemetry.latest
    throttle = exp.throttle
    policy = InfoMetricFamily("chaosd_admission", "Admission control policy")
    policy.add_metric([], {"policy": throttle.policy})
    yield policy
    yield GaugeMetricFamily("chaosd_throttle_factor", "Share of the offered load aimd admits", value=throttle.factor)
    yield GaugeMetricFamily(
        "chaosd_admission_limit",
        "Tasks admission control lets wait (the queue capacity when none)",
        value=throttle.limit,
    )
    yield GaugeMetricFamily(
        "chaosd_capacity_rate",
        "Tasks per second the workers able to work can serve, measured (able workers / busy s per task)",
        value=snap.capacity_rate if snap is not None else 0.0,
    )
    yield GaugeMetricFamily(
        "chaosd_shed_rate",
        "Tasks per second refused over the admission limit or by a full queue",
        value=snap.shed_rate if snap is not None else 0.0,
    )


def _fault_families(exp: Experiment, series: _FaultSeries) -> Iterator[Metric]:
    """Faults by action (injected, active, failed), the safety lever, and the incidents nobody injected."""
    injected = CounterMetricFamily("chaosd_faults_injected", "Faults injected", labels=["action"])
    active = GaugeMetricFamily("chaosd_faults_active", "Faults active", labels=["action"])
    failed_faults = CounterMetricFamily("chaosd_faults_failed", "Faults not recovered in time", labels=["action"])
    active_now = [f.action for f in exp.injector.active()]  # the faults in play: a handful, not the history
    for action in CATALOGUE:
        injected.add_metric([action], float(series.injected[action]))
        active.add_metric([action], float(active_now.count(action)))
        failed_faults.add_metric([action], float(series.failed[action]))
    yield injected
    yield active
    yield failed_faults
    yield GaugeMetricFamily(
        "chaosd_safety_lever", "1 while the lever is pulled", value=1.0 if exp.injector.lever else 0.0
    )
    unplanned = CounterMetricFamily(
        "chaosd_unplanned_incidents", "Incidents nobody injected, judged, by outcome", labels=["outcome"]
    )
    for outcome, n in exp.injector.book.unplanned.items():
        unplanned.add_metric([outcome], float(n))
    yield unplanned
    yield GaugeMetricFamily(
        "chaosd_unplanned_incident_open",
        "1 while an incident nobody injected is open (the service left its steady state with no fault)",
        value=1.0 if exp.injector.unplanned_open else 0.0,
    )


def _score_families(exp: Experiment, accounted: tuple[int, int, int]) -> Iterator[Metric]:
    """The live resilience score, its components and its grade (one-hot)."""
    score = exp.live_score(accounted)
    # A dimension with nothing measured yet (warm-up, no judged fault) is NaN: no alert compares true on it.
    score_total = math.nan if score.total is None else score.total
    yield GaugeMetricFamily("chaosd_resilience_score", "Resilience score, 0-100 (NaN: not measured)", value=score_total)
    components = GaugeMetricFamily(
        "chaosd_resilience_score_component", "Score components, 0-100 (NaN: not measured)", labels=["component"]
    )
    for component in COMPONENTS:
        value = getattr(score, component)
        components.add_metric([component], math.nan if value is None else float(value))
    yield components
    grade = GaugeMetricFamily("chaosd_resilience_grade", "Current grade (one-hot)", labels=["grade"])
    for g in GRADES:
        grade.add_metric([g], 1.0 if g == score.grade else 0.0)
    yield grade


def _dispatch_families(exp: Experiment) -> Iterator[Metric]:
    """Agents by kind and state, the dispatch lease and its elections, re-dispatches and resurrections."""
    p = exp.pipeline
    agents = GaugeMetricFamily("chaosd_agents", "Agents by kind and state", labels=["kind", "state"])
    counts = {(k, s): 0 for k in AGENT_KINDS for s in AGENT_STATES}
    for agent in p.agents.values():
        counts[(agent.kind, agent.state)] += 1
    for (kind, agent_state), n in counts.items():
        agents.add_metric([kind, agent_state], float(n))
    yield agents
    leader = p.dispatcher.leader_id
    yield GaugeMetricFamily(
        "chaosd_leader_present", "1 while a replica holds the dispatch lease", value=leader is not None
    )
    holder = GaugeMetricFamily("chaosd_leader", "The replica holding the dispatch lease (one-hot)", labels=["replica"])
    for replica in p.dispatcher.replicas:  # bounded: orchestrator.replicas (at most 99)
        holder.add_metric([replica.id], 1.0 if replica.id == leader else 0.0)
    yield holder
    yield CounterMetricFamily("chaosd_leader_elections", "Elections won", value=p.dispatcher.elections)
    yield CounterMetricFamily("chaosd_redispatched", "Tasks re-dispatched", value=p.dispatcher.redispatched)
    yield CounterMetricFamily("chaosd_supervisor_restarts", "Agents resurrected", value=p.supervisor.restarts)


def _dependency_connections(exp: Experiment) -> Metric:
    """Client connections open at each dependency's fault proxy (bounded per proxy: each holds an open file)."""
    family = GaugeMetricFamily(
        "chaosd_dependency_connections",
        "Client connections open at a dependency's fault proxy",
        labels=["stage", "dependency"],
    )
    for stage_name, stage in exp.pipeline.stages.items():
        for name, proxy in stage.proxies.items():
            family.add_metric([stage_name, name], float(proxy.connections))
    return family


def _observer_errors(exp: Experiment) -> Metric:
    """Errors raised by the event subscribers and telemetry listeners, by name (every subscriber listed)."""
    observers = exp.events.observers
    errors = CounterMetricFamily(
        "chaosd_observer_errors",
        "Errors raised by event subscribers and telemetry listeners (logged once, never fatal)",
        labels=["observer"],
    )
    for name in sorted({*observers.errors, *exp.events.subscriber_names}):
        errors.add_metric([name], float(observers.errors.get(name, 0)))
    return errors


class StorageHealth(Protocol):
    """What the storage collector reads from the history store (chaosd.daemon.storage.Storage)."""

    @property
    def errors_by_op(self) -> Mapping[str, int]:
        """Failed writes by operation; every operation is present, at 0 until one fails."""
        ...

    @property
    def problem(self) -> str | None:
        """Why it does not take writes now, or None."""
        ...


class StorageCollector(Collector):
    """The history store's health: errors by operation, and whether it takes writes now."""

    def __init__(self, storage: StorageHealth) -> None:
        self.storage = storage

    def collect(self) -> Iterator[Metric]:
        storage = self.storage
        errors = CounterMetricFamily(
            "chaosd_storage_errors", "Writes to the history store that failed, by operation", labels=["op"]
        )
        for op, count in sorted(dict(storage.errors_by_op).items()):  # a fixed set of ops (chaosd.daemon.storage.OPS)
            errors.add_metric([op], float(count))
        yield errors
        yield GaugeMetricFamily(
            "chaosd_storage_up",
            "1 while the history store takes writes (last write committed, file still in place)",
            value=0.0 if storage.problem is not None else 1.0,
        )


def _server_families(server: ServerStats) -> Iterator[Metric]:
    by_reason = dict(server.refused)  # read once: the labels listed and their values come from one mapping
    refused = CounterMetricFamily(
        "chaosd_api_refused", "Connections and requests refused by the HTTP server, by reason", labels=["reason"]
    )
    for reason in sorted({*REFUSAL_REASONS, *by_reason}):
        refused.add_metric([reason], float(by_reason.get(reason, 0)))
    yield refused
    yield GaugeMetricFamily("chaosd_api_connections", "HTTP connections open", value=server.connections)
    yield GaugeMetricFamily("chaosd_api_sse_subscribers", "Server-sent event streams open", value=server.subscribers)


class _RecoveryHistograms(Collector):
    """The per-action recovery histograms: 34 series of 30 buckets, about 1,100 of a scrape's 1,400 samples,
    that change only when a fault recovers."""

    def __init__(self, series: _FaultSeries) -> None:
        self.series = series

    def collect(self) -> Iterator[Metric]:
        yield self.series.histogram(RECOVERY_HISTOGRAM, RECOVERY_DOC)


class _Some(Collector):
    def __init__(self, collectors: list[Collector]) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


class _Families(Collector):
    def __init__(self, families: Callable[[], Iterator[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return self._families()


class _Tick:
    """The pipeline's series as rendered at one moment in the text format, OpenMetrics made from those bytes on first
    use (so both formats carry the same values), and each format's deflate on the first gzip scrape."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self._registry = registry
        experiment, stages = registry.experiment, registry.stages
        families = list(experiment.collect_pipeline()) if experiment is not None else []
        self._infos = {f.name for f in families if f.type == "info"}
        head = generate_latest(_Families(lambda: iter(families)))
        self._stages = stages.text() if stages is not None else b""
        self.parts: dict[Format, tuple[bytes, bytes]] = {"text": (head, self._stages + registry.recovery_text())}
        self._packed: dict[Format, tuple[bytes, bytes]] = {}

    def body(self, fmt: Format) -> tuple[bytes, bytes]:
        """The experiment's series (head), then the stages' and the recoveries' (tail, after the process's)."""
        if fmt not in self.parts:
            registry = self._registry
            head = self.parts["text"][0]
            marks = registry.exemplar_of()
            tail = openmetrics(self._stages, marks) + registry.recovery_text("openmetrics") + EOF
            self.parts[fmt] = openmetrics(head, marks, self._infos), tail
        return self.parts[fmt]

    def packed(self, fmt: Format) -> tuple[bytes, bytes]:
        if fmt not in self._packed:
            head, tail = self.body(fmt)
            self._packed[fmt] = deflated(head, last=False), deflated(tail, last=True)
        return self._packed[fmt]


class MetricsRegistry(CollectorRegistry):
    """The daemon's registry. :meth:`scrape` is what ``GET /metrics`` serves; :meth:`exposition` renders it afresh.

    Once it follows a telemetry tick (:meth:`follow`, as the daemon does), the series read from the pipeline (the
    experiment's, the stages', the recoveries') are read once a tick, after the tick's detector, throttle and
    injector, and rendered in the text format then: a scrape reads only the HTTP server's and the process's own
    series, whatever the pipeline is doing. OpenMetrics (with the exemplars) is made from that text, and a format's
    gzip from its bytes, at the first scrape of a tick that asks for them. Without a tick to follow, each scrape reads
    everything. The recovery histograms' text is kept until a fault recovers (formatting them would be most of a
    render's cost). ``generate_latest(registry)`` still renders the same series.
    """

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self._order: list[Collector] = []
        self.experiment: ExperimentCollector | None = None
        self.recovery: _RecoveryHistograms | None = None
        self.stages: StageSeries | None = None
        self.exemplars: Callable[[], Exemplars | None] = lambda: None
        self.renders = 0  # readings of the pipeline's series: one a tick when following, one a scrape when not
        self._kept: dict[Format, tuple[int, bytes]] = {}
        self._ticked: _Tick | None = None  # the pipeline's series of the last tick (None: not following)
        self._due: asyncio.Handle | None = None  # the render after the current tick, until it has run

    def register(self, collector: Collector) -> None:
        super().register(collector)
        self._order.append(collector)

    def unregister(self, collector: Collector) -> None:
        super().unregister(collector)
        self._order.remove(collector)

    def exposition(self, fmt: Format = "text") -> bytes:
        """Everything, rendered now."""
        head, tail = self._pipeline().body(fmt)
        return head + self._own(fmt) + tail

    def scrape(self, fmt: Format = "text", *, gzip: bool = False) -> bytes:
        """What ``GET /metrics`` serves: the pipeline's series as read at the last tick (read now before the
        first), with the HTTP server's and the process's series as they are now; :meth:`exposition` when not
        following a tick. ``gzip``: one gzip member, of which only the server's and process's part is compressed
        now."""
        tick = self._ticked if self._ticked is not None else self._pipeline()
        head, tail = tick.body(fmt)
        own = self._own(fmt)
        if not gzip:
            return head + own + tail
        packed_head, packed_tail = tick.packed(fmt)
        return gzip_joined([(head, packed_head), (own, deflated(own, last=False)), (tail, packed_tail)])

    def follow(self, telemetry: Telemetry) -> None:
        """From now on, read the pipeline's series once per tick of ``telemetry``, and serve those.

        The render is called soon after the telemetry listeners, so it runs once the tick's handlers (detector,
        throttle, injector) are done with the same snapshot. One that raises is counted as observer ``metrics``;
        the previous tick's series are served meanwhile.
        """
        self._ticked = self._pipeline()
        render = telemetry.pipeline.events.observers.guard(self._render_tick, "metrics")

        def ticked(_: object) -> None:
            if self._due is None:
                self._due = asyncio.get_running_loop().call_soon(render, None)

        telemetry.listen(ticked, "metrics")

    def _render_tick(self, _: object) -> None:
        self._due = None
        self._ticked = self._pipeline()

    def _pipeline(self) -> _Tick:
        self.renders += 1
        return _Tick(self)

    def recovery_text(self, fmt: Format = "text") -> bytes:
        """The recovery histograms, rendered (and converted to OpenMetrics) again only once a fault has recovered
        since."""
        recovery = self.recovery
        if recovery is None:
            return b""
        version = recovery.series.version
        kept = self._kept.get(fmt)
        if kept is None or kept[0] != version:
            text = self.recovery_text() if fmt == "openmetrics" else generate_latest(recovery)
            kept = self._kept[fmt] = (version, text if fmt == "text" else openmetrics(text))
        return kept[1]

    def exemplar_of(self) -> ExemplarOf | None:
        """Where OpenMetrics finds the latency histograms' exemplars: None when no task is traced."""
        store = self.exemplars()
        return None if store is None else exemplars_of(store)

    def _own(self, fmt: Format) -> bytes:
        """The HTTP server's series and every other collector's (process, platform, GC, storage), rendered now."""
        experiment = self.experiment
        pipeline: list[Collector] = [c for c in (experiment, self.recovery, self.stages) if c is not None]
        others = [c for c in self._order if c not in pipeline]
        if experiment is not None:
            others.insert(0, _Families(experiment.collect_server))
        families = list(_Some(others).collect())
        text = generate_latest(_Families(lambda: iter(families)))
        return text if fmt == "text" else openmetrics(text, None, {f.name for f in families if f.type == "info"})


def _traced(experiment: Experiment) -> Exemplars | None:
    """The exemplars of the daemon's tracing, found where Tracing.attach put it (the workers' tracer), whichever of
    the registry and the tracing was made first; None when tasks are not traced."""
    for worker in experiment.pipeline.workers:
        if isinstance(worker.tracer, Tracing):
            return worker.tracer.exemplars
    return None


def make_registry(
    experiment: Experiment,
    spans: Callable[[], tuple[int, int]] | None = None,
    *,
    server: ServerStats | None = None,
) -> MetricsRegistry:
    """A registry of its own (not the global one): this experiment's collector, the HTTP server's series
    when ``server`` is given, and the daemon process's own (process, platform and garbage collector)."""
    registry = MetricsRegistry()
    collector = ExperimentCollector(experiment, spans, server=server)
    registry.register(collector)
    registry.experiment = collector
    registry.recovery = _RecoveryHistograms(collector.faults)
    registry.register(registry.recovery)
    pipeline = experiment.pipeline
    edges = collector.edges
    for hist in (pipeline.wait, pipeline.sojourn, *(stage.stats.latency for stage in pipeline.stages.values())):
        hist.pin(edges.values)  # before the first task, so every sample is counted at the exported edges exactly
    registry.stages = StageSeries(lambda: pipeline.stages, pipeline.clock.now, edges)
    registry.register(registry.stages)
    registry.exemplars = lambda: _traced(experiment)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
