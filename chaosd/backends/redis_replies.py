"""Redis replies as the daemon reads them: each reply of the monitor's pipeline parsed into a typed record.

A reply that is an error (or missing) parses to None: no news, and the monitor keeps what its last pass read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Heartbeat", "LeaderStats", "Lease", "Pending", "PollReply", "Result", "StageCounter"]

_STAGE_COUNTERS = ("degraded", "successes", "fallback_served")

Entry = tuple[str, dict[str, str]]  # a stream entry: its id and its fields


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
    reason: str  # "" = completed
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
            reason=f.get("o", ""),
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


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A worker's heartbeat hash; ``beating`` is False when its key has expired (the process is gone)."""

    beating: bool
    instance: str | None  # the process behind it
    busy: str  # the task id it serves, "" when idle

    @classmethod
    def from_reply(cls, reply: object) -> Heartbeat | None:
        if isinstance(reply, Exception):
            return None
        if not isinstance(reply, dict) or not reply:
            return cls(False, None, "")
        return cls(True, reply.get("instance"), reply.get("busy", ""))


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
            members=frozenset(members) if isinstance(members, set | list) else None,
            beats=tuple(Heartbeat.from_reply(b) for b in beats),
            written=not any(isinstance(r, Exception) for r in writes),
        )
