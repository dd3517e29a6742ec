"""Redis replies as chaosd reads them: each reply of the monitor's pipeline parsed into a typed record, and the
stage document a worker process reads (:class:`StageDocument`).

The ``stage_stats`` hash holds every worker's per-stage figures added up, one key ``STAGE:FIELD`` each
(:class:`StageTotals` says which fields there are); a worker adds only what changed since its last heartbeat.

A reply that is an error (or missing) parses to None: no news, and the monitor keeps what its last pass read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from typing_extensions import TypeIs

from chaosd.faults.proxy import DependencyFaults
from chaosd.views import BreakerState, FailReason

__all__ = [
    "HEARTBEAT_S",
    "Heartbeat",
    "LeaderStats",
    "Lease",
    "Pending",
    "PollReply",
    "Result",
    "StageCounter",
    "StageDocument",
    "StageFlags",
    "StageTotals",
]

HEARTBEAT_S = 0.1  # seconds between a worker process's heartbeats (which also read its control hash)

_STAGE_COUNTERS = ("degraded", "successes", "fallback_served")
# What else each stage adds to ``stage_stats`` besides those: plain counters (``STAGE:retries`` …), failed attempts
# by reason (``STAGE:fail.timeout``), handler exceptions by type (``STAGE:err.ValueError``), the latency
# histogram's buckets that gained samples (``STAGE:b.INDEX``, sparse) and its sum in nanoseconds (``STAGE:lat_ns``:
# an integer, so HINCRBY adds it exactly).
TOTAL_COUNTERS = (
    *_STAGE_COUNTERS, "retries", "breaker_opened", "breaker_closed", "trips", "handler_timeouts",
    "undetected_reads",  # a memory stage's reads of a corrupted entry that no checksum caught
)  # fmt: skip
FAIL_PREFIX = "fail."
ERROR_PREFIX = "err."
BUCKET_PREFIX = "b."
LATENCY_NS = "lat_ns"
_BREAKER_STATES: frozenset[str] = frozenset(get_args(BreakerState))

Entry = tuple[str, dict[str, str]]  # a stream entry: its id and its fields
_FAIL_REASONS = frozenset(get_args(FailReason))


def _is_fail_reason(text: str) -> TypeIs[FailReason]:
    return text in _FAIL_REASONS


def _outcome(text: str) -> FailReason | Literal[""]:
    """A result's ``o`` field: "" for a completion, else why the task failed (a worker writes only those)."""
    if text == "":
        return ""
    if _is_fail_reason(text):
        return text
    raise ValueError(f"a result with an unknown outcome {text!r}")


@dataclass(frozen=True, slots=True)
class Result:
    """One entry of the results stream: an effect the sink applied (or a failure it recorded)."""

    entry: str
    task_id: int
    accepted: float  # Redis time
    started: float
    ended: float
    first_dispatch: bool  # not a re-delivery: its wait counts
    measured: bool
    degraded: bool
    reason: FailReason | Literal[""]  # "" = completed
    worker: str

    @classmethod
    def from_entry(cls, entry: str, f: dict[str, str]) -> Result:
        return cls(
            entry=entry,
            task_id=int(f["i"]),
            accepted=float(f["a"]),
            started=float(f["s"]),
            ended=float(f["e"]),
            first_dispatch=f.get("n") == "0",
            measured=f.get("m") == "1",
            degraded=f.get("d") == "1",
            reason=_outcome(f.get("o", "")),
            worker=f.get("w", ""),
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """The dispatch lease's value: ``agent-id/pid:token``."""

    identity: str  # agent id / pid
    holder: str  # agent id
    token: int

    @classmethod
    def from_reply(cls, reply: object) -> Lease | None:
        if not isinstance(reply, str) or not reply:
            return None
        identity, _, token = reply.rpartition(":")
        return cls(identity, identity.partition("/")[0], int(token) if token.isdigit() else 0)


@dataclass(frozen=True, slots=True)
class LeaderStats:
    """The counters hash the leader and the workers keep; ``raw`` is written back to a Redis that lost it."""

    raw: dict[str, str]
    lease_expired: int
    redispatched: int
    refused_writes: int
    deduplicated: int

    def dropped(self, agent_id: str) -> int:
        return int(self.raw.get(f"dropped:{agent_id}", 0))

    @classmethod
    def from_reply(cls, reply: object) -> LeaderStats | None:
        if not isinstance(reply, dict):
            return None
        return cls(
            raw=reply,
            lease_expired=int(reply.get("lease_expired", 0)),
            redispatched=int(reply.get("redispatched", 0)),
            refused_writes=int(reply.get("refused_writes", 0)),
            deduplicated=int(reply.get("deduplicated", 0)),
        )


@dataclass(frozen=True, slots=True)
class StageCounter:
    """One stage counter the workers add to: ``degraded``, ``successes`` or ``fallback_served``."""

    stage: str
    counter: str
    value: int

    @staticmethod
    def from_reply(reply: dict[str, str]) -> tuple[StageCounter, ...]:
        counters = []
        for key, value in reply.items():
            name, _, counter = key.rpartition(":")
            if counter in _STAGE_COUNTERS:
                counters.append(StageCounter(name, counter, int(value)))
        return tuple(counters)


@dataclass(frozen=True, slots=True)
class StageTotals:
    """One stage's figures in ``stage_stats``: what every worker process did, added up (each only grows)."""

    counters: dict[str, int]  # TOTAL_COUNTERS -> value (absent: 0)
    failures: dict[FailReason, int]
    handler_errors: dict[str, int]  # exception type -> attempts
    buckets: dict[int, int]  # latency bucket index -> samples
    latency_ns: int  # the samples' sum, in nanoseconds

    def counter(self, name: str) -> int:
        return self.counters.get(name, 0)

    @classmethod
    def of(cls, values: Mapping[str, int]) -> StageTotals:
        """From one stage's fields (``retries``, ``fail.timeout``, ``b.12`` …); a field of no known shape (another
        version's) is skipped."""
        counters: dict[str, int] = {}
        failures: dict[FailReason, int] = {}
        errors: dict[str, int] = {}
        buckets: dict[int, int] = {}
        for name, value in values.items():
            if name in TOTAL_COUNTERS:
                counters[name] = value
            elif name.startswith(BUCKET_PREFIX) and name[len(BUCKET_PREFIX) :].isdigit():
                buckets[int(name[len(BUCKET_PREFIX) :])] = value
            elif name.startswith(FAIL_PREFIX):
                reason = name[len(FAIL_PREFIX) :]
                if _is_fail_reason(reason):
                    failures[reason] = value
            elif name.startswith(ERROR_PREFIX):
                errors[name[len(ERROR_PREFIX) :]] = value
        return cls(counters, failures, errors, buckets, values.get(LATENCY_NS, 0))

    @classmethod
    def from_reply(cls, reply: Mapping[str, str]) -> dict[str, StageTotals]:
        """The hash, per stage name (a key is ``STAGE:FIELD``; a value that is not an integer is skipped)."""
        by_stage: dict[str, dict[str, int]] = {}
        for key, text in reply.items():
            stage, _, name = key.rpartition(":")
            if stage and text.lstrip("-").isdigit():
                by_stage.setdefault(stage, {})[name] = int(text)
        return {stage: cls.of(values) for stage, values in by_stage.items()}


@dataclass(frozen=True, slots=True)
class Pending:
    """XPENDING's summary: entries delivered and not acknowledged, in all and per consumer."""

    count: int
    by_consumer: dict[str, int]

    @classmethod
    def from_reply(cls, reply: object) -> Pending | None:
        if not isinstance(reply, dict):
            return None
        by = {str(c["name"]): int(c["pending"]) for c in reply.get("consumers") or ()}
        return cls(int(reply.get("pending", 0)), by)


def _per_stage(text: str) -> dict[str, object]:
    """A heartbeat's per-stage JSON field (``{"stage": value, …}``); what does not parse is read as nothing
    reported (the fields are views, never worth a crash)."""
    try:
        doc = json.loads(text) if text else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _breakers(text: str) -> dict[str, tuple[BreakerState, float]]:
    """A heartbeat's ``breakers`` field: ``{"stage": ["open", seconds left], …}`` for the stages not closed; what
    does not parse is read as every breaker closed."""
    out: dict[str, tuple[BreakerState, float]] = {}
    for stage, value in _per_stage(text).items():
        match value:
            case [str(state), int(left) | float(left)] if state in _BREAKER_STATES and math.isfinite(left):
                out[stage] = (state, max(0.0, float(left)))  # type: ignore[assignment]  # checked in the guard
    return out


def _memory(text: str) -> dict[str, tuple[str, frozenset[int]]]:
    """A heartbeat's ``memory`` field, ``{"stage": [token of the last order seen, entries corrupted, restored], …}``:
    memory stage -> (the last corruption order seen, the entries corrupted in the process now). The restored count
    is for people reading Redis. What does not parse is nothing reported (the daemon waits for a heartbeat that
    says)."""
    out: dict[str, tuple[str, frozenset[int]]] = {}
    for stage, value in _per_stage(text).items():
        match value:
            case [str(token), list(entries), *_] if all(type(i) is int for i in entries):
                out[stage] = (token, frozenset(entries))
    return out


def _mcp(text: str) -> dict[str, tuple[str, bool]]:
    """A heartbeat's ``mcp`` field: MCP stage -> (the last drop order seen, whether the process's connection is up
    now)."""
    out: dict[str, tuple[str, bool]] = {}
    for stage, value in _per_stage(text).items():
        match value:
            case [str(token), bool(up)]:
                out[stage] = (token, up)
    return out


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A worker's heartbeat hash; ``beating`` is False when its key has expired (the process is gone)."""

    beating: bool
    instance: str | None  # the process behind it
    busy: str  # the task id it serves, "" when idle
    breakers: Mapping[str, tuple[BreakerState, float]] = field(default_factory=dict)  # not closed: seconds left
    memory: Mapping[str, tuple[str, frozenset[int]]] = field(default_factory=dict)  # see _memory
    mcp: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # see _mcp
    beat: str = ""  # the beat's number, new at each beat

    @classmethod
    def from_reply(cls, reply: object) -> Heartbeat | None:
        if isinstance(reply, Exception):
            return None
        if not isinstance(reply, dict) or not reply:
            return cls(False, None, "")
        return cls(
            True,
            reply.get("instance"),
            reply.get("busy", ""),
            _breakers(reply.get("breakers", "")),
            _memory(reply.get("memory", "")),
            _mcp(reply.get("mcp", "")),
            reply.get("beat", ""),
        )


def _entries(reply: object) -> list[Entry] | None:
    return reply if isinstance(reply, list) else None


@dataclass(frozen=True, slots=True)
class PollReply:
    """The replies to one monitor pass after the run marker, in the order ``Monitor`` queues the commands."""

    held: frozenset[int] | None  # task ids in the stream (a snapshot pass); None: not read, or not a reply
    results: tuple[tuple[Result, ...], ...] | None  # per stream read; None: not a reply
    drained: bool  # every result there was is in ``results``
    length: int | None  # XLEN: waiting and pending
    pending: Pending | None
    head_ms: int | None  # the first undelivered entry's Redis time; None: nothing waits (or no reply)
    groups: dict[str, str] | None  # consumer group -> its last delivered id
    lease: Lease | None
    stats: LeaderStats | None
    stage_stats: dict[str, str] | None  # raw, written back to a Redis that lost it
    stage_counters: tuple[StageCounter, ...]
    stage_totals: dict[str, StageTotals]  # per stage: every figure the workers add up
    members: frozenset[str] | None
    beats: tuple[Heartbeat | None, ...]
    written: bool  # every control write of the pass succeeded

    @classmethod
    def from_replies(cls, replies: Sequence[object], *, snapshot: bool, workers: int, batch: int) -> PollReply:
        rest = list(replies)
        held: frozenset[int] | None = None
        if snapshot:
            entries = _entries(rest.pop(0))
            if entries is not None:
                held = frozenset(int(fields["i"]) for _, fields in entries if "i" in fields)
        results_reply = rest.pop(0)
        results: tuple[tuple[Result, ...], ...] | None = None
        drained = isinstance(results_reply, list)
        if isinstance(results_reply, list):
            batches = []
            for _, stream_entries in results_reply:
                batches.append(tuple(Result.from_entry(e, f) for e, f in stream_entries))
                drained = len(stream_entries) < batch
            results = tuple(batches)
        length, pending, head, groups, lease, stats, stage_stats, members = rest[:8]
        beats = rest[8 : 8 + workers]
        writes = rest[8 + workers :]
        head_ms = None
        if isinstance(head, list) and head:
            head_ms = int(str(head[0][0]).partition("-")[0])
        return cls(
            held=held,
            results=results,
            drained=drained,
            length=length if isinstance(length, int) else None,
            pending=Pending.from_reply(pending),
            head_ms=head_ms,
            groups=(
                {str(g.get("name")): str(g.get("last-delivered-id")) for g in groups}
                if isinstance(groups, list)
                else None
            ),
            lease=Lease.from_reply(lease),
            stats=LeaderStats.from_reply(stats),
            stage_stats=stage_stats if isinstance(stage_stats, dict) else None,
            stage_counters=StageCounter.from_reply(stage_stats) if isinstance(stage_stats, dict) else (),
            stage_totals=StageTotals.from_reply(stage_stats) if isinstance(stage_stats, dict) else {},
            members=frozenset(members) if isinstance(members, set | list) else None,
            beats=tuple(Heartbeat.from_reply(b) for b in beats),
            written=not any(isinstance(r, Exception) for r in writes),
        )


def _number(value: object) -> float:
    # float() of what the document holds, as float() would take it (a JSON number, or its text); else a TypeError.
    if isinstance(value, int | float | str):
        return float(value)
    raise TypeError(f"not a number: {value!r}")


def _object(value: object, what: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"{what}: not a JSON object: {value!r}")
    return value


def _array(value: object, what: str) -> list[object]:
    if not isinstance(value, list):
        raise TypeError(f"{what}: not a JSON array: {value!r}")
    return value


def _edge(value: object) -> tuple[str, str]:
    # An edge is written as [a, b] (two stage names).
    match value:
        case [str(a), str(b)]:
            return a, b
    raise TypeError(f"removed_edges: not a pair of stage names: {value!r}")


@dataclass(frozen=True, slots=True)
class StageFlags:
    """One stage's faults in the stage document the daemon writes (``RedisControls.stages_doc``)."""

    removed: bool = False
    hang: bool = False
    hang_timeout: float | None = None  # None: not in the document (the stage's own applies)
    llm_down: bool = False
    jitter: float = 0.0
    # dependency -> the faults acting on its calls (``DependencyFaults.as_json``); a dependency not named has none
    dependencies: Mapping[str, DependencyFaults] = field(default_factory=dict)
    corrupt: tuple[str, tuple[int, ...]] | None = None  # memory: the last corruption order (token, entries)
    mcp_drop: tuple[str, float | None, bool] | None = None  # mcp: the last drop (token, outage, server up)

    @classmethod
    def from_json(cls, flags: Mapping[str, object]) -> StageFlags:
        timeout = flags.get("hang_timeout")
        deps = _object(flags.get("dependencies", {}), "dependencies")
        corrupt: tuple[str, tuple[int, ...]] | None = None
        mcp_drop: tuple[str, float | None, bool] | None = None
        match flags.get("corrupt"):
            case None:
                pass
            case [str(token), list(entries)] if all(type(i) is int for i in entries):
                corrupt = (token, tuple(entries))
            case other:
                raise TypeError(f"corrupt: not [token, [entry, ...]]: {other!r}")
        match flags.get("mcp_drop"):
            case None:
                pass
            case [str(token), None, bool(up)]:
                mcp_drop = (token, None, up)
            case [str(token), int(outage) | float(outage), bool(up)]:
                mcp_drop = (token, float(outage), up)
            case other:
                raise TypeError(f"mcp_drop: not [token, outage, up]: {other!r}")
        return cls(
            removed=bool(flags.get("removed", False)),
            hang=bool(flags.get("hang", False)),
            hang_timeout=None if "hang_timeout" not in flags else _number(timeout),
            llm_down=bool(flags.get("llm_down", False)),
            jitter=_number(flags.get("jitter", 0.0)),
            dependencies={
                name: DependencyFaults.from_json(_object(faults, f"dependencies.{name}"))
                for name, faults in deps.items()
            },
            corrupt=corrupt,
            mcp_drop=mcp_drop,
        )


_NO_FLAGS = StageFlags()


@dataclass(frozen=True, slots=True)
class StageDocument:
    """The stage document: each stage's faults by name, and the edges removed from the DAG."""

    stages: dict[str, StageFlags]
    removed_edges: tuple[tuple[str, str], ...]

    def flags(self, stage: str) -> StageFlags:
        """The stage's faults; none for a stage the document does not name."""
        return self.stages.get(stage, _NO_FLAGS)

    @classmethod
    def from_json(cls, text: str) -> StageDocument:
        """Parsed from its JSON text; the empty text (no document) is a document with no faults."""
        doc = _object(json.loads(text), "the stage document") if text else {}
        stages = _object(doc.get("stages", {}), "stages")
        return cls(
            {name: StageFlags.from_json(_object(flags, f"stages.{name}")) for name, flags in stages.items()},
            tuple(_edge(edge) for edge in _array(doc.get("removed_edges", []), "removed_edges")),
        )
