"""The per-stage Prometheus series (``chaosd_stage_*``), read at each scrape from every stage's growing counters."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple, cast, get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_go

from chaosd.exporters.buckets import LatencyEdges, latency_edges
from chaosd.pipeline.stages import StageRunner
from chaosd.views import BreakerState, StageFailReason

__all__ = ["BREAKER_LEVELS", "MAX_STAGE_LABELS", "OTHER_STAGES", "StageReading", "StageSeries"]

_REASONS: tuple[StageFailReason, ...] = get_args(StageFailReason)
# chaosd_stage_breaker_state: one gauge per stage, its level the state (alerts compare it with 2 for open).
BREAKER_LEVELS: dict[BreakerState, float] = {"closed": 0.0, "half_open": 1.0, "open": 2.0}
# The stage label's bound: stages past the first 64 of the configuration share one label value.
MAX_STAGE_LABELS = 64
OTHER_STAGES = "_other"
STAGE_ATTEMPTS = ("chaosd_stage_attempts", "Stage attempts (first tries and retries), by stage")
STAGE_FAILURES = ("chaosd_stage_attempt_failures", "Failed stage attempts, by stage and reason")
STAGE_RETRIES = ("chaosd_stage_retries", "Stage attempts that retried a failed one")
STAGE_SECONDS = ("chaosd_stage_attempt_seconds", "Duration of each stage attempt")
STAGE_BREAKER = ("chaosd_stage_breaker_state", "Stage circuit breaker: 0 closed, 1 half-open, 2 open")
STAGE_MOVES = ("chaosd_stage_breaker_transitions", "Stage circuit breaker transitions, by the state entered")
_STAGE_FAMILIES = (
    (*STAGE_ATTEMPTS, "counter"),
    (*STAGE_FAILURES, "counter"),
    (*STAGE_RETRIES, "counter"),
    (*STAGE_SECONDS, "histogram"),
    (*STAGE_BREAKER, "gauge"),
    (*STAGE_MOVES, "counter"),
)


class StageSeries(Collector):
    """The per-stage series, read from each stage's growing counters: the first :data:`MAX_STAGE_LABELS` stages of
    the configuration by name, any beyond folded into ``stage="_other"`` (no breaker series of their own).

    :meth:`collect` yields the families (for ``generate_latest``); :meth:`text` renders the same bytes from label
    strings made once per stage, a few times faster: about 70 lines a stage, most of them histogram buckets, which
    prometheus_client would escape and format one sample at a time at every scrape.
    """

    def __init__(
        self,
        stages: Callable[[], Mapping[str, StageRunner]],
        now: Callable[[], float],
        edges: LatencyEdges | None = None,
    ) -> None:
        self._stages = stages
        self._now = now
        self.edges = edges or latency_edges()
        self._labels: dict[str, _StageLabels] = {}  # one per stage name of the configuration (and _other)

    def _groups(self) -> Iterator[tuple[str, str, list[StageRunner]]]:
        stages = self._stages()
        for name, stage in itertools.islice(stages.items(), MAX_STAGE_LABELS):
            yield name, stage.kind, [stage]
        rest = list(stages.values())[MAX_STAGE_LABELS:]
        if rest:
            yield OTHER_STAGES, OTHER_STAGES, rest

    def read(self) -> list[StageReading]:
        """Every stage's (group's) figures now, for :meth:`families` and :meth:`text` to render later."""
        now = self._now()
        return [
            StageReading(name, kind, _read(group, self.edges), None if name == OTHER_STAGES else group[0].breaker(now))
            for name, kind, group in self._groups()
        ]

    def collect(self) -> Iterator[Metric]:
        return self.families(self.read())

    def families(self, reads: list[StageReading]) -> Iterator[Metric]:
        attempts = CounterMetricFamily(STAGE_ATTEMPTS[0], STAGE_ATTEMPTS[1], labels=["stage", "kind"])
        failures = CounterMetricFamily(STAGE_FAILURES[0], STAGE_FAILURES[1], labels=["stage", "reason"])
        retries = CounterMetricFamily(STAGE_RETRIES[0], STAGE_RETRIES[1], labels=["stage"])
        seconds = HistogramMetricFamily(STAGE_SECONDS[0], STAGE_SECONDS[1], labels=["stage"])
        state = GaugeMetricFamily(STAGE_BREAKER[0], STAGE_BREAKER[1], labels=["stage"])
        moves = CounterMetricFamily(STAGE_MOVES[0], STAGE_MOVES[1], labels=["stage", "to"])
        for name, kind, r, breaker in reads:
            attempts.add_metric([name, kind], float(r.attempts))
            for reason, n in zip(_REASONS, r.failures, strict=True):
                failures.add_metric([name, reason], float(n))
            retries.add_metric([name], float(r.retries))
            buckets = [(edge, float(n)) for edge, n in zip(self.edges.labels, r.cumulative, strict=True)]
            seconds.add_metric([name], [*buckets, ("+Inf", float(r.attempts))], r.seconds)
            if breaker is not None:
                state.add_metric([name], BREAKER_LEVELS[breaker])
            moves.add_metric([name, "open"], float(r.opened))
            moves.add_metric([name, "closed"], float(r.closed))
        yield from (attempts, failures, retries, seconds, state, moves)

    def text(self, reads: list[StageReading] | None = None) -> bytes:
        """The text format of :meth:`families` (of ``reads``, or read now)."""
        parts: dict[str, list[str]] = {name: [_header(name, doc, kind)] for name, doc, kind in _STAGE_FAMILIES}
        for name, kind, r, breaker in self.read() if reads is None else reads:
            labels = self._labels.get(name)
            if labels is None or labels.kind != kind:
                labels = self._labels[name] = _StageLabels(name, kind, self.edges.labels)
            parts[STAGE_ATTEMPTS[0]].append(f"{labels.attempts}{_go(r.attempts)}\n")
            parts[STAGE_FAILURES[0]].extend(
                f"{prefix}{_go(n)}\n" for prefix, n in zip(labels.failures, r.failures, strict=True)
            )
            parts[STAGE_RETRIES[0]].append(f"{labels.retries}{_go(r.retries)}\n")
            seconds = parts[STAGE_SECONDS[0]]
            seconds.extend(f"{prefix}{_go(n)}\n" for prefix, n in zip(labels.buckets, r.cumulative, strict=True))
            seconds.append(f"{labels.inf}{_go(r.attempts)}\n{labels.count}{_go(r.attempts)}\n")
            seconds.append(f"{labels.sum}{floatToGoString(r.seconds)}\n")
            if breaker is not None:
                level = BREAKER_LEVELS[breaker]
                parts[STAGE_BREAKER[0]].append(f"{labels.breaker}{floatToGoString(level)}\n")
            parts[STAGE_MOVES[0]].append(f"{labels.opened}{_go(r.opened)}\n{labels.closed}{_go(r.closed)}\n")
        return "".join(line for lines in parts.values() for line in lines).encode()


@dataclass(frozen=True, slots=True)
class _StageRead:
    attempts: int
    failures: list[int]  # in _REASONS' order
    retries: int
    cumulative: list[int]  # at the exported edges
    seconds: float
    opened: int
    closed: int


class StageReading(NamedTuple):
    """One stage's (or the folded ``_other`` stages') figures as read at one moment."""

    name: str
    kind: str
    read: _StageRead
    breaker: BreakerState | None  # None for _other, which has no breaker series


def _read(group: list[StageRunner], edges: LatencyEdges) -> _StageRead:
    stats = [stage.stats for stage in group]
    for s in stats:
        s.latency.pin(edges.values)
    cumulative = stats[0].latency.pinned()
    for more in stats[1:]:  # the stages past the cap, folded into one
        cumulative = [a + b for a, b in zip(cumulative, more.latency.pinned(), strict=True)]
    return _StageRead(
        attempts=sum(s.latency.count for s in stats),
        failures=[sum(s.failures.get(reason, 0) for s in stats) for reason in _REASONS],
        retries=sum(s.retries for s in stats),
        cumulative=cumulative,
        seconds=sum(s.latency.sum for s in stats),
        opened=sum(s.breaker_opened for s in stats),
        closed=sum(s.breaker_closed for s in stats),
    )


# How prometheus_client writes a sample's value (Go's float formatting); typed here, the library's is not.
floatToGoString = cast(Callable[[float], str], _untyped_go)


def _go(n: int) -> str:
    """A count as prometheus_client writes it (``floatToGoString``): ``12.0``, and exponents from a million on."""
    return f"{n}.0" if 0 <= n < 1_000_000 else floatToGoString(n)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(name: str, doc: str, kind: str) -> str:
    exposed = name + "_total" if kind == "counter" else name
    return f"# HELP {exposed} {doc}\n# TYPE {exposed} {kind}\n"


class _StageLabels:
    """One stage's sample names and labels, formatted once (label names sorted, as prometheus_client writes them)."""

    __slots__ = (
        "attempts",
        "breaker",
        "buckets",
        "closed",
        "count",
        "failures",
        "inf",
        "kind",
        "opened",
        "retries",
        "sum",
    )

    def __init__(self, name: str, kind: str, edges: tuple[str, ...]) -> None:
        stage = f'stage="{_label(name)}"'
        self.kind = kind
        self.attempts = f'{STAGE_ATTEMPTS[0]}_total{{kind="{_label(kind)}",{stage}}} '
        self.failures = [f'{STAGE_FAILURES[0]}_total{{reason="{reason}",{stage}}} ' for reason in _REASONS]
        self.retries = f"{STAGE_RETRIES[0]}_total{{{stage}}} "
        bucket = STAGE_SECONDS[0] + "_bucket"
        self.buckets = [f'{bucket}{{le="{edge}",{stage}}} ' for edge in edges]
        self.inf = f'{bucket}{{le="+Inf",{stage}}} '
        self.count = f"{STAGE_SECONDS[0]}_count{{{stage}}} "
        self.sum = f"{STAGE_SECONDS[0]}_sum{{{stage}}} "
        self.breaker = f"{STAGE_BREAKER[0]}{{{stage}}} "
        self.opened = f'{STAGE_MOVES[0]}_total{{{stage},to="open"}} '
        self.closed = f'{STAGE_MOVES[0]}_total{{{stage},to="closed"}} '
